//! The sketch family: measures whose value is a mergeable sketch, kept in
//! an item of its own beside the key's item (the vertical-partitioning article's vertical
//! partitioning: the counters' item stays small, and a flush that adds
//! nothing to a sketch does not rewrite it).
//!
//! A kind of sketch is one module implementing [`SketchKind`] (what its
//! declaration may say, how an event adds to it, merge, the stored bytes,
//! what a report shows of it) and one line in `measure/mod.rs`'s
//! `measure_kinds!`. Everything else — the hot path's partials, the
//! flush's item writes ([`super::update::plan_sketch_update`]: a merge
//! under the lane's mark, ordered by a version), compaction's fold,
//! readers' merges, ground truths — goes through [`super::Sketch`], which the
//! macro generates over the registered kinds, and never names one.

use super::MeasureSpec;
use crate::schema::{FieldValue, TypedField};
use std::fmt;

/// What a report shows of one measure: the values of its columns.
#[derive(Debug, Clone, PartialEq)]
pub enum Shown {
    /// An exact count (counts; a distinct count's estimate).
    Count(u64),
    /// An exact value in units of 10^-scale of the measure's field (None:
    /// no value).
    Units(Option<i128>),
    /// An estimate in units of 10^-scale, not necessarily whole (a
    /// quantile); None: no value.
    Estimate(Option<f64>),
}

impl Shown {
    /// As a number in the field's terms (charts, ranking).
    pub fn as_f64(&self, scale: u32) -> Option<f64> {
        let unit = 10f64.powi(scale as i32);
        match *self {
            Shown::Count(n) => Some(n as f64),
            Shown::Units(u) => u.map(|u| u as f64 / unit),
            Shown::Estimate(e) => e.map(|e| e / unit),
        }
    }
}

/// What a reader asks to see of measures with several possible columns.
#[derive(Debug, Clone, PartialEq)]
pub struct ShowOptions {
    /// The quantiles a quantile measure shows (`--quantiles`), in (0, 1].
    pub quantiles: Vec<f64>,
}

/// p50, p90 and p99: what a quantile measure shows unless asked otherwise.
pub const DEFAULT_QUANTILES: [f64; 3] = [0.5, 0.9, 0.99];

impl Default for ShowOptions {
    fn default() -> Self {
        ShowOptions { quantiles: DEFAULT_QUANTILES.to_vec() }
    }
}

/// One kind of sketch measure: everything that is true of it.
pub trait SketchKind: Sized + Clone + PartialEq + Eq + fmt::Debug {
    /// What its declaration fixes (a precision, an accuracy). Sketches of
    /// equal parameters merge; a stored sketch of others is refused.
    type Params: Copy + Eq + fmt::Debug;

    /// Its `type = "..."` in a `[[measure]]`.
    const NAME: &'static str;

    /// Whether its values keep the field's scale (a quantile of a decimal
    /// field) or are plain numbers (a count of distinct values).
    const SCALED: bool;

    /// What a catalog says it is.
    const DESCRIPTION: &'static str;

    /// Whether merging a sketch into itself leaves it unchanged (a register
    /// max). If not (counts add), its item is written under the writer's
    /// lane mark, as counters are, so a replay cannot merge twice.
    const IDEMPOTENT: bool;

    /// Checks a declaration over `field` (its `field`, resolved); Err says
    /// what to change. Options it does not know are refused by name.
    fn params(spec: &MeasureSpec, field: &TypedField) -> Result<Self::Params, String>;

    fn empty(params: Self::Params) -> Self;

    fn params_of(&self) -> Self::Params;

