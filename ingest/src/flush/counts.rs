//! What the flusher counts (all flushes): the run summary's and
//! `/metrics`' write figures.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of everything the flusher did (all flushes).
#[derive(Debug, Default)]
pub struct FlushStats {
    pub flushes: AtomicU64,
    pub items: AtomicU64,
    pub write_requests: AtomicU64,
    /// Write units the item writes bill on DynamoDB: one per started KB of
    /// the item written (`Item::size`; a merge only grows an item, so the
    /// new item is the larger of the two DynamoDB bills by).
    pub item_write_units: AtomicU64,
    /// The largest item written, in bytes.
    pub largest_item: AtomicU64,
    /// Writes found already applied (replays after a crash).
    pub skipped: AtomicU64,
    /// Item and statistics writes sent again after a retryable failure.
    pub retries: AtomicU64,
    /// Write requests per scatter prefix.
    pub per_prefix: Vec<AtomicU64>,
    /// Of `write_requests`, the planner's statistics (`statistics.rs`).
    pub statistics_writes: AtomicU64,
    /// Of `write_requests`, the change marks around items (`changes.rs`).
    pub change_writes: AtomicU64,
    /// Of `write_requests`, the value catalog (`values.rs`).
    pub value_writes: AtomicU64,
}

impl FlushStats {
    /// Adds what `other` counted (a recovery written by another flusher:
    /// `pipeline/older.rs`).
    pub fn absorb(&self, other: &FlushStats) {
        let add = |a: &AtomicU64, b: &AtomicU64| {
            a.fetch_add(b.load(Ordering::Relaxed), Ordering::Relaxed);
        };
        add(&self.flushes, &other.flushes);
        add(&self.items, &other.items);
        add(&self.write_requests, &other.write_requests);
        add(&self.item_write_units, &other.item_write_units);
        self.largest_item.fetch_max(other.largest_item.load(Ordering::Relaxed), Ordering::Relaxed);
        add(&self.skipped, &other.skipped);
        add(&self.retries, &other.retries);
        for (a, b) in self.per_prefix.iter().zip(&other.per_prefix) {
            add(a, b);
        }
        add(&self.statistics_writes, &other.statistics_writes);
        add(&self.change_writes, &other.change_writes);
        add(&self.value_writes, &other.value_writes);
    }
}
