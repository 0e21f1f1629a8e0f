//! One worker's lease pass, decided from a snapshot of the lease table:
//! what to take, whether to steal, which lanes to recover or free, which
//! checkpoints to complete, and which held shards may be read. Pure, so the
//! rules are tested against every interleaving a test can generate.
//!
//! Rules:
//! - a shard is *readable* when it is listed (a shard the stream no longer
//!   lists aged out of retention) and every parent is finished or aged out;
//! - a shard is *blocked* while a lane has an intent in flight that covers
//!   it, or a committed intent whose range starts at the shard's checkpoint
//!   (its completion is pending; the shard's holder completes it: a pass's
//!   leases may be older than its lanes, and a worker completing what it
//!   does not hold would mostly rewrite checkpoints already moved — 910
//!   refused writes in one second in the simulation);
//! - a lease is *available* when it is unowned, or its owner has no live
//!   lane (none, or one whose beat has not moved for the failover time as
//!   this observer measured it);
//! - target = ceil(readable unfinished shards / live workers of the
//!   stream); take unowned leases up to the target, and every expired one
//!   (a dead worker's shards resume at once; balancing evens it out); only
//!   when none is available, steal one per pass from the most loaded
//!   worker, and only if that worker holds at least two more than we do (so
//!   the taker never ends above the target, and two workers never trade a
//!   lease back and forth);
//! - no worker holds more than [`MAX_SHARDS_PER_WORKER`]: a flush's intent
//!   lists every shard it read, in the worker's lane item, which must stay
//!   under DynamoDB's 400 KB. Shards beyond what the live workers may hold
//!   stay unowned and are counted (`over_capacity`): start more workers.

use crate::checkpoint::Checkpoint;

/// The most shards one worker holds. An intent's range is at most 361
/// bytes (a 128-character shard id, Kinesis's 56-digit sequence numbers in
/// the checkpoint, apart item sets, the first and last record): 500 of them
/// make a lane item of 180,658 bytes, under half of DynamoDB's 400 KB
/// (`items/size_tests.rs` builds it at the bound).
pub const MAX_SHARDS_PER_WORKER: usize = 500;
use crate::items::{IntentState, Lane, ShardLease, ShardRange};
use std::collections::{BTreeMap, HashMap, HashSet};

/// What a pass sees.
#[derive(Debug, Clone, Default)]
pub struct View {
    pub stream: String,
    /// This stream's shard leases.
    pub leases: Vec<ShardLease>,
    /// Shard ids the stream listed last (None: not listed yet).
    pub listed: Option<HashSet<String>>,
    /// Per shard, its children as the stream listed them last.
    pub children: HashMap<String, Vec<String>>,
    /// Every lane of the table (all streams).
    pub lanes: Vec<Lane>,
    /// Lanes whose beat has not moved for the failover time.
    pub expired: HashSet<u32>,
    /// This worker's lane.
    pub my_lane: Option<u32>,
}

/// A held shard that may be read now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ready {
    pub shard: String,
    pub lease: u64,
    pub checkpoint: Checkpoint,
    /// Start at the oldest record (a child of consumed parents) instead of
    /// the configured start position.
    pub from_trim_horizon: bool,
    /// Without a checkpoint: where its first reader began, if recorded.
    pub start_ms: Option<i64>,
    /// The seal its checkpoint's records were read under (`seal.rs`).
    pub seal: i64,
    /// The layout numbering its checkpoint's sets, when apart and recorded
    /// (`adoption.rs`).
    pub layout: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Available leases to take: (shard, counter seen).
    pub take: Vec<(String, u64)>,
    /// One lease to ask for: (shard, counter seen, its owner).
    pub steal: Option<(String, u64, String)>,
    /// Expired lanes of this stream with an intent in flight.
    pub recover: Vec<u32>,
    /// Expired lanes with nothing in flight: (lane, beater, beat seen).
    pub free: Vec<(u32, String, u64)>,
    /// Committed ranges whose checkpoint is still to be moved.
    pub complete: Vec<ShardRange>,
    /// Finished leases no longer needed, to delete: (shard, counter seen).
    pub retire: Vec<(String, u64)>,
    /// Held shards that may be read.
    pub ready: Vec<Ready>,
    /// Held shards (shard → lease counter), readable or not.
    pub held: BTreeMap<String, u64>,
    /// Held shards another live worker asked for: (shard, counter, to).
    pub handoffs: Vec<(String, u64, String)>,
    pub target: usize,
    pub live_workers: usize,
    /// Unfinished shards waiting for a parent.
    pub waiting_for_parents: usize,
    /// Readable leases no live worker holds (this worker's `take` among
    /// them): a worker that stops because it is caught up must not leave
    /// one behind for a worker that already stopped.
    pub unheld: usize,
    /// Shards not finished: leases not finished, and listed shards without a
    /// lease yet (0: every shard of the stream was read to its end).
    pub unfinished: usize,
    /// Unfinished leases of shards the stream no longer lists (aged out of
    /// retention before they were read to the end: their rest is lost).
    pub aged_out: usize,
    /// Readable shards beyond what the live workers may hold
    /// ([`MAX_SHARDS_PER_WORKER`] each): nobody reads them.
    pub over_capacity: usize,
}

