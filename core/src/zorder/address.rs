//! `ZAddress`: a fixed-width unsigned integer of any number of bits.
//!
//! Stored as 64-bit words, most significant word first, value right-aligned
//! (bit 0 is the least significant bit of the last word). With that order the
//! derived `Ord` on the word vector is numeric order, and the big-endian byte
//! form (`to_bytes`) sorts the same way as unsigned bytes, which is how
//! DynamoDB and SQLite order binary sort keys.
//!
//! Width is not stored: every address handled together comes from one
//! [`Layout`](super::Layout), which knows the width. Up to 256 bits live
//! inline without allocation.

use smallvec::SmallVec;
use std::fmt;

pub(crate) type Words = SmallVec<[u64; 4]>;

#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ZAddress {
    pub(crate) words: Words,
}

impl ZAddress {
    /// All-zero address of `nwords` words.
    pub fn zero(nwords: usize) -> Self {
        ZAddress { words: SmallVec::from_elem(0, nwords) }
    }

    /// The address whose low `bits` bits are all ones.
    pub fn ones(bits: u32) -> Self {
        let mut z = Self::zero(words_for(bits));
        for p in 0..bits {
            z.set_bit(p);
        }
        z
    }

    /// Builds an address from a small number (tests, examples).
    pub fn from_u128(value: u128, bits: u32) -> Self {
        let mut z = Self::zero(words_for(bits));
        for p in 0..bits.min(128) {
            if value >> p & 1 == 1 {
                z.set_bit(p);
            }
        }
        z
    }

    /// The value as a `u128` if it fits.
    pub fn to_u128(&self) -> Option<u128> {
        let n = self.words.len();
        if self.words[..n.saturating_sub(2)].iter().any(|&w| w != 0) {
            return None;
        }
        let lo = self.words[n - 1] as u128;
        let hi = if n >= 2 { self.words[n - 2] as u128 } else { 0 };
        Some(hi << 64 | lo)
    }

    /// The words, most significant first (for allocation-free writers).
    pub fn words_mut(&mut self) -> &mut [u64] {
        &mut self.words
    }

    pub fn nwords(&self) -> usize {
        self.words.len()
    }

    #[inline]
    fn locate(&self, pos: u32) -> (usize, u32) {
        (self.words.len() - 1 - (pos / 64) as usize, pos % 64)
    }

    /// Bit at significance `pos` (0 = least significant).
    #[inline]
    pub fn bit(&self, pos: u32) -> bool {
        let (w, b) = self.locate(pos);
        self.words[w] >> b & 1 == 1
    }

    #[inline]
    pub fn set_bit(&mut self, pos: u32) {
        let (w, b) = self.locate(pos);
        self.words[w] |= 1 << b;
    }

    #[inline]
    pub fn clear_bit(&mut self, pos: u32) {
        let (w, b) = self.locate(pos);
        self.words[w] &= !(1 << b);
    }

