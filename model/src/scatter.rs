//! The scatter rule (the GSI write-scaling article's write-rate formula), what it is given, and
//! the prefix counts it derives for `prefixes = "auto"`.
//!
//! A writer writes each item it saw at most once per flush, so the items of
//! one projection, rollup and bucket take `items × writers / interval`
//! writes per second (writers: those that see a key; all of them when the
//! stream's partition key is random, one when it is a dimension the
//! projection keeps), spread over its `P` prefixes (hash mode: each key in
//! one; random mode: each write anywhere). A partition takes about 1,000
//! writes/s, and a report reads every prefix: choose the least `P` that
//! keeps `items × writers / (interval × P)` at half that or less. For the
//! shipped layout at 100 writers, a random partition key and 10 s: `total`
//! holds 1 item a bucket (10 writes/s: `P = 1`), `cc` up to 480 (4,800
//! writes/s: `P = 16`, 300 a partition; the least is 10). With fewer keys
//! than prefixes, hash mode cannot spread one key: a key written more than
//! ~500 times a second needs random mode.
//!
//! **Derived counts.** `[scatter] prefixes = "auto"` (or a projection's
//! own) asks the rule for the count, from inputs declared beside it:
//!
//! ```toml
//! [scatter]
//! prefixes = "auto"
//! writers = 100                  # the most ingest workers writing at once
//! events_per_sec = 20000         # optional: the stream's peak rate
//! cardinality = { referrer = 10000, campaign = 40, country = 12 }
//! ```
//!
//! A projection's keys a bucket are the product of its dimensions'
//! cardinalities (1 without dimensions; a `partition_by` dimension's values
//! each have partitions of their own, so its cardinality divides them,
//! taking the values as equally busy). No writer writes more items a flush
//! than it read events, so with `events_per_sec` given a bucket's writes
//! per second are at most that. The count is the rule's at each rollup's
//! cadence (`flush.every_ms`), the largest over its rollups. A hash-mode
//! projection whose one key alone exceeds a partition is refused (random
//! mode spreads it).
//!
//! Only the counts are part of the layout, not the inputs. The first writer
//! records the derived counts; a later writer whose inputs derive other
//! counts takes the table's (`Config::adopt_recorded`, with a note saying so):
//! changing a prefix count would move items, so it never happens silently
//! nor by a change of cadence.

use crate::rollup::Rollup;
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Writes per second one partition is given by the scatter rule: half of
/// DynamoDB's 1,000 WCU a partition.
pub const PARTITION_WRITES_PER_SEC: f64 = 500.0;

/// The most prefixes a projection may have (the layout's bound).
pub const MAX_PREFIXES: u32 = 1000;

/// A prefix count the scatter rule is yet to derive (during
/// `Config::from_file` only: never a count a layout records).
pub(crate) const AUTO: u32 = 0;

/// The scatter rule: the least prefix count that keeps each partition of a
/// projection's rollup at or under [`PARTITION_WRITES_PER_SEC`], for
/// `items` items a bucket, each written by `writers` workers once per
/// flush every `interval_s` seconds; at most [`MAX_PREFIXES`].
pub fn scatter_prefixes(items: f64, writers: u32, interval_s: f64) -> u32 {
    prefixes_for(writes_per_sec(items, writers, interval_s))
}

/// Writes per second of `items` items a bucket, each written by `writers`
/// workers once per flush every `interval_s` seconds.
pub(crate) fn writes_per_sec(items: f64, writers: u32, interval_s: f64) -> f64 {
    items.max(0.0) * writers as f64 / interval_s.max(1e-3)
}

pub(crate) fn prefixes_for(writes_per_sec: f64) -> u32 {
    (writes_per_sec / PARTITION_WRITES_PER_SEC).ceil().clamp(1.0, MAX_PREFIXES as f64) as u32
}

