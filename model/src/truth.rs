//! Ground truth: what a generator produced, summed the way reports sum it,
//! so a report can be checked against it exactly. Written by `loadgen`
//! (JSON), read by `gather check`. Measures are kept by name, so a truth
//! is checked against any layout that has those measures.
//!
//! [`Truth::add_event`] is the brute-force oracle: one event at a time,
//! each measure's value for that event merged in, with none of the
//! pipeline's accumulators.

use crate::keys::KeyModel;
use crate::measure::{MeasureKind, MeasureSet, MeasureValue, MeasureValues};
use crate::schema::value::display;
use crate::schema::{FieldValue, TypedField};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Measure values by measure name.
pub type Named = BTreeMap<String, MeasureValue>;

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Truth {
    pub seed: u64,
    /// Records generated, valid or not.
    pub records: u64,
    pub valid: u64,
    pub malformed: u64,
    /// Valid events whose time lies before an earlier record's time in the
    /// same shard by more than the jitter (late arrivals).
    pub late: u64,
    /// Smallest and largest valid event time, ms since the epoch.
    pub first_ms: Option<i64>,
    pub last_ms: Option<i64>,
    pub totals: Named,
    /// Keyed by UTC day `YYYY-MM-DD`.
    pub by_day: BTreeMap<String, Named>,
    /// Per dimension, per value (its text).
    pub by: BTreeMap<String, BTreeMap<String, Named>>,
    /// The exact values (the field's units) of each group of a sketch
    /// measure whose kind checks its answers against them
    /// (`Sketch::check_values`: a quantile's): by measure, then group
    /// ([`raw_group`]: `total/all`, `day/<UTC day>`, `<dimension>/<value>`).
    /// At most [`RAW_PER_GROUP`] values a group: a group with more keeps
    /// none (null) and is checked sketch for sketch only.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub raw: BTreeMap<String, BTreeMap<String, Option<Vec<i64>>>>,
}

/// Exact values kept per group of a sketch measure (160 KB of them): the
/// bound on a truth file's growth with the events.
pub const RAW_PER_GROUP: usize = 20_000;

/// A group's name in [`Truth::raw`]: `check` is `total`, `day` or a
/// dimension, `key` the group's (`all`, the day, the value).
pub fn raw_group(check: &str, key: &str) -> String {
    format!("{check}/{key}")
}

/// Adds one value to a group's kept values (none past the bound).
fn push_raw(into: &mut Option<Vec<i64>>, units: i64) {
    match into {
        Some(mine) if mine.len() < RAW_PER_GROUP => mine.push(units),
        _ => *into = None,
    }
}

fn merge_raw(into: &mut Option<Vec<i64>>, other: &Option<Vec<i64>>) {
    match (into.as_mut(), other) {
        (Some(mine), Some(theirs)) if mine.len() + theirs.len() <= RAW_PER_GROUP => mine.extend(theirs),
        _ => *into = None,
    }
}

fn merge_named(into: &mut Named, other: &Named) {
    for (k, v) in other {
        match into.get_mut(k) {
            Some(mine) => mine.merge(v),
            None => {
                into.insert(k.clone(), v.clone());
            }
        }
    }
}

impl Truth {
    /// The truth of two generators' records written to one table (e.g. two
    /// streams ingested side by side).
    pub fn merge(&mut self, other: &Truth) {
        self.records += other.records;
        self.valid += other.valid;
        self.malformed += other.malformed;
        self.late += other.late;
        self.first_ms = [self.first_ms, other.first_ms].into_iter().flatten().min();
        self.last_ms = [self.last_ms, other.last_ms].into_iter().flatten().max();
        merge_named(&mut self.totals, &other.totals);
        for (k, v) in &other.by_day {
            merge_named(self.by_day.entry(k.clone()).or_default(), v);
        }
        for (dim, values) in &other.by {
            let mine = self.by.entry(dim.clone()).or_default();
            for (k, v) in values {
                merge_named(mine.entry(k.clone()).or_default(), v);
            }
        }
        for (measure, groups) in &other.raw {
            let mine = self.raw.entry(measure.clone()).or_default();
            for (group, values) in groups {
                merge_raw(mine.entry(group.clone()).or_insert_with(|| Some(Vec::new())), values);
            }
        }
    }

