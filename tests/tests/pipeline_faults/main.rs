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
    Action, AttrValue, DeleteOutcome, DeleteRequest, Item, ItemResult, QueryPage, QueryRequest, SortedTable,
    TableError, UpdateOutcome, UpdateRequest,
};
use zigzag_gather::check::{self, Status};
use zigzag_gather::execute::ExecOptions;
use zigzag_ingest::{Pipeline, PipelineError, PipelineOptions, RunSummary};
use zigzag_lease::items::{claim_beat, mark_attr, shards_pk, take_lane, take_lease, BEATS_PK, LANES_PK};
use zigzag_lease::{Coordinator, IntentState, Lane, LeaseOptions, ShardLease};
use zigzag_loadgen::{Drawn, GenConfig, Generated, Generator, SyntheticSource, Traffic};
use zigzag_model::schema::value::display;
use zigzag_model::{Config, KeyModel, MeasureValues, Position, ScatterMode, Truth};
use zigzag_sqlite::SqliteTable;

pub(crate) const STREAM: &str = "clicks";
/// A worker presumed dead after this long without a heartbeat (heartbeats
/// every third of it, so a run of a few hundred ms beats several times).
pub(crate) const FAILOVER: Duration = Duration::from_millis(300);
/// No run of these tests takes nearly this long; one that does is stuck.
pub(crate) const RUN_LIMIT: Duration = Duration::from_secs(20);

mod faults;
mod image;
mod phase;
mod world;
mod zombie;

use faults::*;
use image::*;
use phase::*;
use world::*;

// ---------------------------------------------------------------------------
// (i) A crash at any store call, then a restart on the same files.

/// How many calls of each phase a clean run makes (varies with timing:
/// fault points are picked in the first half of each, capped by a floor
/// every run reaches, `World::min_flushes`).
async fn dry_run() -> (BTreeMap<Phase, u64>, u64) {
    let dry = World::new(11);
    let s = dry.run("dry").await.expect("clean run");
    dry.assert_exact("clean run").await;
    let counts = dry.faults.counts();
    let total = dry.faults.calls.load(Ordering::SeqCst);
    let of = |p: Phase| counts.get(&p).copied().unwrap_or(0);
    let joins =
        (of(Phase::ClaimBeat), of(Phase::Join), of(Phase::CreateLease), of(Phase::Release), of(Phase::ReleaseBeat));
    assert_eq!(joins, (1, 1, 3, 1, 1), "{counts:?}");
    assert!(of(Phase::TakeLease) >= 3, "{counts:?}");
    // The floor that fault points are capped at holds, with room for them.
    let floor = dry.min_flushes();
    assert!(floor >= 5, "{floor} flushes");
    println!("clean run: {counts:?}; every run makes at least {floor} flushes");
    for p in [Phase::Open, Phase::Proof, Phase::Validate, Phase::Items, Phase::Commit, Phase::Advance] {
        assert!(of(p) >= floor, "{p:?}: {counts:?} {s:?}");
    }
    assert_eq!(of(Phase::Open), of(Phase::Commit), "one intent per flush: {counts:?}");
    (counts, total)
}

/// The highest call of `p` to pick a fault at: the first half of a clean
/// run's calls, but no more than every run makes (`floor` flushes, each
/// making at least one call of each flush phase; a clean run that was slow
/// flushed more often, on the interval, than the next may).
fn upto(counts: &BTreeMap<Phase, u64>, p: Phase, lo: u64, floor: u64) -> u64 {
    (counts.get(&p).copied().unwrap_or(0) / 2).min(floor).max(lo)
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

/// Making the lease table's epoch, joining, creating and taking leases,
/// reading the lanes, heartbeats, leaving, and anywhere at random.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_in_a_lane_or_lease_write_then_restart_with_the_same_worker_id_is_exact() {
    let (_, total) = dry_run().await;
    // Every flush makes at least six calls (open, proof, validate, items,
    // commit, advance).
    let most = (total / 2).min(6 * World::new(11).min_flushes());
    let mut rng = Rng(0x1ea5e);
    let crash = Effect::Crash;
    let mut cases = vec![
        (Trigger::NthOf(Phase::Epoch, 1), crash.clone()),
        (Trigger::NthOf(Phase::ClaimBeat, 1), crash.clone()),
        (Trigger::NthOf(Phase::Join, 1), crash.clone()),
        (Trigger::NthOf(Phase::CreateLease, 2), crash.clone()),
        (Trigger::NthOf(Phase::TakeLease, 2), crash.clone()),
        (Trigger::NthOf(Phase::ReadLanes, 2), crash.clone()),
        (Trigger::NthOf(Phase::Heartbeat, 1), crash.clone()),
        // Leaving: the lane is freed last, its beat after it.
        (Trigger::NthOf(Phase::Release, 1), crash.clone()),
        (Trigger::NthOf(Phase::ReleaseBeat, 1), crash.clone()),
    ];
    for _ in 0..3 {
        cases.push((Trigger::Nth(rng.range(1, most)), crash.clone()));
    }
    let expected = [
        Phase::Epoch,
        Phase::ClaimBeat,
        Phase::Join,
        Phase::CreateLease,
        Phase::TakeLease,
        Phase::Heartbeat,
        Phase::Release,
        Phase::ReleaseBeat,
    ];
    crash_cases(11, cases, &expected).await;
}

