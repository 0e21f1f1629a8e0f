//! Store faults injected in process, between the pipeline and a real store
//! (SQLite files), checked end to end against the generator's ground truth
//! with gather's `check`:
//!
//! - a crash mid-flush (the Nth store call fails, in the claim, begin,
//!   items or commit phase), then a new pipeline on the same stores: no
//!   record lost, none counted twice, unfinished flushes recovered;
//! - a write that timed out but was applied (applied, then `Throttled`):
//!   the retry is a no-op, nothing counted twice;
//! - a zombie: another owner claims the shards while a pipeline is
//!   mid-flush; the old one is fenced, the new one finishes its flush.

use async_trait::async_trait;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;
use zigzag_core::table::{
    Action, AttrValue, Item, QueryPage, QueryRequest, SortedTable, TableError, UpdateOutcome, UpdateRequest,
};
use zigzag_gather::check::{self, Status};
use zigzag_gather::execute::ExecOptions;
use zigzag_ingest::decode::DecodeLimits;
use zigzag_ingest::flush::FlushError;
use zigzag_ingest::{Pipeline, PipelineError, PipelineOptions, RunSummary};
use zigzag_loadgen::{GenConfig, Generated, Generator, SyntheticSource};
use zigzag_model::checkpoint::{self, Checkpoint};
use zigzag_model::{Config, KeyModel, Measures, Position, ScatterMode, Truth};
use zigzag_sqlite::SqliteTable;

const STREAM: &str = "clicks";

// ---------------------------------------------------------------------------
// Fault injection.

/// Which step of the flush protocol a store call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Phase {
    /// Startup: take ownership of a shard.
    Claim,
    /// Step 1: record the flush as pending.
    Begin,
    /// Step 2: aggregate item updates.
    Items,
    /// Step 3: commit the checkpoint.
    Commit,
}