    pub fn is_zero(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// Significance of the highest set bit, or `None` for zero.
    #[inline]
    pub fn highest_bit(&self) -> Option<u32> {
        let n = self.words.len();
        for (i, &w) in self.words.iter().enumerate() {
            if w != 0 {
                return Some(((n - 1 - i) as u32) * 64 + 63 - w.leading_zeros());
            }
        }
        None
    }

    /// Number of trailing zero bits (the whole width for zero).
    pub fn trailing_zeros(&self) -> u32 {
        let mut tz = 0;
        for &w in self.words.iter().rev() {
            if w != 0 {
                return tz + w.trailing_zeros();
            }
            tz += 64;
        }
        tz
    }

    /// `self + 1`, or `None` when that exceeds `bits` bits.
    pub fn checked_next(&self, bits: u32) -> Option<Self> {
        let mut z = self.clone();
        for w in z.words.iter_mut().rev() {
            let (v, carry) = w.overflowing_add(1);
            *w = v;
            if !carry {
                return (z.highest_bit().map_or(0, |h| h + 1) <= bits).then_some(z);
            }
        }
        None
    }

    /// `self - 1`, or `None` for zero.
    pub fn checked_prev(&self) -> Option<Self> {
        if self.is_zero() {
            return None;
        }
        let mut z = self.clone();
        for w in z.words.iter_mut().rev() {
            let (v, borrow) = w.overflowing_sub(1);
            *w = v;
            if !borrow {
                break;
            }
        }
        Some(z)
    }

    /// `self + n` (`n >= 0`, rounded down), or `cap` when the sum would
    /// pass it.
    pub fn saturating_add_f64(&self, n: f64, cap: &Self) -> Self {
        // NaN and anything under one address: no step.
        if n.is_nan() || n < 1.0 {
            return self.clone().min(cap.clone());
        }
        let len = self.words.len();
        let word = 18446744073709551616.0_f64;
        let mut step = Self::zero(len);
        let mut rest = n.floor();
        for i in 0..len {
            let scale = word.powi((len - 1 - i) as i32);
            let w = (rest / scale).floor();
            if w >= word {
                return cap.clone();
            }
            step.words[i] = w as u64;
            rest = (rest - w * scale).max(0.0);
        }
        match self.checked_add(&step) {
            Some(sum) if sum <= *cap => sum,
            _ => cap.clone(),
        }
    }

    /// `self + other`, or None when it overflows the words.
    pub fn checked_add(&self, other: &Self) -> Option<Self> {
        let mut sum = self.clone();
        let mut carry = false;
        for (s, &a) in sum.words.iter_mut().rev().zip(other.words.iter().rev()) {
            let (v1, c1) = s.overflowing_add(a);
            let (v2, c2) = v1.overflowing_add(carry as u64);
            *s = v2;
            carry = c1 || c2;
        }
        (!carry).then_some(sum)
    }

    /// `(self - other)` as a float (an estimate for huge spans); `self >= other`.
    pub fn span_f64(&self, other: &Self) -> f64 {
        // Exact up to 2^53, a close estimate beyond: fine for density planning.
        let mut diff = self.clone();
        let mut borrow = false;
        for (d, &o) in diff.words.iter_mut().rev().zip(other.words.iter().rev()) {
            let (v1, b1) = d.overflowing_sub(o);
            let (v2, b2) = v1.overflowing_sub(borrow as u64);
            *d = v2;
            borrow = b1 || b2;
        }
        diff.words.iter().fold(0.0, |acc, &w| acc * 18446744073709551616.0 + w as f64)
    }

    #[inline]
    pub(crate) fn andnot_assign(&mut self, mask: &Self) {
        for (a, b) in self.words.iter_mut().zip(mask.words.iter()) {
            *a &= !b;
        }
    }

    #[inline]
    pub(crate) fn or_assign(&mut self, other: &Self) {
        for (a, b) in self.words.iter_mut().zip(other.words.iter()) {
            *a |= b;
        }
    }

    /// Compares `self & mask` with `other & mask` without allocating.
    #[inline]
    pub(crate) fn cmp_masked(&self, other: &Self, mask: &Self) -> std::cmp::Ordering {
        for ((a, b), m) in self.words.iter().zip(other.words.iter()).zip(mask.words.iter()) {
            match (a & m).cmp(&(b & m)) {
                std::cmp::Ordering::Equal => continue,
                ord => return ord,
            }
        }
        std::cmp::Ordering::Equal
    }

    /// Big-endian bytes of a `bits`-wide value: `ceil(bits / 8)` bytes.
    /// Unsigned lexicographic order of the bytes is numeric order.
    pub fn to_bytes(&self, bits: u32) -> Vec<u8> {
        let nbytes = bytes_for(bits);
        let mut out = Vec::with_capacity(nbytes);
        self.write_bytes(bits, &mut out);
        out
    }

    /// Appends the big-endian bytes (see [`to_bytes`](Self::to_bytes)).
    pub fn write_bytes(&self, bits: u32, out: &mut Vec<u8>) {
        let nbytes = bytes_for(bits);
        let all = self.words.len() * 8;
        let skip = all - nbytes;
        let mut i = 0;
        for w in &self.words {
            for b in w.to_be_bytes() {
                if i >= skip {
                    out.push(b);
                }
                i += 1;
            }
        }
    }

    /// Parses the first `ceil(bits / 8)` bytes of `bytes`; `None` when too short
    /// or when a bit above `bits` is set.
    pub fn from_bytes(bytes: &[u8], bits: u32) -> Option<Self> {
        let nbytes = bytes_for(bits);
        if bytes.len() < nbytes {
            return None;
        }
        let nwords = words_for(bits);
        let mut z = Self::zero(nwords);
        let pad = nwords * 8 - nbytes;
        for (i, &b) in bytes[..nbytes].iter().enumerate() {
            let k = pad + i;
            z.words[k / 8] |= (b as u64) << (8 * (7 - k % 8));
        }
        if z.highest_bit().is_some_and(|h| h >= bits) {
            return None;
        }
        Some(z)
    }
}

impl fmt::Debug for ZAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Z(0x")?;
        for w in &self.words {
            write!(f, "{w:016x}")?;
        }
        write!(f, ")")
    }
}

