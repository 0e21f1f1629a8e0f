//! Metrics out of a process: Prometheus text (served by `ingest
//! --metrics-addr`) and CloudWatch embedded-metric-format documents on
//! standard output (`--cloudwatch-emf`), from one global recorder that fans
//! out to whichever is on. What each metric means: docs/METRICS.md.

pub mod emf;

use anyhow::Result;
use emf::{EmfOptions, EmfRecorder};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use metrics_util::layers::FanoutBuilder;
use std::io::Write;
use std::time::Duration;

#[derive(Debug, Clone, clap::Args)]
pub struct EmfArgs {
    /// Write the metrics to standard output in CloudWatch's embedded metric
    /// format, one JSON document per --emf-interval (on ECS, the awslogs
    /// driver makes them CloudWatch metrics: docs/METRICS.md)
    #[arg(long)]
    pub cloudwatch_emf: bool,
    /// Between two EMF documents
    #[arg(long, default_value = "60s", value_parser = crate::duration::positive, value_name = "DURATION")]
    pub emf_interval: Duration,
    /// The CloudWatch namespace of the EMF metrics
    #[arg(long, default_value = "Zigzag", value_name = "NAMESPACE")]
    pub emf_namespace: String,
}

/// The recorders installed; keep it for the life of the process.
#[derive(Default)]
pub struct Telemetry {
    /// For the /metrics endpoint.
    pub prometheus: Option<PrometheusHandle>,
    emf: Option<(EmfRecorder, Duration)>,
}

/// Installs the global recorder: Prometheus when `prometheus`, EMF when
/// `emf.cloudwatch_emf` (its `Stream` dimension `stream`), both through a
/// fan-out; nothing when neither is asked for.
pub fn install(prometheus: bool, emf: &EmfArgs, stream: &str) -> Result<Telemetry> {
    let mut telemetry = Telemetry::default();
    let mut fanout = FanoutBuilder::default();
    if prometheus {
        let recorder = histogram_buckets(PrometheusBuilder::new())?.build_recorder();
        telemetry.prometheus = Some(recorder.handle());
        fanout = fanout.add_recorder(recorder);
    }
    if emf.cloudwatch_emf {
        let recorder =
            EmfRecorder::new(EmfOptions { namespace: emf.emf_namespace.clone(), stream: stream.to_string() });
        fanout = fanout.add_recorder(recorder.clone());
        telemetry.emf = Some((recorder, emf.emf_interval));
    }
    if prometheus || emf.cloudwatch_emf {
        metrics::set_global_recorder(fanout.build())
            .map_err(|_| anyhow::anyhow!("installing the metrics recorder: one is installed already"))?;
        describe_metrics();
    }
    Ok(telemetry)
}

/// Histograms are served as Prometheus histograms (`_bucket`, `_sum`,
/// `_count`: aggregatable across processes, unlike a summary's quantiles),
/// in buckets of what each measures.
fn histogram_buckets(builder: PrometheusBuilder) -> Result<PrometheusBuilder> {
    use metrics_exporter_prometheus::Matcher;
    // Seconds: from a cached answer (ms) to a flush or query at its limit.
    const SECONDS: &[f64] = &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];
    // Read units: from one request (0.5) to the default --rcu-budget (5,000) and past it.
    const READ_UNITS: &[f64] =
        &[0.5, 1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1_000.0, 2_500.0, 5_000.0, 10_000.0];
    Ok(builder
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS)?
        .set_buckets_for_metric(Matcher::Suffix("_capacity_units".into()), READ_UNITS)?)
}

/// docs/METRICS.md: the one source of what each metric means, so the
/// `# HELP` lines `/metrics` serves and the document cannot drift (a test
/// keeps the document equal to the metrics in the code).
const METRICS_DOC: &str = include_str!("../../../docs/METRICS.md");

/// The document's metric rows: name, type and meaning (its markdown
/// backticks dropped).
pub fn documented_metrics() -> impl Iterator<Item = (&'static str, &'static str, String)> {
    METRICS_DOC.lines().filter(|l| l.starts_with("| `zigzag_")).filter_map(|line| {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let (name, kind, meaning) = (cells.first()?.trim_matches('`'), *cells.get(1)?, cells.get(4)?);
        Some((name, kind, meaning.replace('`', "")))
    })
}

/// Registers each documented metric's description with the recorder.
fn describe_metrics() {
    for (name, kind, help) in documented_metrics() {
        match kind {
            "counter" => metrics::describe_counter!(name, help),
            "gauge" => metrics::describe_gauge!(name, help),
            "histogram" => metrics::describe_histogram!(name, help),
            _ => {}
        }
    }
}

impl Telemetry {
    /// Starts the background work the recorders need: Prometheus
    /// histograms' upkeep, and an EMF document every interval. Within a
    /// tokio runtime.
    pub fn start(&self) {
        if let Some(handle) = self.prometheus.clone() {
            tokio::spawn(async move {
                let mut every = tokio::time::interval(Duration::from_secs(5));
                loop {
                    every.tick().await;
                    handle.run_upkeep();
                }
            });
        }
        if let Some((recorder, interval)) = self.emf.clone() {
            tokio::spawn(async move {
                let mut every = tokio::time::interval(interval);
                every.tick().await;
                loop {
                    every.tick().await;
                    write_documents(&recorder);
                }
            });
        }
    }

    /// The last EMF document, for what happened since the previous one
    /// (at exit: a final flush's writes are counted too).
    pub fn flush(&self) {
        if let Some((recorder, _)) = &self.emf {
            write_documents(recorder);
        }
    }
}

/// The interval's documents, a line each on standard output, under its
/// lock (dead letters sent to standard output are written under it too).
fn write_documents(recorder: &EmfRecorder) {
    let docs = recorder.documents(chrono::Utc::now().timestamp_millis());
    if docs.is_empty() {
        return;
    }
    let mut out = std::io::stdout().lock();
    let written = docs.iter().try_for_each(|doc| writeln!(out, "{doc}")).and_then(|()| out.flush());
    if let Err(e) = written {
        tracing::warn!(error = %e, "cannot write the EMF metrics documents");
    }
}
