//! HyperLogLog distinct-count sketch (Flajolet, Fusy, Gandouet, Meunier 2007)
//! over 64-bit hashes.
//!
//! A sketch of precision `p` has `m = 2^p` registers. A hash picks its
//! register with its top `p` bits; the register keeps the largest `rho` seen,
//! the position of the first 1 bit in the remaining `64 - p` bits (capped at
//! `64 - p + 1` when they are all zero). With 64-bit hashes no large-range
//! correction is needed.
//!
//! Two representations, which give identical estimates for the same input:
//! - sparse while few registers are set: a sorted vector with one
//!   `index << 6 | rho` entry per set register, plus a small unsorted insert
//!   buffer merged into it in batches;
//! - dense (one byte per register) once more than `3m/16` registers are set,
//!   where the sparse bytes (about 2 bytes an entry) would pass half the
//!   dense bytes (`3m/4`).
//!
//! The form is a function of the registers alone (dense iff more than `3m/16`
//! are set, once the buffer is merged), so equal sketches serialize to equal
//! bytes however they were built. [`Hll::merge`] is a register-wise max:
//! idempotent, commutative and associative, so replaying an input or a merge
//! changes nothing.
//!
//! Serialized form: version byte (1), precision, form tag, then
//! - sparse (tag 0): varint entry count, then the varint (LEB128) deltas of
//!   the sorted entries (the first from 0);
//! - dense (tag 1): the registers packed 6 bits each, 4 in 3 bytes
//!   little-endian (`2^p * 6 / 8` bytes).
//!
//! Serialized sizes at `p = 14`, measured by the `serialized_sizes` test
//! (bounds it asserts in brackets): empty 4 bytes; 10 distinct values 33
//! bytes (<= 40); 1 000 distinct values 1 877 bytes (<= 2 100); the largest
//! sparse sketch, just before the switch (3 072 registers set, about 3 400
//! distinct values), 5 465 bytes (<= 6 211); dense 12 291 bytes (exactly
//! 3 + 16 384 * 6 / 8).

use std::borrow::Cow;
use std::fmt;
use thiserror::Error;
use xxhash_rust::xxh3::xxh3_64;

/// Precision used unless a caller has a reason to differ: 16 384 registers,
/// standard error 1.04 / sqrt(2^14) ≈ 0.81 %, 12 KiB dense.
pub const DEFAULT_PRECISION: u8 = 14;
pub const MIN_PRECISION: u8 = 4;
pub const MAX_PRECISION: u8 = 18;

const VERSION: u8 = 1;
const TAG_SPARSE: u8 = 0;
const TAG_DENSE: u8 = 1;
const HEADER_LEN: usize = 3;

