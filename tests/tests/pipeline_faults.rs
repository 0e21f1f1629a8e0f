//! Store faults injected in process, between the pipeline and real stores
//! (one SQLite file: the aggregates, and the lease table "checkpoints"),
//! checked end to end against the generator's ground truth with gather's
//! `check` on every rollup:
//!
//! - a crash: the process dies at its Nth store call (that call and every
//!   later one fail with `TableError::Store`; nothing after it reaches the
//!   store), in every phase of the lease protocol — joining (taking a lane),
//!   taking a lease, the flush intent (open, the proof, validate, commit),
//!   advancing checkpoints, heartbeats, releasing — and in the aggregate
//!   item writes (also with part of a batch applied); then a restart on the
//!   same files, with the same worker id (it takes its predecessor's lane
//!   over at once) or another one (after the failover time): no record lost,
//!   none counted twice, a valid intent re-applied, an open one aborted;
//! - a write that timed out after the store applied it (applied, then
//!   `Throttled`), on the lease table and on items: the retry recognises its
//!   own write and the run finishes, nothing counted twice;
//! - a zombie: a worker's lane (and leases) are taken while it is mid-flush,
//!   as a worker that presumed it dead does; its commit is refused, it stops
//!   writing under that lane and rejoins; the new owner finishes its flush.
//!
//! The lease table is read and written with `zigzag_lease`'s own items, so
//! these tests follow its wire format; only the classification of requests
//! by phase names attributes (private to the crate).

use async_trait::async_trait;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use zigzag_core::table::{
    Action, AttrValue, Item, ItemResult, QueryPage, QueryRequest, SortedTable, TableError, UpdateOutcome, UpdateRequest,
};
use zigzag_gather::check::{self, Status};
use zigzag_gather::execute::ExecOptions;
use zigzag_ingest::{Pipeline, PipelineError, PipelineOptions, RunSummary};
use zigzag_lease::items::{lane_sk, mark_attr, shards_pk, take_lane, take_lease, LANES_PK};
use zigzag_lease::{Coordinator, IntentState, Lane, LeaseOptions, ShardLease};
use zigzag_loadgen::{GenConfig, Generated, Generator, SyntheticSource};
use zigzag_model::{Config, KeyModel, MeasureValues, Position, ScatterMode, Truth};
use zigzag_sqlite::SqliteTable;

const STREAM: &str = "clicks";
/// A worker presumed dead after this long without a heartbeat (heartbeats
/// every third of it, so a run of a few hundred ms beats several times).
const FAILOVER: Duration = Duration::from_millis(300);
/// No run of these tests takes nearly this long; one that does is stuck.
const RUN_LIMIT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------
// The lease table, read as a worker reads it.

/// Reads the lease table with the crate's own reads and item parsers
/// (strongly consistent, every page); it writes nothing.
fn reader(table: &Arc<dyn SortedTable>) -> Coordinator {
    Coordinator::new(table.clone(), LeaseOptions::new(STREAM, "reader"))
}

async fn read_lanes(table: &Arc<dyn SortedTable>) -> Vec<Lane> {
    reader(table).read_lanes().await.expect("the lanes")
}

async fn read_leases(table: &Arc<dyn SortedTable>) -> Vec<ShardLease> {
    reader(table).read_leases().await.expect("the shard leases")
}

// ---------------------------------------------------------------------------
// Store calls, by phase of the protocol.

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Phase {
    /// Taking a free lane (a worker starting or rejoining).
    Join,
    /// Taking a dead worker's lane (to recover its flush or free the lane).
    TakeLane,
    Heartbeat,
    /// Freeing a lane (leaving, or after a recovery).
    Release,
    CreateLease,
    TakeLease,
    /// Asking another worker for a lease (balancing).
    Handoff,
    /// Handing a lease over, or releasing it.
    Give,
    /// The flush intent: recorded open, ...
    Open,
    /// ... the consistent read of the shard leases right after it (the
    /// proof that they are still held), ...
    Proof,
    /// ... marked valid with the ranges proven held, ...
    Validate,
    /// ... the aggregate item writes, under the lane's mark, ...
    Items,
    /// ... committed, ...
    Commit,
    /// ... and each shard's checkpoint moved (compare-and-set).
    Advance,
    /// A dead worker's open intent dropped (a recovery).
    Abort,
    /// Recording (or checking) the layout in the aggregate table.
    Layout,
    /// Other reads of the lease table (passes, joining, the legacy check).
    ReadLanes,
    ReadLeases,
    ReadLegacy,
}

fn action<'a>(req: &'a UpdateRequest, attr: &str) -> Option<&'a Action> {
    req.actions.iter().find(|(a, _)| a == attr).map(|(_, act)| act)
}

fn set_str<'a>(req: &'a UpdateRequest, attr: &str) -> Option<&'a str> {
    match action(req, attr) {
        Some(Action::Set(AttrValue::S(s))) => Some(s),
        _ => None,
    }
}

fn guarded(req: &UpdateRequest, attr: &str) -> bool {
    req.guards.iter().any(|g| g.attr == attr)
}

fn lease_table_phase(req: &UpdateRequest) -> Phase {
    if req.pk == LANES_PK {
        match set_str(req, "state") {
            Some("open") => Phase::Open,
            Some("valid") => Phase::Validate,
            Some("done") if action(req, "flush").is_some() => Phase::Commit,
            Some("done") => Phase::Abort,
            Some(s) => panic!("an unknown intent state {s:?}: {req:?}"),
            None => match set_str(req, "owner") {
                Some("") => Phase::Release,
                Some(_) if guarded(req, "beat") => Phase::TakeLane,
                Some(_) => Phase::Join,
                None if action(req, "beat").is_some() => Phase::Heartbeat,
                None => panic!("an unknown lane update: {req:?}"),
            },
        }
    } else if req.pk == shards_pk(STREAM) {
        if action(req, "cp").is_some() {
            Phase::Advance
        } else if action(req, "owner").is_some() {
            if guarded(req, "owner") {
                Phase::Give
            } else {
                Phase::TakeLease
            }
        } else if action(req, "handoff").is_some() {
            Phase::Handoff
        } else if matches!(action(req, "lease"), Some(Action::SetIfAbsent(_))) {
            Phase::CreateLease
        } else {
            panic!("an unknown lease update: {req:?}")
        }
    } else {
        panic!("an update outside the lease table's partitions: {req:?}")
    }
}

/// An open or validated intent with a range to SHARD_END, or an advance
/// that marks its shard finished.
fn ends_a_shard(phase: Phase, req: &UpdateRequest) -> bool {
    match phase {
        Phase::Advance => action(req, "fin") == Some(&Action::Set(AttrValue::Bool(true))),
        Phase::Open | Phase::Validate => set_str(req, "ranges").is_some_and(|r| r.contains("\"e\":true")),
        _ => false,
    }
}

/// The lane and flush number an item write is marked with (`w@<lane>` = k).
fn item_mark(req: &UpdateRequest) -> (u32, u64) {
    req.actions
        .iter()
        .find_map(|(attr, act)| {
            let lane = attr.strip_prefix("w@")?.parse().ok()?;
            match act {
                Action::Set(AttrValue::N(k)) => Some((lane, u64::try_from(*k).ok()?)),
                _ => None,
            }
        })
        .unwrap_or_else(|| panic!("an item write without its lane's mark: {req:?}"))
}

/// The lane a lease-table write is on, if a lane item.
fn lane_of(req: &UpdateRequest) -> Option<u32> {
    (req.pk == LANES_PK).then(|| u32::from_be_bytes(req.sk.as_slice().try_into().expect("4 bytes")))
}

