//! A decomposition by cost: the Z-ranges that read a box for the fewest
//! read units, when how many items the partition holds is known (the
//! statistics ingest keeps) and they are taken to be spread evenly over
//! its addresses.
//!
//! A request costs its bytes in read units, at least one, and rounds up:
//! [`CostModel::cost`] of `n` expected items is `max(1, n / u + 1/2)` units
//! (`u` items a unit; the half is the expected rounding). Over the prefix
//! tree of aligned blocks (as in `decompose`):
//! - a block outside the box costs nothing;
//! - a block inside it is read whole;
//! - a straddling block is read whole (one request: its outside addresses'
//!   items are garbage) or split in its halves, whichever costs less; one
//!   expected to hold at most a unit is read whole, trimmed of a half the
//!   box misses (splitting it would buy a second request for nothing).
//!
//! Then neighbouring ranges are joined where one request for both, gap
//! included, costs less than two. The result covers the box (every range
//! is a union of blocks that meet it): only what it costs depends on the
//! model. Where the data is not even, a range may hold more or fewer items
//! than expected; it is still read whole, page by page.

use super::address::ZAddress;
use super::decompose::ZRange;
use super::zbox::{block_end, Overlap, ZBox};

/// How much of a unit a straddling block may be expected to hold before
/// it is read whole: finer blocks let the joins fill requests closer to
/// whole units.
const ATOM_UNITS: f64 = 0.5;

/// One range to read, and what the model expects of it.
#[derive(Debug, Clone, PartialEq)]
pub struct CostedRange {
    pub range: ZRange,
    /// Items expected in the range.
    pub items: f64,
    /// Of them, inside the box.
    pub inside: f64,
}

/// What the partition is expected to hold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostModel {
    /// The partition's items over its address space.
    pub items_per_address: f64,
    /// Items that fill one read unit.
    pub items_per_unit: f64,
}

impl CostModel {
    /// Expected read units of one request that scans `items` items.
    pub fn cost(&self, items: f64) -> f64 {
        (items / self.items_per_unit.max(1e-9) + 0.5).max(1.0)
    }
}

/// The ranges that read `zbox` for the fewest expected units under
/// `model` (greedily), and their expected cost; None when finding them
/// would visit more than `max_blocks` blocks (a box whose outline is that
/// fine).
pub fn costed_ranges(zbox: &ZBox, model: &CostModel, max_blocks: usize) -> Option<(Vec<CostedRange>, f64)> {
    let bits = zbox.layout().total_bits();
    let (min, max) = (zbox.min(), zbox.max());
    let (root, k) = zbox.enclosing_block();
    let mut atoms = Vec::new();
    let mut visits = max_blocks;
    refine(zbox, model, root, k, &mut visits, &mut atoms)?;
    // In address order: join a range to the one before it where one
    // request for both, the gap between them included, costs no more
    // than two (always for neighbours).
    let d = model.items_per_address;
    let mut ranges: Vec<CostedRange> = Vec::with_capacity(atoms.len());
    for (r, inside) in atoms {
        let items = d * (r.hi.span_f64(&r.lo) + 1.0);
        if let Some(last) = ranges.last_mut() {
            let gap = (r.lo.span_f64(&last.range.hi) - 1.0).max(0.0);
            let together = last.items + items + gap * d;
            let adjacent = last.range.hi.checked_next(bits).as_ref() == Some(&r.lo);
            if adjacent || model.cost(together) <= model.cost(last.items) + model.cost(items) {
                last.range.hi = r.hi;
                last.items = together;
                last.inside += d * inside;
                continue;
            }
        }
        ranges.push(CostedRange { range: r, items, inside: d * inside });
    }
    let cost: f64 = ranges.iter().map(|r| model.cost(r.items)).sum();
    // Joining greedily, pairwise, can miss that one range for all is
    // cheaper still.
    let items = d * (max.span_f64(min) + 1.0);
    if model.cost(items) <= cost {
        let inside = d * zbox.volume();
        return Some((
            vec![CostedRange { range: ZRange { lo: min.clone(), hi: max.clone() }, items, inside }],
            model.cost(items),
        ));
    }
    Some((ranges, cost))
}