fn checkpoint_phase(req: &UpdateRequest) -> Phase {
    let sets = |attr: &str| req.actions.iter().any(|(a, _)| a == attr);
    if sets("owner") {
        Phase::Claim
    } else if sets("seq") {
        Phase::Commit
    } else {
        assert!(sets("pending_seq"), "an unknown checkpoint update: {req:?}");
        Phase::Begin
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trigger {
    /// The Nth store call (from 1), over both tables.
    Nth(u64),
    /// The Nth call (from 1) of one phase.
    NthOf(Phase, u64),
    /// The Nth commit (from 1) that marks its shard finished (final flushes).
    NthFinalCommit(u64),
    /// The Nth begin (from 1) right after another begin: a later shard of
    /// a flush, an earlier shard's flush already begun.
    NthBeginAfterBegin(u64),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Effect {
    /// Fail with `TableError::Store`, applying nothing (a crash mid-flush).
    Crash,
    /// Apply the first half of the batch, then fail like `Crash` (a batch
    /// the store applied in part, as a non-transactional store may).
    ApplyHalfThenCrash,
    /// Apply, then report `Throttled` (a timeout after the store applied it).
    ApplyThenThrottle,
    /// Apply, then let another owner claim every shard (a zombie's view).
    ApplyThenClaim(String),
}

/// What happened when the fault fired.
#[derive(Debug, Clone)]
struct Fired {
    call: u64,
    phase: Phase,
    /// The requests of the faulted call and what they did (when applied).
    reqs: Vec<UpdateRequest>,
    outcomes: Vec<UpdateOutcome>,
    /// The next call of the same phase after the fault (the retry), if any.
    replay: Option<(Vec<UpdateRequest>, Vec<UpdateOutcome>)>,
}

/// Shared by the wrappers of both tables: one call counter, one armed fault.
struct Faults {
    calls: AtomicU64,
    /// Commits that marked a shard finished.
    finals: AtomicU64,
    /// Begins right after a begin, and the phase of the last call.
    begins_after_begin: AtomicU64,
    last_phase: Mutex<Option<Phase>>,
    per_phase: Mutex<BTreeMap<Phase, u64>>,
    armed: Mutex<Option<(Trigger, Effect)>>,
    fired: Mutex<Option<Fired>>,
    /// The real checkpoint table and the shards, for `ApplyThenClaim`.
    checkpoints: Arc<dyn SortedTable>,
    shards: Vec<String>,
}

impl Faults {
    fn new(checkpoints: Arc<dyn SortedTable>, shards: Vec<String>) -> Arc<Self> {
        Arc::new(Faults {
            calls: AtomicU64::new(0),
            finals: AtomicU64::new(0),
            begins_after_begin: AtomicU64::new(0),
            last_phase: Mutex::new(None),
            per_phase: Mutex::new(BTreeMap::new()),
            armed: Mutex::new(None),
            fired: Mutex::new(None),
            checkpoints,
            shards,
        })
    }

    fn arm(&self, trigger: Trigger, effect: Effect) {
        *self.armed.lock().unwrap() = Some((trigger, effect));
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

    /// Counts a call; the effect to apply to it, if the fault fires now.
    fn on_call(&self, phase: Phase, finishes: bool) -> (u64, Option<Effect>) {
        let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let nth_of_phase = {
            let mut per = self.per_phase.lock().unwrap();
            let n = per.entry(phase).or_insert(0);
            *n += 1;
            *n
        };
        let nth_final = self.finals.fetch_add(u64::from(finishes), Ordering::SeqCst) + u64::from(finishes);
        let after_begin = phase == Phase::Begin && self.last_phase.lock().unwrap().replace(phase) == Some(Phase::Begin);
        if phase != Phase::Begin {
            *self.last_phase.lock().unwrap() = Some(phase);
        }
        let nth_after_begin =
            self.begins_after_begin.fetch_add(u64::from(after_begin), Ordering::SeqCst) + u64::from(after_begin);
        let mut armed = self.armed.lock().unwrap();
        let fire = match armed.as_ref() {
            Some((Trigger::Nth(n), _)) => *n == call,
            Some((Trigger::NthOf(p, n), _)) => *p == phase && *n == nth_of_phase,
            Some((Trigger::NthFinalCommit(n), _)) => finishes && *n == nth_final,
            Some((Trigger::NthBeginAfterBegin(n), _)) => after_begin && *n == nth_after_begin,
            None => false,
        };
        if fire {
            let (_, effect) = armed.take().expect("armed");
            (call, Some(effect))
        } else {
            (call, None)
        }
    }

    /// Records the call after a fault in the same phase (the retry).
    fn after_call(&self, phase: Phase, reqs: &[UpdateRequest], outcomes: &Result<Vec<UpdateOutcome>, TableError>) {
        let mut fired = self.fired.lock().unwrap();
        if let (Some(f), Ok(outs)) = (fired.as_mut(), outcomes) {
            if f.phase == phase && f.replay.is_none() && !f.outcomes.is_empty() {
                f.replay = Some((reqs.to_vec(), outs.clone()));
            }
        }
    }
}

fn injected(what: &str) -> TableError {
    TableError::Store(Box::new(std::io::Error::other(format!("injected crash ({what})"))))
}

/// A store whose calls go through `Faults`.
struct Faulty {
    inner: Arc<dyn SortedTable>,
    faults: Arc<Faults>,
    /// The aggregates table (every update is an item write) or checkpoints.
    aggregates: bool,
}

impl Faulty {
    async fn updates(&self, reqs: &[UpdateRequest]) -> Result<Vec<UpdateOutcome>, TableError> {
        let phase = match (self.aggregates, reqs.first()) {
            (true, _) => Phase::Items,
            (false, Some(r)) => checkpoint_phase(r),
            (false, None) => panic!("an empty checkpoint batch"),
        };
        let finishes = phase == Phase::Commit
            && reqs
                .iter()
                .any(|r| r.actions.iter().any(|(a, v)| a == "finished" && *v == Action::Set(AttrValue::Bool(true))));
        let (call, effect) = self.faults.on_call(phase, finishes);
        let Some(effect) = effect else {
            let out = self.inner.update_batch(reqs).await;
            self.faults.after_call(phase, reqs, &out);
            return out;
        };
        let mut fired = Fired { call, phase, reqs: reqs.to_vec(), outcomes: Vec::new(), replay: None };
        let result = match &effect {
            Effect::Crash => Err(injected(&format!("call {call}, {phase:?}"))),
            Effect::ApplyHalfThenCrash => {
                fired.outcomes = self.inner.update_batch(&reqs[..reqs.len() / 2]).await?;
                Err(injected(&format!("call {call}, {phase:?}, half applied")))
            }
            Effect::ApplyThenThrottle => {
                fired.outcomes = self.inner.update_batch(reqs).await?;
                Err(TableError::Throttled(format!("injected timeout after apply (call {call}, {phase:?})")))
            }
            Effect::ApplyThenClaim(owner) => {
                let out = self.inner.update_batch(reqs).await?;
                fired.outcomes = out.clone();
                for shard in &self.faults.shards {
                    let out = self.faults.checkpoints.update(&checkpoint::claim(STREAM, shard, owner)).await?;
                    assert!(out.applied(), "claims are unconditional");
                }
                Ok(out)
            }
        };
        *self.faults.fired.lock().unwrap() = Some(fired);
        result
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
        self.inner.query(req).await
    }

    async fn update(&self, req: &UpdateRequest) -> Result<UpdateOutcome, TableError> {
        let mut out = self.updates(std::slice::from_ref(req)).await?;
        Ok(out.pop().expect("one outcome per request"))
    }

    async fn update_batch(&self, reqs: &[UpdateRequest]) -> Result<Vec<UpdateOutcome>, TableError> {
        self.updates(reqs).await
    }

    async fn get(&self, pk: &str, sk: &[u8]) -> Result<Option<Item>, TableError> {
        self.inner.get(pk, sk).await
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
    aggregates: Arc<dyn SortedTable>,
    checkpoints: Arc<dyn SortedTable>,
    faults: Arc<Faults>,
    faulty_aggregates: Arc<dyn SortedTable>,
    faulty_checkpoints: Arc<dyn SortedTable>,
    dead_letters: std::path::PathBuf,
}

impl World {
    fn new(seed: u64) -> World {
        Self::with_config(seed, config())
    }

    fn with_config(seed: u64, config: Config) -> World {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("zigzag.db");
        let aggregates: Arc<dyn SortedTable> = Arc::new(SqliteTable::open(&db).unwrap());
        let checkpoints: Arc<dyn SortedTable> = Arc::new(SqliteTable::open_table(&db, "checkpoints").unwrap());
        let gen_cfg = gen_config(seed);
        let shards = (0..gen_cfg.shards).map(Generator::shard_id).collect();
        let faults = Faults::new(checkpoints.clone(), shards);
        let faulty_aggregates =
            Arc::new(Faulty { inner: aggregates.clone(), faults: faults.clone(), aggregates: true });
        let faulty_checkpoints =
            Arc::new(Faulty { inner: checkpoints.clone(), faults: faults.clone(), aggregates: false });
        World {
            dead_letters: dir.path().join("dead.jsonl"),
            _dir: dir,
            truth: zigzag_loadgen::truth::compute(&Generator::new(gen_cfg.clone())),
            gen_cfg,
            config,
            aggregates,
            checkpoints,
            faults,
            faulty_aggregates,
            faulty_checkpoints,
        }
    }

    /// One pipeline run over the fault wrappers (a fresh source each time:
    /// the synthetic stream replays from any position).
    async fn run(&self, owner: &str) -> Result<RunSummary, PipelineError> {
        self.run_with(owner, &self.config).await
    }

    async fn run_with(&self, owner: &str, config: &Config) -> Result<RunSummary, PipelineError> {
        let source = Arc::new(SyntheticSource::new(Generator::new(self.gen_cfg.clone()), None));
        let opts = PipelineOptions {
            config: config.clone(),
            stream: STREAM.into(),
            owner: owner.into(),
            limits: DecodeLimits::default(),
            batch_size: 100,
            dead_letters: self.dead_letters.clone(),
        };
        let pipeline =
            Arc::new(Pipeline::new(source, self.faulty_aggregates.clone(), self.faulty_checkpoints.clone(), opts)?);
        pipeline.run(CancellationToken::new()).await
    }

    /// The store equals the ground truth (gather's check, every group), and
    /// every shard's checkpoint is committed to its end.
    async fn assert_exact(&self, owner: &str, context: &str) {
        let km = KeyModel::new(&self.config).unwrap();
        let opts = ExecOptions { consistent: true, ..ExecOptions::default() };
        let now = self.truth.last_ms.unwrap_or_default();
        let report = check::check(&*self.aggregates, &km, &self.truth, now, &opts).await.expect("gather check");
        let text = check::render(&report);
        assert_eq!(report.mismatches(), 0, "{context}: store != truth\n{text}");
        assert!(report.rows.iter().all(|r| r.status == Status::Match), "{context}\n{text}");
        let total = report.rows.iter().find(|r| r.check == "total").expect("a total row");
        assert_eq!(total.store, Measures::from(self.truth.totals), "{context}");

        let gen = Generator::new(self.gen_cfg.clone());
        for shard in 0..self.gen_cfg.shards {
            let id = Generator::shard_id(shard);
            let item = self.checkpoints.get(STREAM, id.as_bytes()).await.unwrap().expect("checkpoint item");
            let cp = Checkpoint::from_item(&item).unwrap();
            assert_eq!(cp.owner.as_deref(), Some(owner), "{context}: {id}");
            assert_eq!(cp.committed, Some(Position::at(gen.shard_len(shard))), "{context}: {id}");
            assert_eq!(cp.pending, None, "{context}: {id}");
            assert!(cp.finished, "{context}: {id}");
        }
        self.assert_every_bad_record_dead_lettered(context);
    }

    /// Every malformed record is in the dead-letter file (perhaps twice
    /// after a crash, never missing), and nothing else is.
    fn assert_every_bad_record_dead_lettered(&self, context: &str) {
        let gen = Generator::new(self.gen_cfg.clone());
        let mut expected = std::collections::BTreeSet::new();
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
}

fn dead_letter_positions(path: &Path) -> std::collections::BTreeSet<(String, String)> {
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
        lo + self.next() % (hi - lo + 1)
    }
}

fn is_injected_crash(e: &PipelineError) -> bool {
    match e {
        PipelineError::Checkpoint(TableError::Store(inner))
        | PipelineError::Flush(FlushError::Table(TableError::Store(inner))) => {
            inner.to_string().contains("injected crash")
        }
        _ => false,
    }
}

// ---------------------------------------------------------------------------
// (i) Crash mid-flush, then a new pipeline on the same stores.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_at_any_store_call_then_restart_loses_and_doubles_nothing() {
    // How many calls of each phase a clean run makes (varies a little with
    // timing: fault points are picked in the first half of each).
    let dry = World::new(11);
    let s = dry.run("dry").await.expect("clean run");
    dry.assert_exact("dry", "clean run").await;
    let counts = dry.faults.counts();
    let total = dry.faults.calls.load(Ordering::SeqCst);
    let of = |p: Phase| counts.get(&p).copied().unwrap_or(0);
    assert!(of(Phase::Begin) >= 4 && of(Phase::Commit) >= 4 && of(Phase::Items) >= 4, "{counts:?} {s:?}");
    // Upper ends of fault-point ranges: the first half of a phase's calls.
    let upto = |p: Phase, lo: u64| (of(p) / 2).max(lo);

    let mut rng = Rng(0x5eed);
    let crash = Effect::Crash;
    let mut cases = vec![
        (Trigger::NthOf(Phase::Claim, 2), crash.clone()),
        (Trigger::NthOf(Phase::Begin, 1), crash.clone()),
        (Trigger::NthOf(Phase::Begin, 2), crash.clone()),
        (Trigger::NthOf(Phase::Begin, rng.range(3, upto(Phase::Begin, 3))), crash.clone()),
        (Trigger::NthBeginAfterBegin(1), crash.clone()),
        (Trigger::NthOf(Phase::Items, 1), crash.clone()),
        (Trigger::NthOf(Phase::Items, rng.range(2, upto(Phase::Items, 2))), crash.clone()),
        (Trigger::NthOf(Phase::Items, 1), Effect::ApplyHalfThenCrash),
        (Trigger::NthOf(Phase::Items, rng.range(2, upto(Phase::Items, 2))), Effect::ApplyHalfThenCrash),
        (Trigger::NthOf(Phase::Commit, 1), crash.clone()),
        (Trigger::NthOf(Phase::Commit, 2), crash.clone()),
        (Trigger::NthOf(Phase::Commit, rng.range(3, upto(Phase::Commit, 3))), crash.clone()),
        // In the final flushes (recovery commits them unfinished; the
        // restart then finishes the shard).
        (Trigger::NthFinalCommit(1), crash.clone()),
        (Trigger::NthFinalCommit(3), crash.clone()),
    ];
    for _ in 0..3 {
        cases.push((Trigger::Nth(rng.range(1, total / 2)), crash.clone()));
    }

    let mut fired_phases = Vec::new();
    for (i, (trigger, effect)) in cases.into_iter().enumerate() {
        // Every other case scatters at random (a replayed flush must land
        // on the prefixes it first chose).
        let mut config = config();
        if i % 2 == 1 {
            config.scatter.mode = ScatterMode::Random;
        }
        let w = World::with_config(11, config);
        w.faults.arm(trigger, effect.clone());
        let first = w.run("run-a").await;
        let fired = w.faults.fired();
        w.faults.disarm();
        let context = format!(
            "case {i} ({:?} scatter): {effect:?} at {trigger:?}, fired {:?}",
            w.config.scatter.mode,
            fired.as_ref().map(|f| (f.call, f.phase))
        );
        match (&first, &fired) {
            (Err(e), Some(_)) => assert!(is_injected_crash(e), "{context}: {e}"),
            (Ok(_), None) => {}
            (r, _) => panic!("{context}: unexpected first run {r:?}"),
        }
        let second = w.run("run-b").await.unwrap_or_else(|e| panic!("{context}: restart failed: {e}"));
        w.assert_exact("run-b", &context).await;
        eprintln!("{context}: restart recovered {} flush(es)", second.recovered);
        if let Some(f) = fired {
            match f.phase {
                // Begun, not committed: the restart finishes that flush.
                Phase::Items | Phase::Commit => assert!(second.recovered >= 1, "{context}: {second:?}"),
                _ => {}
            }
            if matches!(trigger, Trigger::NthBeginAfterBegin(_)) {
                assert!(second.recovered >= 1, "{context}: the flush's first shard was begun: {second:?}");
            }
            if trigger == Trigger::NthOf(Phase::Begin, 1) || f.phase == Phase::Claim {
                assert_eq!(second.recovered, 0, "{context}: nothing was begun");
            }
            fired_phases.push(f.phase);
        }
    }
    for p in [Phase::Claim, Phase::Begin, Phase::Items, Phase::Commit] {
        assert!(fired_phases.contains(&p), "no crash in {p:?}: {fired_phases:?}");
    }
}

/// A restart that crashes while finishing the unfinished flush (in its
/// item writes or its commit); a third run still converges exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_during_recovery_then_restart_is_exact() {
    let cases =
        [(Phase::Items, Effect::ApplyHalfThenCrash), (Phase::Items, Effect::Crash), (Phase::Commit, Effect::Crash)];
    for (i, (phase, effect)) in cases.into_iter().enumerate() {
        let w = World::new(71 + i as u64);
        let context = format!("recovery crashes with {effect:?} in {phase:?}");
        w.faults.arm(Trigger::NthOf(Phase::Items, 2), Effect::ApplyHalfThenCrash);
        let a = w.run("run-a").await;
        assert!(a.as_ref().is_err_and(is_injected_crash), "{context}: first run {a:?}");
        // Recovery runs before any new flush: the restart's next call of
        // `phase` belongs to the recovered flush.
        let next = w.faults.counts().get(&phase).copied().unwrap_or(0) + 1;
        w.faults.arm(Trigger::NthOf(phase, next), effect.clone());
        let b = w.run("run-b").await;
        assert!(b.as_ref().is_err_and(is_injected_crash), "{context}: second run {b:?}");
        let fired = w.faults.fired().expect("fired");
        assert_eq!(fired.phase, phase, "{context}");
        let c = w.run("run-c").await.unwrap_or_else(|e| panic!("{context}: third run: {e}"));
        assert!(c.recovered >= 1, "{context}: {c:?}");
        w.assert_exact("run-c", &context).await;
    }
}

/// A flush begun under one layout is not replayed under another (it would
/// write different items, so the marks could not skip what was applied):
/// the restart refuses, naming the shard, until run with the old layout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_flush_is_not_replayed_under_another_layout() {
    let w = World::new(81);
    w.faults.arm(Trigger::NthOf(Phase::Items, 2), Effect::ApplyHalfThenCrash);
    assert!(w.run("run-a").await.as_ref().is_err_and(is_injected_crash));
    let mut other = w.config.clone();
    other.scatter.prefixes += 1;
    match w.run_with("run-b", &other).await {
        Err(PipelineError::LayoutChanged { .. }) => {}
        other => panic!("expected LayoutChanged, got {other:?}"),
    }
    let c = w.run("run-c").await.expect("the old layout finishes the flush");
    assert!(c.recovered >= 1, "{c:?}");
    w.assert_exact("run-c", "after a refused layout change").await;
}

// ---------------------------------------------------------------------------
// (ii) A write that timed out after the store applied it.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_writes_applied_then_throttled_are_not_counted_twice() {
    for (i, nth) in [1u64, 3].into_iter().enumerate() {
        let w = World::new(21 + i as u64);
        w.faults.arm(Trigger::NthOf(Phase::Items, nth), Effect::ApplyThenThrottle);
        let s = w.run("run-a").await.expect("a throttle is retried");
        let context = format!("item call {nth}");
        let f = w.faults.fired().expect("the fault fired");
        assert_eq!(f.phase, Phase::Items);
        w.assert_exact("run-a", &context).await;
        assert!(s.retries >= 1, "{context}: {s:?}");

        // The retry sent the same requests; each one the faulted call had
        // applied now fails its flush-mark guard, and is then skipped.
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_and_begin_applied_then_throttled_are_retried_harmlessly() {
    for (i, trigger) in
        [Trigger::NthOf(Phase::Claim, 1), Trigger::NthOf(Phase::Begin, 1), Trigger::NthOf(Phase::Begin, 3)]
            .into_iter()
            .enumerate()
    {
        let w = World::new(31 + i as u64);
        w.faults.arm(trigger, Effect::ApplyThenThrottle);
        let s = w.run("run-a").await.unwrap_or_else(|e| panic!("{trigger:?}: {e}"));
        assert!(w.faults.fired().is_some(), "{trigger:?}");
        assert!(s.retries >= 1, "{trigger:?}: {s:?}");
        w.assert_exact("run-a", &format!("{trigger:?}")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
/// A commit the store applied but reported as throttled: the retry's guard
/// fails (pending was cleared), and the flusher recognises its own commit.
async fn commit_applied_then_throttled_is_retried_harmlessly() {
    for (i, nth) in [1u64, 3].into_iter().enumerate() {
        let w = World::new(41 + i as u64);
        w.faults.arm(Trigger::NthOf(Phase::Commit, nth), Effect::ApplyThenThrottle);
        let s = w.run("run-a").await.unwrap_or_else(|e| panic!("commit {nth} applied then throttled: {e}"));
        assert!(s.retries >= 1);
        w.assert_exact("run-a", &format!("commit {nth}")).await;
    }
}

/// The same fault, then a restart: it resumes from the applied commit;
/// nothing is lost or doubled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_applied_then_throttled_then_restart_is_exact() {
    let w = World::new(51);
    w.faults.arm(Trigger::NthOf(Phase::Commit, 2), Effect::ApplyThenThrottle);
    w.run("run-a").await.expect("a retried, already applied commit is not a fence");
    assert!(w.faults.fired().is_some());
    let s = w.run("run-b").await.expect("restart");
    assert_eq!(s.recovered, 0, "the commit was applied: nothing is pending");
    w.assert_exact("run-b", "commit applied then throttled, restarted").await;
}

// ---------------------------------------------------------------------------
// (iii) Zombie: another owner claims the shards while a pipeline is mid-flush.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zombie_is_fenced_and_the_new_owner_finishes_its_flush() {
    let cases = [
        // Claimed right after the zombie began a flush (its next begin or
        // its commit is fenced).
        (Trigger::NthOf(Phase::Begin, 1), None),
        (Trigger::NthOf(Phase::Begin, 3), None),
        // Claimed after the zombie wrote items: its commit is fenced.
        (Trigger::NthOf(Phase::Items, 1), Some("commit flush")),
        (Trigger::NthOf(Phase::Items, 3), Some("commit flush")),
    ];
    for (i, (trigger, expected_step)) in cases.into_iter().enumerate() {
        let w = World::new(61 + i as u64);
        w.faults.arm(trigger, Effect::ApplyThenClaim("run-b".into()));
        let zombie = w.run("run-a").await;
        let context = format!("{trigger:?}");
        assert!(w.faults.fired().is_some(), "{context}");
        match &zombie {
            Err(PipelineError::Flush(FlushError::Fenced { what, .. })) => {
                if let Some(step) = expected_step {
                    assert_eq!(*what, step, "{context}");
                }
            }
            other => panic!("{context}: the zombie must be fenced, got {other:?}"),
        }
        // The zombie committed nothing after the claim: at least one shard
        // still has the flush it began pending, owned by run-b.
        let mut pending = 0;
        for shard in 0..w.gen_cfg.shards {
            let id = Generator::shard_id(shard);
            let item = w.checkpoints.get(STREAM, id.as_bytes()).await.unwrap().unwrap();
            let cp = Checkpoint::from_item(&item).unwrap();
            assert_eq!(cp.owner.as_deref(), Some("run-b"), "{context}: {id}");
            pending += usize::from(cp.pending.is_some());
        }
        assert!(pending >= 1, "{context}: the zombie's begun flush is pending");

        let s = w.run("run-b").await.unwrap_or_else(|e| panic!("{context}: new owner failed: {e}"));
        assert!(s.recovered >= 1, "{context}: {s:?}");
        w.assert_exact("run-b", &context).await;
    }
}