// ---------------------------------------------------------------------------
// Fault injection.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trigger {
    /// The Nth store call of the world (from 1; every process, both tables).
    Nth(u64),
    /// The Nth call (from 1) of one phase.
    NthOf(Phase, u64),
    /// The Nth call (from 1) of a phase that ends a shard (`ends_a_shard`).
    NthEnding(Phase, u64),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Effect {
    /// The process dies at this call: it fails with `TableError::Store`,
    /// applying nothing, and so does every later call of the process (its
    /// stop token is cancelled so that `run` returns).
    Crash,
    /// Apply the first half of the batch (at least one item), then die like
    /// `Crash`.
    ApplyHalfThenCrash,
    /// Apply, then report `Throttled` for the whole call (a timeout after
    /// the store applied it).
    ApplyThenThrottle,
    /// Apply, then report `Throttled` for each item of the batch.
    ApplyThenThrottleEach,
    /// Apply the first half of the batch (at least one item) and report
    /// each item of the second half `Throttled`, not applied (a batch the
    /// store took in part).
    ApplyHalfThrottleRest,
    /// Apply an item write, then do what a worker that presumed the writer
    /// dead does: take its unfinished shard leases (if `leases`) and its
    /// lane (seen at its owner and beat), as `thief`. The writer is not
    /// told: the call returns after `pause` (a stalled writer: its
    /// heartbeat notices the loss first) and it goes on with its flush.
    Steal { thief: String, leases: bool, pause: Duration },
}

/// What happened when the fault fired.
#[derive(Debug, Clone)]
struct Fired {
    call: u64,
    phase: Phase,
    /// The process it fired in.
    process: String,
    /// The requests of the faulted call and what the store did with those
    /// it applied.
    reqs: Vec<UpdateRequest>,
    outcomes: Vec<UpdateOutcome>,
    /// The same process's next call of the same phase after the fault (the
    /// retry), if the fault applied something.
    replay: Option<(Vec<UpdateRequest>, Vec<UpdateOutcome>)>,
    /// `Steal`: the lane taken and the flush number in flight on it.
    stolen: Option<(u32, u64)>,
}

/// One store write of a process, as the store answered it.
#[derive(Debug, Clone)]
struct Logged {
    call: u64,
    phase: Phase,
    /// A lane write's lane, or the lane an item write is marked with.
    lane: Option<u32>,
    /// An item write's flush number.
    k: Option<u64>,
    applied: usize,
    refused: usize,
}

/// One pipeline "process": what dies in a crash.
struct Process {
    name: String,
    dead: AtomicBool,
    stop: CancellationToken,
    /// An open intent not yet validated: the next leases read is its proof.
    open: AtomicBool,
    log: Mutex<Vec<Logged>>,
}

impl Process {
    fn new(name: &str) -> Arc<Self> {
        Arc::new(Process {
            name: name.into(),
            dead: AtomicBool::new(false),
            stop: CancellationToken::new(),
            open: AtomicBool::new(false),
            log: Mutex::new(Vec::new()),
        })
    }

    fn crash(&self) {
        self.dead.store(true, Ordering::SeqCst);
        self.stop.cancel();
    }

    fn log(&self) -> Vec<Logged> {
        self.log.lock().unwrap().clone()
    }
}

/// Shared by every process of a world: one call counter, one armed fault.
struct Faults {
    calls: AtomicU64,
    per_phase: Mutex<BTreeMap<Phase, u64>>,
    ending: Mutex<BTreeMap<Phase, u64>>,
    armed: Mutex<Option<(Trigger, Effect)>>,
    fired: Mutex<Option<Fired>>,
    /// The real lease table, for `Steal`.
    leases: Arc<dyn SortedTable>,
}

impl Faults {
    fn new(leases: Arc<dyn SortedTable>) -> Arc<Self> {
        Arc::new(Faults {
            calls: AtomicU64::new(0),
            per_phase: Mutex::new(BTreeMap::new()),
            ending: Mutex::new(BTreeMap::new()),
            armed: Mutex::new(None),
            fired: Mutex::new(None),
            leases,
        })
    }

    fn arm(&self, trigger: Trigger, effect: Effect) {
        *self.armed.lock().unwrap() = Some((trigger, effect));
        *self.fired.lock().unwrap() = None;
    }

    fn disarm(&self) {
        *self.armed.lock().unwrap() = None;
    }

    fn fired(&self) -> Option<Fired> {
        self.fired.lock().unwrap().clone()
    }

    fn counts(&self) -> BTreeMap<Phase, u64> {
        self.per_phase.lock().unwrap().clone()
    }

    fn count(&self, phase: Phase) -> u64 {
        self.counts().get(&phase).copied().unwrap_or(0)
    }

    /// Counts a call; the effect to apply to it, if the fault fires now.
    fn on_call(&self, phase: Phase, ending: bool) -> (u64, Option<Effect>) {
        let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let bump = |m: &Mutex<BTreeMap<Phase, u64>>| {
            let mut m = m.lock().unwrap();
            let n = m.entry(phase).or_insert(0);
            *n += 1;
            *n
        };
        let nth = bump(&self.per_phase);
        let nth_ending = if ending { bump(&self.ending) } else { 0 };
        let mut armed = self.armed.lock().unwrap();
        let fire = match armed.as_ref() {
            Some((Trigger::Nth(n), _)) => *n == call,
            Some((Trigger::NthOf(p, n), _)) => *p == phase && *n == nth,
            Some((Trigger::NthEnding(p, n), _)) => ending && *p == phase && *n == nth_ending,
            None => false,
        };
        (call, if fire { armed.take().map(|(_, e)| e) } else { None })
    }
}

fn injected(what: String) -> TableError {
    TableError::Store(Box::new(std::io::Error::other(format!("injected crash ({what})"))))
}

fn is_injected_crash(e: &PipelineError) -> bool {
    e.to_string().contains("injected crash")
}

fn outcomes(results: Vec<ItemResult>) -> Vec<UpdateOutcome> {
    results.into_iter().map(|r| r.expect("the real store answers every item")).collect()
}

/// A store whose calls go through `Faults`, for one process.
struct Faulty {
    inner: Arc<dyn SortedTable>,
    faults: Arc<Faults>,
    process: Arc<Process>,
    /// The aggregates table (every update is an item write), or the lease table.
    aggregates: bool,
}

impl Faulty {
    fn before_call(&self) -> Result<(), TableError> {
        if self.process.dead.load(Ordering::SeqCst) {
            return Err(injected(format!("{} is dead", self.process.name)));
        }
        Ok(())
    }

    fn record(&self, call: u64, phase: Phase, reqs: &[UpdateRequest], results: &[Option<UpdateOutcome>]) {
        let (lane, k) = match phase {
            Phase::Items => {
                let (lane, k) = item_mark(&reqs[0]);
                (Some(lane), Some(k))
            }
            _ => (lane_of(&reqs[0]), None),
        };
        let applied = results.iter().filter(|r| r.as_ref().is_some_and(UpdateOutcome::applied)).count();
        let refused = results.iter().filter(|r| r.as_ref().is_some_and(|o| !o.applied())).count();
        self.process.log.lock().unwrap().push(Logged { call, phase, lane, k, applied, refused });
        match phase {
            Phase::Open if applied > 0 => self.process.open.store(true, Ordering::SeqCst),
            Phase::Validate => self.process.open.store(false, Ordering::SeqCst),
            _ => {}
        }
    }

