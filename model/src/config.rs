//! Pipeline configuration. Every field has a default, so no file is needed:
//!
//! ```toml
//! rollups = ["minute", "hour", "day"]        # all written at once
//! measures = ["clicks", "impressions", "cost_sum", "cost_min", "cost_max"]
//!
//! [[dimension]]                              # Z-dimensions after time-within-bin
//! field = "referrer"                         # referrer | campaign | country | url
//! type = "string"                            # string (fixed width) | hash (equality only)
//! bytes = 8
//!
//! [scatter]
//! prefixes = 16                              # P
//! mode = "hash"                              # hash | random
//!
//! [flush]
//! interval_ms = 2000
//! max_keys = 1000000
//! max_memory_mb = 1024                       # estimated memory of the live keys
//! ```

use crate::measures::Measure;
use crate::rollup::Rollup;
use serde::{Deserialize, Serialize};
use std::fmt;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("configuration TOML: {0}")]
    Toml(#[from] toml::de::Error),
    #[error("configuration: {0}")]
    Invalid(String),
}

/// An event field that can be a Z-dimension (and a group-by key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Field {
    Referrer,
    Campaign,
    Country,
    Url,
}

impl Field {
    pub const ALL: [Field; 4] = [Field::Referrer, Field::Campaign, Field::Country, Field::Url];

    pub fn name(self) -> &'static str {
        match self {
            Field::Referrer => "referrer",
            Field::Campaign => "campaign",
            Field::Country => "country",
            Field::Url => "url",
        }
    }

    pub fn parse(text: &str) -> Option<Field> {
        Field::ALL.into_iter().find(|f| f.name() == text)
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DimensionType {
    /// Fixed-width UTF-8 prefix: supports equality, ranges and IN.
    String,
    /// xxh3 of the text: equality only, but any length in few bits.
    Hash,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DimensionSpec {
    pub field: Field,
    #[serde(rename = "type", default = "DimensionSpec::default_type")]
    pub kind: DimensionType,
    /// Width of a `string` dimension.
    pub bytes: Option<u32>,
    /// Width of a `hash` dimension.
    pub bits: Option<u32>,
}

impl DimensionSpec {
    fn default_type() -> DimensionType {
        DimensionType::String
    }

    fn string(field: Field, bytes: u32) -> Self {
        DimensionSpec { field, kind: DimensionType::String, bytes: Some(bytes), bits: None }
    }
}

/// How a write picks its scatter prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ScatterMode {
    /// A stable hash of the item's key: one item per logical key.
    Hash,
    /// A fresh pseudo-random prefix per write (seed 003), derived from the
    /// shard and flush number so a replayed flush picks the same prefixes.
    Random,
}

impl ScatterMode {
    pub fn name(self) -> &'static str {
        match self {
            ScatterMode::Hash => "hash",
            ScatterMode::Random => "random",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ScatterConfig {
    pub prefixes: u32,
    pub mode: ScatterMode,
}

impl Default for ScatterConfig {
    fn default() -> Self {
        // Hash by default: as even as random for writes, one item per key
        // for reads (BENCHMARKS.md, "Scatter modes").
        ScatterConfig { prefixes: 16, mode: ScatterMode::Hash }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
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
}

impl Default for FlushConfig {
    fn default() -> Self {
        FlushConfig { interval_ms: 2_000, max_keys: 1_000_000, max_memory_mb: 1024, concurrency: 32 }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub rollups: Vec<Rollup>,
    #[serde(rename = "dimension")]
    pub dimensions: Vec<DimensionSpec>,
    pub measures: Vec<Measure>,
    pub scatter: ScatterConfig,
    pub flush: FlushConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            rollups: Rollup::ALL.to_vec(),
            dimensions: vec![
                DimensionSpec::string(Field::Referrer, 8),
                DimensionSpec::string(Field::Campaign, 6),
                DimensionSpec::string(Field::Country, 2),
            ],
            measures: Measure::ALL.to_vec(),
            scatter: ScatterConfig::default(),
            flush: FlushConfig::default(),
        }
    }
}

impl Config {
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let config: Config = toml::from_str(text)?;
        config.validate()?;
        Ok(config)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if self.rollups.is_empty() {
            return bad("`rollups` is empty; give at least one of minute, hour, day".into());
        }
        for (i, r) in self.rollups.iter().enumerate() {
            if self.rollups[..i].contains(r) {
                return bad(format!("rollup {r} is listed twice"));
            }
        }
        for (i, d) in self.dimensions.iter().enumerate() {
            if self.dimensions[..i].iter().any(|e| e.field == d.field) {
                return bad(format!("dimension {} is listed twice", d.field));
            }
            match d.kind {
                DimensionType::String if d.bytes.is_none_or(|b| b == 0 || b > 16) || d.bits.is_some() => {
                    return bad(format!("dimension {}: a string dimension needs `bytes` in 1..=16", d.field))
                }
                DimensionType::Hash if d.bits.is_none_or(|b| b == 0 || b > 64) || d.bytes.is_some() => {
                    return bad(format!("dimension {}: a hash dimension needs `bits` in 1..=64", d.field))
                }
                _ => {}
            }
        }
        if self.measures.is_empty() {
            return bad("`measures` is empty".into());
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
        Ok(())
    }

    /// The digest of the layout: everything that decides what a flush
    /// writes (rollups, dimensions, measures, scatter), not how often it
    /// runs (`layout::Layout`). A flush intent records it, so a recovery
    /// under another layout cannot replay that flush into different items.
    pub fn layout_digest(&self) -> String {
        crate::layout::Layout::of(self).digest()
    }

    pub fn has(&self, m: Measure) -> bool {
        self.measures.contains(&m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_is_the_default() {
        assert_eq!(Config::from_toml("").unwrap(), Config::default());
    }

    #[test]
    fn errors_name_the_bad_part() {
        let e = Config::from_toml("rollups = [\"week\"]").unwrap_err().to_string();
        assert!(e.contains("week"), "{e}");
        let e = Config::from_toml("[[dimension]]\nfield = \"url\"\nbytes = 40").unwrap_err().to_string();
        assert!(e.contains("url") && e.contains("1..=16"), "{e}");
        let e = Config::from_toml("[scatter]\nprefixes = 0").unwrap_err().to_string();
        assert!(e.contains("prefixes"), "{e}");
        let e = Config::from_toml("[flush]\nintervall_ms = 5").unwrap_err().to_string();
        assert!(e.contains("intervall_ms"), "{e}");
    }

    #[test]
    fn layout_digest_ignores_flush_timing() {
        let mut c = Config::default();
        let d = c.layout_digest();
        c.flush.interval_ms = 5;
        assert_eq!(c.layout_digest(), d);
        c.scatter.prefixes = 8;
        assert_ne!(c.layout_digest(), d);
    }

    #[test]
    fn custom_dimensions() {
        let c = Config::from_toml(
            "rollups = [\"hour\"]\n[[dimension]]\nfield = \"url\"\ntype = \"hash\"\nbits = 20\n[scatter]\nmode = \"random\"",
        )
        .unwrap();
        assert_eq!(c.rollups, vec![Rollup::Hour]);
        assert_eq!(c.dimensions[0].kind, DimensionType::Hash);
        assert_eq!(c.scatter.mode, ScatterMode::Random);
    }
}
