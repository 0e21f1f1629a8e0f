//! The `auto` strategy: read a box for as few read units as the other
//! strategies manage, without a model of where the data lies.
//!
//! DynamoDB bills a Query page by its bytes in 4 KB units, at least one.
//! So a page of `u` items, where `u` items fill one unit, costs what a page
//! of one item costs: the cheapest way to look past the end of a run of
//! the box is to read a unit's worth of items, not fewer (fewer saves
//! nothing) and not many more (garbage bought in bulk). The rule:
//! - **few runs**: when the box is exactly a few Z-ranges
//!   (`decompose(box, exact_ranges)` is exact), read each range whole: no
//!   garbage at all, one request per range (point queries, a box that is a
//!   run of the curve, a whole time bin);
//! - **with statistics**, as `costed` ([`AutoConfig::costed`], given
//!   [`super::Expected`]: the partition's items and their size, which
//!   `gather` has from ingest's statistics): the ranges
//!   a cost model picks (`zorder::costed_ranges`: the items spread evenly,
//!   straddling blocks split while that saves units), each read in pages
//!   of a few units doubling, for as long as what they hold agrees with
//!   the model (within 2x, and the share inside the box at least half the
//!   expected); where it does not, the rest of the box is paged as below;
//! - **otherwise page-jump in read units**: `Limit = u × m`, `u` from the
//!   mean size of the items seen so far (before any: `probe_limit`), `m`
//!   doubling while pages come back full and useful (≥ 3/4 inside the
//!   box: a dense run, where bigger pages cost fewer requests and less
//!   rounding) and back to 1 after a page that was mostly garbage (< 1/4).
//!   A page of several units is bounded by the end of the box's run it
//!   starts in (`span_end_within_garbage`), extended over the gaps where
//!   under one unit of items is expected at the density of the runs read
//!   so far: a large page that ran past a run would buy garbage by the
//!   unit. A bounded page asks for [`RUN_PAGE_SLACK`] (4) times the items
//!   expected in it (its run and gaps at that density, plus a unit), at
//!   most the store's largest page (`max_limit`): a tighter Limit would
//!   split the run into more requests, each rounded up (up to 7 % of a
//!   query's units with exactly the expected items), while no Limit let a
//!   cluster hidden in a narrow gap be bought whole (clustered data, up to
//!   1.64x the best fixed strategy). When a bounded page finishes its
//!   run, where the next run starts and how full it is are unknown: back
//!   to one unbounded unit. After each page: continue from a
//!   LastEvaluatedKey inside the box, else jump to BIGMIN of it;
//! - **crossing, where the gaps hold next to nothing**: a full, useful
//!   unbounded page whose span held addresses outside the box (it read
//!   across a gap, and the gap gave it few items) is followed by pages of
//!   several units that cross gaps too, ended by their Limit or by the end
//!   of the range of precise's cover ([`super::PRECISE_RANGES`] ranges)
//!   they are in: the cover keeps the box's widest gaps, the ones likeliest
//!   to hold other values' data, and those are jumped. A crossing page
//!   that read to its range's end with at least a unit goes on into the
//!   next range as it was; a mostly-garbage page ends the mode. This is
//!   what one value of a hashed dimension needed: a run a few items long
//!   after a gap with none, which run-bounded pages read a request or two
//!   a run (up to 2.02x precise);
//! - **in a needle box, a one-unit page stops before a gap it would have
//!   ended in** ([`AutoConfig::gap_margin`], `gap_bound`): while the last
//!   [`RECENT_PAGES`] unbounded pages found nothing inside the box, at the
//!   end of the box's run before a gap that the page is expected to reach
//!   before its Limit and that is expected to hold [`GAP_MARGIN`] times
//!   what the page has left, both at the least density of those pages.
//!   The page would have ended inside the gap anyway, so the gap's items
//!   are saved without another request; where the density misleads
//!   (clumped data), it costs one. Where pages do find the box's items,
//!   the bound is not placed: there it cost up to 12 % more RCU on the
//!   demo store's reports (`gap_density`). On Z-order part 1's Q2 this is a
//!   fifth fewer items scanned;
//! - **learned, where the partition looks even**: after [`LEARN_PAGES`]
//!   full one-unit probes whose densities (items per address spanned) lie
//!   within [`EVEN`] of each other, their density is taken for the
//!   partition's and the rest of the box is read as `costed` reads it
//!   (the same model, the same checks), once per box. This is what reads a
//!   thin box well: a value of one dimension over an even partition is
//!   thousands of one-address runs, which paging finds one garbage unit
//!   at a time and the model's blocks cover a unit each. Where the data is
//!   clustered or skewed the probes disagree (or the ranges soon hold far
//!   more or fewer items than the model says) and paging goes on.
//!
//! Measured against the fixed strategies on varied data in
//! `core/benches/strategies.rs` (BENCHMARKS.md), over 1,044 queries (the
//! set drawn at seeds 0-5 and 20,000, 50,000 and 100,000 items): `auto`
//! within 1.1x of the best fixed strategy's RCU on 1,011, worst 1.33x,
//! its RCU summed 2.2 % under the best fixed strategy's per query. Not
//! every query: small boxes where naive's one request wins, and boxes
//! where precise's or elastic's page sizes happen to fit, miss by
//! 1.1-1.33x. No strategy can be within 1.1x on every query: two
//! partitions with the same statistics that no first request tells apart
//! put each over it on one (the end of the strategies bench).
//! `costed` (the model from the statistics' item count at once)
//! is 1,022 within but worst 2.00x; on the demo store's aggregates
//! (constant string prefixes, a day of data in a month's bin) it costs up
//! to a sixth more than `auto` on some reports, so the default learns the
//! density rather than take the partition's average.
//!
//! `u` and `m` carry from box to box of one query ([`Auto`]).

