//! The long-lived worker: one task per held shard reads and aggregates
//! (source → decode → aggregate, `reader`); the main loop (`main_loop`)
//! swaps the generation out on an interval or when it holds `max_keys` keys
//! or `max_memory_mb` of memory,
//! and flushes it (`flushing`, `job`: intent → items → commit →
//! checkpoints); the lease crate's two background loops keep the lease
//! protocol going (`zigzag_lease::lifecycle`: heartbeat and lease passes,
//! reported here as events). `options`: what a worker is told
//! and what it reports; `counters`: what it counts (the run summary,
//! readiness). Memory stays bounded at about two generations: readers
//! wait while a full one is being written, and nothing is dropped.
//!
//! The main loop is a loop over `Event`s. It reconciles each lease plan
//! with what it reads: a lease gained starts a reader, a lease lost stops
//! one (its unflushed records are dropped at the next flush and read again
//! by the new owner), a handoff request stops the reader, flushes, and gives
//! the lease; a dead worker's flush in flight is recovered. An outage pauses
//! the flush (the generation is kept; readers wait) and it is tried again
//! with capped backoff; nothing ends the process but a stop, a fatal error,
//! or — for a bounded source (files, a generator) — every shard finished.

mod adoption;
mod cadence;
mod counters;
mod error;
mod flushing;
mod job;
mod main_loop;
mod older;
mod options;
mod reader;

pub use adoption::run_adopting;
pub use error::PipelineError;
pub use options::{worker_id, PipelineOptions, RunSummary};

use crate::aggregate::{Aggregator, Generation, Rejected};
use crate::deadletter::DeadLetters;
use crate::flush::Flusher;
use crate::source::{Source, SourceError};
use counters::Counters;
use job::FlushJob;
use reader::ReaderHandle;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch, Notify, RwLock};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use zigzag_core::table::SortedTable;
use zigzag_lease::lifecycle::{self, LeaseEvent};
use zigzag_lease::{Checkpoint, Coordinator, LeaseError, LeaseOptions, Plan};
use zigzag_model::{Position, Projections};

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
    /// The seal its records are read under (`zigzag_lease::seal`): events
    /// before it are rejected. Changed only by a swap that writes every
    /// item set, so nothing read under an older seal waits in memory.
    seal: i64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the lease loops (`zigzag_lease::lifecycle`) report.
impl From<LeaseEvent> for Event {
    fn from(e: LeaseEvent) -> Event {
        match e {
            LeaseEvent::Plan { plan, read_at } => Event::Leases { plan, read_at },
            LeaseEvent::LaneLost { lane, joined } => Event::LaneLost { lane, joined },
            LeaseEvent::Fatal(e) => Event::Fatal(e),
        }
    }
}

/// The closed set of things the main loop reacts to.
#[derive(Debug)]
enum Event {
    /// The flush interval passed.
    Tick,
    /// The generation reached `max_keys` keys or `max_memory_mb`.
    GenerationFull,
    /// A reader aggregated its shard's last record (shard index).
    ShardEnded(u32),
    /// A lease pass finished: leases gained, lost, asked for; lanes to
    /// recover. `read_at`: when it began reading the table.
    Leases {
        plan: Box<Plan>,
        read_at: Instant,
    },
    /// This worker's lane (held since its join number `joined`) was taken:
    /// it was presumed dead.
    LaneLost {
        lane: u32,
        joined: u64,
    },
    /// A lease error no retry fixes: a later process with this worker id
    /// holds a live lane, or the stream was recreated under the worker.
    /// Stop, leaving everything unflushed to whoever reads next.
    Fatal(LeaseError),
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
    /// Per item set, the last position known committed.
    checkpoint: Checkpoint,
    /// The seal its checkpoint's records were read under (a catch-up
    /// reads the sets behind under it).
    seal: i64,
    /// When its sets are apart, the event times of the records the ones
    /// behind do not hold yet (`zigzag_lease::owed`; None: unknown, as for
    /// a shard taken apart, until its catch-up).
    owed: Option<zigzag_lease::owed::Owed>,
    /// The last record aggregated (into the generation or waiting in a
    /// slower cadence's memory).
    read_to: Option<Position>,
    /// Its sets are apart: the ones behind are written from the stream
    /// first (`cadence.rs`); it is read once they are not.
    catching_up: bool,
    /// A catch-up that failed is tried again after this (the shard alone
    /// waits; other shards' flushes go on).
    catch_up_after: Option<Instant>,
    catch_up_failures: u32,
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

