//! The lease table's two kinds of items and every conditional write on
//! them. Pure: requests are built here and evaluated by any store
//! (`zigzag_core::table::apply_update` in tests).
//!
//! **Shard lease** — pk `#shards#<stream>`, sk = shard id:
//! `owner` (worker id, "" = unowned), `lease` (the fencing token: +1 on
//! every change of owner), `parents` (comma-separated), `cp` (the committed
//! checkpoint, `seq` or `seq.sub`; absent = nothing read yet), `fin` (read
//! to SHARD_END and committed), `handoff` (a worker that asked for the
//! shard; "" = none), `start_ms` (where the shard's first reader began, as
//! a time, when its configured start was LATEST or a time: a takeover
//! before the first checkpoint begins there too), and for operators only
//! `lag_ms` (MillisBehindLatest
//! when the checkpoint was taken) and `at_ms` (the committer's wall clock;
//! never compared across hosts).
//!
//! **Lane** — pk `#lanes`, sk = the lane number (4 bytes, big-endian): a
//! writer slot of the aggregate table. `owner` fences its intents; its
//! liveness is the lane's beat item (`items/beats.rs`; a heartbeat writes a few
//! bytes there, never the intent's ranges). Its flushes are numbered (`flush` = last committed) and each is an
//! [`Intent`]: `k` (its number), `state` (open → valid → done), `ranges`
//! (JSON: per shard the lease it was held under and the records `(from,
//! to]`), `layout` (the configuration digest that writes it). Aggregate
//! items carry one mark per lane (`w@<lane>` = the last flush of that lane
//! applied), so the marks on an item are bounded by the lanes ever in use at
//! once, not by shards.
//!
//! Every partition key starts with `#`, which no Kinesis stream name has,
//! so these never collide with the previous format (pk = the stream name).

use crate::checkpoint::{Checkpoint, ItemSet};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use zigzag_core::table::{AttrValue, CmpOp, DeleteRequest, Item, UpdateRequest};
use zigzag_model::Position;

pub const LANES_PK: &str = "#lanes";

mod beats;
mod lanes;
pub use beats::{claim_beat, heartbeat, release_beat, Beat, BEATS_PK};
pub use lanes::{
    abort_intent, commit_intent, open_intent, open_intent_to, release_lane, take_lane, validate_intent, Intent,
    IntentState, Lane, ShardRange,
};

const OWNER: &str = "owner";
const LEASE: &str = "lease";
const PARENTS: &str = "parents";
const CHECKPOINT: &str = "cp";
const FINISHED: &str = "fin";
const HANDOFF: &str = "handoff";
const START: &str = "start_ms";
const LAG: &str = "lag_ms";
const AT: &str = "at_ms";
/// Beside an apart checkpoint: what its sets behind do not hold yet (`owed.rs`).
const OWED: &str = "owed";

const STREAM: &str = "stream";
const BEAT: &str = "beat";
const FLUSH: &str = "flush";
const K: &str = "k";
const STATE: &str = "state";
const RANGES: &str = "ranges";
const LAYOUT: &str = "layout";

/// Partition key of a stream's shard leases.
pub fn shards_pk(stream: &str) -> String {
    format!("#shards#{stream}")
}

/// Partition key of a stream's lease generation: one item whose `gen`
/// moves on every lease write other workers' passes must see (an owner
/// changed, a handoff asked, a lease created, a shard finished), so a pass
/// that finds it unchanged skips reading every lease (`pass.rs`).
pub fn generation_pk(stream: &str) -> String {
    format!("#gen#{stream}")
}

pub const GENERATION_SK: &[u8] = b"gen";
const GENERATION: &str = "gen";

/// Moves a stream's lease generation on.
pub fn bump_generation(stream: &str) -> UpdateRequest {
    UpdateRequest::new(generation_pk(stream), GENERATION_SK).add(GENERATION, Decimal::ONE)
}

/// The generation an item holds (0 for none).
pub fn generation_of(item: Option<&Item>) -> Result<u64, CorruptItem> {
    item.map_or(Ok(0), |i| Reader(i).num(GENERATION))
}

/// The mark attribute of a lane on aggregate items (its format's one owner
/// is `zigzag_model::mark`).
pub use zigzag_model::mark::mark_attr;

pub fn lane_sk(lane: u32) -> Vec<u8> {
    lane.to_be_bytes().to_vec()
}

pub(crate) fn n(v: u64) -> AttrValue {
    AttrValue::N(Decimal::from(v))
}

/// Why an item could not be read as a lease or lane.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("lease table item {pk}/{sk}: {why}")]
pub struct CorruptItem {
    pub pk: String,
    pub sk: String,
    pub why: String,
}

pub(crate) struct Reader<'a>(pub(crate) &'a Item);

