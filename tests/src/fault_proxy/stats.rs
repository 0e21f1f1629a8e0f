//! The proxy's counters, per `X-Amz-Target`.

use std::collections::BTreeMap;

/// Counters of one `X-Amz-Target` value. Always `requests == passed + injected_total()`; the
/// emulator saw `forwarded` of them (`passed` plus the faults that forward).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TargetStats {
    /// Calls received from the client (each retry counts again).
    pub requests: u64,
    /// Calls forwarded untouched (no fault picked them).
    pub passed: u64,
    /// Faults applied, by [`Fault::label`](super::Fault::label) (the error shape for errors).
    pub injected: BTreeMap<String, u64>,
    /// Calls sent to the emulator: untouched ones and those of forwarding faults.
    pub forwarded: u64,
    /// The emulator's answers by HTTP status.
    pub upstream_status: BTreeMap<u16, u64>,
    /// Forwarded calls the emulator did not answer (connection failed); the client got a 502 unless
    /// a fault had already decided its answer.
    pub upstream_failures: u64,
}

impl TargetStats {
    pub fn injected_total(&self) -> u64 {
        self.injected.values().sum()
    }

    /// Faults with this label (an error shape, or `"delay"`, ...).
    pub fn injected(&self, label: &str) -> u64 {
        self.injected.get(label).copied().unwrap_or(0)
    }

    fn add(&mut self, other: &TargetStats) {
        self.requests += other.requests;
        self.passed += other.passed;
        self.forwarded += other.forwarded;
        self.upstream_failures += other.upstream_failures;
        for (label, n) in &other.injected {
            *self.injected.entry(label.clone()).or_default() += n;
        }
        for (status, n) in &other.upstream_status {
            *self.upstream_status.entry(*status).or_default() += n;
        }
    }
}

/// A copy of the proxy's counters, keyed by `X-Amz-Target` (empty for calls without one).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub targets: BTreeMap<String, TargetStats>,
}

impl StatsSnapshot {
    /// The counters of exactly this target (zero if it was never called).
    pub fn target(&self, target: &str) -> TargetStats {
        self.targets.get(target).cloned().unwrap_or_default()
    }

    /// The counters of all targets starting with `prefix`, summed (`""` sums everything).
    pub fn matching(&self, prefix: &str) -> TargetStats {
        let mut sum = TargetStats::default();
        for stats in self.targets.iter().filter(|(t, _)| t.starts_with(prefix)).map(|(_, s)| s) {
            sum.add(stats);
        }
        sum
    }

    /// All targets summed.
    pub fn total(&self) -> TargetStats {
        self.matching("")
    }
}