/// The standard error (relative standard deviation) of an estimate at
/// precision `p`: `1.04 / sqrt(2^p)`. Errors of about 2 to 3 times this are
/// rare but not impossible; it is not a hard bound.
pub fn relative_error_bound(p: u8) -> f64 {
    1.04 / 2f64.powi(p.into()).sqrt()
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HllError {
    #[error("precision {0} is outside {MIN_PRECISION}..={MAX_PRECISION}")]
    Precision(u8),
    #[error("cannot merge a sketch of precision {theirs} into one of precision {ours}")]
    PrecisionMismatch { ours: u8, theirs: u8 },
    #[error("serialized sketch is truncated")]
    Truncated,
    #[error("unknown serialized sketch version {0}")]
    Version(u8),
    #[error("unknown sketch form tag {0}")]
    Tag(u8),
    #[error("malformed varint (overlong or above 32 bits)")]
    Varint,
    #[error("{count} sparse entries for {registers} registers")]
    TooManyEntries { count: u32, registers: u32 },
    #[error("register index {index} out of range for {registers} registers")]
    IndexOutOfRange { index: u64, registers: u32 },
    #[error("register value {rho} out of range 1..={max} (register {index})")]
    RhoOutOfRange { index: u32, rho: u8, max: u8 },
    #[error("sparse entries are not in strictly increasing register order")]
    Unsorted,
    #[error("{0} bytes after the end of the sketch")]
    TrailingBytes(usize),
}

/// A HyperLogLog sketch. `PartialEq` compares the registers (the form and
/// the insert buffer do not matter).
#[derive(Clone)]
pub struct Hll {
    p: u8,
    repr: Repr,
}

#[derive(Clone)]
enum Repr {
    Sparse {
        /// Sorted, one entry per set register: `index << 6 | rho`, rho >= 1.
        entries: Vec<u32>,
        /// Unsorted, maybe repeated, entries not merged yet.
        buf: Vec<u32>,
        /// Serialized length of `entries` after the header.
        encoded_len: usize,
    },
    Dense(Vec<u8>),
}

impl Hll {
    pub fn new(p: u8) -> Result<Hll, HllError> {
        if !(MIN_PRECISION..=MAX_PRECISION).contains(&p) {
            return Err(HllError::Precision(p));
        }
        Ok(Hll::empty(p))
    }

    fn empty(p: u8) -> Hll {
        Hll { p, repr: Repr::Sparse { entries: Vec::new(), buf: Vec::new(), encoded_len: 1 } }
    }

    pub fn precision(&self) -> u8 {
        self.p
    }

    /// Whether nothing was added (or merged in).
    pub fn is_empty(&self) -> bool {
        match &self.repr {
            Repr::Sparse { entries, buf, .. } => entries.is_empty() && buf.is_empty(),
            Repr::Dense(regs) => regs.iter().all(|&r| r == 0),
        }
    }

    /// Adds a value by its 64-bit hash (which should be well mixed: all bits
    /// are used).
    pub fn add_hash(&mut self, h: u64) {
        let p = self.p;
        let index = (h >> (64 - p)) as u32;
        let rest = h << p;
        let rho = if rest == 0 { max_rho(p) } else { rest.leading_zeros() as u8 + 1 };
        match &mut self.repr {
            Repr::Dense(regs) => {
                let r = &mut regs[index as usize];
                if rho > *r {
                    *r = rho;
                }
            }
            Repr::Sparse { buf, .. } => {
                buf.push(index << 6 | u32::from(rho));
                if buf.len() >= buf_cap(p) {
                    self.flush();
                }
            }
        }
    }

    /// Adds a value by its bytes, hashed with xxh3-64.
    pub fn add_bytes(&mut self, bytes: &[u8]) {
        self.add_hash(xxh3_64(bytes));
    }

    /// Makes `self` the sketch of the union of both inputs (register-wise
    /// max). Both must have the same precision.
    pub fn merge(&mut self, other: &Hll) -> Result<(), HllError> {
        if self.p != other.p {
            return Err(HllError::PrecisionMismatch { ours: self.p, theirs: other.p });
        }
        let other = other.canonical();
        match &other.repr {
            Repr::Dense(theirs) => {
                for (a, &b) in self.make_dense().iter_mut().zip(theirs) {
                    *a = (*a).max(b);
                }
            }
            Repr::Sparse { entries: theirs, .. } => match &mut self.repr {
                Repr::Dense(regs) => theirs.iter().for_each(|&e| set_max(regs, e)),
                Repr::Sparse { buf, .. } => {
                    buf.extend_from_slice(theirs);
                    self.flush();
                }
            },
        }
        Ok(())
    }

    /// The estimated number of distinct values added: the HLL estimator,
    /// with linear counting on the empty registers while the raw estimate is
    /// at most `2.5 m`.
    ///
    /// This classic estimator is biased upwards just past that switch: at
    /// p = 14, over 200 data sets each, the mean error was +2.4 % at 41 000
    /// distinct values, +1.6 % at 45 000, +0.9 % at 50 000, and within
    /// ±0.1 % at 35 000, 70 000, 80 000 and 10^6 (standard deviation 0.6 to
    /// 0.8 % throughout).
    pub fn estimate(&self) -> u64 {
        let c = self.canonical();
        // Register-value histogram: the same for both forms, so both give
        // bit-identical estimates whatever the summation order would be.
        let mut hist = [0u32; 64];
        match &c.repr {
            Repr::Sparse { entries, .. } => {
                hist[0] = (1u32 << self.p) - entries.len() as u32;
                entries.iter().for_each(|&e| hist[(e & 63) as usize] += 1);
            }
            Repr::Dense(regs) => regs.iter().for_each(|&r| hist[usize::from(r)] += 1),
        }
        let m = f64::from(1u32 << self.p);
        let sum: f64 = hist.iter().enumerate().rev().map(|(k, &n)| f64::from(n) * 2f64.powi(-(k as i32))).sum();
        let raw = alpha(self.p) * m * m / sum;
        let estimate = if raw <= 2.5 * m && hist[0] > 0 { m * (m / f64::from(hist[0])).ln() } else { raw };
        estimate.round() as u64
    }

    /// `self.to_bytes().len()`, without encoding (merges the insert buffer
    /// if there is one, else constant time).
    pub fn serialized_len(&self) -> usize {
        HEADER_LEN
            + match &self.canonical().repr {
                Repr::Sparse { encoded_len, .. } => *encoded_len,
                Repr::Dense(regs) => regs.len() * 3 / 4,
            }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let c = self.canonical();
        let mut out = Vec::with_capacity(c.serialized_len());
        match &c.repr {
            Repr::Sparse { entries, .. } => {
                out.extend_from_slice(&[VERSION, self.p, TAG_SPARSE]);
                put_varint(&mut out, entries.len() as u32);
                let mut prev = 0;
                for &e in entries {
                    put_varint(&mut out, e - prev);
                    prev = e;
                }
            }
            Repr::Dense(regs) => {
                out.extend_from_slice(&[VERSION, self.p, TAG_DENSE]);
                for q in regs.chunks_exact(4) {
                    let v = u32::from(q[0]) | u32::from(q[1]) << 6 | u32::from(q[2]) << 12 | u32::from(q[3]) << 18;
                    out.extend_from_slice(&v.to_le_bytes()[..3]);
                }
            }
        }
        out
    }

    /// Reads [`Hll::to_bytes`] output. Any input gives a sketch or an error,
    /// never a panic; a valid sketch in the other form than its registers
    /// call for is accepted and converted.
    pub fn from_bytes(bytes: &[u8]) -> Result<Hll, HllError> {
        let mut input = bytes;
        let [version, p, tag] = take(&mut input, HEADER_LEN)? else { unreachable!("took 3 bytes") };
        if *version != VERSION {
            return Err(HllError::Version(*version));
        }
        let mut hll = Hll::new(*p)?;
        let (p, m, max) = (*p, 1u32 << *p, max_rho(*p));
        match *tag {
            TAG_SPARSE => {
                let count = get_varint(&mut input)?;
                if count > m {
                    return Err(HllError::TooManyEntries { count, registers: m });
                }
                let mut entries = Vec::with_capacity((count as usize).min(input.len()));
                let mut prev: Option<u64> = None;
                for _ in 0..count {
                    let e = prev.unwrap_or(0) + u64::from(get_varint(&mut input)?);
                    let index = e >> 6;
                    if index >= u64::from(m) {
                        return Err(HllError::IndexOutOfRange { index, registers: m });
                    }
                    if prev.is_some_and(|prev| prev >> 6 >= index) {
                        return Err(HllError::Unsorted);
                    }
                    let rho = (e & 63) as u8;
                    if rho == 0 || rho > max {
                        return Err(HllError::RhoOutOfRange { index: index as u32, rho, max });
                    }
                    entries.push(e as u32);
                    prev = Some(e);
                }
                if !input.is_empty() {
                    return Err(HllError::TrailingBytes(input.len()));
                }
                if entries.len() > sparse_limit(p) {
                    hll.repr = Repr::Dense(to_registers(p, &entries));
                } else {
                    hll.repr = Repr::Sparse { encoded_len: sparse_encoded_len(&entries), entries, buf: Vec::new() };
                }
            }
            TAG_DENSE => {
                let packed = take(&mut input, m as usize / 4 * 3)?;
                if !input.is_empty() {
                    return Err(HllError::TrailingBytes(input.len()));
                }
                let mut regs = Vec::with_capacity(m as usize);
                for b in packed.chunks_exact(3) {
                    let v = u32::from_le_bytes([b[0], b[1], b[2], 0]);
                    regs.extend((0..4).map(|i| (v >> (6 * i) & 63) as u8));
                }
                if let Some(index) = regs.iter().position(|&r| r > max) {
                    return Err(HllError::RhoOutOfRange { index: index as u32, rho: regs[index], max });
                }
                if regs.iter().filter(|&&r| r != 0).count() > sparse_limit(p) {
                    hll.repr = Repr::Dense(regs);
                } else {
                    let entries: Vec<u32> =
                        (0..m).zip(&regs).filter(|(_, &r)| r != 0).map(|(i, &r)| i << 6 | u32::from(r)).collect();
                    hll.repr = Repr::Sparse { encoded_len: sparse_encoded_len(&entries), entries, buf: Vec::new() };
                }
            }
            tag => return Err(HllError::Tag(tag)),
        }
        Ok(hll)
    }

    /// The sketch with its insert buffer merged (cloned only if there is one).
    fn canonical(&self) -> Cow<'_, Hll> {
        match &self.repr {
            Repr::Sparse { buf, .. } if !buf.is_empty() => {
                let mut c = self.clone();
                c.flush();
                Cow::Owned(c)
            }
            _ => Cow::Borrowed(self),
        }
    }

    /// Merges the insert buffer, going dense if the sparse form got too big.
    fn flush(&mut self) {
        let Repr::Sparse { entries, buf, encoded_len } = &mut self.repr else { return };
        if buf.is_empty() {
            return;
        }
        buf.sort_unstable();
        let mut merged = Vec::with_capacity(entries.len() + buf.len());
        let (mut i, mut j) = (0, 0);
        while i < entries.len() || j < buf.len() {
            let e = if j == buf.len() || (i < entries.len() && entries[i] <= buf[j]) {
                i += 1;
                entries[i - 1]
            } else {
                j += 1;
                buf[j - 1]
            };
            // Ascending: the last entry of a register has its largest rho.
            match merged.last_mut() {
                Some(last) if *last >> 6 == e >> 6 => *last = e,
                _ => merged.push(e),
            }
        }
        buf.clear();
        if merged.len() > sparse_limit(self.p) {
            self.repr = Repr::Dense(to_registers(self.p, &merged));
        } else {
            *encoded_len = sparse_encoded_len(&merged);
            *entries = merged;
        }
    }

    fn make_dense(&mut self) -> &mut [u8] {
        if let Repr::Sparse { entries, buf, .. } = &self.repr {
            let mut regs = to_registers(self.p, entries);
            buf.iter().for_each(|&e| set_max(&mut regs, e));
            self.repr = Repr::Dense(regs);
        }
        match &mut self.repr {
            Repr::Dense(regs) => regs,
            Repr::Sparse { .. } => unreachable!("made dense above"),
        }
    }

    #[cfg(test)]
    fn is_sparse(&self) -> bool {
        matches!(self.canonical().repr, Repr::Sparse { .. })
    }

    /// A dense copy, whatever the number of registers set (tests compare the
    /// two forms with it).
    #[cfg(test)]
    fn densified(&self) -> Hll {
        let mut c = self.clone();
        c.make_dense();
        c
    }
}