    async fn updates(&self, reqs: &[UpdateRequest]) -> Result<Vec<ItemResult>, TableError> {
        self.before_call()?;
        let phase = if self.aggregates && reqs[0].pk == zigzag_model::layout::LAYOUT_PK {
            Phase::Layout
        } else if self.aggregates {
            Phase::Items
        } else {
            assert_eq!(reqs.len(), 1, "lease-table writes are single");
            lease_table_phase(&reqs[0])
        };
        let ending = reqs.iter().any(|r| ends_a_shard(phase, r));
        let (call, effect) = self.faults.on_call(phase, ending);
        let Some(effect) = effect else {
            let out = self.inner.update_batch(reqs).await;
            if let Ok(results) = &out {
                let seen: Vec<Option<UpdateOutcome>> = results.iter().map(|r| r.as_ref().ok().cloned()).collect();
                self.record(call, phase, reqs, &seen);
                let mut fired = self.faults.fired.lock().unwrap();
                if let (Some(f), Some(outs)) = (fired.as_mut(), seen.into_iter().collect::<Option<Vec<_>>>()) {
                    if f.process == self.process.name
                        && f.phase == phase
                        && f.replay.is_none()
                        && !f.outcomes.is_empty()
                    {
                        f.replay = Some((reqs.to_vec(), outs));
                    }
                }
            }
            return out;
        };
        let name = &self.process.name;
        let mut fired = Fired {
            call,
            phase,
            process: name.clone(),
            reqs: reqs.to_vec(),
            outcomes: Vec::new(),
            replay: None,
            stolen: None,
        };
        let result = match &effect {
            Effect::Crash => {
                self.process.crash();
                Err(injected(format!("{name} died at call {call}, {phase:?}")))
            }
            Effect::ApplyHalfThenCrash => {
                let half = reqs.len().div_ceil(2);
                fired.outcomes = outcomes(self.inner.update_batch(&reqs[..half]).await?);
                self.process.crash();
                Err(injected(format!("{name} died at call {call}, {phase:?}, {half} of {} applied", reqs.len())))
            }
            Effect::ApplyThenThrottle => {
                fired.outcomes = outcomes(self.inner.update_batch(reqs).await?);
                Err(TableError::Throttled(format!("injected timeout after apply (call {call}, {phase:?})")))
            }
            Effect::ApplyThenThrottleEach => {
                fired.outcomes = outcomes(self.inner.update_batch(reqs).await?);
                let each =
                    |i| Err(TableError::Throttled(format!("injected timeout after apply (call {call}, item {i})")));
                Ok((0..reqs.len()).map(each).collect())
            }
            Effect::ApplyHalfThrottleRest => {
                let half = reqs.len().div_ceil(2);
                fired.outcomes = outcomes(self.inner.update_batch(&reqs[..half]).await?);
                let rest =
                    (half..reqs.len()).map(|i| Err(TableError::Throttled(format!("injected: item {i} not taken"))));
                Ok(fired.outcomes.iter().cloned().map(Ok).chain(rest).collect())
            }
            Effect::Steal { thief, leases, pause } => {
                assert_eq!(phase, Phase::Items, "a steal fires on an item write");
                let out = outcomes(self.inner.update_batch(reqs).await?);
                fired.outcomes = out.clone();
                fired.stolen = Some(self.steal(&reqs[0], thief, *leases).await);
                *self.faults.fired.lock().unwrap() = Some(fired.clone());
                tokio::time::sleep(*pause).await;
                Ok(out.into_iter().map(Ok).collect())
            }
        };
        let seen: Vec<Option<UpdateOutcome>> = fired.outcomes.iter().cloned().map(Some).collect();
        self.record(call, phase, reqs, &seen);
        *self.faults.fired.lock().unwrap() = Some(fired);
        result
    }

    /// Takes the writer's lane (and unfinished leases) as `thief`.
    async fn steal(&self, item_write: &UpdateRequest, thief: &str, leases: bool) -> (u32, u64) {
        let (lane, k) = item_mark(item_write);
        let table = &self.faults.leases;
        let victim = self.process.name.as_str();
        if leases {
            for l in read_leases(table).await {
                if l.owner.as_deref() == Some(victim) && !l.finished {
                    let out = table.update(&take_lease(STREAM, &l.shard, l.lease, thief)).await.unwrap();
                    assert!(out.applied(), "only the victim writes its leases, and it is mid-flush");
                }
            }
        }
        // The victim's heartbeat may move the beat between the read and the
        // take: read again then.
        for _ in 0..10 {
            let item = table.get(LANES_PK, &lane_sk(lane)).await.unwrap().expect("the writer's lane");
            let seen = Lane::from_item(&item).expect("a lane");
            assert_eq!(
                (seen.owner.as_deref(), seen.in_flight().map(|i| (i.k, i.state))),
                (Some(victim), Some((k, IntentState::Valid))),
                "the writer writes items of its valid intent: {seen:?}"
            );
            let take = take_lane(lane, Some((victim, seen.beat)), thief, &seen.stream);
            if table.update(&take).await.unwrap().applied() {
                return (lane, k);
            }
        }
        panic!("lane {lane} could not be taken from {victim}")
    }

    async fn read(&self, req: &QueryRequest) -> Result<QueryPage, TableError> {
        self.before_call()?;
        let phase = match req.pk.as_str() {
            _ if self.aggregates => panic!("the pipeline does not read the aggregates: {req:?}"),
            LANES_PK => Phase::ReadLanes,
            // The first read of the leases after an intent was opened is
            // its proof; a lease pass reading them later, while the flush
            // validates, is not (a crash there may let the validate apply).
            pk if pk == shards_pk(STREAM) && self.process.open.swap(false, Ordering::SeqCst) => Phase::Proof,
            pk if pk == shards_pk(STREAM) => Phase::ReadLeases,
            _ => Phase::ReadLegacy,
        };
        let (call, effect) = self.faults.on_call(phase, false);
        match effect {
            None => self.inner.query(req).await,
            Some(Effect::Crash) => {
                self.process.crash();
                let name = self.process.name.clone();
                *self.faults.fired.lock().unwrap() = Some(Fired {
                    call,
                    phase,
                    process: name.clone(),
                    reqs: Vec::new(),
                    outcomes: Vec::new(),
                    replay: None,
                    stolen: None,
                });
                Err(injected(format!("{name} died at call {call}, {phase:?}")))
            }
            Some(e) => panic!("{e:?} is not a fault of a read"),
        }
    }
}

#[async_trait]
impl SortedTable for Faulty {
    async fn put(&self, item: Item) -> Result<(), TableError> {
        self.inner.put(item).await
    }

    async fn put_batch(&self, items: Vec<Item>) -> Result<(), TableError> {
        self.inner.put_batch(items).await
    }

    async fn query(&self, req: &QueryRequest) -> Result<QueryPage, TableError> {
        self.read(req).await
    }

    async fn update(&self, req: &UpdateRequest) -> Result<UpdateOutcome, TableError> {
        let mut out = self.updates(std::slice::from_ref(req)).await?;
        out.pop().expect("one result per request")
    }

    async fn update_batch(&self, reqs: &[UpdateRequest]) -> Result<Vec<ItemResult>, TableError> {
        self.updates(reqs).await
    }

    fn write_parallelism(&self) -> usize {
        self.inner.write_parallelism()
    }
}

// ---------------------------------------------------------------------------
// A world: a generator, its truth, SQLite stores behind fault wrappers.

fn gen_config(seed: u64) -> GenConfig {
    GenConfig {
        seed,
        shards: 3,
        records: 4_500,
        referrers: 150,
        campaigns: 6,
        malformed_fraction: 0.02,
        ..GenConfig::default()
    }
}

/// Small flushes, so one run makes many of them.
fn config() -> Config {
    let mut c = Config::default();
    c.flush.max_keys = 500;
    c.flush.interval_ms = 20;
    c
}

