//! The long-lived pipeline: one task per shard reads and aggregates
//! (source → decode → aggregate); the flush loop swaps the generation out on
//! an interval or when it holds `max_keys` keys, and writes it (flush →
//! store). Sources wait while a full generation is being written: memory
//! stays bounded at about two generations, and nothing is dropped.
//!
//! Startup finishes any flush a previous run began (see `recover`); stop
//! (cancel the token: SIGINT/SIGTERM in the binary) ends the shard tasks
//! after their current batch, then a final flush commits everything read.

use crate::aggregate::{Aggregator, Generation, IdentityCollision, Rejected};
use crate::deadletter::DeadLetters;
use crate::decode::DecodeLimits;
use crate::flush::{FlushError, Flusher, ShardFlush};
use crate::source::{Source, SourceError};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use thiserror::Error;
use tokio::sync::{watch, Notify, RwLock};
use tokio_util::sync::CancellationToken;
use zigzag_core::table::{SortedTable, TableError};
use zigzag_model::checkpoint::{self, Checkpoint};
use zigzag_model::{Config, ConfigError, KeyModel, Position};

#[derive(Debug, Error)]
pub enum PipelineError {
    #[error("source: {0}")]
    Source(#[from] SourceError),
    #[error("flush: {0}")]
    Flush(#[from] FlushError),
    #[error("checkpoint store: {0}")]
    Checkpoint(#[from] TableError),
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("shard {shard}: checkpoint item is corrupt: {why}")]
    CorruptCheckpoint { shard: String, why: String },
    #[error("shard {shard}: the source ends at {reached:?} but the unfinished flush {flush} covers up to {end}")]
    MissingRecords { shard: String, flush: u64, end: Box<Position>, reached: Option<Box<Position>> },
    #[error("dead-letter file {path}: {error}")]
    DeadLetter { path: PathBuf, error: std::io::Error },
    #[error(transparent)]
    Collision(#[from] IdentityCollision),
    #[error(
        "shard {shard}: flush {flush} was begun under another configuration (rollups, dimensions, measures or \
         scatter changed); restart once with the previous configuration to finish it, then change it"
    )]
    LayoutChanged { shard: String, flush: u64 },
}

#[derive(Debug, Clone)]
pub struct PipelineOptions {
    pub config: Config,
    /// Partition key of this pipeline's checkpoints (the stream's name).
    pub stream: String,
    /// This run's identity in checkpoint ownership.
    pub owner: String,
    pub limits: DecodeLimits,
    /// Records per source read.
    pub batch_size: usize,
    pub dead_letters: PathBuf,
}

/// What a run did, for the summary line and the benchmarks.
#[derive(Debug, Clone, Default)]
pub struct RunSummary {
    pub shards: usize,
    pub records: u64,
    pub valid: u64,
    pub rejected: u64,
    pub flushes: u64,
    /// Flushes a previous run began and this one finished.
    pub recovered: u64,
    pub items: u64,
    pub write_requests: u64,
    pub skipped: u64,
    pub checkpoint_writes: u64,
    pub retries: u64,
    pub per_prefix: Vec<u64>,
    pub max_generation_keys: u64,
}

/// Read progress of one shard within a generation.
#[derive(Debug, Default, Clone, Copy)]
struct Progress {
    last: Option<Position>,
    ended: bool,
}

/// Everything read since the last swap.
struct Batch {
    gen: Generation,
    rejected: Mutex<Vec<(u32, Rejected)>>,
    progress: Vec<Mutex<Progress>>,
}

impl Batch {
    fn new(shards: usize) -> Self {
        Batch {
            gen: Generation::default(),
            rejected: Mutex::new(Vec::new()),
            progress: (0..shards).map(|_| Mutex::new(Progress::default())).collect(),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Committed state of one shard, owned by the flush loop.
#[derive(Debug, Clone)]
struct ShardState {
    id: String,
    committed: Option<Position>,
    flush: u64,
    finished: bool,
}

struct Counters {
    records: AtomicU64,
    valid: AtomicU64,
    rejected: AtomicU64,
    max_keys_seen: AtomicU64,
}

pub struct Pipeline {
    source: Arc<dyn Source>,
    flusher: Flusher,
    aggregator: Aggregator,
    opts: PipelineOptions,
    dead: Mutex<DeadLetters>,
    counters: Counters,
}

impl Pipeline {
    pub fn new(
        source: Arc<dyn Source>,
        aggregates: Arc<dyn SortedTable>,
        checkpoints: Arc<dyn SortedTable>,
        opts: PipelineOptions,
    ) -> Result<Self, PipelineError> {
        let keys = KeyModel::new(&opts.config)?;
        let aggregator = Aggregator::new(&keys, opts.limits);
        let flusher =
            Flusher::new(keys, &opts.config, aggregates, checkpoints, opts.stream.clone(), opts.owner.clone());
        let dead = DeadLetters::open(&opts.dead_letters)
            .map_err(|error| PipelineError::DeadLetter { path: opts.dead_letters.clone(), error })?;
        let zero = || AtomicU64::new(0);
        Ok(Pipeline {
            source,
            flusher,
            aggregator,
            opts,
            dead: Mutex::new(dead),
            counters: Counters { records: zero(), valid: zero(), rejected: zero(), max_keys_seen: zero() },
        })
    }

    /// Runs until every shard ends or `stop` is cancelled, then flushes.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) -> Result<RunSummary, PipelineError> {
        let ids = self.source.shards().await?;
        let mut states = Vec::with_capacity(ids.len());
        let mut recovered = 0;
        for (i, id) in ids.iter().enumerate() {
            let cp = self.claim(id).await?;
            if self.recover(i as u32, id, &cp).await? {
                recovered += 1;
            }
            let (committed, flush) = match cp.pending {
                Some(p) => (Some(p.end), p.flush),
                None => (cp.committed, cp.flush),
            };
            states.push(ShardState { id: id.clone(), committed, flush, finished: cp.finished });
        }

        let n = ids.len();
        let gate = Arc::new(RwLock::new(Batch::new(n)));
        let (swapped_tx, swapped_rx) = watch::channel(0u64);
        let full = Arc::new(Notify::new());
        let mut tasks = tokio::task::JoinSet::new();
        for (i, st) in states.iter().enumerate().filter(|(_, s)| !s.finished) {
            let ctx = ShardTask {
                pipeline: self.clone(),
                index: i as u32,
                id: st.id.clone(),
                after: st.committed,
                gate: gate.clone(),
                swapped: swapped_rx.clone(),
                full: full.clone(),
                stop: stop.clone(),
            };
            tasks.spawn(ctx.run());
        }

        tracing::debug!(spawned = tasks.len(), finished = states.iter().filter(|s| s.finished).count(), "shards");
        if tasks.is_empty() {
            // Every shard had already ended and been committed.
            return Ok(self.summary(n, recovered));
        }
        let mut first_error: Option<PipelineError> = None;
        let mut interval = tokio::time::interval(Duration::from_millis(self.opts.config.flush.interval_ms));
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        interval.tick().await;
        let mut swaps = 0u64;
        loop {
            let last_round = tokio::select! {
                _ = interval.tick() => false,
                _ = full.notified() => false,
                joined = tasks.join_next(), if !tasks.is_empty() => {
                    let result = joined.unwrap_or(Ok(Ok(())));
                    if let Some(e) = match result {
                        Ok(Ok(())) => None,
                        Ok(Err(e)) => Some(e),
                        Err(join) => Some(PipelineError::Source(SourceError::Shard {
                            shard: "?".into(),
                            message: format!("shard task failed: {join}"),
                        })),
                    } {
                        stop.cancel();
                        first_error.get_or_insert(e);
                    }
                    if !tasks.is_empty() {
                        continue;
                    }
                    true
                }
            } || tasks.is_empty();
            let batch = std::mem::replace(&mut *gate.write().await, Batch::new(n));
            swaps += 1;
            let _ = swapped_tx.send(swaps);
            if let Err(e) = self.write_batch(batch, &mut states).await {
                stop.cancel();
                while tasks.join_next().await.is_some() {}
                return Err(first_error.unwrap_or(e));
            }
            if last_round {
                break;
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        Ok(self.summary(n, recovered))
    }

    fn summary(&self, shards: usize, recovered: u64) -> RunSummary {
        let s = &self.flusher.stats;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RunSummary {
            shards,
            records: get(&self.counters.records),
            valid: get(&self.counters.valid),
            rejected: get(&self.counters.rejected),
            flushes: get(&s.flushes),
            recovered,
            items: get(&s.items),
            write_requests: get(&s.write_requests),
            skipped: get(&s.skipped),
            checkpoint_writes: get(&s.checkpoint_writes),
            retries: get(&s.retries),
            per_prefix: s.per_prefix.iter().map(get).collect(),
            max_generation_keys: get(&self.counters.max_keys_seen),
        }
    }

    async fn claim(&self, shard: &str) -> Result<Checkpoint, PipelineError> {
        let req = checkpoint::claim(&self.opts.stream, shard, &self.opts.owner);
        let table = &self.flusher.checkpoints;
        let out = self.flusher.retry.run(&self.flusher.stats.retries, || table.update(&req)).await?;
        let corrupt = |why: String| PipelineError::CorruptCheckpoint { shard: shard.to_string(), why };
        let item = match out {
            zigzag_core::table::UpdateOutcome::Applied(item) => item,
            zigzag_core::table::UpdateOutcome::ConditionFailed(_) => {
                return Err(corrupt("the store refused an unconditional claim".into()))
            }
        };
        let cp = Checkpoint::from_item(&item).map_err(corrupt)?;
        if let (Some(p), Some(layout)) = (cp.pending, checkpoint::pending_layout(&item)) {
            if layout != self.flusher.layout {
                return Err(PipelineError::LayoutChanged { shard: shard.to_string(), flush: p.flush });
            }
        }
        Ok(cp)
    }

    /// Finishes a flush a previous run began: re-reads exactly its records
    /// and re-applies them under the same flush number. True if there was one.
    async fn recover(&self, index: u32, id: &str, cp: &Checkpoint) -> Result<bool, PipelineError> {
        let Some(pending) = cp.pending else { return Ok(false) };
        let mut reader = self.source.open(id, cp.committed).await?;
        let batch = Batch::new(index as usize + 1);
        let mut reached: Option<Position> = None;
        let mut idle = 0;
        while reached < Some(pending.end) {
            let mut b = reader.next_batch(self.opts.batch_size).await?;
            if b.records.is_empty() {
                idle += 1;
                if b.end_of_shard || idle > 50 {
                    break;
                }
                continue;
            }
            b.truncate_after(pending.end);
            let mut rejected = Vec::new();
            self.aggregator.add_batch(&batch.gen, index, &b, &mut rejected)?;
            lock(&batch.rejected).extend(rejected.into_iter().map(|r| (index, r)));
            reached = b.last_position().or(reached);
            if b.end_of_shard {
                break;
            }
        }
        if reached != Some(pending.end) && !(cp.committed == Some(pending.end) || pending.end == Position::default()) {
            return Err(PipelineError::MissingRecords {
                shard: id.into(),
                flush: pending.flush,
                end: Box::new(pending.end),
                reached: reached.map(Box::new),
            });
        }
        let shard = ShardFlush {
            index,
            id: id.to_string(),
            flush: pending.flush,
            end: pending.end,
            finished: false,
            already_begun: true,
        };
        self.write_dead_letters(&batch, std::slice::from_ref(&shard))?;
        self.flusher.flush(batch.gen, &[shard]).await?;
        Ok(true)
    }

    fn write_dead_letters(&self, batch: &Batch, shards: &[ShardFlush]) -> Result<(), PipelineError> {
        let rejected = lock(&batch.rejected);
        if rejected.is_empty() {
            return Ok(());
        }
        let mut dead = lock(&self.dead);
        let path = dead.path().to_path_buf();
        let io = |error| PipelineError::DeadLetter { path: path.clone(), error };
        for (index, r) in rejected.iter() {
            let shard = shards.iter().find(|s| s.index == *index).map(|s| s.id.as_str()).unwrap_or("?");
            dead.write(shard, r).map_err(io)?;
            metrics::counter!("zigzag_ingest_dead_letters_total", "reason" => r.error.reason()).increment(1);
        }
        dead.sync().map_err(io)
    }

    /// Flushes one swapped-out generation and advances the shard states.
    async fn write_batch(&self, batch: Batch, states: &mut [ShardState]) -> Result<(), PipelineError> {
        let mut shards = Vec::new();
        for (i, st) in states.iter().enumerate() {
            let p = *lock(&batch.progress[i]);
            if p.last.is_none() && !p.ended {
                continue;
            }
            let end = p.last.or(st.committed).unwrap_or_default();
            shards.push(ShardFlush {
                index: i as u32,
                id: st.id.clone(),
                flush: st.flush + 1,
                end,
                finished: p.ended,
                already_begun: false,
            });
        }
        if shards.is_empty() {
            return Ok(());
        }
        self.counters.max_keys_seen.fetch_max(batch.gen.len() as u64, Ordering::Relaxed);
        self.write_dead_letters(&batch, &shards)?;
        let keys = batch.gen.len();
        let started = std::time::Instant::now();
        self.flusher.flush(batch.gen, &shards).await?;
        for s in &shards {
            let st = &mut states[s.index as usize];
            st.committed = Some(s.end);
            st.flush = s.flush;
            st.finished = s.finished;
        }
        metrics::counter!("zigzag_ingest_flushes_total").increment(1);
        metrics::histogram!("zigzag_ingest_flush_seconds").record(started.elapsed().as_secs_f64());
        metrics::gauge!("zigzag_ingest_generation_keys").set(keys as f64);
        tracing::info!(
            keys,
            shards = shards.len(),
            records = self.counters.records.load(Ordering::Relaxed),
            dead_letters = self.counters.rejected.load(Ordering::Relaxed),
            write_requests = self.flusher.stats.write_requests.load(Ordering::Relaxed),
            retries = self.flusher.stats.retries.load(Ordering::Relaxed),
            ms = started.elapsed().as_millis() as u64,
            "flushed"
        );
        Ok(())
    }
}

/// One shard's read → decode → aggregate loop.
struct ShardTask {
    pipeline: Arc<Pipeline>,
    index: u32,
    id: String,
    after: Option<Position>,
    gate: Arc<RwLock<Batch>>,
    swapped: watch::Receiver<u64>,
    full: Arc<Notify>,
    stop: CancellationToken,
}

impl ShardTask {
    async fn run(mut self) -> Result<(), PipelineError> {
        let p = &self.pipeline;
        let mut reader = p.source.open(&self.id, self.after).await?;
        let max_keys = p.opts.config.flush.max_keys;
        loop {
            let batch = tokio::select! {
                _ = self.stop.cancelled() => return Ok(()),
                b = reader.next_batch(p.opts.batch_size) => b?,
            };
            if let Some(ms) = batch.millis_behind {
                metrics::gauge!("zigzag_ingest_millis_behind", "shard" => self.id.clone()).set(ms as f64);
            }
            if batch.records.is_empty() && !batch.end_of_shard {
                continue;
            }
            // Backpressure: wait for the flush loop to swap in an empty
            // generation rather than grow past the key limit.
            loop {
                let guard = self.gate.read().await;
                if guard.gen.len() < max_keys {
                    let mut rejected = Vec::new();
                    let counts = p.aggregator.add_batch(&guard.gen, self.index, &batch, &mut rejected)?;
                    if !rejected.is_empty() {
                        lock(&guard.rejected).extend(rejected.into_iter().map(|r| (self.index, r)));
                    }
                    {
                        let mut prog = lock(&guard.progress[self.index as usize]);
                        prog.last = batch.last_position().or(prog.last);
                        prog.ended |= batch.end_of_shard;
                    }
                    p.counters.records.fetch_add(batch.records.len() as u64, Ordering::Relaxed);
                    p.counters.valid.fetch_add(counts.valid, Ordering::Relaxed);
                    p.counters.rejected.fetch_add(counts.rejected, Ordering::Relaxed);
                    metrics::counter!("zigzag_ingest_records_total").increment(batch.records.len() as u64);
                    if guard.gen.len() >= max_keys {
                        self.full.notify_one();
                    }
                    break;
                }
                drop(guard);
                self.full.notify_one();
                self.swapped.borrow_and_update();
                tokio::select! {
                    _ = self.stop.cancelled() => return Ok(()),
                    r = self.swapped.changed() => if r.is_err() { return Ok(()) },
                }
            }
            if batch.end_of_shard {
                return Ok(());
            }
        }
    }
}
