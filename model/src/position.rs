//! Stream positions. Kinesis sequence numbers are decimal strings of up to
//! 56 digits in practice (more than a u128), so [`SeqNo`] is 256 bits,
//! ordered numerically; KPL-aggregated records add a sub-sequence number.

use std::fmt;
use std::str::FromStr;
use thiserror::Error;

/// A sequence number: an unsigned integer below 2^256.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SeqNo {
    hi: u128,
    lo: u128,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{0:?} is not a sequence number (decimal digits, below 2^256)")]
pub struct BadSeqNo(pub String);

impl SeqNo {
    pub const ZERO: SeqNo = SeqNo { hi: 0, lo: 0 };

    pub fn from_u128(v: u128) -> Self {
        SeqNo { hi: 0, lo: v }
    }

    /// The value when it fits in a u64 (synthetic streams, files).
    pub fn as_u64(&self) -> Option<u64> {
        (self.hi == 0).then_some(self.lo).and_then(|v| u64::try_from(v).ok())
    }

    fn mul10_add(self, d: u8) -> Option<Self> {
        // (hi, lo) * 10 + d with carries, in 64-bit limbs to see overflow.
        let limbs = [self.lo as u64, (self.lo >> 64) as u64, self.hi as u64, (self.hi >> 64) as u64];
        let mut out = [0u64; 4];
        let mut carry = d as u128;
        for i in 0..4 {
            let v = limbs[i] as u128 * 10 + carry;
            out[i] = v as u64;
            carry = v >> 64;
        }
        (carry == 0)
            .then(|| SeqNo { lo: out[0] as u128 | (out[1] as u128) << 64, hi: out[2] as u128 | (out[3] as u128) << 64 })
    }

    fn divmod10(self) -> (Self, u8) {
        let limbs = [(self.hi >> 64) as u64, self.hi as u64, (self.lo >> 64) as u64, self.lo as u64];
        let mut out = [0u64; 4];
        let mut rem: u128 = 0;
        for i in 0..4 {
            let v = (rem << 64) | limbs[i] as u128;
            out[i] = (v / 10) as u64;
            rem = v % 10;
        }
        let q = SeqNo { hi: (out[0] as u128) << 64 | out[1] as u128, lo: (out[2] as u128) << 64 | out[3] as u128 };
        (q, rem as u8)
    }
}

impl FromStr for SeqNo {
    type Err = BadSeqNo;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() || s.len() > 78 {
            return Err(BadSeqNo(s.to_string()));
        }
        let mut v = SeqNo::ZERO;
        for b in s.bytes() {
            if !b.is_ascii_digit() {
                return Err(BadSeqNo(s.to_string()));
            }
            v = v.mul10_add(b - b'0').ok_or_else(|| BadSeqNo(s.to_string()))?;
        }
        Ok(v)
    }
}

impl fmt::Display for SeqNo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.hi == 0 {
            return write!(f, "{}", self.lo);
        }
        let mut digits = Vec::with_capacity(78);
        let mut v = *self;
        while v != SeqNo::ZERO {
            let (q, r) = v.divmod10();
            digits.push(b'0' + r);
            v = q;
        }
        digits.reverse();
        f.write_str(std::str::from_utf8(&digits).map_err(|_| fmt::Error)?)
    }
}

/// A record's place in its shard: sequence number, then sub-sequence number
/// (non-zero only inside KPL-aggregated records).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Position {
    pub seq: SeqNo,
    pub sub: u32,
}

impl Position {
    pub fn new(seq: SeqNo, sub: u32) -> Self {
        Position { seq, sub }
    }

    pub fn at(seq: u64) -> Self {
        Position { seq: SeqNo::from_u128(seq as u128), sub: 0 }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.sub == 0 {
            write!(f, "{}", self.seq)
        } else {
            write!(f, "{}.{}", self.seq, self.sub)
        }
    }
}

impl FromStr for Position {
    type Err = BadSeqNo;

    /// The [`Display`](fmt::Display) form: `seq` or `seq.sub`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (seq, sub) = s.split_once('.').unwrap_or((s, "0"));
        let sub = sub.parse::<u32>().map_err(|_| BadSeqNo(s.to_string()))?;
        Ok(Position { seq: seq.parse().map_err(|_| BadSeqNo(s.to_string()))?, sub })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn positions_round_trip_as_text() {
        for p in [
            Position::at(7),
            Position::new("49590338271490256608559692538361571095921575989136588898".parse().unwrap(), 12),
        ] {
            assert_eq!(p.to_string().parse::<Position>(), Ok(p));
        }
        assert!("12.x".parse::<Position>().is_err());
        assert!(".3".parse::<Position>().is_err());
    }

    #[test]
    fn kinesis_sized_numbers() {
        let s = "49590338271490256608559692538361571095921575989136588898";
        let v: SeqNo = s.parse().unwrap();
        assert_eq!(v.to_string(), s);
        let next: SeqNo = "49590338271490256608559692538361571095921575989136588899".parse().unwrap();
        assert!(next > v);
        assert!("12a".parse::<SeqNo>().is_err());
        assert!("".parse::<SeqNo>().is_err());
        assert!("9".repeat(78).parse::<SeqNo>().is_err(), "above 2^256");
    }

    proptest! {
        #[test]
        fn order_is_numeric(a in "[1-9][0-9]{0,60}", b in "[1-9][0-9]{0,60}") {
            let (x, y): (SeqNo, SeqNo) = (a.parse().unwrap(), b.parse().unwrap());
            let numeric = a.len().cmp(&b.len()).then_with(|| a.cmp(&b));
            prop_assert_eq!(x.cmp(&y), numeric);
            prop_assert_eq!(x.to_string(), a);
        }
    }
}