impl View {
    fn live_owners(&self) -> HashSet<&str> {
        self.lanes.iter().filter(|l| !self.expired.contains(&l.lane)).filter_map(|l| l.beater.as_deref()).collect()
    }
}

pub fn plan(view: &View, me: &str) -> Plan {
    let mut plan = Plan::default();
    let live = view.live_owners();
    let alive = |owner: &str| owner == me || live.contains(owner);
    let by_id: HashMap<&str, &ShardLease> = view.leases.iter().map(|l| (l.shard.as_str(), l)).collect();

    for lane in view.lanes.iter().filter(|l| view.expired.contains(&l.lane)) {
        let Some(owner) = &lane.beater else { continue };
        if Some(lane.lane) == view.my_lane {
            continue;
        }
        if lane.in_flight().is_some() {
            if lane.stream == view.stream {
                plan.recover.push(lane.lane);
            }
        } else {
            plan.free.push((lane.lane, owner.clone(), lane.beat));
        }
    }

    // Blocked shards, and committed ranges to complete.
    let mut blocked: HashSet<&str> = HashSet::new();
    for lane in view.lanes.iter().filter(|l| l.stream == view.stream) {
        let Some(intent) = &lane.intent else { continue };
        for r in &intent.ranges {
            let Some(lease) = by_id.get(r.shard.as_str()) else { continue };
            match intent.state {
                IntentState::Open | IntentState::Valid => {
                    blocked.insert(&lease.shard);
                }
                IntentState::Done
                    if lease.checkpoint == r.from && (r.from != r.completed() || r.finishes() != lease.finished) =>
                {
                    blocked.insert(&lease.shard);
                    if lease.owner.as_deref() == Some(me) {
                        plan.complete.push(r.clone());
                    }
                }
                IntentState::Done => {}
            }
        }
    }

    // A shard the stream no longer lists has aged out of retention: it is
    // not read (nothing is left to read), and it no longer holds back its
    // children, leased or not.
    let aged_out = |id: &str| view.listed.as_ref().is_some_and(|listed| !listed.contains(id));
    // A child that started (every item set checkpointed) needs no parent:
    // its parent's lease may have been retired (below).
    let parent_done =
        |p: &String, child: &ShardLease| by_id.get(p.as_str()).map_or(started(child), |l| l.finished) || aged_out(p);
    plan.aged_out = view.leases.iter().filter(|l| !l.finished && aged_out(&l.shard)).count();
    let readable: Vec<&ShardLease> = view
        .leases
        .iter()
        .filter(|l| !l.finished && !aged_out(&l.shard))
        .filter(|l| {
            let ok = l.parents.iter().all(|p| parent_done(p, l));
            if !ok {
                plan.waiting_for_parents += 1;
            }
            ok
        })
        .collect();

    let workers: HashSet<&str> = view
        .lanes
        .iter()
        .filter(|l| l.stream == view.stream && !view.expired.contains(&l.lane))
        .filter_map(|l| l.beater.as_deref())
        .chain(std::iter::once(me))
        .collect();
    plan.live_workers = workers.len();
    plan.target = readable.len().div_ceil(plan.live_workers.max(1)).min(MAX_SHARDS_PER_WORKER);
    plan.over_capacity = readable.len().saturating_sub(plan.live_workers * MAX_SHARDS_PER_WORKER);

    let mut load: BTreeMap<&str, Vec<&ShardLease>> = BTreeMap::new();
    let mut available = Vec::new();
    for l in &readable {
        match l.owner.as_deref() {
            Some(o) if alive(o) => load.entry(o).or_default().push(l),
            _ => available.push(*l),
        }
    }
    // Listed shards without a lease are unfinished too (another worker
    // creates their leases), unless they were read and retired; and nothing
    // is known finished before the stream was listed or a lease seen.
    let unleased = view.listed.as_ref().map_or(usize::from(view.leases.is_empty()), |listed| {
        listed.iter().filter(|s| !by_id.contains_key(s.as_str()) && !consumed(s, &view.children, &by_id)).count()
    });
    plan.unfinished = view.leases.iter().filter(|l| !l.finished).count() + unleased;
    // Every owned unfinished lease counts as held, readable or not (a lost
    // lease is noticed even while the shard waits).
    for l in view.leases.iter().filter(|l| l.owner.as_deref() == Some(me) && !l.finished) {
        plan.held.insert(l.shard.clone(), l.lease);
        if let Some(to) = l.handoff.as_deref().filter(|to| *to != me && live.contains(to)) {
            plan.handoffs.push((l.shard.clone(), l.lease, to.to_string()));
        }
    }
    let mine = load.get(me).map_or(0, Vec::len);
    // Unowned leases up to the target, in an order that differs per worker
    // (workers starting together mostly take different ones). Expired
    // leases are taken whatever the target: a dead worker's shards resume at
    // once with the workers that saw it die (a worker that just started has
    // not watched long enough to tell), and balancing later hands the
    // surplus to workers below the target.
    plan.unheld = available.len();
    available.sort_by_key(|l| (l.owner.is_some(), spread(me, &l.shard)));
    let room = plan.target.saturating_sub(mine);
    let (unowned, expired): (Vec<&ShardLease>, Vec<&ShardLease>) = available.iter().partition(|l| l.owner.is_none());
    // Expired ones too never past the most a worker may hold.
    let most = MAX_SHARDS_PER_WORKER.saturating_sub(mine);
    for l in unowned.iter().take(room).chain(expired.iter()).take(most) {
        plan.take.push((l.shard.clone(), l.lease));
    }
    if available.is_empty() && mine < plan.target {
        let victim = load
            .iter()
            .filter(|(o, _)| **o != me)
            .max_by_key(|(o, shards)| (shards.len(), std::cmp::Reverse(**o)))
            .filter(|(_, shards)| shards.len() >= mine + 2);
        if let Some((owner, shards)) = victim {
            let asked = view.leases.iter().any(|l| l.handoff.as_deref() == Some(me));
            let pick = shards.iter().filter(|l| l.handoff.is_none()).min_by_key(|l| spread(me, &l.shard));
            if let (false, Some(l)) = (asked, pick) {
                plan.steal = Some((l.shard.clone(), l.lease, owner.to_string()));
            }
        }
    }

    plan.retire = retirable(view, &by_id, &blocked);

    for l in readable.iter().filter(|l| l.owner.as_deref() == Some(me) && !blocked.contains(l.shard.as_str())) {
        let from_trim_horizon =
            l.checkpoint.earliest().is_none() && l.parents.iter().any(|p| by_id.contains_key(p.as_str()));
        let checkpoint = l.checkpoint.clone();
        let start_ms = l.start_ms;
        plan.ready.push(Ready {
            shard: l.shard.clone(),
            lease: l.lease,
            checkpoint,
            from_trim_horizon,
            start_ms,
            seal: l.seal,
            layout: l.layout.clone(),
        });
    }
    plan
}

