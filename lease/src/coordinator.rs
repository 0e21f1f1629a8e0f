//! [`Coordinator`]: one worker's side of the lease protocol over a
//! [`SortedTable`]. Every write on the lease table goes through here:
//! joining (taking a lane, in `join.rs`), the heartbeat, lease passes
//! (create, take, steal, free dead lanes, complete checkpoints), the flush
//! intent (open → validate → commit → complete, in `intent.rs`), handoff and
//! release, and lane recovery (`recovery.rs`).
//!
//! Each call is retried (bounded) by [`RetryPolicy`]; when the attempts are
//! spent the error reaches the caller, which pauses and calls again later —
//! every operation here can be repeated. A conditional write whose guard
//! fails is checked against the item it returns, so a retry of a write that
//! applied but timed out is recognised as done rather than as a fence.

use crate::items::{self, Beat, Lane, ShardLease, ShardRange};
use crate::observer::Observer;
use crate::LeaseError;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use zigzag_core::retry::RetryPolicy;
use zigzag_core::table::{SortedTable, UpdateOutcome};

#[derive(Debug, Clone)]
pub struct LeaseOptions {
    /// The stream this worker consumes.
    pub stream: String,
    /// This worker's id, unique among live workers (a restart may reuse
    /// it: the owner written is this process's incarnation, `owner.rs`).
    pub worker: String,
    /// A lane whose beat has not moved for this long is expired.
    pub failover: Duration,
    pub retry: RetryPolicy,
}

impl LeaseOptions {
    pub fn new(stream: impl Into<String>, worker: impl Into<String>) -> Self {
        LeaseOptions {
            stream: stream.into(),
            worker: worker.into(),
            failover: Duration::from_secs(10),
            retry: RetryPolicy::default(),
        }
    }

    /// Heartbeats run every failover / 3 (a beat writes a few bytes).
    pub fn renew_every(&self) -> Duration {
        self.failover / 3
    }

    /// Lease passes run every failover / 2: a dead worker is seen at most
    /// failover + 2 passes after its last beat (2 x failover), and a pass
    /// reads every lease, so fewer passes cost less.
    pub fn pass_every(&self) -> Duration {
        self.failover / 2
    }

    /// The wait before the next pass: `pass_every` within +-25 %, so workers
    /// started together (a deployment) do not read the leases in the same
    /// second for ever after.
    pub fn next_pass(&self) -> Duration {
        self.pass_every().mul_f64(0.75 + rand::random::<f64>() / 2.0)
    }
}

/// When a worker that flushes every `every` makes its first flush: at a
/// random point of the first interval. Every flush writes the checkpoints
/// of the leases it covers, and a stream's leases share one partition
/// key, so workers started together (a deployment) that flushed in the
/// same second would put all of a stream's checkpoint writes and proof
/// reads into that second, for ever after (1,990 WCU in one second at
/// 1,000 shards and a 10 s flush, in the simulation; spread: the average,
/// shards / interval).
pub fn first_flush_after(every: Duration) -> Duration {
    every.mul_f64(rand::random::<f64>())
}

