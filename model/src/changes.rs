//! Change marks: which time slices of a projection's rollup a flush is
//! changing, written around its items, so that a reader knows whether a
//! slice's items changed since it read them (`gather serve`'s cache).
//!
//! One item per (projection, rollup, slice): pk `#changes#<projection>#
//! <rollup>#<bin label>`, sk the slice's start ([`slice_sk`]; slices are
//! the statistics' [`slice_of`](crate::stats::slice_of): 45 minutes of
//! minute buckets, a day of hour or day buckets). Per lane it holds
//! `b@<lane>`, the lane's last flush *begun* on the slice, and `d@<lane>`,
//! its last flush *done*. A flush `k` of lane `L` writes `b@L = k` on every
//! slice it touches before any of its items, and `d@L = k` on a slice after
//! all of its items in the slice's partition bin, every prefix (both only
//! upwards: a replay, a retry or a recovery of the same flush writes
//! nothing new).
//!
//! A reader that reads a slice's marks, then its items (strongly
//! consistent), then the marks again, and finds them equal and
//! [quiet](SliceMarks::quiet) (every lane's `b = d`), read items no flush
//! was changing: a flush whose item write fell inside the read has begun
//! before it ended, so the second read shows its `b` (or its `d`, if it
//! ended too) and the two differ. Such a read stays the slice's answer
//! for as long as the marks stay equal to what it was read under.
//!
//! An item stays under the same lane marks as its slice (`w@L` on the item
//! ≤ `d@L` on its slice): one above it was written by a flush that wrote no
//! change marks (an ingest from before them), and the reader must not
//! trust the slice ([`SliceMarks::covers`]).

use crate::mark::mark_lane;
use crate::rollup::Rollup;
use std::collections::BTreeMap;
use zigzag_core::table::{
    AttrValue, CmpOp, Item, QueryRequest, SortKeyCondition, SortedTable, TableError, UpdateRequest,
};

/// Every change-marks partition key starts with this (no aggregate's pk
/// starts with `#`).
pub const CHANGES_PK: &str = "#changes";
const BEGUN: &str = "b@";
const DONE: &str = "d@";

/// The partition of a projection's change marks for one rollup and bin.
pub fn changes_pk(projection: &str, rollup: Rollup, bin_start: i64) -> String {
    format!("{CHANGES_PK}#{projection}#{rollup}#{}", rollup.bin().label(bin_start))
}

/// The length of a slice of `rollup`'s buckets (ms).
pub fn slice_ms(rollup: Rollup) -> i64 {
    crate::stats::slice_ms(rollup)
}

/// The start of the slice holding `bucket` (slices are aligned with the
/// epoch and lie whole in one bin: a bin starts on a day, and a slice
/// divides a day).
pub fn slice_start(rollup: Rollup, bucket: i64) -> i64 {
    bucket.div_euclid(slice_ms(rollup)) * slice_ms(rollup)
}

/// A slice's sort key: its start, ordered as the instants are.
pub fn slice_sk(slice_start: i64) -> Vec<u8> {
    ((slice_start as u64) ^ (1 << 63)).to_be_bytes().to_vec()
}

fn slice_of_sk(sk: &[u8]) -> Option<i64> {
    let bytes: [u8; 8] = sk.try_into().ok()?;
    Some((u64::from_be_bytes(bytes) ^ (1 << 63)) as i64)
}

/// The write that says lane `lane` begins flush `k` on a slice.
pub fn begin(projection: &str, rollup: Rollup, slice_start: i64, lane: u32, k: u64) -> UpdateRequest {
    upward(projection, rollup, slice_start, &format!("{BEGUN}{lane}"), k)
}

/// The write that says lane `lane` is done with flush `k` on a slice.
pub fn done(projection: &str, rollup: Rollup, slice_start: i64, lane: u32, k: u64) -> UpdateRequest {
    upward(projection, rollup, slice_start, &format!("{DONE}{lane}"), k)
}

fn upward(projection: &str, rollup: Rollup, slice_start: i64, attr: &str, k: u64) -> UpdateRequest {
    let pk = changes_pk(projection, rollup, rollup.bin().start_of(slice_start));
    let k = AttrValue::N(k.into());
    UpdateRequest::new(pk, slice_sk(slice_start)).set(attr, k.clone()).guard(attr, CmpOp::Lt, k, true)
}

/// One slice's marks: per lane, (last flush begun, last flush done).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct SliceMarks {
    pub lanes: BTreeMap<u32, (u64, u64)>,
}

