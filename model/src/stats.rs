//! Statistics ingest keeps for gather's planner: how many items each
//! projection holds, per rollup and partition time bin.
//!
//! One item per (projection, rollup, bin) in the aggregate table, pk
//! [`STATS_PK`], sk `<projection>#<rollup>#<bin label>`: `items`, a
//! HyperLogLog (p = [`STATS_PRECISION`], ~6.5 % standard error, a few
//! hundred bytes) of the items written, each counted by its scatter prefix,
//! bucket and identity (so random scatter's partials of one key count once
//! each, as a reader reads them); `lo` and `hi`, the first and last bucket
//! seen; `slices`, the same items again in [`SLICES`] time slices of the
//! bin (one HyperLogLog of 512 registers, 16 a slice, ~26 % standard error
//! a slice: [`slice_of`]), so that a reader knows how the items lie in
//! time, which `lo` and `hi` cannot tell once a few late events stretch
//! them; `at`, when a flush last wrote to it (the writer's clock, ms: how
//! fresh the items are, for `--explain`); for a projection keyed by a
//! dimension's value (`partition_by`), `values`, a sketch of the values
//! (p = [`VALUES_PRECISION`], 64 registers, ~13 % standard error), so
//! that a reader knows a value's share of the items; `v`, the version its
//! writes are ordered by. An item is under 1 KB (one write unit).
//!
//! A flush merges what it wrote into these items ([`plan_stats_update`]):
//! merging a sketch twice is merging it once, so replays, retries and
//! recoveries need no mark, and a lost statistics write costs an estimate
//! some accuracy, never a total its exactness. Their writes are counted
//! with the item writes (they are write requests); one per (projection,
//! rollup, bin) a flush touches.

use crate::hll::Hll;
use crate::keys::Identity;
use crate::measure::update::plan_sketches_merge;
use crate::measure::values::attr_sketch_named;
use crate::measure::{Sketch, SketchParams};
use crate::rollup::Rollup;
use rust_decimal::Decimal;
use zigzag_core::table::{AttrValue, Item, UpdateRequest};

/// The statistics' partition key (no aggregate's pk starts with `#`).
pub const STATS_PK: &str = "#stats";
/// The sketch's precision: 256 registers, ~6.5 % standard error.
pub const STATS_PRECISION: u8 = 8;
/// Time slices a bin's statistics are kept in.
pub const SLICES: u32 = 1 << SLICE_BITS;
const SLICE_BITS: u8 = 5;
/// The slices' sketch: [`SLICES`] groups of 16 registers.
const SLICES_PRECISION: u8 = 9;
/// The partition values' sketch: 64 registers (a few dozen bytes).
pub const VALUES_PRECISION: u8 = 6;
const VALUES_ATTR: &str = "values";
const ITEMS: &str = "items";
const SLICES_ATTR: &str = "slices";
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

/// The length of one time slice of a rollup's bins, in ms: 45 minutes of a
/// day of minutes (32 a day), a day of a month of hours or of days (at
/// most 31 a month).
pub fn slice_ms(rollup: Rollup) -> i64 {
    match rollup {
        Rollup::Minute => 45 * 60_000,
        Rollup::Hour | Rollup::Day => 86_400_000,
    }
}

/// The slice of its bin a bucket is counted in. Slices are aligned with
/// the epoch, and a bin spans at most [`SLICES`] of them, each starting in
/// it: two slices of one bin never share a number.
pub fn slice_of(rollup: Rollup, bucket: i64) -> u32 {
    bucket.div_euclid(slice_ms(rollup)).rem_euclid(i64::from(SLICES)) as u32
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
    /// The same items, grouped by [`slice_of`] their bucket.
    pub slices: Hll,
    /// First and last bucket start written.
    pub lo: i64,
    pub hi: i64,
    /// When the flush wrote them (ms since the epoch, the writer's clock).
    pub at_ms: i64,
    /// The values of the dimension keying partitions, for a projection
    /// that has one ([`BinStats::add_value`]).
    pub values: Option<Hll>,
}

impl BinStats {
    pub fn new(bucket: i64) -> BinStats {
        let at_ms =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
        BinStats {
            items: Hll::new(STATS_PRECISION).expect("a valid precision"),
            slices: Hll::new(SLICES_PRECISION).expect("a valid precision"),
            lo: bucket,
            hi: bucket,
            at_ms,
            values: None,
        }
    }

