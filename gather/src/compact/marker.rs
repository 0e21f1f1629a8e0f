//! Compaction markers: one item per (projection, rollup, partition time
//! bin) that `gather compact` folded, pk [`MARKERS_PK`], sk as the
//! statistics' (`<projection>#<rollup>#<bin label>`, so one query reads a
//! report's bins). Its `state` only moves on:
//!
//! - `compacted`: every folded item is in the bin's compacted partition
//!   ([`compacted_pk`]), written before this state; readers read that
//!   partition instead of the scatter prefixes;
//! - `deleting`: written before the first partial is deleted, so a reader
//!   that read the scatter prefixes and then finds the marker short of it
//!   (strongly consistent) knows it missed nothing;
//! - `cleaned`: the partials are gone.

use crate::error::{GatherError, Result};
use std::collections::BTreeMap;
use zigzag_core::table::{AttrValue, CmpOp, QueryRequest, SortKeyCondition, SortedTable, UpdateRequest};
use zigzag_model::stats::stats_sk;
use zigzag_model::Rollup;

pub const MARKERS_PK: &str = "#compacted";
const STATE: &str = "state";
const BIN: &str = "bin";
const ITEMS: &str = "items";
const PARTIALS: &str = "partials";
const SEAL: &str = "seal";
const AT: &str = "at_ms";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum State {
    Compacted,
    Deleting,
    Cleaned,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Compacted => "compacted",
            State::Deleting => "deleting",
            State::Cleaned => "cleaned",
        }
    }

    fn parse(s: &str) -> Option<State> {
        [State::Compacted, State::Deleting, State::Cleaned].into_iter().find(|x| x.name() == s)
    }

    /// Whether a partial of the bin may be gone.
    pub fn deletes(self) -> bool {
        self >= State::Deleting
    }
}

/// One bin's marker, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    pub bin_start: i64,
    pub state: State,
    /// Items written to the compacted partition, and partials folded.
    pub items: u64,
    pub partials: u64,
    pub seal: i64,
    /// When it was compacted (the compactor's clock, ms).
    pub at_ms: i64,
}

/// The partition of a bin's folded items (no scatter pk starts with a
/// letter: theirs start with the 3-digit prefix).
pub fn compacted_pk(projection: &str, rollup: Rollup, bin_start: i64) -> String {
    format!("compact#{projection}#{rollup}#{}", rollup.bin().label(bin_start))
}

fn num(item: &zigzag_core::table::Item, attr: &str) -> Result<i64> {
    match item.attrs.get(attr) {
        Some(AttrValue::N(d)) => i64::try_from(*d).map_err(|_| bad(item, format!("{attr} = {d}"))),
        other => Err(bad(item, format!("{attr} is {other:?}"))),
    }
}

fn bad(item: &zigzag_core::table::Item, why: String) -> GatherError {
    GatherError::Item { pk: item.pk.clone(), why: format!("compaction marker: {why}") }
}

/// The markers of `projection`'s `rollup` over bins `first..=last` (by bin
/// start), read `consistent`ly; and what reading them cost (requests, RCU).
pub async fn read<T: SortedTable + ?Sized>(
    table: &T,
    projection: &str,
    rollup: Rollup,
    (first, last): (i64, i64),
    consistent: bool,
) -> Result<(BTreeMap<i64, Marker>, (u64, f64))> {
    let mut req = QueryRequest::new(
        MARKERS_PK,
        SortKeyCondition::Between(stats_sk(projection, rollup, first), stats_sk(projection, rollup, last)),
    );
    req.consistent = consistent;
    let page = zigzag_core::query::run_key_range(table, req)
        .await
        .map_err(|source| GatherError::Query { pk: MARKERS_PK.into(), source })?;
    let mut out = BTreeMap::new();
    for item in &page.items {
        let state = match item.attrs.get(STATE) {
            Some(AttrValue::S(s)) => State::parse(s).ok_or_else(|| bad(item, format!("state {s:?}")))?,
            other => return Err(bad(item, format!("state is {other:?}"))),
        };
        let m = Marker {
            bin_start: num(item, BIN)?,
            state,
            items: num(item, ITEMS)? as u64,
            partials: num(item, PARTIALS)? as u64,
            seal: num(item, SEAL)?,
            at_ms: num(item, AT)?,
        };
        out.insert(m.bin_start, m);
    }
    Ok((out, (page.stats.requests, page.stats.rcu)))
}