struct World {
    _dir: tempfile::TempDir,
    gen_cfg: GenConfig,
    truth: Truth,
    config: Config,
    /// The real tables (the pipelines see them through `Faulty`).
    aggregates: Arc<dyn SortedTable>,
    leases: Arc<dyn SortedTable>,
    faults: Arc<Faults>,
    dead_letters: PathBuf,
}

impl World {
    fn new(seed: u64) -> World {
        Self::with_config(seed, config())
    }

    fn with_config(seed: u64, config: Config) -> World {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("zigzag.db");
        let aggregates: Arc<dyn SortedTable> = Arc::new(SqliteTable::open(&db).unwrap());
        let leases: Arc<dyn SortedTable> = Arc::new(SqliteTable::open_table(&db, "checkpoints").unwrap());
        let gen_cfg = gen_config(seed);
        World {
            dead_letters: dir.path().join("dead.jsonl"),
            _dir: dir,
            truth: zigzag_loadgen::truth::compute(&Generator::new(gen_cfg.clone())),
            gen_cfg,
            config,
            faults: Faults::new(leases.clone()),
            aggregates,
            leases,
        }
    }

    fn options(&self, worker: &str) -> PipelineOptions {
        PipelineOptions {
            failover: FAILOVER,
            max_pause: Duration::from_millis(50),
            batch_size: 100,
            ..PipelineOptions::new(self.config.clone(), STREAM, worker, self.dead_letters.clone())
        }
    }

    /// A pipeline process over the fault wrappers (a fresh source each
    /// time: the synthetic stream replays from any position).
    fn pipeline(&self, name: &str, opts: PipelineOptions) -> (Arc<Process>, Arc<Pipeline>) {
        let process = Process::new(name);
        let wrap = |inner: &Arc<dyn SortedTable>, aggregates| -> Arc<dyn SortedTable> {
            Arc::new(Faulty { inner: inner.clone(), faults: self.faults.clone(), process: process.clone(), aggregates })
        };
        let source = Arc::new(SyntheticSource::new(Generator::new(self.gen_cfg.clone()), None));
        let pipeline = Pipeline::new(source, wrap(&self.aggregates, true), wrap(&self.leases, false), opts);
        (process, Arc::new(pipeline.expect("pipeline")))
    }

    /// Runs a pipeline to its end (bounded by `RUN_LIMIT`).
    async fn run_with(&self, name: &str, opts: PipelineOptions) -> (Arc<Process>, Result<RunSummary, PipelineError>) {
        let (process, pipeline) = self.pipeline(name, opts);
        let run = tokio::time::timeout(RUN_LIMIT, pipeline.run(process.stop.clone()));
        let result = run.await.unwrap_or_else(|_| panic!("{name} did not finish within {RUN_LIMIT:?}"));
        (process, result)
    }

    /// Runs a pipeline of `worker`, named after it.
    async fn run(&self, worker: &str) -> Result<RunSummary, PipelineError> {
        self.run_with(worker, self.options(worker)).await.1
    }

    async fn lanes(&self) -> Vec<Lane> {
        read_lanes(&self.leases).await
    }

    async fn shard_leases(&self) -> Vec<ShardLease> {
        read_leases(&self.leases).await
    }

    /// The store equals the ground truth (gather's check, every group of
    /// every rollup); every shard lease is finished with its checkpoint at
    /// the shard's end; no lane has a flush in flight; every malformed
    /// record is dead-lettered.
    async fn assert_exact(&self, context: &str) {
        let opts = ExecOptions { consistent: true, ..ExecOptions::default() };
        let now = self.truth.last_ms.unwrap_or_default();
        for &rollup in &self.config.rollups {
            let km = KeyModel::new(&Config { rollups: vec![rollup], ..self.config.clone() }).unwrap();
            let report = check::check(&*self.aggregates, &km, &self.truth, now, &opts).await.expect("gather check");
            let text = check::render(&report);
            assert_eq!(report.mismatches(), 0, "{context}: {rollup:?} rollup: store != truth\n{text}");
            assert!(report.rows.iter().all(|r| r.status == Status::Match), "{context}: {rollup:?}\n{text}");
            let total = report.rows.iter().find(|r| r.check == "total").expect("a total row");
            assert_eq!(
                total.store,
                MeasureValues::from_named(&report.set, &self.truth.totals),
                "{context}: {rollup:?}"
            );
        }

        let gen = Generator::new(self.gen_cfg.clone());
        let leases = self.shard_leases().await;
        assert_eq!(leases.len(), self.gen_cfg.shards as usize, "{context}: {leases:?}");
        for shard in 0..self.gen_cfg.shards {
            let id = Generator::shard_id(shard);
            let lease = leases.iter().find(|l| l.shard == id).unwrap_or_else(|| panic!("{context}: no lease of {id}"));
            assert!(lease.finished, "{context}: {lease:?}");
            assert_eq!(lease.checkpoint, Some(Position::at(gen.shard_len(shard))), "{context}: {lease:?}");
        }
        for lane in self.lanes().await {
            assert_eq!(lane.in_flight(), None, "{context}: a flush left in flight: {lane:?}");
        }
        self.assert_every_bad_record_dead_lettered(context);
    }

    /// Every malformed record is in the dead-letter file (perhaps twice
    /// after a crash, never missing), and nothing else is.
    fn assert_every_bad_record_dead_lettered(&self, context: &str) {
        let gen = Generator::new(self.gen_cfg.clone());
        let mut expected = BTreeSet::new();
        let mut buf = Vec::new();
        for shard in 0..self.gen_cfg.shards {
            for seq in 1..=gen.shard_len(shard) {
                if let Generated::Malformed(_) = gen.record(shard, seq, &mut buf) {
                    expected.insert((Generator::shard_id(shard), seq.to_string()));
                }
            }
        }
        let seen = dead_letter_positions(&self.dead_letters);
        assert_eq!(seen, expected, "{context}: dead letters");
    }

    /// How many of these item writes are applied: their item carries the
    /// write's mark (`w@<lane>` = k).
    async fn marked(&self, writes: &[UpdateRequest]) -> usize {
        let mut n = 0;
        for req in writes {
            let (lane, k) = item_mark(req);
            let item = self.aggregates.get(&req.pk, &req.sk).await.unwrap();
            let mark = item.as_ref().and_then(|i| i.attrs.get(&mark_attr(lane)));
            n += usize::from(matches!(mark, Some(AttrValue::N(d)) if u64::try_from(*d) == Ok(k)));
        }
        n
    }
}

fn dead_letter_positions(path: &Path) -> BTreeSet<(String, String)> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            (v["shard"].as_str().unwrap().to_string(), v["seq"].as_str().unwrap().to_string())
        })
        .collect()
}

/// splitmix64: a seeded choice of fault points.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi.max(lo) - lo + 1)
    }
}

// ---------------------------------------------------------------------------
// What a crash leaves on the lease table, and what a restart makes of it.

/// The lease table right after a process died.
#[derive(Debug)]
struct Image {
    lanes: Vec<Lane>,
    leases: Vec<ShardLease>,
}

impl Image {
    async fn of(w: &World) -> Image {
        Image { lanes: w.lanes().await, leases: w.shard_leases().await }
    }

    fn lane(&self, n: u32) -> &Lane {
        self.lanes.iter().find(|l| l.lane == n).expect("lanes are never deleted")
    }

    /// The lanes, and flush numbers, with an intent in `state` (open or valid).
    fn in_flight(&self, state: IntentState) -> Vec<(u32, u64)> {
        let of = |l: &Lane| l.in_flight().filter(|i| i.state == state).map(|i| (l.lane, i.k));
        self.lanes.iter().filter_map(of).collect()
    }

