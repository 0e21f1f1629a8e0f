//! A query box in encoded space and the three questions asked of it:
//! `is_relevant` (is this Z-address inside?), `next_jump_in` (BIGMIN: the
//! smallest address inside that is `>=` a probe) and `litmax` (the largest
//! address inside that is `<=` a probe).
//!
//! BIGMIN/LITMAX follow Tropf & Herzog: walk the bits from the top, and where
//! the box splits in the owner dimension of a bit, either narrow the box to
//! the half holding the probe or return. "Narrowing" rewrites only the bits
//! of that one dimension below the split (the owner masks of the layout),
//! which is what makes unequal widths correct. Bits where probe, min and max
//! agree are skipped in one step.
//!
//! Per-dimension comparisons use a property of the interleave: masking a
//! Z-address to one dimension's bits keeps that dimension's order, so
//! `z & M_d <= max & M_d` compares dimension `d` without deinterleaving.

use super::address::ZAddress;
use super::layout::Layout;
use std::cmp::Ordering;
use std::sync::Arc;
use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum BoxError {
    #[error("the box has {got} bounds but the layout has {want} dimensions")]
    Arity { got: usize, want: usize },
    #[error("dimension {dim}: lower bound {lo} is above upper bound {hi}")]
    Inverted { dim: usize, lo: u128, hi: u128 },
    #[error("dimension {dim}: bound {value} does not fit in {bits} bits")]
    TooWide { dim: usize, value: u128, bits: u32 },
}

/// An axis-aligned box `[lo_d, hi_d]` per dimension, inclusive, in encoded space.
#[derive(Debug, Clone)]
pub struct ZBox {
    layout: Arc<Layout>,
    lo: Vec<u128>,
    hi: Vec<u128>,
    min: ZAddress,
    max: ZAddress,
}

impl ZBox {
    pub fn new(layout: Arc<Layout>, lo: Vec<u128>, hi: Vec<u128>) -> Result<Self, BoxError> {
        let want = layout.dims();
        if lo.len() != want || hi.len() != want {
            return Err(BoxError::Arity { got: lo.len().min(hi.len()), want });
        }
        for (dim, (&l, &h)) in lo.iter().zip(&hi).enumerate() {
            let bits = layout.widths()[dim];
            for value in [l, h] {
                if bits < 128 && value >> bits != 0 {
                    return Err(BoxError::TooWide { dim, value, bits });
                }
            }
            if l > h {
                return Err(BoxError::Inverted { dim, lo: l, hi: h });
            }
        }
        let min = layout.interleave(&lo);
        let max = layout.interleave(&hi);
        Ok(ZBox { layout, lo, hi, min, max })
    }

    /// The box covering the whole space of a layout.
    pub fn everything(layout: Arc<Layout>) -> Self {
        let lo = vec![0; layout.dims()];
        let hi = layout.widths().iter().map(|&w| dim_max(w)).collect();
        Self::new(layout, lo, hi).expect("full box is valid")
    }

    pub fn layout(&self) -> &Arc<Layout> {
        &self.layout
    }

    /// Z-address of the box's lower corner: the smallest address inside.
    pub fn min(&self) -> &ZAddress {
        &self.min
    }

    /// Z-address of the upper corner: the largest address inside.
    pub fn max(&self) -> &ZAddress {
        &self.max
    }

    pub fn lo(&self) -> &[u128] {
        &self.lo
    }

    pub fn hi(&self) -> &[u128] {
        &self.hi
    }

    /// Number of addresses inside the box (a float: it may exceed 2^128).
    pub fn volume(&self) -> f64 {
        self.lo.iter().zip(&self.hi).map(|(&l, &h)| (h - l) as f64 + 1.0).product()
    }

