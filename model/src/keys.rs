//! Where an aggregate lives.
//!
//! - partition key: `{prefix:03}#{rollup}#{bin}`, e.g. `007#minute#2026-11-21`:
//!   the scatter prefix spreads the writes for "now" over P partitions; the
//!   rollup's time bin bounds each partition (a day of minutes, a month of
//!   hours or days);
//! - sort key: the Z-address of (time within bin, indexed dimensions), then
//!   16 bytes of the key's identity (xxh3-128 of the full dimension values),
//!   because fixed-width strings and hashes let distinct keys share a
//!   Z-address.
//!
//! The full dimension values and the bucket start are also item attributes,
//! so readers filter and group on exact values.

use crate::dimension::{DimensionSpec, DimensionType};
use crate::error::ConfigError;
use crate::measure::{MeasureSpec, RatioSpec};
use crate::projection::ProjectionSpec;
use crate::retention::Retention;
use crate::rollup::Rollup;
use crate::scatter::ScatterMode;
use crate::schema::{FieldType, TypedField};
use zigzag_core::schema::{DimError, Dimension, Encoding, Schema, TimeEncoding, TimeUnit, Value};
use zigzag_core::table::AttrValue;
use zigzag_core::zorder::ZAddress;

mod projections;
pub use projections::Projections;

/// The bucket start's attribute (kept with the rollups: measures name it too).
pub use crate::rollup::TIME_ATTR;

/// A key's identity: xxh3-128 over its dimension values.
pub type Identity = u128;

/// Bytes of identity after the Z-address in every sort key.
pub const IDENTITY_BYTES: usize = 16;

/// One dimension of an aggregate's key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyDim {
    /// Its field's name (also its item attribute).
    pub name: String,
    /// Index of its field in the schema.
    pub field: usize,
    /// In the Z-address, or only stored.
    pub indexed: bool,
    /// Stored as a number (integer fields), else as text.
    pub numeric: bool,
}

impl KeyDim {
    /// The item attribute of a value (its text, as keys carry it).
    pub fn attr(&self, text: &str) -> AttrValue {
        if self.numeric {
            if let Ok(n) = text.parse::<rust_decimal::Decimal>() {
                return AttrValue::N(n);
            }
        }
        AttrValue::S(text.to_string())
    }
}

/// The layout's declared parts a key model is built from.
pub(crate) struct KeyParts<'a> {
    pub fields: &'a [TypedField],
    pub dimensions: &'a [DimensionSpec],
    pub measures: &'a [MeasureSpec],
    pub ratios: &'a [RatioSpec],
    pub retention: &'a Retention,
}

/// Where one projection's aggregates live and what they hold (the base's:
/// [`KeyModel::new`]; a declared projection's: [`KeyModel::projection`]).
#[derive(Debug, Clone)]
pub struct KeyModel {
    /// The projection's name (`base` for the top-level declaration).
    name: String,
    /// The dimension (index in `dims`) whose value is in the partition key
    /// (`partition_by`), not the Z-address.
    partition: Option<usize>,
    dims: Vec<KeyDim>,
    /// Per dimension of this projection, its position among every
    /// dimension of the layout (what events are keyed by).
    dim_positions: Vec<usize>,
    /// The projection's measures (what each item holds besides its key).
    measures: crate::measure::MeasureSet,
    /// Per measure of this projection, its position in the layout's.
    measure_positions: Vec<usize>,
    schemas: Vec<(Rollup, Schema)>,
    prefixes: u32,
    mode: ScatterMode,
    /// The layout's retention (one for every projection).
    retention: crate::retention::Retention,
}

