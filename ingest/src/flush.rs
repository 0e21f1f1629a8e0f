//! Flush: one generation of partials → the store, exactly once.
//!
//! Per shard with progress: (1) record the flush as pending in the shard's
//! checkpoint (fenced by owner and flush number), (2) apply each partial
//! with the shard's mark guard (`measures::plan_update`), many in flight,
//! (3) commit the checkpoint. Writes per flush = distinct dirty items, plus
//! one per item whose stored cost min/max moves. See `zigzag_model::checkpoint`.

use crate::aggregate::{AggKey, Generation, KeyValues};
use crate::retry::RetryPolicy;
use futures::stream::{self, StreamExt, TryStreamExt};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use thiserror::Error;
use zigzag_core::schema::DimError;
use zigzag_core::table::{SortedTable, TableError, UpdateOutcome, UpdateRequest};
use zigzag_model::checkpoint::{self, mark_attr};
use zigzag_model::config::Field;
use zigzag_model::measures::{plan_update, ItemWrite};
use zigzag_model::{KeyModel, Measure, Measures, Position};

#[derive(Debug, Error)]
pub enum FlushError {
    #[error("store: {0}")]
    Table(#[from] TableError),
    #[error("shard {shard}: checkpoint fence failed ({what}); another owner took the shard or the checkpoint moved")]
    Fenced { shard: String, what: &'static str },
    #[error("item key: {0}")]
    Key(#[from] DimError),
    #[error("item {pk} did not converge after {attempts} conditional attempts")]
    NoConvergence { pk: String, attempts: u32 },
}

/// One shard's part of a flush.
#[derive(Debug, Clone)]
pub struct ShardFlush {
    pub index: u32,
    pub id: String,
    /// This flush's number (the shard's last committed + 1).
    pub flush: u64,
    pub end: Position,
    pub finished: bool,
    /// Step 1 was already done by a previous run (recovery).
    pub already_begun: bool,
}

/// Counters of everything the flusher did (all flushes).
#[derive(Debug, Default)]
pub struct FlushStats {
    pub flushes: AtomicU64,
    pub items: AtomicU64,
    pub write_requests: AtomicU64,
    /// Writes found already applied (replays after a crash).
    pub skipped: AtomicU64,
    pub checkpoint_writes: AtomicU64,
    pub retries: AtomicU64,
    /// Write requests per scatter prefix.
    pub per_prefix: Vec<AtomicU64>,
}

pub struct Flusher {
    pub keys: KeyModel,
    pub stored: Vec<Measure>,
    pub aggregates: Arc<dyn SortedTable>,
    pub checkpoints: Arc<dyn SortedTable>,
    pub stream: String,
    pub owner: String,
    pub concurrency: usize,
    pub retry: RetryPolicy,
    pub stats: FlushStats,
}

impl Flusher {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        keys: KeyModel,
        stored: Vec<Measure>,
        aggregates: Arc<dyn SortedTable>,
        checkpoints: Arc<dyn SortedTable>,
        stream: String,
        owner: String,
        concurrency: usize,
    ) -> Self {
        let per_prefix = (0..keys.prefixes()).map(|_| AtomicU64::new(0)).collect();
        Flusher {
            keys,
            stored,
            aggregates,
            checkpoints,
            stream,
            owner,
            concurrency,
            retry: RetryPolicy::default(),
            stats: FlushStats { per_prefix, ..Default::default() },
        }
    }

    async fn checkpoint_update(&self, shard: &str, req: UpdateRequest, what: &'static str) -> Result<(), FlushError> {
        let out = self.retry.run(&self.stats.retries, || self.checkpoints.update(&req)).await?;
        self.stats.checkpoint_writes.fetch_add(1, Ordering::Relaxed);
        match out {
            UpdateOutcome::Applied(_) => Ok(()),
            UpdateOutcome::ConditionFailed(_) => Err(FlushError::Fenced { shard: shard.to_string(), what }),
        }
    }

    /// Writes a generation: `shards` lists every shard with progress (data
    /// or only a moved position). Partials of shards not listed are a bug.
    pub async fn flush(&self, gen: Generation, shards: &[ShardFlush]) -> Result<(), FlushError> {
        for s in shards.iter().filter(|s| !s.already_begun) {
            let req = checkpoint::begin_flush(&self.stream, &s.id, &self.owner, s.flush, s.end);
            self.checkpoint_update(&s.id, req, "begin flush").await?;
        }
        let Generation { partials, names } = gen;
        let names = &names;
        stream::iter(partials)
            .map(|(key, m)| async move {
                let shard = shards.iter().find(|s| s.index == key.shard).expect("every dirty shard is listed");
                let values = names.get(&key.id).map(|v| v.clone()).expect("names hold every key of the generation");
                self.write_item(key, m, &values, shard).await
            })
            .buffer_unordered(self.concurrency)
            .try_collect::<()>()
            .await?;
        for s in shards {
            let req = checkpoint::commit_flush(&self.stream, &s.id, &self.owner, s.flush, s.end, s.finished);
            self.checkpoint_update(&s.id, req, "commit flush").await?;
        }
        self.stats.flushes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    async fn write_item(
        &self,
        key: AggKey,
        m: Measures,
        values: &KeyValues,
        shard: &ShardFlush,
    ) -> Result<(), FlushError> {
        let rollup = key.rollup;
        let strs: smallvec::SmallVec<[&str; 4]> = values.iter().map(|s| &**s).collect();
        let dims: smallvec::SmallVec<[(Field, &str); 4]> =
            self.keys.fields().iter().copied().zip(strs.iter().copied()).collect();
        let prefix = self.keys.prefix(key.id, rollup, key.bucket, &shard.id, shard.flush);
        let mark = mark_attr(&shard.id);
        let write = ItemWrite {
            pk: KeyModel::partition_key(prefix, rollup, rollup.bin().start_of(key.bucket)),
            sk: self.keys.sort_key(rollup, key.bucket, &strs, key.id)?,
            bucket_start: key.bucket,
            dims: &dims,
            measures: m,
            stored: &self.stored,
            mark_attr: &mark,
            flush: shard.flush,
        };
        self.stats.items.fetch_add(1, Ordering::Relaxed);
        let mut known = None;
        const ATTEMPTS: u32 = 8;
        for _ in 0..ATTEMPTS {
            let Some(req) = plan_update(&write, known.as_ref()) else {
                self.stats.skipped.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            };
            let out = self.retry.run(&self.stats.retries, || self.aggregates.update(&req)).await?;
            self.stats.write_requests.fetch_add(1, Ordering::Relaxed);
            self.stats.per_prefix[prefix as usize].fetch_add(1, Ordering::Relaxed);
            match out {
                UpdateOutcome::Applied(_) => return Ok(()),
                UpdateOutcome::ConditionFailed(old) => {
                    known = Some(old.unwrap_or_else(|| {
                        // Absent yet failed: only guards on absent attributes can
                        // do that, and ours all accept absence. Treat as empty.
                        zigzag_core::table::Item::new(write.pk.clone(), write.sk.clone())
                    }))
                }
            }
        }
        Err(FlushError::NoConvergence { pk: write.pk, attempts: ATTEMPTS })
    }
}
