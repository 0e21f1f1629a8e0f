//! Measures: the one place a kind of measure is defined. A measure kind
//! says how an event adds to it ([`Partial`], the hot path), how two
//! partials merge, how a flush applies a partial to a stored item exactly
//! once ([`update::plan_update`]), how an item's attribute reads back
//! ([`MeasureValues::from_item`]), and how a report shows and ranks it
//! ([`MeasureValue`]). `ingest`, `gather`, `check` and `loadgen`'s truth all
//! go through here, so a new kind touches this module and its tests.
//!
//! Kinds (`[[measure]]` in the configuration):
//!
//! | kind | of | item attribute | update |
//! |---|---|---|---|
//! | `count` | events (matching `where`) | N, integer | `ADD` |
//! | `sum` | an integer or decimal field | N, exact | `ADD` |
//! | `min`, `max` | an integer or decimal field | N | guarded `SET` |
//! | `distinct` | any field, by a HyperLogLog sketch ([`crate::hll`]) | B, in its own item | versioned read-merge-write |
//! | `quantile` | an integer or decimal field, by a DDSketch ([`quantile`]) | B, in its own item | versioned read-merge-write under the lane's mark |
//!
//! A sketch lives in an item of its own next to the key's item (same
//! partition, sort key + `#` + measure index: any query that reads the
//! item reads it too), so the counters' item stays small and a flush that
//! adds nothing new to a sketch does not rewrite it. Concurrent writers are
//! ordered by the item's version (`update::plan_sketch_update`). Merging
//! HyperLogLogs is idempotent (register-wise max), so a replayed or zombie
//! flush that merges again changes nothing; a DDSketch's merge adds bucket
//! counts, so its update is guarded by the lane's mark, as a counter's `ADD`.
//!
//! Every kind takes an optional `where` (see [`condition`]). Derived
//! ratios (`[[ratio]]`, e.g. `ctr = clicks / impressions`) are computed by
//! readers from two measures, never stored.

pub mod condition;
mod distinct;
pub mod fold;
mod partial;
pub mod quantile;
pub mod sketch;
pub mod update;
pub(crate) mod values;
pub mod whole;

use crate::error::ConfigError;
use crate::schema::{FieldType, TypedField};
use condition::Condition;
pub use distinct::distinct_hash;
pub use partial::{Partial, MAX_MEASURES};
use serde::{Deserialize, Serialize};
pub use sketch::{ShowOptions, Shown};
use std::collections::BTreeMap;
pub use values::{MeasureValue, MeasureValues, MAX_STORED_UNITS};

sketch::measure_kinds! {
    Distinct => crate::hll::Hll,
    Quantile => quantile::Quantiles,
}

