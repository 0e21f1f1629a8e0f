//! What a worker counts as it runs, and what is told from it: the run
//! summary, and readiness (`/ready`).

use super::Pipeline;
use crate::aggregate::BatchCounts;
use crate::source::RecordBatch;
use crate::RunSummary;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

#[derive(Default)]
pub(super) struct Counters {
    pub(super) records: AtomicU64,
    pub(super) valid: AtomicU64,
    pub(super) rejected: AtomicU64,
    pub(super) headers: AtomicU64,
    pub(super) max_keys_seen: AtomicU64,
    pub(super) recovered: AtomicU64,
    pub(super) flush_pauses: AtomicU64,
    pub(super) shard_pauses: AtomicU64,
    pub(super) catch_up_failures: AtomicU64,
    /// Joins tried again after a retryable failure (the store's other
    /// retries are counted by the flusher and the coordinator).
    pub(super) join_retries: AtomicU64,
    /// Reads of the layout versions tried again (the layout check, the
    /// writers of older versions' flushes).
    pub(super) layout_retries: AtomicU64,
    /// Why the join being waited out last failed (readiness).
    pub(super) join_failure: std::sync::Mutex<Option<String>>,
    /// Flushes are paused on a failing store (readiness).
    pub(super) flush_paused: AtomicBool,
}

impl Counters {
    pub(super) fn add(&self, batch: &RecordBatch, counts: BatchCounts) {
        self.records.fetch_add(batch.records.len() as u64, Ordering::Relaxed);
        self.valid.fetch_add(counts.valid, Ordering::Relaxed);
        self.rejected.fetch_add(counts.rejected, Ordering::Relaxed);
        self.headers.fetch_add(counts.headers, Ordering::Relaxed);
        metrics::counter!("zigzag_ingest_records_total").increment(batch.records.len() as u64);
    }
}

impl Pipeline {
    /// Whether this worker is doing its job, for a readiness probe: joined
    /// to a lane, the lane's beat renewed within half the failover time
    /// (other workers take its shards after the whole of it), and flushes
    /// not paused on a failing store. Err says what is wrong.
    pub fn readiness(&self) -> Result<(), String> {
        let failover = self.coord.options().failover;
        match self.coord.renewed_ago() {
            None => {
                return Err(match super::lock(&self.counters.join_failure).as_ref() {
                    Some(why) => format!("joining a lane, waiting out: {why}"),
                    None => "not joined to a lane (starting, or rejoining after losing it)".into(),
                })
            }
            Some(ago) if ago > failover / 2 => {
                return Err(format!(
                    "the lane's beat was last renewed {:.1} s ago (failover {:.1} s): the lease table is failing",
                    ago.as_secs_f64(),
                    failover.as_secs_f64()
                ))
            }
            Some(_) => {}
        }
        if self.counters.flush_paused.load(Ordering::Relaxed) {
            return Err("flushes are paused: the aggregate store is failing".into());
        }
        Ok(())
    }

    pub(super) fn summary(&self, shards: usize) -> RunSummary {
        let s = &self.flusher.stats;
        let l = &self.coord.stats;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RunSummary {
            shards,
            records: get(&self.counters.records),
            valid: get(&self.counters.valid),
            rejected: get(&self.counters.rejected),
            headers: get(&self.counters.headers),
            flushes: get(&s.flushes),
            recovered: get(&self.counters.recovered),
            items: get(&s.items),
            write_requests: get(&s.write_requests),
            item_write_units: get(&s.item_write_units),
            largest_item: get(&s.largest_item),
            skipped: get(&s.skipped),
            lease_requests: get(&l.requests),
            retries: get(&s.retries)
                + get(&l.retries)
                + get(&self.counters.join_retries)
                + get(&self.counters.layout_retries),
            leases_taken: get(&l.taken),
            leases_lost: get(&l.lost),
            leases_handed_off: get(&l.handed_off),
            per_prefix: s.per_prefix.iter().map(get).collect(),
            max_generation_keys: get(&self.counters.max_keys_seen),
            flush_pauses: get(&self.counters.flush_pauses),
            shard_pauses: get(&self.counters.shard_pauses),
            catch_up_failures: get(&self.counters.catch_up_failures),
            lease_failures: get(&l.heartbeat_failures) + get(&l.pass_failures),
            adopt: None,
            newest_event_ms: self.aggregator.newest_event_ms(),
        }
    }
}