    /// Counts a value of the dimension keying the projection's partitions.
    pub fn add_value(&mut self, value: &str) {
        self.values
            .get_or_insert_with(|| Hll::new(VALUES_PRECISION).expect("a valid precision"))
            .add_hash(xxhash_rust::xxh3::xxh3_64(value.as_bytes()));
    }

    pub fn add(&mut self, rollup: Rollup, prefix: u32, bucket: i64, id: Identity) {
        let h = item_hash(prefix, bucket, id);
        self.items.add_hash(h);
        self.slices.add_grouped(SLICE_BITS, slice_of(rollup, bucket), h);
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
    /// Estimated distinct items per time slice, by [`slice_of`] (all zero
    /// for an item written before slices were kept).
    pub slices: Vec<u64>,
    /// Estimated distinct values of the dimension keying partitions (None:
    /// the projection has none, or the item is from before they were kept).
    pub values: Option<u64>,
}

fn int(item: &Item, name: &str) -> Option<i64> {
    match item.attrs.get(name) {
        Some(AttrValue::N(d)) => i64::try_from(*d).ok(),
        _ => None,
    }
}

/// The HyperLogLog in attribute `name` (empty when absent), of precision `p`.
fn attr_hll(item: &Item, name: &str, p: u8) -> Result<Hll, String> {
    match attr_sketch_named(item, name, SketchParams::Distinct(p))? {
        Sketch::Distinct(h) => Ok(h),
        #[allow(unreachable_patterns)]
        other => Err(format!("attribute {name:?} holds a {:?} sketch", other.params())),
    }
}

impl StoredStats {
    pub fn from_item(item: &Item) -> Result<StoredStats, String> {
        let items = attr_hll(item, ITEMS, STATS_PRECISION)?.estimate();
        let slices = attr_hll(item, SLICES_ATTR, SLICES_PRECISION)?
            .split(SLICE_BITS)
            .map_err(|e| e.to_string())?
            .iter()
            .map(Hll::estimate)
            .collect();
        match (int(item, LO), int(item, HI)) {
            (Some(lo), Some(hi)) => {
                let values = match item.attrs.contains_key(VALUES_ATTR) {
                    true => Some(attr_hll(item, VALUES_ATTR, VALUES_PRECISION)?.estimate().max(1)),
                    false => None,
                };
                Ok(StoredStats { items, lo, hi, at_ms: int(item, AT), slices, values })
            }
            _ => Err("statistics item without its bucket range".into()),
        }
    }

    /// The estimated items of buckets in `[from, to)` of the bin starting at
    /// `bin_start`. Where the slices say the items lie evenly between `lo`
    /// and `hi` (every slice's items per bucket within the noise of its
    /// 16-register sketch of the mean: [`EVEN`]), the items times the share
    /// of `lo..=hi` covered, which is exact for even data; otherwise each
    /// slice's items times the share of it covered (the slices scaled to
    /// sum to `items`, the more precise count): a day of data and a few
    /// late events on other days is counted where it is.
    pub fn items_between(&self, rollup: Rollup, bin_start: i64, from: i64, to: i64) -> f64 {
        let unit = rollup.unit_ms();
        let (from, to) = (from.max(bin_start), to.min(rollup.bin().next_start(bin_start)));
        let slices = match self.slice_densities(rollup) {
            Some(slices) if !is_even(&slices) => slices,
            _ => {
                let (lo, hi) = (self.lo, self.hi + unit);
                let covered = (to.min(hi) - from.max(lo)).max(0);
                return self.items as f64 * covered as f64 / (hi - lo).max(1) as f64;
            }
        };
        slices.iter().map(|s| s.per_ms * (to.min(s.end) - from.max(s.start)).max(0) as f64).sum()
    }

    /// The most items a bucket of this bin holds: the mean over `lo..=hi`
    /// where the items lie evenly, else the busiest slice's items per
    /// bucket (each slice's spread evenly over its buckets in `lo..=hi`).
    pub fn peak_items_per_bucket(&self, rollup: Rollup) -> f64 {
        let unit = rollup.unit_ms() as f64;
        match self.slice_densities(rollup) {
            Some(slices) if !is_even(&slices) => slices.iter().map(|s| s.per_ms * unit).fold(0.0, f64::max),
            _ => self.items as f64 / (((self.hi - self.lo) as f64 / unit).max(0.0) + 1.0),
        }
    }