impl SliceMarks {
    pub fn from_item(item: &Item) -> Result<SliceMarks, String> {
        let mut lanes: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        for (name, value) in &item.attrs {
            let (begun, lane) = match (name.strip_prefix(BEGUN), name.strip_prefix(DONE)) {
                (Some(l), _) => (true, l),
                (_, Some(l)) => (false, l),
                _ => continue,
            };
            let lane: u32 = lane.parse().map_err(|_| format!("change mark {name} names no lane"))?;
            let k = match value {
                AttrValue::N(d) => u64::try_from(*d).map_err(|_| format!("change mark {name} = {d}"))?,
                other => return Err(format!("change mark {name} is {other:?}, not a number")),
            };
            let e = lanes.entry(lane).or_default();
            if begun {
                e.0 = k;
            } else {
                e.1 = k;
            }
        }
        Ok(SliceMarks { lanes })
    }

    /// No flush is between its begin and its done on the slice.
    pub fn quiet(&self) -> bool {
        self.lanes.values().all(|(b, d)| b <= d)
    }

    /// Whether a read made under these marks holds every flush `now` says
    /// is done on the slice (marks only move upwards: these are as new as
    /// `now`, or newer).
    pub fn holds_done_of(&self, now: &SliceMarks) -> bool {
        now.lanes.iter().all(|(lane, &(_, d))| self.lanes.get(lane).map_or(0, |&(_, mine)| mine) >= d)
    }

    /// Whether `now` shows a flush in progress that a read made under these
    /// marks does not hold (it began after that read).
    pub fn misses_a_flush_begun_in(&self, now: &SliceMarks) -> bool {
        now.lanes.iter().any(|(lane, &(b, d))| b > d && self.lanes.get(lane).map_or(0, |&(_, mine)| mine) < b)
    }

    /// Whether an item of the slice carries only marks of flushes the
    /// slice says are done (else a writer without change marks wrote it).
    pub fn covers(&self, item: &Item) -> bool {
        item.attrs.iter().all(|(name, v)| match mark_lane(name) {
            None => true,
            Some(lane) => {
                let done = self.lanes.get(&lane).map_or(0, |&(_, d)| d);
                matches!(v, AttrValue::N(k) if u64::try_from(*k).is_ok_and(|k| k <= done))
            }
        })
    }
}

/// The slices whose buckets meet `[from, to)`, by start.
pub fn slices(rollup: Rollup, from: i64, to: i64) -> Vec<i64> {
    let step = slice_ms(rollup);
    let mut out = Vec::new();
    let mut s = slice_start(rollup, from);
    while s < to {
        out.push(s);
        s += step;
    }
    out
}

/// The marks of every slice meeting `[from, to)` of a projection's rollup
/// (a slice never written has none: absent from the map). One query per
/// bin (a window of a day or less: one or two). Strongly consistent
/// unless `Read::Eventually`: a read that may miss a mark written a moment
/// ago, for half the units.
pub async fn read(
    table: &dyn SortedTable,
    projection: &str,
    rollup: Rollup,
    from: i64,
    to: i64,
) -> Result<BTreeMap<i64, SliceMarks>, TableError> {
    read_as(table, projection, rollup, from, to, Read::Consistently).await
}

/// How [`read_as`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    Consistently,
    Eventually,
}