/// Whether one key, written by `writers` workers every `interval_s`
/// seconds, exceeds a partition by itself: then only random scatter mode
/// spreads it (hash mode keeps a key in one prefix).
pub fn one_key_exceeds_a_partition(writers: u32, interval_s: f64) -> bool {
    writers as f64 / interval_s.max(1e-3) > PARTITION_WRITES_PER_SEC
}

/// How a write picks its scatter prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ScatterMode {
    /// A stable hash of the item's key: one item per logical key.
    Hash,
    /// A fresh pseudo-random prefix per write (the GSI write-scaling article), derived from the
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

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
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

/// A prefix count as a configuration file gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrefixCount {
    Count(u32),
    /// The scatter rule's (`ProjectionSpec::derive_scatter`).
    Auto,
}

impl PrefixCount {
    /// The count, [`AUTO`] for the rule's; Err for a count out of bounds.
    pub(crate) fn resolve(self) -> Result<u32, String> {
        match self {
            PrefixCount::Auto => Ok(AUTO),
            PrefixCount::Count(n) if (1..=MAX_PREFIXES).contains(&n) => Ok(n),
            PrefixCount::Count(n) => Err(format!("scatter.prefixes = {n} must be in 1..={MAX_PREFIXES}")),
        }
    }
}

impl Default for PrefixCount {
    fn default() -> Self {
        PrefixCount::Count(ScatterConfig::default().prefixes)
    }
}

impl<'de> Deserialize<'de> for PrefixCount {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = PrefixCount;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number of prefixes or \"auto\"")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<PrefixCount, E> {
                u32::try_from(v).map(PrefixCount::Count).map_err(|_| E::custom(format!("{v} prefixes")))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<PrefixCount, E> {
                u32::try_from(v).map(PrefixCount::Count).map_err(|_| E::custom(format!("{v} prefixes")))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<PrefixCount, E> {
                match v {
                    "auto" => Ok(PrefixCount::Auto),
                    other => Err(E::custom(format!("{other:?}: expected a number of prefixes or \"auto\""))),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// What the rule is given (`[scatter]`'s keys beside `prefixes` and
/// `mode`); not part of the layout.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleInputs {
    /// The most ingest workers writing the table at once.
    pub writers: Option<u32>,
    /// The stream's peak rate, events per second.
    pub events_per_sec: Option<u64>,
    /// Distinct values expected of each dimension.
    pub cardinality: BTreeMap<String, u64>,
}

/// The rule's inputs, and the counts it derived, by projection name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScatterRule {
    pub inputs: RuleInputs,
    pub derived: BTreeMap<String, Derived>,
}

/// A count the rule derived for one projection, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Derived {
    pub prefixes: u32,
    /// Its keys a bucket (a partition value's, for `partition_by`).
    pub keys: u64,
    /// The busiest rollup: its writes per second and cadence.
    pub rollup: Rollup,
    pub writes_per_sec: u64,
    pub every_ms: u64,
}

impl fmt::Display for Derived {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "auto: {} keys a bucket, {} writes/s at {} every {} ms, {} a partition",
            self.keys, self.writes_per_sec, self.rollup, self.every_ms, PARTITION_WRITES_PER_SEC
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::layout::Layout;
    use crate::projection::ProjectionSpec;

    #[test]
    fn the_scatter_rule_keeps_each_partition_at_half_its_write_capacity() {
        // The GSI write-scaling article: 1,000 WCU a partition, half of it given.
        assert_eq!(scatter_prefixes(1.0, 100, 10.0), 1, "total: 10 writes/s");
        assert_eq!(scatter_prefixes(480.0, 100, 10.0), 10, "cc: 4,800 writes/s, 480 a partition");
        assert_eq!(scatter_prefixes(500.0, 1, 1.0), 1, "exactly at the bound");
        assert_eq!(scatter_prefixes(501.0, 1, 1.0), 2);
        assert_eq!(scatter_prefixes(0.0, 100, 10.0), 1, "at least one");
        assert_eq!(scatter_prefixes(1e9, 100, 1.0), 1000, "at most the layout's bound");
        assert!(one_key_exceeds_a_partition(1000, 1.0));
        assert!(!one_key_exceeds_a_partition(100, 10.0));
    }