    /// Committed ranges whose shard checkpoint is still to be moved.
    fn completions_pending(&self) -> usize {
        let committed = self.lanes.iter().filter_map(|l| l.intent.as_ref().filter(|i| i.state == IntentState::Done));
        committed
            .flat_map(|i| &i.ranges)
            .filter(|r| {
                self.leases.iter().any(|s| {
                    s.shard == r.shard && s.checkpoint == r.from && (r.from != Some(r.to) || r.ends != s.finished)
                })
            })
            .count()
    }

    /// The step the process died at left the steps before it applied and
    /// none after it.
    fn assert_died_in(&self, fired: &Fired, context: &str) {
        let (open, valid) = (self.in_flight(IntentState::Open).len(), self.in_flight(IntentState::Valid).len());
        let lanes = &self.lanes;
        match fired.phase {
            Phase::Join => assert!(lanes.iter().all(|l| l.owner.is_none()), "{context}: {lanes:?}"),
            // The intent was not recorded: the last one is done.
            Phase::Open => assert_eq!((open, valid), (0, 0), "{context}: {lanes:?}"),
            // Recorded, not proven: no item was written.
            Phase::Proof | Phase::Validate | Phase::Abort => assert_eq!((open, valid), (1, 0), "{context}: {lanes:?}"),
            // Proven, not committed: items may have been written.
            Phase::Items | Phase::Commit => assert_eq!((open, valid), (0, 1), "{context}: {lanes:?}"),
            // Committed, a checkpoint not moved.
            Phase::Advance => {
                assert_eq!((open, valid), (0, 0), "{context}: {lanes:?}");
                assert!(self.completions_pending() >= 1, "{context}: {self:?}");
            }
            _ => assert!(open + valid <= 1, "{context}: one worker, one flush in flight at most: {lanes:?}"),
        }
    }
}

/// Runs `name` (worker `worker`) with a fault armed; it must fire, and a
/// run that ends with an error ends with the injected crash. Returns what
/// fired and what the lease table holds after.
async fn fault_run(w: &World, name: &str, opts: PipelineOptions, trigger: Trigger, effect: Effect) -> (Fired, Image) {
    w.faults.arm(trigger, effect.clone());
    let (_, result) = w.run_with(name, opts).await;
    w.faults.disarm();
    let context = format!("{name}: {effect:?} at {trigger:?}");
    let fired = w.faults.fired().unwrap_or_else(|| panic!("{context}: the fault did not fire ({result:?})"));
    assert_eq!(fired.process, name, "{context}");
    if let Err(e) = &result {
        assert!(is_injected_crash(e), "{context}: {e}");
    }
    let image = Image::of(w).await;
    if matches!(effect, Effect::Crash | Effect::ApplyHalfThenCrash) {
        image.assert_died_in(&fired, &format!("{context}, fired at call {}", fired.call));
    }
    (fired, image)
}

/// After a restart that finished: the valid intents the crash left were
/// re-applied and committed under their own (lane, k) and counted as
/// recovered; the open ones were aborted (their number free again); an
/// item write the dead process applied was found by its mark and skipped.
async fn assert_recovered(w: &World, image: &Image, fired: &Fired, restart: &RunSummary, context: &str) {
    let now = Image::of(w).await;
    for (lane, k) in image.in_flight(IntentState::Valid) {
        let after = now.lane(lane);
        assert_eq!(
            (after.flush, after.intent.as_ref().map(|i| (i.k, i.state))),
            (k, Some((k, IntentState::Done))),
            "{context}: lane {lane} was committed by the recovery"
        );
    }
    for (lane, k) in image.in_flight(IntentState::Open) {
        let after = now.lane(lane);
        assert_eq!(
            (after.flush, after.intent.as_ref().map(|i| (i.k, i.state, i.ranges.len()))),
            (k - 1, Some((k - 1, IntentState::Done, 0))),
            "{context}: lane {lane}'s open intent was aborted"
        );
    }
    let valid = image.in_flight(IntentState::Valid).len() as u64;
    assert_eq!(restart.recovered, valid, "{context}: {restart:?}");
    if fired.phase == Phase::Items && valid > 0 {
        let applied = fired.outcomes.iter().filter(|o| o.applied()).count() as u64;
        assert!(restart.skipped >= applied, "{context}: {applied} writes applied before the crash: {restart:?}");
    }
}

/// Crashes `run-a`, checks what the crash left, restarts it (same or other
/// worker id) on the same files, and checks the result.
async fn crash_then_restart(
    w: &World,
    trigger: Trigger,
    effect: Effect,
    restart_worker: &str,
    context: &str,
) -> (Fired, RunSummary) {
    let (fired, image) = fault_run(w, "run-a", w.options("run-a"), trigger, effect.clone()).await;
    let context = format!("{context}: {effect:?} at {trigger:?} fired at call {} ({:?})", fired.call, fired.phase);
    if effect == Effect::ApplyHalfThenCrash {
        assert_eq!(w.marked(&fired.reqs).await, fired.outcomes.len(), "{context}: the first half applied, no more");
    }
    let started = Instant::now();
    let (_, result) = w.run_with(&format!("{restart_worker}#restart"), w.options(restart_worker)).await;
    let restart = result.unwrap_or_else(|e| panic!("{context}: restart failed: {e}"));
    let took = started.elapsed();
    w.assert_exact(&context).await;
    assert_recovered(w, &image, &fired, &restart, &context).await;
    if restart_worker == "run-a" {
        // The predecessor's lane was taken over at once and freed.
        let lanes = w.lanes().await;
        assert!(lanes.iter().all(|l| l.owner.is_none()), "{context}: {lanes:?}");
    } else if image.leases.iter().any(|l| !l.finished && l.owner.as_deref() == Some("run-a")) {
        // Another worker waits out the failover before taking the leases.
        assert!(took >= FAILOVER, "{context}: took {took:?}");
        assert!(restart.leases_taken >= 1, "{context}: {restart:?}");
    }
    eprintln!("{context}: restart {took:?}, recovered {}, skipped {}", restart.recovered, restart.skipped);
    (fired, restart)
}

// ---------------------------------------------------------------------------
// (i) A crash at any store call, then a restart on the same files.

/// How many calls of each phase a clean run makes (varies a little with
/// timing: fault points are picked in the first half of each).
async fn dry_run() -> (BTreeMap<Phase, u64>, u64) {
    let dry = World::new(11);
    let s = dry.run("dry").await.expect("clean run");
    dry.assert_exact("clean run").await;
    let counts = dry.faults.counts();
    let total = dry.faults.calls.load(Ordering::SeqCst);
    let of = |p: Phase| counts.get(&p).copied().unwrap_or(0);
    assert_eq!((of(Phase::Join), of(Phase::CreateLease), of(Phase::Release)), (1, 3, 1), "{counts:?}");
    assert!(of(Phase::TakeLease) >= 3, "{counts:?}");
    for p in [Phase::Open, Phase::Proof, Phase::Validate, Phase::Items, Phase::Commit, Phase::Advance] {
        assert!(of(p) >= 6, "{p:?}: {counts:?} {s:?}");
    }
    assert_eq!(of(Phase::Open), of(Phase::Commit), "one intent per flush: {counts:?}");
    (counts, total)
}

fn upto(counts: &BTreeMap<Phase, u64>, p: Phase, lo: u64) -> u64 {
    (counts.get(&p).copied().unwrap_or(0) / 2).max(lo)
}

