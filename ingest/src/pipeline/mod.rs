//! The long-lived worker: one task per held shard reads and aggregates
//! (source → decode → aggregate, `reader`); the main loop swaps the
//! generation out on an interval or when it holds `max_keys` keys, and
//! flushes it (`job`: intent → items → commit → checkpoints); two
//! background loops keep the lease protocol going (`leases`: heartbeat and
//! lease passes). Memory stays bounded at about two generations: readers
//! wait while a full one is being written, and nothing is dropped.
//!
//! The main loop is a loop over [`Event`]s. It reconciles each lease plan
//! with what it reads: a lease gained starts a reader, a lease lost stops
//! one (its unflushed records are dropped at the next flush and read again
//! by the new owner), a handoff request stops the reader, flushes, and gives
//! the lease; a dead worker's flush in flight is recovered. An outage pauses
//! the flush (the generation is kept; readers wait) and it is tried again
//! with capped backoff; nothing ends the process but a stop, a fatal error,
//! or — for a bounded source (files, a generator) — every shard finished.

mod job;
mod leases;
mod reader;

use crate::aggregate::{Aggregator, BatchCounts, Generation, IdentityCollision, Rejected};
use crate::deadletter::DeadLetters;
use crate::decode::DecodeLimits;
use crate::flush::{FlushError, Flusher};
use crate::source::{RecordBatch, Source, SourceError, StartAt};
use job::FlushJob;
use reader::{ReaderHandle, ShardTask};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use thiserror::Error;
use tokio::sync::{mpsc, watch, Notify, RwLock};
use tokio_util::sync::CancellationToken;
use zigzag_core::retry::Retryable;
use zigzag_core::table::SortedTable;
use zigzag_lease::{Coordinator, LeaseError, LeaseOptions, Plan, Ready, ShardRange};
use zigzag_model::{Config, ConfigError, KeyModel, Position};

#[derive(Debug, Error)]
pub enum PipelineError {
    #[error("source: {0}")]
    Source(#[from] SourceError),
    #[error("flush: {0}")]
    Flush(#[from] FlushError),
    #[error("lease table: {0}")]
    Lease(#[from] LeaseError),
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("shard {shard}: the source ends at {reached:?} but a flush to recover covers up to {end}")]
    MissingRecords { shard: String, end: Box<Position>, reached: Option<Box<Position>> },
    #[error("dead-letter file {path}: {error}")]
    DeadLetter { path: PathBuf, error: std::io::Error },
    #[error(transparent)]
    Collision(#[from] IdentityCollision),
    #[error(
        "lane {lane}: flush {flush} was begun under another configuration (rollups, dimensions, measures or \
         scatter changed); run once with the previous configuration to finish it, then change it"
    )]
    LayoutChanged { lane: u32, flush: u64 },
    #[error(
        "the final flush did not complete before giving up ({0}); the leases expire and another worker recovers it"
    )]
    FinalFlush(Box<PipelineError>),
}

impl Retryable for PipelineError {
    fn is_retryable(&self) -> bool {
        match self {
            PipelineError::Source(e) => e.is_retryable(),
            PipelineError::Flush(e) => e.is_retryable(),
            PipelineError::Lease(e) => e.is_retryable(),
            _ => false,
        }
    }
}

#[derive(Debug, Clone)]
pub struct PipelineOptions {
    pub config: Config,
    /// The stream's name in the lease table.
    pub stream: String,
    /// This worker's id, unique among live workers (see `worker_id`).
    pub worker: String,
    /// A worker whose heartbeat has not moved this long is presumed dead.
    pub failover: Duration,
    /// The stream's shards are listed again this often (and when one ends).
    pub relist: Duration,
    /// Stop once every held shard has been caught up this long and no lease
    /// is waiting to be taken.
    pub idle_exit: Option<Duration>,
    /// The longest pause between attempts while a store or stream is down.
    pub max_pause: Duration,
    pub limits: DecodeLimits,
    /// Records per source read.
    pub batch_size: usize,
    pub dead_letters: PathBuf,
}

