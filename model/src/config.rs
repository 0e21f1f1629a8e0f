//! Pipeline configuration. Every part has a default (the shipped
//! click/impression schema), so no file is needed:
//!
//! ```toml
//! rollups = ["minute", "hour", "day"]        # all written at once
//!
//! [input]
//! format = "json"                            # json | csv (then `columns = [...]`)
//! time = "ts"                                # the event-time field
//!
//! [[field]]                                  # the event's fields (schema::FieldSpec)
//! name = "country"
//! path = "/geo/cc"                           # JSON pointer (default /<name>); CSV: column
//! type = "string"                            # string | integer | decimal | boolean | timestamp
//!
//! [[dimension]]                              # Z-dimensions after time-within-bin
//! field = "country"
//! type = "string"                            # string (bytes) | hash (bits) | integer | enum
//! bytes = 2
//! indexed = true                             # false: stored and grouped on, not in the Z-address
//!
//! [[measure]]                                # measure::MeasureSpec
//! name = "clicks"
//! type = "count"                             # count | sum | min | max | distinct
//! where = "type = click"
//!
//! [[ratio]]                                  # computed by readers
//! name = "ctr"
//! numerator = "clicks"
//! denominator = "impressions"
//!
//! [scatter]
//! prefixes = 16                              # P, or "auto": the scatter rule's (scatter.rs)
//! mode = "hash"                              # hash | random
//! writers = 100                              # the rule's inputs, for "auto" (not layout)
//! events_per_sec = 20000
//! cardinality = { referrer = 10000, campaign = 40, country = 12 }
//!
//! [[projection]]                            # projection::ProjectionSpec: a subset of the
//! name = "by_country"                        # dimensions with its own rollups, measures and
//! dimensions = ["campaign", "country"]       # scatter, written by the same flush
//!
//! [flush]
//! interval_ms = 2000                         # the fastest cadence: every flush writes
//! every_ms = { "base.hour" = 300000, "by_country" = 60000 }  # slower ones (not layout)
//! max_keys = 1000000
//! max_memory_mb = 1024                       # estimated memory of the live keys; up to an
//!                                            # eighth more holds a flushed generation's
//!                                            # cleared maps for the next (no page faults)
//! ```

pub use crate::dimension::{default_dimensions, DimensionSpec, DimensionType};
pub use crate::error::ConfigError;
pub use crate::shipped::SHIPPED_TOML;

mod assemble;
mod layout_file;
mod projection_file;

use crate::measure::{default_measures, default_ratios, MeasureSet, MeasureSpec, RatioSpec};
use crate::projection::ProjectionSpec;
use crate::retention::Retention;
use crate::rollup::Rollup;
use crate::scatter::{PrefixCount, RuleInputs, ScatterRule};
pub use crate::scatter::{ScatterConfig, ScatterMode};
use crate::schema::{default_fields, FieldSpec, FieldType, InputSpec, TypedField};
use projection_file::ProjectionFile;
use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct FlushConfig {
    pub interval_ms: u64,
    /// Live keys in memory before an early flush; sources wait meanwhile.
    pub max_keys: usize,
    /// Memory the live keys may hold (an estimate, in MiB) before an early
    /// flush; sources wait meanwhile. Long dimension values make a key
    /// bigger: this bounds what `max_keys` cannot.
    pub max_memory_mb: u64,
    /// Item updates in flight at once during a flush.
    pub concurrency: usize,
    /// Slower cadences: `"projection"` (every rollup of it) or
    /// `"projection.rollup"` → milliseconds between its flushes (a
    /// multiple of `interval_ms` in effect: it is written by the first
    /// flush after that much time). The rest is written by every flush.
    /// Not part of the layout: cadences may change between runs.
    pub every_ms: std::collections::BTreeMap<String, u64>,
}

impl FlushConfig {
    /// Milliseconds between the flushes of `projection`'s `rollup`.
    pub fn every_ms(&self, projection: &str, rollup: Rollup) -> u64 {
        let by_rollup = self.every_ms.get(&format!("{projection}.{rollup}"));
        by_rollup.or_else(|| self.every_ms.get(projection)).copied().unwrap_or(self.interval_ms)
    }
}