/// Runs each case on a world of its own (every other one scattering at
/// random: a re-applied flush must land on the prefixes it first chose):
/// `run-a` dies at the fault, a restart with the same worker id finishes.
/// Every phase in `expected` must have been crashed in.
async fn crash_cases(seed: u64, cases: Vec<(Trigger, Effect)>, expected: &[Phase]) {
    let mut died_in = BTreeSet::new();
    for (i, (trigger, effect)) in cases.into_iter().enumerate() {
        let mut config = config();
        if i % 2 == 1 {
            config.scatter.mode = ScatterMode::Random;
        }
        let w = World::with_config(seed, config);
        let context = format!("case {i} ({:?} scatter)", w.config.scatter.mode);
        let (fired, _) = crash_then_restart(&w, trigger, effect, "run-a", &context).await;
        died_in.insert(fired.phase);
    }
    for p in expected {
        assert!(died_in.contains(p), "no crash in {p:?}: {died_in:?}");
    }
}

/// Joining, creating and taking leases, reading the lanes, heartbeats,
/// leaving, and anywhere at random.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_in_a_lane_or_lease_write_then_restart_with_the_same_worker_id_is_exact() {
    let (_, total) = dry_run().await;
    let mut rng = Rng(0x1ea5e);
    let crash = Effect::Crash;
    let mut cases = vec![
        (Trigger::NthOf(Phase::Join, 1), crash.clone()),
        (Trigger::NthOf(Phase::CreateLease, 2), crash.clone()),
        (Trigger::NthOf(Phase::TakeLease, 2), crash.clone()),
        (Trigger::NthOf(Phase::ReadLanes, 2), crash.clone()),
        (Trigger::NthOf(Phase::Heartbeat, 1), crash.clone()),
        // Leaving: the lane is freed last.
        (Trigger::NthOf(Phase::Release, 1), crash.clone()),
    ];
    for _ in 0..3 {
        cases.push((Trigger::Nth(rng.range(1, total / 2)), crash.clone()));
    }
    let expected = [Phase::Join, Phase::CreateLease, Phase::TakeLease, Phase::Heartbeat, Phase::Release];
    crash_cases(11, cases, &expected).await;
}

/// Each step of the flush intent: recorded open, proven (the leases read),
/// validated, committed; also in the flushes that end shards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_in_a_flush_intent_then_restart_with_the_same_worker_id_is_exact() {
    let (counts, _) = dry_run().await;
    let mut rng = Rng(0x5eed);
    let mut rnd = |p: Phase, lo: u64| Trigger::NthOf(p, rng.range(lo, upto(&counts, p, lo)));
    let crash = Effect::Crash;
    let cases = vec![
        (Trigger::NthOf(Phase::Open, 1), crash.clone()),
        (rnd(Phase::Open, 2), crash.clone()),
        (Trigger::NthOf(Phase::Proof, 1), crash.clone()),
        (rnd(Phase::Proof, 2), crash.clone()),
        (Trigger::NthOf(Phase::Validate, 1), crash.clone()),
        (rnd(Phase::Validate, 2), crash.clone()),
        (Trigger::NthOf(Phase::Commit, 1), crash.clone()),
        (rnd(Phase::Commit, 2), crash.clone()),
        (Trigger::NthEnding(Phase::Open, 1), crash.clone()),
        (Trigger::NthEnding(Phase::Validate, 2), crash.clone()),
    ];
    crash_cases(12, cases, &[Phase::Open, Phase::Proof, Phase::Validate, Phase::Commit]).await;
}

/// The item writes (nothing of the call applied, or its first half), and
/// the checkpoints moved after the commit (also those that finish shards).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_in_item_writes_or_checkpoints_then_restart_with_the_same_worker_id_is_exact() {
    let (counts, _) = dry_run().await;
    let mut rng = Rng(0xbeef);
    let mut rnd = |p: Phase, lo: u64| Trigger::NthOf(p, rng.range(lo, upto(&counts, p, lo)));
    let (crash, half) = (Effect::Crash, Effect::ApplyHalfThenCrash);
    let cases = vec![
        (Trigger::NthOf(Phase::Items, 1), crash.clone()),
        (rnd(Phase::Items, 2), crash.clone()),
        (Trigger::NthOf(Phase::Items, 1), half.clone()),
        (rnd(Phase::Items, 2), half.clone()),
        (Trigger::NthOf(Phase::Advance, 1), crash.clone()),
        (rnd(Phase::Advance, 2), crash.clone()),
        (Trigger::NthEnding(Phase::Advance, 1), crash.clone()),
        (Trigger::NthEnding(Phase::Advance, 3), crash.clone()),
    ];
    crash_cases(13, cases, &[Phase::Items, Phase::Advance]).await;
}

/// The restart is another worker: it finds the dead worker's lane and
/// leases still owned, waits out the failover on its own clock, then takes
/// the leases and recovers or frees the lane.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_then_restart_with_another_worker_id_recovers_after_the_failover() {
    let cases = [
        (Trigger::NthOf(Phase::Proof, 3), Effect::Crash),
        (Trigger::NthOf(Phase::Items, 4), Effect::ApplyHalfThenCrash),
        (Trigger::NthOf(Phase::Commit, 2), Effect::Crash),
        (Trigger::NthOf(Phase::Advance, 3), Effect::Crash),
        (Trigger::NthOf(Phase::Heartbeat, 1), Effect::Crash),
    ];
    for (i, (trigger, effect)) in cases.into_iter().enumerate() {
        let w = World::new(91 + i as u64);
        crash_then_restart(&w, trigger, effect, "run-b", &format!("case {i}")).await;
    }
}

/// A restart that dies while finishing its predecessor's flush (taking the
/// lane, re-applying the items, committing, completing, freeing the lane,
/// or aborting an open intent); a third run still converges exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_during_recovery_then_restart_is_exact() {
    let valid = (Trigger::NthOf(Phase::Items, 2), Effect::ApplyHalfThenCrash);
    let open = (Trigger::NthOf(Phase::Validate, 3), Effect::Crash);
    let cases = [
        (valid.clone(), Phase::TakeLane, Effect::Crash),
        (valid.clone(), Phase::Items, Effect::ApplyHalfThenCrash),
        (valid.clone(), Phase::Items, Effect::Crash),
        (valid.clone(), Phase::Commit, Effect::Crash),
        (valid.clone(), Phase::Advance, Effect::Crash),
        (valid.clone(), Phase::Release, Effect::Crash),
        (open.clone(), Phase::Abort, Effect::Crash),
    ];
    for (i, ((first, first_effect), phase, effect)) in cases.into_iter().enumerate() {
        let w = World::new(71 + i as u64);
        let context = format!("recovery dies with {effect:?} in {phase:?}");
        let (_, image_a) = fault_run(&w, "run-a", w.options("run-a"), first, first_effect).await;
        let mut in_flight =
            image_a.in_flight(IntentState::Valid).into_iter().chain(image_a.in_flight(IntentState::Open));
        let Some((lane, k)) = in_flight.next() else { panic!("{context}: a flush in flight: {image_a:?}") };
        // Recovery runs before the restart's first flush: its next call of
        // `phase` belongs to the recovered flush.
        let next = w.faults.count(phase) + 1;
        let (fired, image_b) = fault_run(&w, "run-a#2", w.options("run-a"), Trigger::NthOf(phase, next), effect).await;
        let context = format!("{context}, fired at call {}", fired.call);
        assert_eq!(fired.phase, phase, "{context}");
        let l = image_b.lane(lane);
        match phase {
            Phase::Advance | Phase::Release => {
                assert_eq!((l.flush, l.in_flight()), (k, None), "{context}: the recovery committed: {l:?}");
            }
            _ => {
                let state = |l: &Lane| l.in_flight().map(|i| i.state);
                assert_eq!((l.intent.as_ref().map(|i| i.k), state(l)), (Some(k), state(image_a.lane(lane))));
            }
        }
        let (_, c) = w.run_with("run-a#3", w.options("run-a")).await;
        let c = c.unwrap_or_else(|e| panic!("{context}: third run: {e}"));
        w.assert_exact(&context).await;
        assert_recovered(&w, &image_b, &fired, &c, &context).await;
    }
}