/// Marks a bin compacted (its folded items all written); a marker already
/// there at `compacted` is rewritten with the same content, one further on
/// is left alone (the write is refused).
pub fn compacted(projection: &str, rollup: Rollup, m: &Marker) -> UpdateRequest {
    UpdateRequest::new(MARKERS_PK, stats_sk(projection, rollup, m.bin_start))
        .set(STATE, State::Compacted.name())
        .set(BIN, m.bin_start)
        .set(ITEMS, m.items as i64)
        .set(PARTIALS, m.partials as i64)
        .set(SEAL, m.seal)
        .set(AT, m.at_ms)
        .guard(STATE, CmpOp::Eq, State::Compacted.name(), true)
}

/// Moves a bin's marker on to `to` from the state before it (or `to`).
pub fn advance(projection: &str, rollup: Rollup, bin_start: i64, to: State) -> UpdateRequest {
    let from = match to {
        State::Deleting => State::Compacted,
        _ => State::Deleting,
    };
    // States sort as they progress ("cleaned" < "compacted" < "deleting"
    // as text does not), so the guard names the one allowed predecessor;
    // a repeat finds `to` already and is refused harmlessly.
    UpdateRequest::new(MARKERS_PK, stats_sk(projection, rollup, bin_start)).set(STATE, to.name()).guard(
        STATE,
        CmpOp::Eq,
        from.name(),
        false,
    )
}

/// A read's markers, read before the plan was chosen (`crate::route`).
#[derive(Debug, Clone, PartialEq)]
pub struct Prefetched {
    pub markers: BTreeMap<i64, Marker>,
    /// Reading them, and the other candidates' (requests, RCU).
    pub cost: (u64, f64),
}

#[cfg(test)]
mod tests {
    use super::*;
    use zigzag_core::table::MemoryTable;

    #[tokio::test]
    async fn markers_only_move_on_and_are_read_by_bin() {
        let t = MemoryTable::new();
        let day = 86_400_000;
        let m = |bin_start| Marker { bin_start, state: State::Compacted, items: 3, partials: 7, seal: 9, at_ms: 11 };
        for b in [0, day, 2 * day] {
            assert!(t.update(&compacted("cc", Rollup::Minute, &m(b))).await.unwrap().applied());
        }
        assert!(t.update(&compacted("cc", Rollup::Minute, &m(day))).await.unwrap().applied(), "a repeat");
        assert!(!t.update(&advance("cc", Rollup::Minute, day, State::Cleaned)).await.unwrap().applied(), "no skip");
        assert!(t.update(&advance("cc", Rollup::Minute, day, State::Deleting)).await.unwrap().applied());
        assert!(!t.update(&compacted("cc", Rollup::Minute, &m(day))).await.unwrap().applied(), "never back");
        assert!(t.update(&advance("cc", Rollup::Minute, day, State::Cleaned)).await.unwrap().applied());
        let (got, cost) = read(&t, "cc", Rollup::Minute, (day, 2 * day), true).await.unwrap();
        assert_eq!(got.keys().copied().collect::<Vec<_>>(), vec![day, 2 * day], "only the bins asked");
        assert_eq!(got[&day].state, State::Cleaned);
        assert_eq!(got[&(2 * day)], m(2 * day));
        assert_eq!(cost.0, 1);
        let (other, _) = read(&t, "cc", Rollup::Hour, (0, 2 * day), true).await.unwrap();
        assert!(other.is_empty(), "another rollup's markers are apart");
    }
}
