//! `[[projection]]` as the configuration file writes it, and its
//! resolution against the top-level declaration into the
//! [`ProjectionSpec`] a layout records.

use super::Config;
use crate::error::ConfigError;
use crate::projection::{ProjectionSpec, BASE};
use crate::rollup::Rollup;
use crate::scatter::{PrefixCount, ScatterConfig, ScatterMode, AUTO};
use crate::schema::FieldType;
use serde::Deserialize;

/// A projection as the configuration file gives it (defaults unresolved).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProjectionFile {
    name: String,
    #[serde(default)]
    dimensions: Vec<String>,
    rollups: Option<Vec<Rollup>>,
    measures: Option<Vec<String>>,
    scatter: Option<ProjectionScatter>,
    partition_by: Option<String>,
}

/// `[projection.scatter]` as written: a count or `"auto"`, and a mode.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct ProjectionScatter {
    prefixes: PrefixCount,
    mode: ScatterMode,
}

impl Default for ProjectionScatter {
    fn default() -> Self {
        ProjectionScatter { prefixes: PrefixCount::default(), mode: ScatterConfig::default().mode }
    }
}

impl ProjectionFile {
    /// Resolves the defaults against the top-level declaration, and orders
    /// dimensions and measures as the layout declares them.
    pub(crate) fn resolve(self, config: &Config) -> Result<ProjectionSpec, ConfigError> {
        let bad = |why: String| Err(ConfigError::Invalid(format!("projection {}: {why}", self.name)));
        let name_ok = self.name.len() <= 32
            && self.name.starts_with(|c: char| c.is_ascii_lowercase())
            && self.name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !name_ok {
            return bad("a name is 1 to 32 of a-z, 0-9 and _, starting with a letter".into());
        }
        if self.name == BASE {
            return bad(format!("`{BASE}` is the top-level declaration's name"));
        }
        for (i, d) in self.dimensions.iter().enumerate() {
            if !config.dimensions.iter().any(|c| &c.field == d) {
                return bad(format!("{d} is not a [[dimension]]"));
            }
            if self.dimensions[..i].contains(d) {
                return bad(format!("dimension {d} is listed twice"));
            }
        }
        let dimensions =
            config.dimensions.iter().filter(|c| self.dimensions.contains(&c.field)).map(|c| c.field.clone()).collect();
        let rollups = match self.rollups {
            Some(r) if r.is_empty() => return bad("`rollups` is empty".into()),
            Some(r) => r,
            None if config.rollups.is_empty() => {
                return bad("give `rollups` (the top-level list, its default, is empty)".into())
            }
            None => config.rollups.clone(),
        };
        for (i, r) in rollups.iter().enumerate() {
            if rollups[..i].contains(r) {
                return bad(format!("rollup {r} is listed twice"));
            }
        }
        let measures = match self.measures {
            None => config.measures.iter().map(|m| m.name.clone()).collect(),
            Some(m) if m.is_empty() => return bad("`measures` is empty (leave it out to keep every measure)".into()),
            Some(listed) => {
                for (i, m) in listed.iter().enumerate() {
                    if !config.measures.iter().any(|c| &c.name == m) {
                        return bad(format!("{m} is not a [[measure]]"));
                    }
                    if listed[..i].contains(m) {
                        return bad(format!("measure {m} is listed twice"));
                    }
                }
                config.measures.iter().filter(|c| listed.contains(&c.name)).map(|c| c.name.clone()).collect()
            }
        };
        // `"auto"` resolves to 0 here, and `Config` puts the scatter rule's
        // count in its place once every projection is known.
        let (count, mode) = match self.scatter {
            Some(s) => (s.prefixes, s.mode),
            None if config.scatter.prefixes == AUTO => (PrefixCount::Auto, config.scatter.mode),
            None => (PrefixCount::Count(config.scatter.prefixes), config.scatter.mode),
        };
        let scatter = match count.resolve() {
            Ok(prefixes) => ScatterConfig { prefixes, mode },
            Err(why) => return bad(why),
        };
        if let Some(d) = &self.partition_by {
            if !self.dimensions.contains(d) {
                return bad(format!("partition_by = {d:?} is not one of its dimensions"));
            }
            let string = config.fields.iter().any(|f| &f.name == d && matches!(f.kind, FieldType::String { .. }));
            if !string {
                return bad(format!("partition_by = {d:?}: only a string dimension can key partitions"));
            }
        }
        Ok(ProjectionSpec { name: self.name, dimensions, rollups, measures, scatter, partition_by: self.partition_by })
    }
}

impl ProjectionSpec {
    /// Checks a spec made in code (or read from a layout) as a file's
    /// would be: it must be its own resolution.
    pub fn validate(&self, config: &Config) -> Result<(), ConfigError> {
        let file = ProjectionFile {
            name: self.name.clone(),
            dimensions: self.dimensions.clone(),
            rollups: Some(self.rollups.clone()),
            measures: Some(self.measures.clone()),
            scatter: Some(ProjectionScatter {
                prefixes: PrefixCount::Count(self.scatter.prefixes),
                mode: self.scatter.mode,
            }),
            partition_by: self.partition_by.clone(),
        };
        let resolved = file.resolve(config)?;
        if &resolved != self {
            return Err(ConfigError::Invalid(format!(
                "projection {}: dimensions and measures must be in the layout's order",
                self.name
            )));
        }
        Ok(())
    }
}
