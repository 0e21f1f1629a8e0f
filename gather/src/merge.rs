//! Merging partial aggregates. An item is one key's measures in one
//! rollup bucket, possibly one of several partials (random scatter writes a
//! key's bucket to several prefixes); merging is integer addition and
//! min/max, so the result does not depend on the order items arrive in.

use crate::error::{GatherError, Result};
use crate::filter::configured_dimension;
use std::collections::BTreeMap;
use zigzag_core::table::{AttrValue, Item};
use zigzag_model::keys::TIME_ATTR;
use zigzag_model::measure::ShowOptions;
use zigzag_model::{Config, MeasureSet, MeasureValues};

/// Group-by dimensions, checked against the configuration.
pub fn parse_group_by<S: AsRef<str>>(names: &[S], config: &Config) -> Result<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for name in names.iter().flat_map(|n| n.as_ref().split(',')).map(str::trim).filter(|n| !n.is_empty()) {
        let f =
            configured_dimension(name, config).map_err(|why| GatherError::GroupBy { field: name.to_string(), why })?;
        if out.contains(&f) {
            return Err(GatherError::GroupBy { field: name.to_string(), why: "is listed twice".into() });
        }
        out.push(f);
    }
    Ok(out)
}

/// The bucket start (attribute `t`) of an aggregate item.
pub fn bucket_of(item: &Item) -> Result<i64> {
    match item.attrs.get(TIME_ATTR) {
        Some(AttrValue::N(d)) => i64::try_from(*d).map_err(|_| item_err(item, format!("`t` = {d} is not an instant"))),
        other => Err(item_err(item, format!("`t` is {other:?}, not a number"))),
    }
}

/// A dimension value of an aggregate item, as text (numbers in their
/// shortest exact form).
pub fn value_of(item: &Item, dim: &str) -> Result<String> {
    match item.attrs.get(dim) {
        Some(AttrValue::S(s)) => Ok(s.clone()),
        Some(AttrValue::N(n)) => Ok(n.normalize().to_string()),
        other => Err(item_err(item, format!("`{dim}` is {other:?}, not a dimension value (is the layout ingest's?)"))),
    }
}

fn item_err(item: &Item, why: String) -> GatherError {
    GatherError::Item { pk: item.pk.clone(), why }
}

/// A group: the time bucket (for time series) and the group-by values.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupKey {
    pub bucket: Option<i64>,
    pub values: Vec<String>,
}

/// Measures summed per group.
#[derive(Debug, Clone, PartialEq)]
pub struct Aggregation {
    /// Bucket width; None: no time grouping.
    pub step: Option<i64>,
    pub group_by: Vec<String>,
    pub set: MeasureSet,
    pub groups: BTreeMap<GroupKey, MeasureValues>,
    /// What a report shows of measures with several columns (`--quantiles`).
    pub show: ShowOptions,
}

impl Aggregation {
    pub fn new(step: Option<i64>, group_by: Vec<String>, set: MeasureSet) -> Self {
        Aggregation { step, group_by, set, groups: BTreeMap::new(), show: ShowOptions::default() }
    }

    /// The start of the step-wide bucket holding `t` (epoch-aligned).
    pub fn bucket(&self, t: i64) -> Option<i64> {
        self.step.map(|s| t.div_euclid(s) * s)
    }

    /// Adds one aggregate item.
    pub fn add_item(&mut self, item: &Item) -> Result<()> {
        let t = bucket_of(item)?;
        let values = self.group_by.iter().map(|f| value_of(item, f)).collect::<Result<_>>()?;
        let m = MeasureValues::from_item(&self.set, item).map_err(|why| item_err(item, why))?;
        self.add(t, values, &m);
        Ok(())
    }

    /// Adds measures at instant `t` for a group.
    pub fn add(&mut self, t: i64, values: Vec<String>, m: &MeasureValues) {
        self.merge_group(GroupKey { bucket: self.bucket(t), values }, m);
    }

    /// Merges a group's measures in: the one merge of partial answers
    /// (items, a cache's slices, the pieces of a mixed plan).
    pub fn merge_group(&mut self, key: GroupKey, m: &MeasureValues) {
        match self.groups.get_mut(&key) {
            Some(g) => g.merge(m),
            None => {
                self.groups.insert(key, m.clone());
            }
        }
    }

    /// Everything summed.
    pub fn total(&self) -> MeasureValues {
        let mut m = self.set.zero();
        for g in self.groups.values() {
            m.merge(g);
        }
        m
    }

    /// Drops the time buckets: measures per group-by values.
    pub fn by_values(&self) -> BTreeMap<Vec<String>, MeasureValues> {
        let mut out: BTreeMap<Vec<String>, MeasureValues> = BTreeMap::new();
        for (k, m) in &self.groups {
            out.entry(k.values.clone()).or_insert_with(|| self.set.zero()).merge(m);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_are_exact_and_order_free() {
        let item = |t: i64, c: &str, clicks: i64, cost: &str| {
            let mut i = Item::new("000#hour#2025-11", vec![1]).with("t", t).with("country", c).with("clicks", clicks);
            i.attrs.insert("cost".into(), AttrValue::N(cost.parse().unwrap()));
            i.attrs.insert("cost_min".into(), AttrValue::N(cost.parse().unwrap()));
            i
        };
        let items = [item(0, "DE", 2, "0.1"), item(3_600_000, "DE", 3, "0.2"), item(60_000, "FR", 1, "0.000001")];
        let set = Config::default().measure_set().unwrap();
        let mut a = Aggregation::new(Some(3_600_000), vec!["country".into()], set);
        let mut b = a.clone();
        for i in &items {
            a.add_item(i).unwrap();
        }
        for i in items.iter().rev() {
            b.add_item(i).unwrap();
        }
        assert_eq!(a, b);
        assert_eq!(a.groups.len(), 3);
        let t = a.total();
        use zigzag_model::MeasureValue::*;
        assert_eq!((&t.0[0], &t.0[2], &t.0[3]), (&Count(6), &Sum(300_001), &Min(Some(1))));
        assert_eq!(a.by_values()[&vec!["DE".to_string()]].0[0], Count(5));
        let e = a.add_item(&Item::new("p", vec![1]).with("t", 0)).unwrap_err().to_string();
        assert!(e.contains("`country`"), "{e}");
    }

    #[test]
    fn group_by_names() {
        let c = Config::default();
        assert_eq!(parse_group_by(&["country,campaign"], &c).unwrap(), vec!["country", "campaign"]);
        let e = parse_group_by(&["country", "city"], &c).unwrap_err().to_string();
        assert!(e.contains("--group-by \"city\""), "{e}");
        assert!(parse_group_by(&["country,country"], &c).is_err());
    }
}
