//! CloudWatch's embedded metric format (EMF): a recorder that keeps every
//! metric the libraries emit, and [`EmfRecorder::documents`], JSON lines
//! of them for the log (CloudWatch Logs turns it into metrics; no
//! PutMetricData, no agent, no extra IAM action).
//!
//! What an interval's first document holds, per metric name (labels are
//! summed away, so a per-shard label never becomes thousands of CloudWatch
//! metrics):
//! - a counter: its increase since the previous document (Count);
//! - a gauge: its value now, summed over its labels, except the
//!   millis-behind gauges, which take the maximum over shards
//!   (Milliseconds);
//! - a histogram: the values observed since the previous document (at most
//!   100, EMF's limit per metric: more are folded into 100 equal-count
//!   groups, each its group's mean).
//!
//! One dimension, `Stream`, so several workers of one stream add up.
//!
//! A counter labelled `reason` (dead letters by why they failed) is also
//! reported per reason, under the dimensions `Stream` and `reason`, in one
//! more document per reason: its reasons are few, and an alarm must tell
//! them apart (a late event after `gather compact`, reason `sealed`, is
//! expected; a malformed record is not). A document has one value per
//! dimension, hence a document per reason.

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_util::registry::{AtomicStorage, Registry};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// EMF's limit of values per metric in one document.
const MAX_VALUES: usize = 100;

/// Where the documents go and how they are labelled.
#[derive(Debug, Clone)]
pub struct EmfOptions {
    pub namespace: String,
    /// The value of the `Stream` dimension.
    pub stream: String,
}

/// A clone shares the metrics (one goes to the global recorder, one writes
/// the documents).
#[derive(Clone)]
pub struct EmfRecorder {
    registry: Arc<Registry<Key, AtomicStorage>>,
    /// Each counter's value in the previous document.
    reported: Arc<Mutex<HashMap<Key, u64>>>,
    options: Arc<EmfOptions>,
}

impl EmfRecorder {
    pub fn new(options: EmfOptions) -> Self {
        EmfRecorder {
            registry: Arc::new(Registry::atomic()),
            reported: Arc::new(Mutex::new(HashMap::new())),
            options: Arc::new(options),
        }
    }

