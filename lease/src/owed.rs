//! What a shard's slower item sets owe: the event times of the records
//! some of its sets hold and others do not yet.
//!
//! Item sets flush on cadences of their own (`checkpoint.rs`): between two
//! flushes of the slowest class, a shard's hour and day items lack records
//! its minute items already hold. A reader may let a coarse item stand for
//! its bucket only when no such record lies in that bucket, so every range
//! of an intent records the event times of the records between the
//! earliest set's position before it and its end ([`ShardRange::owed`]:
//! whole buckets of the layout's finest rollup, as at most [`MAX_SPANS`]
//! spans): when the checkpoint it leaves ([`ShardRange::completed`]) has
//! sets apart, those records hold every one the sets behind lack. A range
//! that leaves every set at one position owes nothing.
//!
//! A flush in flight writes its items in no particular order: until it is
//! committed, any of its sets may hold some of its records and not others.
//! A range's spans cover every record it writes too (they run from the
//! earliest set's position before it), and a reader takes them as owed by
//! every coarse set while its intent is in flight: there coarse and fine
//! items alike are read from the finest, which shows the flush as far as
//! its writes went.
//!
//! Completing a range writes its spans on the lease beside the checkpoint
//! (`owed`), prefixed with that checkpoint's text: spans left beside
//! another checkpoint (by a writer from before them, or a range whose
//! spans were unknown) are never trusted. Unknown spans (a shard taken with
//! its sets apart, before its catch-up; a lease written before this) mean
//! every bucket is owed. [`read`] gathers them for readers, from the
//! leases and from the intents not yet completed.

use crate::checkpoint::{Checkpoint, ItemSet};
use crate::items::{Lane, ShardLease, ShardRange};
use crate::LeaseError;
use serde::{Deserialize, Serialize};
use zigzag_core::table::SortedTable;

/// At most this many spans are kept: beyond, the two closest are joined
/// (a span then covers buckets no record is in: more is owed, never less).
pub const MAX_SPANS: usize = 8;

/// Event-time spans `[lo, hi)` (ms since the epoch), sorted and disjoint.
/// In an intent's JSON, a string: `START+LEN` in minutes when both ends
/// lie on minutes (always, for buckets of a rollup), else `LO..HI` in ms,
/// comma-separated: a lane item holds one per range, up to 500 ranges.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Owed(Vec<(i64, i64)>);

const MINUTE_MS: i64 = 60_000;

impl Serialize for Owed {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let spans: Vec<String> = self
            .0
            .iter()
            .map(|&(lo, hi)| match lo % MINUTE_MS == 0 && hi % MINUTE_MS == 0 {
                true => format!("{}+{}", lo / MINUTE_MS, (hi - lo) / MINUTE_MS),
                false => format!("{lo}..{hi}"),
            })
            .collect();
        s.serialize_str(&spans.join(","))
    }
}

impl<'de> Deserialize<'de> for Owed {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Owed, D::Error> {
        let text = String::deserialize(d)?;
        let bad = || serde::de::Error::custom(format!("owed spans {text:?}"));
        let mut owed = Owed::default();
        for span in text.split(',').filter(|s| !s.is_empty()) {
            let (lo, hi) = match (span.split_once('+'), span.split_once("..")) {
                (Some((start, len)), _) => {
                    let start: i64 = start.parse().map_err(|_| bad())?;
                    let len: i64 = len.parse().map_err(|_| bad())?;
                    (start * MINUTE_MS, (start + len) * MINUTE_MS)
                }
                (None, Some((lo, hi))) => (lo.parse().map_err(|_| bad())?, hi.parse().map_err(|_| bad())?),
                _ => return Err(bad()),
            };
            owed.add(lo, hi);
        }
        Ok(owed)
    }
}

