//! Assembles the model's parts from a [`Config`]: key models, the set of
//! projections written, the layout recorded with the data, item sets and
//! the scatter rule's counts. Only the configuration knows all the parts;
//! here it hands each the pieces it needs, so no part imports it back
//! (`model/tests/module_graph.rs` checks).

use super::Config;
use crate::error::ConfigError;
use crate::keys::{KeyModel, KeyParts, Projections};
use crate::layout::{Layout, LAYOUT_VERSION};
use crate::projection::{ItemSet, ProjectionSpec, BASE};
use crate::rollup::Rollup;
use crate::scatter::{ScatterConfig, AUTO};
use std::collections::BTreeMap;

impl KeyModel {
    /// The base: every dimension and measure, the top-level rollups (maybe
    /// none) and scatter.
    pub fn new(config: &Config) -> Result<Self, ConfigError> {
        config.validate()?;
        Self::build(&KeyParts::of(config, &config.typed_fields()?), &ProjectionSpec::base(config))
    }

    /// A declared projection of `config`.
    pub fn projection(config: &Config, spec: &ProjectionSpec) -> Result<Self, ConfigError> {
        spec.validate(config)?;
        Self::build(&KeyParts::of(config, &config.typed_fields()?), spec)
    }
}

impl<'a> KeyParts<'a> {
    fn of(config: &'a Config, fields: &'a [crate::schema::TypedField]) -> Self {
        KeyParts {
            fields,
            dimensions: &config.dimensions,
            measures: &config.measures,
            ratios: &config.ratios,
            retention: &config.retention,
        }
    }
}

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
        Projections::from_models(base, written)
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
}

impl Layout {
    pub fn of(config: &Config) -> Layout {
        Layout {
            version: LAYOUT_VERSION,
            rollups: config.rollups.clone(),
            input: config.input.clone(),
            fields: config.fields.clone(),
            dimensions: config.dimensions.clone(),
            measures: config.measures.clone(),
            ratios: config.ratios.clone(),
            scatter_prefixes: config.scatter.prefixes,
            scatter_mode: config.scatter.mode,
            projections: config.projections.clone(),
            retention: config.retention.clone(),
        }
    }

    /// `config` with this layout (its flush settings kept).
    pub fn apply(&self, config: &Config) -> Config {
        let mut c = config.clone();
        c.rollups = self.rollups.clone();
        c.input = self.input.clone();
        c.fields = self.fields.clone();
        c.dimensions = self.dimensions.clone();
        c.measures = self.measures.clone();
        c.ratios = self.ratios.clone();
        c.scatter.prefixes = self.scatter_prefixes;
        c.scatter.mode = self.scatter_mode;
        c.projections = self.projections.clone();
        c.retention = self.retention.clone();
        c
    }
}

impl Config {
    /// Every item set this configuration writes, numbered in layout order.
    pub fn item_sets(&self) -> Vec<ItemSet> {
        let base = (!self.rollups.is_empty()).then(|| ProjectionSpec::base(self));
        base.iter()
            .chain(&self.projections)
            .enumerate()
            .flat_map(|(index, p)| {
                p.rollups.iter().map(move |&rollup| ItemSet {
                    projection: p.name.clone(),
                    index,
                    rollup,
                    every_ms: self.flush.every_ms(&p.name, rollup),
                })
            })
            .collect()
    }

    /// This configuration with the prefix counts `stored` records for the projections
    /// whose counts it derived (`prefixes = "auto"`): the table's hold,
    /// whatever the rule says now. A note per count taken that differs from
    /// the derived one.
    pub fn adopt_recorded(&self, stored: &Layout) -> (Config, Vec<String>) {
        let config = self;
        let mut c = config.clone();
        let mut notes = Vec::new();
        let mut take = |name: &str, mine: &mut u32, theirs: u32| {
            if *mine != theirs {
                notes.push(format!(
                    "scatter prefixes of {name}: {theirs}, as the table records them (the rule derives {mine} now; \
                     a count cannot change under written items)"
                ));
                *mine = theirs;
            }
        };
        for name in config.scatter_rule.derived.keys() {
            if name == BASE {
                take(name, &mut c.scatter.prefixes, stored.scatter_prefixes);
            } else if let (Some(p), Some(s)) = (
                c.projections.iter_mut().find(|p| &p.name == name),
                stored.projections.iter().find(|p| &p.name == name),
            ) {
                take(name, &mut p.scatter.prefixes, s.scatter.prefixes);
            }
        }
        (c, notes)
    }
}

/// Puts the scatter rule's count in place of every `"auto"` of `config`
/// (`Config::from_file`, once its projections are resolved), each
/// projection's from its own keys and cadences.
pub(crate) fn derive_counts(config: &mut Config) -> Result<(), ConfigError> {
    for d in config.scatter_rule.inputs.cardinality.keys() {
        if !config.dimensions.iter().any(|c| &c.field == d) {
            return Err(ConfigError::Invalid(format!("scatter.cardinality: {d} is not a [[dimension]]")));
        }
    }
    let flush = config.flush.clone();
    let every = |name: &str, rollup: Rollup| flush.every_ms(name, rollup);
    let inputs = config.scatter_rule.inputs.clone();
    let mut derived = BTreeMap::new();
    for p in config.projections.iter_mut().filter(|p| p.scatter.prefixes == AUTO) {
        let d = p
            .derive_scatter(p.scatter.mode, &inputs, every)
            .map_err(|why| ConfigError::Invalid(format!("projection {}: {why}", p.name)))?;
        p.scatter.prefixes = d.prefixes;
        derived.insert(p.name.clone(), d);
    }
    if config.scatter.prefixes == AUTO {
        if config.rollups.is_empty() {
            // No base is written: the count is only the default of
            // projections that give none, and each of those derived its own.
            config.scatter.prefixes = ScatterConfig::default().prefixes;
        } else {
            let base = ProjectionSpec::base(config);
            let d = base
                .derive_scatter(config.scatter.mode, &inputs, every)
                .map_err(|why| ConfigError::Invalid(format!("[scatter] (the base): {why}")))?;
            config.scatter.prefixes = d.prefixes;
            derived.insert(BASE.to_string(), d);
        }
    }
    config.scatter_rule.derived = derived;
    Ok(())
}
