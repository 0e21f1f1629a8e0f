//! The seal: "no event before time S is written any more". What makes a
//! bucket *closed*, so that `gather compact` can fold its items knowing no
//! flush will add to them afterwards.
//!
//! Ingest accepts an event for any past bucket, so without a seal no bucket
//! is ever closed. The seal is one item of the lease table (`#seal`), raised
//! by an operator's command and never lowered. Its protocol:
//!
//! 1. **raise**: `before = S` (a conditional write: only upwards);
//! 2. **adopt**: a worker learns the seal from its lease passes (and reads it
//!    strongly after joining). At its next flush it writes *everything* it
//!    holds (every item set: nothing read under the old seal stays in
//!    memory) and reads every record after that swap under the new seal:
//!    an event before S is refused and dead-lettered (`sealed`). Every
//!    range of an intent records the seal its records were read under
//!    (`ShardRange::seal`), so a recovery or a replay refuses exactly the same
//!    events (I2); a completed checkpoint records it too (a shard whose item
//!    sets are apart is caught up under the seal its other sets were read
//!    under);
//! 3. **acknowledge**: once that flush is committed and completed, the
//!    worker writes `seal = S` on its lane;
//! 4. **barrier** ([`blockers`]): S holds once no lane has an owner that has
//!    not acknowledged it, no intent with a range read under an older seal
//!    is in flight or committed and not completed, and no shard has item
//!    sets apart under an older seal. A dead worker's lane is recovered or
//!    freed by the live ones (under the seal its intent recorded), so the
//!    barrier waits for them; with no live worker it waits forever, and
//!    says what for.
//!
//! A worker joining after the barrier's read of the lanes reads the seal
//! after its join write, so it adopts S before it reads anything; one that
//! joined before is a lane the barrier waits for. A worker of a version
//! before seals never acknowledges: the barrier refuses rather than let it
//! write into sealed buckets.

use crate::items::{lane_sk, Lane, ShardLease, ShardRange, LANES_PK};
use crate::LeaseError;
use zigzag_core::table::{AttrValue, CmpOp, QueryRequest, SortKeyCondition, SortedTable, UpdateOutcome, UpdateRequest};

/// The seal item.
pub const SEAL_PK: &str = "#seal";
pub const SEAL_SK: &[u8] = b"seal";
/// Its time (ms since the epoch): events before it are refused.
const BEFORE: &str = "before";
/// On a lane: the seal its owner reads under (acknowledged). On a lease:
/// the seal its checkpoint's records were read under.
pub(crate) const SEAL: &str = "seal";
/// Partition of the stream keys workers have used (`register_stream`): the
/// barrier reads their leases.
pub const STREAM_KEYS_PK: &str = "#streamkeys";

/// The seal an item of [`SEAL_PK`] holds (0: no item).
pub(crate) fn seal_of(item: Option<&zigzag_core::table::Item>) -> Result<i64, LeaseError> {
    number(item, BEFORE)
}

fn number(item: Option<&zigzag_core::table::Item>, attr: &str) -> Result<i64, LeaseError> {
    match item.and_then(|i| i.attrs.get(attr)) {
        None => Ok(0),
        Some(AttrValue::N(d)) => i64::try_from(*d).map_err(|_| LeaseError::Unreadable(format!("{attr} = {d}"))),
        Some(v) => Err(LeaseError::Unreadable(format!("seal: {attr} is {v:?}, not a number"))),
    }
}

/// The seal (0: none).
pub async fn read(leases: &dyn SortedTable, consistent: bool) -> Result<i64, LeaseError> {
    let mut req = QueryRequest::new(SEAL_PK, SortKeyCondition::Eq(SEAL_SK.to_vec()));
    req.consistent = consistent;
    let page = leases.query(&req).await?;
    seal_of(page.items.first())
}

/// Raises the seal to `before` (never lowers it); the seal now.
pub async fn raise(leases: &dyn SortedTable, before: i64) -> Result<i64, LeaseError> {
    let req = UpdateRequest::new(SEAL_PK, SEAL_SK.to_vec()).set(BEFORE, before).guard(BEFORE, CmpOp::Lt, before, true);
    match leases.update(&req).await? {
        UpdateOutcome::Applied(_) => Ok(before),
        UpdateOutcome::ConditionFailed(item) => number(item.as_ref(), BEFORE),
    }
}

/// The lane write acknowledging `seal` (guarded by its owner).
pub fn acknowledge(lane: u32, me: &str, seal: i64) -> UpdateRequest {
    UpdateRequest::new(LANES_PK, lane_sk(lane)).set(SEAL, seal).guard("owner", CmpOp::Eq, me, false)
}

