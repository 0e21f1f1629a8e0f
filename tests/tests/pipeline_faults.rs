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
//! `zigzag-lease` is not a dependency of this crate: the few lease-table
//! requests and item readers the tests need are written out below, after
//! `zigzag_lease::items` (whose doc comment describes the items).

use async_trait::async_trait;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use zigzag_core::table::{
    Action, AttrValue, CmpOp, Item, ItemResult, QueryPage, QueryRequest, SortKeyCondition, SortedTable, TableError,
    UpdateOutcome, UpdateRequest,
};
use zigzag_gather::check::{self, Status};
use zigzag_gather::execute::ExecOptions;
use zigzag_ingest::{Pipeline, PipelineError, PipelineOptions, RunSummary};
use zigzag_loadgen::{GenConfig, Generated, Generator, SyntheticSource};
use zigzag_model::{Config, KeyModel, Measures, Position, ScatterMode, Truth};
use zigzag_sqlite::SqliteTable;

const STREAM: &str = "clicks";
/// A worker presumed dead after this long without a heartbeat (heartbeats
/// every third of it, so a run of a few hundred ms beats several times).
const FAILOVER: Duration = Duration::from_millis(300);
/// No run of these tests takes nearly this long; one that does is stuck.
const RUN_LIMIT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------
// The lease table's items (after `zigzag_lease::items`).

const LANES_PK: &str = "#lanes";

fn shards_pk() -> String {
    format!("#shards#{STREAM}")
}

fn num(v: u64) -> AttrValue {
    AttrValue::from(i64::try_from(v).expect("small"))
}

fn attr_num(item: &Item, attr: &str) -> u64 {
    match item.attrs.get(attr) {
        None => 0,
        Some(AttrValue::N(d)) => u64::try_from(*d).expect("a count"),
        Some(v) => panic!("{attr} is {v:?}"),
    }
}

fn attr_str<'a>(item: &'a Item, attr: &str) -> Option<&'a str> {
    match item.attrs.get(attr) {
        Some(AttrValue::S(s)) => Some(s),
        _ => None,
    }
}

/// `zigzag_lease::items::take_lane(lane, Some((owner, beat)), me, _)`: takes
/// a lane whose owner's heartbeat was last seen at `beat` (a recovery).
fn take_lane(lane: u32, owner: &str, beat: u64, me: &str) -> UpdateRequest {
    UpdateRequest::new(LANES_PK, lane.to_be_bytes().to_vec())
        .set("owner", me)
        .set_if_absent("flush", num(0))
        .set("beat", num(beat + 1))
        .guard("owner", CmpOp::Eq, owner, false)
        .guard("beat", CmpOp::Eq, num(beat), false)
}

/// `zigzag_lease::items::take_lease`: takes a shard lease seen at counter `seen`.
fn take_lease(shard: &str, seen: u64, me: &str) -> UpdateRequest {
    UpdateRequest::new(shards_pk(), shard.as_bytes())
        .set("owner", me)
        .set("lease", num(seen + 1))
        .set("handoff", "")
        .guard("lease", CmpOp::Eq, num(seen), seen == 0)
}

/// One shard range of an intent: records `(from, to]`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Range {
    shard: String,
    from: Option<Position>,
    to: Position,
    ends: bool,
}

/// A lane item (`zigzag_lease::Lane`).
#[derive(Debug, Clone)]
struct LaneView {
    lane: u32,
    owner: Option<String>,
    beat: u64,
    /// The last committed flush.
    flush: u64,
    /// The current (or last) intent: its number, state and ranges.
    k: u64,
    state: Option<String>,
    ranges: Vec<Range>,
}

impl LaneView {
    fn from_item(item: &Item) -> LaneView {
        let lane = u32::from_be_bytes(item.sk.as_slice().try_into().expect("a 4-byte lane number"));
        let ranges: serde_json::Value = serde_json::from_str(attr_str(item, "ranges").unwrap_or("[]")).unwrap();
        let pos = |v: &serde_json::Value| v.as_str().map(|s| s.parse::<Position>().expect("a position"));
        let ranges = ranges
            .as_array()
            .expect("ranges are a list")
            .iter()
            .map(|r| Range {
                shard: r["s"].as_str().unwrap().to_string(),
                from: pos(&r["f"]),
                to: pos(&r["t"]).expect("a range end"),
                ends: r["e"].as_bool().unwrap_or(false),
            })
            .collect();
        LaneView {
            lane,
            owner: attr_str(item, "owner").filter(|o| !o.is_empty()).map(String::from),
            beat: attr_num(item, "beat"),
            flush: attr_num(item, "flush"),
            k: attr_num(item, "k"),
            state: attr_str(item, "state").map(String::from),
            ranges,
        }
    }

    /// The state of an intent recorded and not done ("open" or "valid").
    fn in_flight(&self) -> Option<&str> {
        self.state.as_deref().filter(|s| *s != "done")
    }
}

/// A shard lease item (`zigzag_lease::ShardLease`).
#[derive(Debug, Clone)]
struct LeaseView {
    shard: String,
    owner: Option<String>,
    lease: u64,
    checkpoint: Option<Position>,
    finished: bool,
}

impl LeaseView {
    fn from_item(item: &Item) -> LeaseView {
        LeaseView {
            shard: String::from_utf8(item.sk.clone()).unwrap(),
            owner: attr_str(item, "owner").filter(|o| !o.is_empty()).map(String::from),
            lease: attr_num(item, "lease"),
            checkpoint: attr_str(item, "cp").map(|s| s.parse().expect("a checkpoint")),
            finished: matches!(item.attrs.get("fin"), Some(AttrValue::Bool(true))),
        }
    }
}