/// [`read`], strongly consistent or not.
pub async fn read_as(
    table: &dyn SortedTable,
    projection: &str,
    rollup: Rollup,
    from: i64,
    to: i64,
    how: Read,
) -> Result<BTreeMap<i64, SliceMarks>, TableError> {
    let wanted = slices(rollup, from, to);
    let mut out = BTreeMap::new();
    for bin in wanted.chunk_by(|a, b| rollup.bin().start_of(*a) == rollup.bin().start_of(*b)) {
        let (first, last) = (bin[0], bin[bin.len() - 1]);
        let mut req = QueryRequest::new(
            changes_pk(projection, rollup, rollup.bin().start_of(first)),
            SortKeyCondition::Between(slice_sk(first), slice_sk(last)),
        );
        req.consistent = how == Read::Consistently;
        loop {
            let page = table.query(&req).await?;
            for item in &page.items {
                let Some(start) = slice_of_sk(&item.sk) else { continue };
                let marks = SliceMarks::from_item(item)
                    .map_err(|why| TableError::InvalidRequest(format!("change marks of {}: {why}", item.pk)))?;
                out.insert(start, marks);
            }
            match page.last_evaluated {
                Some(k) => req.exclusive_start = Some(k),
                None => break,
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use zigzag_core::table::{MemoryTable, UpdateOutcome};

    const DAY: i64 = 86_400_000;

    async fn apply(t: &MemoryTable, req: UpdateRequest) -> bool {
        matches!(t.update(&req).await.unwrap(), UpdateOutcome::Applied(_))
    }

    #[tokio::test]
    async fn a_flush_between_begin_and_done_is_seen_and_replays_write_nothing() {
        let t = MemoryTable::default();
        let s = 20_000 * DAY + 45 * 60_000;
        let read = || async { read(&t, "cc", Rollup::Minute, s, s + 1).await.unwrap() };
        assert!(read().await.is_empty(), "never written: no marks");
        assert!(apply(&t, begin("cc", Rollup::Minute, s, 3, 7)).await);
        let open = read().await[&s].clone();
        assert!(!open.quiet(), "{open:?}");
        assert!(apply(&t, done("cc", Rollup::Minute, s, 3, 7)).await);
        let closed = read().await[&s].clone();
        assert!(closed.quiet());
        assert_ne!(open, closed);
        // A replay of flush 7 (or an older one) moves nothing.
        assert!(!apply(&t, begin("cc", Rollup::Minute, s, 3, 7)).await);
        assert!(!apply(&t, done("cc", Rollup::Minute, s, 3, 6)).await);
        assert_eq!(read().await[&s], closed);
        // Another lane's flush in progress makes the slice busy again.
        assert!(apply(&t, begin("cc", Rollup::Minute, s, 1, 2)).await);
        assert!(!read().await[&s].quiet());
    }

    #[tokio::test]
    async fn slices_are_read_across_bins_and_only_those_of_the_window() {
        let t = MemoryTable::default();
        let step = slice_ms(Rollup::Minute);
        // The last slice of one day, the first two of the next, one after.
        let first = 20_001 * DAY - step;
        for (i, s) in [first, first + step, first + 2 * step, first + 3 * step].into_iter().enumerate() {
            assert!(apply(&t, begin("cc", Rollup::Minute, s, 0, i as u64 + 1)).await);
        }
        let got = read(&t, "cc", Rollup::Minute, first + 60_000, first + 2 * step + 60_000).await.unwrap();
        assert_eq!(got.keys().copied().collect::<Vec<_>>(), vec![first, first + step, first + 2 * step]);
        assert_eq!(got[&(first + step)].lanes[&0], (2, 0));
        assert_eq!(slices(Rollup::Hour, 0, DAY + 1), vec![0, DAY], "a day of hours a slice");
    }

    #[test]
    fn an_item_marked_by_a_flush_the_slice_does_not_know_is_not_covered() {
        let marks = SliceMarks { lanes: [(0, (4, 4)), (2, (9, 9))].into_iter().collect() };
        let mut item = Item::new("p", b"s".to_vec());
        item.attrs.insert("clicks".into(), AttrValue::N(5.into()));
        item.attrs.insert(crate::mark::mark_attr(0), AttrValue::N(4.into()));
        assert!(marks.covers(&item));
        item.attrs.insert(crate::mark::mark_attr(2), AttrValue::N(10.into()));
        assert!(!marks.covers(&item), "flush 10 of lane 2 wrote no marks");
        item.attrs.insert(crate::mark::mark_attr(2), AttrValue::N(9.into()));
        item.attrs.insert(crate::mark::mark_attr(5), AttrValue::N(1.into()));
        assert!(!marks.covers(&item), "lane 5 never marked the slice");
    }

    #[test]
    fn a_read_holds_the_flushes_done_under_its_marks_and_misses_those_begun_after() {
        let at = |lanes: &[(u32, (u64, u64))]| SliceMarks { lanes: lanes.iter().copied().collect() };
        let read = at(&[(0, (4, 4)), (2, (9, 9))]);
        assert!(read.holds_done_of(&read));
        assert!(read.holds_done_of(&at(&[(0, (4, 3)), (2, (9, 9))])), "older marks");
        assert!(read.holds_done_of(&at(&[(0, (5, 4)), (2, (9, 9))])), "flush 5 of lane 0 begun, not done");
        assert!(!read.holds_done_of(&at(&[(0, (5, 5)), (2, (9, 9))])), "flush 5 done since");
        assert!(!read.holds_done_of(&at(&[(0, (4, 4)), (2, (9, 9)), (7, (1, 1))])), "a new lane's flush done");
        assert!(read.holds_done_of(&at(&[(0, (4, 4)), (2, (9, 9)), (7, (1, 0))])), "a new lane's flush begun");
        assert!(!read.misses_a_flush_begun_in(&read));
        assert!(read.misses_a_flush_begun_in(&at(&[(0, (5, 4)), (2, (9, 9))])));
        assert!(read.misses_a_flush_begun_in(&at(&[(0, (4, 4)), (2, (9, 9)), (7, (1, 0))])));
        assert!(!at(&[(0, (5, 5))]).misses_a_flush_begun_in(&at(&[(0, (5, 4))])), "the read is newer");
    }

    #[test]
    fn slice_keys_sort_as_instants() {
        let keys: Vec<Vec<u8>> = [-DAY, 0, 45 * 60_000, DAY].iter().map(|&t| slice_sk(t)).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(slice_of_sk(&slice_sk(-DAY)), Some(-DAY));
    }
}
