//! The planner's statistics (`zigzag_model::stats`): after a flush's items
//! are written, each (projection, rollup, bin) it touched gets its sketch
//! of items merged into its statistics item. Best effort: a statistics
//! write that fails is retried like an item write (throttles, timeouts,
//! 5xx: counted in the flusher's retries) and, once the attempts are spent
//! or on any other error, logged and counted, never failing the flush (the
//! totals do not depend on it; the next flush merges again).

use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use zigzag_core::retry::{RetryPolicy, Retryable};
use zigzag_core::table::{Item, SortedTable, TableError, UpdateOutcome};
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
    /// Each retryable failure sent again is counted in `retries`.
    pub async fn write(
        &self,
        table: &dyn SortedTable,
        projections: &Projections,
        stats: FlushStatistics,
        retry: &RetryPolicy,
        retries: &AtomicU64,
    ) -> u64 {
        let mut todo: Vec<(StatsKey, BinStats, Option<Item>)> = {
            let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
            if known.len() > REMEMBERED {
                known.clear();
            }
            stats.into_iter().map(|(k, s)| (k, s, known.get(&k).cloned())).collect()
        };
        let mut sent = 0;
        let (mut conditional_rounds, mut failed_rounds) = (0, 0);
        while conditional_rounds < ROUNDS {
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
                Err(e) if e.is_retryable() => {
                    reqs.iter().map(|_| Err(TableError::Unavailable(e.to_string()))).collect()
                }
                Err(e) => {
                    tracing::warn!(error = %e, "statistics not written this flush");
                    self.failed(reqs.len() as u64);
                    break;
                }
            };
            let mut unavailable = Vec::new();
            {
                let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
                for ((key, s), result) in pending.into_iter().zip(results) {
                    match result {
                        Ok(UpdateOutcome::Applied(item)) => {
                            known.insert(key, item);
                        }
                        Ok(UpdateOutcome::ConditionFailed(old)) => todo.push((key, s, old)),
                        Err(e) => {
                            // A timed-out write may have applied: its version
                            // is unknown, so the retry reads it first.
                            known.remove(&key);
                            if e.is_retryable() {
                                unavailable.push((key, s, None));
                            } else {
                                tracing::debug!(error = %e, "a statistics write failed: merged again next flush");
                                self.failed(1);
                            }
                        }
                    }
                }
            }
            if unavailable.is_empty() {
                conditional_rounds += 1;
                continue;
            }
            let again = unavailable.len() as u64;
            if !retry.pause(&mut failed_rounds, &AtomicU64::new(0)).await {
                tracing::warn!(writes = again, "statistics not written this flush: the store kept failing");
                self.failed(again);
                break;
            }
            retries.fetch_add(again, Ordering::Relaxed);
            metrics::counter!("zigzag_ingest_store_retries_total").increment(again);
            todo.extend(unavailable);
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

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;
    use std::sync::atomic::AtomicU32;
    use std::time::Duration;
    use zigzag_core::table::MemoryTable;
    use zigzag_core::table::{ItemResult, QueryPage, QueryRequest, SortKeyCondition, UpdateRequest};
    use zigzag_model::stats::{StoredStats, STATS_PK};
    use zigzag_model::Config;

    /// A memory table whose next `whole` batches fail as a whole
    /// (throttled, nothing applied) and whose next `after` batches apply,
    /// then answer every item with a timeout.
    #[derive(Default)]
    struct Flaky {
        inner: MemoryTable,
        whole: AtomicU32,
        after: AtomicU32,
        injected: AtomicU64,
    }

    fn take(n: &AtomicU32) -> bool {
        n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| v.checked_sub(1)).is_ok()
    }

    #[async_trait]
    impl SortedTable for Flaky {
        async fn put(&self, item: Item) -> Result<(), TableError> {
            self.inner.put(item).await
        }
        async fn query(&self, req: &QueryRequest) -> Result<QueryPage, TableError> {
            self.inner.query(req).await
        }
        async fn update(&self, req: &UpdateRequest) -> Result<UpdateOutcome, TableError> {
            self.inner.update(req).await
        }
        async fn delete(
            &self,
            req: &zigzag_core::table::DeleteRequest,
        ) -> Result<zigzag_core::table::DeleteOutcome, TableError> {
            self.inner.delete(req).await
        }
        async fn update_batch(&self, reqs: &[UpdateRequest]) -> Result<Vec<ItemResult>, TableError> {
            if take(&self.whole) {
                self.injected.fetch_add(reqs.len() as u64, Ordering::SeqCst);
                return Err(TableError::Throttled("injected".into()));
            }
            let applied = self.inner.update_batch(reqs).await?;
            if take(&self.after) {
                self.injected.fetch_add(reqs.len() as u64, Ordering::SeqCst);
                return Ok(applied.iter().map(|_| Err(TableError::Unavailable("injected timeout".into()))).collect());
            }
            Ok(applied)
        }
    }

    fn flush_stats(ids: std::ops::Range<u128>) -> FlushStatistics {
        let mut s = BinStats::new(60_000);
        for id in ids {
            s.add(Rollup::Minute, 0, 60_000, id);
        }
        [((0u8, Rollup::Minute, 0i64), s)].into_iter().collect()
    }

    async fn stored(table: &Flaky) -> Vec<StoredStats> {
        let page = table.inner.query(&QueryRequest::new(STATS_PK, SortKeyCondition::Any)).await.unwrap();
        page.items.iter().map(|i| StoredStats::from_item(i).unwrap()).collect()
    }

    #[tokio::test]
    async fn retryable_failures_are_retried_counted_once_each_and_merge_once() {
        let projections = Projections::new(&Config::default()).unwrap();
        let retry = RetryPolicy { max_attempts: 10, base: Duration::from_millis(1), cap: Duration::from_millis(2) };
        let table = Flaky::default();
        let writer = StatisticsWriter::default();
        let retries = AtomicU64::new(0);

        table.whole.store(2, Ordering::SeqCst);
        writer.write(&table, &projections, flush_stats(0..500), &retry, &retries).await;
        table.after.store(1, Ordering::SeqCst);
        writer.write(&table, &projections, flush_stats(250..1000), &retry, &retries).await;

        assert_eq!(table.injected.load(Ordering::SeqCst), 3, "two whole-batch throttles and one timeout");
        assert_eq!(retries.load(Ordering::SeqCst), 3, "one retry per retryable failure");
        assert_eq!(writer.failures.load(Ordering::SeqCst), 0);
        let stats = stored(&table).await;
        assert_eq!(stats.len(), 1);
        // 1,000 distinct items at HyperLogLog p=8 (about 6.5 % error): the
        // write that applied then timed out merged its sketch, idempotently.
        assert!((900..=1100).contains(&stats[0].items), "{stats:?}");
        assert_eq!((stats[0].lo, stats[0].hi), (60_000, 60_000));
    }

    #[tokio::test]
    async fn a_store_that_keeps_failing_costs_the_statistics_never_the_flush() {
        let projections = Projections::new(&Config::default()).unwrap();
        let retry = RetryPolicy { max_attempts: 3, base: Duration::from_millis(1), cap: Duration::from_millis(2) };
        let table = Flaky::default();
        table.whole.store(u32::MAX, Ordering::SeqCst);
        let writer = StatisticsWriter::default();
        let retries = AtomicU64::new(0);
        let sent = writer.write(&table, &projections, flush_stats(0..10), &retry, &retries).await;
        assert_eq!(sent, 3, "max_attempts writes of the one statistics item");
        assert_eq!(retries.load(Ordering::SeqCst), 2);
        assert_eq!(writer.failures.load(Ordering::SeqCst), 1);
        assert!(stored(&table).await.is_empty());
    }
}