impl Reader<'_> {
    pub(crate) fn corrupt(&self, why: String) -> CorruptItem {
        CorruptItem { pk: self.0.pk.clone(), sk: String::from_utf8_lossy(&self.0.sk).into_owned(), why }
    }

    pub(crate) fn str(&self, k: &str) -> Result<Option<&str>, CorruptItem> {
        match self.0.attrs.get(k) {
            None => Ok(None),
            Some(AttrValue::S(s)) => Ok(Some(s)),
            Some(v) => Err(self.corrupt(format!("{k} is {v:?}, not a string"))),
        }
    }

    pub(crate) fn num(&self, k: &str) -> Result<u64, CorruptItem> {
        match self.0.attrs.get(k) {
            None => Ok(0),
            Some(AttrValue::N(d)) => u64::try_from(*d).map_err(|_| self.corrupt(format!("{k} = {d} is not a count"))),
            Some(v) => Err(self.corrupt(format!("{k} is {v:?}, not a number"))),
        }
    }

    /// A signed number (0 when absent).
    pub(crate) fn int(&self, k: &str) -> Result<i64, CorruptItem> {
        match self.0.attrs.get(k) {
            None => Ok(0),
            Some(AttrValue::N(d)) => i64::try_from(*d).map_err(|_| self.corrupt(format!("{k} = {d} is out of range"))),
            Some(v) => Err(self.corrupt(format!("{k} is {v:?}, not a number"))),
        }
    }

    pub(crate) fn owner(&self) -> Result<Option<String>, CorruptItem> {
        Ok(self.str(OWNER)?.filter(|s| !s.is_empty()).map(str::to_string))
    }
}

/// One shard's lease, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardLease {
    pub shard: String,
    /// MillisBehindLatest of the records at the checkpoint, when known.
    pub lag_ms: Option<i64>,
    /// When the checkpoint was committed (the committer's clock; display only).
    pub at_ms: Option<i64>,
    pub owner: Option<String>,
    pub lease: u64,
    pub parents: Vec<String>,
    /// Per item set, the last record applied (`checkpoint.rs`).
    pub checkpoint: Checkpoint,
    pub finished: bool,
    pub handoff: Option<String>,
    /// Where its first reader began (ms since the epoch), when that was a
    /// time rather than the oldest record.
    pub start_ms: Option<i64>,
    /// The seal the records up to its checkpoint were read under (`seal.rs`).
    pub seal: i64,
    /// What its sets behind do not hold yet, when written beside this
    /// checkpoint (`owed.rs`; None: unknown, or nothing is apart).
    pub owed: Option<crate::owed::Owed>,
    /// The digest of the layout numbering an apart checkpoint's item sets,
    /// when recorded (`adoption.rs`; None: the reader's own).
    pub layout: Option<String>,
}

impl ShardLease {
    /// The worker id of its owner (whichever incarnation, `owner.rs`).
    pub fn worker_id(&self) -> Option<&str> {
        self.owner.as_deref().map(crate::owner::worker_id)
    }

    pub fn from_item(item: &Item) -> Result<ShardLease, CorruptItem> {
        let r = Reader(item);
        let shard = String::from_utf8(item.sk.clone()).map_err(|_| r.corrupt("shard id is not UTF-8".into()))?;
        let checkpoint = match r.str(CHECKPOINT)? {
            None => Checkpoint::none(),
            Some(text) => text.parse().map_err(|e| r.corrupt(format!("checkpoint: {e}")))?,
        };
        let int = |k: &str| match item.attrs.get(k) {
            Some(AttrValue::N(d)) => i64::try_from(*d).ok(),
            _ => None,
        };
        Ok(ShardLease {
            shard,
            lag_ms: int(LAG),
            at_ms: int(AT),
            owner: r.owner()?,
            lease: r.num(LEASE)?,
            parents: r.str(PARENTS)?.unwrap_or("").split(',').filter(|p| !p.is_empty()).map(String::from).collect(),
            finished: matches!(item.attrs.get(FINISHED), Some(AttrValue::Bool(true))),
            handoff: r.str(HANDOFF)?.filter(|s| !s.is_empty()).map(String::from),
            start_ms: int(START),
            seal: r.int(crate::seal::SEAL)?,
            owed: r.str(OWED)?.and_then(|t| crate::owed::Owed::from_attr(t, &checkpoint)),
            layout: r.str(crate::adoption::SETS_OF)?.filter(|d| !d.is_empty()).map(String::from),
            checkpoint,
        })
    }
}

/// Creates a shard's lease if it has none (no effect otherwise).
pub fn create_lease(stream: &str, shard: &str, parents: &[String]) -> UpdateRequest {
    let mut req = UpdateRequest::new(shards_pk(stream), shard.as_bytes()).set_if_absent(LEASE, n(0));
    if !parents.is_empty() {
        req = req.set_if_absent(PARENTS, parents.join(",").as_str());
    }
    req
}

/// Deletes a finished lease last seen at counter `seen` (`balance.rs`
/// says which are no longer needed).
pub fn retire_lease(stream: &str, shard: &str, seen: u64) -> DeleteRequest {
    DeleteRequest::new(shards_pk(stream), shard.as_bytes())
        .guard(FINISHED, CmpOp::Eq, AttrValue::Bool(true), false)
        .guard(LEASE, CmpOp::Eq, n(seen), false)
}