impl PipelineOptions {
    pub fn new(config: Config, stream: impl Into<String>, worker: impl Into<String>, dead_letters: PathBuf) -> Self {
        PipelineOptions {
            config,
            stream: stream.into(),
            worker: worker.into(),
            failover: Duration::from_secs(10),
            relist: Duration::from_secs(30),
            idle_exit: None,
            max_pause: Duration::from_secs(30),
            limits: DecodeLimits::default(),
            batch_size: 1000,
            dead_letters,
        }
    }
}

/// A worker id unique per process: the host name and random bits.
pub fn worker_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".into());
    format!("{host}-{:08x}", rand::random::<u32>())
}

/// What a run did, for the summary line and the benchmarks.
#[derive(Debug, Clone, Default)]
pub struct RunSummary {
    /// Shards this worker read.
    pub shards: usize,
    pub records: u64,
    pub valid: u64,
    pub rejected: u64,
    pub flushes: u64,
    /// Dead workers' flushes this worker finished.
    pub recovered: u64,
    pub items: u64,
    pub write_requests: u64,
    pub skipped: u64,
    /// Requests to the lease table (heartbeats, passes, intents, checkpoints).
    pub lease_requests: u64,
    pub retries: u64,
    pub leases_taken: u64,
    pub leases_lost: u64,
    pub leases_handed_off: u64,
    pub per_prefix: Vec<u64>,
    pub max_generation_keys: u64,
    /// Times a flush was paused by an outage (and tried again later).
    pub flush_pauses: u64,
    /// Times a shard's reading was paused by an outage.
    pub shard_pauses: u64,
    /// Heartbeats and lease passes that failed (outages of the lease table
    /// or of ListShards); the worker went on.
    pub lease_failures: u64,
}

/// Read progress of one shard within a generation.
#[derive(Debug, Default, Clone, Copy)]
struct Progress {
    first: Option<Position>,
    last: Option<Position>,
    ended: bool,
    /// MillisBehindLatest of the last read.
    behind_ms: Option<i64>,
}

/// Everything read since the last swap.
#[derive(Default)]
struct Batch {
    gen: Generation,
    rejected: Mutex<Vec<(u32, Rejected)>>,
    /// By shard index.
    progress: Mutex<HashMap<u32, Progress>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Default)]
struct Counters {
    records: AtomicU64,
    valid: AtomicU64,
    rejected: AtomicU64,
    max_keys_seen: AtomicU64,
    recovered: AtomicU64,
    flush_pauses: AtomicU64,
    shard_pauses: AtomicU64,
}

impl Counters {
    fn add(&self, batch: &RecordBatch, counts: BatchCounts) {
        self.records.fetch_add(batch.records.len() as u64, Ordering::Relaxed);
        self.valid.fetch_add(counts.valid, Ordering::Relaxed);
        self.rejected.fetch_add(counts.rejected, Ordering::Relaxed);
        metrics::counter!("zigzag_ingest_records_total").increment(batch.records.len() as u64);
    }
}

/// The closed set of things the main loop reacts to.
#[derive(Debug)]
enum Event {
    /// The flush interval passed.
    Tick,
    /// The generation reached `max_keys`.
    GenerationFull,
    /// A reader aggregated its shard's last record (shard index).
    ShardEnded(u32),
    /// A lease pass finished: leases gained, lost, asked for; lanes to
    /// recover. `read_at`: when it began reading the table.
    Leases {
        plan: Plan,
        read_at: Instant,
    },
    /// This worker's lane (held since its join number `joined`) was taken:
    /// it was presumed dead.
    LaneLost {
        lane: u32,
        joined: u64,
    },
    /// Everything to read has been written: stop once drained.
    ProducerDone,
    /// A reader met an error that retrying cannot fix.
    SourceFailed {
        shard: String,
        error: SourceError,
    },
    Stop,
}

/// A shard this worker reads, or read and has not yet let go of.
struct Shard {
    id: String,
    lease: u64,
    /// The last position known committed (or, once flushed, the end).
    checkpoint: Option<Position>,
    reader: Option<ReaderHandle>,
    /// Give the lease to this worker after the next flush.
    leaving: Option<String>,
    ended: bool,
}

