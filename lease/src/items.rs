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
pub use beats::{claim_beat, heartbeat, release_beat, Beat, BEATS_PK};

const OWNER: &str = "owner";
const LEASE: &str = "lease";
const PARENTS: &str = "parents";
const CHECKPOINT: &str = "cp";
const FINISHED: &str = "fin";
const HANDOFF: &str = "handoff";
const START: &str = "start_ms";
const LAG: &str = "lag_ms";
const AT: &str = "at_ms";

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
            checkpoint,
            finished: matches!(item.attrs.get(FINISHED), Some(AttrValue::Bool(true))),
            handoff: r.str(HANDOFF)?.filter(|s| !s.is_empty()).map(String::from),
            start_ms: int(START),
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

/// Adds what operators see of a checkpoint: its lag behind the tip and
/// when it was taken.
pub fn with_lag(req: UpdateRequest, lag_ms: Option<i64>, at_ms: i64) -> UpdateRequest {
    let req = req.set(AT, at_ms);
    match lag_ms {
        Some(lag) => req.set(LAG, lag),
        None => req,
    }
}

/// The state of a lane's current (or last) flush.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IntentState {
    /// Recorded; its shard leases are not yet proven held. No item has
    /// been written: a recovery aborts it.
    Open,
    /// Every listed shard was proven held after the intent was recorded;
    /// items may be written. A recovery re-applies it.
    Valid,
    /// Committed (or aborted: then `k == flush` and no ranges).
    Done,
}

/// The records of one shard in an intent: `(from, to]`, per item set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardRange {
    #[serde(rename = "s")]
    pub shard: String,
    /// The lease counter it was held under.
    #[serde(rename = "l")]
    pub lease: u64,
    /// Where each item set was (the lease's checkpoint when the range began).
    #[serde(rename = "f")]
    pub from: Checkpoint,
    /// The item sets it writes (None: every one): the others keep their
    /// checkpoint, and their records stay in memory for a later flush.
    #[serde(rename = "w", default, skip_serializing_if = "Option::is_none")]
    pub sets: Option<Vec<ItemSet>>,
    /// The layout's number of item sets (with `sets`: the checkpoint after
    /// the range lists the others).
    #[serde(rename = "n", default, skip_serializing_if = "is_zero")]
    pub of: ItemSet,
    /// Without `from` (the shard's first range), the first record read: a
    /// shard started at LATEST or a timestamp is re-read from there.
    #[serde(rename = "b", with = "opt_position", default, skip_serializing_if = "Option::is_none")]
    pub first: Option<Position>,
    #[serde(rename = "t", with = "position")]
    pub to: Position,
    /// The range ends at SHARD_END.
    #[serde(rename = "e", default, skip_serializing_if = "std::ops::Not::not")]
    pub ends: bool,
    /// MillisBehindLatest at the range's last read, when the source says.
    #[serde(rename = "m", default, skip_serializing_if = "Option::is_none")]
    pub behind_ms: Option<i64>,
}

fn is_zero(n: &ItemSet) -> bool {
    *n == 0
}

impl ShardRange {
    /// The shard's checkpoint once this range is applied.
    pub fn completed(&self) -> Checkpoint {
        self.from.advance(self.sets.as_deref(), self.to, self.of)
    }

    /// Whether the range leaves the shard finished: it ends at SHARD_END
    /// and writes every item set.
    pub fn finishes(&self) -> bool {
        self.ends && self.sets.is_none()
    }

    /// Whether it writes item set `s`.
    pub fn writes(&self, s: ItemSet) -> bool {
        self.sets.as_ref().is_none_or(|w| w.contains(&s))
    }
}

mod position {
    use serde::{Deserialize, Deserializer, Serializer};
    use zigzag_model::Position;

