//! The lease protocol's invariants (docs/design/exactly-once.md, "Invariants") checked
//! after every step of random interleavings of joins, heartbeats, passes,
//! reads, flushes (begin, commit, complete as separate steps), recoveries,
//! handoffs, pauses past the failover (zombies) and crashes, of three
//! workers on four shards, on the in-memory table in virtual time:
//!
//! - I3: no record is in two valid intents (two distinct `(lane, k)`), over
//!   the whole history (every valid intent any step left in the table);
//! - I4: a shard's checkpoint covers only records of committed intents
//!   (each record up to it is in a valid intent whose lane committed it).
//!
//! A worker here does what `ingest` does with the coordinator's answers,
//! with records reduced to positions 1, 2, 3, ... of each shard. Steps run
//! one after another: two workers' store calls never interleave inside one
//! step (those races are covered by `coordinator.rs` and `pipeline_faults`).
//! Checked to fail: with the commit not written, I4 fails (at step 8 when
//! tried).

use proptest::prelude::*;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use zigzag_core::table::{MemoryTable, SortedTable};
use zigzag_lease::{Began, Checkpoint, Coordinator, IntentState, LeaseError, LeaseOptions, ShardInfo, ShardRange};
use zigzag_model::Position;

const SHARDS: usize = 4;
const FAILOVER: Duration = Duration::from_secs(3);
const LAYOUT: &str = "L";

#[derive(Debug, Clone, Copy)]
enum Step {
    Beat(usize),
    Pass(usize),
    /// The worker's next step in its cycle: read `n` more records of every
    /// shard it reads and begin a flush; commit it; complete it.
    Work(usize, u64),
    /// Time passes for everyone (a worker that did not beat may expire).
    Wait(u64),
    /// The worker's process dies; a new incarnation of its id starts later.
    Crash(usize),
}

fn step() -> impl Strategy<Value = Step> {
    let w = 0..3usize;
    prop_oneof![
        3 => w.clone().prop_map(Step::Beat),
        2 => w.clone().prop_map(Step::Pass),
        6 => (w.clone(), 1..4u64).prop_map(|(w, n)| Step::Work(w, n)),
        2 => (1..5u64).prop_map(Step::Wait),
        1 => w.prop_map(Step::Crash),
    ]
}

fn pos(n: u64) -> Position {
    Position::at(n)
}

fn num(c: &Checkpoint) -> u64 {
    c.single().flatten().and_then(|p| p.seq.as_u64()).unwrap_or(0)
}

/// A shard this worker reads: under which lease, from where, read to.
#[derive(Debug, Clone)]
struct Reading {
    lease: u64,
    from: Checkpoint,
    to: u64,
}

#[derive(Default)]
struct Worker {
    coord: Option<Arc<Coordinator>>,
    incarnations: u32,
    reading: BTreeMap<String, Reading>,
    began: Option<Began>,
    committed: Option<Vec<ShardRange>>,
}

impl Worker {
    fn drop_state(&mut self) {
        self.reading.clear();
        self.began = None;
        self.committed = None;
    }
}

struct World {
    table: Arc<MemoryTable>,
    workers: Vec<Worker>,
    listing: Vec<ShardInfo>,
    /// Every record of every valid intent ever seen: (shard, record) ->
    /// (lane, k).
    history: HashMap<(String, u64), (u32, u64)>,
}

impl World {
    fn new() -> World {
        World {
            table: Arc::new(MemoryTable::new()),
            workers: (0..3).map(|_| Worker::default()).collect(),
            listing: (0..SHARDS).map(|i| ShardInfo::root(format!("s{i}"))).collect(),
            history: HashMap::new(),
        }
    }

    async fn coord(&mut self, w: usize) -> Option<Arc<Coordinator>> {
        if self.workers[w].coord.is_none() {
            let table: Arc<dyn SortedTable> = self.table.clone();
            let opts = LeaseOptions { failover: FAILOVER, ..LeaseOptions::new("st", format!("w{w}")) };
            let coord = Arc::new(Coordinator::new(table, opts));
            self.workers[w].incarnations += 1;
            self.workers[w].coord = Some(coord);
        }
        let coord = self.workers[w].coord.clone()?;
        if coord.lane().is_none() {
            match coord.join().await {
                Ok(_) => self.workers[w].drop_state(),
                Err(_) => return None,
            }
        }
        Some(coord)
    }

    /// A lost lane: everything in memory goes; the worker joins again.
    fn lost(&mut self, w: usize, e: &LeaseError) {
        if matches!(e, LeaseError::LaneLost { .. } | LeaseError::NotJoined | LeaseError::Superseded { .. }) {
            self.workers[w].drop_state();
        }
        if matches!(e, LeaseError::Superseded { .. }) {
            self.workers[w].coord = None;
        }
    }

    async fn run(&mut self, s: Step) {
        match s {
            Step::Wait(secs) => tokio::time::advance(Duration::from_secs(secs)).await,
            Step::Crash(w) => {
                self.workers[w] = Worker { incarnations: self.workers[w].incarnations, ..Worker::default() };
            }
            Step::Beat(w) => {
                let Some(c) = self.coord(w).await else { return };
                if let Err(e) = c.heartbeat().await {
                    self.lost(w, &e);
                }
            }
            Step::Pass(w) => self.pass(w).await,
            Step::Work(w, n) => {
                let worker = &mut self.workers[w];
                if worker.began.is_some() {
                    self.commit(w).await;
                } else if worker.committed.is_some() {
                    self.complete(w).await;
                } else if worker.reading.is_empty() {
                    self.pass(w).await;
                } else {
                    for r in worker.reading.values_mut() {
                        r.to += n;
                    }
                    self.begin(w).await;
                }
            }
        }
    }