mod costed;
mod gap;
mod walk;

pub(super) use walk::run;

/// The most blocks the cost model visits before `auto` pages instead.
const COSTED_BLOCKS: usize = 1 << 16;

/// Full probe pages (one unit each, unbounded) after which `auto` takes
/// the partition's density for known and plans the rest of the box with
/// the cost model.
pub const LEARN_PAGES: u32 = 3;

/// How far apart the probes' densities may be for the partition to be
/// taken as even (a unit's count varies by a third or so by chance;
/// clustered or skewed data, by orders of magnitude).
pub const EVEN: f64 = 3.0;

/// [`AutoConfig::gap_margin`] by default: a gap must be expected to hold
/// five times the rest of a page, at the least density of the last
/// [`RECENT_PAGES`] pages (which found nothing inside the box), for the
/// page to stop before it.
pub const GAP_MARGIN: u32 = 5;

/// Unbounded pages whose densities place `gap::gap_bound`'s gaps.
pub const RECENT_PAGES: usize = 4;

/// A page bounded by its run asks for at most this many times the items
/// expected in it (at the density of the runs read so far, plus a unit):
/// a gap it reads through may hold a cluster the density does not show,
/// and the Limit hands control back before it buys all of it.
pub const RUN_PAGE_SLACK: f64 = 4.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutoConfig {
    /// Limit of the first page, before any item size is known.
    pub probe_limit: u32,
    /// A box that is exactly this many Z-ranges or fewer is read range by
    /// range.
    pub exact_ranges: usize,
    pub max_limit: u32,
    /// The store's read unit: DynamoDB's 4 KB (smaller in tests, so that
    /// small items fill several units).
    pub unit_bytes: u32,
    /// Plan the ranges with the cost model when the query says what the
    /// partition holds (`costed`); not by default: it pays on even data
    /// and costs more than it saves on the aggregates measured so far
    /// (BENCHMARKS.md).
    pub costed: bool,
    /// In a needle box, stop a one-unit page before a gap of the box
    /// expected to hold this many times what the page has left of its
    /// Limit (`gap::gap_bound`): fewer items scanned, at the risk of a
    /// request where the gap held less. None: never.
    pub gap_margin: Option<u32>,
}

impl AutoConfig {
    /// `costed`: the cost model's ranges first, from the statistics. Its
    /// pages keep no gap bound: on the strategies bench the bound cost it
    /// more than it saved (56 of 58 within 1.1x with it, 57 without).
    pub fn costed() -> Self {
        AutoConfig { costed: true, gap_margin: None, ..AutoConfig::default() }
    }
}

impl Default for AutoConfig {
    fn default() -> Self {
        AutoConfig {
            probe_limit: 16,
            exact_ranges: 4,
            max_limit: 4096,
            unit_bytes: 4096,
            costed: false,
            gap_margin: Some(GAP_MARGIN),
        }
    }
}

/// What `auto` learned so far in one query.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Auto {
    /// Items per read unit, once an item was seen.
    unit: Option<u32>,
    /// Units per page.
    units: u32,
    /// Items inside the box, and the addresses they were found in, over
    /// the pages bounded by a run's end.
    seen: (f64, f64),
    /// Pages of several units cross the box's gaps, ended by their Limit
    /// and the end of the range of precise's cover they are in, rather
    /// than by the end of their run: a full, useful page crossed a gap,
    /// so the gaps here hold next to nothing.
    crossing: bool,
}

impl Auto {
    fn density(&self) -> Option<f64> {
        (self.seen.0 > 0.0 && self.seen.1 > 0.0).then(|| self.seen.0 / self.seen.1)
    }
}

/// Items that fit in one read unit at `mean` bytes each. Sized for items a
/// fifth larger than the mean, so that a page of varied items rarely spills
/// into a second unit.
fn items_per_unit(unit_bytes: u32, mean: f64) -> u32 {
    ((f64::from(unit_bytes) / (mean.max(1.0) * 1.2)).floor() as u32).max(1)
}

/// Units per page after a page of `scanned` items (`limit` asked), of
/// which `useful` were inside the box.
fn next_units(units: u32, limit: u32, scanned: u64, useful: u64, max_units: u32) -> u32 {
    if scanned >= u64::from(limit) && useful * 4 >= scanned * 3 {
        units.saturating_mul(2).min(max_units.max(1))
    } else if useful * 4 < scanned {
        1
    } else {
        units
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unit_holds_items_a_fifth_larger_than_the_mean() {
        assert_eq!(items_per_unit(4096, 100.0), 34, "4096 / 120");
        assert_eq!(items_per_unit(4096, 4096.0), 1);
        assert_eq!(items_per_unit(4096, 100_000.0), 1, "an item over 4 KB: one per page");
        assert_eq!(items_per_unit(4096, 0.0), 3413, "no size: as if one byte");
    }

    #[test]
    fn pages_grow_only_when_full_and_useful_and_drop_to_one_unit_on_garbage() {
        assert_eq!(next_units(2, 68, 68, 60, 64), 4, "full and useful: double");
        assert_eq!(next_units(2, 68, 40, 40, 64), 2, "not full (the range ended): keep");
        assert_eq!(next_units(32, 68, 68, 68, 40), 40, "capped");
        assert_eq!(next_units(8, 68, 68, 10, 64), 1, "mostly garbage: one unit");
        assert_eq!(next_units(8, 68, 68, 34, 64), 8, "in between: keep");
    }
}
