//! Index schemas: an ordered list of dimensions (name, type, width), read
//! from TOML, and what turns values and query constraints into Z-addresses
//! and boxes.
//!
//! ```toml
//! [[dimension]]
//! name = "ts"
//! type = "timestamp"     # uint int f32 f64 scaled timestamp string hash enum
//! unit = "second"
//! origin = "2016-01-01T00:00:00Z"   # or: bin = "day" (offset within the partition's bin)
//! bits = 23
//! ```

mod encode;
mod time;

pub use encode::{EncodeError, Encoding, Side, TimeEncoding, Value};
pub use time::{format_instant, parse_instant, TimeBin, TimeUnit};

use crate::zorder::{dim_max, Layout, ZAddress, ZBox, MAX_DIM_BITS};
use serde::Deserialize;
use std::sync::Arc;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum SchemaError {
    #[error("schema TOML: {0}")]
    Toml(#[from] toml::de::Error),
    #[error("dimension {name:?}: {why}")]
    Dimension { name: String, why: String },
    #[error("the schema has no dimensions")]
    Empty,
    #[error("dimension name {0:?} appears twice")]
    Duplicate(String),
    #[error("only one timestamp dimension may have a bin; {0:?} and {1:?} both do")]
    TwoBins(String, String),
}

/// A value that could not be encoded, with the dimension it was for.
#[derive(Debug, Error, PartialEq)]
#[error("dimension {dim:?}: {error}")]
pub struct DimError {
    pub dim: String,
    pub error: EncodeError,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct SchemaFile {
    #[serde(rename = "dimension", default)]
    dimensions: Vec<DimensionConfig>,
}

/// One `[[dimension]]` table as written; validated into a [`Dimension`].
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DimensionConfig {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub bits: Option<u32>,
    pub bytes: Option<u32>,
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub unit: Option<TimeUnit>,
    pub bin: Option<TimeBin>,
    pub origin: Option<String>,
    pub epoch_unit: Option<TimeUnit>,
    pub values: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Dimension {
    pub name: String,
    pub bits: u32,
    pub encoding: Encoding,
}

impl Dimension {
    /// Parses text (CSV cells, query files) into a value of this dimension's type.
    pub fn parse<'a>(&self, text: &'a str) -> Result<Value<'a>, DimError> {
        let err = |error| DimError { dim: self.name.clone(), error };
        let t = text.trim();
        match &self.encoding {
            Encoding::Uint | Encoding::Int => t
                .parse::<i128>()
                .map(Value::Int)
                .map_err(|_| err(EncodeError::Type { expected: "an integer", got: format!("{text:?}") })),
            Encoding::F32 | Encoding::F64 | Encoding::Scaled { .. } => t
                .parse::<f64>()
                .map(Value::Float)
                .map_err(|_| err(EncodeError::Type { expected: "a number", got: format!("{text:?}") })),
            Encoding::Timestamp(te) => parse_instant(t, te.epoch_unit)
                .map(Value::Time)
                .ok_or_else(|| err(EncodeError::BadTimestamp(text.to_string()))),
            Encoding::FixedStr { .. } | Encoding::Hash | Encoding::Enum { .. } => Ok(Value::Str(text)),
        }
    }

    #[inline]
    pub fn encode(&self, value: &Value) -> Result<u128, DimError> {
        self.encoding.encode(self.bits, value).map_err(|error| DimError { dim: self.name.clone(), error })
    }

    fn from_config(c: &DimensionConfig) -> Result<Self, SchemaError> {
        let fail = |why: String| SchemaError::Dimension { name: c.name.clone(), why };
        let allowed: &[&str] = match c.kind.as_str() {
            "uint" | "int" | "hash" => &["bits"],
            "f32" | "f64" => &["bits"],
            "scaled" => &["bits", "min", "max"],
            "timestamp" => &["bits", "unit", "bin", "origin", "epoch_unit"],
            "string" => &["bytes", "bits"],
            "enum" => &["values", "bits"],
            other => {
                return Err(fail(format!(
                    "unknown type {other:?}; expected one of uint, int, f32, f64, scaled, timestamp, string, hash, enum"
                )))
            }
        };
        let given = [
            ("bits", c.bits.is_some()),
            ("bytes", c.bytes.is_some()),
            ("min", c.min.is_some()),
            ("max", c.max.is_some()),
            ("unit", c.unit.is_some()),
            ("bin", c.bin.is_some()),
            ("origin", c.origin.is_some()),
            ("epoch_unit", c.epoch_unit.is_some()),
            ("values", c.values.is_some()),
        ];
        for (field, present) in given {
            if present && !allowed.contains(&field) {
                return Err(fail(format!("field `{field}` does not apply to type {:?}", c.kind)));
            }
        }
        let need_bits = || c.bits.ok_or_else(|| fail(format!("type {:?} needs `bits`", c.kind)));
        let (bits, encoding) = match c.kind.as_str() {
            "uint" => (need_bits()?, Encoding::Uint),
            "int" => (need_bits()?, Encoding::Int),
            "f32" => (c.bits.unwrap_or(32), Encoding::F32),
            "f64" => (c.bits.unwrap_or(64), Encoding::F64),
            "scaled" => {
                let (min, max) = match (c.min, c.max) {
                    (Some(a), Some(b)) if a.is_finite() && b.is_finite() && a < b => (a, b),
                    _ => return Err(fail("type \"scaled\" needs finite `min` < `max`".into())),
                };
                {
                    let bits = need_bits()?;
                    (bits, Encoding::scaled(min, max, bits))
                }
            }
            "timestamp" => {
                let unit = c.unit.unwrap_or(TimeUnit::Millisecond);
                let bits = need_bits()?;
                let origin = match (&c.origin, c.bin) {
                    (Some(_), Some(_)) => return Err(fail("give `origin` or `bin`, not both".into())),
                    (Some(o), None) => parse_instant(o, TimeUnit::Second)
                        .ok_or_else(|| fail(format!("origin {o:?} is not RFC 3339 or an epoch in seconds")))?,
                    (None, _) => 0,
                };
                if let Some(bin) = c.bin {
                    let needed = (bin.max_len_ms() / unit.millis()) as u128;
                    if bits < 128 && needed > dim_max(bits) + 1 {
                        return Err(fail(format!(
                            "{bits} bits cannot hold a {bin:?} bin in {unit:?}s ({needed} values)"
                        )));
                    }
                }
                let epoch_unit = c.epoch_unit.unwrap_or(TimeUnit::Second);
                (bits, Encoding::Timestamp(TimeEncoding { unit, bin: c.bin, origin, epoch_unit }))
            }
            "string" => {
                let bytes = c.bytes.ok_or_else(|| fail("type \"string\" needs `bytes`".into()))?;
                if bytes == 0 || bytes > MAX_DIM_BITS / 8 {
                    return Err(fail(format!("`bytes` must be 1..={}", MAX_DIM_BITS / 8)));
                }
                if c.bits.is_some_and(|b| b != bytes * 8) {
                    return Err(fail(format!("`bits` must be 8 * bytes = {}", bytes * 8)));
                }
                (bytes * 8, Encoding::FixedStr { bytes })
            }
            "hash" => (need_bits()?, Encoding::Hash),
            "enum" => {
                let values = c.values.clone().unwrap_or_default();
                if values.is_empty() {
                    return Err(fail("type \"enum\" needs a non-empty `values` list".into()));
                }
                let least = usize::BITS - (values.len() - 1).leading_zeros();
                let bits = c.bits.unwrap_or(least.max(1));
                if bits < least {
                    return Err(fail(format!("{} values need at least {least} bits", values.len())));
                }
                (bits, Encoding::Enum { values })
            }
            _ => unreachable!("type checked above"),
        };
        let max_bits = match encoding {
            Encoding::F32 => 32,
            Encoding::F64 | Encoding::Hash => 64,
            _ => MAX_DIM_BITS,
        };
        if bits == 0 || bits > max_bits {
            return Err(fail(format!("`bits` must be 1..={max_bits}, got {bits}")));
        }
        Ok(Dimension { name: c.name.clone(), bits, encoding })
    }
}

/// A constraint on one dimension, in values (not yet encoded).
#[derive(Debug, Clone, PartialEq)]
pub enum Constraint<'a> {
    /// Inclusive; a missing end is unbounded.
    Range(Option<Value<'a>>, Option<Value<'a>>),
    Eq(Value<'a>),
    In(Vec<Value<'a>>),
}

/// One box of a query plan: the Z-box, and for a binned timestamp the start
/// of the time bin (partition) it applies to.
#[derive(Debug, Clone)]
pub struct BinnedBox {
    pub bin_start: Option<i64>,
    pub zbox: ZBox,
}

#[derive(Debug, Clone)]
pub struct Schema {
    dims: Vec<Dimension>,
    layout: Arc<Layout>,
    binned: Option<(usize, TimeBin)>,
}

impl Schema {
    pub fn from_toml(text: &str) -> Result<Self, SchemaError> {
        let file: SchemaFile = toml::from_str(text)?;
        let dims = file.dimensions.iter().map(Dimension::from_config).collect::<Result<Vec<_>, _>>()?;
        Self::new(dims)
    }

    pub fn new(dims: Vec<Dimension>) -> Result<Self, SchemaError> {
        if dims.is_empty() {
            return Err(SchemaError::Empty);
        }
        let mut binned: Option<(usize, TimeBin)> = None;
        for (i, d) in dims.iter().enumerate() {
            if dims[..i].iter().any(|e| e.name == d.name) {
                return Err(SchemaError::Duplicate(d.name.clone()));
            }
            if let Encoding::Timestamp(TimeEncoding { bin: Some(bin), .. }) = d.encoding {
                if let Some((j, _)) = binned {
                    return Err(SchemaError::TwoBins(dims[j].name.clone(), d.name.clone()));
                }
                binned = Some((i, bin));
            }
        }
        let widths: Vec<u32> = dims.iter().map(|d| d.bits).collect();
        let layout = Layout::new(&widths)
            .map_err(|e| SchemaError::Dimension { name: dims[0].name.clone(), why: e.to_string() })?;
        Ok(Schema { dims, layout: Arc::new(layout), binned })
    }

    pub fn dims(&self) -> &[Dimension] {
        &self.dims
    }

    pub fn layout(&self) -> &Arc<Layout> {
        &self.layout
    }

    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.dims.iter().position(|d| d.name == name)
    }

    /// The timestamp dimension whose bin is part of the partition key, if any.
    pub fn time_bin(&self) -> Option<(usize, TimeBin)> {
        self.binned
    }

    /// Encodes one point (values in schema order) into its Z-address.
    pub fn encode_point(&self, values: &[Value]) -> Result<ZAddress, DimError> {
        let mut z = self.layout.zero();
        self.encode_point_into(values, z.words_mut())?;
        Ok(z)
    }

    /// Allocation-free [`encode_point`](Self::encode_point) into
    /// `layout().nwords()` words.
    #[inline]
    pub fn encode_point_into(&self, values: &[Value], out: &mut [u64]) -> Result<(), DimError> {
        const INLINE: usize = 8;
        let n = self.dims.len();
        assert_eq!(values.len(), n, "one value per dimension");
        if n > INLINE {
            let enc = self.dims.iter().zip(values).map(|(d, v)| d.encode(v)).collect::<Result<Vec<_>, _>>()?;
            self.layout.interleave_into(&enc, out);
            return Ok(());
        }
        let mut enc = [0u128; INLINE];
        for i in 0..n {
            enc[i] = self.dims[i].encode(&values[i])?;
        }
        self.layout.interleave_into(&enc[..n], out);
        Ok(())
    }

    /// Turns per-dimension constraints (by dimension index; unconstrained
    /// dimensions are unbounded) into Z-boxes: one per time bin when the
    /// schema has a binned timestamp, else one. Empty when nothing can match.
    pub fn plan_boxes(&self, constraints: &[(usize, Constraint)]) -> Result<Vec<BinnedBox>, DimError> {
        let n = self.dims.len();
        let mut lo = vec![0u128; n];
        let mut hi: Vec<u128> = self.dims.iter().map(|d| dim_max(d.bits)).collect();
        let mut time_range: (Option<i64>, Option<i64>) = (None, None);
        for (d, c) in constraints {
            let dim = &self.dims[*d];
            let err = |error| DimError { dim: dim.name.clone(), error };
            let (vlo, vhi) = match c {
                Constraint::Range(a, b) => (a.clone(), b.clone()),
                Constraint::Eq(v) => (Some(v.clone()), Some(v.clone())),
                Constraint::In(vs) => {
                    // The box takes the hull of the set; a filter does the rest.
                    let mut enc: Vec<(u128, &Value)> = Vec::with_capacity(vs.len());
                    for v in vs {
                        enc.push((dim.encode(v)?, v));
                    }
                    let Some(min) = enc.iter().min_by_key(|e| e.0) else { return Ok(Vec::new()) };
                    let max = enc.iter().max_by_key(|e| e.0).expect("non-empty");
                    (Some(min.1.clone()), Some(max.1.clone()))
                }
            };
            if matches!(dim.encoding, Encoding::Hash) && vlo != vhi {
                return Err(err(EncodeError::EqualityOnly));
            }
            if self.binned.is_some_and(|(b, _)| b == *d) {
                let as_time = |v: Option<Value>| -> Result<Option<i64>, DimError> {
                    match v {
                        None => Ok(None),
                        Some(Value::Time(t)) => Ok(Some(t)),
                        Some(other) => {
                            Err(err(EncodeError::Type { expected: "a timestamp", got: format!("{other:?}") }))
                        }
                    }
                };
                time_range = (as_time(vlo)?, as_time(vhi)?);
                continue;
            }
            if let Some(v) = vlo {
                match dim.encoding.encode_bound(dim.bits, &v, Side::Lower).map_err(err)? {
                    Some(e) => lo[*d] = lo[*d].max(e),
                    None => return Ok(Vec::new()),
                }
            }
            if let Some(v) = vhi {
                match dim.encoding.encode_bound(dim.bits, &v, Side::Upper).map_err(err)? {
                    Some(e) => hi[*d] = hi[*d].min(e),
                    None => return Ok(Vec::new()),
                }
            }
            if lo[*d] > hi[*d] {
                return Ok(Vec::new());
            }
        }
        let make = |lo: Vec<u128>, hi: Vec<u128>| {
            ZBox::new(self.layout.clone(), lo, hi).expect("bounds encoded within widths, lo <= hi")
        };
        let Some((td, bin)) = self.binned else {
            return Ok(vec![BinnedBox { bin_start: None, zbox: make(lo, hi) }]);
        };
        let dim = &self.dims[td];
        let Encoding::Timestamp(te) = &dim.encoding else { unreachable!("binned dimension is a timestamp") };
        let (Some(t0), Some(t1)) = time_range else {
            return Err(DimError {
                dim: dim.name.clone(),
                error: EncodeError::Type {
                    expected: "a bounded time range (bins are partitions: an open range has no end)",
                    got: "an open range".into(),
                },
            });
        };
        let mut out = Vec::new();
        let mut start = bin.start_of(t0);
        while start <= t1 {
            let next = bin.next_start(start);
            let a = t0.max(start);
            let b = t1.min(next - 1);
            if a <= b {
                let (mut blo, mut bhi) = (lo.clone(), hi.clone());
                let unit = te.unit.millis();
                blo[td] = ((a - start) / unit) as u128;
                bhi[td] = (((b - start) / unit) as u128).min(dim_max(dim.bits));
                out.push(BinnedBox { bin_start: Some(start), zbox: make(blo, bhi) });
            }
            start = next;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
