//! Aggregate projections (Druid's projections, Vertica's live aggregate
//! projections): declared subsets of the dimensions, each with its own
//! rollups, measures and scatter, maintained by the same flush as the base.
//!
//! ```toml
//! [[projection]]
//! name = "by_country"                 # [a-z][a-z0-9_]*, not "base"
//! dimensions = ["campaign", "country"] # a subset of the [[dimension]]s (may be empty)
//! rollups = ["minute", "hour", "day"]  # default: the top-level `rollups`
//! measures = ["clicks", "impressions"] # default: every [[measure]]
//! partition_by = "country"             # optional: one of its string dimensions
//! [projection.scatter]                 # default: the top-level [scatter]
//! prefixes = 4
//! mode = "hash"
//! ```
//!
//! The **base** projection is the top-level declaration: every dimension,
//! the top-level `rollups` (which may be empty when projections are
//! declared: then no base items are written), every measure and the
//! top-level scatter. Its items keep the partition keys of tables written
//! before projections existed (`{prefix}#{rollup}#{bin}`); a projection's
//! are `{prefix}#{name}#{rollup}#{bin}`.
//!
//! **Equality reads** (`partition_by`): the value of one dimension goes
//! into the partition key (`{prefix}#{name}#{rollup}#{bin}#{value}`, as seed
//! 003's table is keyed by referrer) instead of the Z-address, so a report
//! that fixes it (`--where country = DE`, or `in (...)`) reads that value's
//! items alone: one referrer's hourly series reads what it returns. Such a
//! projection answers only reports that fix the dimension.
//!
//! **Scatter**: each projection's prefix count is given or derived by the
//! scatter rule (`prefixes = "auto"`): [`crate::scatter`].
//!
//! A projection's items are sums of the base's finest partials over the
//! dimensions it leaves out, so every report it answers is exactly the
//! base's answer (`tests/tests/projections.rs` checks it against brute
//! force). [`Projections`] is the set of key models one layout writes.

use crate::config::{Config, ConfigError, FlushConfig, ScatterConfig, ScatterMode};
use crate::keys::KeyModel;
use crate::rollup::Rollup;
use crate::scatter::{PrefixCount, AUTO};
use crate::schema::FieldType;
use serde::{Deserialize, Serialize};

/// The name of the projection the top-level declaration describes.
pub const BASE: &str = "base";

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

/// A projection with every default resolved: what the layout records, so a
/// reader needs no configuration and a change of a default cannot move
/// items.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectionSpec {
    pub name: String,
    /// In the order of the layout's `[[dimension]]`s.
    pub dimensions: Vec<String>,
    pub rollups: Vec<Rollup>,
    /// In the order of the layout's `[[measure]]`s.
    pub measures: Vec<String>,
    pub scatter: ScatterConfig,
    /// A dimension whose value is in the partition key, not the Z-address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_by: Option<String>,
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
    /// The base: the top-level declaration as a projection.
    pub fn base(config: &Config) -> ProjectionSpec {
        ProjectionSpec {
            name: BASE.into(),
            dimensions: config.dimensions.iter().map(|d| d.field.clone()).collect(),
            rollups: config.rollups.clone(),
            measures: config.measures.iter().map(|m| m.name.clone()).collect(),
            scatter: config.scatter.clone(),
            partition_by: None,
        }
    }

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

/// Every projection a layout writes, as key models: the base first (when
/// it has rollups), then the declared ones in order. A projection's index
/// here is its number in the aggregate (`u8`: at most 255 of them).
#[derive(Debug, Clone)]
pub struct Projections {
    /// The base, rollups or not: its dimensions are every dimension, the
    /// ones an event is aggregated by.
    all_dims: KeyModel,
    written: Vec<KeyModel>,
}

/// At most this many projections (the base included): a flush derives
/// each from every finest partial.
pub const MAX_PROJECTIONS: usize = 32;

