//! Range decomposition: the Z-ranges that cover a box.
//!
//! The Z space is a binary prefix tree; each node is an aligned block of
//! `2^k` addresses and is inside the box, outside it, or straddles it. A
//! breadth-first refinement keeps inside blocks as ranges (merging
//! neighbours), drops outside ones and splits straddling ones, level by level,
//! until nothing straddles (the result is exact) or the frontier grows past a
//! work cap (the straddling blocks are kept whole: a superset). Then, while
//! there are more ranges than the budget, the smallest gaps are closed, so the
//! result always covers the box.
//!
//! Also here: [`span_end_within_garbage`], which the adaptive strategy uses to
//! decide how far one request may reach.

use super::address::ZAddress;
use super::zbox::{block_end, Overlap, ZBox};

/// An inclusive range of Z-addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZRange {
    pub lo: ZAddress,
    pub hi: ZAddress,
}

#[derive(Debug, Clone)]
pub struct Decomposition {
    /// Sorted, disjoint, non-adjacent ranges whose union covers the box.
    pub ranges: Vec<ZRange>,
    /// True when the union is exactly the box (nothing outside it is covered).
    pub exact: bool,
}

enum Cell {
    Full(ZRange),
    Partial { start: ZAddress, k: u32 },
}

/// Decomposes `zbox` into at most `budget` ranges (at least one).
pub fn decompose(zbox: &ZBox, budget: usize) -> Decomposition {
    let budget = budget.max(1);
    // Refinement stops when the frontier would exceed this many cells; the
    // cost is O(cap * bits) and the result is then a (tight) superset.
    let cap = budget.saturating_mul(8).max(1024);
    let bits = zbox.layout().total_bits();

    let (root, k) = zbox.enclosing_block();
    let mut frontier = Vec::new();
    push_cell(&mut frontier, zbox, root, k, bits);

    let mut exact = true;
    while frontier.iter().any(|c| matches!(c, Cell::Partial { .. })) {
        let mut next = Vec::with_capacity(frontier.len() * 2);
        for cell in &frontier {
            match cell {
                Cell::Full(r) => push_full(&mut next, r.clone(), bits),
                Cell::Partial { start, k } => {
                    let half = k - 1;
                    let mut right = start.clone();
                    right.set_bit(half);
                    push_cell(&mut next, zbox, start.clone(), half, bits);
                    push_cell(&mut next, zbox, right, half, bits);
                }
            }
        }
        if next.len() > cap {
            exact = false;
            break;
        }
        frontier = next;
    }

    let mut ranges: Vec<ZRange> = Vec::with_capacity(frontier.len());
    for cell in frontier {
        let r = match cell {
            Cell::Full(r) => r,
            Cell::Partial { start, k } => ZRange { hi: block_end(&start, k), lo: start },
        };
        merge_push(&mut ranges, r, bits);
    }
    if ranges.len() > budget {
        exact = false;
        ranges = close_smallest_gaps(ranges, budget);
    }
    Decomposition { ranges, exact }
}

fn push_cell(out: &mut Vec<Cell>, zbox: &ZBox, start: ZAddress, k: u32, bits: u32) {
    match zbox.classify_block(&start, k) {
        Overlap::Disjoint => {}
        Overlap::Inside => push_full(out, ZRange { hi: block_end(&start, k), lo: start }, bits),
        Overlap::Partial => out.push(Cell::Partial { start, k }),
    }
}

fn push_full(out: &mut Vec<Cell>, r: ZRange, bits: u32) {
    if let Some(Cell::Full(last)) = out.last_mut() {
        if last.hi.checked_next(bits).as_ref() == Some(&r.lo) {
            last.hi = r.hi;
            return;
        }
    }
    out.push(Cell::Full(r));
}

fn merge_push(out: &mut Vec<ZRange>, r: ZRange, bits: u32) {
    if let Some(last) = out.last_mut() {
        if last.hi.checked_next(bits).as_ref() == Some(&r.lo) {
            last.hi = r.hi;
            return;
        }
    }
    out.push(r);
}

