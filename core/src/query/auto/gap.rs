//! Where a one-unit page of `auto` may stop before a gap of the box in a
//! needle box: the items of the gap are saved without another request.

use crate::zorder::{Overlap, ZAddress, ZBox};
use std::collections::VecDeque;

/// The density [`gap_bound`] places gaps at: the least of the last
/// unbounded pages', and only while none of them found an item inside the
/// box (a needle: its pages only look for where to jump). Where they do
/// find items, the box's gaps are those between the clumps the data forms
/// (on the demo store: other referrers, other days of the month), which
/// hold fewer items than the pages' density says: a bound there costs a
/// request (docs/benchmarks/strategies.md, "Gating the gap bound").
pub(super) fn gap_density(recent: &VecDeque<(f64, u64)>) -> Option<f64> {
    if recent.iter().any(|&(_, inside)| inside > 0) {
        return None;
    }
    let rho = recent.iter().map(|&(rho, _)| rho).fold(f64::INFINITY, f64::min);
    (rho.is_finite() && rho > 0.0).then_some(rho)
}

/// Where a one-unit page of `limit` items from `from` may stop for free:
/// the end of the box's run before the first gap that the page is expected
/// (at `rho` items per address) to reach with fewer than `limit` items and
/// that is expected to hold `margin` times what the page has left. The
/// page would have ended inside that gap anyway; stopping before it saves
/// the gap's items and costs no request. Gaps are found as aligned blocks
/// outside the box, level by level.
pub(super) fn gap_bound(zbox: &ZBox, from: &ZAddress, limit: f64, rho: f64, margin: f64) -> Option<ZAddress> {
    let bits = zbox.layout().total_bits();
    let reach = limit / rho;
    let mut best: Option<ZAddress> = None;
    for j in 0..bits {
        let size = 2f64.powi(j as i32);
        let w = from.saturating_add_f64((reach - size / margin).max(0.0), zbox.max());
        let mut p = w.clone();
        for q in 0..j {
            p.clear_bit(q);
        }
        let mut step = ZAddress::zero(p.nwords());
        step.set_bit(j);
        if p < w {
            p = p.checked_add(&step)?;
        }
        for _ in 0..3 {
            if p.span_f64(from) > reach || p > *zbox.max() {
                break;
            }
            if zbox.classify_block(&p, j) == Overlap::Disjoint {
                if let Some(b) = zbox.litmax(&p).filter(|b| b >= from) {
                    let before = rho * (b.span_f64(from) + 1.0);
                    let gap = zbox.next_jump_in(&p).map_or(f64::INFINITY, |s| rho * (s.span_f64(&b) - 1.0));
                    if before + gap / margin >= limit && best.as_ref().is_none_or(|x| b < *x) {
                        best = Some(b);
                    }
                }
                break;
            }
            match p.checked_add(&step) {
                Some(n) => p = n,
                None => break,
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_are_placed_at_the_least_recent_density_only_while_no_recent_page_found_the_box() {
        let pages = |v: &[(f64, u64)]| v.iter().copied().collect::<VecDeque<_>>();
        assert_eq!(gap_density(&pages(&[(0.5, 0), (0.25, 0), (2.0, 0)])), Some(0.25));
        assert_eq!(gap_density(&pages(&[(0.5, 0), (0.25, 1), (2.0, 0)])), None, "one page found an item");
        assert_eq!(gap_density(&pages(&[])), None, "no page yet");
        assert_eq!(gap_density(&pages(&[(0.0, 0)])), None, "an empty page says nothing of a gap");
    }

    #[test]
    fn a_page_stops_before_a_gap_only_where_the_gap_is_expected_to_hold_the_rest_of_it() {
        use crate::zorder::Layout;
        use std::sync::Arc;
        // Z-order part 1's box: runs 11, 14-15, 33, 36-37 of a 6-bit space.
        let zbox = ZBox::new(Arc::new(Layout::new(&[3, 3]).unwrap()), vec![3, 1], vec![4, 3]).unwrap();
        let at = |v| ZAddress::from_u128(v, 6);
        // A quarter of an item per address, a Limit of 4: the page reaches
        // about address 27. 11..15 holds ~1.25 items, the gap 16..32 ~4.25.
        let bound = |margin| gap_bound(&zbox, &at(11), 4.0, 0.25, margin).map(|b| b.to_u128().unwrap());
        assert_eq!(bound(1.0), Some(15), "1.25 + 4.25 >= 4: the page would have ended in the gap");
        assert_eq!(bound(2.0), None, "1.25 + 4.25 / 2 < 4: it might have crossed it");
        // The 2-address gap 12..13 (~0.5 items) never holds the rest.
        assert_eq!(gap_bound(&zbox, &at(11), 4.0, 0.25, 0.2).map(|b| b.to_u128().unwrap()), Some(15));
        // Two items an address: 11 holds ~2, the gap 12..13 ~4, where the
        // Limit ends the page: stop at 11.
        assert_eq!(gap_bound(&zbox, &at(11), 4.0, 2.0, 1.0).map(|b| b.to_u128().unwrap()), Some(11));
        // Eight: the Limit ends the page at address 11 itself: no bound.
        assert_eq!(gap_bound(&zbox, &at(11), 4.0, 8.0, 1.0), None);
    }
}