    /// Adds one event's value of the field (absent: nothing).
    fn add(&mut self, value: &FieldValue<'_>);

    /// Adds `other`; equal parameters required.
    fn merge(&mut self, other: &Self) -> Result<(), String>;

    /// Whether nothing was added.
    fn is_empty(&self) -> bool;

    /// The stored bytes: canonical (equal sketches, equal bytes) and
    /// self-describing (they carry the parameters).
    fn to_bytes(&self) -> Vec<u8>;

    /// Reads stored bytes; Err for anything malformed (never a panic).
    fn from_bytes(bytes: &[u8]) -> Result<Self, String>;

    /// Heap memory held (a live key's cost).
    fn heap_bytes(&self) -> usize;

    /// The report's column names for measure `name`.
    fn columns(name: &str, ask: &ShowOptions) -> Vec<String>;

    /// The values of those columns.
    fn shown(&self, ask: &ShowOptions) -> Vec<Shown>;

    /// Whether it answers quantiles (`ShowOptions::quantiles`), so a
    /// reader may ask it for any q (`quantile_over_time`).
    const QUANTILES: bool = false;

    /// Whether a ground truth keeps the exact values (the field's units)
    /// of each group, for [`SketchKind::check_values`] (bounded:
    /// `crate::truth`).
    const CHECKS_VALUES: bool = false;

    /// Checks this sketch's answers against the exact values it was made
    /// of (its truth check); Err says which answer is off and by how much.
    fn check_values(&self, _values: &mut [i64]) -> Result<(), String> {
        Ok(())
    }
}

/// Generates, over the registered sketch kinds, [`MeasureKind`] (the
/// counters and every sketch kind), [`Sketch`] (a sketch of any kind) and
/// [`SketchParams`], with their dispatch.
///
/// [`MeasureKind`]: super::MeasureKind
macro_rules! measure_kinds {
    ($($kind:ident => $ty:ty),* $(,)?) => {
        /// A measure's kind: the counters (stored in the key's item) and the
        /// registered sketch kinds (each in an item of its own).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize, serde::Serialize)]
        #[serde(rename_all = "snake_case")]
        pub enum MeasureKind {
            Count,
            Sum,
            Min,
            Max,
            $($kind),*
        }

        impl MeasureKind {
            pub fn name(self) -> &'static str {
                match self {
                    MeasureKind::Count => "count",
                    MeasureKind::Sum => "sum",
                    MeasureKind::Min => "min",
                    MeasureKind::Max => "max",
                    $(MeasureKind::$kind => <$ty as $crate::measure::sketch::SketchKind>::NAME),*
                }
            }

            /// Whether it is kept as a sketch in an item of its own.
            pub fn is_sketch(self) -> bool {
                !matches!(self, MeasureKind::Count | MeasureKind::Sum | MeasureKind::Min | MeasureKind::Max)
            }

            /// The sketch's parameters for a declaration of this kind (None
            /// for counters).
            pub(crate) fn sketch_params(
                self,
                spec: &MeasureSpec,
                field: &$crate::schema::TypedField,
            ) -> Option<Result<SketchParams, String>> {
                match self {
                    $(MeasureKind::$kind => Some(<$ty as $crate::measure::sketch::SketchKind>::params(spec, field).map(SketchParams::$kind)),)*
                    _ => None,
                }
            }

            /// A catalog's sentence for a sketch kind.
            pub fn sketch_description(self) -> Option<&'static str> {
                match self {
                    $(MeasureKind::$kind => Some(<$ty as $crate::measure::sketch::SketchKind>::DESCRIPTION),)*
                    _ => None,
                }
            }

            /// Whether a sketch kind that answers any quantile asked.
            pub fn answers_quantiles(self) -> bool {
                match self {
                    $(MeasureKind::$kind => <$ty as $crate::measure::sketch::SketchKind>::QUANTILES,)*
                    _ => false,
                }
            }

            /// Whether values keep the field's scale.
            pub(crate) fn scaled(self) -> bool {
                match self {
                    $(MeasureKind::$kind => <$ty as $crate::measure::sketch::SketchKind>::SCALED,)*
                    _ => true,
                }
            }

            /// A sketch kind's report columns for measure `name`.
            pub fn sketch_columns(self, name: &str, ask: &$crate::measure::sketch::ShowOptions) -> Option<Vec<String>> {
                match self {
                    $(MeasureKind::$kind => Some(<$ty as $crate::measure::sketch::SketchKind>::columns(name, ask)),)*
                    _ => None,
                }
            }
        }

