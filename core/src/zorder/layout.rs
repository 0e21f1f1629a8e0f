//! The bit layout of a Z-address: which dimension owns each bit.
//!
//! Bits are dealt round-robin from the most significant end, one per
//! dimension per round, in schema order; a dimension whose bits run out drops
//! out of the rotation (MSB-aligned interleaving, Z-order part 1). Every bit
//! position records its owner and which bit of the owner it carries, so all
//! algorithms work for unequal widths — nothing assumes `bit % dims`.
//!
//! Encoded dimension values are `u128` (a dimension is at most 128 bits); the
//! total width is unbounded.

use super::address::{words_for, ZAddress};
use thiserror::Error;

/// Largest width of one dimension.
pub const MAX_DIM_BITS: u32 = 128;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum LayoutError {
    #[error("a Z-layout needs at least one dimension")]
    NoDimensions,
    #[error("dimension {dim} has width {bits}: widths must be 1..={MAX_DIM_BITS} bits")]
    BadWidth { dim: usize, bits: u32 },
}

/// Owner table plus the precomputed masks and lookup tables built from it.
#[derive(Debug, Clone)]
pub struct Layout {
    widths: Vec<u32>,
    total_bits: u32,
    nwords: usize,
    /// `owner[pos]`: the dimension owning Z bit `pos` (0 = least significant).
    owner: Vec<u16>,
    /// `owner_bit[pos]`: which bit of the owner's value Z bit `pos` carries.
    owner_bit: Vec<u8>,
    /// `dim_positions[d][i]`: Z position of bit `i` of dimension `d`.
    dim_positions: Vec<Vec<u32>>,
    /// Per dimension: every Z position it owns.
    dim_masks: Vec<ZAddress>,
    /// Per position `pos`: positions `<= pos` owned by `owner[pos]`.
    owner_le_masks: Vec<ZAddress>,
    /// Per position `pos`: positions `< pos` owned by `owner[pos]`.
    owner_lt_masks: Vec<ZAddress>,
    /// Interleave tables: for dimension `d`, byte `j` of its value (0 = least
    /// significant), the Z bits of every byte value, flattened as
    /// `[(table_offset[d] + j) * 256 + byte] * nwords + word`.
    spread: Vec<u64>,
    table_offset: Vec<usize>,
    /// PDEP plan: runs of one dimension's bits that land in one word.
    deposit: Vec<DepositRun>,
    use_pdep: bool,
}

impl Layout {
    /// Builds the layout for dimensions of the given widths, in schema order
    /// (the first dimension owns the most significant bit).
    pub fn new(widths: &[u32]) -> Result<Self, LayoutError> {
        if widths.is_empty() {
            return Err(LayoutError::NoDimensions);
        }
        for (dim, &bits) in widths.iter().enumerate() {
            if bits == 0 || bits > MAX_DIM_BITS {
                return Err(LayoutError::BadWidth { dim, bits });
            }
        }
        let total_bits: u32 = widths.iter().sum();
        let nwords = words_for(total_bits);
        let ndims = widths.len();

        // Deal positions from the top: round r gives bit (w - 1 - r) of each
        // dimension that still has bits.
        let mut owner = vec![0u16; total_bits as usize];
        let mut owner_bit = vec![0u8; total_bits as usize];
        let mut dim_positions: Vec<Vec<u32>> = widths.iter().map(|&w| vec![0; w as usize]).collect();
        let mut pos = total_bits;
        let max_w = *widths.iter().max().unwrap_or(&0);
        for r in 0..max_w {
            for (d, &w) in widths.iter().enumerate() {
                if r < w {
                    pos -= 1;
                    let b = w - 1 - r;
                    owner[pos as usize] = d as u16;
                    owner_bit[pos as usize] = b as u8;
                    dim_positions[d][b as usize] = pos;
                }
            }
        }
        debug_assert_eq!(pos, 0);

        let mut dim_masks = vec![ZAddress::zero(nwords); ndims];
        for (d, positions) in dim_positions.iter().enumerate() {
            for &p in positions {
                dim_masks[d].set_bit(p);
            }
        }
        let mut owner_le_masks = Vec::with_capacity(total_bits as usize);
        let mut owner_lt_masks = Vec::with_capacity(total_bits as usize);
        for p in 0..total_bits {
            let d = owner[p as usize] as usize;
            let mut lt = ZAddress::zero(nwords);
            for &q in &dim_positions[d] {
                if q < p {
                    lt.set_bit(q);
                }
            }
            let mut le = lt.clone();
            le.set_bit(p);
            owner_lt_masks.push(lt);
            owner_le_masks.push(le);
        }

        let mut table_offset = Vec::with_capacity(ndims);
        let mut nslots = 0;
        for &w in widths {
            table_offset.push(nslots);
            nslots += w.div_ceil(8) as usize;
        }
        let mut spread = vec![0u64; nslots * 256 * nwords];
        for (d, positions) in dim_positions.iter().enumerate() {
            for j in 0..positions.len().div_ceil(8) {
                for byte in 0..256usize {
                    let mut z = ZAddress::zero(nwords);
                    for k in 0..8 {
                        let bit = j * 8 + k;
                        if byte >> k & 1 == 1 && bit < positions.len() {
                            z.set_bit(positions[bit]);
                        }
                    }
                    let at = ((table_offset[d] + j) * 256 + byte) * nwords;
                    spread[at..at + nwords].copy_from_slice(&z.words);
                }
            }
        }

        let mut deposit: Vec<DepositRun> = Vec::new();
        for (d, positions) in dim_positions.iter().enumerate() {
            for (i, &p) in positions.iter().enumerate() {
                let word = nwords - 1 - (p / 64) as usize;
                match deposit.last_mut() {
                    Some(run) if run.dim == d && run.word == word => {
                        run.len += 1;
                        run.mask |= 1u64 << (p % 64);
                    }
                    _ => deposit.push(DepositRun { dim: d, word, first: i as u32, len: 1, mask: 1u64 << (p % 64) }),
                }
            }
        }

        Ok(Layout {
            deposit,
            use_pdep: pdep_is_available(),
            widths: widths.to_vec(),
            total_bits,
            nwords,
            owner,
            owner_bit,
            dim_positions,
            dim_masks,
            owner_le_masks,
            owner_lt_masks,
            spread,
            table_offset,
        })
    }