impl Owed {
    /// The buckets starting at `starts`, each `unit_ms` long.
    pub fn of_buckets(starts: impl IntoIterator<Item = i64>, unit_ms: i64) -> Owed {
        let mut owed = Owed::default();
        for s in starts {
            owed.add(s, s.saturating_add(unit_ms));
        }
        owed
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn spans(&self) -> &[(i64, i64)] {
        &self.0
    }

    /// Adds `[lo, hi)`.
    pub fn add(&mut self, lo: i64, hi: i64) {
        if lo >= hi {
            return;
        }
        self.0.push((lo, hi));
        self.0.sort_unstable();
        let mut joined: Vec<(i64, i64)> = Vec::with_capacity(self.0.len());
        for &(l, h) in &self.0 {
            match joined.last_mut() {
                Some(last) if l <= last.1 => last.1 = last.1.max(h),
                _ => joined.push((l, h)),
            }
        }
        while joined.len() > MAX_SPANS {
            // Join the two spans with the narrowest gap between them.
            let i = (0..joined.len() - 1).min_by_key(|&i| joined[i + 1].0 - joined[i].1).unwrap_or(0);
            joined[i].1 = joined[i + 1].1;
            joined.remove(i + 1);
        }
        self.0 = joined;
    }

    /// Every span of both.
    pub fn union(&self, other: &Owed) -> Owed {
        let mut out = self.clone();
        for &(lo, hi) in &other.0 {
            out.add(lo, hi);
        }
        out
    }

    /// Whether any owed time lies in `[lo, hi)`.
    pub fn overlaps(&self, lo: i64, hi: i64) -> bool {
        self.0.iter().any(|&(l, h)| l < hi && lo < h)
    }

    /// The lease attribute: the checkpoint's text, `#`, the spans.
    pub(crate) fn attr(&self, checkpoint: &Checkpoint) -> String {
        let spans: Vec<String> = self.0.iter().map(|(lo, hi)| format!("{lo}..{hi}")).collect();
        format!("{checkpoint}#{}", spans.join(","))
    }

    /// The spans of a lease attribute when it was written beside
    /// `checkpoint` (None: beside another one, or unreadable).
    pub(crate) fn from_attr(text: &str, checkpoint: &Checkpoint) -> Option<Owed> {
        let (cp, spans) = text.split_once('#')?;
        if cp != checkpoint.to_string() {
            return None;
        }
        let mut owed = Owed::default();
        for span in spans.split(',').filter(|s| !s.is_empty()) {
            let (lo, hi) = span.split_once("..")?;
            owed.add(lo.parse().ok()?, hi.parse().ok()?);
        }
        Some(owed)
    }
}

/// One shard's sets apart, or a flush of it in flight, as a reader sees
/// them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Apart {
    pub shard: String,
    /// Where each set is (None: a flush in flight, any set anywhere in it).
    pub checkpoint: Option<Checkpoint>,
    /// None: unknown (every bucket owed).
    pub owed: Option<Owed>,
}

impl Apart {
    /// Whether the items of set `coarse` may lack records set `fine` holds
    /// (or hold records it lacks) at event times in `[lo, hi)`.
    pub fn differs(&self, coarse: ItemSet, fine: ItemSet, lo: i64, hi: i64) -> bool {
        let apart = self.checkpoint.as_ref().is_none_or(|c| c.get(coarse) != c.get(fine));
        apart && self.owed.as_ref().is_none_or(|o| o.overlaps(lo, hi))
    }
}

/// Every shard whose sets are apart: the leases of every registered
/// stream (eventually consistent) and, read after them, the lanes' intents
/// (a range committed, not yet completed on its lease). A range that
/// begins after the lanes are read is not seen: its records are then read
/// as far as its item writes went, in every set alike or not.
/// Also returns what reading cost: (requests, RCU).
pub async fn read(leases: &dyn SortedTable) -> Result<(Vec<Apart>, (u64, f64)), LeaseError> {
    let mut cost = (0u64, 0.0f64);
    let mut apart = Vec::new();
    let streams = partition(leases, crate::seal::STREAM_KEYS_PK, &mut cost).await?;
    for key in streams {
        let stream = String::from_utf8_lossy(&key.sk).into_owned();
        for item in partition(leases, &crate::items::shards_pk(&stream), &mut cost).await? {
            let lease = ShardLease::from_item(&item)?;
            if !lease.finished && !lease.checkpoint.is_uniform() {
                apart.push(Apart { shard: lease.shard, checkpoint: Some(lease.checkpoint), owed: lease.owed });
            }
        }
    }
    for item in partition(leases, crate::items::LANES_PK, &mut cost).await? {
        let lane = Lane::from_item(&item)?;
        if let Some(intent) = &lane.intent {
            let in_flight = intent.state != crate::items::IntentState::Done;
            for r in &intent.ranges {
                apart.extend(apart_after(r));
                if in_flight {
                    apart.push(Apart { shard: r.shard.clone(), checkpoint: None, owed: r.owed.clone() });
                }
            }
        }
    }
    Ok((apart, cost))
}

/// Every item of a partition, eventually consistent, its cost counted.
async fn partition(
    t: &dyn SortedTable,
    pk: &str,
    cost: &mut (u64, f64),
) -> Result<Vec<zigzag_core::table::Item>, LeaseError> {
    let req = zigzag_core::table::QueryRequest::new(pk, zigzag_core::table::SortKeyCondition::Any);
    let out = zigzag_core::query::run_key_range(t, req).await.map_err(|e| LeaseError::Table(crate::table_error(e)))?;
    cost.0 += out.stats.requests;
    cost.1 += out.stats.rcu;
    Ok(out.items)
}