    pub fn serialize<S: Serializer>(p: &Position, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(p)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Position, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

mod opt_position {
    use serde::{Deserialize, Deserializer, Serializer};
    use zigzag_model::Position;

    pub fn serialize<S: Serializer>(p: &Option<Position>, s: S) -> Result<S::Ok, S::Error> {
        match p {
            Some(p) => s.collect_str(p),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Position>, D::Error> {
        let text = Option::<String>::deserialize(d)?;
        text.map(|t| t.parse().map_err(serde::de::Error::custom)).transpose()
    }
}

/// A lane's flush: its number, state, the shard ranges it covers and the
/// layout that writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intent {
    pub k: u64,
    pub state: IntentState,
    pub ranges: Vec<ShardRange>,
    pub layout: String,
}

/// One lane, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lane {
    pub lane: u32,
    pub owner: Option<String>,
    /// The stream its owner consumes (and its intents' ranges are of).
    pub stream: String,
    /// Who beats it and its beat (the lane's beat item, `beats.rs`; for a
    /// lane written before beat items, its own `owner` and `beat`): the
    /// lane is alive while these move. Normally `beater == owner`; they
    /// differ only while a worker takes or frees it (two writes).
    pub beater: Option<String>,
    pub beat: u64,
    /// The last committed flush.
    pub flush: u64,
    /// The current or last intent (None before the first).
    pub intent: Option<Intent>,
}

impl Lane {
    /// The worker id of its owner (whichever incarnation, `owner.rs`).
    pub fn worker_id(&self) -> Option<&str> {
        self.owner.as_deref().map(crate::owner::worker_id)
    }

    pub fn from_item(item: &Item) -> Result<Lane, CorruptItem> {
        let r = Reader(item);
        let lane = <[u8; 4]>::try_from(item.sk.as_slice())
            .map(u32::from_be_bytes)
            .map_err(|_| r.corrupt("lane number is not 4 bytes".into()))?;
        let k = r.num(K)?;
        let intent = match r.str(STATE)? {
            None => None,
            Some(state) => {
                let state: IntentState = serde_json::from_value(serde_json::Value::String(state.into()))
                    .map_err(|_| r.corrupt(format!("intent state {state:?}")))?;
                let ranges = serde_json::from_str(r.str(RANGES)?.unwrap_or("[]"))
                    .map_err(|e| r.corrupt(format!("intent ranges: {e}")))?;
                Some(Intent { k, state, ranges, layout: r.str(LAYOUT)?.unwrap_or("").to_string() })
            }
        };
        let owner = r.owner()?;
        Ok(Lane {
            lane,
            beater: owner.clone(),
            owner,
            stream: r.str(STREAM)?.unwrap_or("").to_string(),
            beat: r.num(BEAT)?,
            flush: r.num(FLUSH)?,
            intent,
        })
    }

    /// The same lane with its liveness from its beat item.
    pub fn with_beat(mut self, beat: &Beat) -> Lane {
        self.beater = beat.owner.clone();
        self.beat = beat.beat;
        self
    }

    /// The worker id of whoever beats it.
    pub fn beater_id(&self) -> Option<&str> {
        self.beater.as_deref().map(crate::owner::worker_id)
    }

    /// An intent that is recorded and not done.
    pub fn in_flight(&self) -> Option<&Intent> {
        self.intent.as_ref().filter(|i| i.state != IntentState::Done)
    }
}

fn lane_req(lane: u32) -> UpdateRequest {
    UpdateRequest::new(LANES_PK, lane_sk(lane))
}

/// Takes a lane that is free (or creates it), for `me` consuming `stream`,
/// or one owned by `from` whose beat item `me` claimed (a recovery: the
/// lane keeps its stream, its intents are of that stream). The beat item is
/// claimed first (`claim_beat`): only its holder takes the lane.
pub fn take_lane(lane: u32, from: Option<&str>, me: &str, stream: &str) -> UpdateRequest {
    let req = lane_req(lane).set(OWNER, me).set_if_absent(FLUSH, n(0));
    match from {
        None => req.set(STREAM, stream).guard(OWNER, CmpOp::Eq, "", true),
        Some(owner) => req.guard(OWNER, CmpOp::Eq, owner, false),
    }
}

/// Frees a lane (no intent in flight, its last ranges completed); its beat
/// item is freed after (`release_beat`). The ranges are cleared: the next
/// owner may read another stream, whose shards may have the same ids.
pub fn release_lane(lane: u32, me: &str) -> UpdateRequest {
    lane_req(lane).set(OWNER, "").set(RANGES, "[]").guard(OWNER, CmpOp::Eq, me, false).guard(
        STATE,
        CmpOp::Eq,
        "done",
        true,
    )
}

fn ranges_json(ranges: &[ShardRange]) -> String {
    serde_json::to_string(ranges).unwrap_or_else(|_| "[]".into())
}

/// Records flush `k` (after committed flush `k - 1`) as open.
pub fn open_intent(lane: u32, me: &str, k: u64, ranges: &[ShardRange], layout: &str) -> UpdateRequest {
    lane_req(lane)
        .set(K, n(k))
        .set(STATE, "open")
        .set(RANGES, ranges_json(ranges).as_str())
        .set(LAYOUT, layout)
        .guard(OWNER, CmpOp::Eq, me, false)
        .guard(FLUSH, CmpOp::Eq, n(k - 1), false)
        .guard(STATE, CmpOp::Eq, "done", true)
}

/// Marks open flush `k` valid with the shards proven held (a subset).
pub fn validate_intent(lane: u32, me: &str, k: u64, ranges: &[ShardRange]) -> UpdateRequest {
    lane_req(lane)
        .set(STATE, "valid")
        .set(RANGES, ranges_json(ranges).as_str())
        .guard(OWNER, CmpOp::Eq, me, false)
        .guard(K, CmpOp::Eq, n(k), false)
        .guard(STATE, CmpOp::Eq, "open", false)
}

/// Commits valid flush `k` (its ranges stay until the next intent, so
/// anyone can complete the shards' checkpoints from them).
pub fn commit_intent(lane: u32, me: &str, k: u64) -> UpdateRequest {
    lane_req(lane)
        .set(FLUSH, n(k))
        .set(STATE, "done")
        .guard(OWNER, CmpOp::Eq, me, false)
        .guard(K, CmpOp::Eq, n(k), false)
        .guard(STATE, CmpOp::Eq, "valid", false)
}

/// Drops open flush `k`, which wrote nothing (a recovery).
pub fn abort_intent(lane: u32, me: &str, k: u64) -> UpdateRequest {
    lane_req(lane)
        .set(K, n(k.saturating_sub(1)))
        .set(STATE, "done")
        .set(RANGES, "[]")
        .guard(OWNER, CmpOp::Eq, me, false)
        .guard(K, CmpOp::Eq, n(k), false)
        .guard(STATE, CmpOp::Eq, "open", false)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod size_tests;