impl MeasureKind {
    /// Accumulator words a partial of this kind takes.
    fn slots(self) -> usize {
        match self {
            MeasureKind::Sum => 2,         // an i128: no sum of i64 values overflows it
            kind if kind.is_sketch() => 0, // a sketch, kept beside the words
            _ => 1,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct MeasureSpec {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: MeasureKind,
    /// The field summed, or whose min/max is kept (not for `count`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Only events matching this count (see [`condition`]).
    #[serde(default, rename = "where", skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    /// A sketch kind's options (`precision = 12`): each kind reads and
    /// checks its own, and refuses the rest by name (so a misspelt key is
    /// still one clear message). Serialized after the fields above, in
    /// name order: a layout's text is as it was before options existed.
    #[serde(flatten)]
    pub options: BTreeMap<String, serde_json::Value>,
}

impl MeasureSpec {
    pub fn new(name: &str, kind: MeasureKind, field: Option<&str>, condition: Option<&str>) -> Self {
        MeasureSpec {
            name: name.into(),
            kind,
            field: field.map(Into::into),
            condition: condition.map(Into::into),
            options: BTreeMap::new(),
        }
    }

    /// With option `key` set (a sketch's `precision`, `accuracy`, ...).
    pub fn with_option(mut self, key: &str, value: impl Into<serde_json::Value>) -> Self {
        self.options.insert(key.into(), value.into());
        self
    }

    /// Err naming the first option not in `known`.
    pub fn only_options(&self, known: &[&str]) -> Result<(), String> {
        match self.options.keys().find(|k| !known.contains(&k.as_str())) {
            None => Ok(()),
            Some(k) if known.is_empty() => Err(format!("`{k}` is not an option of a {}", self.kind.name())),
            Some(k) => Err(format!("`{k}` is not an option of a {} (it takes {})", self.kind.name(), known.join(", "))),
        }
    }

    /// Option `key` as a whole number (None: not given).
    pub fn option_u64(&self, key: &str) -> Result<Option<u64>, String> {
        match self.options.get(key) {
            None => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| format!("`{key}` = {v} must be a whole number")),
        }
    }

    /// Option `key` as a number (None: not given).
    pub fn option_f64(&self, key: &str) -> Result<Option<f64>, String> {
        match self.options.get(key) {
            None => Ok(None),
            Some(v) => v.as_f64().map(Some).ok_or_else(|| format!("`{key}` = {v} must be a number")),
        }
    }
}

/// A ratio of two measures, computed when read (`ctr = clicks / impressions`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RatioSpec {
    pub name: String,
    pub numerator: String,
    pub denominator: String,
}

/// The shipped click/impression measures.
pub fn default_measures() -> Vec<MeasureSpec> {
    use MeasureKind::*;
    vec![
        MeasureSpec::new("clicks", Count, None, Some("type = click")),
        MeasureSpec::new("impressions", Count, None, Some("type = impression")),
        MeasureSpec::new("cost", Sum, Some("cost"), None),
        MeasureSpec::new("cost_min", Min, Some("cost"), None),
        MeasureSpec::new("cost_max", Max, Some("cost"), None),
    ]
}

pub fn default_ratios() -> Vec<RatioSpec> {
    vec![RatioSpec { name: "ctr".into(), numerator: "clicks".into(), denominator: "impressions".into() }]
}

/// One compiled measure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Measure {
    pub name: String,
    pub kind: MeasureKind,
    /// Index of its field in the schema (None for `count`).
    pub field: Option<usize>,
    /// Digits after the point of its values (0: integers and counts).
    pub scale: u32,
    pub condition: Option<Condition>,
    /// First accumulator word in a [`Partial`] (its sketch's index for a
    /// sketch kind).
    slot: usize,
    /// A sketch kind's parameters (None for counters).
    pub sketch: Option<SketchParams>,
}

/// A compiled ratio: indexes of its two measures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ratio {
    pub name: String,
    pub numerator: usize,
    pub denominator: usize,
}

/// The measures of a layout, compiled against its fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeasureSet {
    measures: Vec<Measure>,
    ratios: Vec<Ratio>,
    slots: usize,
    sketches: usize,
    /// A partial no event has reached, made once: each new key's is a
    /// copy (a new partial per event is the aggregate's common case).
    empty: Partial,
}

/// Names an item uses for itself: not measure names.
pub const RESERVED: [&str; 2] = [crate::rollup::TIME_ATTR, crate::retention::TTL_ATTR];

