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
//! force). `keys::Projections` is the set of key models one layout writes;
//! `config/projection_file.rs` resolves a declaration into a [`ProjectionSpec`].

use crate::rollup::Rollup;
use crate::scatter::{
    one_key_exceeds_a_partition, prefixes_for, writes_per_sec, Derived, RuleInputs, ScatterConfig, ScatterMode,
    PARTITION_WRITES_PER_SEC,
};
use serde::{Deserialize, Serialize};

/// The name of the projection the top-level declaration describes.
pub const BASE: &str = "base";

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

/// At most this many projections (the base included): a flush derives
/// each from every finest partial.
pub const MAX_PROJECTIONS: usize = 32;

impl ProjectionSpec {
    /// The scatter rule's count for this projection (its mode given), each rollup
    /// written every `every_ms(projection, rollup)` ms; Err says what is
    /// missing or why no count fits.
    pub fn derive_scatter(
        &self,
        mode: ScatterMode,
        inputs: &RuleInputs,
        every_ms: impl Fn(&str, Rollup) -> u64,
    ) -> Result<Derived, String> {
        let writers = inputs.writers.filter(|&w| w > 0).ok_or_else(|| {
            "prefixes = \"auto\" needs [scatter] writers = N (the most ingest workers writing at once)".to_string()
        })?;
        let mut keys = 1.0;
        for d in &self.dimensions {
            let n = inputs.cardinality.get(d).copied().filter(|&n| n > 0).ok_or_else(|| {
                format!(
                    "prefixes = \"auto\" needs the cardinality of dimension {d} ([scatter] cardinality = {{ {d} = N }})"
                )
            })?;
            // A value of the partition dimension has partitions of its own.
            if self.partition_by.as_deref() != Some(d.as_str()) {
                keys *= n as f64;
            }
        }
        let mut busiest: Option<(f64, Derived)> = None;
        for &rollup in &self.rollups {
            let ms = every_ms(&self.name, rollup);
            let interval_s = ms as f64 / 1000.0;
            if mode == ScatterMode::Hash && one_key_exceeds_a_partition(writers, interval_s) {
                return Err(format!(
                    "one key of {rollup}, written by {writers} writers every {ms} ms, takes more than a \
                     partition's {PARTITION_WRITES_PER_SEC} writes/s by itself: hash mode cannot spread it \
                     (use mode = \"random\")"
                ));
            }
            let mut rate = writes_per_sec(keys, writers, interval_s);
            if let Some(events) = inputs.events_per_sec {
                rate = rate.min(events as f64);
            }
            if busiest.as_ref().is_none_or(|(b, _)| rate > *b) {
                let d = Derived {
                    prefixes: prefixes_for(rate),
                    keys: keys.round() as u64,
                    rollup,
                    writes_per_sec: rate.ceil() as u64,
                    every_ms: ms,
                };
                busiest = Some((rate, d));
            }
        }
        busiest.map(|(_, d)| d).ok_or_else(|| format!("projection {} has no rollups", self.name))
    }
}

/// One item set: a projection's rollup, flushed on its own cadence. Sets
/// are numbered in layout order (projections as written, base first;
/// rollups as declared): a shard's checkpoint is kept per set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemSet {
    pub projection: String,
    /// Its projection's index among the written ones ([`crate::keys::Projections`]).
    pub index: usize,
    pub rollup: Rollup,
    /// Milliseconds between its flushes (`flush.interval_ms` unless
    /// `flush.every_ms` says otherwise).
    pub every_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, ConfigError};
    use crate::keys::Projections;

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
            c.item_sets().into_iter().map(|s| (s.projection, s.rollup, s.every_ms)).collect();
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