impl Default for Hll {
    /// An empty sketch of [`DEFAULT_PRECISION`].
    fn default() -> Hll {
        Hll::empty(DEFAULT_PRECISION)
    }
}

impl PartialEq for Hll {
    fn eq(&self, other: &Hll) -> bool {
        if self.p != other.p {
            return false;
        }
        let (a, b) = (self.canonical(), other.canonical());
        match (&a.repr, &b.repr) {
            (Repr::Sparse { entries: x, .. }, Repr::Sparse { entries: y, .. }) => x == y,
            (Repr::Dense(x), Repr::Dense(y)) => x == y,
            (Repr::Sparse { entries, .. }, Repr::Dense(regs)) | (Repr::Dense(regs), Repr::Sparse { entries, .. }) => {
                to_registers(self.p, entries) == *regs
            }
        }
    }
}

impl Eq for Hll {}

impl fmt::Debug for Hll {
    /// A summary: the registers themselves are too many to be useful.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Hll");
        d.field("p", &self.p);
        match &self.repr {
            Repr::Sparse { entries, buf, .. } => d.field("sparse", &entries.len()).field("buffered", &buf.len()),
            Repr::Dense(regs) => d.field("dense_set", &regs.iter().filter(|&&r| r != 0).count()),
        };
        d.field("estimate", &self.estimate()).finish()
    }
}

