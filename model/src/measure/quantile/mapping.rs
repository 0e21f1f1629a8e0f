//! The fixed, exactly computable map from a magnitude to its bucket:
//! `m` buckets an octave whose edges are `2^(k/m)`, so consecutive edges
//! differ by `gamma = 2^(1/m)` and a bucket's representative is within
//! `(gamma - 1) / (gamma + 1)` of any value in it (the accuracy).
//!
//! Why not `floor(ln x / ln gamma)` (the DDSketch paper's, and the
//! `sketches-ddsketch` crate's): `ln` is not correctly rounded and differs
//! between libms, so a value near an edge could land in another bucket on
//! another machine, and equal sketches would stop being equal bytes. Here
//! the edges are computed once per `m` in integer fixed point (no libm),
//! and a value's bucket is found by integer compares of its f64 mantissa.

use std::sync::{Arc, Mutex, OnceLock};

/// Most buckets an octave: accuracy 0.0001 needs 3,466; the bound also
/// limits the table a decoder builds from stored bytes.
pub const MAX_BINS_PER_OCTAVE: u32 = 4096;
const MANTISSA_BITS: u32 = 52;
const MANTISSA_MASK: u64 = (1 << MANTISSA_BITS) - 1;
const EXPONENT_BIAS: u32 = 1023;
/// Magnitudes are at most `|i64::MIN| = 2^63`: bucket indexes are at most
/// `63 m`.
const MAX_EXPONENT: u32 = 63;

/// Buckets an octave for relative accuracy `a`: the least `m` with
/// `(gamma - 1) / (gamma + 1) <= a`, i.e. `ceil(ln 2 / ln((1 + a) / (1 - a)))`
/// (35 at 1 %, 18 at 2 %). Float `ln` is harmless here: it only picks `m`,
/// which every stored sketch records.
pub fn bins_per_octave_for(a: f64) -> u32 {
    let m = (std::f64::consts::LN_2 / ((1.0 + a) / (1.0 - a)).ln()).ceil();
    (m as u32).clamp(1, MAX_BINS_PER_OCTAVE)
}

/// The boundary table of one `m`, shared by all sketches with that `m`.
#[derive(Debug)]
struct Table {
    m: u32,
    /// `boundaries[k]` (k < m) = the 52 mantissa bits of `2^(k/m)` rounded
    /// to an f64;
    /// `boundaries[m] = 2^52` is a sentinel no mantissa reaches.
    boundaries: Box<[u64]>,
    /// `lut[b]` = bin of the smallest mantissa whose top bits are `b`. The
    /// LUT has at least `2m` entries, so each of its buckets holds at most one
    /// boundary and one more compare finishes the search (same result as a
    /// binary search over `boundaries`, in O(1)).
    lut: Box<[u16]>,
    shift: u32,
    /// Largest relative half-width `(hi-lo)/(hi+lo)` of a bin.
    accuracy: f64,
}

/// Fixed-point format of the table computation: 112 fractional bits.
const Q: u32 = 112;
const ONE_Q: u128 = 1 << Q;
/// `floor(ln 2 * 2^112)` (ln 2 = 0x0.b17217f7d1cf79abc9e3b39803f2f6af...).
const LN2_Q: u128 = 0xb172_17f7_d1cf_79ab_c9e3_b398_03f2;

/// `(a * b) >> Q` with a 256-bit intermediate; needs `a, b < 2^114`.
fn mul_q(a: u128, b: u128) -> u128 {
    const LO: u128 = u64::MAX as u128;
    let (a1, a0, b1, b0) = (a >> 64, a & LO, b >> 64, b & LO);
    // a*b = hi*2^128 + mid*2^64 + lo; mid < 2^115 cannot overflow.
    let (lo, mid, hi) = (a0 * b0, a1 * b0 + a0 * b1, a1 * b1);
    let (low, carry) = lo.overflowing_add((mid & LO) << 64);
    let high = hi + (mid >> 64) + u128::from(carry);
    (high << (128 - Q)) | (low >> Q)
}

