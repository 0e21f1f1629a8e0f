//! Statistics ingest keeps for gather's planner: how many items each
//! projection holds, per rollup and partition time bin.
//!
//! One item per (projection, rollup, bin) in the aggregate table, pk
//! [`STATS_PK`], sk `<projection>#<rollup>#<bin label>`: `items`, a
//! HyperLogLog (p = [`STATS_PRECISION`], ~6.5 % standard error, a few
//! hundred bytes) of the items written, each counted by its scatter prefix,
//! bucket and identity (so random scatter's partials of one key count once
//! each, as a reader reads them); `lo` and `hi`, the first and last bucket
//! seen; `at`, when a flush last wrote to it (the writer's clock, ms: how
//! fresh the items are, for `--explain`); `v`, the version its writes are
//! ordered by.
//!
//! A flush merges what it wrote into these items ([`plan_stats_update`]):
//! merging a sketch twice is merging it once, so replays, retries and
//! recoveries need no mark, and a lost statistics write costs an estimate
//! some accuracy, never a total its exactness. Their writes are counted
//! with the item writes (they are write requests); one per (projection,
//! rollup, bin) a flush touches.

use crate::hll::Hll;
use crate::keys::Identity;
use crate::measure::update::plan_sketch_merge;
use crate::measure::values::attr_sketch_named;
use crate::rollup::Rollup;
use rust_decimal::Decimal;
use zigzag_core::table::{AttrValue, Item, UpdateRequest};

/// The statistics' partition key (no aggregate's pk starts with `#`).
pub const STATS_PK: &str = "#stats";
/// The sketch's precision: 256 registers, ~6.5 % standard error.
pub const STATS_PRECISION: u8 = 8;
const ITEMS: &str = "items";
const LO: &str = "lo";
const HI: &str = "hi";
const AT: &str = "at";

/// The sort key of a projection's statistics for one rollup and bin.
pub fn stats_sk(projection: &str, rollup: Rollup, bin_start: i64) -> Vec<u8> {
    format!("{projection}#{rollup}#{}", rollup.bin().label(bin_start)).into_bytes()
}

/// The sort keys of a projection's statistics for a rollup, every bin
/// from `first_bin` to `last_bin` (inclusive range of sort keys: labels
/// sort as their bins do).
pub fn stats_range(projection: &str, rollup: Rollup, first_bin: i64, last_bin: i64) -> (Vec<u8>, Vec<u8>) {
    (stats_sk(projection, rollup, first_bin), stats_sk(projection, rollup, last_bin))
}

/// What the sketch counts of one item.
pub fn item_hash(prefix: u32, bucket: i64, id: Identity) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(&prefix.to_le_bytes());
    h.update(&bucket.to_le_bytes());
    h.update(&id.to_le_bytes());
    h.digest()
}

/// One flush's items of one projection, rollup and bin.
#[derive(Debug, Clone)]
pub struct BinStats {
    pub items: Hll,
    /// First and last bucket start written.
    pub lo: i64,
    pub hi: i64,
    /// When the flush wrote them (ms since the epoch, the writer's clock).
    pub at_ms: i64,
}

impl BinStats {
    pub fn new(bucket: i64) -> BinStats {
        let at_ms =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
        BinStats { items: Hll::new(STATS_PRECISION).expect("a valid precision"), lo: bucket, hi: bucket, at_ms }
    }

    pub fn add(&mut self, prefix: u32, bucket: i64, id: Identity) {
        self.items.add_hash(item_hash(prefix, bucket, id));
        self.lo = self.lo.min(bucket);
        self.hi = self.hi.max(bucket);
    }
}

/// A stored statistics item, read.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredStats {
    /// Estimated distinct items.
    pub items: u64,
    pub lo: i64,
    pub hi: i64,
    /// When a flush last wrote to these items (None: before it was kept).
    pub at_ms: Option<i64>,
}

fn int(item: &Item, name: &str) -> Option<i64> {
    match item.attrs.get(name) {
        Some(AttrValue::N(d)) => i64::try_from(*d).ok(),
        _ => None,
    }
}

