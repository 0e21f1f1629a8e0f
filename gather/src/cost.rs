//! What reading a plan costs before it runs, two ways: the requests, the
//! round trips a report waits for one after another, the read units, and
//! so how long it takes. The planner (`choice::choose`) takes the fastest
//! way within an RCU allowance, not only the cheapest: a dashboard waits
//! for sequential round trips, and reading a little garbage in a few big
//! pages can answer sooner than jumping over it in many small ones.
//!
//! The window's items of a query's partition are taken to be spread evenly
//! over the addresses of the box's time range (every value of the other
//! dimensions), and the rest of its bin's items (the statistics') over the
//! other addresses:
//! - **auto**: the ranges `zorder::costed_ranges` picks for the box (the
//!   fewest read units; what `auto` reads when the statistics are known),
//!   each a request or more (1 MB pages), one after the other; a box no
//!   filter narrows, or a small partition, is read whole, as `auto` does;
//! - **naive**: the box's whole Z-range, `[min, max]`, in 1 MB pages: more
//!   units where the box leaves gaps, few requests.
//!
//! Queries run `concurrency` at a time, each reading its requests in
//! sequence, so the round trips are the longest chain or the requests
//! over the concurrency, whichever is more.

use crate::plan::{Read, Reading, Way};
use zigzag_core::zorder::{costed_ranges, CostModel, ZBox};

/// What an allowance is, by default: the cheapest reading's RCU. A way is
/// taken for speed only where it is estimated no dearer: the estimates
/// rank ways within a few times of the truth (BENCHMARKS.md, "The planner
/// weighs round trips"), and on a live table one that read a whole
/// partition where `auto` read a value's runs cost ten times the units.
pub const DEFAULT_ALLOWANCE: f64 = 1.0;
const PAGE_BYTES: f64 = 1_048_576.0;
const UNIT_BYTES: f64 = 4096.0;
/// Blocks `costed_ranges` may visit per box (a box whose outline is finer
/// is estimated as naive reads it).
const COSTED_BLOCKS: usize = 1 << 14;

/// One query's requests and units.
#[derive(Debug, Clone, Copy, Default)]
struct PerQuery {
    requests: f64,
    rcu: f64,
}

fn pages(items: f64, item_bytes: f64) -> f64 {
    (items * item_bytes / PAGE_BYTES).ceil().max(1.0)
}

/// What a query's partition holds, to estimate from.
#[derive(Debug, Clone, Copy)]
struct Held {
    /// The items of the box's time range.
    window: f64,
    /// The partition's other items (the rest of its bin, by the
    /// statistics; None: as dense as the window).
    rest: Option<f64>,
}

/// Addresses of the box's time slab: its time range, every value of the
/// other dimensions.
fn slab_box(zbox: &ZBox) -> Option<ZBox> {
    let widths = zbox.layout().widths();
    let lo: Vec<u128> = std::iter::once(zbox.lo()[0]).chain(widths[1..].iter().map(|_| 0)).collect();
    let hi: Vec<u128> = std::iter::once(zbox.hi()[0])
        .chain(widths[1..].iter().map(|&w| if w >= 128 { u128::MAX } else { (1u128 << w) - 1 }))
        .collect();
    ZBox::new(zbox.layout().clone(), lo, hi).ok()
}

fn volume(zbox: &ZBox) -> f64 {
    zbox.lo().iter().zip(zbox.hi()).map(|(l, h)| (h - l) as f64 + 1.0).product()
}

/// Items per address inside the box's time slab.
fn density(zbox: &ZBox, held: Held) -> f64 {
    held.window / slab_box(zbox).map_or(1.0, |s| volume(&s)).max(1.0)
}

/// The box's whole Z-range: its addresses in the time slab at the
/// window's density, the others at the rest of the partition's.
fn naive(zbox: &ZBox, held: Held, item_bytes: f64) -> PerQuery {
    let range = zbox.max().span_f64(zbox.min()) + 1.0;
    let d_in = density(zbox, held);
    let read = match (held.rest, slab_box(zbox)) {
        (Some(rest), Some(slab)) => {
            let total = 2f64.powi(zbox.layout().total_bits() as i32);
            let d_out = rest.max(0.0) / (total - volume(&slab)).max(1.0);
            // The slab's addresses lie spread over its own Z-span: the
            // range holds the share of that span it overlaps.
            let (lo, hi) = (zbox.min().max(slab.min()), zbox.max().min(slab.max()));
            let overlap = if lo > hi { 0.0 } else { hi.span_f64(lo) + 1.0 };
            let inside = volume(&slab) * overlap / (slab.max().span_f64(slab.min()) + 1.0);
            // At most what the slab holds, and the rest of the partition.
            (d_in * inside).min(held.window) + (d_out * (range - inside).max(0.0)).min(rest.max(0.0))
        }
        _ => d_in * range,
    };
    PerQuery { requests: pages(read, item_bytes), rcu: (read * item_bytes / UNIT_BYTES).max(1.0) * 0.5 }
}

fn auto(zbox: &ZBox, held: Held, item_bytes: f64) -> Option<PerQuery> {
    let model = CostModel { items_per_address: density(zbox, held), items_per_unit: UNIT_BYTES / item_bytes };
    let (ranges, units) = costed_ranges(zbox, &model, COSTED_BLOCKS)?;
    let requests = ranges.iter().map(|r| pages(r.items, item_bytes)).sum();
    Some(PerQuery { requests, rcu: units * 0.5 })
}

/// One read of a plan and what its span holds: the items over all its
/// queries (the candidate's estimate) and, per box, the items its whole
/// bin holds (the statistics'; None: unknown).
pub struct ReadHeld<'a> {
    pub read: &'a Read,
    pub items: f64,
    pub bin_items: Vec<Option<f64>>,
}