/// `e^y` for `0 <= y < 1` in Q112, by its Taylor series (terms shrink
/// geometrically; the loop stops when they truncate to zero).
fn exp_q(y: u128) -> u128 {
    let (mut sum, mut term, mut n) = (ONE_Q, ONE_Q, 1u128);
    while term != 0 {
        term = mul_q(term, y) / n;
        sum += term;
        n += 1;
    }
    sum
}

impl Table {
    /// Boundaries with integer arithmetic only: `g = 2^(1/m) = e^(ln2/m)` in
    /// Q112, then `2^(k/m) = g^k` by repeated multiplication, each rounded to
    /// 52 fractional bits. No libm is involved, so the table (hence every
    /// bin index) is identical on every platform and compiler. The error
    /// before rounding is below 2^-94, so the result is the correctly rounded
    /// `2^(k/m)` except if that lies within 2^-94 of a rounding midpoint
    /// (tests confirm correct rounding against an independent 60-digit
    /// computation); `powf` agrees within one ulp.
    fn build(m: u32) -> Table {
        let mut boundaries = Vec::with_capacity(m as usize + 1);
        let g = exp_q(LN2_Q / u128::from(m));
        let mut v = ONE_Q;
        let round = Q - MANTISSA_BITS;
        for _ in 0..m {
            // v in [1, 2): round to 53 significant bits, keep the fraction.
            let b = ((v + (1 << (round - 1))) >> round) as u64;
            boundaries.push(b.min((1 << (MANTISSA_BITS + 1)) - 1) & MANTISSA_MASK);
            v = mul_q(v, g);
        }
        boundaries.push(1 << MANTISSA_BITS);
        let mut bits = 1;
        while (1u32 << bits) < 2 * m {
            bits += 1;
        }
        let shift = MANTISSA_BITS - bits;
        let mut lut = Vec::with_capacity(1 << bits);
        let mut j = 0usize;
        for b in 0..(1u64 << bits) {
            let start = b << shift;
            while boundaries[j + 1] <= start {
                j += 1;
            }
            lut.push(j as u16);
        }
        let edge = |b: u64| f64::from_bits((u64::from(EXPONENT_BIAS) << MANTISSA_BITS) + b);
        let accuracy =
            boundaries.windows(2).map(|w| (edge(w[1]) - edge(w[0])) / (edge(w[1]) + edge(w[0]))).fold(0.0, f64::max);
        Table { m, boundaries: boundaries.into(), lut: lut.into(), shift, accuracy }
    }
}

/// Process-wide cache so that the table is computed once per `m` and shared
/// (sketches are created per group in aggregations; rebuilding would cost
/// an exp series and `m` wide multiplications each time).
fn table_for(m: u32) -> Arc<Table> {
    static CACHE: OnceLock<Mutex<Vec<Arc<Table>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(Vec::new()));
    // A poisoned lock only means another thread panicked while pushing a
    // fully built table; the vector is still valid.
    let mut tables = cache.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(t) = tables.iter().find(|t| t.m == m) {
        return Arc::clone(t);
    }
    let t = Arc::new(Table::build(m));
    tables.push(Arc::clone(&t));
    t
}

/// The fixed, exactly computable map from a magnitude `x >= 1` to a bin.
///
/// `x` is converted to f64 (exact up to 2^53, rounded to nearest beyond,
/// which is fine: the rounding error is far below the bin width). With
/// `x = 2^e * 1.f`, the bin is `m*e + j` where `j` is the number of
/// boundaries `boundaries[1..m]` that are `<= f` (integer compares on the
/// mantissa bits). Bin `i = m*e + j` therefore covers the half-open f64 range
/// `[lo, hi)` with `lo = 2^e * 2^(j/m)` and `hi = 2^e * 2^((j+1)/m)` (both as
/// rounded into the table): **a value exactly on a boundary belongs to the
/// upper bin**. The index is monotone non-decreasing in `x` and independent
/// of any order of operations.
#[derive(Clone)]
pub struct Mapping {
    table: Arc<Table>,
}

