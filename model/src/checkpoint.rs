//! The per-shard checkpoint item and the flush protocol's three writes.
//!
//! Items live in the checkpoint table: partition key = the stream, sort key
//! = the shard id. A flush of shard `s` numbered `k` covering records up to
//! position `E`:
//!
//! 1. [`begin_flush`]: record `pending = (k, E)`, guarded by ownership and
//!    by `flush = k - 1` (the fence: a zombie or a stale process fails here);
//! 2. apply every aggregate with the guard `w#s < k` and `SET w#s = k`
//!    (see `measures::plan_update`): a retried or replayed write of flush
//!    `k` is a no-op;
//! 3. [`commit_flush`]: `seq = E, flush = k`, pending cleared.
//!
//! After a crash between 1 and 3, the restart reads `pending`, re-reads the
//! records `(seq, E]`, aggregates them into the same partials and repeats
//! 2–3 under the same `k`: what was applied is skipped, the rest applied.

use crate::position::{Position, SeqNo};
use rust_decimal::Decimal;
use zigzag_core::table::{AttrValue, CmpOp, Item, UpdateRequest};

const OWNER: &str = "owner";
const SEQ: &str = "seq";
const SUB: &str = "sub";
const FLUSH: &str = "flush";
const PENDING_FLUSH: &str = "pending_flush";
const PENDING_SEQ: &str = "pending_seq";
const PENDING_SUB: &str = "pending_sub";
const PENDING_LAYOUT: &str = "pending_layout";
const FINISHED: &str = "finished";

/// A flush recorded as begun and not committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pending {
    pub flush: u64,
    pub end: Position,
}

/// The pending flush's layout digest (`Config::layout_digest`), if recorded.
pub fn pending_layout(item: &Item) -> Option<&str> {
    match item.attrs.get(PENDING_LAYOUT) {
        Some(AttrValue::S(s)) => Some(s),
        _ => None,
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Checkpoint {
    pub owner: Option<String>,
    /// Last position whose effects are committed; None = nothing yet.
    pub committed: Option<Position>,
    /// Number of the last committed flush (0 = none).
    pub flush: u64,
    pub pending: Option<Pending>,
    /// The shard ended (closed after resharding) and everything is committed.
    pub finished: bool,
}

fn n(v: u64) -> AttrValue {
    AttrValue::N(Decimal::from(v))
}

impl Checkpoint {
    pub fn from_item(item: &Item) -> Result<Checkpoint, String> {
        let num = |k: &str| -> Result<Option<u64>, String> {
            match item.attrs.get(k) {
                None => Ok(None),
                Some(AttrValue::N(d)) => u64::try_from(*d).map(Some).map_err(|_| format!("{k} = {d} is not a count")),
                Some(v) => Err(format!("{k} is {v:?}, not a number")),
            }
        };
        let pos = |seq: &str, sub: &str| -> Result<Option<Position>, String> {
            match item.attrs.get(seq) {
                None => Ok(None),
                Some(AttrValue::S(s)) => {
                    let seq: SeqNo = s.parse().map_err(|e| format!("{e}"))?;
                    Ok(Some(Position::new(seq, num(sub)?.unwrap_or(0) as u32)))
                }
                Some(v) => Err(format!("{seq} is {v:?}, not a string")),
            }
        };
        let pending_flush = num(PENDING_FLUSH)?.unwrap_or(0);
        let pending = match (pending_flush, pos(PENDING_SEQ, PENDING_SUB)?) {
            (0, _) => None,
            (k, Some(end)) => Some(Pending { flush: k, end }),
            (k, None) => return Err(format!("pending flush {k} without an end position")),
        };
        Ok(Checkpoint {
            owner: match item.attrs.get(OWNER) {
                Some(AttrValue::S(s)) => Some(s.clone()),
                _ => None,
            },
            committed: pos(SEQ, SUB)?,
            flush: num(FLUSH)?.unwrap_or(0),
            pending,
            finished: matches!(item.attrs.get(FINISHED), Some(AttrValue::Bool(true))),
        })
    }
}

/// Take ownership of a shard (single-writer deployments: unconditional; a
/// previous owner still running is fenced out by the guards below).
pub fn claim(stream: &str, shard: &str, owner: &str) -> UpdateRequest {
    UpdateRequest::new(stream, shard.as_bytes()).set(OWNER, owner).set_if_absent(FLUSH, n(0))
}

/// Step 1: record flush `k` up to `end` as pending, with the layout digest
/// of the configuration that will write it.
pub fn begin_flush(stream: &str, shard: &str, owner: &str, k: u64, end: Position, layout: &str) -> UpdateRequest {
    UpdateRequest::new(stream, shard.as_bytes())
        .set(PENDING_FLUSH, n(k))
        .set(PENDING_SEQ, AttrValue::S(end.seq.to_string()))
        .set(PENDING_SUB, n(end.sub as u64))
        .set(PENDING_LAYOUT, layout)
        .guard(OWNER, CmpOp::Eq, owner, false)
        .guard(FLUSH, CmpOp::Eq, n(k - 1), k == 1)
}

/// Step 3: commit flush `k`.
pub fn commit_flush(stream: &str, shard: &str, owner: &str, k: u64, end: Position, finished: bool) -> UpdateRequest {
    UpdateRequest::new(stream, shard.as_bytes())
        .set(SEQ, AttrValue::S(end.seq.to_string()))
        .set(SUB, n(end.sub as u64))
        .set(FLUSH, n(k))
        .set(PENDING_FLUSH, n(0))
        .set(FINISHED, AttrValue::Bool(finished))
        .guard(OWNER, CmpOp::Eq, owner, false)
        .guard(PENDING_FLUSH, CmpOp::Eq, n(k), false)
}

/// Attribute of a shard's flush mark on aggregate items.
pub fn mark_attr(shard: &str) -> String {
    format!("{}{shard}", crate::measures::MARK_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use zigzag_core::table::{apply_update, UpdateOutcome};

    fn run(item: Option<Item>, req: &UpdateRequest) -> (bool, Option<Item>) {
        match apply_update(item.clone(), req).unwrap() {
            UpdateOutcome::Applied(i) => (true, Some(i)),
            UpdateOutcome::ConditionFailed(_) => (false, item),
        }
    }

    #[test]
    fn protocol_round_trip_and_fences() {
        let (_, item) = run(None, &claim("st", "s1", "run-a"));
        let end = Position::at(42);
        let (ok, item) = run(item, &begin_flush("st", "s1", "run-a", 1, end, "L"));
        assert!(ok);
        let cp = Checkpoint::from_item(item.as_ref().unwrap()).unwrap();
        assert_eq!(cp.pending, Some(Pending { flush: 1, end }));
        assert_eq!(cp.committed, None);
        // A new owner takes over; the old one is fenced out.
        let (_, item) = run(item, &claim("st", "s1", "run-b"));
        let (ok, item) = run(item, &commit_flush("st", "s1", "run-a", 1, end, false));
        assert!(!ok, "zombie commit must fail");
        let (ok, item) = run(item, &commit_flush("st", "s1", "run-b", 1, end, false));
        assert!(ok);
        let cp = Checkpoint::from_item(item.as_ref().unwrap()).unwrap();
        assert_eq!((cp.committed, cp.flush, cp.pending), (Some(end), 1, None));
        let (ok, _) = run(item.clone(), &begin_flush("st", "s1", "run-b", 1, Position::at(50), "L"));
        assert!(!ok, "flush numbers cannot repeat");
        let (ok, _) = run(item, &begin_flush("st", "s1", "run-b", 2, Position::at(50), "L"));
        assert!(ok);
    }
}
