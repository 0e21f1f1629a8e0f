//! Per-shard read pacing. Kinesis allows each shard 5 GetRecords calls per
//! second and 2 MB/s of reads (shared by every consumer of the shard); going
//! over earns ProvisionedThroughputExceeded. So a reader spaces its calls
//! at least 200 ms apart, and after a big page waits long enough for the
//! bytes to fit in 2 MB/s. When a shard is idle (an empty page at the tip)
//! it backs off further, up to `idle_max`, to leave the budget to others.

use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy)]
pub struct ReadLimits {
    /// GetRecords calls per second per shard.
    pub calls_per_sec: f64,
    /// Bytes per second per shard.
    pub bytes_per_sec: f64,
    /// Longest wait between calls on an idle shard.
    pub idle_max: Duration,
}

impl Default for ReadLimits {
    fn default() -> Self {
        ReadLimits { calls_per_sec: 5.0, bytes_per_sec: 2.0 * 1024.0 * 1024.0, idle_max: Duration::from_secs(1) }
    }
}

/// When the next GetRecords of one shard may go out.
#[derive(Debug)]
pub struct Pacer {
    limits: ReadLimits,
    next: Option<Instant>,
    idle_streak: u32,
}

impl Pacer {
    pub fn new(limits: ReadLimits) -> Self {
        Pacer { limits, next: None, idle_streak: 0 }
    }

    /// How long to wait now before the next call.
    pub fn wait(&self, now: Instant) -> Duration {
        self.next.map(|t| t.saturating_duration_since(now)).unwrap_or(Duration::ZERO)
    }

    /// Records a call made at `at` that returned `bytes` bytes (`empty`:
    /// no records) and schedules the next one.
    pub fn completed(&mut self, at: Instant, bytes: usize, empty: bool) {
        let call_gap = Duration::from_secs_f64(1.0 / self.limits.calls_per_sec);
        let byte_gap = Duration::from_secs_f64(bytes as f64 / self.limits.bytes_per_sec);
        let mut gap = call_gap.max(byte_gap);
        if empty {
            self.idle_streak = self.idle_streak.saturating_add(1);
            // 200 ms, 400 ms, 800 ms, … up to idle_max.
            let idle = call_gap.saturating_mul(1 << self.idle_streak.min(10).saturating_sub(1));
            gap = gap.max(idle.min(self.limits.idle_max));
        } else {
            self.idle_streak = 0;
        }
        self.next = Some(at + gap);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_spaced_by_count_and_bytes() {
        let mut p = Pacer::new(ReadLimits::default());
        let t0 = Instant::now();
        assert_eq!(p.wait(t0), Duration::ZERO);
        p.completed(t0, 1000, false);
        assert_eq!(p.wait(t0), Duration::from_millis(200), "5 calls/s");
        // A 4 MB page uses two seconds of the 2 MB/s budget.
        p.completed(t0, 4 * 1024 * 1024, false);
        assert_eq!(p.wait(t0), Duration::from_secs(2));
        assert_eq!(p.wait(t0 + Duration::from_secs(3)), Duration::ZERO);
    }

    #[test]
    fn idle_shards_back_off_up_to_the_cap_and_recover_at_once() {
        let mut p = Pacer::new(ReadLimits::default());
        let t0 = Instant::now();
        let waits: Vec<u128> = (0..6)
            .map(|_| {
                p.completed(t0, 0, true);
                p.wait(t0).as_millis()
            })
            .collect();
        assert_eq!(waits, [200, 400, 800, 1000, 1000, 1000]);
        p.completed(t0, 10, false);
        assert_eq!(p.wait(t0), Duration::from_millis(200));
    }
}
