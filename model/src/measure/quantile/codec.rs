//! The stored bytes of a quantile sketch, canonical (a sketch has one
//! encoding, so equal sketches are equal bytes whatever the order of their
//! adds and merges) and self-describing:
//!
//! version (1) · slices · bins cap (0: none) · count · zeros · sum (i128,
//! zigzag) · min · max (i64, zigzag; only when count > 0) · positive
//! buckets · negative buckets, where a store is its length, then
//! (bucket delta, count) pairs (the first bucket absolute, then deltas
//! >= 1). Every integer is a LEB128 varint.

use super::{QuantileParams, Quantiles, Store};
use thiserror::Error;

const VERSION: u8 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum QuantilesError {
    #[error("quantile sketch version {0} is not 1")]
    Version(u8),
    #[error("quantile sketch ends early")]
    Truncated,
    #[error("a varint of the quantile sketch is too long")]
    Varint,
    #[error("{0} bytes after the end of the quantile sketch")]
    Trailing(usize),
    #[error("quantile sketch parameters out of range: {0}")]
    Params(String),
    #[error("quantile sketch is inconsistent: {0}")]
    Inconsistent(&'static str),
}

impl Quantiles {
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + 4 * self.buckets());
        out.push(VERSION);
        put(&mut out, u128::from(self.params.slices));
        put(&mut out, u128::from(self.params.bins));
        put(&mut out, u128::from(self.count));
        put(&mut out, u128::from(self.zeros));
        put(&mut out, zigzag(self.sum));
        if self.count > 0 {
            put(&mut out, zigzag(i128::from(self.min)));
            put(&mut out, zigzag(i128::from(self.max)));
        }
        for store in [&self.positive, &self.negative] {
            put(&mut out, store.len() as u128);
            let mut prev = 0;
            for (i, &(bucket, n)) in store.iter().enumerate() {
                put(&mut out, u128::from(if i == 0 { bucket } else { bucket - prev }));
                put(&mut out, u128::from(n));
                prev = bucket;
            }
        }
        out
    }

    /// Reads [`Quantiles::to_bytes`] output; anything else is an error,
    /// never a panic nor a large allocation.
    pub fn from_bytes(bytes: &[u8]) -> Result<Quantiles, QuantilesError> {
        use QuantilesError::*;
        let mut input = bytes;
        let (&version, rest) = input.split_first().ok_or(Truncated)?;
        input = rest;
        if version != VERSION {
            return Err(Version(version));
        }
        let slices = u32::try_from(get(&mut input)?).map_err(|_| Params("slices".into()))?;
        let bins = u32::try_from(get(&mut input)?).map_err(|_| Params("bins".into()))?;
        let params = QuantileParams { slices, bins };
        let most = QuantileParams::for_accuracy(super::MIN_ACCURACY, 0).map_or(u32::MAX, |p| p.slices);
        if slices == 0 || slices > most || (bins != 0 && bins < super::MIN_BINS) {
            return Err(Params(format!("{params:?}")));
        }
        let count = u64::try_from(get(&mut input)?).map_err(|_| Inconsistent("count"))?;
        let zeros = u64::try_from(get(&mut input)?).map_err(|_| Inconsistent("zeros"))?;
        let sum = unzigzag(get(&mut input)?);
        let mut q = Quantiles::new(params);
        q.count = count;
        q.zeros = zeros;
        q.sum = sum;
        if count > 0 {
            let narrow = |v: i128| i64::try_from(v).map_err(|_| Inconsistent("min or max beyond i64"));
            q.min = narrow(unzigzag(get(&mut input)?))?;
            q.max = narrow(unzigzag(get(&mut input)?))?;
            if q.min > q.max {
                return Err(Inconsistent("min above max"));
            }
        } else if zeros != 0 || sum != 0 {
            return Err(Inconsistent("an empty sketch with values"));
        }
        let mut total = u128::from(zeros);
        for store in [&mut q.positive, &mut q.negative] {
            *store = get_store(&mut input, params)?;
            total += store.iter().map(|&(_, n)| u128::from(n)).sum::<u128>();
        }
        if total != u128::from(count) {
            return Err(Inconsistent("bucket counts do not add up to the count"));
        }
        if !input.is_empty() {
            return Err(Trailing(input.len()));
        }
        Ok(q)
    }
}

fn get_store(input: &mut &[u8], params: QuantileParams) -> Result<Store, QuantilesError> {
    use QuantilesError::*;
    let len = get(input)?;
    // Each pair takes at least two bytes: no allocation beyond the input.
    if len > (input.len() / 2) as u128 {
        return Err(Truncated);
    }
    if params.bins != 0 && len > u128::from(params.bins) {
        return Err(Inconsistent("more buckets than the cap"));
    }
    let mut store = Vec::with_capacity(len as usize);
    let mut prev: Option<u32> = None;
    for _ in 0..len {
        let delta = u32::try_from(get(input)?).map_err(|_| Inconsistent("bucket beyond u32"))?;
        let bucket = match prev {
            None => delta,
            Some(_) if delta == 0 => return Err(Inconsistent("buckets not strictly increasing")),
            Some(p) => p.checked_add(delta).ok_or(Inconsistent("bucket beyond u32"))?,
        };
        let n = u64::try_from(get(input)?).map_err(|_| Inconsistent("count beyond u64"))?;
        if n == 0 {
            return Err(Inconsistent("a bucket with no count"));
        }
        // The largest bucket a u64 magnitude maps to.
        if bucket > params.slices.saturating_mul(63) {
            return Err(Inconsistent("bucket beyond any i64 value"));
        }
        store.push((bucket, n));
        prev = Some(bucket);
    }
    Ok(store)
}

fn zigzag(v: i128) -> u128 {
    ((v << 1) ^ (v >> 127)) as u128
}

fn unzigzag(v: u128) -> i128 {
    (v >> 1) as i128 ^ -((v & 1) as i128)
}

fn put(out: &mut Vec<u8>, mut v: u128) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get(input: &mut &[u8]) -> Result<u128, QuantilesError> {
    let mut v = 0u128;
    for shift in (0..128).step_by(7) {
        let (&b, rest) = input.split_first().ok_or(QuantilesError::Truncated)?;
        *input = rest;
        let bits = u128::from(b & 0x7f);
        if shift == 126 && bits > 0b11 {
            return Err(QuantilesError::Varint);
        }
        v |= bits << shift;
        if b & 0x80 == 0 {
            // The shortest form only: one value, one encoding.
            if b == 0 && shift > 0 {
                return Err(QuantilesError::Varint);
            }
            return Ok(v);
        }
    }
    Err(QuantilesError::Varint)
}