/// Counters of everything this worker did on the lease table.
#[derive(Debug, Default)]
pub struct LeaseStats {
    /// Requests sent to the lease table (reads and writes, retries included).
    pub requests: AtomicU64,
    pub retries: AtomicU64,
    pub taken: AtomicU64,
    pub taken_expired: AtomicU64,
    pub steals_requested: AtomicU64,
    pub handed_off: AtomicU64,
    pub lost: AtomicU64,
    pub lanes_recovered: AtomicU64,
    pub lanes_freed: AtomicU64,
    /// Heartbeats that failed (counted by the caller that runs them).
    pub heartbeat_failures: AtomicU64,
    /// Lease passes (or their shard listing) that failed.
    pub pass_failures: AtomicU64,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct MyLane {
    pub(crate) lane: u32,
    pub(crate) beat: u64,
    /// The last flush committed on it.
    pub(crate) flush: u64,
    /// Which join of this worker took it (1, 2, ...).
    pub(crate) joined: u64,
    /// When its beat last moved (the join, then each heartbeat).
    pub(crate) renewed: std::time::Instant,
}

pub(crate) struct State {
    pub(crate) lane: Option<MyLane>,
    /// The lane `join` is taking (not yet ours in `lane`).
    pub(crate) joining: Option<u32>,
    /// Joins so far.
    pub(crate) joins: u64,
    /// This worker's lane as last lost, (lane, joined), until it joins
    /// again: every call that needs the lane learns of the loss, not only
    /// the one that found it.
    pub(crate) lost: Option<(u32, u64)>,
    /// Dead workers' lanes this worker is recovering: (lane, beat). They
    /// are beaten with its own, so a long recovery is not taken over.
    pub(crate) recovering: Vec<(u32, u64)>,
    pub(crate) observer: Observer,
    /// The lanes as the last pass saw them: lane items as last read, beats
    /// as last read (recovery takes from this view).
    pub(crate) lanes: Vec<Lane>,
    /// The shard ids the stream listed last.
    pub(crate) listed: Option<HashSet<String>>,
    /// When the lane items were last read (in passes) and the shards this
    /// worker held then (`pass.rs`: lane items are read on demand).
    pub(crate) lanes_read: Option<LanesRead>,
    pub(crate) passes: u64,
    /// The last pass left something only a fresh read of the lane items
    /// settles (a held shard blocked, a checkpoint to complete).
    pub(crate) want_lanes: bool,
    /// Bytes and count of the leases as last read whole (the proof reads
    /// the leases it covers one by one when that is cheaper).
    pub(crate) lease_bytes: (usize, usize),
    /// The leases as last read whole in a pass, kept up to date with this
    /// worker's own writes (`pass.rs`: read again only when the generation
    /// moved, something is pending, or every `LEASES_EVERY` passes).
    pub(crate) leases: Option<LeaseCache>,
    /// The last pass left work that the next one must see the leases for.
    pub(crate) want_leases: bool,
    /// Per shard, its children as last listed.
    pub(crate) children: HashMap<String, Vec<String>>,
    /// This worker is on the stream's lowest live lane: it creates missing
    /// leases and retires finished ones.
    pub(crate) creator: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct LeaseCache {
    pub(crate) generation: u64,
    pub(crate) pass: u64,
    pub(crate) leases: Vec<ShardLease>,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct LanesRead {
    pub(crate) pass: u64,
    pub(crate) held: HashSet<String>,
}

/// A dead worker's valid intent, taken over: re-apply its ranges under
/// `(lane, k)`, then [`Coordinator::finish_recovery`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    pub lane: u32,
    pub k: u64,
    pub ranges: Vec<ShardRange>,
    pub layout: String,
}

pub struct Coordinator {
    pub(crate) table: Arc<dyn SortedTable>,
    pub(crate) opts: LeaseOptions,
    /// This process's incarnation of `opts.worker`: the owner it writes.
    owner: String,
    /// The stream's incarnation read at the start, and the key of its lease
    /// state (`stream.rs`; the name until resolved).
    incarnation: std::sync::OnceLock<(Option<String>, String)>,
    pub(crate) state: Mutex<State>,
    pub stats: LeaseStats,
    /// The seal as last read (`seal.rs`): by every pass, and strongly after
    /// a join.
    seal_seen: std::sync::atomic::AtomicI64,
    /// What this worker says of its layout on the lanes it takes
    /// (`adoption.rs`).
    pub(crate) layout: Mutex<crate::adoption::LayoutAck>,
    /// The end of the newest event read, said with each intent.
    pub(crate) read_to: std::sync::atomic::AtomicI64,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Coordinator {
    pub fn new(table: Arc<dyn SortedTable>, opts: LeaseOptions) -> Self {
        let observer = Observer::new(opts.failover);
        let owner = crate::owner::incarnation(&opts.worker);
        Coordinator {
            table,
            opts,
            owner,
            incarnation: std::sync::OnceLock::new(),
            seal_seen: std::sync::atomic::AtomicI64::new(0),
            layout: Mutex::new(Default::default()),
            read_to: std::sync::atomic::AtomicI64::new(0),
            state: Mutex::new(State {
                lane: None,
                joining: None,
                joins: 0,
                lost: None,
                recovering: Vec::new(),
                observer,
                lanes: Vec::new(),
                listed: None,
                lanes_read: None,
                passes: 0,
                want_lanes: false,
                lease_bytes: (0, 0),
                leases: None,
                want_leases: false,
                children: HashMap::new(),
                creator: false,
            }),
            stats: LeaseStats::default(),
        }
    }

    pub fn options(&self) -> &LeaseOptions {
        &self.opts
    }

    /// The lease table.
    pub(crate) fn table(&self) -> &Arc<dyn SortedTable> {
        &self.table
    }

    /// The owner this process writes on lanes and leases: its worker id's
    /// incarnation (`owner.rs`).
    pub fn worker(&self) -> &str {
        &self.owner
    }

    /// A later incarnation of this worker's id holding one of `live`
    /// (lanes not expired): this process was replaced and must stop.
    pub(crate) fn superseded<'a>(&self, live: impl IntoIterator<Item = &'a Lane>) -> Result<(), LeaseError> {
        let by = live
            .into_iter()
            .flat_map(|l| [l.owner.as_deref(), l.beater.as_deref()])
            .flatten()
            .find(|o| crate::owner::supersedes(o, &self.owner));
        match by {
            None => Ok(()),
            Some(by) => {
                metrics::counter!("zigzag_lease_superseded_total").increment(1);
                Err(LeaseError::Superseded { id: self.opts.worker.clone(), me: self.owner.clone(), by: by.to_string() })
            }
        }
    }

