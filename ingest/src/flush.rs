//! Flush: one generation of partials → the store, exactly once.
//!
//! Per shard with progress: (1) record the flush as pending in the shard's
//! checkpoint (fenced by owner and flush number), (2) apply each partial
//! with the shard's mark guard (`measures::plan_update`), many in flight,
//! (3) commit the checkpoint. Writes per flush = distinct dirty items, plus
//! one per item whose stored cost min/max moves. See `zigzag_model::checkpoint`.

use crate::aggregate::{AggKey, Generation, KeyValues};
use futures::stream::{self, StreamExt, TryStreamExt};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use thiserror::Error;
use zigzag_core::retry::RetryPolicy;
use zigzag_core::schema::DimError;
use zigzag_core::table::{Item, SortedTable, TableError, UpdateOutcome, UpdateRequest};
use zigzag_model::checkpoint::{self, mark_attr, Pending};
use zigzag_model::config::Field;
use zigzag_model::measures::{plan_update, ItemWrite};
use zigzag_model::Checkpoint;
use zigzag_model::{Config, KeyModel, Measure, Measures, Position};

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
    /// `Config::layout_digest` of the configuration writing the items.
    pub layout: String,
}

impl Flusher {
    pub fn new(
        keys: KeyModel,
        config: &Config,
        aggregates: Arc<dyn SortedTable>,
        checkpoints: Arc<dyn SortedTable>,
        stream: String,
        owner: String,
    ) -> Self {
        let per_prefix = (0..keys.prefixes()).map(|_| AtomicU64::new(0)).collect();
        Flusher {
            keys,
            stored: config.measures.clone(),
            aggregates,
            checkpoints,
            stream,
            owner,
            concurrency: config.flush.concurrency,
            retry: RetryPolicy::default(),
            stats: FlushStats { per_prefix, ..Default::default() },
            layout: config.layout_digest(),
        }
    }

    /// A checkpoint write; when its guard fails, `done` says whether the
    /// item already shows the write's effect (a retry of a write that was
    /// applied but reported as failed, e.g. timed out) rather than a fence.
    async fn checkpoint_update(
        &self,
        shard: &str,
        req: UpdateRequest,
        what: &'static str,
        done: impl Fn(&Checkpoint) -> bool,
    ) -> Result<(), FlushError> {
        let out = self.retry.run(&self.stats.retries, || self.checkpoints.update(&req)).await?;
        self.stats.checkpoint_writes.fetch_add(1, Ordering::Relaxed);
        match out {
            UpdateOutcome::Applied(_) => Ok(()),
            UpdateOutcome::ConditionFailed(Some(item))
                if Checkpoint::from_item(&item)
                    .is_ok_and(|cp| cp.owner.as_deref() == Some(&self.owner) && done(&cp)) =>
            {
                Ok(())
            }
            UpdateOutcome::ConditionFailed(_) => Err(FlushError::Fenced { shard: shard.to_string(), what }),
        }
    }