/// What a range leaves apart, if anything.
fn apart_after(r: &ShardRange) -> Option<Apart> {
    let checkpoint = r.completed();
    (!checkpoint.is_uniform()).then(|| Apart {
        shard: r.shard.clone(),
        checkpoint: Some(checkpoint),
        owed: r.owed.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use zigzag_model::Position;

    #[test]
    fn spans_join_when_they_touch_and_the_closest_join_past_the_bound() {
        let m = 60_000;
        let o = Owed::of_buckets([0, m, 2 * m, 10 * m], m);
        assert_eq!(o.spans(), &[(0, 3 * m), (10 * m, 11 * m)]);
        assert!(o.overlaps(2 * m, 3 * m) && !o.overlaps(3 * m, 10 * m) && o.overlaps(0, 100 * m));
        let many = Owed::of_buckets((0..20).map(|i| i * i * m), m);
        assert_eq!(many.spans().len(), MAX_SPANS);
        for i in 0..20 {
            assert!(many.overlaps(i * i * m, i * i * m + m), "bucket {i} still owed");
        }
    }

    #[test]
    fn spans_are_trusted_only_beside_the_checkpoint_they_were_written_with() {
        let cp = Checkpoint::uniform(Some(Position::at(10))).advance(Some(&[0]), Position::at(20), 3);
        let o = Owed::of_buckets([120_000], 60_000);
        let text = o.attr(&cp);
        assert_eq!(text, "10|20@0#120000..180000");
        assert_eq!(Owed::from_attr(&text, &cp), Some(o));
        let later = cp.advance(Some(&[0]), Position::at(30), 3);
        assert_eq!(Owed::from_attr(&text, &later), None, "written beside another checkpoint");
        assert_eq!(Owed::from_attr(&Owed::default().attr(&cp), &cp), Some(Owed::default()));
    }

    #[test]
    fn a_set_differs_only_where_its_position_does_and_a_record_is_owed() {
        let cp = Checkpoint::uniform(Some(Position::at(10))).advance(Some(&[0, 1]), Position::at(20), 3);
        let known = Apart { shard: "s".into(), checkpoint: Some(cp.clone()), owed: Some(Owed::of_buckets([0], 10)) };
        assert!(known.differs(2, 0, 0, 100), "set 2 is behind set 0, and time 0 is owed");
        assert!(!known.differs(2, 0, 10, 100), "nothing owed after 10");
        assert!(!known.differs(1, 0, 0, 100), "sets 0 and 1 are at one position");
        let unknown = Apart { owed: None, ..known.clone() };
        assert!(unknown.differs(2, 0, 1_000, 2_000), "unknown: every bucket owed");
        let writing = Apart { checkpoint: None, ..known };
        assert!(writing.differs(1, 0, 0, 100), "a flush in flight: every set, where it writes");
        assert!(!writing.differs(1, 0, 10, 100), "and nowhere else");
    }

    #[test]
    fn spans_read_back_from_an_intent_s_compact_text() {
        let o = Owed::of_buckets([1_795_899_480_000, 1_795_899_540_000, 1_795_903_200_000], 60_000);
        let json = serde_json::to_string(&o).unwrap();
        assert_eq!(json, "\"29931658+2,29931720+1\"");
        assert_eq!(serde_json::from_str::<Owed>(&json).unwrap(), o);
        let odd = Owed::of_buckets([1_500], 1_000);
        assert_eq!(serde_json::from_str::<Owed>(&serde_json::to_string(&odd).unwrap()).unwrap(), odd);
        assert!(serde_json::from_str::<Owed>("\"x+1\"").is_err());
    }

    proptest! {
        /// Every bucket added stays owed, whatever the joins; the spans
        /// stay sorted, disjoint and bounded.
        #[test]
        fn every_bucket_added_stays_owed(starts in proptest::collection::vec(0i64..10_000, 0..60), split in 0usize..60) {
            let (a, b) = starts.split_at(split.min(starts.len()));
            let o = Owed::of_buckets(a.iter().copied(), 7).union(&Owed::of_buckets(b.iter().copied(), 7));
            prop_assert!(o.spans().len() <= MAX_SPANS);
            prop_assert!(o.spans().windows(2).all(|w| w[0].1 < w[1].0));
            for &s in &starts {
                prop_assert!(o.overlaps(s, s + 7));
            }
            if starts.is_empty() {
                prop_assert!(o.is_empty());
            }
        }
    }
}