/// Merges neighbours across the `len - budget` smallest gaps.
fn close_smallest_gaps(ranges: Vec<ZRange>, budget: usize) -> Vec<ZRange> {
    let mut gaps: Vec<(f64, usize)> =
        ranges.windows(2).enumerate().map(|(i, w)| (w[1].lo.span_f64(&w[0].hi), i)).collect();
    gaps.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut close = vec![false; ranges.len()];
    for &(_, i) in gaps.iter().take(ranges.len() - budget) {
        close[i] = true;
    }
    let mut out: Vec<ZRange> = Vec::with_capacity(budget);
    let mut joining = false;
    for (i, r) in ranges.into_iter().enumerate() {
        match out.last_mut() {
            Some(last) if joining => last.hi = r.hi,
            _ => out.push(r),
        }
        joining = close[i];
    }
    out
}

/// How far may a request that starts at `start` (inside the box) reach, if
/// it may cover at most `garbage` addresses outside the box? Returns the
/// largest `end <= limit` such that `[start, end]` holds at most that many
/// outside addresses. Greedy over the aligned blocks that tile `[start, limit]`:
/// take a block whole when its outside volume fits, else descend into its
/// lower half. O(bits) blocks, each O(bits).
pub fn span_end_within_garbage(zbox: &ZBox, start: &ZAddress, limit: &ZAddress, garbage: f64) -> ZAddress {
    let bits = zbox.layout().total_bits();
    let mut remaining = garbage;
    let mut cur = start.clone();
    loop {
        let mut k = cur.trailing_zeros().min(bits);
        while k > 0 && block_end(&cur, k) > *limit {
            k -= 1;
        }
        loop {
            let outside = 2f64.powi(k as i32) - zbox.volume_in_block(&cur, k);
            if outside <= remaining {
                remaining -= outside;
                break;
            }
            if k == 0 {
                // `cur` itself is outside and over budget: stop just before it.
                return cur.checked_prev().filter(|p| p >= start).unwrap_or_else(|| start.clone());
            }
            k -= 1;
        }
        let end = block_end(&cur, k);
        if end >= *limit {
            return limit.clone();
        }
        cur = end.checked_next(bits).expect("end < limit");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zorder::Layout;
    use std::sync::Arc;

    fn seed_box() -> ZBox {
        // Z-order part 1: x in 1..=3, y in 3..=4, three bits each, y interleaved first.
        let layout = Arc::new(Layout::new(&[3, 3]).unwrap());
        ZBox::new(layout, vec![3, 1], vec![4, 3]).unwrap()
    }

    fn as_u128(d: &Decomposition) -> Vec<(u128, u128)> {
        d.ranges.iter().map(|r| (r.lo.to_u128().unwrap(), r.hi.to_u128().unwrap())).collect()
    }

    #[test]
    fn seed_000_example_ranges() {
        let zb = seed_box();
        assert_eq!(zb.min().to_u128(), Some(11));
        assert_eq!(zb.max().to_u128(), Some(37));
        let d = decompose(&zb, 100);
        assert!(d.exact);
        assert_eq!(as_u128(&d), vec![(11, 11), (14, 15), (33, 33), (36, 37)]);
    }

    #[test]
    fn seed_000_next_jump_in() {
        let zb = seed_box();
        let probe = ZAddress::from_u128(16, 6);
        assert_eq!(zb.next_jump_in(&probe).unwrap().to_u128(), Some(33));
        assert_eq!(zb.litmax(&probe).unwrap().to_u128(), Some(15));
    }

    #[test]
    fn budget_closes_smallest_gaps() {
        let zb = seed_box();
        // Gaps: 11..14 (2 addresses), 15..33 (17), 33..36 (2).
        let d = decompose(&zb, 2);
        assert!(!d.exact);
        assert_eq!(as_u128(&d), vec![(11, 15), (33, 37)]);
        let d = decompose(&zb, 1);
        assert_eq!(as_u128(&d), vec![(11, 37)]);
    }

    #[test]
    fn garbage_span() {
        let zb = seed_box();
        let max = zb.max().clone();
        let at = |v| ZAddress::from_u128(v, 6);
        // No garbage allowed: stop at the end of the run 11..11.
        assert_eq!(span_end_within_garbage(&zb, &at(11), &max, 0.0).to_u128(), Some(11));
        // Two outside addresses (12, 13) fit: run on through 14..15, stop before 16.
        assert_eq!(span_end_within_garbage(&zb, &at(11), &max, 2.0).to_u128(), Some(15));
        // Enough for everything.
        assert_eq!(span_end_within_garbage(&zb, &at(11), &max, 1e9).to_u128(), Some(37));
    }
}