/// A flush begun under one layout is not re-applied under another (it
/// would write other items, so the marks could not skip what was applied).
/// Two fences: the table's recorded layout refuses the other configuration
/// at once, naming what differs; and were the table's layout forced to the
/// new one, the flush's own recorded layout still refuses it, naming the
/// lane, before taking it. Run with the old layout, the flush is finished
/// exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_in_flight_is_not_recovered_under_another_layout() {
    let w = World::new(81);
    let (fired, image) =
        fault_run(&w, "run-a", w.options("run-a"), Trigger::NthOf(Phase::Items, 2), Effect::ApplyHalfThenCrash).await;
    let (lane, _) = image.in_flight(IntentState::Valid)[0];
    let mut other = w.options("run-a");
    other.config.scatter.prefixes += 1;
    match w.run_with("run-a#2", other.clone()).await.1 {
        Err(PipelineError::Layout(e)) => assert!(e.to_string().contains("scatter.prefixes is 17 here but 16"), "{e}"),
        other => panic!("expected the table's layout to refuse, got {other:?}"),
    }
    let force = |config: &Config| {
        let layout = zigzag_model::layout::Layout::of(config);
        Item::new(zigzag_model::layout::LAYOUT_PK, zigzag_model::layout::LAYOUT_SK.to_vec())
            .with("layout", layout.canonical().as_str())
            .with("digest", layout.digest().as_str())
    };
    w.aggregates.put(force(&other.config)).await.unwrap();
    // The table's layout forced to the new one (by hand): the flush's own
    // layout still refuses, before the lane is taken.
    match w.run_with("run-a#3", other).await.1 {
        Err(PipelineError::LayoutChanged { lane: l, .. }) => assert_eq!(l, lane),
        other => panic!("expected LayoutChanged, got {other:?}"),
    }
    let still = w.lanes().await.into_iter().find(|l| l.lane == lane).unwrap();
    assert_eq!(still.owner.as_deref(), Some("run-a"), "the lane was not taken: {still:?}");
    w.aggregates.put(force(&w.config)).await.unwrap();
    let (_, c) = w.run_with("run-a#4", w.options("run-a")).await;
    let c = c.expect("the old layout finishes the flush");
    w.assert_exact("after a refused layout change").await;
    assert_recovered(&w, &image, &fired, &c, "after a refused layout change").await;
}

// ---------------------------------------------------------------------------
// (ii) A write that timed out after the store applied it.

/// Each lease-table write applied, then reported throttled: the retry
/// sends the same request, its guard refuses it (the write is there), and
/// the coordinator recognises its own write: the run goes on and finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_writes_applied_then_throttled_are_recognised_by_their_retry() {
    let cases = [
        (Phase::Join, 1),
        (Phase::TakeLease, 1),
        (Phase::Heartbeat, 1),
        (Phase::Open, 1),
        (Phase::Open, 4),
        (Phase::Validate, 2),
        (Phase::Commit, 1),
        (Phase::Commit, 3),
        (Phase::Advance, 2),
        (Phase::Release, 1),
    ];
    for (i, (phase, nth)) in cases.into_iter().enumerate() {
        let w = World::new(31 + i as u64);
        let context = format!("{phase:?} {nth} applied then throttled");
        w.faults.arm(Trigger::NthOf(phase, nth), Effect::ApplyThenThrottle);
        let s = w.run("run-a").await.unwrap_or_else(|e| panic!("{context}: {e}"));
        let f = w.faults.fired().unwrap_or_else(|| panic!("{context}: did not fire"));
        assert!(f.outcomes.iter().all(UpdateOutcome::applied), "{context}: {f:?}");
        assert!(s.retries >= 1, "{context}: {s:?}");
        let (again, outs) = f.replay.clone().unwrap_or_else(|| panic!("{context}: not retried"));
        assert_eq!(again, f.reqs, "{context}: the retry resends the same write");
        assert!(!outs[0].applied(), "{context}: the retry of an applied write is refused by its guard");
        w.assert_exact(&context).await;
        let lanes = w.lanes().await;
        assert!(lanes.iter().all(|l| l.owner.is_none()), "{context}: every lane freed: {lanes:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_writes_applied_then_throttled_are_not_counted_twice() {
    let cases = [(1u64, Effect::ApplyThenThrottle), (3, Effect::ApplyThenThrottle), (2, Effect::ApplyThenThrottleEach)];
    for (i, (nth, effect)) in cases.into_iter().enumerate() {
        let w = World::new(21 + i as u64);
        let context = format!("item call {nth}: {effect:?}");
        w.faults.arm(Trigger::NthOf(Phase::Items, nth), effect);
        let s = w.run("run-a").await.unwrap_or_else(|e| panic!("{context}: a throttle is retried: {e}"));
        let f = w.faults.fired().expect("the fault fired");
        assert_eq!(f.phase, Phase::Items);
        w.assert_exact(&context).await;
        assert!(s.retries >= 1, "{context}: {s:?}");

        // The retry sent the same requests; each one the faulted call had
        // applied now fails its mark guard, and is then skipped.
        let applied = f.outcomes.iter().filter(|o| o.applied()).count() as u64;
        assert!(applied > 0, "{context}");
        let (replay_reqs, replay_outs) = f.replay.expect("the batch was retried");
        assert_eq!(replay_reqs, f.reqs, "{context}: the retry resends the same batch");
        for (first, again) in f.outcomes.iter().zip(&replay_outs) {
            if first.applied() {
                assert!(!again.applied(), "{context}: a replayed write applied twice");
            }
        }
        assert!(s.skipped >= applied, "{context}: {applied} replayed writes, {s:?}");
    }
}

/// A batch the store took in part: the first half applied, each item of
/// the second half throttled. The flusher sends the throttled items again,
/// and only those.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_writes_throttled_in_part_are_retried_alone() {
    let w = World::new(25);
    w.faults.arm(Trigger::NthOf(Phase::Items, 2), Effect::ApplyHalfThrottleRest);
    let s = w.run("run-a").await.expect("throttled items are retried");
    let f = w.faults.fired().expect("the fault fired");
    let half = f.outcomes.len();
    assert!(f.reqs.len() >= 2 && half < f.reqs.len(), "a batch of several items: {}", f.reqs.len());
    let (again, outs) = f.replay.expect("the throttled items were retried");
    assert_eq!(again, f.reqs[half..], "the retry sends the throttled items, and only those");
    assert!(outs.iter().all(UpdateOutcome::applied), "they had not applied: {outs:?}");
    assert!(s.retries >= (f.reqs.len() - half) as u64, "{s:?}");
    w.assert_exact("a batch throttled in part").await;
}

/// A commit applied then throttled, then a restart: it resumes from the
/// applied commit; nothing is in flight, nothing is read again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_applied_then_throttled_then_restart_finds_nothing_to_do() {
    let w = World::new(51);
    w.faults.arm(Trigger::NthOf(Phase::Commit, 2), Effect::ApplyThenThrottle);
    w.run("run-a").await.expect("a retried, already applied commit is not a fence");
    assert!(w.faults.fired().is_some());
    let s = w.run("run-b").await.expect("restart");
    assert_eq!((s.recovered, s.records), (0, 0), "the commit was applied: nothing is in flight: {s:?}");
    w.assert_exact("commit applied then throttled, restarted").await;
}

// ---------------------------------------------------------------------------
// (iii) A zombie: its lane is taken while it is mid-flush.

/// Runs a zombie scenario: `run-a` is robbed of its lane mid-flush (after
/// an item write applied) by `run-b`'s worker id; then `run-b` starts (it
/// takes its "predecessor's" lane over at once) and both run to the end.
async fn zombie(w: &World, nth_item: u64, leases: bool, pause: Duration, limit: Duration) -> ZombieRun {
    zombie_with(w, nth_item, leases, pause, limit, false).await
}