impl Projections {
    pub fn new(config: &Config) -> Result<Projections, ConfigError> {
        let base = KeyModel::new(config)?;
        let mut written = Vec::new();
        if !config.rollups.is_empty() {
            written.push(base.clone());
        }
        for spec in &config.projections {
            written.push(KeyModel::projection(config, spec)?);
        }
        if written.is_empty() {
            return Err(ConfigError::Invalid(
                "nothing is written: `rollups` is empty and no [[projection]] is declared".into(),
            ));
        }
        if written.len() > MAX_PROJECTIONS {
            return Err(ConfigError::Invalid(format!(
                "{} projections; at most {MAX_PROJECTIONS} (the base included)",
                written.len()
            )));
        }
        Ok(Projections { all_dims: base, written })
    }

    /// The key model of every dimension (what events are aggregated by),
    /// whether or not the base is written.
    pub fn all_dims(&self) -> &KeyModel {
        &self.all_dims
    }

    /// The projections written, base first.
    pub fn iter(&self) -> std::slice::Iter<'_, KeyModel> {
        self.written.iter()
    }

    pub fn len(&self) -> usize {
        self.written.len()
    }

    pub fn is_empty(&self) -> bool {
        self.written.is_empty()
    }

    pub fn get(&self, index: usize) -> Option<&KeyModel> {
        self.written.get(index)
    }

    /// A projection by name (`base` for the base, if written).
    pub fn by_name(&self, name: &str) -> Option<&KeyModel> {
        self.written.iter().find(|p| p.name() == name)
    }

    /// The finest rollup any projection writes: what events are aggregated
    /// at (every coarser one is a sum of it).
    pub fn finest(&self) -> Rollup {
        self.written
            .iter()
            .flat_map(|p| p.rollups())
            .min_by_key(|r| r.unit_ms())
            .expect("every written projection has a rollup")
    }

    /// The most scatter prefixes of any projection.
    pub fn max_prefixes(&self) -> u32 {
        self.written.iter().map(KeyModel::prefixes).max().unwrap_or(1)
    }
}

/// One projection alone (a key model read or written by itself).
impl From<KeyModel> for Projections {
    fn from(km: KeyModel) -> Projections {
        Projections { all_dims: km.clone(), written: vec![km] }
    }
}

/// One item set: a projection's rollup, flushed on its own cadence. Sets
/// are numbered in layout order (projections as written, base first;
/// rollups as declared): a shard's checkpoint is kept per set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemSet {
    pub projection: String,
    /// Its projection's index among the written ones ([`Projections`]).
    pub index: usize,
    pub rollup: Rollup,
    /// Milliseconds between its flushes (`flush.interval_ms` unless
    /// `flush.every_ms` says otherwise).
    pub every_ms: u64,
}

/// Milliseconds between the flushes of `projection`'s `rollup`.
pub fn every_ms(flush: &FlushConfig, projection: &str, rollup: Rollup) -> u64 {
    let by_rollup = flush.every_ms.get(&format!("{projection}.{rollup}"));
    by_rollup.or_else(|| flush.every_ms.get(projection)).copied().unwrap_or(flush.interval_ms)
}