/// Each step of the flush intent: recorded open, proven (the leases read),
/// validated, committed; also in the flushes that end shards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_in_a_flush_intent_then_restart_with_the_same_worker_id_is_exact() {
    let (counts, _) = dry_run().await;
    let floor = World::new(12).min_flushes();
    let mut rng = Rng(0x5eed);
    let mut rnd = |p: Phase, lo: u64| Trigger::NthOf(p, rng.range(lo, upto(&counts, p, lo, floor)));
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
        // Only the first: the three shards may all end in one flush (they
        // are read at once), so a second ending intent is not certain.
        (Trigger::NthEnding(Phase::Open, 1), crash.clone()),
        (Trigger::NthEnding(Phase::Validate, 1), crash.clone()),
    ];
    crash_cases(12, cases, &[Phase::Open, Phase::Proof, Phase::Validate, Phase::Commit]).await;
}

/// The item writes and the change marks around them (nothing of the call
/// applied, or its first half), and the checkpoints moved after the commit
/// (also those that finish shards).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_in_item_writes_or_checkpoints_then_restart_with_the_same_worker_id_is_exact() {
    let (counts, _) = dry_run().await;
    let floor = World::new(13).min_flushes();
    let mut rng = Rng(0xbeef);
    let mut flush_rng = Rng(0xf1a5);
    let mut later = || Trigger::FirstItemsOf(flush_rng.range(2, floor));
    let mut rnd = |p: Phase, lo: u64| Trigger::NthOf(p, rng.range(lo, upto(&counts, p, lo, floor)));
    let (crash, half) = (Effect::Crash, Effect::ApplyHalfThenCrash);
    let cases = vec![
        (Trigger::NthOf(Phase::Items, 1), crash.clone()),
        (rnd(Phase::Items, 2), crash.clone()),
        (Trigger::NthOf(Phase::Items, 1), half.clone()),
        (rnd(Phase::Items, 2), half.clone()),
        // In a later flush: its items were written by earlier ones.
        (later(), crash.clone()),
        (later(), half.clone()),
        (Trigger::NthOf(Phase::Advance, 1), crash.clone()),
        (rnd(Phase::Advance, 2), crash.clone()),
        (Trigger::NthEnding(Phase::Advance, 1), crash.clone()),
        (Trigger::NthEnding(Phase::Advance, 3), crash.clone()),
        (Trigger::NthOf(Phase::Changes, 1), crash.clone()),
        (Trigger::NthOf(Phase::Changes, 2), half.clone()),
        (rnd(Phase::Changes, 3), crash.clone()),
        (rnd(Phase::Changes, 3), half.clone()),
        (Trigger::NthOf(Phase::Values, 1), crash.clone()),
        (Trigger::NthOf(Phase::Values, 1), half.clone()),
        (rnd(Phase::Values, 2), half.clone()),
    ];
    crash_cases(13, cases, &[Phase::Items, Phase::Advance, Phase::Changes, Phase::Values]).await;
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
        (valid.clone(), Phase::TakeBeat, Effect::Crash),
        (valid.clone(), Phase::TakeLane, Effect::Crash),
        (valid.clone(), Phase::Items, Effect::ApplyHalfThenCrash),
        (valid.clone(), Phase::Items, Effect::Crash),
        (valid.clone(), Phase::Commit, Effect::Crash),
        (valid.clone(), Phase::Advance, Effect::Crash),
        (valid.clone(), Phase::Release, Effect::Crash),
        (valid.clone(), Phase::ReleaseBeat, Effect::Crash),
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
            Phase::Advance | Phase::Release | Phase::ReleaseBeat => {
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

/// A worker of layout version 1 dies with a flush in flight after version
/// 2 (a day rollup more, so every later item set's number moves) was
/// announced. A worker of version 2 finishes that flush under version 1's
/// layout, as its intent records (its item sets, as version 1 numbers
/// them), then reads the rest under version 2: the table equals the truth
/// at every rollup version 1 had, and the recovered lane still says how far
/// the dead worker read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_in_flight_of_an_older_layout_version_is_recovered_under_it_by_a_worker_of_the_newer() {
    use zigzag_model::versions;
    let v1 = Config { rollups: vec![zigzag_model::Rollup::Minute, zigzag_model::Rollup::Hour], ..world::config() };
    let w = World::with_config(82, v1);
    let (fired, image) =
        fault_run(&w, "run-a", w.options("run-a"), Trigger::NthOf(Phase::Items, 2), Effect::ApplyHalfThenCrash).await;
    let (lane, _) = image.in_flight(IntentState::Valid)[0];
    let mut newer = w.options("run-a");
    newer.config.rollups.push(zigzag_model::Rollup::Day);
    let layout = zigzag_model::layout::Layout::of(&newer.config);
    let announced = versions::record(&*w.aggregates, 1, &layout, i64::MAX / 2, Default::default(), 0, false).await;
    assert_eq!(announced.expect("recorded").number, 2);
    let (_, c) = w.run_with("run-a#2", newer).await;
    let c = c.expect("a worker of version 2 finishes version 1's flush");
    w.assert_exact("after an older version's flush was recovered").await;
    assert_recovered(&w, &image, &fired, &c, "after an older version's flush was recovered").await;
    let recovered = w.lanes().await.into_iter().find(|l| l.lane == lane).unwrap();
    assert_eq!(recovered.layout.version, 1, "the dead worker's lane still says it wrote version 1: {recovered:?}");
    assert!(recovered.wrote_to_ms > 0, "and how far it read: {recovered:?}");
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
    assert_eq!(still.worker_id(), Some("run-a"), "the lane was not taken: {still:?}");
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
        (Phase::ClaimBeat, 1),
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
        (Phase::ReleaseBeat, 1),
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
    w.faults.arm(Trigger::FirstBatchOf(Phase::Items, 2), Effect::ApplyHalfThrottleRest);
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