    fn spec(dimensions: &[&str], rollups: &[Rollup], partition_by: Option<&str>) -> ProjectionSpec {
        ProjectionSpec {
            name: "p".into(),
            dimensions: dimensions.iter().map(|d| d.to_string()).collect(),
            rollups: rollups.to_vec(),
            measures: vec!["clicks".into()],
            scatter: Default::default(),
            partition_by: partition_by.map(str::to_string),
        }
    }

    fn inputs(writers: u32, events: Option<u64>) -> RuleInputs {
        RuleInputs {
            writers: Some(writers),
            events_per_sec: events,
            cardinality: [("referrer", 10_000), ("campaign", 40), ("country", 12)]
                .into_iter()
                .map(|(d, n)| (d.to_string(), n))
                .collect(),
        }
    }

    #[test]
    fn a_derived_count_is_the_rules_at_the_busiest_rollup() {
        let every = |_: &str, r: Rollup| if r == Rollup::Minute { 10_000 } else { 300_000 };
        // cc at 100 writers: 480 keys x 100 / 10 s = 4,800 writes/s -> 10.
        let cc = ProjectionSpec::derive_scatter(
            &spec(&["campaign", "country"], &[Rollup::Minute, Rollup::Hour], None),
            ScatterMode::Hash,
            &inputs(100, None),
            every,
        )
        .unwrap();
        assert_eq!((cc.prefixes, cc.rollup, cc.writes_per_sec), (10, Rollup::Minute, 4800));
        // The events cap: at most 20,000 writes/s whatever the keys.
        let base = spec(&["referrer", "campaign", "country"], &[Rollup::Minute], None);
        let capped =
            ProjectionSpec::derive_scatter(&base, ScatterMode::Hash, &inputs(100, Some(20_000)), every).unwrap();
        assert_eq!((capped.prefixes, capped.writes_per_sec), (40, 20_000));
        let uncapped = ProjectionSpec::derive_scatter(&base, ScatterMode::Hash, &inputs(100, None), every).unwrap();
        assert_eq!(uncapped.prefixes, MAX_PREFIXES, "4.8 M keys a bucket: the layout's bound");
        // No dimensions: one key, one prefix.
        let total = ProjectionSpec::derive_scatter(
            &spec(&[], &[Rollup::Minute], None),
            ScatterMode::Hash,
            &inputs(100, None),
            every,
        )
        .unwrap();
        assert_eq!((total.keys, total.prefixes), (1, 1));
        // A partition value's keys: referrers of one country.
        let by = spec(&["referrer", "country"], &[Rollup::Hour], Some("country"));
        let d = ProjectionSpec::derive_scatter(&by, ScatterMode::Hash, &inputs(100, None), every).unwrap();
        assert_eq!((d.keys, d.prefixes), (10_000, 7), "10,000 x 100 / 300 s = 3,333 writes/s");
    }

    #[test]
    fn a_derivation_without_its_inputs_or_past_hash_modes_reach_is_refused() {
        let every = |_: &str, _: Rollup| 10_000;
        let cc = spec(&["campaign", "country"], &[Rollup::Minute], None);
        let none = RuleInputs::default();
        assert!(ProjectionSpec::derive_scatter(&cc, ScatterMode::Hash, &none, every).unwrap_err().contains("writers"));
        let mut partial = inputs(10, None);
        partial.cardinality.remove("country");
        let e = ProjectionSpec::derive_scatter(&cc, ScatterMode::Hash, &partial, every).unwrap_err();
        assert!(e.contains("cardinality of dimension country"), "{e}");
        // 10,000 writers every 10 s: 1,000 writes/s on one key.
        let e = ProjectionSpec::derive_scatter(&cc, ScatterMode::Hash, &inputs(10_000, None), every).unwrap_err();
        assert!(e.contains("mode = \"random\""), "{e}");
        assert!(ProjectionSpec::derive_scatter(&cc, ScatterMode::Random, &inputs(10_000, None), every).is_ok());
    }