    async fn commit(&mut self, w: usize) {
        let Some(c) = self.coord(w).await else { return };
        let Some(began) = self.workers[w].began.take() else { return };
        match c.commit(&began).await {
            Ok(()) => self.workers[w].committed = Some(began.ranges),
            Err(e) => self.lost(w, &e),
        }
    }

    async fn complete(&mut self, w: usize) {
        let Some(c) = self.coord(w).await else { return };
        let Some(ranges) = self.workers[w].committed.take() else { return };
        match c.complete(&ranges).await {
            Ok(()) => {
                for r in &ranges {
                    if let Some(reading) = self.workers[w].reading.get_mut(&r.shard) {
                        reading.from = r.completed();
                    }
                }
            }
            Err(e) => self.lost(w, &e),
        }
    }

    async fn pass(&mut self, w: usize) {
        let Some(c) = self.coord(w).await else { return };
        let listing = self.listing.clone();
        let plan = match c.pass(Some(&listing)).await {
            Ok(p) => p,
            Err(e) => return self.lost(w, &e),
        };
        // Recover dead workers' valid flushes (the records are re-applied:
        // nothing to do in this model) and free their lanes.
        for lane in &plan.recover {
            match c.take_for_recovery(*lane, LAYOUT).await {
                Ok(Some(r)) => {
                    if let Err(e) = c.finish_recovery(&r).await {
                        return self.lost(w, &e);
                    }
                }
                Ok(None) => {}
                Err(e) => return self.lost(w, &e),
            }
        }
        let worker = &mut self.workers[w];
        // Leases no longer held are dropped with their unflushed records.
        worker.reading.retain(|s, r| plan.held.get(s) == Some(&r.lease));
        for ready in &plan.ready {
            worker.reading.entry(ready.shard.clone()).or_insert_with(|| Reading {
                lease: ready.lease,
                from: ready.checkpoint.clone(),
                to: num(&ready.checkpoint),
            });
        }
        // Handoffs: given when nothing of the shard waits in memory or in a
        // flush in progress.
        let busy = worker.began.is_some() || worker.committed.is_some();
        let _ = worker;
        for (shard, lease, to) in plan.handoffs {
            let idle = self.workers[w].reading.get(&shard).is_none_or(|r| r.to == num(&r.from));
            if idle && !busy && c.give(&shard, lease, &to).await.unwrap_or(false) {
                self.workers[w].reading.remove(&shard);
            }
        }
    }

    async fn begin(&mut self, w: usize) {
        let Some(c) = self.coord(w).await else { return };
        let worker = &self.workers[w];
        if worker.began.is_some() || worker.committed.is_some() {
            return; // one flush at a time, as the pipeline
        }
        let ranges: Vec<ShardRange> = worker
            .reading
            .iter()
            .filter(|(_, r)| r.to > num(&r.from))
            .map(|(s, r)| ShardRange {
                seal: 0,
                shard: s.clone(),
                lease: r.lease,
                from: r.from.clone(),
                sets: None,
                of: 0,
                first: r.from.single().flatten().is_none().then(|| pos(1)),
                to: pos(r.to),
                ends: false,
                behind_ms: None,
                owed: None,
                layout: String::new(),
            })
            .collect();
        if ranges.is_empty() {
            return;
        }
        match c.begin(ranges.clone(), LAYOUT).await {
            Ok(began) => {
                for r in ranges.iter().filter(|r| !began.ranges.iter().any(|k| k.shard == r.shard)) {
                    self.workers[w].reading.remove(&r.shard); // lost before the flush
                }
                self.workers[w].began = Some(began);
            }
            Err(e) => self.lost(w, &e),
        }
    }

    /// Records every valid intent in the table, then checks I3 and I4.
    async fn check(&mut self, after: &str) -> Result<(), TestCaseError> {
        let table: Arc<dyn SortedTable> = self.table.clone();
        let reader = Coordinator::new(table, LeaseOptions::new("st", "reader"));
        let lanes = reader.read_lanes().await.map_err(|e| TestCaseError::fail(e.to_string()))?;
        for lane in &lanes {
            let Some(i) = lane.intent.as_ref().filter(|i| i.state != IntentState::Open) else { continue };
            for r in &i.ranges {
                for rec in num(&r.from) + 1..=r.to.seq.as_u64().unwrap_or(0) {
                    let at = self.history.entry((r.shard.clone(), rec)).or_insert((lane.lane, i.k));
                    prop_assert_eq!(
                        *at,
                        (lane.lane, i.k),
                        "I3 after {}: record {} of {} in two valid intents",
                        after,
                        rec,
                        r.shard
                    );
                }
            }
        }
        let flushed: HashMap<u32, u64> = lanes.iter().map(|l| (l.lane, l.flush)).collect();
        for lease in reader.read_leases().await.map_err(|e| TestCaseError::fail(e.to_string()))? {
            for rec in 1..=num(&lease.checkpoint) {
                let by = self.history.get(&(lease.shard.clone(), rec));
                let committed = by.is_some_and(|(lane, k)| flushed.get(lane).is_some_and(|f| f >= k));
                prop_assert!(
                    committed,
                    "I4 after {}: record {} of {} is under the checkpoint without a committed intent ({:?})",
                    after,
                    rec,
                    lease.shard,
                    by
                );
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn no_interleaving_puts_a_record_in_two_valid_intents_or_a_checkpoint_past_an_uncommitted_one(
        steps in proptest::collection::vec(step(), 20..80)
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
        rt.block_on(async {
            let mut world = World::new();
            for (i, s) in steps.iter().enumerate() {
                world.run(*s).await;
                world.check(&format!("step {i} {s:?}")).await?;
            }
            Ok::<(), TestCaseError>(())
        })?;
    }
}
