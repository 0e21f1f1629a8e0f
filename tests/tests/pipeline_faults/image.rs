//! What a crash leaves on the lease table, and what a restart makes of it.

use super::*;

/// The lease table right after a process died.
#[derive(Debug)]
pub(crate) struct Image {
    pub(crate) lanes: Vec<Lane>,
    pub(crate) leases: Vec<ShardLease>,
}

impl Image {
    pub(crate) async fn of(w: &World) -> Image {
        Image { lanes: w.lanes().await, leases: w.shard_leases().await }
    }

    pub(crate) fn lane(&self, n: u32) -> &Lane {
        self.lanes.iter().find(|l| l.lane == n).expect("lanes are never deleted")
    }

    /// The lanes, and flush numbers, with an intent in `state` (open or valid).
    pub(crate) fn in_flight(&self, state: IntentState) -> Vec<(u32, u64)> {
        let of = |l: &Lane| l.in_flight().filter(|i| i.state == state).map(|i| (l.lane, i.k));
        self.lanes.iter().filter_map(of).collect()
    }

    /// Committed ranges whose shard checkpoint is still to be moved.
    pub(crate) fn completions_pending(&self) -> usize {
        let committed = self.lanes.iter().filter_map(|l| l.intent.as_ref().filter(|i| i.state == IntentState::Done));
        committed
            .flat_map(|i| &i.ranges)
            .filter(|r| {
                self.leases.iter().any(|s| {
                    s.shard == r.shard
                        && s.checkpoint == r.from
                        && (r.from != r.completed() || r.finishes() != s.finished)
                })
            })
            .count()
    }

    /// The step the process died at left the steps before it applied and
    /// none after it.
    pub(crate) fn assert_died_in(&self, fired: &Fired, context: &str) {
        let (open, valid) = (self.in_flight(IntentState::Open).len(), self.in_flight(IntentState::Valid).len());
        let lanes = &self.lanes;
        match fired.phase {
            // Before joining: no lane was taken.
            Phase::Epoch => assert!(lanes.is_empty(), "{context}: {lanes:?}"),
            Phase::ClaimBeat | Phase::Join => assert!(lanes.iter().all(|l| l.owner.is_none()), "{context}: {lanes:?}"),
            // The intent was not recorded: the last one is done.
            Phase::Open => assert_eq!((open, valid), (0, 0), "{context}: {lanes:?}"),
            // Recorded, not proven: no item was written.
            Phase::Proof | Phase::Validate | Phase::Abort => assert_eq!((open, valid), (1, 0), "{context}: {lanes:?}"),
            // Proven, not committed: items may have been written.
            Phase::Changes | Phase::Values | Phase::Items | Phase::Commit => {
                assert_eq!((open, valid), (0, 1), "{context}: {lanes:?}")
            }
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
pub(crate) async fn fault_run(
    w: &World,
    name: &str,
    opts: PipelineOptions,
    trigger: Trigger,
    effect: Effect,
) -> (Fired, Image) {
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
pub(crate) async fn assert_recovered(w: &World, image: &Image, fired: &Fired, restart: &RunSummary, context: &str) {
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
pub(crate) async fn crash_then_restart(
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
    w.assert_marks_quiet(&context).await;
    assert_recovered(w, &image, &fired, &restart, &context).await;
    if restart_worker == "run-a" {
        // The predecessor's lane was taken over at once and freed.
        let lanes = w.lanes().await;
        assert!(lanes.iter().all(|l| l.owner.is_none()), "{context}: {lanes:?}");
    } else if image.leases.iter().any(|l| !l.finished && l.worker_id() == Some("run-a")) {
        // Another worker waits out the failover before taking the leases.
        assert!(took >= FAILOVER, "{context}: took {took:?}");
        assert!(restart.leases_taken >= 1, "{context}: {restart:?}");
    }
    eprintln!("{context}: restart {took:?}, recovered {}, skipped {}", restart.recovered, restart.skipped);
    (fired, restart)
}