/// Words needed for `bits` bits (at least one).
pub fn words_for(bits: u32) -> usize {
    (bits as usize).div_ceil(64).max(1)
}

/// Bytes needed for `bits` bits.
pub fn bytes_for(bits: u32) -> usize {
    (bits as usize).div_ceil(8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_round_trip_and_order() {
        for bits in [1u32, 7, 8, 9, 63, 64, 65, 90, 128, 129, 200] {
            let a = ZAddress::from_u128(5, bits);
            let b = ZAddress::from_u128(300 % (1u128 << bits.min(127)), bits);
            let ab = a.to_bytes(bits);
            assert_eq!(ab.len(), bytes_for(bits));
            assert_eq!(ZAddress::from_bytes(&ab, bits).unwrap(), a);
            assert_eq!(a.cmp(&b), a.to_bytes(bits).cmp(&b.to_bytes(bits)), "bits {bits}");
        }
    }

    #[test]
    fn next_prev_carry_across_words() {
        let bits = 130;
        let z = ZAddress::from_u128(u64::MAX as u128, bits);
        let n = z.checked_next(bits).unwrap();
        assert_eq!(n.to_u128(), Some(1u128 << 64));
        assert_eq!(n.checked_prev().unwrap(), z);
        assert!(ZAddress::ones(bits).checked_next(bits).is_none());
        assert!(ZAddress::ones(7).checked_next(7).is_none());
        assert!(ZAddress::zero(1).checked_prev().is_none());
    }

    #[test]
    fn from_bytes_rejects_bits_above_width() {
        assert!(ZAddress::from_bytes(&[0x80], 7).is_none());
        assert!(ZAddress::from_bytes(&[0x7f], 7).is_some());
        assert!(ZAddress::from_bytes(&[0x01], 9).is_none(), "too short");
    }

    #[test]
    fn highest_and_trailing() {
        let z = ZAddress::from_u128(1u128 << 70 | 1 << 3, 100);
        assert_eq!(z.highest_bit(), Some(70));
        assert_eq!(z.trailing_zeros(), 3);
        assert_eq!(ZAddress::zero(2).highest_bit(), None);
        assert_eq!(ZAddress::zero(2).trailing_zeros(), 128);
    }

    proptest::proptest! {
        #[test]
        fn checked_add_is_u128_addition(a in 0u128..(1 << 100), b in 0u128..(1 << 100)) {
            let (za, zb) = (ZAddress::from_u128(a, 101), ZAddress::from_u128(b, 101));
            let sum = za.checked_add(&zb).expect("101 bits fit in two words");
            proptest::prop_assert_eq!(sum.to_u128(), Some(a + b));
        }

        #[test]
        fn saturating_add_f64_steps_by_the_floor_and_stops_at_the_cap(
            a in 0u128..(1 << 60), n in 0.0f64..1e17, cap in 0u128..(1 << 62),
        ) {
            let z = ZAddress::from_u128(a, 64);
            let got = z.saturating_add_f64(n, &ZAddress::from_u128(cap, 64)).to_u128().unwrap();
            // Below 2^53 a float is an exact integer count of addresses.
            let want = if n < 1.0 { a.min(cap) } else { (a + n.floor() as u128).min(cap) };
            proptest::prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn additions_overflowing_the_words_are_refused_or_capped() {
        let top = ZAddress::ones(128);
        assert!(top.checked_add(&ZAddress::from_u128(1, 128)).is_none(), "a carry out of the top word");
        assert_eq!(ZAddress::zero(2).saturating_add_f64(1e40, &top), top, "past 2^128: the cap");
        let z = ZAddress::from_u128(5, 64);
        assert_eq!(z.saturating_add_f64(f64::NAN, &top), z, "NaN: no step");
    }

    #[test]
    fn span() {
        let a = ZAddress::from_u128(10, 70);
        let b = ZAddress::from_u128(1u128 << 65, 70);
        assert_eq!(b.span_f64(&a), ((1u128 << 65) - 10) as f64);
    }
}