    /// Let go of after `read_at`: a plan read then predates it.
    fn after(&self, read_at: Instant) -> bool {
        read_at < self.at
    }
}

pub struct Pipeline {
    source: Arc<dyn Source>,
    flusher: Flusher,
    /// The item sets' cadences and the records waiting for the slower ones.
    cadences: Mutex<cadence::Cadences>,
    aggregator: Aggregator,
    coord: Arc<Coordinator>,
    aggregates: Arc<dyn SortedTable>,
    opts: PipelineOptions,
    /// `Config::layout_digest` of the configuration writing the items.
    layout: String,
    /// The layout version it writes (`zigzag_model::versions`), once joined.
    version: std::sync::atomic::AtomicU32,
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
    /// When the last plan began reading the table.
    last_plan_read_at: Option<Instant>,
    /// When a shard this worker read last reached its end.
    finished_at: Option<Instant>,
    drain_after: Option<Instant>,
    shards_read: std::collections::HashSet<String>,
    /// Stopping: the flushes write every item set.
    stopping: bool,
    /// The seal acknowledged on this worker's lane (`flushing.rs`).
    acknowledged: i64,
    /// When a newer layout version was last asked for (`adoption.rs`).
    layout_checked: Instant,
    /// A newer layout version was announced: stop, to go on under it.
    adopt: Option<u32>,
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
        let projections = Projections::new(&opts.config)?;
        let decoder = crate::decode::Decoder::new(&opts.config, opts.limits)?;
        let aggregator = Aggregator::new(&projections, decoder, opts.config.measure_set()?);
        let flusher = Flusher::new(projections, &opts.config, aggregates.clone())?.with_retry(opts.retry);
        // The waiting records may hold a quarter of the memory bound.
        let budget = opts.config.flush.max_memory_mb.saturating_mul(1 << 20) / 4;
        let interval = Duration::from_millis(opts.config.flush.interval_ms);
        let cadences = Mutex::new(cadence::Cadences::new(&flusher, interval, budget));
        let dead = DeadLetters::open(&opts.dead_letters)
            .map_err(|error| PipelineError::DeadLetter { path: opts.dead_letters.clone(), error })?;
        let lease_opts = LeaseOptions {
            failover: opts.failover,
            retry: opts.retry,
            ..LeaseOptions::new(opts.stream.clone(), opts.worker.clone())
        };
        Ok(Pipeline {
            source,
            flusher,
            cadences,
            aggregator,
            coord: Arc::new(Coordinator::new(leases, lease_opts)),
            aggregates,
            layout: opts.config.layout_digest(),
            version: Default::default(),
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
        self.opts.outage().pause_after(failures)
    }

    /// The batch a run starts with: its generation's flushed maps are kept
    /// for the next ones up to an eighth of the memory bound.
    fn first_batch(&self) -> Batch {
        let budget = self.opts.config.flush.max_memory_mb.saturating_mul(1 << 20) / 8;
        Batch { gen: Generation::with_spare(budget), seal: self.coord.seal_seen(), ..Default::default() }
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
        // Every log line of the run names its worker (and a shard task's,
        // its shard: `reader.rs`), in text and in JSON.
        let span = tracing::info_span!("worker", worker = %self.opts.worker);
        self.drain(stop, producer_done).instrument(span).await
    }

    async fn drain(
        self: Arc<Self>,
        stop: CancellationToken,
        producer_done: CancellationToken,
    ) -> Result<RunSummary, PipelineError> {
        self.join(&stop).await?;
        let (events_tx, mut events) = mpsc::unbounded_channel();
        // The heartbeat runs until the lane is left, through the final flush
        // after a stop (a flush longer than the failover must not get the
        // lane taken as dead); the passes stop with `stop`, and are awaited
        // before the shutdown lets go of the leases, so none is taken after.
        let heartbeat = CancellationToken::new();
        let taking = stop.child_token();
        let poke = Arc::new(Notify::new());
        let beating = tokio::spawn(
            lifecycle::heartbeat(self.coord.clone(), events_tx.clone(), heartbeat.clone()).in_current_span(),
        );
        let passes = tokio::spawn(
            lifecycle::passes(
                self.coord.clone(),
                self.source.clone(),
                self.opts.relist,
                events_tx.clone(),
                poke.clone(),
                taking.clone(),
            )
            .in_current_span(),
        );
        let (swapped_tx, _) = watch::channel(0u64);
        let mut run = Run {
            shards: BTreeMap::new(),
            tombstones: HashMap::new(),
            next_index: 0,
            gate: Arc::new(RwLock::new(self.first_batch())),
            swapped_tx,
            swaps: 0,
            full: Arc::new(Notify::new()),
            events_tx,
            poke,
            job: None,
            job_failures: 0,
            retry_at: None,
            last_plan: None,
            last_plan_read_at: None,
            finished_at: None,
            drain_after: None,
            shards_read: Default::default(),
            stopping: false,
            acknowledged: self.coord.seal_seen(),
            layout_checked: Instant::now(),
            adopt: None,
        };
        let result = self.main_loop(&mut run, &mut events, &stop, &producer_done).await;
        let result = match result {
            Ok(()) => {
                taking.cancel();
                if let Err(e) = passes.await {
                    tracing::error!(error = %e, "the lease passes ended abnormally");
                }
                let released = self.shutdown(&mut run).await;
                // Stopped before the lane is freed: a beat racing the release
                // would find the lane gone and count it lost.
                heartbeat.cancel();
                let _ = beating.await;
                if released.is_ok() {
                    if let Err(e) = self.coord.leave().await {
                        tracing::warn!(error = %e, "could not free the lane; it expires instead");
                    }
                }
                released
            }
            Err(e) => {
                for (_, s) in std::mem::take(&mut run.shards) {
                    if let Some(r) = s.reader {
                        r.stop().await;
                    }
                }
                Err(e)
            }
        };
        taking.cancel();
        heartbeat.cancel();
        result.map(|()| RunSummary { adopt: run.adopt, ..self.summary(run.shards_read.len()) })
    }

    /// Takes a lane and adopts the seal, waiting out an outage; the first
    /// time, also moves
    /// checkpoints of the old format, checks the table's layout (recording
    /// it if the table has none) and that the lease table is the one the
    /// aggregate table was written with (`zigzag_lease::epoch`), and keys
    /// the lease state by the stream's incarnation (`zigzag_lease::stream`).
    async fn join(&self, stop: &CancellationToken) -> Result<(), PipelineError> {
        let layout = zigzag_model::layout::Layout::of(&self.opts.config);
        let failed = |e: &PipelineError, failures: u32, wait: Duration| {
            self.counters.join_retries.fetch_add(1, Ordering::Relaxed);
            *lock(&self.counters.join_failure) =
                Some(format!("{e} (attempt {failures}; next in {} s)", wait.as_secs()));
            tracing::warn!(error = %e, retry_in_s = wait.as_secs_f64(), "cannot join: store or stream unavailable");
        };
        let joined = self
            .opts
            .outage()
            .wait_out(stop.cancelled(), failed, || async {
                if self.coord.joined() == 0 {
                    let version = zigzag_model::versions::ensure(self.aggregates.as_ref(), &layout).await?;
                    self.flusher.adopt(&version);
                    self.version.store(version.number, Ordering::Relaxed);
                    // Said with the lane's take: no lane is ever seen owned
                    // by this worker with another's version.
                    self.coord.set_layout(zigzag_lease::adoption::LayoutAck {
                        version: version.number,
                        high_ms: self.opts.older_events_to_ms,
                    });
                    self.coord.prepare(self.aggregates.as_ref(), self.source.identity().await?).await?;
                }
                self.coord.join().await?;
                // The seal read after the join write: one raised before it
                // is adopted before anything is read (`zigzag_lease::seal`).
                let seal = self.coord.read_seal(true).await?;
                if seal > 0 {
                    self.coord.acknowledge_seal(seal).await?;
                }
                Ok::<(), PipelineError>(())
            })
            .await;
        *lock(&self.counters.join_failure) = None;
        joined
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
}

#[cfg(test)]
mod send_checks {
    use super::*;
    fn is_send<T: Send>(_: &T) {}

    #[allow(dead_code)]
    fn futures_are_send(p: Arc<Pipeline>, merged: &crate::flush::Merged, job: &mut FlushJob) {
        is_send(&p.flusher.write(merged, crate::flush::Writer { lane: 0, k: 1 }));
        is_send(&job.drive(&p));
        is_send(&p.coord.prepare(p.aggregates.as_ref(), None));
        is_send(&p.coord.pass(None));
        is_send(&p.recover(0));
        is_send(&p.clone().run(CancellationToken::new()));
    }
}