impl Default for FlushConfig {
    fn default() -> Self {
        FlushConfig {
            interval_ms: 2_000,
            max_keys: 1_000_000,
            max_memory_mb: 1024,
            concurrency: 32,
            every_ms: Default::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub rollups: Vec<Rollup>,
    pub input: InputSpec,
    pub fields: Vec<FieldSpec>,
    pub dimensions: Vec<DimensionSpec>,
    pub measures: Vec<MeasureSpec>,
    pub ratios: Vec<RatioSpec>,
    pub scatter: ScatterConfig,
    /// The scatter rule's inputs and the counts it derived
    /// (`prefixes = "auto"`; not part of the layout: `scatter.rs`).
    pub scatter_rule: ScatterRule,
    /// The declared projections, defaults resolved (the base is the
    /// top-level declaration: `projection.rs`).
    pub projections: Vec<ProjectionSpec>,
    /// How long each rollup's items are kept (part of the layout).
    pub retention: Retention,
    pub flush: FlushConfig,
}

/// The file as written: schema parts left out take the shipped ones, but
/// only while the fields are the shipped ones too.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct ConfigFile {
    rollups: Option<Vec<Rollup>>,
    input: Option<InputSpec>,
    #[serde(rename = "field")]
    fields: Option<Vec<FieldSpec>>,
    #[serde(rename = "dimension")]
    dimensions: Option<Vec<DimensionSpec>>,
    #[serde(rename = "measure")]
    measures: Option<Vec<MeasureSpec>>,
    #[serde(rename = "ratio")]
    ratios: Option<Vec<RatioSpec>>,
    scatter: ScatterFile,
    #[serde(rename = "projection")]
    projections: Option<Vec<ProjectionFile>>,
    /// Rollup name → a duration (`14d`) or `forever`.
    retention: std::collections::BTreeMap<String, String>,
    flush: FlushConfig,
    /// The binaries' own settings (`[ingest] failover = "10s"`), read by
    /// `zigzag_app::settings`, not here.
    #[serde(rename = "ingest")]
    _ingest: Option<toml::Table>,
    #[serde(rename = "gather")]
    _gather: Option<toml::Table>,
    #[serde(rename = "loadgen")]
    _loadgen: Option<toml::Table>,
}

/// `[scatter]` as written: the top-level count (or `"auto"`) and mode, and
/// the scatter rule's inputs.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct ScatterFile {
    prefixes: PrefixCount,
    mode: Option<ScatterMode>,
    writers: Option<u32>,
    events_per_sec: Option<u64>,
    cardinality: std::collections::BTreeMap<String, u64>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            rollups: Rollup::ALL.to_vec(),
            input: InputSpec::default(),
            fields: default_fields(),
            dimensions: default_dimensions(),
            measures: default_measures(),
            ratios: default_ratios(),
            scatter: ScatterConfig::default(),
            scatter_rule: ScatterRule::default(),
            projections: Vec::new(),
            retention: Retention::default(),
            flush: FlushConfig::default(),
        }
    }
}

