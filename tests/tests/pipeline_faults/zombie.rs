//! Zombies: a worker whose lane is taken while it is mid-flush, and
//! rejoining after a lost lane.

use super::*;

/// Runs a zombie scenario: `run-a` is robbed of its lane mid-flush (after
/// an item write applied) by `run-b`'s worker id; then `run-b` starts (it
/// takes its "predecessor's" lane over at once) and both run to the end.
pub(crate) async fn zombie(w: &World, nth_item: u64, leases: bool, pause: Duration, limit: Duration) -> ZombieRun {
    zombie_with(w, nth_item, leases, pause, limit, false).await
}

/// `zombie`; with `b_after_rejoin`, `run-b` starts only once the zombie
/// has joined again.
pub(crate) async fn zombie_with(
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
    let rejoined =
        |l: &Logged| l.call > fired.call && matches!(l.phase, Phase::ClaimBeat | Phase::Join) && l.applied > 0;
    while b_after_rejoin && !a_proc.log().iter().any(rejoined) {
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

pub(crate) struct ZombieRun {
    pub(crate) fired: Fired,
    pub(crate) a: Result<RunSummary, PipelineError>,
    pub(crate) b: Result<RunSummary, PipelineError>,
    pub(crate) a_log: Vec<Logged>,
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
        let rejoined = after
            .iter()
            .find(|l| matches!(l.phase, Phase::ClaimBeat | Phase::Join) && l.applied > 0)
            .map_or(u64::MAX, |l| l.call);
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
    let z = zombie_with(&w, 2, false, Duration::ZERO, RUN_LIMIT, true).await;
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
    // Joins that took a lane (one refused in a race for a lane is retried).
    let joined = |l: &&Logged| l.call > z.fired.call && l.phase == Phase::Join && l.applied > 0;
    let joins: Vec<&Logged> = z.a_log.iter().filter(joined).collect();
    assert!(z.a.is_ok() && z.b.is_ok(), "{:?} {:?}", z.a, z.b);
    assert_eq!(joins.len(), 1, "the zombie joined again once: {joins:?}");
    let lanes = w.lanes().await;
    assert!(lanes.iter().all(|l| l.owner.is_none()), "no lane left owned: {lanes:?}");
}