    /// Z-order part 2's estimate of the addresses a query visits: `n^((a-b)/a)`
    /// with `n = 2^bits`, `a` dimensions and `b` the bound dimensions, each
    /// counted by the share of its bits the bound fixes
    /// (`1 - log2(range) / width`; 1 for an exact value, 0 for unbound).
    pub fn seed_001_estimate(&self) -> f64 {
        let widths = self.layout.widths();
        let a = widths.len() as f64;
        let b: f64 = widths
            .iter()
            .zip(self.lo.iter().zip(&self.hi))
            .map(|(&w, (&l, &h))| 1.0 - ((h - l) as f64 + 1.0).log2() / w as f64)
            .sum();
        2f64.powf(self.layout.total_bits() as f64 * (a - b) / a)
    }

    /// Is `z` inside the box?
    pub fn is_relevant(&self, z: &ZAddress) -> bool {
        (0..self.layout.dims()).all(|d| {
            let m = self.layout.dim_mask(d);
            z.cmp_masked(&self.min, m) != Ordering::Less && z.cmp_masked(&self.max, m) != Ordering::Greater
        })
    }

    /// BIGMIN: the smallest address inside the box that is `>= probe`, or
    /// `None` when every address of the box is below the probe.
    pub fn next_jump_in(&self, probe: &ZAddress) -> Option<ZAddress> {
        let layout = &*self.layout;
        let mut lo = self.min.clone();
        let mut hi = self.max.clone();
        let mut candidate: Option<ZAddress> = None;
        loop {
            let Some(q) = highest_disagreement(probe, &lo, &hi) else {
                // Probe, min and max agree on every remaining bit: inside.
                return Some(probe.clone());
            };
            match (probe.bit(q), lo.bit(q), hi.bit(q)) {
                // The box splits here and the probe is in the lower half: the
                // upper half's minimum is a candidate; continue in the lower.
                (false, false, true) => {
                    candidate = Some(load_ones_from(&lo, layout, q));
                    hi = load_zeros_from(&hi, layout, q);
                }
                // The whole (narrowed) box is above the probe.
                (false, true, true) => return Some(lo),
                // The whole (narrowed) box is below the probe.
                (true, false, false) => return candidate,
                // The box splits and the probe is in the upper half.
                (true, false, true) => lo = load_ones_from(&lo, layout, q),
                // lo > hi in a dimension cannot happen for a valid box, and
                // the remaining patterns agree at q by construction.
                _ => unreachable!("bit {q}: inconsistent box"),
            }
        }
    }

    /// LITMAX: the largest address inside the box that is `<= probe`, or
    /// `None` when every address of the box is above the probe.
    pub fn litmax(&self, probe: &ZAddress) -> Option<ZAddress> {
        let layout = &*self.layout;
        let mut lo = self.min.clone();
        let mut hi = self.max.clone();
        let mut candidate: Option<ZAddress> = None;
        loop {
            let Some(q) = highest_disagreement(probe, &lo, &hi) else {
                return Some(probe.clone());
            };
            match (probe.bit(q), lo.bit(q), hi.bit(q)) {
                // Split, probe in the upper half: the lower half's maximum is a
                // candidate; continue in the upper half.
                (true, false, true) => {
                    candidate = Some(load_zeros_from(&hi, layout, q));
                    lo = load_ones_from(&lo, layout, q);
                }
                (true, false, false) => return Some(hi),
                (false, true, true) => return candidate,
                (false, false, true) => hi = load_zeros_from(&hi, layout, q),
                _ => unreachable!("bit {q}: inconsistent box"),
            }
        }
    }

    /// The smallest aligned block holding the whole box: its first address
    /// and `k` (it holds `2^k` addresses), the root of the prefix tree the
    /// decompositions refine.
    pub(crate) fn enclosing_block(&self) -> (ZAddress, u32) {
        let mut diff = self.min.clone();
        for (d, m) in diff.words.iter_mut().zip(self.max.words.iter()) {
            *d ^= m;
        }
        let k = diff.highest_bit().map_or(0, |h| h + 1);
        let mut root = self.min.clone();
        for p in 0..k {
            root.clear_bit(p);
        }
        (root, k)
    }