impl StoredStats {
    pub fn from_item(item: &Item) -> Result<StoredStats, String> {
        let items = attr_sketch_named(item, ITEMS, STATS_PRECISION)?.estimate();
        match (int(item, LO), int(item, HI)) {
            (Some(lo), Some(hi)) => Ok(StoredStats { items, lo, hi, at_ms: int(item, AT) }),
            _ => Err("statistics item without its bucket range".into()),
        }
    }
}

/// The update that merges `stats` into the stored item, given what is
/// known of it (nothing at first: assume none; else what a refused attempt
/// returned). None when the stored item already holds all of it.
pub fn plan_stats_update(
    projection: &str,
    rollup: Rollup,
    bin_start: i64,
    stats: &BinStats,
    known: Option<&Item>,
) -> Result<Option<UpdateRequest>, String> {
    let stored_range = known.and_then(|k| Some((int(k, LO)?, int(k, HI)?)));
    let (lo, hi) = match stored_range {
        Some((lo, hi)) => (lo.min(stats.lo), hi.max(stats.hi)),
        None => (stats.lo, stats.hi),
    };
    let widened = stored_range != Some((lo, hi));
    let sk = stats_sk(projection, rollup, bin_start);
    let Some(req) = plan_sketch_merge(STATS_PK.into(), sk, ITEMS, STATS_PRECISION, &stats.items, known, widened)?
    else {
        return Ok(None);
    };
    // The latest write's time (a slower writer's clock never moves it back).
    let at = known.and_then(|k| int(k, AT)).map_or(stats.at_ms, |a| a.max(stats.at_ms));
    Ok(Some(
        req.set(LO, AttrValue::N(Decimal::from(lo)))
            .set(HI, AttrValue::N(Decimal::from(hi)))
            .set(AT, AttrValue::N(Decimal::from(at))),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use zigzag_core::table::{apply_update, UpdateOutcome};

    fn apply(stored: Option<Item>, req: &UpdateRequest) -> (Option<Item>, bool) {
        match apply_update(stored.clone(), req).expect("a valid request") {
            UpdateOutcome::Applied(item) => (Some(item), true),
            UpdateOutcome::ConditionFailed(old) => (old, false),
        }
    }

    #[test]
    fn merges_are_idempotent_ordered_by_version_and_widen_the_range() {
        let (t0, minute) = (1_795_132_800_000i64, 60_000i64);
        let mut a = BinStats::new(t0);
        for id in 0..500u128 {
            a.add(id as u32 % 4, t0 + (id as i64 % 10) * minute, id);
        }
        let req = plan_stats_update("cc", Rollup::Minute, t0, &a, None).unwrap().unwrap();
        let (stored, applied) = apply(None, &req);
        assert!(applied);
        let s = StoredStats::from_item(stored.as_ref().unwrap()).unwrap();
        assert!((430..=570).contains(&s.items), "500 items within 3 standard errors: {}", s.items);
        assert_eq!((s.lo, s.hi), (t0, t0 + 9 * minute));
        // The same again (a replay): nothing to write.
        assert!(plan_stats_update("cc", Rollup::Minute, t0, &a, stored.as_ref()).unwrap().is_none());
        // A writer that assumed no item is refused, then merges under the version.
        let mut b = BinStats::new(t0 + 20 * minute);
        b.add(0, t0 + 20 * minute, 9_999);
        let blind = plan_stats_update("cc", Rollup::Minute, t0, &b, None).unwrap().unwrap();
        let (old, applied) = apply(stored.clone(), &blind);
        assert!(!applied, "version 1 exists: a blind first write is refused");
        let req = plan_stats_update("cc", Rollup::Minute, t0, &b, old.as_ref()).unwrap().unwrap();
        let (stored, applied) = apply(stored, &req);
        assert!(applied);
        let s = StoredStats::from_item(stored.as_ref().unwrap()).unwrap();
        assert_eq!((s.lo, s.hi), (t0, t0 + 20 * minute), "the range widened");
        assert_eq!(stats_sk("cc", Rollup::Minute, t0), b"cc#minute#2026-11-20".to_vec());
    }
}
