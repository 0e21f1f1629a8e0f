//! The planner's statistics (`zigzag_model::stats`): after a flush's items
//! are written, each (projection, rollup, bin) it touched gets its sketch
//! of items merged into its statistics item. Best effort: a statistics
//! write that fails is logged and counted, never fails the flush (the
//! totals do not depend on it; the next flush merges again).

use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use zigzag_core::table::{Item, SortedTable, UpdateOutcome};
use zigzag_model::stats::{plan_stats_update, BinStats};
use zigzag_model::{Projections, Rollup};

/// Which statistics item: (projection index, rollup, bin start).
type StatsKey = (u8, Rollup, i64);

/// One flush's statistics, by item.
pub type FlushStatistics = FxHashMap<StatsKey, BinStats>;

/// Conditional rounds before a statistics write is given up (other
/// workers merging into the same item at once).
const ROUNDS: usize = 4;
/// Statistics items remembered (their version), so the next merge is
/// written at once instead of after a refused attempt.
const REMEMBERED: usize = 4096;

#[derive(Default)]
pub struct StatisticsWriter {
    known: Mutex<FxHashMap<StatsKey, Item>>,
    /// Statistics writes sent (also counted as write requests).
    pub writes: AtomicU64,
    pub failures: AtomicU64,
}

impl StatisticsWriter {
    /// Merges `stats` into the store; returns the write requests sent.
    pub async fn write(&self, table: &dyn SortedTable, projections: &Projections, stats: FlushStatistics) -> u64 {
        let mut todo: Vec<(StatsKey, BinStats, Option<Item>)> = {
            let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
            if known.len() > REMEMBERED {
                known.clear();
            }
            stats.into_iter().map(|(k, s)| (k, s, known.get(&k).cloned())).collect()
        };
        let mut sent = 0;
        for _ in 0..ROUNDS {
            let mut reqs = Vec::new();
            let mut pending = Vec::new();
            for (key @ (p, rollup, bin), s, known) in todo.drain(..) {
                let name = projections.get(p as usize).map_or("?", |km| km.name());
                match plan_stats_update(name, rollup, bin, &s, known.as_ref()) {
                    Ok(Some(req)) => {
                        reqs.push(req);
                        pending.push((key, s));
                    }
                    Ok(None) => {}
                    Err(why) => {
                        tracing::warn!(projection = name, %rollup, why, "statistics item unreadable: not merged");
                        self.failed(1);
                    }
                }
            }
            if reqs.is_empty() {
                break;
            }
            sent += reqs.len() as u64;
            let results = match table.update_batch(&reqs).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(error = %e, "statistics not written this flush");
                    self.failed(reqs.len() as u64);
                    break;
                }
            };
            let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
            for ((key, s), result) in pending.into_iter().zip(results) {
                match result {
                    Ok(UpdateOutcome::Applied(item)) => {
                        known.insert(key, item);
                    }
                    Ok(UpdateOutcome::ConditionFailed(old)) => todo.push((key, s, old)),
                    Err(e) => {
                        tracing::debug!(error = %e, "a statistics write failed: merged again next flush");
                        known.remove(&key);
                        self.failed(1);
                    }
                }
            }
        }
        self.failed(todo.len() as u64);
        self.writes.fetch_add(sent, Ordering::Relaxed);
        metrics::counter!("zigzag_ingest_statistics_writes_total").increment(sent);
        sent
    }

    fn failed(&self, n: u64) {
        if n > 0 {
            self.failures.fetch_add(n, Ordering::Relaxed);
            metrics::counter!("zigzag_ingest_statistics_failures_total").increment(n);
        }
    }
}
