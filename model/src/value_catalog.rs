//! The value catalog: every value each dimension took, written by the
//! flush, so a reader can list a label's values over all the data the
//! table keeps without reading aggregates (`gather serve`'s
//! `/api/v1/label/<name>/values` with no `start`/`end`, as Prometheus
//! answers over all its data).
//!
//! One item per (dimension, value): pk `#values#<dimension>`, sk the
//! value's 128-bit xxh3 (a value may be longer than a sort key may be),
//! attributes `v` (the value), `first` and `seen` (the first and last day,
//! ms, a flush wrote an item with it) and `expires` (when the last of those
//! items is gone under the table's retention: the longest rollup's; absent
//! when some rollup keeps items forever). A flush writes it before its
//! items (a value is never missing for an item written; a flush that then
//! fails leaves a value listed early, never one lost), only upwards
//! (`seen < day`: a replay, a retry or another worker's write of the same
//! day is refused), and a worker writes a value once a day at most
//! (`ingest`'s flush remembers what it wrote).
//!
//! The catalog is **whole** (it holds every value the table's items ever
//! had) when the writer that recorded the table's layout wrote it from the
//! first flush: the layout item says so ([`ON_LAYOUT`]); a table written
//! before the catalog existed says `partial`, or nothing, and a reader must
//! then read the values from the items.
//!
//! Reading a dimension's values costs its catalog items, one per value
//! ever seen and still kept: a few bytes each, where the coarsest rollup of
//! every projection keeping the dimension would cost one item per key and
//! day.

use crate::retention::{Retention, TTL_ATTR};
use crate::rollup::Rollup;
use zigzag_core::table::{
    AttrValue, CmpOp, Item, QueryRequest, SortKeyCondition, SortedTable, TableError, UpdateRequest,
};

/// Every value-catalog partition key starts with this (no aggregate's pk
/// starts with `#`).
pub const VALUES_PK: &str = "#values";
const DAY_MS: i64 = 86_400_000;

/// The layout item's attribute saying how much the catalog holds.
pub const ON_LAYOUT: &str = "values";
const WHOLE: &str = "whole";

/// What a writer recording the layout says of the catalog: whole on a new
/// table, partial on one written before.
pub fn coverage(new_table: bool) -> &'static str {
    if new_table {
        WHOLE
    } else {
        "partial"
    }
}

/// Whether the catalog holds every value the table's items ever had, by
/// the table's layout item (`layout::load_item`; a table without one was
/// not written by `ingest`: no).
pub fn is_whole(layout_item: Option<&Item>) -> bool {
    layout_item.is_some_and(|i| matches!(i.attrs.get(ON_LAYOUT), Some(AttrValue::S(s)) if s == WHOLE))
}

/// The partition of a dimension's values.
pub fn values_pk(dimension: &str) -> String {
    format!("{VALUES_PK}#{dimension}")
}

/// The day holding `t` (ms), as the catalog records it.
pub fn day_of(t: i64) -> i64 {
    t.div_euclid(DAY_MS) * DAY_MS
}

/// When the last item of `day` is gone under `retention` over the rollups
/// written, in epoch seconds (None: some rollup keeps items forever).
pub fn expires(retention: &Retention, rollups: &[Rollup], day: i64) -> Option<i64> {
    let mut last = Some(i64::MIN);
    for &r in rollups {
        last = match (last, retention.expires_at(r, r.floor(day + DAY_MS - 1))) {
            (Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        };
    }
    last.filter(|&t| t != i64::MIN)
}

/// The write that records `value` of `dimension` seen on `day` (refused
/// when the item says `day` or later already).
pub fn record(dimension: &str, value: &str, day: i64, expires: Option<i64>) -> UpdateRequest {
    let sk = xxhash_rust::xxh3::xxh3_128(value.as_bytes()).to_be_bytes().to_vec();
    let mut req = UpdateRequest::new(values_pk(dimension), sk)
        .set("v", AttrValue::S(value.to_string()))
        .set("seen", AttrValue::N(day.into()))
        .set_if_absent("first", AttrValue::N(day.into()))
        .guard("seen", CmpOp::Lt, AttrValue::N(day.into()), true);
    if let Some(e) = expires {
        req = req.set(TTL_ATTR, AttrValue::N(e.into()));
    }
    req
}

/// A dimension's values as the catalog has them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Values {
    /// Sorted, each once: the values an item still kept holds.
    pub values: Vec<String>,
    /// The first day any of them was seen (None: no value).
    pub first: Option<i64>,
    pub requests: u64,
    pub rcu: f64,
}

