//! **Beat item** — pk `#beats`, sk = the lane number (4 bytes, big-endian):
//! `owner` (who keeps the lane alive, "" = nobody) and `beat` (+1 on every
//! heartbeat and change of owner). Apart from the lane item so that a
//! heartbeat writes a few bytes: DynamoDB bills a write by the larger of
//! the item before and after, and the lane item holds an intent's ranges
//! (up to ~180 KB at 500 shards).
//!
//! Order, so that a crash between the two writes never leaves a lane owned
//! with nobody to expire it: a worker claims the beat item first and takes
//! the lane item second (joining or recovering); it frees the lane item
//! first and the beat item second. Hence a lane item with an owner always
//! has a beat item with an owner, and only the holder of a lane's beat item
//! takes its lane item from someone else. A lane written before beat items
//! existed has none: its liveness is its own `owner` and `beat`, and the
//! first claim creates the beat item.

use super::{lane_sk, n, Reader};
use crate::items::CorruptItem;
use rust_decimal::Decimal;
use zigzag_core::table::{CmpOp, Item, UpdateRequest};

pub const BEATS_PK: &str = "#beats";

const OWNER: &str = "owner";
const BEAT: &str = "beat";

/// One lane's beat item, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Beat {
    pub lane: u32,
    pub owner: Option<String>,
    pub beat: u64,
}

impl Beat {
    pub fn from_item(item: &Item) -> Result<Beat, CorruptItem> {
        let r = Reader(item);
        let lane = <[u8; 4]>::try_from(item.sk.as_slice())
            .map(u32::from_be_bytes)
            .map_err(|_| r.corrupt("lane number is not 4 bytes".into()))?;
        Ok(Beat { lane, owner: r.owner()?, beat: r.num(BEAT)? })
    }
}

fn beat_req(lane: u32) -> UpdateRequest {
    UpdateRequest::new(BEATS_PK, lane_sk(lane))
}

/// Claims a lane's beat item for `me`: a free one (`seen` None: no owner,
/// or no item yet), or one whose beat stopped at `seen` = (owner, beat)
/// (a recovery; also when the item does not exist yet: a lane of the
/// format before beat items, whose liveness was its own beat).
pub fn claim_beat(lane: u32, seen: Option<(&str, u64)>, me: &str) -> UpdateRequest {
    let req = beat_req(lane).set(OWNER, me);
    match seen {
        None => req.add(BEAT, Decimal::ONE).guard(OWNER, CmpOp::Eq, "", true),
        Some((owner, beat)) => {
            req.set(BEAT, n(beat + 1)).guard(OWNER, CmpOp::Eq, owner, true).guard(BEAT, CmpOp::Eq, n(beat), true)
        }
    }
}

/// The holder's heartbeat: `beat` from `seen` to `seen + 1`.
pub fn heartbeat(lane: u32, seen: u64, me: &str) -> UpdateRequest {
    beat_req(lane).set(BEAT, n(seen + 1)).guard(OWNER, CmpOp::Eq, me, false).guard(BEAT, CmpOp::Eq, n(seen), false)
}

/// Frees a lane's beat item (after its lane item).
pub fn release_beat(lane: u32, me: &str) -> UpdateRequest {
    beat_req(lane).set(OWNER, "").add(BEAT, Decimal::ONE).guard(OWNER, CmpOp::Eq, me, false)
}