/// Every item set `config` writes, numbered in layout order.
pub fn item_sets(config: &Config) -> Vec<ItemSet> {
    let base = (!config.rollups.is_empty()).then(|| ProjectionSpec::base(config));
    let every = |name: &str, rollup: Rollup| every_ms(&config.flush, name, rollup);
    base.iter()
        .chain(&config.projections)
        .enumerate()
        .flat_map(|(index, p)| {
            p.rollups.iter().map(move |&rollup| ItemSet {
                projection: p.name.clone(),
                index,
                rollup,
                every_ms: every(&p.name, rollup),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(projections: &str) -> Result<Config, ConfigError> {
        Config::from_toml(projections)
    }

    #[test]
    fn defaults_resolve_against_the_top_level_and_orders_follow_the_layout() {
        let c = with("[[projection]]\nname = \"cc\"\ndimensions = [\"country\", \"campaign\"]\n").unwrap();
        let p = &c.projections[0];
        assert_eq!(p.dimensions, ["campaign", "country"], "layout order, not the listed one");
        assert_eq!(p.rollups, Rollup::ALL);
        assert_eq!(p.measures.len(), c.measures.len());
        assert_eq!(p.scatter, c.scatter);
        let c = with(
            "rollups = []\n[[projection]]\nname = \"t\"\nrollups = [\"hour\"]\nmeasures = [\"impressions\", \"clicks\"]\n\
             [projection.scatter]\nprefixes = 2\nmode = \"random\"\n",
        )
        .unwrap();
        let p = &c.projections[0];
        assert!(p.dimensions.is_empty());
        assert_eq!(p.measures, ["clicks", "impressions"]);
        assert_eq!(p.scatter.prefixes, 2);
        let all = Projections::new(&c).unwrap();
        assert_eq!(all.len(), 1, "no base rollups: the base is not written");
        assert_eq!(all.all_dims().dims().len(), 3, "events are still keyed by every dimension");
        assert_eq!(all.finest(), Rollup::Hour);
    }

    #[test]
    fn item_sets_are_numbered_in_layout_order_with_their_cadences() {
        let c = with(
            "[[projection]]\nname = \"cc\"\ndimensions = [\"country\"]\nrollups = [\"minute\", \"day\"]\n\
             [flush]\ninterval_ms = 1000\nevery_ms = { \"base.hour\" = 60000, \"cc\" = 5000, \"base\" = 3000 }\n",
        )
        .unwrap();
        let sets: Vec<(String, Rollup, u64)> =
            item_sets(&c).into_iter().map(|s| (s.projection, s.rollup, s.every_ms)).collect();
        let want = [
            ("base", Rollup::Minute, 3000),
            ("base", Rollup::Hour, 60000),
            ("base", Rollup::Day, 3000),
            ("cc", Rollup::Minute, 5000),
            ("cc", Rollup::Day, 5000),
        ];
        assert_eq!(sets, want.map(|(p, r, ms)| (p.to_string(), r, ms)));
        for (toml, want) in [
            ("[flush]\nevery_ms = { \"cc\" = 5000 }\n", "\"cc\" is no projection"),
            ("[flush]\nevery_ms = { \"base.week\" = 5000 }\n", "\"base.week\" is no projection"),
            ("[flush]\nevery_ms = { \"base\" = 5 }\n", "shorter than flush.interval_ms"),
        ] {
            let e = with(toml).unwrap_err().to_string();
            assert!(e.contains(want), "{toml}: {e}");
        }
        let mut changed = c.clone();
        changed.flush.every_ms.clear();
        assert_eq!(changed.layout_digest(), c.layout_digest(), "cadences are not layout");
    }

    #[test]
    fn mistakes_are_named() {
        let cases = [
            ("[[projection]]\nname = \"base\"\n", "projection base: `base` is"),
            ("[[projection]]\nname = \"By\"\n", "projection By: a name is"),
            ("[[projection]]\nname = \"a\"\ndimensions = [\"city\"]\n", "projection a: city is not a [[dimension]]"),
            ("[[projection]]\nname = \"a\"\nmeasures = [\"views\"]\n", "projection a: views is not a [[measure]]"),
            ("[[projection]]\nname = \"a\"\nrollups = []\n", "projection a: `rollups` is empty"),
            ("[[projection]]\nname = \"a\"\n[[projection]]\nname = \"a\"\n", "projection a is declared twice"),
            ("rollups = []\n", "nothing is written"),
            ("rollups = []\n[[projection]]\nname = \"a\"\n", "projection a: give `rollups`"),
            ("[[projection]]\nname = \"a\"\nwhat = 1\n", "unknown field `what`"),
        ];
        for (toml, want) in cases {
            let e = with(toml).unwrap_err().to_string();
            assert!(e.contains(want), "{toml}: {e}");
        }
    }
}