impl KeyModel {
    /// The model of `spec` over the layout's declared `parts` (the
    /// configuration's constructors, `KeyModel::new` and
    /// `KeyModel::projection`, are in `config/assemble.rs`).
    pub(crate) fn build(parts: &KeyParts, spec: &ProjectionSpec) -> Result<Self, ConfigError> {
        let mut dims = Vec::new();
        let mut dim_positions = Vec::new();
        let mut z_dims = Vec::new();
        for (position, d) in parts.dimensions.iter().enumerate() {
            if !spec.dimensions.contains(&d.field) {
                continue;
            }
            dim_positions.push(position);
            let field = parts.fields.iter().position(|f| f.spec.name == d.field).expect("validated: the field exists");
            let field_spec = &parts.fields[field].spec;
            let numeric = matches!(field_spec.kind, FieldType::Integer { .. });
            let partitions = spec.partition_by.as_ref() == Some(&d.field);
            dims.push(KeyDim { name: d.field.clone(), field, indexed: d.indexed && !partitions, numeric });
            if !d.indexed || partitions {
                continue;
            }
            let (bits, encoding) = match (d.kind, &field_spec.kind) {
                (DimensionType::String, _) => {
                    let bytes = d.bytes.unwrap_or(8);
                    (bytes * 8, Encoding::FixedStr { bytes })
                }
                (DimensionType::Hash, _) => (d.bits.unwrap_or(32), Encoding::Hash),
                (DimensionType::Integer, FieldType::Integer { min, max }) => {
                    (signed_bits(min.unwrap_or(i64::MIN), max.unwrap_or(i64::MAX)), Encoding::Int)
                }
                (DimensionType::Enum, FieldType::String { values, .. }) => {
                    let bits = (usize::BITS - values.len().saturating_sub(1).leading_zeros()).max(1);
                    (bits, Encoding::Enum { values: values.clone() })
                }
                _ => return Err(ConfigError::Invalid(format!("dimension {}: type does not fit its field", d.field))),
            };
            z_dims.push(Dimension { name: d.field.clone(), bits, encoding });
        }
        let mut schemas = Vec::new();
        for &rollup in &spec.rollups {
            let mut all = vec![Dimension {
                name: "time".into(),
                bits: rollup.time_bits(),
                encoding: Encoding::Timestamp(TimeEncoding {
                    unit: rollup.unit(),
                    bin: Some(rollup.bin()),
                    origin: 0,
                    epoch_unit: TimeUnit::Millisecond,
                }),
            }];
            all.extend(z_dims.iter().cloned());
            let schema = Schema::new(all).map_err(|e| ConfigError::Invalid(e.to_string()))?;
            schemas.push((rollup, schema));
        }
        let kept: Vec<_> = parts.measures.iter().filter(|m| spec.measures.contains(&m.name)).cloned().collect();
        let ratios: Vec<_> = parts
            .ratios
            .iter()
            .filter(|r| spec.measures.contains(&r.numerator) && spec.measures.contains(&r.denominator))
            .cloned()
            .collect();
        let measure_positions = parts
            .measures
            .iter()
            .enumerate()
            .filter(|(_, m)| spec.measures.contains(&m.name))
            .map(|(i, _)| i)
            .collect();
        let measures = crate::measure::MeasureSet::new(&kept, &ratios, parts.fields)?;
        let partition = spec.partition_by.as_ref().and_then(|p| dims.iter().position(|d| &d.name == p));
        Ok(KeyModel {
            name: spec.name.clone(),
            partition,
            dims,
            dim_positions,
            measures,
            measure_positions,
            schemas,
            prefixes: spec.scatter.prefixes,
            mode: spec.scatter.mode,
            retention: parts.retention.clone(),
        })
    }

    /// The projection's name (`base` for the top-level declaration).
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn is_base(&self) -> bool {
        self.name == crate::projection::BASE
    }

    /// Per dimension, its position among the layout's dimensions.
    pub fn dim_positions(&self) -> &[usize] {
        &self.dim_positions
    }

    /// This projection's values out of the layout's (all measures).
    pub fn project_values(&self, all: &crate::measure::MeasureValues) -> crate::measure::MeasureValues {
        crate::measure::MeasureValues(self.measure_positions.iter().map(|&i| all.0[i].clone()).collect())
    }

    /// Every dimension of a key, in configuration order (key values come
    /// in this order).
    pub fn dims(&self) -> &[KeyDim] {
        &self.dims
    }

    /// The measures every item holds.
    pub fn measures(&self) -> &crate::measure::MeasureSet {
        &self.measures
    }