    /// Adds one valid event (its typed values in field order) to the
    /// totals, its UTC day and each dimension's value.
    pub fn add_event(
        &mut self,
        set: &MeasureSet,
        keys: &KeyModel,
        fields: &[TypedField],
        ts_ms: i64,
        values: &[FieldValue<'_>],
    ) {
        self.valid += 1;
        self.first_ms = Some(self.first_ms.map_or(ts_ms, |f| f.min(ts_ms)));
        self.last_ms = Some(self.last_ms.map_or(ts_ms, |l| l.max(ts_ms)));
        let event = event_values(set, values);
        let one = event.named(set);
        merge_named(&mut self.totals, &one);
        let day = zigzag_core::schema::TimeBin::Day.label(ts_ms.div_euclid(86_400_000) * 86_400_000);
        let texts: Vec<(&str, String)> =
            keys.dims().iter().map(|d| (d.name.as_str(), display(&fields[d.field].spec, &values[d.field]))).collect();
        // Exact values of the measures whose kind checks its answers
        // against them (none in most layouts: no group names are made).
        let kept = set.measures().iter().zip(&event.0).filter_map(|(m, v)| {
            let checks = matches!(v, MeasureValue::Sketch(s) if s.checks_values());
            let matched = checks && m.condition.as_ref().is_none_or(|c| c.matches(values));
            Some((m, m.field.filter(|_| matched).and_then(|f| values[f].units())?))
        });
        for (m, units) in kept {
            let groups = [raw_group("total", "all"), raw_group("day", &day)]
                .into_iter()
                .chain(texts.iter().map(|(dim, text)| raw_group(dim, text)));
            let mine = self.raw.entry(m.name.clone()).or_default();
            for g in groups {
                push_raw(mine.entry(g).or_insert_with(|| Some(Vec::new())), units);
            }
        }
        merge_named(self.by_day.entry(day).or_default(), &one);
        for (dim, text) in texts {
            merge_named(self.by.entry(dim.to_string()).or_default().entry(text).or_default(), &one);
        }
    }
}

/// Each measure's value for one event alone.
pub fn event_values(set: &MeasureSet, values: &[FieldValue<'_>]) -> MeasureValues {
    let mut out = set.zero();
    for (m, v) in set.measures().iter().zip(out.0.iter_mut()) {
        if m.condition.as_ref().is_some_and(|c| !c.matches(values)) {
            continue;
        }
        let units = m.field.and_then(|f| values[f].units());
        match (m.kind, units, v) {
            (MeasureKind::Count, _, v) => *v = MeasureValue::Count(1),
            (MeasureKind::Sum, Some(u), v) => *v = MeasureValue::Sum(u as i128),
            (MeasureKind::Min, Some(u), v) => *v = MeasureValue::Min(Some(u)),
            (MeasureKind::Max, Some(u), v) => *v = MeasureValue::Max(Some(u)),
            (_, _, MeasureValue::Sketch(sketch)) => {
                if let Some(f) = m.field {
                    sketch.add(&values[f]);
                }
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;
    use std::borrow::Cow;

    #[test]
    fn events_add_by_day_and_dimension_and_truths_merge() {
        let config = Config::default();
        let set = config.measure_set().unwrap();
        let keys = KeyModel::new(&config).unwrap();
        let fields = config.typed_fields().unwrap();
        let ev = |kind: &'static str, country: &'static str, cost: Option<i64>| {
            let s = |x: &'static str| FieldValue::Str(Cow::Borrowed(x));
            vec![
                s(kind),
                FieldValue::Time(0),
                s("r"),
                s("c"),
                s(country),
                s("/"),
                cost.map_or(FieldValue::Absent, FieldValue::Dec),
                FieldValue::Absent,
            ]
        };
        let mut a = Truth::default();
        a.add_event(&set, &keys, &fields, 1_000, &ev("click", "DE", Some(5)));
        a.add_event(&set, &keys, &fields, 2_000, &ev("impression", "DE", None));
        let mut b = Truth::default();
        b.add_event(&set, &keys, &fields, 86_400_000, &ev("click", "FR", Some(3)));
        a.merge(&b);
        assert_eq!((a.valid, a.first_ms, a.last_ms), (3, Some(1_000), Some(86_400_000)));
        assert_eq!(a.totals["clicks"], MeasureValue::Count(2));
        assert_eq!(a.totals["impressions"], MeasureValue::Count(1));
        assert_eq!(a.totals["cost"], MeasureValue::Sum(8));
        assert_eq!(
            (&a.totals["cost_min"], &a.totals["cost_max"]),
            (&MeasureValue::Min(Some(3)), &MeasureValue::Max(Some(5)))
        );
        assert_eq!(a.by["country"]["DE"]["clicks"], MeasureValue::Count(1));
        assert_eq!(a.by["country"]["DE"]["cost_min"], MeasureValue::Min(Some(5)));
        assert_eq!(a.by_day.len(), 2);
        assert_eq!(a.by["campaign"]["c"]["impressions"], MeasureValue::Count(1));
    }
}