    /// Number of addresses inside the box among the aligned block of `2^k`
    /// addresses starting at `start` (whose low `k` bits must be zero).
    pub fn volume_in_block(&self, start: &ZAddress, k: u32) -> f64 {
        let layout = &*self.layout;
        let mut vol = 1.0;
        for d in 0..layout.dims() {
            let free = layout.dim_bits_below(d, k);
            let v = layout.dim_value(start, d);
            let span = if free >= 128 { u128::MAX } else { (1u128 << free) - 1 };
            let (blo, bhi) = (v & !span, v | span);
            let (l, h) = (blo.max(self.lo[d]), bhi.min(self.hi[d]));
            if l > h {
                return 0.0;
            }
            vol *= (h - l) as f64 + 1.0;
        }
        vol
    }

    /// Number of addresses inside the box among `lo..=hi` (0 when
    /// `hi < lo`), summed over the aligned blocks that tile the range.
    pub fn volume_in_range(&self, lo: &ZAddress, hi: &ZAddress) -> f64 {
        let bits = self.layout.total_bits();
        let mut vol = 0.0;
        let mut cur = lo.clone();
        while cur <= *hi {
            let mut k = cur.trailing_zeros().min(bits);
            while k > 0 && block_end(&cur, k) > *hi {
                k -= 1;
            }
            vol += self.volume_in_block(&cur, k);
            match block_end(&cur, k).checked_next(bits) {
                Some(next) => cur = next,
                None => break,
            }
        }
        vol
    }

    /// Classifies the aligned block of `2^k` addresses at `start` against the box.
    pub(crate) fn classify_block(&self, start: &ZAddress, k: u32) -> Overlap {
        let layout = &*self.layout;
        let end = block_end(start, k);
        let mut inside = true;
        for d in 0..layout.dims() {
            let m = layout.dim_mask(d);
            if end.cmp_masked(&self.min, m) == Ordering::Less || start.cmp_masked(&self.max, m) == Ordering::Greater {
                return Overlap::Disjoint;
            }
            if start.cmp_masked(&self.min, m) == Ordering::Less || end.cmp_masked(&self.max, m) == Ordering::Greater {
                inside = false;
            }
        }
        if inside {
            Overlap::Inside
        } else {
            Overlap::Partial
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Overlap {
    Disjoint,
    Partial,
    Inside,
}

/// The largest value of a `bits`-wide dimension.
#[inline]
pub fn dim_max(bits: u32) -> u128 {
    if bits >= 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    }
}

/// Last address of the aligned block of `2^k` addresses at `start`.
pub(crate) fn block_end(start: &ZAddress, k: u32) -> ZAddress {
    let mut end = start.clone();
    for p in 0..k {
        end.set_bit(p);
    }
    end
}

/// Highest bit where not all of `probe`, `lo`, `hi` agree.
#[inline]
fn highest_disagreement(probe: &ZAddress, lo: &ZAddress, hi: &ZAddress) -> Option<u32> {
    let n = lo.words.len();
    for i in 0..n {
        let diff = (probe.words[i] ^ lo.words[i]) | (lo.words[i] ^ hi.words[i]);
        if diff != 0 {
            return Some(((n - 1 - i) as u32) * 64 + 63 - diff.leading_zeros());
        }
    }
    None
}

/// "1000…": set bit `q` and clear the lower bits of its owner dimension.
#[inline]
fn load_ones_from(z: &ZAddress, layout: &Layout, q: u32) -> ZAddress {
    let mut out = z.clone();
    out.andnot_assign(layout.owner_le_mask(q));
    out.set_bit(q);
    out
}

/// "0111…": clear bit `q` and set the lower bits of its owner dimension.
#[inline]
fn load_zeros_from(z: &ZAddress, layout: &Layout, q: u32) -> ZAddress {
    let mut out = z.clone();
    out.andnot_assign(layout.owner_le_mask(q));
    out.or_assign(layout.owner_lt_mask(q));
    out
}