    /// A dimension by name.
    pub fn dim(&self, name: &str) -> Option<&KeyDim> {
        self.dims.iter().find(|d| d.name == name)
    }

    pub fn rollups(&self) -> impl Iterator<Item = Rollup> + '_ {
        self.schemas.iter().map(|(r, _)| *r)
    }

    pub fn prefixes(&self) -> u32 {
        self.prefixes
    }

    /// How long each rollup's items are kept; an item's `expires`.
    pub fn retention(&self) -> &crate::retention::Retention {
        &self.retention
    }

    pub fn mode(&self) -> ScatterMode {
        self.mode
    }

    /// The Z-schema of a rollup: `time` (within the bin), then the fields.
    pub fn schema(&self, rollup: Rollup) -> Option<&Schema> {
        self.schemas.iter().find(|(r, _)| *r == rollup).map(|(_, s)| s)
    }

    /// A key's identity: the xxh3-128 of its values packed
    /// ([`pack_values`]). Sort keys and prefixes are made from it: it must
    /// never change (`identities_are_pinned`).
    pub fn identity(values: &[&str]) -> Identity {
        let mut packed = Vec::with_capacity(values.iter().map(|v| 4 + v.len()).sum());
        pack_values(values, &mut packed);
        identity_of_packed(&packed)
    }

    /// The partition key of a prefix's time bin: `{prefix}#{rollup}#{bin}`
    /// for the base (as before projections existed), with the projection's
    /// name after the prefix for the others.
    pub fn partition_key(&self, prefix: u32, rollup: Rollup, bin_start: i64) -> String {
        let bin = rollup.bin().label(bin_start);
        if self.is_base() {
            format!("{prefix:03}#{rollup}#{bin}")
        } else {
            format!("{prefix:03}#{}#{rollup}#{bin}", self.name)
        }
    }

    /// The dimension whose value keys partitions (`partition_by`), if any.
    pub fn partition_dim(&self) -> Option<&KeyDim> {
        self.partition.map(|i| &self.dims[i])
    }

    /// The partition key of a value of the `partition_by` dimension:
    /// `{prefix}#{name}#{rollup}#{bin}#{value}` (bin labels hold no `#`, so
    /// the value is what follows the fourth).
    pub fn value_partition_key(&self, prefix: u32, rollup: Rollup, bin_start: i64, value: &str) -> String {
        format!("{}#{value}", self.partition_key(prefix, rollup, bin_start))
    }

    /// The value keying a key's partition (`partition_by`), if the
    /// projection has one: `values` are the text of every dimension, in
    /// [`dims`](Self::dims) order.
    pub fn partition_value<'v>(&self, values: &[&'v str]) -> Option<&'v str> {
        self.partition.and_then(|i| values.get(i).copied())
    }

    /// The partition key of a key's item: `values` are the text of every
    /// dimension, in [`dims`](Self::dims) order.
    pub fn item_partition_key(&self, prefix: u32, rollup: Rollup, bin_start: i64, values: &[&str]) -> String {
        match self.partition {
            Some(i) => self.value_partition_key(prefix, rollup, bin_start, values[i]),
            None => self.partition_key(prefix, rollup, bin_start),
        }
    }

    /// Sort key of a key's bucket. `values` are the text of every
    /// dimension, in [`dims`](Self::dims) order.
    pub fn sort_key(
        &self,
        rollup: Rollup,
        bucket_start: i64,
        values: &[&str],
        id: Identity,
    ) -> Result<Vec<u8>, DimError> {
        let schema = self.schema(rollup).expect("rollup is configured");
        let mut point: Vec<Value> = Vec::with_capacity(values.len() + 1);
        point.push(Value::Time(bucket_start));
        let indexed = self.dims.iter().zip(values).filter(|(d, _)| d.indexed);
        for ((_, text), z) in indexed.zip(&schema.dims()[1..]) {
            point.push(z.parse(text)?);
        }
        let z: ZAddress = schema.encode_point(&point)?;
        let mut sk = z.to_bytes(schema.layout().total_bits());
        sk.extend_from_slice(&id.to_be_bytes());
        Ok(sk)
    }

    /// The scatter prefix of one write. Hash mode: a function of the key and
    /// bucket only. Random mode: also of the writer (lane) and its flush
    /// number, so every flush lands somewhere new, yet a replayed flush
    /// lands where it did.
    pub fn prefix(&self, id: Identity, rollup: Rollup, bucket_start: i64, lane: u32, flush: u64) -> u32 {
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        h.update(&id.to_le_bytes());
        h.update(&[rollup as u8]);
        h.update(&bucket_start.to_le_bytes());
        if self.mode == ScatterMode::Random {
            h.update(&lane.to_le_bytes());
            h.update(&flush.to_le_bytes());
        }
        (h.digest() % self.prefixes as u64) as u32
    }
}