    /// The slices between `lo` and `hi` (clipped to them), each with its
    /// items per ms; None without slices (an item from before they were
    /// kept).
    fn slice_densities(&self, rollup: Rollup) -> Option<Vec<SliceDensity>> {
        let total: u64 = self.slices.iter().sum();
        if total == 0 {
            return None;
        }
        let (width, unit) = (slice_ms(rollup), rollup.unit_ms());
        let scale = self.items as f64 / total as f64;
        let mut out = Vec::new();
        let mut t = self.lo.div_euclid(width) * width;
        while t <= self.hi {
            let (start, end) = (t.max(self.lo), (t + width).min(self.hi + unit));
            let items = self.slices.get(slice_of(rollup, t) as usize).copied().unwrap_or(0) as f64 * scale;
            out.push(SliceDensity { start, end, per_ms: items / (end - start).max(1) as f64 });
            t += width;
        }
        Some(out)
    }
}

/// How far a slice's items per bucket may stray from the mean and the data
/// still count as even: three standard errors of a 16-register sketch
/// (1.04 / 4 = 26 %).
pub const EVEN: f64 = 0.78;

struct SliceDensity {
    start: i64,
    end: i64,
    per_ms: f64,
}

fn is_even(slices: &[SliceDensity]) -> bool {
    let span: i64 = slices.iter().map(|s| s.end - s.start).sum();
    let mean = slices.iter().map(|s| s.per_ms * (s.end - s.start) as f64).sum::<f64>() / span.max(1) as f64;
    slices.iter().all(|s| (s.per_ms - mean).abs() <= EVEN * mean)
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
    let mut owned =
        vec![(ITEMS, Sketch::Distinct(stats.items.clone())), (SLICES_ATTR, Sketch::Distinct(stats.slices.clone()))];
    if let Some(values) = &stats.values {
        owned.push((VALUES_ATTR, Sketch::Distinct(values.clone())));
    }
    let sketches: Vec<(&str, &Sketch)> = owned.iter().map(|(name, s)| (*name, s)).collect();
    let Some(req) = plan_sketches_merge(STATS_PK.into(), sk, &sketches, None, known, widened)? else {
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
            a.add(Rollup::Minute, id as u32 % 4, t0 + (id as i64 % 10) * minute, id);
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
        b.add(Rollup::Minute, 0, t0 + 20 * minute, 9_999);
        let blind = plan_stats_update("cc", Rollup::Minute, t0, &b, None).unwrap().unwrap();
        let (old, applied) = apply(stored.clone(), &blind);
        assert!(!applied, "version 1 exists: a blind first write is refused");
        let req = plan_stats_update("cc", Rollup::Minute, t0, &b, old.as_ref()).unwrap().unwrap();
        let (stored, applied) = apply(stored, &req);
        assert!(applied);
        let s = StoredStats::from_item(stored.as_ref().unwrap()).unwrap();
        assert_eq!((s.lo, s.hi), (t0, t0 + 20 * minute), "the range widened");
        assert_eq!(stats_sk("cc", Rollup::Minute, t0), b"cc#minute#2026-11-20".to_vec());
        assert_eq!(s.values, None, "not keyed by a value: no values kept");
    }

    /// A projection keyed by a value counts its values: two flushes' are
    /// merged (a value seen by both counts once), a replay changes nothing,
    /// and the item stays one write unit.
    #[test]
    fn the_values_keying_partitions_are_counted_and_merged() {
        let t0 = 1_795_132_800_000i64;
        let countries: Vec<String> = (0..40).map(|i| format!("C{i:02}")).collect();
        let mut a = BinStats::new(t0);
        for (id, c) in countries[..30].iter().enumerate() {
            a.add(Rollup::Day, 0, t0, id as u128);
            a.add_value(c);
            a.add_value(c);
        }
        let req = plan_stats_update("by_country", Rollup::Day, t0, &a, None).unwrap().unwrap();
        let (stored, _) = apply(None, &req);
        let first = StoredStats::from_item(stored.as_ref().unwrap()).unwrap().values.unwrap();
        assert!((25..=35).contains(&first), "30 values: {first}");
        let mut b = BinStats::new(t0);
        for (id, c) in countries[20..].iter().enumerate() {
            b.add(Rollup::Day, 0, t0, 100 + id as u128);
            b.add_value(c);
        }
        let req = plan_stats_update("by_country", Rollup::Day, t0, &b, stored.as_ref()).unwrap().unwrap();
        let (stored, applied) = apply(stored, &req);
        assert!(applied);
        let stored = stored.unwrap();
        assert!(stored.size() < 1024, "one write unit: {} bytes", stored.size());
        let both = StoredStats::from_item(&stored).unwrap().values.unwrap();
        assert!((34..=46).contains(&both), "40 distinct values over both flushes: {both}");
        assert!(plan_stats_update("by_country", Rollup::Day, t0, &b, Some(&stored)).unwrap().is_none(), "a replay");
    }

    #[test]
    fn slices_say_where_in_the_bin_the_items_lie() {
        // A month of hours: 3,000 items on one day, 30 late ones on each of
        // two others; lo..hi spans 3 days, the slices show where the items are.
        let (month, hour, day) = (1_793_491_200_000i64, 3_600_000i64, 86_400_000i64); // 2026-11-01
        let mut s = BinStats::new(month + 9 * day);
        for id in 0..3_000u128 {
            s.add(Rollup::Hour, id as u32 % 16, month + 9 * day + (id as i64 % 24) * hour, id);
        }
        for id in 0..30u128 {
            s.add(Rollup::Hour, 0, month + 10 * day, 10_000 + id);
            s.add(Rollup::Hour, 0, month + 11 * day + 5 * hour, 20_000 + id);
        }
        let req = plan_stats_update("cr", Rollup::Hour, month, &s, None).unwrap().unwrap();
        let (stored, _) = apply(None, &req);
        let stored = stored.unwrap();
        assert!(stored.size() < 1024, "one write unit: {} bytes", stored.size());
        let s = StoredStats::from_item(&stored).unwrap();
        assert_eq!(s.slices.len(), SLICES as usize);
        assert_eq!(s.slices.iter().filter(|&&n| n > 0).count(), 3, "three days hold items");
        let day9 = s.items_between(Rollup::Hour, month, month + 9 * day, month + 10 * day);
        let all = s.items_between(Rollup::Hour, month, month, month + 30 * day);
        assert!((all - s.items as f64).abs() < 1e-6, "the whole bin is every item");
        assert!(day9 / all > 0.95, "day 9 holds {day9} of {all}: the late events are few");
        let half = s.items_between(Rollup::Hour, month, month + 9 * day, month + 9 * day + 12 * hour);
        assert!((half / day9 - 0.5).abs() < 1e-9, "half a slice: half its items (uniform within a slice)");
        assert_eq!(s.items_between(Rollup::Hour, month, month, month + 9 * day), 0.0, "none before day 9");
        let peak = s.peak_items_per_bucket(Rollup::Hour);
        assert!((100.0..150.0).contains(&peak), "3,000 items in 24 hours: ~125 an hour, not the mean: {peak}");
        // The lo..hi interpolation would have given day 9 a third.
        assert_eq!((s.lo, s.hi), (month + 9 * day, month + 11 * day + 5 * hour));
        // Items spread evenly over ten days: the share of the time covered
        // (the slices' noise is not mistaken for where the items lie), and
        // the mean per bucket.
        let mut even = BinStats::new(month);
        for id in 0..24_000u128 {
            even.add(Rollup::Hour, 0, month + (id as i64 % 240) * hour, 50_000 + id);
        }
        let req = plan_stats_update("cr", Rollup::Hour, month, &even, None).unwrap().unwrap();
        let even = StoredStats::from_item(&apply(None, &req).0.unwrap()).unwrap();
        let part = even.items_between(Rollup::Hour, month, month + day + 12 * hour, month + 4 * day);
        assert!((part / even.items as f64 - 0.25).abs() < 1e-9, "2.5 of 10 days: a quarter, {part}");
        let per_hour = even.peak_items_per_bucket(Rollup::Hour);
        assert!((per_hour - even.items as f64 / 240.0).abs() < 1e-9, "the mean: {per_hour}");
        // Slices of one bin never share a number: minutes (a day of 32
        // slices of 45 minutes) and days (a month).
        let d0 = 1_795_132_800_000i64;
        let minute_slices: std::collections::BTreeSet<u32> =
            (0..1440).map(|m| slice_of(Rollup::Minute, d0 + m * 60_000)).collect();
        assert_eq!(minute_slices.len(), 32);
        let day_slices: std::collections::BTreeSet<u32> =
            (0..31).map(|d| slice_of(Rollup::Day, 1_793_491_200_000 + 29 * day + d * day)).collect();
        assert_eq!(day_slices.len(), 31, "31 days of a month: 31 slices");
    }
}
