//! Fault injection: the trigger (which call), the effect (crash, applied
//! then throttled, ...), and the store wrapper that fires them.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trigger {
    /// The Nth store call of the world (from 1; every process, both tables).
    Nth(u64),
    /// The Nth call (from 1) of one phase.
    NthOf(Phase, u64),
    /// The Nth call (from 1) of a phase that ends a shard (`ends_a_shard`).
    NthEnding(Phase, u64),
    /// The first item write of a flush numbered K (from 1) or later: a
    /// flush may write no item (one that only ends shards).
    FirstItemsOf(u64),
    /// The first call of a phase carrying at least N requests (how a flush
    /// batches its items depends on when events arrive).
    FirstBatchOf(Phase, usize),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Effect {
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
pub(crate) struct Fired {
    pub(crate) call: u64,
    pub(crate) phase: Phase,
    /// The process it fired in.
    pub(crate) process: String,
    /// The requests of the faulted call and what the store did with those
    /// it applied.
    pub(crate) reqs: Vec<UpdateRequest>,
    pub(crate) outcomes: Vec<UpdateOutcome>,
    /// The same process's next call of the same phase after the fault (the
    /// retry), if the fault applied something.
    pub(crate) replay: Option<(Vec<UpdateRequest>, Vec<UpdateOutcome>)>,
    /// `Steal`: the lane taken and the flush number in flight on it.
    pub(crate) stolen: Option<(u32, u64)>,
}

/// One store write of a process, as the store answered it.
#[derive(Debug, Clone)]
pub(crate) struct Logged {
    pub(crate) call: u64,
    pub(crate) phase: Phase,
    /// A lane write's lane, or the lane an item write is marked with.
    pub(crate) lane: Option<u32>,
    /// An item write's flush number.
    pub(crate) k: Option<u64>,
    pub(crate) applied: usize,
    pub(crate) refused: usize,
}

/// One pipeline "process": what dies in a crash.
pub(crate) struct Process {
    pub(crate) name: String,
    pub(crate) dead: AtomicBool,
    pub(crate) stop: CancellationToken,
    /// An open intent not yet validated: the next leases read is its proof.
    pub(crate) open: AtomicBool,
    pub(crate) log: Mutex<Vec<Logged>>,
}

impl Process {
    pub(crate) fn new(name: &str) -> Arc<Self> {
        Arc::new(Process {
            name: name.into(),
            dead: AtomicBool::new(false),
            stop: CancellationToken::new(),
            open: AtomicBool::new(false),
            log: Mutex::new(Vec::new()),
        })
    }

    pub(crate) fn crash(&self) {
        self.dead.store(true, Ordering::SeqCst);
        self.stop.cancel();
    }

    pub(crate) fn log(&self) -> Vec<Logged> {
        self.log.lock().unwrap().clone()
    }
}

/// Shared by every process of a world: one call counter, one armed fault.
pub(crate) struct Faults {
    pub(crate) calls: AtomicU64,
    pub(crate) per_phase: Mutex<BTreeMap<Phase, u64>>,
    pub(crate) ending: Mutex<BTreeMap<Phase, u64>>,
    pub(crate) armed: Mutex<Option<(Trigger, Effect)>>,
    pub(crate) fired: Mutex<Option<Fired>>,
    /// The real lease table, for `Steal`.
    pub(crate) leases: Arc<dyn SortedTable>,
}

impl Faults {
    pub(crate) fn new(leases: Arc<dyn SortedTable>) -> Arc<Self> {
        Arc::new(Faults {
            calls: AtomicU64::new(0),
            per_phase: Mutex::new(BTreeMap::new()),
            ending: Mutex::new(BTreeMap::new()),
            armed: Mutex::new(None),
            fired: Mutex::new(None),
            leases,
        })
    }

    pub(crate) fn arm(&self, trigger: Trigger, effect: Effect) {
        *self.armed.lock().unwrap() = Some((trigger, effect));
        *self.fired.lock().unwrap() = None;
    }

    pub(crate) fn disarm(&self) {
        *self.armed.lock().unwrap() = None;
    }

    pub(crate) fn fired(&self) -> Option<Fired> {
        self.fired.lock().unwrap().clone()
    }

    pub(crate) fn counts(&self) -> BTreeMap<Phase, u64> {
        self.per_phase.lock().unwrap().clone()
    }

    pub(crate) fn count(&self, phase: Phase) -> u64 {
        self.counts().get(&phase).copied().unwrap_or(0)
    }

    /// Counts a call (of flush `k`, for item writes); the effect to apply
    /// to it, if the fault fires now.
    pub(crate) fn on_call(&self, phase: Phase, ending: bool, k: Option<u64>, len: usize) -> (u64, Option<Effect>) {
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
            Some((Trigger::FirstItemsOf(n), _)) => phase == Phase::Items && k >= Some(*n),
            Some((Trigger::FirstBatchOf(p, n), _)) => *p == phase && len >= *n,
            None => false,
        };
        (call, if fire { armed.take().map(|(_, e)| e) } else { None })
    }
}

pub(crate) fn injected(what: String) -> TableError {
    TableError::Store(Box::new(std::io::Error::other(format!("injected crash ({what})"))))
}

pub(crate) fn is_injected_crash(e: &PipelineError) -> bool {
    e.to_string().contains("injected crash")
}

pub(crate) fn outcomes(results: Vec<ItemResult>) -> Vec<UpdateOutcome> {
    results.into_iter().map(|r| r.expect("the real store answers every item")).collect()
}

/// A store whose calls go through `Faults`, for one process.
pub(crate) struct Faulty {
    pub(crate) inner: Arc<dyn SortedTable>,
    pub(crate) faults: Arc<Faults>,
    pub(crate) process: Arc<Process>,
    /// The aggregates table (every update is an item write), or the lease table.
    pub(crate) aggregates: bool,
}