impl MeasureSet {
    pub fn new(specs: &[MeasureSpec], ratios: &[RatioSpec], fields: &[TypedField]) -> Result<Self, ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if specs.is_empty() {
            return bad("no [[measure]] is declared".into());
        }
        if specs.len() > MAX_MEASURES {
            return bad(format!("{} measures declared; at most {MAX_MEASURES}", specs.len()));
        }
        let mut measures: Vec<Measure> = Vec::new();
        let (mut slot, mut sketches) = (0, 0);
        for s in specs {
            if s.name.is_empty() || !s.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return bad(format!("measure name {:?}: use letters, digits and _", s.name));
            }
            if RESERVED.contains(&s.name.as_str()) || crate::mark::is_mark(&s.name) {
                return bad(format!("measure name {:?} is reserved", s.name));
            }
            if measures.iter().any(|m| m.name == s.name) {
                return bad(format!("measure {} is declared twice", s.name));
            }
            let field = match (s.kind, &s.field) {
                (MeasureKind::Count, None) => None,
                (MeasureKind::Count, Some(_)) => {
                    return bad(format!(
                        "measure {}: a count takes no `field` (use `where` to count some events)",
                        s.name
                    ))
                }
                (kind, None) => return bad(format!("measure {}: a {} needs a `field`", s.name, kind.name())),
                (kind, Some(name)) => {
                    let i = fields.iter().position(|f| f.spec.name == *name).ok_or_else(|| {
                        ConfigError::Invalid(format!("measure {}: field {name:?} is not declared", s.name))
                    })?;
                    if !kind.is_sketch()
                        && !matches!(fields[i].spec.kind, FieldType::Integer { .. } | FieldType::Decimal { .. })
                    {
                        return bad(format!(
                            "measure {}: a {} needs an integer or decimal field; {name} is a {}",
                            s.name,
                            kind.name(),
                            fields[i].spec.type_name()
                        ));
                    }
                    Some(i)
                }
            };
            let condition = s.condition.as_deref().map(|c| Condition::parse(c, fields)).transpose()?;
            let sketch = match field.and_then(|f| s.kind.sketch_params(s, &fields[f])) {
                Some(params) => Some(params.map_err(|why| ConfigError::Invalid(format!("measure {}: {why}", s.name)))?),
                None => {
                    s.only_options(&[]).map_err(|why| ConfigError::Invalid(format!("measure {}: {why}", s.name)))?;
                    None
                }
            };
            let scale = match s.kind.scaled() {
                true => field.and_then(|i| fields[i].spec.scale()).unwrap_or(0),
                false => 0,
            };
            let at = if sketch.is_some() { sketches } else { slot };
            measures.push(Measure { name: s.name.clone(), kind: s.kind, field, scale, condition, slot: at, sketch });
            slot += s.kind.slots();
            sketches += usize::from(sketch.is_some());
        }
        let mut compiled = Vec::new();
        for r in ratios {
            let find = |n: &str| {
                measures
                    .iter()
                    .position(|m| m.name == n)
                    .ok_or_else(|| ConfigError::Invalid(format!("ratio {}: {n:?} is not a declared measure", r.name)))
            };
            if measures.iter().any(|m| m.name == r.name) || compiled.iter().any(|c: &Ratio| c.name == r.name) {
                return bad(format!("ratio {}: the name is taken", r.name));
            }
            compiled.push(Ratio {
                name: r.name.clone(),
                numerator: find(&r.numerator)?,
                denominator: find(&r.denominator)?,
            });
        }
        let mut set = MeasureSet { measures, ratios: compiled, slots: slot, sketches, empty: Partial::default() };
        set.empty = Partial::new(&set);
        Ok(set)
    }

    pub fn measures(&self) -> &[Measure] {
        &self.measures
    }

    /// The set without the measures named (and the ratios reading one):
    /// what a report shows when it leaves some out. Values read with it
    /// come from items by name, as with any set.
    pub fn without(&self, names: &[&str]) -> MeasureSet {
        let mut measures = Vec::with_capacity(self.measures.len());
        let mut index = vec![None; self.measures.len()];
        let (mut slot, mut sketches) = (0, 0);
        for (i, m) in self.measures.iter().enumerate().filter(|(_, m)| !names.contains(&m.name.as_str())) {
            index[i] = Some(measures.len());
            let at = if m.sketch.is_some() { sketches } else { slot };
            measures.push(Measure { slot: at, ..m.clone() });
            slot += m.kind.slots();
            sketches += usize::from(m.sketch.is_some());
        }
        let ratios = self
            .ratios
            .iter()
            .filter_map(|r| {
                Some(Ratio { name: r.name.clone(), numerator: index[r.numerator]?, denominator: index[r.denominator]? })
            })
            .collect();
        let mut set = MeasureSet { measures, ratios, slots: slot, sketches, empty: Partial::default() };
        set.empty = Partial::new(&set);
        set
    }

    /// The report's columns of every measure, in order: one each, or what
    /// a sketch kind shows (a quantile measure's `name_p50`, ...).
    pub fn measure_columns(&self, ask: &ShowOptions) -> Vec<String> {
        self.measures
            .iter()
            .flat_map(|m| m.kind.sketch_columns(&m.name, ask).unwrap_or_else(|| vec![m.name.clone()]))
            .collect()
    }

    pub fn ratios(&self) -> &[Ratio] {
        &self.ratios
    }

    pub fn position(&self, name: &str) -> Option<usize> {
        self.measures.iter().position(|m| m.name == name)
    }

    /// A fresh accumulator for one key.
    #[inline]
    pub fn partial(&self) -> Partial {
        self.empty.clone()
    }

    /// The value of ratio `r` for `values` (None: zero denominator).
    pub fn ratio(&self, r: &Ratio, values: &MeasureValues) -> Option<f64> {
        let n = values.0[r.numerator].as_f64(self.measures[r.numerator].scale)?;
        let d = values.0[r.denominator].as_f64(self.measures[r.denominator].scale)?;
        (d != 0.0).then(|| n / d)
    }

    /// Values of nothing (every count and sum zero, no min or max, empty sketches).
    pub fn zero(&self) -> MeasureValues {
        MeasureValues(self.measures.iter().map(MeasureValue::zero).collect())
    }

    /// Whether any measure keeps a sketch.
    pub fn has_sketches(&self) -> bool {
        self.sketches > 0
    }
}

#[cfg(test)]
mod tests;