impl Mapping {
    /// The mapping with `m` bins per octave (`1..=MAX_BINS_PER_OCTAVE`;
    /// None outside).
    pub fn new(bins_per_octave: u32) -> Option<Mapping> {
        (1..=MAX_BINS_PER_OCTAVE).contains(&bins_per_octave).then(|| Mapping { table: table_for(bins_per_octave) })
    }

    /// Bins per octave `m`.
    pub fn bins_per_octave(&self) -> u32 {
        self.table.m
    }

    /// Guaranteed relative accuracy: the largest `(hi-lo)/(hi+lo)` over the
    /// bins of the table, i.e. `(gamma-1)/(gamma+1)` with `gamma = 2^(1/m)`
    /// up to the rounding of the edges (~1e-16).
    pub fn accuracy(&self) -> f64 {
        self.table.accuracy
    }

    /// Largest index a magnitude of an `i64` can map to (`2^63`).
    pub fn max_index(&self) -> u32 {
        MAX_EXPONENT * self.table.m
    }

    /// Bin index of magnitude `x` (`x = 0` is treated as 1; sketches route
    /// zeros to their own counter and never call this with 0).
    #[inline]
    pub fn index(&self, x: u64) -> u32 {
        let t = &*self.table;
        let bits = (x.max(1) as f64).to_bits();
        let e = ((bits >> MANTISSA_BITS) as u32).wrapping_sub(EXPONENT_BIAS);
        let mant = bits & MANTISSA_MASK;
        let mut j = usize::from(t.lut[(mant >> t.shift) as usize]);
        // One branch-free step suffices (<= 1 boundary per LUT bucket); the
        // loop is a never-taken safety net. The sentinel bounds both.
        j += usize::from(mant >= t.boundaries[j + 1]);
        while mant >= t.boundaries[j + 1] {
            j += 1;
        }
        e * t.m + j as u32
    }

    /// The f64 edges `[lo, hi)` of bin `index` (`index <= 64*m`).
    pub fn bin_bounds(&self, index: u32) -> (f64, f64) {
        let t = &*self.table;
        let e = u64::from(index / t.m);
        let j = (index % t.m) as usize;
        let base = (e + u64::from(EXPONENT_BIAS)) << MANTISSA_BITS;
        // `+` (not `|`) so that the sentinel 2^52 carries into the exponent.
        let lo = f64::from_bits(base + t.boundaries[j]);
        let hi = f64::from_bits(base + t.boundaries[j + 1]);
        (lo, hi)
    }

    /// Representative value of bin `index`: `2*lo*hi/(lo+hi)`, the point with
    /// equal relative error to both edges, so every `x` in the bin is within
    /// `(hi-lo)/(hi+lo) = (gamma-1)/(gamma+1)` of it relative to `x`.
    pub fn representative(&self, index: u32) -> f64 {
        let (lo, hi) = self.bin_bounds(index);
        2.0 * lo * hi / (lo + hi)
    }

    /// Reference implementation of [`Mapping::index`] by plain binary
    /// search, kept for tests.
    #[cfg(test)]
    fn index_by_binary_search(&self, x: u64) -> u32 {
        let t = &*self.table;
        let bits = (x.max(1) as f64).to_bits();
        let e = ((bits >> MANTISSA_BITS) as u32).wrapping_sub(EXPONENT_BIAS);
        let mant = bits & MANTISSA_MASK;
        let j = t.boundaries[..t.m as usize].partition_point(|&b| b <= mant) - 1;
        e * t.m + j as u32
    }
}

impl PartialEq for Mapping {
    fn eq(&self, other: &Mapping) -> bool {
        self.table.m == other.table.m
    }
}

impl Eq for Mapping {}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Mapping({} an octave)", self.table.m)
    }
}

#[cfg(test)]
mod tests;