fn max_rho(p: u8) -> u8 {
    64 - p + 1
}

/// Registers set beyond which a sketch is dense: where its sparse bytes
/// (about 2 an entry at this density) would pass half the dense bytes.
fn sparse_limit(p: u8) -> usize {
    (1usize << p) * 3 / 16
}

fn buf_cap(p: u8) -> usize {
    (sparse_limit(p) / 4).clamp(8, 1024)
}

fn alpha(p: u8) -> f64 {
    match p {
        4 => 0.673,
        5 => 0.697,
        6 => 0.709,
        _ => 0.7213 / (1.0 + 1.079 / f64::from(1u32 << p)),
    }
}

fn set_max(regs: &mut [u8], entry: u32) {
    let r = &mut regs[(entry >> 6) as usize];
    *r = (*r).max((entry & 63) as u8);
}

fn to_registers(p: u8, entries: &[u32]) -> Vec<u8> {
    let mut regs = vec![0u8; 1 << p];
    entries.iter().for_each(|&e| set_max(&mut regs, e));
    regs
}

fn varint_len(v: u32) -> usize {
    (32 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

fn sparse_encoded_len(entries: &[u32]) -> usize {
    let deltas = entries.iter().scan(0, |prev, &e| Some(varint_len(e - std::mem::replace(prev, e))));
    varint_len(entries.len() as u32) + deltas.sum::<usize>()
}

fn put_varint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// LEB128, at most 32 bits, minimal encodings only (so bytes are canonical).
fn get_varint(input: &mut &[u8]) -> Result<u32, HllError> {
    let mut v = 0u32;
    for i in 0..5 {
        let [b] = take(input, 1)? else { unreachable!("took 1 byte") };
        if (i == 4 && *b > 0x0f) || (i > 0 && *b == 0) {
            return Err(HllError::Varint);
        }
        v |= u32::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(HllError::Varint)
}

fn take<'a>(input: &mut &'a [u8], n: usize) -> Result<&'a [u8], HllError> {
    if input.len() < n {
        return Err(HllError::Truncated);
    }
    let (head, rest) = input.split_at(n);
    *input = rest;
    Ok(head)
}

#[cfg(test)]
mod tests;
