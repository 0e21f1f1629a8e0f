//! What an expression evaluates to: a scalar per evaluation step, or a set
//! of series (label sets) each with a value or none per step. An instant
//! query is a range query of one step, as in Prometheus's engine.

use std::collections::BTreeMap;

/// The label that holds a series' metric name.
pub const NAME: &str = "__name__";

/// A series' identity: label name → value, sorted (empty values are never
/// stored: Prometheus treats an empty label as absent).
pub type Labels = BTreeMap<String, String>;

/// Series, each with one slot per evaluation step (None: no sample then).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Vector {
    pub series: BTreeMap<Labels, Vec<Option<f64>>>,
}

impl Vector {
    /// The series' values at step `i`, those that have one.
    pub fn at(&self, i: usize) -> impl Iterator<Item = (&Labels, f64)> {
        self.series.iter().filter_map(move |(l, v)| v.get(i).copied().flatten().map(|x| (l, x)))
    }

    /// Series with no sample at any step are not part of a result.
    pub fn prune(mut self) -> Vector {
        self.series.retain(|_, v| v.iter().any(Option::is_some));
        self
    }

    /// Adds `x` to series `labels` at step `i` of `steps`.
    pub fn set(&mut self, labels: Labels, steps: usize, i: usize, x: f64) {
        self.series.entry(labels).or_insert_with(|| vec![None; steps])[i] = Some(x);
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// One number per step.
    Scalar(Vec<f64>),
    Vector(Vector),
}

/// A sample value as Prometheus writes it (Go's `FormatFloat(v, 'f', -1,
/// 64)`: the shortest exact decimal, never an exponent; `+Inf`, `-Inf`,
/// `NaN`).
pub fn format_value(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x == f64::INFINITY {
        "+Inf".into()
    } else if x == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        // Rust's Display is the shortest round-trip decimal without an exponent.
        format!("{x}")
    }
}

/// An instant as Prometheus writes it in results: seconds, a number with
/// at most millisecond precision.
pub fn format_time(ms: i64) -> serde_json::Value {
    if ms % 1000 == 0 {
        serde_json::Value::from(ms / 1000)
    } else {
        serde_json::Number::from_f64(ms as f64 / 1000.0).map_or(serde_json::Value::Null, serde_json::Value::Number)
    }
}

/// `labels` without the metric name.
pub fn without_name(labels: &Labels) -> Labels {
    let mut l = labels.clone();
    l.remove(NAME);
    l
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_written_as_prometheus_writes_them() {
        assert_eq!(format_value(3.0), "3");
        assert_eq!(format_value(0.25), "0.25");
        assert_eq!(format_value(1e21), "1000000000000000000000");
        assert_eq!(format_value(1e-7), "0.0000001");
        assert_eq!(format_value(f64::INFINITY), "+Inf");
        assert_eq!(format_value(f64::NEG_INFINITY), "-Inf");
        assert_eq!(format_value(f64::NAN), "NaN");
        assert_eq!(format_value(-2.5), "-2.5");
        assert_eq!(format_time(1_700_000_000_000), serde_json::json!(1_700_000_000));
        assert_eq!(format_time(1_700_000_000_500), serde_json::json!(1_700_000_000.5));
    }

    #[test]
    fn a_series_without_samples_is_pruned() {
        let mut v = Vector::default();
        v.series.insert(Labels::new(), vec![None, None]);
        let mut l = Labels::new();
        l.insert("a".into(), "b".into());
        v.set(l.clone(), 2, 1, 4.0);
        let v = v.prune();
        assert_eq!(v.series.len(), 1);
        assert_eq!(v.at(1).collect::<Vec<_>>(), vec![(&l, 4.0)]);
        assert_eq!(v.at(0).count(), 0);
    }
}