impl Config {
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        Self::from_file(toml::from_str(text).map_err(ConfigError::Toml)?)
    }

    /// From a document already parsed (a file with settings laid over it:
    /// its errors name the key, not a line of a text nobody wrote).
    pub fn from_table(doc: toml::Table) -> Result<Self, ConfigError> {
        Self::from_file(toml::Value::Table(doc).try_into().map_err(ConfigError::Toml)?)
    }

    fn from_file(file: ConfigFile) -> Result<Self, ConfigError> {
        let shipped = Config::default();
        let custom_fields = file.fields.is_some();
        let missing = |part: &str| {
            ConfigError::Invalid(format!(
                "[[field]] is declared, so [[{part}]] must be too (the shipped ones are for the shipped fields)"
            ))
        };
        let custom_measures = file.measures.is_some();
        let mut config = Config {
            rollups: file.rollups.unwrap_or(shipped.rollups),
            input: file.input.unwrap_or(shipped.input),
            fields: file.fields.unwrap_or(shipped.fields),
            dimensions: match file.dimensions {
                Some(d) => d,
                None if custom_fields => return Err(missing("dimension")),
                None => shipped.dimensions,
            },
            measures: match file.measures {
                Some(m) => m,
                None if custom_fields => return Err(missing("measure")),
                None => shipped.measures,
            },
            ratios: match file.ratios {
                Some(r) => r,
                None if custom_measures => Vec::new(),
                None => shipped.ratios,
            },
            scatter: ScatterConfig {
                prefixes: file.scatter.prefixes.resolve().map_err(ConfigError::Invalid)?,
                mode: file.scatter.mode.unwrap_or(shipped.scatter.mode),
            },
            scatter_rule: ScatterRule {
                inputs: RuleInputs {
                    writers: file.scatter.writers,
                    events_per_sec: file.scatter.events_per_sec,
                    cardinality: file.scatter.cardinality,
                },
                derived: Default::default(),
            },
            projections: Vec::new(),
            retention: Retention::parse(&file.retention).map_err(ConfigError::Invalid)?,
            flush: file.flush,
        };
        let mut projections = Vec::new();
        for p in file.projections.unwrap_or_default() {
            projections.push(p.resolve(&config)?);
        }
        config.projections = projections;
        assemble::derive_counts(&mut config)?;
        config.validate()?;
        Ok(config)
    }

    /// The fields with their bounds resolved (validates them).
    pub fn typed_fields(&self) -> Result<Vec<TypedField>, ConfigError> {
        crate::schema::validate(&self.input, &self.fields)?;
        self.fields
            .iter()
            .map(|f| TypedField::new(f).map_err(|e| ConfigError::Invalid(format!("field {}: {e}", f.name))))
            .collect()
    }

    /// The measures compiled against the fields (validates both).
    pub fn measure_set(&self) -> Result<MeasureSet, ConfigError> {
        MeasureSet::new(&self.measures, &self.ratios, &self.typed_fields()?)
    }

    /// The declared field a dimension is on.
    pub fn field(&self, name: &str) -> Option<&FieldSpec> {
        self.fields.iter().find(|f| f.name == name)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if self.rollups.is_empty() && self.projections.is_empty() {
            return bad(
                "`rollups` is empty and no [[projection]] is declared: nothing is written; give at least one of \
                 minute, hour, day"
                    .into(),
            );
        }
        for (i, r) in self.rollups.iter().enumerate() {
            if self.rollups[..i].contains(r) {
                return bad(format!("rollup {r} is listed twice"));
            }
        }
        let measures = self.measure_set()?;
        for (i, d) in self.dimensions.iter().enumerate() {
            if self.dimensions[..i].iter().any(|e| e.field == d.field) {
                return bad(format!("dimension {} is listed twice", d.field));
            }
            let Some(field) = self.field(&d.field) else {
                return bad(format!("dimension {}: no field of that name is declared", d.field));
            };
            if field.optional && field.default.is_none() {
                return bad(format!(
                    "dimension {}: the field is optional without a default; every aggregate needs its value",
                    d.field
                ));
            }
            if crate::measure::RESERVED.contains(&d.field.as_str()) {
                return bad(format!("dimension {}: the name is reserved for an item attribute of Zigzag's", d.field));
            }
            if measures.position(&d.field).is_some() {
                return bad(format!("dimension {}: a measure has the same name (both are item attributes)", d.field));
            }
            let width = |what: &str, v: Option<u32>, max: u32| match v {
                Some(v) if (1..=max).contains(&v) => Ok(()),
                _ => Err(ConfigError::Invalid(format!(
                    "dimension {}: a {} dimension needs `{what}` in 1..={max}",
                    d.field,
                    match d.kind {
                        DimensionType::String => "string",
                        _ => "hash",
                    }
                ))),
            };
            let extra = |what: &str| {
                Err(ConfigError::Invalid(format!("dimension {}: `{what}` does not apply to its type", d.field)))
            };
            match d.kind {
                DimensionType::String if d.bits.is_some() => return extra("bits"),
                DimensionType::String => width("bytes", d.bytes, 16)?,
                DimensionType::Hash if d.bytes.is_some() => return extra("bytes"),
                DimensionType::Hash => width("bits", d.bits, 64)?,
                DimensionType::Integer | DimensionType::Enum if d.bytes.is_some() => return extra("bytes"),
                DimensionType::Integer | DimensionType::Enum if d.bits.is_some() => return extra("bits"),
                DimensionType::Integer => match field.kind {
                    FieldType::Integer { min: Some(_), max: Some(_) } => {}
                    _ => {
                        return bad(format!(
                            "dimension {}: an integer dimension needs an integer field with `min` and `max`",
                            d.field
                        ))
                    }
                },
                DimensionType::Enum => match &field.kind {
                    FieldType::String { values, .. } if !values.is_empty() => {}
                    _ => {
                        return bad(format!(
                            "dimension {}: an enum dimension needs a string field with `values`",
                            d.field
                        ))
                    }
                },
            }
        }
        if self.input.format == crate::schema::Format::Csv {
            // An empty cell reads as no value (its default, if declared), so
            // `= ""` on a field without a default would count nothing.
            let typed = self.typed_fields()?;
            for m in measures.measures() {
                let Some(c) = &m.condition else { continue };
                if let Some(f) = c.wants_empty_text().find(|&f| typed[f].spec.default.is_none()) {
                    let name = &typed[f].spec.name;
                    return bad(format!(
                        "measure {}: a CSV cell is never the empty text (an empty cell is no value), so \
                         `{name} = \"\"` matches nothing; declare `default = \"\"` on {name} to count empty cells",
                        m.name
                    ));
                }
            }
        }
        for (i, p) in self.projections.iter().enumerate() {
            if self.projections[..i].iter().any(|q| q.name == p.name) {
                return bad(format!("projection {} is declared twice", p.name));
            }
            p.validate(self)?;
        }
        if self.scatter.prefixes == 0 || self.scatter.prefixes > 1000 {
            return bad(format!("scatter.prefixes = {} must be in 1..=1000", self.scatter.prefixes));
        }
        if self.flush.max_keys == 0
            || self.flush.interval_ms == 0
            || self.flush.concurrency == 0
            || self.flush.max_memory_mb == 0
        {
            return bad(
                "flush.max_keys, flush.max_memory_mb, flush.interval_ms and flush.concurrency must be positive".into(),
            );
        }
        let sets = self.item_sets();
        for (key, &ms) in &self.flush.every_ms {
            let (name, rollup) = match key.split_once('.') {
                Some((n, r)) => (n, Some(r)),
                None => (key.as_str(), None),
            };
            let known = sets.iter().any(|s| s.projection == name && rollup.is_none_or(|r| s.rollup.name() == r));
            if !known {
                let names: Vec<String> = sets.iter().map(|s| format!("{}.{}", s.projection, s.rollup)).collect();
                return bad(format!(
                    "flush.every_ms: {key:?} is no projection or projection.rollup written (they are {})",
                    names.join(", ")
                ));
            }
            if ms < self.flush.interval_ms {
                return bad(format!(
                    "flush.every_ms: {key} = {ms} is shorter than flush.interval_ms ({}), the fastest cadence",
                    self.flush.interval_ms
                ));
            }
        }
        Ok(())
    }

    /// The digest of the layout: everything that decides what a flush
    /// writes (schema, rollups, dimensions, measures, scatter), not how
    /// often it runs (`layout::Layout`). A flush intent records it, so a
    /// recovery under another layout cannot replay that flush into
    /// different items.
    pub fn layout_digest(&self) -> String {
        crate::layout::Layout::of(self).digest()
    }

    /// The shipped layout ([`SHIPPED_TOML`]).
    pub fn shipped() -> Config {
        Config::from_toml(SHIPPED_TOML).expect("the shipped layout is valid")
    }
}

#[cfg(test)]
mod tests;