/// Records that a stream key's leases exist (once per worker start).
pub fn register_stream(key: &str) -> UpdateRequest {
    UpdateRequest::new(STREAM_KEYS_PK, key.as_bytes().to_vec()).set_if_absent("at", 1i64)
}

/// What a seal still waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocker {
    /// A lane whose owner has not acknowledged the seal (alive and not yet
    /// flushed, dead and not yet recovered, or a version before seals).
    NotAcknowledged { lane: u32, owner: String, acknowledged: i64 },
    /// A flush with records read under an older seal that is not done (in
    /// flight) or not completed (committed, checkpoint not moved).
    OlderFlush { lane: u32, k: u64, shard: String, seal: i64 },
    /// A shard whose item sets are apart under an older seal: catching it
    /// up writes records read under that seal.
    Apart { stream: String, shard: String, seal: i64 },
}

impl std::fmt::Display for Blocker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Blocker::NotAcknowledged { lane, owner, acknowledged } => write!(
                f,
                "lane {lane} (owner {owner}) has not acknowledged the seal (it reads under {acknowledged}): a live \
                 worker does at its next flush; a dead one's lane is recovered by the live workers; a worker of a \
                 version before seals never does (upgrade it)"
            ),
            Blocker::OlderFlush { lane, k, shard, seal } => write!(
                f,
                "lane {lane}: flush {k} holds shard {shard}'s records read under seal {seal} and is not completed"
            ),
            Blocker::Apart { stream, shard, seal } => write!(
                f,
                "stream {stream} shard {shard}: its item sets are apart under seal {seal}; the worker that takes it \
                 catches them up"
            ),
        }
    }
}

/// What keeps `seal` from holding, given every lane and every stream's
/// leases (`(stream key, lease)`), read after the seal was raised.
pub fn blockers(seal: i64, lanes: &[Lane], leases: &[(String, ShardLease)]) -> Vec<Blocker> {
    let mut out = Vec::new();
    let pending = |stream: &str, r: &ShardRange| {
        // Not completed: its lease still at the range's start, same counter.
        leases.iter().any(|(s, l)| {
            (stream.is_empty() || s == stream) && l.shard == r.shard && l.lease == r.lease && l.checkpoint == r.from
        })
    };
    for lane in lanes {
        if let Some(owner) = &lane.owner {
            if lane.seal < seal {
                out.push(Blocker::NotAcknowledged { lane: lane.lane, owner: owner.clone(), acknowledged: lane.seal });
            }
        }
        let Some(intent) = &lane.intent else { continue };
        let done = intent.state == crate::items::IntentState::Done;
        for r in intent.ranges.iter().filter(|r| r.seal < seal) {
            if !done || pending(&lane.stream, r) {
                out.push(Blocker::OlderFlush { lane: lane.lane, k: intent.k, shard: r.shard.clone(), seal: r.seal });
            }
        }
    }
    for (stream, l) in leases {
        if !l.finished && !l.checkpoint.is_uniform() && l.seal < seal {
            out.push(Blocker::Apart { stream: stream.clone(), shard: l.shard.clone(), seal: l.seal });
        }
    }
    out
}

/// Reads every lane and every registered stream's leases (strongly
/// consistent) and says what keeps `seal` from holding (empty: it holds).
pub async fn barrier(leases: &dyn SortedTable, seal: i64) -> Result<Vec<Blocker>, LeaseError> {
    let lanes = read_lanes(leases).await?;
    let keys = read_partition(leases, STREAM_KEYS_PK).await?;
    let mut all = Vec::new();
    for key in keys {
        let stream = String::from_utf8_lossy(&key.sk).into_owned();
        for item in read_partition(leases, &crate::items::shards_pk(&stream)).await? {
            all.push((stream.clone(), ShardLease::from_item(&item)?));
        }
    }
    Ok(blockers(seal, &lanes, &all))
}

/// Every lane, strongly consistent: who owns it and its last intent.
pub async fn read_lanes(leases: &dyn SortedTable) -> Result<Vec<Lane>, LeaseError> {
    read_partition(leases, LANES_PK).await?.iter().map(|i| Lane::from_item(i).map_err(Into::into)).collect()
}

async fn read_partition(t: &dyn SortedTable, pk: &str) -> Result<Vec<zigzag_core::table::Item>, LeaseError> {
    let mut req = QueryRequest::new(pk, SortKeyCondition::Any);
    req.consistent = true;
    let out = zigzag_core::query::run_key_range(t, req).await.map_err(|e| LeaseError::Table(crate::table_error(e)))?;
    Ok(out.items)
}

#[cfg(test)]
mod tests;