    pub fn widths(&self) -> &[u32] {
        &self.widths
    }

    pub fn dims(&self) -> usize {
        self.widths.len()
    }

    /// Total Z-address width in bits.
    pub fn total_bits(&self) -> u32 {
        self.total_bits
    }

    /// Length of the big-endian byte form of an address.
    pub fn byte_len(&self) -> usize {
        super::address::bytes_for(self.total_bits)
    }

    pub fn nwords(&self) -> usize {
        self.nwords
    }

    /// Owner dimension of Z bit `pos` and which of its bits it carries.
    pub fn owner_of(&self, pos: u32) -> (usize, u32) {
        (self.owner[pos as usize] as usize, self.owner_bit[pos as usize] as u32)
    }

    /// Z positions owned by dimension `d`.
    pub fn dim_mask(&self, d: usize) -> &ZAddress {
        &self.dim_masks[d]
    }

    pub(crate) fn owner_le_mask(&self, pos: u32) -> &ZAddress {
        &self.owner_le_masks[pos as usize]
    }

    pub(crate) fn owner_lt_mask(&self, pos: u32) -> &ZAddress {
        &self.owner_lt_masks[pos as usize]
    }

    /// Number of bits of dimension `d` among the `k` least significant Z bits.
    pub fn dim_bits_below(&self, d: usize, k: u32) -> u32 {
        // Positions of a dimension increase with its bit index.
        self.dim_positions[d].partition_point(|&p| p < k) as u32
    }

    /// The all-zero address of this layout's width.
    pub fn zero(&self) -> ZAddress {
        ZAddress::zero(self.nwords)
    }

    /// The largest address of this layout.
    pub fn max_address(&self) -> ZAddress {
        ZAddress::ones(self.total_bits)
    }

    /// Interleaves encoded dimension values into a Z-address.
    ///
    /// Values must fit their widths (encoders guarantee it); excess high bits
    /// are ignored.
    pub fn interleave(&self, values: &[u128]) -> ZAddress {
        let mut z = self.zero();
        self.interleave_into(values, &mut z.words);
        z
    }

    /// Allocation-free interleave into `out` (`nwords` words, overwritten).
    #[inline]
    pub fn interleave_into(&self, values: &[u128], out: &mut [u64]) {
        debug_assert_eq!(values.len(), self.widths.len());
        debug_assert_eq!(out.len(), self.nwords);
        #[cfg(target_arch = "x86_64")]
        if self.use_pdep {
            // SAFETY: `use_pdep` is true only when the CPU reports BMI2.
            unsafe { self.interleave_pdep(values, out) };
            return;
        }
        self.interleave_tables(values, out);
    }

    /// Interleave by parallel bit deposit: one PDEP per (dimension, word).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "bmi2")]
    unsafe fn interleave_pdep(&self, values: &[u128], out: &mut [u64]) {
        use std::arch::x86_64::_pdep_u64;
        out.fill(0);
        for run in &self.deposit {
            let bits = (values[run.dim] >> run.first) as u64 & (u64::MAX >> (64 - run.len));
            out[run.word] |= _pdep_u64(bits, run.mask);
        }
    }

    /// Interleave by byte lookup tables (portable; also the reference the
    /// PDEP path is tested against).
    pub fn interleave_tables(&self, values: &[u128], out: &mut [u64]) {
        out.fill(0);
        let nw = self.nwords;
        for (d, (&v, &w)) in values.iter().zip(&self.widths).enumerate() {
            let base = self.table_offset[d];
            for j in 0..w.div_ceil(8) as usize {
                let byte = (v >> (8 * j)) as u8 as usize;
                let at = ((base + j) * 256 + byte) * nw;
                let row = &self.spread[at..at + nw];
                for (o, r) in out.iter_mut().zip(row) {
                    *o |= r;
                }
            }
        }
    }