/// Takes a lease last seen at counter `seen` (unowned, expired, or handed
/// over): fails if anyone changed its owner since.
pub fn take_lease(stream: &str, shard: &str, seen: u64, me: &str) -> UpdateRequest {
    UpdateRequest::new(shards_pk(stream), shard.as_bytes())
        .set(OWNER, me)
        .set(LEASE, n(seen + 1))
        .set(HANDOFF, "")
        .guard(LEASE, CmpOp::Eq, n(seen), seen == 0)
}

/// Records where the holder of a lease (counter `held`) begins reading a
/// shard that has no checkpoint, unless a start is recorded already (the
/// item then shows it).
pub fn record_start(stream: &str, shard: &str, held: u64, ms: i64) -> UpdateRequest {
    UpdateRequest::new(shards_pk(stream), shard.as_bytes()).set_if_absent(START, AttrValue::N(Decimal::from(ms))).guard(
        LEASE,
        CmpOp::Eq,
        n(held),
        false,
    )
}

/// Asks the owner of a lease (at counter `seen`) to hand it over to `me`
/// (the latest request wins; the owner gives it to whoever asked last).
pub fn request_handoff(stream: &str, shard: &str, seen: u64, me: &str) -> UpdateRequest {
    UpdateRequest::new(shards_pk(stream), shard.as_bytes()).set(HANDOFF, me).guard(LEASE, CmpOp::Eq, n(seen), false)
}

/// Gives a held lease (counter `held`) to `to` ("" = release it).
pub fn give_lease(stream: &str, shard: &str, held: u64, me: &str, to: &str) -> UpdateRequest {
    UpdateRequest::new(shards_pk(stream), shard.as_bytes())
        .set(OWNER, to)
        .set(LEASE, n(held + 1))
        .set(HANDOFF, "")
        .guard(LEASE, CmpOp::Eq, n(held), false)
        .guard(OWNER, CmpOp::Eq, me, false)
}

/// Moves a shard's checkpoint from `from` to `to` (compare-and-set of the
/// whole value, by whoever completes a committed intent: owner or not). A
/// finished shard is never read again: it is left without an owner.
pub fn advance_checkpoint(
    stream: &str,
    shard: &str,
    from: &Checkpoint,
    to: &Checkpoint,
    finished: bool,
) -> UpdateRequest {
    let mut req = UpdateRequest::new(shards_pk(stream), shard.as_bytes())
        .set(CHECKPOINT, to.to_string().as_str())
        .set(FINISHED, AttrValue::Bool(finished));
    if finished {
        req = req.set(OWNER, "").set(HANDOFF, "");
    }
    req = match from.single() {
        // "absent": no checkpoint can be below the empty string.
        Some(None) => req.guard(CHECKPOINT, CmpOp::Lt, "", true),
        _ => req.guard(CHECKPOINT, CmpOp::Eq, from.to_string().as_str(), false),
    };
    req
}

/// Records the layout numbering an apart checkpoint's sets (nothing for a
/// uniform one, whose sets any layout reads alike, or when unknown).
pub fn with_sets_layout(req: UpdateRequest, to: &Checkpoint, layout: &str) -> UpdateRequest {
    if to.is_uniform() || layout.is_empty() {
        req
    } else {
        req.set(crate::adoption::SETS_OF, layout)
    }
}

/// Renumbers an apart checkpoint `from` (its sets numbered by another
/// layout) as `to`, numbered by `layout`, on a lease held as `lease` by
/// `me`: the same positions, set by set.
pub fn renumber_checkpoint(
    stream: &str,
    shard: &str,
    lease: u64,
    me: &str,
    (from, to): (&Checkpoint, &Checkpoint),
    layout: &str,
) -> UpdateRequest {
    UpdateRequest::new(shards_pk(stream), shard.as_bytes())
        .set(CHECKPOINT, to.to_string().as_str())
        .set(crate::adoption::SETS_OF, layout)
        .guard(CHECKPOINT, CmpOp::Eq, from.to_string().as_str(), false)
        .guard(LEASE, CmpOp::Eq, n(lease), false)
        .guard(OWNER, CmpOp::Eq, me, false)
}

/// Records the seal a completed range's records were read under (none
/// written for 0, so tables without seals stay as they were).
pub fn with_seal(req: UpdateRequest, seal: i64) -> UpdateRequest {
    if seal > 0 {
        req.set(crate::seal::SEAL, seal)
    } else {
        req
    }
}

/// Records what the sets behind of an apart checkpoint `to` do not hold
/// yet (nothing when every set is at one position, or when it is unknown:
/// spans beside another checkpoint are never trusted).
pub fn with_owed(req: UpdateRequest, to: &Checkpoint, owed: Option<&crate::owed::Owed>) -> UpdateRequest {
    match owed {
        Some(o) if !to.is_uniform() => req.set(OWED, o.attr(to).as_str()),
        _ => req,
    }
}

/// Adds what operators see of a checkpoint: its lag behind the tip and
/// when it was taken.
pub fn with_lag(req: UpdateRequest, lag_ms: Option<i64>, at_ms: i64) -> UpdateRequest {
    let req = req.set(AT, at_ms);
    match lag_ms {
        Some(lag) => req.set(LAG, lag),
        None => req,
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod size_tests;