/// Reads `dimension`'s values still kept at `now` (every page).
pub async fn read<T: SortedTable + ?Sized>(table: &T, dimension: &str, now: i64) -> Result<Values, TableError> {
    let mut out = Values::default();
    let mut req = QueryRequest::new(values_pk(dimension), SortKeyCondition::Any);
    loop {
        let page = table.query(&req).await?;
        out.requests += 1;
        out.rcu += page.consumed_rcu;
        for item in &page.items {
            if let Some((value, first)) = kept(item, now) {
                out.values.push(value);
                out.first = Some(out.first.map_or(first, |f: i64| f.min(first)));
            }
        }
        match page.last_evaluated {
            Some(k) => req.exclusive_start = Some(k),
            None => break,
        }
    }
    out.values.sort_unstable();
    out.values.dedup();
    Ok(out)
}

/// An item's value and first day, unless it has expired (a store's TTL
/// deletes lazily).
fn kept(item: &Item, now: i64) -> Option<(String, i64)> {
    let number = |name: &str| match item.attrs.get(name) {
        Some(AttrValue::N(d)) => i64::try_from(*d).ok(),
        _ => None,
    };
    // In epoch seconds (DynamoDB's TTL).
    if number(TTL_ATTR).is_some_and(|e| e.saturating_mul(1000) <= now) {
        return None;
    }
    match item.attrs.get("v") {
        Some(AttrValue::S(v)) => Some((v.clone(), number("first").unwrap_or(i64::MIN))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zigzag_core::table::{MemoryTable, UpdateOutcome};

    const D: i64 = 1_793_404_800_000;

    /// `day + days` as an `expires` (epoch seconds).
    fn after(days: i64) -> Option<i64> {
        Some((D + days * DAY_MS) / 1000)
    }

    #[tokio::test]
    async fn values_are_recorded_upwards_and_listed_until_they_expire() {
        let t = MemoryTable::new();
        let apply = |req: UpdateRequest| {
            let t = &t;
            async move { matches!(t.update(&req).await.unwrap(), UpdateOutcome::Applied(_)) }
        };
        assert!(apply(record("country", "DE", D, after(10))).await);
        assert!(!apply(record("country", "DE", D, after(10))).await, "the same day again is refused");
        assert!(apply(record("country", "DE", D + DAY_MS, after(11))).await);
        assert!(!apply(record("country", "DE", D, after(10))).await, "never backwards");
        assert!(apply(record("country", "FR", D + 2 * DAY_MS, after(3))).await);
        assert!(apply(record("country", &"x".repeat(5_000), D, None)).await, "any length");
        assert!(apply(record("campaign", "spring", D, None)).await);
        let got = read(&t, "country", D + 2 * DAY_MS).await.unwrap();
        assert_eq!(got.values, vec!["DE".to_string(), "FR".into(), "x".repeat(5_000)]);
        assert_eq!((got.first, got.requests), (Some(D), 1), "DE's first day stays the first");
        let later = read(&t, "country", D + 3 * DAY_MS).await.unwrap();
        assert_eq!(later.values, vec!["DE".to_string(), "x".repeat(5_000)], "FR's items are gone");
        let never = read(&t, "referrer", D).await.unwrap();
        assert_eq!((never.values.len(), never.first), (0, None));
    }

    #[test]
    fn a_day_expires_with_its_longest_kept_rollup() {
        let mut table = std::collections::BTreeMap::new();
        table.insert("minute".to_string(), "2d".to_string());
        table.insert("hour".to_string(), "10d".to_string());
        let r = Retention::parse(&table).unwrap();
        let e = expires(&r, &[Rollup::Minute, Rollup::Hour], D).unwrap();
        assert_eq!(e, r.expires_at(Rollup::Hour, D + DAY_MS - 3_600_000).unwrap(), "the day's last hour, kept 10 days");
        assert_eq!(expires(&r, &[Rollup::Minute, Rollup::Day], D), None, "days are kept forever");
    }
}
