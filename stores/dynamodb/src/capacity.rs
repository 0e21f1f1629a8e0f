//! Consumed capacity, as DynamoDB reports it (`ReturnConsumedCapacity =
//! TOTAL` on every call): totals per table for the run's summary, and
//! Prometheus counters for dashboards.

use std::sync::atomic::{AtomicU64, Ordering};

/// Capacity is counted in millionths of a unit so that atomics can add it.
const MICRO: f64 = 1e6;

#[derive(Debug, Default)]
pub struct CapacityMeter {
    read_micro: AtomicU64,
    write_micro: AtomicU64,
    requests: AtomicU64,
    retryable_errors: AtomicU64,
    /// BatchWriteItem calls re-sent for unprocessed items (the store's one
    /// retry loop; see the crate docs).
    pub(crate) retried: AtomicU64,
}

/// Totals so far.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Capacity {
    pub read_units: f64,
    pub write_units: f64,
    pub requests: u64,
    /// Calls that failed with throttling, a timeout or a 5xx.
    pub retryable_errors: u64,
    /// BatchWriteItem calls the store re-sent for unprocessed items.
    pub retried_unprocessed: u64,
}

#[derive(Debug, Clone, Copy)]
pub enum Kind {
    Read,
    Write,
}

impl CapacityMeter {
    pub fn record(&self, table: &str, kind: Kind, units: Option<f64>) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let units = units.unwrap_or(0.0).max(0.0);
        let micro = (units * MICRO).round() as u64;
        let (counter, label) = match kind {
            Kind::Read => (&self.read_micro, "read"),
            Kind::Write => (&self.write_micro, "write"),
        };
        counter.fetch_add(micro, Ordering::Relaxed);
        metrics::counter!("zigzag_dynamodb_requests_total", "table" => table.to_string(), "kind" => label).increment(1);
        metrics::counter!("zigzag_dynamodb_consumed_capacity_micro_total", "table" => table.to_string(), "kind" => label)
            .increment(micro);
    }

    pub fn record_retryable(&self, table: &str, class: &'static str) {
        self.retryable_errors.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("zigzag_dynamodb_retryable_errors_total", "table" => table.to_string(), "class" => class)
            .increment(1);
    }

    pub fn snapshot(&self) -> Capacity {
        Capacity {
            read_units: self.read_micro.load(Ordering::Relaxed) as f64 / MICRO,
            write_units: self.write_micro.load(Ordering::Relaxed) as f64 / MICRO,
            requests: self.requests.load(Ordering::Relaxed),
            retryable_errors: self.retryable_errors.load(Ordering::Relaxed),
            retried_unprocessed: self.retried.load(Ordering::Relaxed),
        }
    }
}