/// A shard let go of (finished, lost, given, or dropped by a rejoin), so
/// that a plan read before that does not start it again; a plan read after
/// it sees the table as it is and may.
#[derive(Debug, Clone, Copy)]
struct Tombstone {
    at: Instant,
    finished: bool,
}

impl Tombstone {
    fn now(finished: bool) -> Self {
        Tombstone { at: Instant::now(), finished }
    }
}

pub struct Pipeline {
    source: Arc<dyn Source>,
    flusher: Flusher,
    aggregator: Aggregator,
    coord: Arc<Coordinator>,
    lease_table: Arc<dyn SortedTable>,
    opts: PipelineOptions,
    /// `Config::layout_digest` of the configuration writing the items.
    layout: String,
    dead: Mutex<DeadLetters>,
    counters: Counters,
}

/// The main loop's state.
struct Run {
    shards: BTreeMap<u32, Shard>,
    tombstones: HashMap<String, Tombstone>,
    next_index: u32,
    gate: Arc<RwLock<Batch>>,
    swapped_tx: watch::Sender<u64>,
    swaps: u64,
    full: Arc<Notify>,
    events_tx: mpsc::UnboundedSender<Event>,
    poke: Arc<Notify>,
    job: Option<FlushJob>,
    job_failures: u32,
    retry_at: Option<Instant>,
    last_plan: Option<Plan>,
    drain_after: Option<Instant>,
    shards_read: std::collections::HashSet<String>,
}

impl Pipeline {
    /// `aggregates` holds the items; `leases` the lease table (shard leases
    /// and lanes; a table of its own, or the same store).
    pub fn new(
        source: Arc<dyn Source>,
        aggregates: Arc<dyn SortedTable>,
        leases: Arc<dyn SortedTable>,
        opts: PipelineOptions,
    ) -> Result<Self, PipelineError> {
        let keys = KeyModel::new(&opts.config)?;
        let aggregator = Aggregator::new(&keys, opts.limits);
        let flusher = Flusher::new(keys, &opts.config, aggregates);
        let dead = DeadLetters::open(&opts.dead_letters)
            .map_err(|error| PipelineError::DeadLetter { path: opts.dead_letters.clone(), error })?;
        let lease_opts =
            LeaseOptions { failover: opts.failover, ..LeaseOptions::new(opts.stream.clone(), opts.worker.clone()) };
        Ok(Pipeline {
            source,
            flusher,
            aggregator,
            coord: Arc::new(Coordinator::new(leases.clone(), lease_opts)),
            lease_table: leases,
            layout: opts.config.layout_digest(),
            opts,
            dead: Mutex::new(dead),
            counters: Counters::default(),
        })
    }

    pub fn coordinator(&self) -> &Arc<Coordinator> {
        &self.coord
    }

    /// The pause before attempt `failures + 1` after an outage: 1 s
    /// doubling to `max_pause`.
    fn pause_after(&self, failures: u32) -> Duration {
        let base = Duration::from_secs(1).saturating_mul(1 << failures.saturating_sub(1).min(10));
        base.min(self.opts.max_pause)
    }