/// Every item of a partition (strongly consistent, every page).
async fn read_partition(table: &dyn SortedTable, pk: &str) -> Vec<Item> {
    let mut items = Vec::new();
    let mut start = None;
    loop {
        let mut req = QueryRequest::new(pk, SortKeyCondition::Any);
        req.consistent = true;
        req.exclusive_start = start;
        let page = table.query(&req).await.unwrap();
        items.extend(page.items);
        match page.last_evaluated {
            Some(k) => start = Some(k),
            None => return items,
        }
    }
}

async fn read_lanes(table: &dyn SortedTable) -> Vec<LaneView> {
    read_partition(table, LANES_PK).await.iter().map(LaneView::from_item).collect()
}

async fn read_leases(table: &dyn SortedTable) -> Vec<LeaseView> {
    read_partition(table, &shards_pk()).await.iter().map(LeaseView::from_item).collect()
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
    } else if req.pk == shards_pk() {
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
    /// Apply an item write, then do what a worker that presumed the writer
    /// dead does: take its unfinished shard leases (if `leases`) and its
    /// lane (seen at its owner and beat), as `thief`. The writer is not
    /// told; it goes on with its flush. Then the writer's calls are slowed
    /// by `slow` (so its heartbeat notices before its commit).
    Steal { thief: String, leases: bool, slow: Duration },
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
    /// Added to each call once set (`Steal`).
    slow: Mutex<Duration>,
    log: Mutex<Vec<Logged>>,
}

impl Process {
    fn new(name: &str) -> Arc<Self> {
        Arc::new(Process {
            name: name.into(),
            dead: AtomicBool::new(false),
            stop: CancellationToken::new(),
            open: AtomicBool::new(false),
            slow: Mutex::new(Duration::ZERO),
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
    async fn before_call(&self) -> Result<(), TableError> {
        let slow = *self.process.slow.lock().unwrap();
        if !slow.is_zero() {
            tokio::time::sleep(slow).await;
        }
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
        self.before_call().await?;
        let phase = if self.aggregates {
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
                    if f.process == self.process.name && f.phase == phase && f.replay.is_none() && !f.outcomes.is_empty()
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
                let each = |i| Err(TableError::Throttled(format!("injected timeout after apply (call {call}, item {i})")));
                Ok((0..reqs.len()).map(each).collect())
            }
            Effect::Steal { thief, leases, slow } => {
                assert_eq!(phase, Phase::Items, "a steal fires on an item write");
                let out = outcomes(self.inner.update_batch(reqs).await?);
                fired.outcomes = out.clone();
                fired.stolen = Some(self.steal(&reqs[0], thief, *leases).await);
                *self.process.slow.lock().unwrap() = *slow;
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
        let table = &*self.faults.leases;
        let victim = self.process.name.as_str();
        if leases {
            for l in read_leases(table).await {
                if l.owner.as_deref() == Some(victim) && !l.finished {
                    let out = table.update(&take_lease(&l.shard, l.lease, thief)).await.unwrap();
                    assert!(out.applied(), "only the victim writes its leases, and it is mid-flush");
                }
            }
        }
        // The victim's heartbeat may move the beat between the read and the
        // take: read again then.
        for _ in 0..10 {
            let item = table.get(LANES_PK, &lane.to_be_bytes()).await.unwrap().expect("the writer's lane");
            let seen = LaneView::from_item(&item);
            assert_eq!(
                (seen.owner.as_deref(), seen.k, seen.in_flight()),
                (Some(victim), k, Some("valid")),
                "the writer writes items of its valid intent: {seen:?}"
            );
            if table.update(&take_lane(lane, victim, seen.beat, thief)).await.unwrap().applied() {
                return (lane, k);
            }
        }
        panic!("lane {lane} could not be taken from {victim}")
    }

    async fn read(&self, req: &QueryRequest) -> Result<QueryPage, TableError> {
        self.before_call().await?;
        let phase = match req.pk.as_str() {
            _ if self.aggregates => panic!("the pipeline does not read the aggregates: {req:?}"),
            LANES_PK => Phase::ReadLanes,
            pk if pk == shards_pk() && self.process.open.load(Ordering::SeqCst) => Phase::Proof,
            pk if pk == shards_pk() => Phase::ReadLeases,
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

    async fn lanes(&self) -> Vec<LaneView> {
        read_lanes(&*self.leases).await
    }

    async fn shard_leases(&self) -> Vec<LeaseView> {
        read_leases(&*self.leases).await
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
            assert_eq!(total.store, Measures::from(self.truth.totals), "{context}: {rollup:?}");
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

    /// Aggregate items whose mark of `lane` is `k` (the last flush of that
    /// lane that wrote them).
    async fn items_marked(&self, lane: u32, k: u64) -> usize {
        let mark = format!("w@{lane}");
        let mut n = 0;
        for pk in self.partitions() {
            for item in read_partition(&*self.aggregates, &pk).await {
                n += usize::from(matches!(item.attrs.get(&mark), Some(AttrValue::N(d)) if u64::try_from(*d) == Ok(k)));
            }
        }
        n
    }

    /// The partition keys the aggregates can have: every prefix, rollup and
    /// time bin of the generated events.
    fn partitions(&self) -> BTreeSet<String> {
        let (first, last) = (self.truth.first_ms.expect("events"), self.truth.last_ms.expect("events"));
        let mut pks = BTreeSet::new();
        for &rollup in &self.config.rollups {
            let bin = rollup.bin();
            let mut t = bin.start_of(first);
            while t <= last {
                for prefix in 0..self.config.scatter.prefixes {
                    pks.insert(KeyModel::partition_key(prefix, rollup, t));
                }
                t = bin.next_start(t);
            }
        }
        pks
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