    #[test]
    fn auto_in_a_file_derives_each_projections_count_from_its_own_keys() {
        let text = "[scatter]\nprefixes = \"auto\"\nwriters = 100\n\
                    cardinality = { referrer = 10000, campaign = 40, country = 12 }\n\
                    [[projection]]\nname = \"cc\"\ndimensions = [\"campaign\", \"country\"]\n\
                    [[projection]]\nname = \"fixed\"\ndimensions = [\"country\"]\n\
                    [projection.scatter]\nprefixes = 3\n\
                    [flush]\ninterval_ms = 10000\n";
        let c = Config::from_toml(text).unwrap();
        // Every rollup at 10 s: the base's 4.8 M keys are past the bound.
        assert_eq!(c.scatter.prefixes, MAX_PREFIXES);
        let count = |name: &str| c.projections.iter().find(|p| p.name == name).unwrap().scatter.prefixes;
        assert_eq!(count("cc"), 10, "inherits auto, derived from its own 480 keys");
        assert_eq!(count("fixed"), 3, "its own count");
        let derived: Vec<&str> = c.scatter_rule.derived.keys().map(String::as_str).collect();
        assert_eq!(derived, vec!["base", "cc"]);
        // What the layout records is the counts, not the inputs.
        let layout = Layout::of(&c).canonical();
        assert!(layout.contains("\"scatter_prefixes\":1000") && !layout.contains("cardinality"), "{layout}");
    }

    #[test]
    fn a_file_that_cannot_derive_a_count_is_refused_naming_why() {
        let refused = |text: &str| Config::from_toml(text).unwrap_err().to_string();
        let e = refused("[scatter]\nprefixes = \"many\"\n");
        assert!(e.contains("expected a number of prefixes or \"auto\""), "{e}");
        let e = refused("[scatter]\nprefixes = \"auto\"\n");
        assert!(e.contains("[scatter] writers"), "{e}");
        let e = refused("[scatter]\nprefixes = 0\n");
        assert!(e.contains("must be in 1..=1000"), "{e}");
        let e = refused("[scatter]\nwriters = 4\ncardinality = { nope = 3 }\n");
        assert!(e.contains("scatter.cardinality: nope is not a [[dimension]]"), "{e}");
        let e = refused(
            "[[projection]]\nname = \"cc\"\ndimensions = [\"campaign\"]\n[projection.scatter]\nprefixes = \"auto\"\n",
        );
        assert!(e.contains("projection cc: prefixes = \"auto\" needs [scatter] writers"), "{e}");
    }

    #[test]
    fn a_table_s_recorded_counts_replace_derived_ones_and_only_those() {
        let text = "[scatter]\nprefixes = \"auto\"\nwriters = 10\nevents_per_sec = 5000\n\
                    cardinality = { referrer = 10000, campaign = 40, country = 12 }\n\
                    [[projection]]\nname = \"cc\"\ndimensions = [\"campaign\", \"country\"]\n\
                    [[projection]]\nname = \"one\"\n[projection.scatter]\nprefixes = 2\n";
        let written = Config::from_toml(text).unwrap();
        let stored = Layout::of(&written);
        // Ten times the writers and the rate: the rule now derives more of each.
        let now =
            Config::from_toml(&text.replace("writers = 10", "writers = 100").replace("= 5000", "= 50000")).unwrap();
        assert_ne!(Layout::of(&now).differences(&stored), Vec::<String>::new());
        let (adopted, notes) = now.adopt_recorded(&stored);
        assert!(Layout::of(&adopted).differences(&stored).is_empty(), "the table's counts");
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes.iter().any(|n| n.starts_with("scatter prefixes of cc: ")), "{notes:?}");
        // A count given outright is not replaced: the layout check refuses it.
        let given = Config::from_toml(&text.replace("prefixes = 2", "prefixes = 5")).unwrap();
        let (kept, _) = given.adopt_recorded(&stored);
        assert!(!Layout::of(&kept).differences(&stored).is_empty());
    }
}
