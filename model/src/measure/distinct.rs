//! `type = "distinct"`: the number of distinct values of a field, by a
//! HyperLogLog sketch ([`crate::hll`]) of the values' hashes
//! ([`distinct_hash`]). Any field type. `precision = p` (4..=18, default
//! 14): 2^p registers, standard error 1.04 / sqrt(2^p).

use super::sketch::{ShowOptions, Shown, SketchKind};
use super::MeasureSpec;
use crate::hll::{Hll, DEFAULT_PRECISION, MAX_PRECISION, MIN_PRECISION};
use crate::schema::{FieldValue, TypedField};

impl SketchKind for Hll {
    type Params = u8;
    const NAME: &'static str = "distinct";
    const SCALED: bool = false;
    const DESCRIPTION: &'static str = "distinct values (HyperLogLog estimate; sketches merged)";
    const IDEMPOTENT: bool = true;

    fn params(spec: &MeasureSpec, _field: &TypedField) -> Result<u8, String> {
        spec.only_options(&["precision"])?;
        let p = match spec.option_u64("precision")? {
            None => DEFAULT_PRECISION,
            Some(p) => u8::try_from(p).unwrap_or(u8::MAX),
        };
        if !(MIN_PRECISION..=MAX_PRECISION).contains(&p) {
            return Err(format!("precision {p} is outside {MIN_PRECISION}..={MAX_PRECISION}"));
        }
        Ok(p)
    }

    fn empty(p: u8) -> Hll {
        Hll::new(p).unwrap_or_default()
    }

    fn params_of(&self) -> u8 {
        self.precision()
    }

    #[inline]
    fn add(&mut self, value: &FieldValue<'_>) {
        if let Some(h) = distinct_hash(value) {
            self.add_hash(h);
        }
    }

    fn merge(&mut self, other: &Hll) -> Result<(), String> {
        Hll::merge(self, other).map_err(|e| e.to_string())
    }

    fn is_empty(&self) -> bool {
        Hll::is_empty(self)
    }

    fn to_bytes(&self) -> Vec<u8> {
        Hll::to_bytes(self)
    }

    fn from_bytes(bytes: &[u8]) -> Result<Hll, String> {
        Hll::from_bytes(bytes).map_err(|e| e.to_string())
    }

    fn heap_bytes(&self) -> usize {
        Hll::heap_bytes(self)
    }

    fn columns(name: &str, _ask: &ShowOptions) -> Vec<String> {
        vec![name.to_string()]
    }

    fn shown(&self, _ask: &ShowOptions) -> Vec<Shown> {
        vec![Shown::Count(self.estimate())]
    }
}

/// The hash a distinct count sketches a value by: xxh3-64 of a string's
/// bytes, of a number's (units') or instant's 8 little-endian bytes, of one
/// byte for a boolean. Stored sketches depend on it: it never changes.
#[inline]
pub fn distinct_hash(v: &FieldValue<'_>) -> Option<u64> {
    use xxhash_rust::xxh3::xxh3_64;
    use FieldValue::*;
    match v {
        Absent => None,
        Str(s) => Some(xxh3_64(s.as_bytes())),
        Int(x) | Dec(x) | Time(x) => Some(xxh3_64(&x.to_le_bytes())),
        Bool(b) => Some(xxh3_64(&[u8::from(*b)])),
    }
}