    /// The encoded value of every dimension (inverse of `interleave`).
    pub fn deinterleave(&self, z: &ZAddress) -> Vec<u128> {
        (0..self.dims()).map(|d| self.dim_value(z, d)).collect()
    }

    /// The encoded value of dimension `d` in `z`.
    pub fn dim_value(&self, z: &ZAddress, d: usize) -> u128 {
        let mut v = 0u128;
        for (b, &p) in self.dim_positions[d].iter().enumerate() {
            v |= (z.bit(p) as u128) << b;
        }
        v
    }
}

/// Bits `first..first + len` of dimension `dim` go to the set bits of
/// `mask` in word `word`.
#[derive(Debug, Clone, Copy)]
struct DepositRun {
    dim: usize,
    word: usize,
    first: u32,
    len: u32,
    mask: u64,
}

/// PDEP is fast on Intel since Haswell and AMD since Zen 3; Zen 1/2
/// microcode it (slower than the tables), so they keep the tables.
fn pdep_is_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        if !std::is_x86_feature_detected!("bmi2") {
            return false;
        }
        // CPUID leaves 0 and 1 exist on every x86_64 CPU.
        let (vendor, family) = {
            use std::arch::x86_64::__cpuid;
            let l0 = __cpuid(0);
            let l1 = __cpuid(1);
            let family = ((l1.eax >> 8) & 0xf) + ((l1.eax >> 20) & 0xff);
            (l0.ebx, family)
        };
        const AUTH: u32 = u32::from_le_bytes(*b"Auth"); // AuthenticAMD
                                                        // Zen 3 is family 0x19; Zen 1/2 are 0x17.
        vendor != AUTH || family >= 0x19
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_000_equal_widths() {
        // x = 97, y = 214, one byte each, y first: 1011011000101001 = 46,633.
        let l = Layout::new(&[8, 8]).unwrap();
        let z = l.interleave(&[214, 97]);
        assert_eq!(z.to_u128(), Some(46_633));
        assert_eq!(l.deinterleave(&z), vec![214, 97]);
    }

    #[test]
    fn seed_000_unequal_widths() {
        // y = 54,813 on 16 bits, x = 97 on 8 bits: 101101100010100100011101.
        let l = Layout::new(&[16, 8]).unwrap();
        let z = l.interleave(&[54_813, 97]);
        assert_eq!(z.to_u128(), Some(11_938_077));
        assert_eq!(l.deinterleave(&z), vec![54_813, 97]);
    }

    #[test]
    fn owner_table_drops_exhausted_dimensions() {
        let l = Layout::new(&[3, 1, 2]).unwrap();
        // Rounds from the top: [a2 b0 c1] [a1 c0] [a0].
        let owners: Vec<_> = (0..6).rev().map(|p| l.owner_of(p)).collect();
        assert_eq!(owners, vec![(0, 2), (1, 0), (2, 1), (0, 1), (2, 0), (0, 0)]);
        assert_eq!(l.dim_bits_below(0, 1), 1);
        assert_eq!(l.dim_bits_below(2, 2), 1);
        assert_eq!(l.dim_bits_below(1, 6), 1);
    }

    #[test]
    fn wide_layouts_round_trip() {
        let widths = [128, 100, 64, 3, 90];
        let l = Layout::new(&widths).unwrap();
        assert_eq!(l.total_bits(), 385);
        let vals = [u128::MAX, (1 << 100) - 7, 0xdead_beef_0123_4567, 5, (1 << 89) + 12345];
        let z = l.interleave(&vals);
        assert_eq!(l.deinterleave(&z), vals.to_vec());
        let bytes = z.to_bytes(l.total_bits());
        assert_eq!(bytes.len(), 49);
    }

    #[test]
    fn pdep_and_tables_agree() {
        let l = Layout::new(&[34, 24, 24, 8, 1, 128]).unwrap();
        let mut x = 0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c834u128;
        for _ in 0..1000 {
            x = x.wrapping_mul(0x2545_f491_4f6c_dd1d_2545_f491_4f6c_dd1d).wrapping_add(1);
            let vals: Vec<u128> = l.widths().iter().map(|&w| if w == 128 { x } else { x & ((1 << w) - 1) }).collect();
            let (mut a, mut b) = (vec![0; l.nwords()], vec![0; l.nwords()]);
            l.interleave_into(&vals, &mut a);
            l.interleave_tables(&vals, &mut b);
            assert_eq!(a, b);
        }
    }

    #[test]
    fn rejects_bad_widths() {
        assert_eq!(Layout::new(&[]).unwrap_err(), LayoutError::NoDimensions);
        assert_eq!(Layout::new(&[4, 0]).unwrap_err(), LayoutError::BadWidth { dim: 1, bits: 0 });
        assert!(Layout::new(&[129]).is_err());
    }
}