    /// The key of the stream's lease state: its name, or for a recreated
    /// stream the name and its incarnation.
    pub fn stream(&self) -> &str {
        self.incarnation.get().map_or(&self.opts.stream, |(_, key)| key)
    }

    /// Keys the lease state by the stream's incarnation `identity` (once,
    /// before the first join; None: the source cannot be recreated).
    pub async fn resolve_stream(&self, identity: Option<String>) -> Result<(), LeaseError> {
        if self.incarnation.get().is_none() {
            let key = crate::stream::resolve(self.table.as_ref(), &self.opts.stream, identity.as_deref()).await?;
            let _ = self.incarnation.set((identity, key));
        }
        Ok(())
    }

    /// `StreamRecreated` if the stream's incarnation is not the one this
    /// worker started on.
    pub fn check_stream(&self, identity: &str) -> Result<(), LeaseError> {
        match self.incarnation.get() {
            Some((Some(was), _)) if was != identity => {
                metrics::counter!("zigzag_lease_stream_recreated_total").increment(1);
                Err(LeaseError::StreamRecreated {
                    stream: self.opts.stream.clone(),
                    was: was.clone(),
                    now: identity.to_string(),
                })
            }
            _ => Ok(()),
        }
    }

    /// The seal as last read (0: none).
    pub fn seal_seen(&self) -> i64 {
        self.seal_seen.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Reads the seal (strongly consistent when asked: after a join, so a
    /// seal raised before the join is seen before anything is read).
    pub async fn read_seal(&self, consistent: bool) -> Result<i64, LeaseError> {
        let seal = self.read_seal_item(consistent).await?;
        self.seal_seen.fetch_max(seal, std::sync::atomic::Ordering::Relaxed);
        Ok(self.seal_seen())
    }

    /// Acknowledges on this worker's lane that it reads under `seal` and
    /// everything it read under an older one is committed and completed.
    pub async fn acknowledge_seal(&self, seal: i64) -> Result<(), LeaseError> {
        let my = self.my_lane()?;
        let me = self.worker().to_string();
        match self.update(&crate::seal::acknowledge(my.lane, &me, seal)).await? {
            UpdateOutcome::Applied(_) => Ok(()),
            UpdateOutcome::ConditionFailed(_) => Err(self.lost_lane(my.lane)),
        }
    }

    /// Lane `lane`'s intent as the last pass saw it.
    pub fn seen_intent(&self, lane: u32) -> Option<crate::Intent> {
        lock(&self.state).lanes.iter().find(|l| l.lane == lane).and_then(|l| l.intent.clone())
    }

    /// This worker's lane, once joined.
    pub fn lane(&self) -> Option<u32> {
        lock(&self.state).lane.map(|l| l.lane)
    }

    /// How many times this worker has joined (the `joined` of a lane it
    /// holds now equals this).
    pub fn joined(&self) -> u64 {
        lock(&self.state).joins
    }

    pub(crate) fn my_lane(&self) -> Result<MyLane, LeaseError> {
        let st = lock(&self.state);
        match (st.lane, st.lost) {
            (Some(l), _) => Ok(l),
            (None, Some((lane, joined))) => Err(LeaseError::LaneLost { lane, joined }),
            (None, None) => Err(LeaseError::NotJoined),
        }
    }

    /// One beat of this worker's lane (and of the lanes it is recovering);
    /// `LaneLost` if another worker took its own lane.
    pub async fn heartbeat(&self) -> Result<(), LeaseError> {
        let recovering = lock(&self.state).recovering.clone();
        for (lane, beat) in recovering {
            if let Ok(Some(now)) = self.beat(lane, beat).await {
                if let Some(r) = lock(&self.state).recovering.iter_mut().find(|r| r.0 == lane) {
                    r.1 = now;
                }
            }
        }
        let my = self.my_lane()?;
        let Some(beat) = self.beat(my.lane, my.beat).await? else { return Err(self.lost_lane(my.lane)) };
        if let Some(l) = lock(&self.state).lane.as_mut().filter(|l| l.lane == my.lane) {
            l.beat = beat;
            l.renewed = std::time::Instant::now();
        }
        Ok(())
    }

    /// How long ago this worker's lane beat last (None: not joined). Other
    /// workers take its shards once it is older than the failover time:
    /// what a readiness check asks.
    pub fn renewed_ago(&self) -> Option<Duration> {
        lock(&self.state).lane.as_ref().map(|l| l.renewed.elapsed())
    }

    /// Moves `lane`'s beat on from `seen`: the new beat, or None if the lane
    /// is not this worker's any more.
    async fn beat(&self, lane: u32, seen: u64) -> Result<Option<u64>, LeaseError> {
        match self.update(&items::heartbeat(lane, seen, self.worker())).await? {
            UpdateOutcome::Applied(item) => Ok(Some(Beat::from_item(&item)?.beat)),
            UpdateOutcome::ConditionFailed(Some(item)) => {
                let b = Beat::from_item(&item)?;
                Ok((b.owner.as_deref() == Some(self.worker()) && b.beat == seen + 1).then_some(b.beat))
            }
            UpdateOutcome::ConditionFailed(None) => Ok(None),
        }
    }

    /// Flush `k` of `lane` committed: the next one is `k + 1` (if the lane
    /// is still this worker's own).
    pub(crate) fn committed(&self, lane: u32, k: u64) {
        if let Some(l) = lock(&self.state).lane.as_mut().filter(|l| l.lane == lane) {
            l.flush = k;
        }
    }

    pub(crate) fn lost_lane(&self, lane: u32) -> LeaseError {
        let mut st = lock(&self.state);
        let joined = match st.lane {
            Some(l) if l.lane == lane => {
                st.lane = None;
                st.lost = Some((lane, l.joined));
                l.joined
            }
            _ => 0, // not this worker's own lane (a recovery)
        };
        drop(st);
        self.stats.lost.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("zigzag_lease_lanes_lost_total").increment(1);
        LeaseError::LaneLost { lane, joined }
    }

    /// The start recorded for a held shard without a checkpoint: `ms` if
    /// none was, else the one recorded first. None if the lease is not held
    /// at counter `lease` any more.
    pub async fn record_start(&self, shard: &str, lease: u64, ms: i64) -> Result<Option<i64>, LeaseError> {
        match self.write_lease(&items::record_start(self.stream(), shard, lease, ms), false).await? {
            UpdateOutcome::Applied(item) => Ok(ShardLease::from_item(&item)?.start_ms),
            UpdateOutcome::ConditionFailed(_) => Ok(None),
        }
    }

    /// Gives a held lease to `to` ("" releases it). False if it was not
    /// ours any more.
    pub async fn give(&self, shard: &str, lease: u64, to: &str) -> Result<bool, LeaseError> {
        let req = items::give_lease(self.stream(), shard, lease, self.worker(), to);
        let done = match self.write_lease(&req, true).await? {
            UpdateOutcome::Applied(_) => true,
            UpdateOutcome::ConditionFailed(Some(item)) => {
                let l = ShardLease::from_item(&item)?;
                l.lease == lease + 1 && l.owner.as_deref().unwrap_or("") == to
            }
            UpdateOutcome::ConditionFailed(None) => false,
        };
        if done && !to.is_empty() {
            self.stats.handed_off.fetch_add(1, Ordering::Relaxed);
            metrics::counter!("zigzag_lease_handed_off_total").increment(1);
            tracing::info!(shard, to, "lease handed over");
        }
        Ok(done)
    }

    /// Releases every lease the table shows this worker holding (graceful
    /// shutdown, after the leases it reads were given away): those a last
    /// pass took, or that wait for their parents, were never read here and
    /// would otherwise wait out an expiry. How many it released.
    pub async fn release_held(&self) -> Result<usize, LeaseError> {
        let mut released = 0;
        for l in self.read_leases().await? {
            if l.owner.as_deref() == Some(self.worker()) && self.give(&l.shard, l.lease, "").await? {
                tracing::info!(shard = %l.shard, "released a lease this worker held but did not read");
                released += 1;
            }
        }
        Ok(released)
    }

    /// Frees this worker's lane (graceful shutdown; nothing in flight).
    pub async fn leave(&self) -> Result<(), LeaseError> {
        let Some(my) = lock(&self.state).lane.take() else { return Ok(()) };
        self.release(my.lane, self.worker()).await?;
        tracing::info!(lane = my.lane, "left");
        Ok(())
    }
}

/// Lane items with the liveness of their beat items; a beat item without a
/// lane item (claimed, the lane not yet taken or never created) is a lane
/// without an owner.
pub(crate) fn with_beats(lanes: Vec<Lane>, beats: &[Beat]) -> Vec<Lane> {
    let mut lanes: std::collections::BTreeMap<u32, Lane> = lanes.into_iter().map(|l| (l.lane, l)).collect();
    for b in beats {
        let lane = lanes.remove(&b.lane).unwrap_or_else(|| Lane {
            lane: b.lane,
            owner: None,
            beater: None,
            stream: String::new(),
            beat: 0,
            flush: 0,
            intent: None,
            seal: 0,
            layout: Default::default(),
            wrote_to_ms: 0,
        });
        lanes.insert(b.lane, lane.with_beat(b));
    }
    lanes.into_values().collect()
}

pub(crate) fn replace(leases: &mut [ShardLease], new: ShardLease) {
    if let Some(l) = leases.iter_mut().find(|l| l.shard == new.shard) {
        *l = new;
    }
}