/// `zombie`; with `b_after_rejoin`, `run-b` starts only once the zombie
/// has joined again.
async fn zombie_with(
    w: &World,
    nth_item: u64,
    leases: bool,
    pause: Duration,
    limit: Duration,
    b_after_rejoin: bool,
) -> ZombieRun {
    let failover = Duration::from_millis(900);
    let opts = |worker: &str| PipelineOptions { failover, ..w.options(worker) };
    let steal = Effect::Steal { thief: "run-b".into(), leases, pause };
    w.faults.arm(Trigger::NthOf(Phase::Items, nth_item), steal);
    let (a_proc, a) = w.pipeline("run-a", opts("run-a"));
    let a_run = tokio::spawn(a.run(a_proc.stop.clone()));
    let deadline = Instant::now() + RUN_LIMIT;
    let fired = loop {
        if let Some(f) = w.faults.fired() {
            break f;
        }
        assert!(Instant::now() < deadline, "the steal did not fire");
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    while b_after_rejoin && !a_proc.log().iter().any(|l| l.call > fired.call && l.phase == Phase::Join) {
        assert!(Instant::now() < deadline, "the zombie did not join again");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let (b_proc, b) = w.pipeline("run-b", opts("run-b"));
    let b_run = tokio::spawn(b.run(b_proc.stop.clone()));
    let deadline = Instant::now() + limit;
    while !(a_run.is_finished() && b_run.is_finished()) {
        if Instant::now() > deadline {
            let (lanes, leases) = (w.lanes().await, w.shard_leases().await);
            let tail = |p: &Process| {
                let log = p.log();
                let mut by: BTreeMap<Phase, usize> = BTreeMap::new();
                for l in &log {
                    *by.entry(l.phase).or_default() += 1;
                }
                let after: Vec<_> = log
                    .iter()
                    .filter(|l| l.call > fired.call)
                    .take(40)
                    .map(|l| format!("{}:{:?}/{:?}/{:?} +{} -{}", l.call, l.phase, l.lane, l.k, l.applied, l.refused))
                    .collect();
                format!("{by:?}\n{}", after.join("\n"))
            };
            panic!(
                "the zombie and the new owner did not finish within {limit:?} (finished: {}, {}):\n\
                 {lanes:?}\n{leases:?}\nrun-a: {:?}\nrun-b: {:?}",
                a_run.is_finished(),
                b_run.is_finished(),
                tail(&a_proc),
                tail(&b_proc),
            )
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (a, b) = (a_run.await.unwrap(), b_run.await.unwrap());
    ZombieRun { fired, a, b, a_log: a_proc.log() }
}

struct ZombieRun {
    fired: Fired,
    a: Result<RunSummary, PipelineError>,
    b: Result<RunSummary, PipelineError>,
    a_log: Vec<Logged>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zombie_mid_flush_is_fenced_and_the_new_owner_finishes_its_flush() {
    // (nth item write, pause): the zombie is fenced at its commit, or —
    // stalled after the steal — its heartbeat notices first.
    let cases = [(1, Duration::ZERO), (3, Duration::ZERO), (2, Duration::from_millis(700))];
    for (i, (nth, pause)) in cases.into_iter().enumerate() {
        let w = World::new(61 + i as u64);
        let context = format!("lane stolen after item write {nth} (the zombie stalled {pause:?})");
        let z = zombie(&w, nth, true, pause, RUN_LIMIT).await;
        let (lane, k) = z.fired.stolen.expect("stolen");
        let context = format!("{context}: lane {lane} at flush {k}");

        // The zombie learned it lost the lane, dropped its state and went on
        // as a new worker (or stopped with the lost lane).
        match &z.a {
            Ok(s) => assert!(s.leases_lost >= 1, "{context}: {s:?}"),
            Err(e) => assert!(e.to_string().contains("was taken by another worker"), "{context}: {e}"),
        }
        let b = z.b.as_ref().unwrap_or_else(|e| panic!("{context}: the new owner failed: {e}"));
        assert!(b.recovered >= 1, "{context}: the new owner finished the stolen flush: {b:?}");

        // Fenced: after the steal and until it joined again, none of the
        // zombie's writes on the lane applied, and its commit of the stolen
        // flush was refused.
        let after: Vec<&Logged> = z.a_log.iter().filter(|l| l.call > z.fired.call).collect();
        let rejoined = after.iter().find(|l| l.phase == Phase::Join).map_or(u64::MAX, |l| l.call);
        let on_lane = |l: &&&Logged| l.phase != Phase::Items && l.lane == Some(lane) && l.call < rejoined;
        assert!(after.iter().filter(on_lane).all(|l| l.applied == 0), "{context}: {after:?}");
        let fence = after
            .iter()
            .find(|l| l.phase == Phase::Commit && l.lane == Some(lane))
            .unwrap_or_else(|| panic!("{context}: the zombie never tried to commit the stolen flush: {after:?}"));
        assert_eq!(fence.refused, 1, "{context}: {fence:?}");
        // It wrote no item of a later flush under the lost lane, and none at
        // all once its commit was refused (until it joined again).
        for l in after.iter().filter(|l| l.phase == Phase::Items && l.lane == Some(lane) && l.call < rejoined) {
            assert_eq!(l.k, Some(k), "{context}: {l:?}");
            assert!(l.call < fence.call, "{context}: an item written under a lost lane: {l:?}");
        }
        let lanes = w.lanes().await;
        let l = lanes.iter().find(|l| l.lane == lane).unwrap();
        assert!(l.flush >= k, "{context}: the stolen flush was committed: {l:?}");
        w.assert_exact(&context).await;
    }
}

// ---------------------------------------------------------------------------
// Rejoining after a lost lane (both were bugs this file found).

/// A worker whose lane is taken while it still owns shard leases rejoins
/// with a new lane, so it is alive again and nobody takes those leases: it
/// must read them again itself (from their checkpoints, once the flush left
/// on its old lane is recovered). Here the taker takes the lane and none of
/// the leases, and `run-b` starts once the zombie has rejoined. In
/// production the same state comes from a zombie that rejoins before the
/// other workers' next pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_lost_its_lane_but_kept_its_leases_reads_them_again() {
    let w = World::new(65);
    let z = zombie_with(&w, 2, false, Duration::ZERO, Duration::from_secs(8), true).await;
    z.a.expect("the zombie rejoins and finishes");
    z.b.expect("the new owner finishes");
    w.assert_exact("lane stolen, leases kept").await;
}

/// When the heartbeat notices the lost lane while the main loop is
/// mid-flush, two losses reach the main loop: the flush's (its commit
/// refused), which rejoins at once (possibly onto the same lane number, freed
/// by the recoverer), and the heartbeat's `Event::LaneLost`, queued
/// meanwhile. The second is about the earlier join and must be ignored, or
/// the worker drops its new state and takes yet another lane.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_rejoins_once_when_its_heartbeat_and_its_commit_both_find_the_lane_lost() {
    let w = World::new(63);
    let z = zombie(&w, 2, true, Duration::from_millis(700), RUN_LIMIT).await;
    let joins: Vec<&Logged> = z.a_log.iter().filter(|l| l.call > z.fired.call && l.phase == Phase::Join).collect();
    assert!(z.a.is_ok() && z.b.is_ok(), "{:?} {:?}", z.a, z.b);
    assert_eq!(joins.len(), 1, "the zombie joined again once: {joins:?}");
    let lanes = w.lanes().await;
    assert!(lanes.iter().all(|l| l.owner.is_none()), "no lane left owned: {lanes:?}");
}