    /// The documents for the interval since the previous one, stamped
    /// `timestamp_ms`: every metric under `Stream`, then one per reason of
    /// the counters labelled `reason`; none when no metric exists yet.
    pub fn documents(&self, timestamp_ms: i64) -> Vec<String> {
        let mut values: BTreeMap<String, (Value, &'static str)> = BTreeMap::new();

        let mut increases: BTreeMap<String, u64> = BTreeMap::new();
        // reason -> counter name -> increase.
        let mut by_reason: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
        {
            let mut reported = self.reported.lock().unwrap_or_else(|e| e.into_inner());
            self.registry.visit_counters(|key, counter| {
                let now = counter.load(Ordering::Relaxed);
                let before = reported.insert(key.clone(), now).unwrap_or(0);
                let increase = now.saturating_sub(before);
                *increases.entry(key.name().to_string()).or_default() += increase;
                if let Some(reason) = key.labels().find(|l| l.key() == REASON) {
                    let names = by_reason.entry(reason.value().to_string()).or_default();
                    *names.entry(key.name().to_string()).or_default() += increase;
                }
            });
        }
        for (name, increase) in increases {
            values.insert(name, (json!(increase), "Count"));
        }

        let mut gauges: BTreeMap<String, f64> = BTreeMap::new();
        self.registry.visit_gauges(|key, gauge| {
            let value = f64::from_bits(gauge.load(Ordering::Relaxed));
            let name = key.name();
            let slot = gauges.entry(name.to_string()).or_insert(if takes_max(name) { f64::MIN } else { 0.0 });
            *slot = if takes_max(name) { slot.max(value) } else { *slot + value };
        });
        for (name, value) in gauges {
            let unit = if takes_max(&name) { "Milliseconds" } else { "None" };
            values.insert(name, (json!(value), unit));
        }

        let mut observed: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        self.registry.visit_histograms(|key, bucket| {
            bucket.clear_with(|seen| observed.entry(key.name().to_string()).or_default().extend_from_slice(seen));
        });
        for (name, seen) in observed {
            if !seen.is_empty() {
                let unit = if name.ends_with("_seconds") { "Seconds" } else { "None" };
                values.insert(name, (json!(at_most_100(seen)), unit));
            }
        }

        if values.is_empty() {
            return Vec::new();
        }
        let mut docs = vec![self.document(timestamp_ms, &[], values)];
        for (reason, names) in by_reason {
            let values = names.into_iter().map(|(name, n)| (name, (json!(n), "Count"))).collect();
            docs.push(self.document(timestamp_ms, &[(REASON, &reason)], values));
        }
        docs
    }

    /// One document: `values` (name -> value, unit) under the `Stream`
    /// dimension and `extra` ones.
    fn document(
        &self,
        timestamp_ms: i64,
        extra: &[(&str, &str)],
        values: BTreeMap<String, (Value, &'static str)>,
    ) -> String {
        let definitions: Vec<Value> =
            values.iter().map(|(name, (_, unit))| json!({ "Name": name, "Unit": unit })).collect();
        let dimensions: Vec<&str> = std::iter::once("Stream").chain(extra.iter().map(|(k, _)| *k)).collect();
        let mut doc = Map::new();
        doc.insert(
            "_aws".into(),
            json!({
                "Timestamp": timestamp_ms,
                "CloudWatchMetrics": [{
                    "Namespace": self.options.namespace,
                    "Dimensions": [dimensions],
                    "Metrics": definitions,
                }],
            }),
        );
        doc.insert("Stream".into(), json!(self.options.stream));
        for (k, v) in extra {
            doc.insert((*k).into(), json!(v));
        }
        for (name, (value, _)) in values {
            doc.insert(name, value);
        }
        Value::Object(doc).to_string()
    }
}

/// The label a counter is also reported by.
const REASON: &str = "reason";

/// Gauges of lag: the worst shard matters, not their sum.
fn takes_max(name: &str) -> bool {
    name.contains("millis_behind")
}

/// `values` as at most [`MAX_VALUES`] numbers: sorted and folded into
/// equal-count groups, each its group's mean, when there are more.
fn at_most_100(mut values: Vec<f64>) -> Vec<f64> {
    if values.len() <= MAX_VALUES {
        return values;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    (0..MAX_VALUES)
        .map(|g| {
            let group = &values[g * n / MAX_VALUES..(g + 1) * n / MAX_VALUES];
            group.iter().sum::<f64>() / group.len() as f64
        })
        .collect()
}

impl Recorder for EmfRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.registry.get_or_create_counter(key, Arc::clone))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.registry.get_or_create_gauge(key, Arc::clone))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.registry.get_or_create_histogram(key, Arc::clone))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorder() -> EmfRecorder {
        EmfRecorder::new(EmfOptions { namespace: "Zigzag".into(), stream: "clicks".into() })
    }

    fn parse(doc: &str) -> Value {
        serde_json::from_str(doc).expect("a document is one JSON object")
    }

    /// The interval's documents, parsed.
    fn all(r: &EmfRecorder, timestamp_ms: i64) -> Vec<Value> {
        r.documents(timestamp_ms).iter().map(|d| parse(d)).collect()
    }

    /// The interval's document of every metric (the first).
    fn first(r: &EmfRecorder, timestamp_ms: i64) -> Value {
        all(r, timestamp_ms).into_iter().next().expect("a document")
    }

    #[test]
    fn a_counter_labelled_by_reason_is_also_reported_per_reason_in_a_document_of_its_own() {
        let r = recorder();
        metrics::with_local_recorder(&r, || {
            metrics::counter!("zigzag_ingest_dead_letters_total", "reason" => "malformed_json").increment(3);
            metrics::counter!("zigzag_ingest_dead_letters_total", "reason" => "sealed").increment(2);
            metrics::counter!("zigzag_ingest_records_total", "shard" => "a").increment(9);
        });
        let docs = all(&r, 1_000);
        assert_eq!(docs.len(), 3, "every metric, then one per reason: {docs:?}");
        assert_eq!(docs[0]["zigzag_ingest_dead_letters_total"], 5, "the total stays under Stream alone");
        for (doc, reason, n) in [(&docs[1], "malformed_json", 3), (&docs[2], "sealed", 2)] {
            let directive = &doc["_aws"]["CloudWatchMetrics"][0];
            assert_eq!(directive["Dimensions"], json!([["Stream", "reason"]]));
            assert_eq!(directive["Metrics"], json!([{ "Name": "zigzag_ingest_dead_letters_total", "Unit": "Count" }]));
            assert_eq!(doc["Stream"], "clicks");
            assert_eq!(doc["reason"], reason);
            assert_eq!(doc["zigzag_ingest_dead_letters_total"], n);
            assert!(doc.get("zigzag_ingest_records_total").is_none(), "a counter without a reason is not repeated");
        }
        metrics::with_local_recorder(&r, || {
            metrics::counter!("zigzag_ingest_dead_letters_total", "reason" => "sealed").increment(4);
        });
        let docs = all(&r, 2_000);
        assert_eq!(docs[1]["zigzag_ingest_dead_letters_total"], 0, "malformed_json: nothing new");
        assert_eq!(docs[2]["zigzag_ingest_dead_letters_total"], 4, "sealed: the increase since the last document");
    }

    #[test]
    fn counters_report_their_increase_summed_over_labels() {
        let r = recorder();
        metrics::with_local_recorder(&r, || {
            metrics::counter!("zigzag_ingest_dead_letters_total", "reason" => "json").increment(3);
            metrics::counter!("zigzag_ingest_dead_letters_total", "reason" => "sealed").increment(2);
        });
        let doc = first(&r, 1_000);
        assert_eq!(doc["zigzag_ingest_dead_letters_total"], 5);
        metrics::with_local_recorder(&r, || {
            metrics::counter!("zigzag_ingest_dead_letters_total", "reason" => "json").increment(1);
        });
        let doc = first(&r, 2_000);
        assert_eq!(doc["zigzag_ingest_dead_letters_total"], 1, "the increase since the last document");
        let doc = first(&r, 3_000);
        assert_eq!(doc["zigzag_ingest_dead_letters_total"], 0, "nothing new: zero, not absent");
    }

    #[test]
    fn gauges_sum_over_labels_except_lag_which_takes_the_worst_shard() {
        let r = recorder();
        metrics::with_local_recorder(&r, || {
            metrics::gauge!("zigzag_ingest_shard_reading", "shard" => "a").set(1.0);
            metrics::gauge!("zigzag_ingest_shard_reading", "shard" => "b").set(1.0);
            metrics::gauge!("zigzag_ingest_millis_behind", "shard" => "a").set(120.0);
            metrics::gauge!("zigzag_ingest_millis_behind", "shard" => "b").set(4_500.0);
        });
        let doc = first(&r, 1_000);
        assert_eq!(doc["zigzag_ingest_shard_reading"], 2.0);
        assert_eq!(doc["zigzag_ingest_millis_behind"], 4_500.0);
        let defs = doc["_aws"]["CloudWatchMetrics"][0]["Metrics"].as_array().unwrap();
        let unit = |name: &str| defs.iter().find(|d| d["Name"] == name).map(|d| d["Unit"].clone());
        assert_eq!(unit("zigzag_ingest_millis_behind"), Some(json!("Milliseconds")));
    }

    #[test]
    fn a_document_declares_every_metric_it_carries_under_the_stream_dimension() {
        let r = recorder();
        assert!(r.documents(0).is_empty(), "no metric yet: no document");
        metrics::with_local_recorder(&r, || {
            metrics::counter!("zigzag_ingest_records_total").increment(7);
            metrics::histogram!("zigzag_ingest_flush_seconds").record(0.25);
        });
        let doc = first(&r, 1_795_200_000_000);
        let aws = &doc["_aws"];
        assert_eq!(aws["Timestamp"], 1_795_200_000_000_i64);
        let directive = &aws["CloudWatchMetrics"][0];
        assert_eq!(directive["Namespace"], "Zigzag");
        assert_eq!(directive["Dimensions"], json!([["Stream"]]));
        assert_eq!(doc["Stream"], "clicks");
        for def in directive["Metrics"].as_array().unwrap() {
            let name = def["Name"].as_str().unwrap();
            assert!(doc.get(name).is_some(), "{name} declared but not carried");
        }
        assert_eq!(doc["zigzag_ingest_flush_seconds"], json!([0.25]));
        assert_eq!(doc["zigzag_ingest_records_total"], 7);
    }

    #[test]
    fn histograms_carry_at_most_100_values_that_keep_the_mean() {
        let values: Vec<f64> = (0..1_000).map(f64::from).collect();
        let folded = at_most_100(values.clone());
        assert_eq!(folded.len(), 100);
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        assert!((mean(&folded) - mean(&values)).abs() < 1e-9);
        assert!(folded.windows(2).all(|w| w[0] <= w[1]), "sorted groups");
        assert_eq!(at_most_100(vec![3.0, 1.0]), vec![3.0, 1.0], "few values pass as they are");
    }
}