    /// Runs until `stop` is cancelled (or, on a bounded source, until every
    /// shard is finished), then flushes, hands its leases back and leaves.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) -> Result<RunSummary, PipelineError> {
        self.run_until_drained(stop, CancellationToken::new()).await
    }

    /// [`Self::run`], also ending once drained: after `producer_done` is
    /// cancelled, every shard this worker reads was found at its tip (no
    /// records, MillisBehindLatest 0) by a read that began after that, no
    /// lease waits to be taken, and everything read is committed. A slow
    /// machine makes this take longer, never stop early.
    pub async fn run_until_drained(
        self: Arc<Self>,
        stop: CancellationToken,
        producer_done: CancellationToken,
    ) -> Result<RunSummary, PipelineError> {
        zigzag_lease::legacy::migrate(&self.lease_table, &self.opts.stream).await?;
        self.join(&stop).await?;
        let (events_tx, mut events) = mpsc::unbounded_channel();
        let background = stop.child_token();
        let poke = Arc::new(Notify::new());
        tokio::spawn(leases::heartbeat(self.coord.clone(), events_tx.clone(), background.clone()));
        tokio::spawn(leases::passes(
            self.coord.clone(),
            self.source.clone(),
            self.opts.relist,
            events_tx.clone(),
            poke.clone(),
            background.clone(),
        ));
        let (swapped_tx, _) = watch::channel(0u64);
        let mut run = Run {
            shards: BTreeMap::new(),
            tombstones: HashMap::new(),
            next_index: 0,
            gate: Arc::new(RwLock::new(Batch::default())),
            swapped_tx,
            swaps: 0,
            full: Arc::new(Notify::new()),
            events_tx,
            poke,
            job: None,
            job_failures: 0,
            retry_at: None,
            last_plan: None,
            drain_after: None,
            shards_read: Default::default(),
        };
        let result = self.main_loop(&mut run, &mut events, &stop, &producer_done).await;
        let result = match result {
            Ok(()) => self.shutdown(&mut run).await,
            Err(e) => {
                for (_, s) in std::mem::take(&mut run.shards) {
                    if let Some(r) = s.reader {
                        r.stop().await;
                    }
                }
                Err(e)
            }
        };
        background.cancel();
        result.map(|()| self.summary(run.shards_read.len()))
    }

    /// Takes a lane, waiting out an outage.
    async fn join(&self, stop: &CancellationToken) -> Result<(), PipelineError> {
        let mut failures = 0;
        loop {
            match self.coord.join().await {
                Ok(_) => return Ok(()),
                Err(e) if e.is_retryable() && !stop.is_cancelled() => {
                    failures += 1;
                    let wait = self.pause_after(failures);
                    tracing::warn!(error = %e, retry_in_s = wait.as_secs_f64(), "cannot join: lease table unavailable");
                    tokio::time::sleep(wait).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    async fn main_loop(
        self: &Arc<Self>,
        run: &mut Run,
        events: &mut mpsc::UnboundedReceiver<Event>,
        stop: &CancellationToken,
        producer_done: &CancellationToken,
    ) -> Result<(), PipelineError> {
        let mut interval = tokio::time::interval(Duration::from_millis(self.opts.config.flush.interval_ms));
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        interval.tick().await;
        loop {
            let event = tokio::select! {
                _ = stop.cancelled() => Event::Stop,
                _ = interval.tick() => Event::Tick,
                _ = run.full.notified() => Event::GenerationFull,
                _ = producer_done.cancelled(), if run.drain_after.is_none() => Event::ProducerDone,
                Some(e) = events.recv() => e,
            };
            match event {
                Event::Tick | Event::GenerationFull => self.flush_step(run).await?,
                Event::ShardEnded(index) => {
                    if let Some(s) = run.shards.get_mut(&index) {
                        s.ended = true;
                        s.reader = None;
                    }
                    // Commit its end promptly, then look for its children.
                    self.flush_step(run).await?;
                }
                Event::Leases { plan, read_at } => {
                    self.on_plan(run, &plan, read_at).await?;
                    let finished = self.source.bounded() && plan.unfinished == 0 && run.job.is_none();
                    run.last_plan = Some(plan);
                    if finished && run.shards.values().all(|s| s.reader.is_none()) {
                        tracing::info!("every shard is finished");
                        return Ok(());
                    }
                }
                // A loss reported twice (heartbeat and flush) rejoins once: a
                // report about an earlier join is stale.
                Event::LaneLost { lane, joined } if joined == self.coord.joined() => {
                    self.rejoin(run, lane, stop).await?
                }
                Event::LaneLost { .. } => {}
                Event::SourceFailed { shard, error } => {
                    tracing::error!(shard = %shard, error = %error, "shard failed");
                    return Err(error.into());
                }
                Event::ProducerDone => run.drain_after = Some(Instant::now()),
                Event::Stop => return Ok(()),
            }
            if self.idle_long_enough(run) {
                tracing::info!("every held shard is caught up: stopping");
                return Ok(());
            }
            if self.drained(run) {
                tracing::info!("drained: every held shard was read to its tip");
                return Ok(());
            }
        }
    }

    /// `--idle-exit`: every shard read here has been at its tip for the
    /// idle time, everything read is flushed, and no lease waits.
    fn idle_long_enough(&self, run: &Run) -> bool {
        let Some(idle) = self.opts.idle_exit else { return false };
        self.settled(run)
            && run.shards.values().filter_map(|s| s.reader.as_ref()).all(|r| {
                let c = lock(&r.caught_up);
                c.since.is_some_and(|t| t.elapsed() >= idle)
            })
    }

    /// Drained (see [`Pipeline::run_until_drained`]): every shard read here
    /// was found at its tip by a read that began after `after`.
    fn drained(&self, run: &Run) -> bool {
        let Some(after) = run.drain_after else { return false };
        self.settled(run)
            && run.shards.values().filter_map(|s| s.reader.as_ref()).all(|r| {
                let c = lock(&r.caught_up);
                c.last.is_some_and(|t| t >= after)
            })
    }

    /// Nothing unflushed, and no lease waiting to be taken.
    fn settled(&self, run: &Run) -> bool {
        let waiting = run.last_plan.as_ref().is_none_or(|p| !p.take.is_empty() || p.steal.is_some());
        !waiting && run.job.is_none() && lock_progress_empty(&run.gate)
    }

    /// Reconciles a lease plan with what this worker reads.
    async fn on_plan(self: &Arc<Self>, run: &mut Run, plan: &Plan, read_at: Instant) -> Result<(), PipelineError> {
        // Lost: held here, not (or under another counter) in the table.
        let lost: Vec<u32> =
            run.shards.iter().filter(|(_, s)| plan.held.get(&s.id) != Some(&s.lease)).map(|(i, _)| *i).collect();
        for index in lost {
            let s = run.shards.remove(&index).expect("listed above");
            tracing::warn!(shard = %s.id, "lease lost: reading stops; unflushed records are left to the new owner");
            metrics::counter!("zigzag_lease_lost_total").increment(1);
            if let Some(r) = s.reader {
                r.stop().await;
            }
            run.tombstones.insert(s.id, Tombstone::now(false));
        }
        // Asked for: stop reading; the lease goes after the next flush.
        for (shard, lease, to) in &plan.handoffs {
            if let Some(s) = run.shards.values_mut().find(|s| &s.id == shard && s.lease == *lease) {
                if s.leaving.is_none() {
                    tracing::info!(shard = %shard, to = %to, "handing a lease over after the next flush");
                    if let Some(r) = s.reader.take() {
                        r.stop().await;
                    }
                    s.leaving = Some(to.clone());
                }
            }
        }
        for ready in &plan.ready {
            self.start_reader(run, ready, read_at);
        }
        for &lane in &plan.recover {
            match self.recover(lane).await {
                Ok(true) => {
                    self.counters.recovered.fetch_add(1, Ordering::Relaxed);
                    run.poke.notify_one();
                }
                Ok(false) => {}
                // Another worker took the lane over (it finishes the flush),
                // or the store or the stream is down (tried again later: the
                // lane expires once more and is taken again).
                Err(e)
                    if e.is_retryable()
                        || matches!(
                            e,
                            PipelineError::MissingRecords { .. } | PipelineError::Lease(LeaseError::LaneLost { .. })
                        ) =>
                {
                    self.coord.abandon_recovery(lane);
                    tracing::warn!(lane, error = %e, "recovering a dead worker's flush failed; trying again later");
                }
                Err(e) => return Err(e),
            }
        }
        if run.job.is_none() && run.shards.values().any(|s| s.leaving.is_some()) {
            self.flush_step(run).await?;
        }
        Ok(())
    }

    fn start_reader(self: &Arc<Self>, run: &mut Run, ready: &Ready, read_at: Instant) {
        if run.shards.values().any(|s| s.id == ready.shard) {
            return;
        }
        if let Some(t) = run.tombstones.get(&ready.shard) {
            if t.finished || read_at < t.at {
                return; // a plan read before this worker let it go
            }
            run.tombstones.remove(&ready.shard);
        }
        let start = match (ready.checkpoint, ready.from_trim_horizon) {
            (Some(p), _) => StartAt::After(p),
            (None, true) => StartAt::TrimHorizon,
            (None, false) => StartAt::Configured,
        };
        let index = run.next_index;
        run.next_index += 1;
        let task = ShardTask {
            pipeline: self.clone(),
            index,
            id: ready.shard.clone(),
            start,
            gate: run.gate.clone(),
            swapped: run.swapped_tx.subscribe(),
            full: run.full.clone(),
            cancel: CancellationToken::new(),
            caught_up: Arc::default(),
            events: run.events_tx.clone(),
        };
        tracing::info!(shard = %ready.shard, lease = ready.lease, ?start, "reading");
        metrics::gauge!("zigzag_ingest_shard_reading", "shard" => ready.shard.clone()).set(1.0);
        run.shards_read.insert(ready.shard.clone());
        run.shards.insert(
            index,
            Shard {
                id: ready.shard.clone(),
                lease: ready.lease,
                checkpoint: ready.checkpoint,
                reader: Some(task.spawn()),
                leaving: None,
                ended: false,
            },
        );
    }

    /// One step of the flush cycle: drive the flush in flight (when its
    /// pause is over), or swap out the generation and start one.
    async fn flush_step(&self, run: &mut Run) -> Result<(), PipelineError> {
        if run.job.is_none() {
            run.job = self.swap(run).await;
            if run.job.is_none() {
                self.after_flush(run, &[]).await?;
                return Ok(());
            }
        }
        if run.retry_at.is_some_and(|t| Instant::now() < t) {
            return Ok(());
        }
        let job = run.job.as_mut().expect("a job");
        match job.drive(self).await {
            Ok(()) => {
                let job = run.job.take().expect("a job");
                run.job_failures = 0;
                run.retry_at = None;
                metrics::gauge!("zigzag_ingest_flush_paused").set(0.0);
                // A range the proof dropped: the lease moved on (lost, or this
                // reader started from a stale checkpoint). Stop it; a plan read
                // from now on says whether and where to read it again.
                for index in self.flushed(run, &job) {
                    if let Some(s) = run.shards.remove(&index) {
                        tracing::warn!(shard = %s.id, "range dropped by the flush's proof: reading stops");
                        if let Some(r) = s.reader {
                            r.stop().await;
                        }
                        run.tombstones.insert(s.id, Tombstone::now(false));
                    }
                }
                let began = job.began.expect("driven");
                self.after_flush(run, &began.ranges).await
            }
            Err(e) if e.is_retryable() => {
                run.job_failures += 1;
                let wait = self.pause_after(run.job_failures);
                run.retry_at = Some(Instant::now() + wait);
                metrics::gauge!("zigzag_ingest_flush_paused").set(1.0);
                metrics::counter!("zigzag_ingest_flush_pauses_total").increment(1);
                self.counters.flush_pauses.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, retry_in_s = wait.as_secs_f64(), "flush paused: store unavailable");
                Ok(())
            }
            Err(PipelineError::Lease(LeaseError::LaneLost { lane, .. })) => {
                let never = CancellationToken::new();
                self.rejoin(run, lane, &never).await
            }
            Err(e) => Err(e),
        }
    }

    /// Swaps the generation out; a job if any shard made progress.
    async fn swap(&self, run: &mut Run) -> Option<FlushJob> {
        let has_progress = !lock_progress_empty(&run.gate);
        if !has_progress {
            return None;
        }
        let batch = std::mem::take(&mut *run.gate.write().await);
        run.swaps += 1;
        let _ = run.swapped_tx.send(run.swaps);
        self.counters.max_keys_seen.fetch_max(batch.gen.len() as u64, Ordering::Relaxed);
        let progress = lock(&batch.progress).clone();
        let mut ranges = Vec::new();
        for (index, p) in progress {
            let Some(s) = run.shards.get(&index) else { continue };
            let to = p.last.or(s.checkpoint).unwrap_or_default();
            let first = if s.checkpoint.is_none() { p.first } else { None };
            let range = ShardRange {
                shard: s.id.clone(),
                lease: s.lease,
                from: s.checkpoint,
                first,
                to,
                ends: p.ended,
                behind_ms: p.behind_ms,
            };
            ranges.push((index, range));
        }
        Some(FlushJob::new(batch, ranges))
    }

    /// After a flush commits: advance the shards, let go of the finished,
    /// lost and leaving ones.
    fn flushed(&self, run: &mut Run, job: &FlushJob) -> Vec<u32> {
        let began = job.began.as_ref().expect("driven");
        let mut dropped = Vec::new();
        for (index, r) in &job.ranges {
            let Some(s) = run.shards.get_mut(index) else { continue };
            if !began.ranges.iter().any(|k| k.shard == r.shard) {
                dropped.push(*index);
            } else {
                s.checkpoint = Some(r.to);
                if r.ends {
                    let s = run.shards.remove(index).expect("present");
                    run.tombstones.insert(s.id, Tombstone::now(true));
                }
            }
        }
        let ms = job.started.elapsed();
        metrics::counter!("zigzag_ingest_flushes_total").increment(1);
        metrics::histogram!("zigzag_ingest_flush_seconds").record(ms.as_secs_f64());
        metrics::gauge!("zigzag_ingest_generation_keys").set(job.keys as f64);
        tracing::info!(
            keys = job.keys,
            lane = began.lane,
            k = began.k,
            shards = began.ranges.len(),
            records = self.counters.records.load(Ordering::Relaxed),
            dead_letters = self.counters.rejected.load(Ordering::Relaxed),
            write_requests = self.flusher.stats.write_requests.load(Ordering::Relaxed),
            ms = ms.as_millis() as u64,
            "flushed"
        );
        dropped
    }

    /// Gives the leases asked for (their progress is committed) and pokes
    /// the lease pass when something changed hands or finished.
    async fn after_flush(&self, run: &mut Run, committed: &[ShardRange]) -> Result<(), PipelineError> {
        let leaving: Vec<u32> = run.shards.iter().filter(|(_, s)| s.leaving.is_some()).map(|(i, _)| *i).collect();
        let mut changed = committed.iter().any(|r| r.ends);
        for index in leaving {
            let s = run.shards.get(&index).expect("listed");
            let to = s.leaving.clone().unwrap_or_default();
            match self.coord.give(&s.id, s.lease, &to).await {
                Ok(_) => {}
                Err(e) if e.is_retryable() => {
                    tracing::warn!(shard = %s.id, error = %e, "handing over failed; trying again after the next flush");
                    continue;
                }
                Err(e) => return Err(e.into()),
            }
            let s = run.shards.remove(&index).expect("listed");
            run.tombstones.insert(s.id, Tombstone::now(false));
            changed = true;
        }
        if changed {
            run.poke.notify_one();
        }
        Ok(())
    }

    /// This worker was presumed dead and its lane taken: everything in
    /// memory is dropped (another worker recovers or re-reads it) and the
    /// worker joins again as new.
    async fn rejoin(&self, run: &mut Run, lane: u32, stop: &CancellationToken) -> Result<(), PipelineError> {
        tracing::warn!(lane, "this worker's lane was taken (it was presumed dead): dropping its state and rejoining");
        for (_, s) in std::mem::take(&mut run.shards) {
            if let Some(r) = s.reader {
                r.stop().await;
            }
            // Leases still ours are read again from their checkpoints once a
            // plan read after this shows them (the dead lane's flush, if any,
            // blocks them until it is recovered).
            run.tombstones.insert(s.id, Tombstone::now(false));
        }
        run.job = None;
        run.retry_at = None;
        *run.gate.write().await = Batch::default();
        run.swaps += 1;
        let _ = run.swapped_tx.send(run.swaps);
        self.join(stop).await?;
        run.poke.notify_one();
        Ok(())
    }

    /// Stop: readers end after their batch, the last flush commits
    /// everything read, the leases go back (or to whoever asked), the lane
    /// is freed.
    async fn shutdown(&self, run: &mut Run) -> Result<(), PipelineError> {
        for s in run.shards.values_mut() {
            if let Some(r) = s.reader.take() {
                r.stop().await;
            }
        }
        let deadline = Instant::now() + self.opts.failover * 2;
        loop {
            run.retry_at = None;
            self.flush_step(run).await?;
            if run.job.is_none() && lock_progress_empty(&run.gate) {
                break;
            }
            if Instant::now() >= deadline {
                return Err(PipelineError::FinalFlush(Box::new(PipelineError::Source(SourceError::Unavailable(
                    "the store stayed unavailable".into(),
                )))));
            }
            tokio::time::sleep(self.pause_after(run.job_failures).min(Duration::from_secs(2))).await;
        }
        for (_, s) in std::mem::take(&mut run.shards) {
            let to = s.leaving.as_deref().unwrap_or("");
            if let Err(e) = self.coord.give(&s.id, s.lease, to).await {
                tracing::warn!(shard = %s.id, error = %e, "could not release a lease; it expires instead");
            }
        }
        if let Err(e) = self.coord.leave().await {
            tracing::warn!(error = %e, "could not free the lane; it expires instead");
        }
        Ok(())
    }

    fn write_dead_letters<'a>(
        &self,
        batch: &Batch,
        shard_of: impl Fn(u32) -> Option<&'a str>,
    ) -> Result<(), PipelineError> {
        let rejected = lock(&batch.rejected);
        if rejected.is_empty() {
            return Ok(());
        }
        let mut dead = lock(&self.dead);
        let path = dead.path().to_path_buf();
        let io = |error| PipelineError::DeadLetter { path: path.clone(), error };
        for (index, r) in rejected.iter() {
            let Some(shard) = shard_of(*index) else { continue };
            dead.write(shard, r).map_err(io)?;
            metrics::counter!("zigzag_ingest_dead_letters_total", "reason" => r.error.reason()).increment(1);
        }
        dead.sync().map_err(io)
    }

    fn summary(&self, shards: usize) -> RunSummary {
        let s = &self.flusher.stats;
        let l = &self.coord.stats;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RunSummary {
            shards,
            records: get(&self.counters.records),
            valid: get(&self.counters.valid),
            rejected: get(&self.counters.rejected),
            flushes: get(&s.flushes),
            recovered: get(&self.counters.recovered),
            items: get(&s.items),
            write_requests: get(&s.write_requests),
            skipped: get(&s.skipped),
            lease_requests: get(&l.requests),
            retries: get(&s.retries) + get(&l.retries),
            leases_taken: get(&l.taken),
            leases_lost: get(&l.lost),
            leases_handed_off: get(&l.handed_off),
            per_prefix: s.per_prefix.iter().map(get).collect(),
            max_generation_keys: get(&self.counters.max_keys_seen),
            flush_pauses: get(&self.counters.flush_pauses),
            shard_pauses: get(&self.counters.shard_pauses),
            lease_failures: get(&l.heartbeat_failures) + get(&l.pass_failures),
        }
    }
}

fn lock_progress_empty(gate: &RwLock<Batch>) -> bool {
    match gate.try_read() {
        Ok(b) => lock(&b.progress).is_empty(),
        Err(_) => false,
    }
}

#[cfg(test)]
mod send_checks {
    use super::*;
    fn is_send<T: Send>(_: &T) {}

    #[allow(dead_code)]
    fn futures_are_send(p: Arc<Pipeline>, merged: &crate::flush::Merged, job: &mut FlushJob) {
        is_send(&p.flusher.write(merged, crate::flush::Writer { lane: 0, k: 1 }));
        is_send(&job.drive(&p));
        is_send(&zigzag_lease::legacy::migrate(&p.lease_table, "s"));
        is_send(&p.coord.pass(None));
        is_send(&p.recover(0));
        is_send(&p.clone().run(CancellationToken::new()));
    }
}