/// Both ways of reading every query of a plan's `reads` (run together,
/// `concurrency` at a time), items of `item_bytes` each.
pub fn readings(reads: &[ReadHeld<'_>], item_bytes: f64, concurrency: usize) -> [Reading; 2] {
    let mut totals = [(Way::Auto, 0.0, 0.0, 0.0f64), (Way::Naive, 0.0, 0.0, 0.0f64)];
    for held in reads {
        let plan = held.read;
        let per_query = held.items / plan.queries.len().max(1) as f64;
        // Every box is read from the same partitions: estimate a box once.
        let partitions = (plan.queries.len() / plan.boxes.len().max(1)).max(1) as f64;
        let boxes: Vec<(PerQuery, PerQuery)> = plan
            .boxes
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let rest = held.bin_items.get(i).copied().flatten().map(|bin| bin / partitions - per_query);
                let held = Held { window: per_query, rest };
                let naive = naive(&b.zbox, held, item_bytes);
                // What `auto` reads whole (`execute::strategy_for`): a box no
                // filter narrows, a partition of a few units. (Estimated so
                // even where `strategy_for` probes a box holding a small share
                // of its partition: `auto`'s estimate of such a time slab
                // runs several times what it reads, BENCHMARKS.md "Time
                // ranges", and would make the planner read it naively.)
                let partition = held.window + held.rest.unwrap_or(0.0);
                let whole = plan.spans_all_but_time.get(i).copied().unwrap_or(false)
                    || partition * item_bytes <= crate::execute::WHOLE_PARTITION_BYTES;
                match whole {
                    true => (naive, naive),
                    false => (auto(&b.zbox, held, item_bytes).unwrap_or(naive), naive),
                }
            })
            .collect();
        for q in &plan.queries {
            let Some(b) = boxes.get(q.box_index) else { continue };
            for (k, one) in [b.0, b.1].into_iter().enumerate() {
                let t = &mut totals[k];
                t.1 += one.requests;
                t.2 += one.rcu;
                t.3 = t.3.max(one.requests);
            }
        }
    }
    totals.map(|(way, requests, rcu, longest)| Reading {
        way,
        requests,
        rcu,
        rounds: longest.max(requests / concurrency.max(1) as f64),
    })
}

/// The reading to take of `options` (every candidate's two): the fastest
/// within `allowance` RCU (None: [`DEFAULT_ALLOWANCE`] times the cheapest
/// reading's), fewer units between equally fast ones; the cheapest when
/// none is within it. Returns its index.
pub fn fastest_within(options: &[Reading], allowance: Option<f64>) -> Option<usize> {
    let cheapest = options.iter().map(|r| r.rcu).fold(f64::INFINITY, f64::min);
    let budget = allowance.unwrap_or(cheapest * DEFAULT_ALLOWANCE).max(cheapest);
    let key = |r: &Reading| (r.rounds.ceil(), r.rcu);
    options
        .iter()
        .enumerate()
        .filter(|(_, r)| r.rcu <= budget)
        .min_by(|(_, a), (_, b)| key(a).partial_cmp(&key(b)).unwrap_or(std::cmp::Ordering::Equal))
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use zigzag_core::zorder::Layout;

    fn zbox(lo: Vec<u128>, hi: Vec<u128>) -> ZBox {
        ZBox::new(Arc::new(Layout::new(&[10, 12, 12]).unwrap()), lo, hi).unwrap()
    }

    #[test]
    fn a_whole_slab_costs_the_same_both_ways() {
        let b = zbox(vec![0, 0, 0], vec![1023, 4095, 4095]);
        let held = Held { window: 100_000.0, rest: None };
        let (a, n) = (auto(&b, held, 100.0).unwrap(), naive(&b, held, 100.0));
        assert!((a.rcu - n.rcu).abs() / n.rcu < 0.01, "{a:?} {n:?}");
        assert_eq!(n.requests, 10.0, "10 MB in 1 MB pages");
    }

    #[test]
    fn a_thin_box_is_cheaper_by_auto_and_fewer_requests_by_naive() {
        // One value of the last dimension (its bits the lowest of each
        // triple): many runs, each tiny.
        let b = zbox(vec![0, 0, 7], vec![1023, 4095, 7]);
        let held = Held { window: 2_000_000.0, rest: Some(0.0) };
        let (a, n) = (auto(&b, held, 100.0).unwrap(), naive(&b, held, 100.0));
        assert!(a.rcu < n.rcu, "auto reads fewer units: {a:?} {n:?}");
        assert!(a.requests > n.requests, "naive makes fewer requests: {a:?} {n:?}");
    }

    #[test]
    fn the_fastest_within_the_allowance_and_the_cheapest_beyond_it() {
        let r = |way, rounds, rcu| Reading { way, requests: rounds, rounds, rcu };
        let options = [r(Way::Auto, 30.0, 100.0), r(Way::Naive, 1.0, 160.0)];
        assert_eq!(fastest_within(&options, Some(200.0)), Some(1), "1.6x the units, 30x fewer round trips");
        assert_eq!(fastest_within(&options, None), Some(0), "by default, no dearer than the cheapest");
        assert_eq!(fastest_within(&options, Some(150.0)), Some(0), "beyond the allowance");
        let options = [r(Way::Auto, 30.0, 100.0), r(Way::Naive, 1.0, 90.0)];
        assert_eq!(fastest_within(&options, None), Some(1), "faster and cheaper");
        assert_eq!(fastest_within(&options, Some(10.0)), Some(1), "none within: the cheapest");
        let options = [r(Way::Auto, 3.0, 100.0), r(Way::Naive, 3.0, 120.0)];
        assert_eq!(fastest_within(&options, None), Some(0), "as fast: fewer units");
    }
}