    /// Writes a generation: `shards` lists every shard with progress (data
    /// or only a moved position). Partials of shards not listed are a bug.
    pub async fn flush(&self, gen: Generation, shards: &[ShardFlush]) -> Result<(), FlushError> {
        for s in shards.iter().filter(|s| !s.already_begun) {
            let req = checkpoint::begin_flush(&self.stream, &s.id, &self.owner, s.flush, s.end, &self.layout);
            let pending = Some(Pending { flush: s.flush, end: s.end });
            self.checkpoint_update(&s.id, req, "begin flush", |cp| cp.pending == pending).await?;
        }
        let rollups: Vec<_> = self.keys.rollups().collect();
        let (partials, names) = gen.into_rollups(&rollups);
        // Locate every partial (cheap), then build full item keys one
        // partition at a time: the flush's extra memory is the compact
        // partials plus one partition's writes, not every item key at once.
        let mut located = Vec::with_capacity(partials.len());
        for (key, p) in partials {
            let shard = shards.iter().find(|s| s.index == key.shard).expect("every dirty shard is listed");
            let prefix = self.keys.prefix(key.id(), key.rollup, key.bucket, &shard.id, shard.flush);
            located.push(((prefix, key.rollup, key.rollup.bin().start_of(key.bucket)), key, p));
        }
        located.sort_unstable_by_key(|(loc, key, _)| (*loc, key.shard));
        let in_flight = self.concurrency.div_ceil(CHUNK).max(1);
        // Partitions at once: one for stores that serialize writes
        // (SQLite); many for DynamoDB, whose store bounds the requests in
        // flight itself, so small partitions do not serialize the flush
        // and concurrent writes land on different partition keys.
        let partitions_in_flight = self.aggregates.write_parallelism().clamp(1, 64);
        let names = &names;
        stream::iter(located.chunk_by(|a, b| a.0 == b.0))
            .map(|partition| async move {
                let mut writes = Vec::with_capacity(partition.len());
                for ((prefix, _, _), key, p) in partition {
                    let shard = shards.iter().find(|s| s.index == key.shard).expect("every dirty shard is listed");
                    let values =
                        names.get(&key.id()).map(|v| v.clone()).expect("names hold every key of the generation");
                    writes.push(self.prepare(*key, *prefix, p.measures(), values, shard)?);
                }
                // Key order within the partition: a chunk touches
                // neighbouring B-tree pages (SQLite writes each dirty page
                // once per transaction).
                writes.sort_unstable_by(|a, b| a.sk.cmp(&b.sk));
                stream::iter(writes.chunks(CHUNK))
                    .map(|chunk| self.write_chunk(chunk))
                    .buffer_unordered(in_flight)
                    .try_collect::<()>()
                    .await
            })
            .buffer_unordered(partitions_in_flight)
            .try_collect::<()>()
            .await?;
        for s in shards {
            let req = checkpoint::commit_flush(&self.stream, &s.id, &self.owner, s.flush, s.end, s.finished);
            let done = |cp: &Checkpoint| cp.flush == s.flush && cp.pending.is_none() && cp.committed == Some(s.end);
            self.checkpoint_update(&s.id, req, "commit flush", done).await?;
        }
        self.stats.flushes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn prepare(
        &self,
        key: AggKey,
        prefix: u32,
        m: Measures,
        values: KeyValues,
        shard: &ShardFlush,
    ) -> Result<Prepared, FlushError> {
        let rollup = key.rollup;
        let strs: smallvec::SmallVec<[&str; 4]> = values.iter().collect();
        let sk = self.keys.sort_key(rollup, key.bucket, &strs, key.id())?;
        drop(strs);
        Ok(Prepared {
            pk: KeyModel::partition_key(prefix, rollup, rollup.bin().start_of(key.bucket)),
            sk,
            prefix,
            bucket: key.bucket,
            values,
            measures: m,
            mark: mark_attr(&shard.id),
            flush: shard.flush,
        })
    }

    /// Applies a chunk of items: first attempts together, then the items
    /// whose guards failed again with what the store returned, until each
    /// is applied or found already applied.
    async fn write_chunk(&self, chunk: &[Prepared]) -> Result<(), FlushError> {
        let fields = self.keys.fields();
        let dims: Vec<Vec<(Field, &str)>> =
            chunk.iter().map(|p| fields.iter().copied().zip(p.values.iter()).collect()).collect();
        let writes: Vec<ItemWrite> = chunk
            .iter()
            .zip(&dims)
            .map(|(p, dims)| ItemWrite {
                pk: p.pk.clone(),
                sk: p.sk.clone(),
                bucket_start: p.bucket,
                dims,
                measures: p.measures,
                stored: &self.stored,
                mark_attr: &p.mark,
                flush: p.flush,
            })
            .collect();
        self.stats.items.fetch_add(chunk.len() as u64, Ordering::Relaxed);
        // (index into chunk, what the store last showed of the item)
        let mut todo: Vec<(usize, Option<Item>)> = (0..chunk.len()).map(|i| (i, None)).collect();
        const ATTEMPTS: u32 = 8;
        for _ in 0..ATTEMPTS {
            let mut idx = Vec::with_capacity(todo.len());
            let mut reqs = Vec::with_capacity(todo.len());
            for (i, known) in &todo {
                match plan_update(&writes[*i], known.as_ref()) {
                    Some(req) => {
                        idx.push(*i);
                        reqs.push(req);
                    }
                    None => {
                        self.stats.skipped.fetch_add(1, Ordering::Relaxed);
                        metrics::counter!("zigzag_ingest_replayed_writes_skipped_total").increment(1);
                    }
                }
            }
            if reqs.is_empty() {
                return Ok(());
            }
            let retries_before = self.stats.retries.load(Ordering::Relaxed);
            let outcomes = self.retry.run(&self.stats.retries, || self.aggregates.update_batch(&reqs)).await?;
            self.stats.write_requests.fetch_add(reqs.len() as u64, Ordering::Relaxed);
            metrics::counter!("zigzag_ingest_write_requests_total").increment(reqs.len() as u64);
            let retried = self.stats.retries.load(Ordering::Relaxed).saturating_sub(retries_before);
            metrics::counter!("zigzag_ingest_store_retries_total").increment(retried);
            todo.clear();
            for (i, out) in idx.into_iter().zip(outcomes) {
                self.stats.per_prefix[chunk[i].prefix as usize].fetch_add(1, Ordering::Relaxed);
                if let UpdateOutcome::ConditionFailed(old) = out {
                    // Absent yet failed cannot happen (every guard accepts
                    // absence); treat it as an empty item.
                    let old = old.unwrap_or_else(|| Item::new(chunk[i].pk.clone(), chunk[i].sk.clone()));
                    todo.push((i, Some(old)));
                }
            }
            if todo.is_empty() {
                return Ok(());
            }
        }
        let pk = chunk[todo[0].0].pk.clone();
        Err(FlushError::NoConvergence { pk, attempts: ATTEMPTS })
    }
}

/// An item write with its keys computed.
struct Prepared {
    pk: String,
    sk: Vec<u8>,
    prefix: u32,
    bucket: i64,
    values: KeyValues,
    measures: Measures,
    mark: String,
    flush: u64,
}

/// Item updates per store call: one SQLite transaction (larger ones write
/// each dirty page fewer times); stores that send one request per item
/// bound their own concurrency within a call.
const CHUNK: usize = 4096;