/// Whether a shard's reading began on every item set (or ended).
pub fn started(l: &ShardLease) -> bool {
    l.finished || l.checkpoint.earliest().is_some()
}

/// Finished leases nothing needs any more, so a stream resharded for years
/// keeps only the leases of its recent shards: a finished shard that aged
/// out of the listing, or whose children (as listed) all have leases that
/// started (they no longer look at their parents, and the creator never
/// makes its lease again: `consumed`). Never one a lane's intent still
/// covers.
fn retirable(view: &View, by_id: &HashMap<&str, &ShardLease>, blocked: &HashSet<&str>) -> Vec<(String, u64)> {
    let Some(listed) = &view.listed else { return Vec::new() };
    view.leases
        .iter()
        .filter(|l| l.finished && !blocked.contains(l.shard.as_str()))
        .filter(|l| {
            if !listed.contains(&l.shard) {
                return true;
            }
            let children = view.children.get(&l.shard).map_or(&[][..], Vec::as_slice);
            !children.is_empty() && children.iter().all(|c| by_id.get(c.as_str()).is_some_and(|c| started(c)))
        })
        .map(|l| (l.shard.clone(), l.lease))
        .collect()
}

/// Whether a listed shard without a lease was read and its lease retired:
/// one of its listed children has a lease that started, or was itself
/// consumed. Its lease must never be made again (it would be read twice).
pub fn consumed(shard: &str, children: &HashMap<String, Vec<String>>, by_id: &HashMap<&str, &ShardLease>) -> bool {
    children.get(shard).is_some_and(|cs| {
        cs.iter().any(|c| match by_id.get(c.as_str()) {
            Some(l) => started(l),
            None => consumed(c, children, by_id),
        })
    })
}

fn spread(me: &str, shard: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(format!("{me}/{shard}").as_bytes())
}

#[cfg(test)]
mod tests;