impl Faulty {
    pub(crate) fn before_call(&self) -> Result<(), TableError> {
        if self.process.dead.load(Ordering::SeqCst) {
            return Err(injected(format!("{} is dead", self.process.name)));
        }
        Ok(())
    }

    pub(crate) fn record(&self, call: u64, phase: Phase, reqs: &[UpdateRequest], results: &[Option<UpdateOutcome>]) {
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

    pub(crate) async fn updates(&self, reqs: &[UpdateRequest]) -> Result<Vec<ItemResult>, TableError> {
        self.before_call()?;
        let phase = if self.aggregates && reqs[0].pk == zigzag_model::layout::LAYOUT_PK {
            Phase::Layout
        } else if self.aggregates && reqs[0].pk == zigzag_model::stats::STATS_PK {
            Phase::Statistics
        } else if self.aggregates && reqs[0].pk.starts_with(zigzag_model::changes::CHANGES_PK) {
            Phase::Changes
        } else if self.aggregates && reqs[0].pk.starts_with(zigzag_model::value_catalog::VALUES_PK) {
            Phase::Values
        } else if self.aggregates {
            Phase::Items
        } else {
            assert_eq!(reqs.len(), 1, "lease-table writes are single");
            lease_table_phase(&reqs[0])
        };
        let ending = reqs.iter().any(|r| ends_a_shard(phase, r));
        let k = (phase == Phase::Items).then(|| item_mark(&reqs[0]).1);
        let (call, effect) = self.faults.on_call(phase, ending, k, reqs.len());
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
    pub(crate) async fn steal(&self, item_write: &UpdateRequest, thief: &str, leases: bool) -> (u32, u64) {
        let (lane, k) = item_mark(item_write);
        let table = &self.faults.leases;
        let victim = self.process.name.as_str();
        if leases {
            for l in read_leases(table).await {
                if l.worker_id() == Some(victim) && !l.finished {
                    let out = table.update(&take_lease(STREAM, &l.shard, l.lease, thief)).await.unwrap();
                    assert!(out.applied(), "only the victim writes its leases, and it is mid-flush");
                }
            }
        }
        // The victim's heartbeat may move the beat between the read and the
        // take: read again then.
        for _ in 0..10 {
            let lanes = read_lanes(table).await;
            let seen = lanes.into_iter().find(|l| l.lane == lane).expect("the writer's lane");
            assert_eq!(
                (seen.worker_id(), seen.in_flight().map(|i| (i.k, i.state))),
                (Some(victim), Some((k, IntentState::Valid))),
                "the writer writes items of its valid intent: {seen:?}"
            );
            // Guarded by the owner as written: the victim's incarnation. The
            // beat item first, then the lane item (as a recovery takes it).
            let owner = seen.owner.as_deref().unwrap_or(victim);
            let beater = seen.beater.as_deref().unwrap_or(victim);
            if table.update(&claim_beat(lane, Some((beater, seen.beat)), thief)).await.unwrap().applied() {
                let take = table.update(&take_lane(lane, Some(owner), thief, &seen.stream)).await.unwrap();
                assert!(take.applied(), "the beat's holder takes the lane: {take:?}");
                return (lane, k);
            }
        }
        panic!("lane {lane} could not be taken from {victim}")
    }

    pub(crate) async fn read(&self, req: &QueryRequest) -> Result<QueryPage, TableError> {
        self.before_call()?;
        // The layout's items are read when a worker adopts a newer version
        // or finishes an older one's flush: never an aggregate item.
        if self.aggregates && req.pk == zigzag_model::layout::LAYOUT_PK {
            return self.inner.query(req).await;
        }
        let phase = match req.pk.as_str() {
            _ if self.aggregates => panic!("the pipeline does not read the aggregates: {req:?}"),
            LANES_PK | BEATS_PK => Phase::ReadLanes,
            // The first read of the leases after an intent was opened is
            // its proof; a lease pass reading them later, while the flush
            // validates, is not (a crash there may let the validate apply).
            pk if pk == shards_pk(STREAM) && self.process.open.swap(false, Ordering::SeqCst) => Phase::Proof,
            pk if pk == shards_pk(STREAM) || pk == zigzag_lease::items::generation_pk(STREAM) => Phase::ReadLeases,
            _ => Phase::ReadLegacy,
        };
        let (call, effect) = self.faults.on_call(phase, false, None, 1);
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

    /// A lease retired (a conditional delete): crashes like a read.
    pub(crate) async fn retire(&self, req: &DeleteRequest) -> Result<DeleteOutcome, TableError> {
        self.before_call()?;
        assert!(!self.aggregates, "the pipeline deletes no aggregate item: {req:?}");
        let (call, effect) = self.faults.on_call(Phase::Retire, false, None, 1);
        match effect {
            None => self.inner.delete(req).await,
            Some(Effect::Crash) => {
                self.process.crash();
                let name = self.process.name.clone();
                *self.faults.fired.lock().unwrap() = Some(Fired {
                    call,
                    phase: Phase::Retire,
                    process: name.clone(),
                    reqs: Vec::new(),
                    outcomes: Vec::new(),
                    replay: None,
                    stolen: None,
                });
                Err(injected(format!("{name} died at call {call}, retiring a lease")))
            }
            Some(e) => panic!("{e:?} is not a fault of a delete"),
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

    async fn delete(&self, req: &DeleteRequest) -> Result<DeleteOutcome, TableError> {
        self.retire(req).await
    }

    fn write_parallelism(&self) -> usize {
        self.inner.write_parallelism()
    }
}