        /// A sketch kind's parameters.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum SketchParams {
            $($kind(<$ty as $crate::measure::sketch::SketchKind>::Params)),*
        }

        /// A sketch of any registered kind.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum Sketch {
            $($kind($ty)),*
        }

        /// `{"<kind>": "<its bytes in base64>"}` (a ground truth file).
        impl serde::Serialize for Sketch {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use base64::Engine;
                use serde::ser::SerializeMap;
                let (name, bytes) = match self {
                    $(Sketch::$kind(x) => (
                        <$ty as $crate::measure::sketch::SketchKind>::NAME,
                        <$ty as $crate::measure::sketch::SketchKind>::to_bytes(x),
                    )),*
                };
                let mut map = s.serialize_map(Some(1))?;
                map.serialize_entry(name, &base64::engine::general_purpose::STANDARD.encode(bytes))?;
                map.end()
            }
        }

        impl<'de> serde::Deserialize<'de> for Sketch {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Sketch, D::Error> {
                use base64::Engine;
                use serde::de::Error;
                let map = std::collections::BTreeMap::<String, String>::deserialize(d)?;
                let [(name, text)] = <[(String, String); 1]>::try_from(map.into_iter().collect::<Vec<_>>())
                    .map_err(|_| D::Error::custom("a sketch is one {kind: bytes} entry"))?;
                let bytes = base64::engine::general_purpose::STANDARD.decode(text).map_err(D::Error::custom)?;
                $(if name == <$ty as $crate::measure::sketch::SketchKind>::NAME {
                    return <$ty as $crate::measure::sketch::SketchKind>::from_bytes(&bytes)
                        .map(Sketch::$kind)
                        .map_err(D::Error::custom);
                })*
                Err(D::Error::custom(format!("{name:?} is no sketch kind")))
            }
        }

        impl Sketch {
            pub fn empty(params: SketchParams) -> Sketch {
                match params {
                    $(SketchParams::$kind(p) => Sketch::$kind(<$ty as $crate::measure::sketch::SketchKind>::empty(p))),*
                }
            }

            pub fn params(&self) -> SketchParams {
                match self {
                    $(Sketch::$kind(s) => SketchParams::$kind(<$ty as $crate::measure::sketch::SketchKind>::params_of(s))),*
                }
            }

            #[inline]
            pub fn add(&mut self, value: &$crate::schema::FieldValue<'_>) {
                match self {
                    $(Sketch::$kind(s) => <$ty as $crate::measure::sketch::SketchKind>::add(s, value)),*
                }
            }

            /// Adds `other` (same kind and parameters, else an error).
            pub fn merge(&mut self, other: &Sketch) -> Result<(), String> {
                #[allow(unreachable_patterns)]
                match (self, other) {
                    $((Sketch::$kind(a), Sketch::$kind(b)) => <$ty as $crate::measure::sketch::SketchKind>::merge(a, b),)*
                    (a, b) => Err(format!("cannot merge a {:?} sketch with a {:?} one", a.params(), b.params())),
                }
            }

            pub fn is_empty(&self) -> bool {
                match self {
                    $(Sketch::$kind(s) => <$ty as $crate::measure::sketch::SketchKind>::is_empty(s)),*
                }
            }

            pub fn to_bytes(&self) -> Vec<u8> {
                match self {
                    $(Sketch::$kind(s) => <$ty as $crate::measure::sketch::SketchKind>::to_bytes(s)),*
                }
            }

            /// Reads stored bytes as a sketch of `params`: malformed bytes or
            /// other parameters are an error.
            pub fn from_bytes(bytes: &[u8], params: SketchParams) -> Result<Sketch, String> {
                let sketch = match params {
                    $(SketchParams::$kind(_) => Sketch::$kind(<$ty as $crate::measure::sketch::SketchKind>::from_bytes(bytes)?)),*
                };
                if sketch.params() != params {
                    return Err(format!("stored with {:?}, not the layout's {params:?}", sketch.params()));
                }
                Ok(sketch)
            }

            /// Checks its answers against the exact values it was made of
            /// ([`SketchKind::check_values`]).
            ///
            /// [`SketchKind::check_values`]: $crate::measure::sketch::SketchKind::check_values
            pub fn check_values(&self, values: &mut [i64]) -> Result<(), String> {
                match self {
                    $(Sketch::$kind(s) => <$ty as $crate::measure::sketch::SketchKind>::check_values(s, values)),*
                }
            }

            /// Whether its measure's ground truth keeps exact values.
            pub fn checks_values(&self) -> bool {
                match self {
                    $(Sketch::$kind(_) => <$ty as $crate::measure::sketch::SketchKind>::CHECKS_VALUES),*
                }
            }

            /// Whether its merge is idempotent ([`SketchKind::IDEMPOTENT`]).
            ///
            /// [`SketchKind::IDEMPOTENT`]: $crate::measure::sketch::SketchKind::IDEMPOTENT
            pub fn idempotent(&self) -> bool {
                match self {
                    $(Sketch::$kind(_) => <$ty as $crate::measure::sketch::SketchKind>::IDEMPOTENT),*
                }
            }

            pub fn heap_bytes(&self) -> usize {
                match self {
                    $(Sketch::$kind(s) => <$ty as $crate::measure::sketch::SketchKind>::heap_bytes(s)),*
                }
            }

            /// What a report shows of it.
            pub fn shown(&self, ask: &$crate::measure::sketch::ShowOptions) -> Vec<$crate::measure::sketch::Shown> {
                match self {
                    $(Sketch::$kind(s) => <$ty as $crate::measure::sketch::SketchKind>::shown(s, ask)),*
                }
            }
        }
    };
}

pub(crate) use measure_kinds;
