//! Lane items and their intents: the flush protocol's records (see the
//! parent module for the item layout) and every conditional write on them.

use super::*;

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
    /// The seal its records were read under (`seal.rs`): events before it
    /// were refused, and are refused again when the range is read again.
    #[serde(rename = "z", default, skip_serializing_if = "is_zero_ms")]
    pub seal: i64,
    /// The event times of the records between the earliest set's
    /// position before it and its end (`owed.rs`; None: unknown): every
    /// record it writes, in any set, and, when [`Self::completed`] leaves
    /// sets apart, every record the sets behind do not hold yet.
    #[serde(rename = "o", default, skip_serializing_if = "Option::is_none")]
    pub owed: Option<crate::owed::Owed>,
    /// With `sets`: the digest of the layout that numbers them (its item
    /// sets in layout order). A checkpoint this range leaves apart is
    /// recorded with it, so a worker of another layout version renumbers
    /// it before reading (`crate::adoption`).
    #[serde(rename = "d", default, skip_serializing_if = "String::is_empty")]
    pub layout: String,
}

fn is_zero_ms(ms: &i64) -> bool {
    *ms == 0
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
    /// The seal its owner acknowledged reading under (`seal.rs`; 0: none).
    pub seal: i64,
    /// The layout version its owner writes (`adoption.rs`).
    pub layout: crate::adoption::LayoutAck,
    /// The end of the newest event its (last) owner had read at its last
    /// flush, under that version (`adoption.rs`; 0: none said).
    pub wrote_to_ms: i64,
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
            seal: r.int(crate::seal::SEAL)?,
            layout: crate::adoption::LayoutAck {
                version: u32::try_from(r.int(crate::adoption::VERSION)?).unwrap_or(0),
                high_ms: r.int(crate::adoption::HIGH)?,
            },
            wrote_to_ms: r.int(crate::adoption::WROTE_TO)?,
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
    open_intent_to(lane, me, k, ranges, layout, 0)
}

/// [`open_intent`], saying how far the events its owner read reach
/// (`adoption.rs`; nothing said for 0).
pub fn open_intent_to(
    lane: u32,
    me: &str,
    k: u64,
    ranges: &[ShardRange],
    layout: &str,
    wrote_to_ms: i64,
) -> UpdateRequest {
    let req = lane_req(lane);
    let req = if wrote_to_ms > 0 { req.set(crate::adoption::WROTE_TO, wrote_to_ms) } else { req };
    req.set(K, n(k))
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