/// The blocks to read, with their addresses inside the box, in address
/// order: inside ones whole; straddling ones split until they are expected
/// to hold at most [`ATOM_UNITS`] of a unit, then read from their first
/// address inside the box to their last.
fn refine(
    zbox: &ZBox,
    model: &CostModel,
    start: ZAddress,
    k: u32,
    visits: &mut usize,
    out: &mut Vec<(ZRange, f64)>,
) -> Option<()> {
    *visits = visits.checked_sub(1)?;
    match zbox.classify_block(&start, k) {
        Overlap::Disjoint => return Some(()),
        Overlap::Inside => {
            out.push((ZRange { hi: block_end(&start, k), lo: start }, 2f64.powi(k as i32)));
            return Some(());
        }
        Overlap::Partial => {}
    }
    if model.items_per_address * 2f64.powi(k as i32) <= model.items_per_unit * ATOM_UNITS {
        // Read whole from its first address inside the box (BIGMIN) to its
        // last (LITMAX): a straddling block has both.
        let end = block_end(&start, k);
        let inside = zbox.volume_in_block(&start, k);
        if let (Some(lo), Some(hi)) = (zbox.next_jump_in(&start), zbox.litmax(&end)) {
            out.push((ZRange { lo, hi }, inside));
        }
        return Some(());
    }
    let half = k - 1; // a straddling block has k >= 1
    let mut right = start.clone();
    right.set_bit(half);
    refine(zbox, model, start, half, visits, out)?;
    refine(zbox, model, right, half, visits, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zorder::Layout;
    use proptest::prelude::*;
    use std::sync::Arc;

    fn covered(ranges: &[ZRange], z: u128) -> bool {
        ranges.iter().any(|r| r.lo.to_u128().unwrap() <= z && z <= r.hi.to_u128().unwrap())
    }

    proptest! {
        /// Every address of the box is in a range; ranges are sorted and
        /// disjoint; the cost is what the ranges cost, never above reading
        /// the box as one range.
        #[test]
        fn the_ranges_cover_the_box_and_cost_no_more_than_one_range(
            lo0 in 0u128..32, w0 in 0u128..32, lo1 in 0u128..32, w1 in 0u128..32,
            density in 0.001f64..4.0, per_unit in 1.0f64..64.0,
        ) {
            let layout = Arc::new(Layout::new(&[5, 5]).unwrap());
            let (hi0, hi1) = ((lo0 + w0).min(31), (lo1 + w1).min(31));
            let zbox = ZBox::new(layout.clone(), vec![lo0, lo1], vec![hi0, hi1]).unwrap();
            let model = CostModel { items_per_address: density, items_per_unit: per_unit };
            let (costed, cost) = costed_ranges(&zbox, &model, 1 << 20).unwrap();
            let ranges: Vec<ZRange> = costed.iter().map(|c| c.range.clone()).collect();
            let inside: f64 = costed.iter().map(|c| c.inside).sum();
            prop_assert!((inside - density * zbox.volume()).abs() < 1e-6 * inside.max(1.0), "the box's items, {inside}");
            for x in lo0..=hi0 {
                for y in lo1..=hi1 {
                    let z = layout.interleave(&[x, y]).to_u128().unwrap();
                    prop_assert!(covered(&ranges, z), "({x}, {y}) = {z} not covered");
                }
            }
            for w in ranges.windows(2) {
                prop_assert!(w[0].hi < w[1].lo, "sorted and disjoint");
            }
            let span = |r: &ZRange| r.hi.span_f64(&r.lo) + 1.0;
            let one = model.cost(span(&ZRange { lo: zbox.min().clone(), hi: zbox.max().clone() }) * density);
            prop_assert!(cost <= one + 1e-9, "{cost} > one range's {one}");
            let summed: f64 = ranges.iter().map(|r| model.cost(span(r) * density)).sum();
            prop_assert!((cost - summed).abs() < 1e-6 * summed.max(1.0), "{cost} is what its ranges cost, {summed}");
        }
    }

    #[test]
    fn a_thin_line_through_a_dense_space_costs_less_than_its_exact_runs_or_64_ranges() {
        // 2 x 10 bits, one item an address, 32 items a unit: the line
        // x = 300 is 1,024 runs of one address each; 64 ranges over it
        // read most of the space.
        let layout = Arc::new(Layout::new(&[10, 10]).unwrap());
        let zbox = ZBox::new(layout, vec![300, 0], vec![300, 1023]).unwrap();
        let model = CostModel { items_per_address: 1.0, items_per_unit: 32.0 };
        let (ranges, cost) = costed_ranges(&zbox, &model, 1 << 20).unwrap();
        assert!((ranges.iter().map(|r| r.inside).sum::<f64>() - 1024.0).abs() < 1e-9, "the line's 1,024 addresses");
        let span = |r: &ZRange| r.hi.span_f64(&r.lo) + 1.0;
        let of = |d: crate::zorder::Decomposition| d.ranges.iter().map(|r| model.cost(span(r))).sum::<f64>();
        let (runs, precise) =
            (of(crate::zorder::decompose(&zbox, usize::MAX)), of(crate::zorder::decompose(&zbox, 64)));
        assert!(cost < runs && cost < precise, "{cost} units against {runs} (runs) and {precise} (64 ranges)");
        // Blocks of 32 addresses, 4 or 8 of them on the line, each read
        // as one request of one and a half units.
        assert!(ranges.len() <= 256 && cost <= 1.5 * ranges.len() as f64, "{} ranges, {cost}", ranges.len());
    }

    #[test]
    fn too_fine_an_outline_gives_up() {
        let layout = Arc::new(Layout::new(&[10, 10]).unwrap());
        let zbox = ZBox::new(layout, vec![1, 1], vec![1000, 1000]).unwrap();
        let model = CostModel { items_per_address: 1.0, items_per_unit: 1.0 };
        assert!(costed_ranges(&zbox, &model, 10).is_none());
    }
}
