//! Order-preserving encodings (Z-order part 2): each maps a value to an unsigned
//! integer of the dimension's width such that value order is unsigned order
//! (weakly, for the lossy ones: truncated strings, quantized floats).
//!
//! Data values outside a dimension's range are errors, never wrapped. Query
//! bounds are different: a bound past the end of the domain is clamped to it
//! (see [`Side`]), because "everything up to +inf" is a fine question.

use super::time::{format_instant, TimeBin, TimeUnit};
use thiserror::Error;

/// A value to encode. Text is parsed per dimension type by the schema.
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    Int(i128),
    Float(f64),
    Str(&'a str),
    /// Milliseconds since the Unix epoch, UTC.
    Time(i64),
}

/// Which end of a query range a bound is: decides how out-of-domain bounds clamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Lower,
    Upper,
}

#[derive(Debug, Clone, PartialEq, Error)]
pub enum EncodeError {
    #[error("{value} is out of range {min}..={max}")]
    OutOfRange { value: String, min: String, max: String },
    #[error("expected {expected}, got {got}")]
    Type { expected: &'static str, got: String },
    #[error("NaN has no place in an ordered index")]
    NaN,
    #[error("{value:?} is not one of {allowed:?}")]
    UnknownEnum { value: String, allowed: Vec<String> },
    #[error("a hashed dimension supports equality only, not a range")]
    EqualityOnly,
    #[error("{0:?} is neither RFC 3339 nor an integer epoch")]
    BadTimestamp(String),
    /// Internal: a query bound beyond the domain on the side that empties it.
    #[error("the bound lies outside the domain: the range is empty")]
    Empty,
}

/// How a dimension encodes, with its width already validated.
#[derive(Debug, Clone, PartialEq)]
pub enum Encoding {
    Uint,
    Int,
    /// IEEE 754 single, top `bits` bits of the order-preserving form.
    F32,
    F64,
    /// Linear quantization of `[min, max]` into `2^bits` cells; `scale` is
    /// `2^bits / (max - min)` (see [`Encoding::scaled`]).
    Scaled {
        min: f64,
        max: f64,
        scale: f64,
    },
    Timestamp(TimeEncoding),
    /// Fixed-width UTF-8: `bytes` bytes, zero-padded or truncated.
    FixedStr {
        bytes: u32,
    },
    /// The top `bits` bits of xxh3-64 of the UTF-8 text: equality only.
    Hash,
    Enum {
        values: Vec<String>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct TimeEncoding {
    pub unit: TimeUnit,
    /// Offsets count from the start of the value's bin ...
    pub bin: Option<TimeBin>,
    /// ... or, without a bin, from this instant (ms).
    pub origin: i64,
    /// Unit of integer epochs in text input.
    pub epoch_unit: TimeUnit,
}

impl TimeEncoding {
    /// The instant offsets are counted from, for an instant `t`.
    pub fn base_of(&self, t: i64) -> i64 {
        match self.bin {
            Some(bin) => bin.start_of(t),
            None => self.origin,
        }
    }
}

/// Largest encoded value for `bits`.
#[inline]
pub(crate) fn max_for(bits: u32) -> u128 {
    crate::zorder::dim_max(bits)
}

impl Encoding {
    pub fn scaled(min: f64, max: f64, bits: u32) -> Self {
        Encoding::Scaled { min, max, scale: 2f64.powi(bits as i32) / (max - min) }
    }

    /// Encodes a data value: out of range is an error.
    #[inline]
    pub fn encode(&self, bits: u32, value: &Value) -> Result<u128, EncodeError> {
        self.encode_inner(bits, value, None)
    }

    /// Encodes a query bound: out of the domain clamps to its end, or gives
    /// `None` when the bound is past the end that empties the range (a lower
    /// bound above the domain, an upper bound below it).
    pub fn encode_bound(&self, bits: u32, value: &Value, side: Side) -> Result<Option<u128>, EncodeError> {
        match self.encode_inner(bits, value, Some(side)) {
            Ok(v) => Ok(Some(v)),
            Err(EncodeError::Empty) => Ok(None),
            Err(e) => Err(e),
        }
    }

    #[inline]
    fn encode_inner(&self, bits: u32, value: &Value, clamp: Option<Side>) -> Result<u128, EncodeError> {
        let max = max_for(bits);
        match (self, value) {
            (Encoding::Uint, Value::Int(v)) => {
                if *v < 0 || *v as u128 > max {
                    return clamp_or(clamp, *v < 0, max, || range_err(v, 0, max));
                }
                Ok(*v as u128)
            }
            (Encoding::Int, Value::Int(v)) => {
                let half = 1i128.checked_shl(bits - 1).unwrap_or(i128::MIN);
                let (lo, hi) = if bits == 128 { (i128::MIN, i128::MAX) } else { (-half, half - 1) };
                if *v < lo || *v > hi {
                    return clamp_or(clamp, *v < lo, max, || range_err(v, lo, hi));
                }
                // Flip the sign bit of the `bits`-wide two's complement.
                Ok((*v as u128 ^ (1u128 << (bits - 1))) & max)
            }
            (Encoding::F32, v) => {
                let f = as_float(v)? as f32;
                if f.is_nan() {
                    return Err(EncodeError::NaN);
                }
                let f = if f == 0.0 { 0.0f32 } else { f }; // -0 sorts with +0
                let u = f.to_bits();
                let ordered = if u >> 31 == 0 { u ^ (1 << 31) } else { !u };
                Ok((ordered >> (32 - bits)) as u128)
            }
            (Encoding::F64, v) => {
                let f = as_float(v)?;
                if f.is_nan() {
                    return Err(EncodeError::NaN);
                }
                let f = if f == 0.0 { 0.0 } else { f };
                let u = f.to_bits();
                let ordered = if u >> 63 == 0 { u ^ (1 << 63) } else { !u };
                Ok((ordered >> (64 - bits)) as u128)
            }
            (Encoding::Scaled { min, max: top, scale }, v) => {
                let f = as_float(v)?;
                if f.is_nan() {
                    return Err(EncodeError::NaN);
                }
                if f < *min || f > *top {
                    return clamp_or(clamp, f < *min, max, || range_err(&f, min, top));
                }
                // Truncation is floor here (non-negative); f64 -> u64 is one
                // instruction, f64 -> u128 a library call.
                let cell = (f - min) * scale;
                let cell = if bits <= 63 { cell as u64 as u128 } else { cell as u128 };
                Ok(cell.min(max))
            }
            (Encoding::Timestamp(te), Value::Time(t)) => {
                let base = te.base_of(*t);
                let offset = match te.unit {
                    TimeUnit::Millisecond => t - base,
                    unit => (t - base).div_euclid(unit.millis()),
                };
                if offset < 0 || offset as u128 > max {
                    let last = base + (max as i64).saturating_mul(te.unit.millis());
                    return clamp_or(clamp, offset < 0, max, || EncodeError::OutOfRange {
                        value: format_instant(*t),
                        min: format_instant(base),
                        max: format_instant(last),
                    });
                }
                Ok(offset as u128)
            }
            (Encoding::FixedStr { bytes }, Value::Str(s)) => {
                let mut v = 0u128;
                let raw = s.as_bytes();
                for i in 0..*bytes as usize {
                    v = v << 8 | *raw.get(i).unwrap_or(&0) as u128;
                }
                Ok(v)
            }
            (Encoding::Hash, Value::Str(s)) => Ok((xxhash_rust::xxh3::xxh3_64(s.as_bytes()) >> (64 - bits)) as u128),
            (Encoding::Enum { values }, Value::Str(s)) => values
                .iter()
                .position(|v| v == s)
                .map(|i| i as u128)
                .ok_or_else(|| EncodeError::UnknownEnum { value: s.to_string(), allowed: values.clone() }),
            (enc, v) => Err(EncodeError::Type { expected: enc.expects(), got: describe(v) }),
        }
    }

    /// What kind of value this encoding takes, for messages.
    pub fn expects(&self) -> &'static str {
        match self {
            Encoding::Uint | Encoding::Int => "an integer",
            Encoding::F32 | Encoding::F64 | Encoding::Scaled { .. } => "a number",
            Encoding::Timestamp(_) => "a timestamp",
            Encoding::FixedStr { .. } | Encoding::Hash | Encoding::Enum { .. } => "a string",
        }
    }

    /// Does equal encoding imply equal value? (False for lossy encodings;
    /// then the index narrows and a filter decides.)
    pub fn is_lossless(&self, bits: u32) -> bool {
        match self {
            Encoding::Uint | Encoding::Int | Encoding::Enum { .. } => true,
            Encoding::F32 => bits == 32,
            Encoding::F64 => bits == 64,
            Encoding::Timestamp(te) => te.unit == TimeUnit::Millisecond,
            Encoding::Scaled { .. } | Encoding::FixedStr { .. } | Encoding::Hash => false,
        }
    }
}

#[inline]
fn as_float(v: &Value) -> Result<f64, EncodeError> {
    match v {
        Value::Float(f) => Ok(*f),
        Value::Int(i) => Ok(*i as f64),
        other => Err(EncodeError::Type { expected: "a number", got: describe(other) }),
    }
}

fn describe(v: &Value) -> String {
    match v {
        Value::Int(i) => format!("integer {i}"),
        Value::Float(f) => format!("number {f}"),
        Value::Str(s) => format!("string {s:?}"),
        Value::Time(t) => format!("timestamp {}", format_instant(*t)),
    }
}

fn range_err(v: &impl ToString, lo: impl ToString, hi: impl ToString) -> EncodeError {
    EncodeError::OutOfRange { value: v.to_string(), min: lo.to_string(), max: hi.to_string() }
}

/// For a query bound, clamp to the domain's end; for data, the error.
fn clamp_or(
    clamp: Option<Side>,
    below: bool,
    max: u128,
    err: impl FnOnce() -> EncodeError,
) -> Result<u128, EncodeError> {
    match (clamp, below) {
        (Some(Side::Lower), true) => Ok(0),
        (Some(Side::Upper), false) => Ok(max),
        (Some(_), _) => Err(EncodeError::Empty),
        (None, _) => Err(err()),
    }
}