/// Appends `values` packed: each as its length (u32, little-endian) and its
/// UTF-8 bytes. What a key's identity hashes, and how the aggregate keeps
/// a key's names.
pub fn pack_values(values: &[&str], out: &mut Vec<u8>) {
    for v in values {
        push_packed(v, out);
    }
}

/// Appends one value packed.
#[inline]
pub fn push_packed(value: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(value.as_bytes());
}

/// The identity of values already packed ([`KeyModel::identity`]): one
/// pass of the hash over one buffer.
#[inline]
pub fn identity_of_packed(packed: &[u8]) -> Identity {
    xxhash_rust::xxh3::xxh3_128(packed)
}

/// The values of a packed buffer (stops at the first malformed entry).
pub fn unpack_values(mut rest: &[u8]) -> impl Iterator<Item = &str> + '_ {
    std::iter::from_fn(move || {
        let (len, tail) = rest.split_first_chunk::<4>()?;
        let len = u32::from_le_bytes(*len) as usize;
        let value = std::str::from_utf8(tail.get(..len)?).ok()?;
        rest = &tail[len..];
        Some(value)
    })
}

/// Bits of a two's-complement integer holding `min..=max`.
fn signed_bits(min: i64, max: i64) -> u32 {
    (1..=64).find(|b| min >= -(1i128 << (b - 1)) as i64 && (max as i128) < (1i128 << (b - 1))).unwrap_or(64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn a_projection_keyed_by_a_value_puts_it_in_the_partition_key_not_the_z_address() {
        let c = Config::from_toml(
            "[[projection]]\nname = \"by_ref\"\ndimensions = [\"referrer\", \"country\"]\npartition_by = \"referrer\"\n",
        )
        .unwrap();
        let p = KeyModel::projection(&c, &c.projections[0]).unwrap();
        let t = Rollup::Hour.bin().start_of(1_764_000_000_000);
        assert_eq!(p.partition_dim().map(|d| d.name.as_str()), Some("referrer"));
        assert_eq!(p.item_partition_key(3, Rollup::Hour, t, &["a.example", "DE"]), "003#by_ref#hour#2025-11#a.example");
        let schema = p.schema(Rollup::Hour).unwrap();
        assert_eq!(schema.index_of("referrer"), None, "not in the Z-address");
        assert!(schema.index_of("country").is_some());
        let sk = |r: &str| p.sort_key(Rollup::Hour, t, &[r, "DE"], KeyModel::identity(&[r, "DE"])).unwrap();
        assert_ne!(sk("a"), sk("b"), "the identity still tells keys apart");
        let base = KeyModel::new(&c).unwrap();
        assert_eq!(
            base.item_partition_key(3, Rollup::Hour, t, &["a", "x", "DE"]),
            base.partition_key(3, Rollup::Hour, t)
        );
        for (toml, why) in [
            ("dimensions = [\"country\"]\npartition_by = \"referrer\"", "not one of its dimensions"),
            ("dimensions = [\"country\"]\npartition_by = \"nope\"", "not one of its dimensions"),
        ] {
            let e = Config::from_toml(&format!("[[projection]]\nname = \"p\"\n{toml}\n")).unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        }
    }

    #[test]
    fn keys_are_bounded_and_distinct() {
        let m = KeyModel::new(&Config::default()).unwrap();
        let t = 1_763_700_000_000; // 2025-11-21T04:40Z
        let a = ["news.example", "spring", "DE"];
        let b = ["news.example.org", "spring", "DE"]; // same 8-byte prefix
        let (ia, ib) = (KeyModel::identity(&a), KeyModel::identity(&b));
        let ska = m.sort_key(Rollup::Minute, Rollup::Minute.floor(t), &a, ia).unwrap();
        let skb = m.sort_key(Rollup::Minute, Rollup::Minute.floor(t), &b, ib).unwrap();
        assert_ne!(ska, skb, "the identity suffix separates keys sharing a Z-address");
        assert_eq!(ska.len(), skb.len());
        assert_eq!(ska[..ska.len() - IDENTITY_BYTES], skb[..skb.len() - IDENTITY_BYTES]);
        assert_eq!(m.partition_key(7, Rollup::Minute, Rollup::Minute.bin().start_of(t)), "007#minute#2025-11-21");
        assert_eq!(m.partition_key(7, Rollup::Hour, Rollup::Hour.bin().start_of(t)), "007#hour#2025-11");
        let c = Config::from_toml("[[projection]]\nname = \"by_cc\"\ndimensions = [\"country\"]\n").unwrap();
        let p = KeyModel::projection(&c, &c.projections[0]).unwrap();
        assert_eq!(p.partition_key(7, Rollup::Hour, Rollup::Hour.bin().start_of(t)), "007#by_cc#hour#2025-11");
        assert_eq!((p.dims().len(), p.dim_positions()), (1, &[2usize][..]));
        let sk = p.sort_key(Rollup::Minute, Rollup::Minute.floor(t), &["DE"], KeyModel::identity(&["DE"])).unwrap();
        assert_eq!(sk.len(), 2 + 2 + IDENTITY_BYTES, "11 bits of minute + 16 of country: 4 bytes, then the identity");
    }

    /// Sort keys and prefixes stored by every earlier version depend on
    /// these: the hash, the packing, the order.
    #[test]
    fn identities_are_pinned() {
        assert_eq!(KeyModel::identity(&["a", "b", "c"]), 0x7b3d61ed1113335c2648cc58f01499e8);
        assert_eq!(KeyModel::identity(&["news.example", "spring", "DE", "/p/1"]), 0x9091a6e6f1b3532c04bfeff4612184b1);
        assert_eq!(KeyModel::identity(&[]), 0x99aa06d3014798d86001c324468d497f);
    }

    proptest::proptest! {
        /// One pass over the packed values is the hash of the values fed
        /// one by one (how identities were first computed), and packing
        /// reads back.
        #[test]
        fn one_pass_identity_is_the_streamed_one(values in proptest::collection::vec(".{0,40}", 0..6)) {
            let values: Vec<&str> = values.iter().map(String::as_str).collect();
            let mut h = xxhash_rust::xxh3::Xxh3::new();
            for v in &values {
                h.update(&(v.len() as u32).to_le_bytes());
                h.update(v.as_bytes());
            }
            proptest::prop_assert_eq!(KeyModel::identity(&values), h.digest128());
            let mut packed = Vec::new();
            pack_values(&values, &mut packed);
            proptest::prop_assert!(unpack_values(&packed).eq(values.iter().copied()));
        }
    }

    #[test]
    fn scatter_modes() {
        let mut c = Config::default();
        let hash = KeyModel::new(&c).unwrap();
        c.scatter.mode = ScatterMode::Random;
        let random = KeyModel::new(&c).unwrap();
        let id = KeyModel::identity(&["a", "b", "c"]);
        assert_eq!(hash.prefix(id, Rollup::Hour, 0, 1, 1), hash.prefix(id, Rollup::Hour, 0, 2, 9));
        let seen: std::collections::HashSet<u32> = (0..64).map(|f| random.prefix(id, Rollup::Hour, 0, 1, f)).collect();
        assert!(seen.len() > 8, "random mode moves between flushes: {seen:?}");
        assert_eq!(random.prefix(id, Rollup::Hour, 0, 1, 3), random.prefix(id, Rollup::Hour, 0, 1, 3));
    }
}
