//! The seal (`zigzag_lease::seal`): once raised and acknowledged, no event
//! before it is written any more — it is dead-lettered (`sealed`) — and
//! everything read before it is written exactly. Through the real pipeline
//! into SQLite, with item sets on cadences of their own (so the slower
//! sets' records wait in memory when the seal is raised).

use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use zigzag_core::table::SortedTable;
use zigzag_gather::check;
use zigzag_gather::execute::ExecOptions;
use zigzag_ingest::{Pipeline, PipelineOptions, RunSummary};
use zigzag_lease::{seal, Coordinator};
use zigzag_loadgen::{truth, GenConfig, Generator, SyntheticSource};
use zigzag_model::source::{RecordBatch, ShardInfo, ShardReader, Source, SourceError, StartAt};
use zigzag_model::{Config, Projections, Truth};
use zigzag_sqlite::SqliteTable;

const SHARDS: u32 = 3;
const PER_SHARD: u64 = 6_000;
/// Records up to here are served before the gate opens.
const FIRST_PART: u64 = 3_000;
const START_MS: i64 = 1_763_596_800_000; // 2025-11-20T00:00:00Z
const SPAN_MS: i64 = 2 * 3_600_000;

fn config() -> Config {
    Config::from_toml(
        r#"
[[projection]]
name = "ref_country"
dimensions = ["referrer", "country"]
rollups = ["hour", "day"]
[flush]
interval_ms = 50
every_ms = { "base.hour" = 400, "base.day" = 900, "ref_country" = 600 }
"#,
    )
    .expect("config")
}

fn generator() -> Generator {
    Generator::new(GenConfig {
        seed: 41,
        shards: SHARDS,
        records: PER_SHARD * SHARDS as u64,
        referrers: 30,
        campaigns: 4,
        start_ms: START_MS,
        span_ms: SPAN_MS,
        malformed_fraction: 0.0,
        ..GenConfig::default()
    })
}

/// A source serving each shard up to [`FIRST_PART`], then nothing (not the
/// end) until the gate opens.
struct Paused {
    inner: Arc<dyn Source>,
    open: watch::Receiver<bool>,
}

struct PausedReader {
    inner: Box<dyn ShardReader>,
    open: watch::Receiver<bool>,
    next: u64,
}

#[async_trait::async_trait]
impl Source for Paused {
    async fn shards(&self) -> Result<Vec<ShardInfo>, SourceError> {
        self.inner.shards().await
    }

    fn bounded(&self) -> bool {
        true
    }

    async fn open(&self, shard: &str, start: StartAt) -> Result<Box<dyn ShardReader>, SourceError> {
        let next = start.position().and_then(|p| p.seq.as_u64()).map_or(1, |s| s + 1);
        Ok(Box::new(PausedReader { inner: self.inner.open(shard, start).await?, open: self.open.clone(), next }))
    }
}

#[async_trait::async_trait]
impl ShardReader for PausedReader {
    async fn next_batch(&mut self, max: usize) -> Result<RecordBatch, SourceError> {
        let open = *self.open.borrow();
        if !open && self.next > FIRST_PART {
            tokio::time::sleep(Duration::from_millis(20)).await;
            return Ok(RecordBatch::default());
        }
        let max = if open { max } else { max.min((FIRST_PART + 1 - self.next) as usize) };
        let batch = self.inner.next_batch(max).await?;
        if let Some(last) = batch.last_position().and_then(|p| p.seq.as_u64()) {
            self.next = last + 1;
        }
        Ok(batch)
    }
}

struct Store {
    dir: tempfile::TempDir,
}

impl Store {
    fn db(&self) -> std::path::PathBuf {
        self.dir.path().join("z.db")
    }

    fn leases(&self) -> Arc<dyn SortedTable> {
        Arc::new(SqliteTable::open_table(self.db(), "checkpoints").unwrap())
    }

    fn pipeline(&self, source: Arc<dyn Source>, worker: &str) -> Arc<Pipeline> {
        let opts = PipelineOptions {
            failover: Duration::from_millis(1_500),
            max_pause: Duration::from_millis(200),
            batch_size: 100,
            ..PipelineOptions::new(config(), "st", worker, self.dead_letters(worker))
        };
        let aggregates: Arc<dyn SortedTable> = Arc::new(SqliteTable::open(self.db()).unwrap());
        Arc::new(Pipeline::new(source, aggregates, self.leases(), opts).unwrap())
    }

    fn dead_letters(&self, worker: &str) -> std::path::PathBuf {
        self.dir.path().join(format!("dead-{worker}"))
    }

    /// Every dead letter's reason, from every file the workers wrote.
    fn dead_letter_reasons(&self) -> Vec<String> {
        let mut reasons = Vec::new();
        for entry in std::fs::read_dir(self.dir.path()).unwrap() {
            let path = entry.unwrap().path();
            if !path.file_name().unwrap().to_string_lossy().starts_with("dead-") {
                continue;
            }
            for line in std::fs::read_to_string(&path).unwrap().lines() {
                let v: serde_json::Value = serde_json::from_str(line).expect("a dead letter is JSON");
                reasons.push(v["reason"].as_str().unwrap_or_default().to_string());
            }
        }
        reasons
    }

    async fn check(&self, truth: &Truth) {
        let table = SqliteTable::open(self.db()).unwrap();
        let projections = Projections::new(&config()).unwrap();
        let report = check::check(&table, &projections, truth, 0, &ExecOptions::default()).await.unwrap();
        assert_eq!(report.mismatches(), 0, "store != truth:\n{}", check::render(&report));
    }
}

async fn finish(run: tokio::task::JoinHandle<Result<RunSummary, zigzag_ingest::PipelineError>>) -> RunSummary {
    tokio::time::timeout(Duration::from_secs(120), run).await.expect("in time").expect("joined").expect("run")
}

/// Waits (bounded) for `done`, polling the lease table.
async fn wait_for<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done().await {
        assert!(Instant::now() < deadline, "not within 60 s: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seal_raised_while_a_worker_reads_refuses_later_events_before_it_and_keeps_everything_read_before() {
    let _ = tracing_subscriber::fmt().with_env_filter("info").with_test_writer().try_init();
    let gen = generator();
    let store = Store { dir: tempfile::tempdir().unwrap() };
    let (gate, open) = watch::channel(false);
    let source = Arc::new(Paused { inner: Arc::new(SyntheticSource::new(gen.clone(), None)), open });
    let run = tokio::spawn(store.pipeline(source, "w").run(CancellationToken::new()));
    // The first part read and its fastest item set flushed (the slower
    // sets' records may still wait in the worker's memory).
    let observer = Coordinator::new(store.leases(), zigzag_lease::LeaseOptions::new("st", "observer"));
    wait_for("the first part flushed", || async {
        let leases = observer.read_leases().await.unwrap_or_default();
        leases.len() == SHARDS as usize
            && leases.iter().all(|l| l.checkpoint.furthest().and_then(|p| p.seq.as_u64()) == Some(FIRST_PART))
    })
    .await;
    // Sealed in the middle of what is still to come.
    let sealed_at = START_MS + SPAN_MS * 3 / 4;
    assert_eq!(seal::raise(store.leases().as_ref(), sealed_at).await.unwrap(), sealed_at);
    let leases = store.leases();
    wait_for("the seal acknowledged and nothing older in flight", || async {
        seal::barrier(leases.as_ref(), sealed_at).await.unwrap().is_empty()
    })
    .await;
    let lanes = observer.read_lanes().await.unwrap();
    assert!(lanes.iter().any(|l| l.owner.is_some() && l.seal == sealed_at), "the worker acknowledged: {lanes:?}");
    gate.send(true).unwrap();
    let summary = finish(run).await;
    assert_eq!(summary.records, PER_SHARD * SHARDS as u64, "every record read once");

    let accepted = |_shard: u32, seq: u64, ts: i64| seq <= FIRST_PART || ts >= sealed_at;
    let truth = truth::compute_where(&gen, &config(), accepted).unwrap();
    let refused = PER_SHARD * SHARDS as u64 - truth.valid;
    assert!(refused > 1_000, "the seal refused a good part of the second half: {refused}");
    let before_seal_read_first =
        truth::compute_where(&gen, &config(), |_, seq, ts| seq <= FIRST_PART && ts < sealed_at).unwrap().valid;
    assert!(before_seal_read_first > 0, "events before the seal read before it are kept");
    store.check(&truth).await;
    let reasons = store.dead_letter_reasons();
    assert_eq!(reasons.len() as u64, refused, "every refused event is a dead letter");
    assert!(reasons.iter().all(|r| r == "sealed"), "{:?}", &reasons[..reasons.len().min(5)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_joining_after_a_seal_refuses_every_event_before_it() {
    let gen = generator();
    let store = Store { dir: tempfile::tempdir().unwrap() };
    // The tables exist (a first worker ran over nothing), the seal is raised,
    // then a worker reads everything.
    let sealed_at = START_MS + SPAN_MS / 2;
    let leases = store.leases();
    assert_eq!(seal::raise(leases.as_ref(), sealed_at).await.unwrap(), sealed_at);
    let source = Arc::new(SyntheticSource::new(gen.clone(), None));
    let summary = finish(tokio::spawn(store.pipeline(source, "late").run(CancellationToken::new()))).await;
    let truth = truth::compute_where(&gen, &config(), |_, _, ts| ts >= sealed_at).unwrap();
    assert_eq!(summary.valid, truth.valid, "only events at or after the seal are valid");
    store.check(&truth).await;
    let reasons = store.dead_letter_reasons();
    assert_eq!(reasons.len() as u64, PER_SHARD * SHARDS as u64 - truth.valid);
    assert!(reasons.iter().all(|r| r == "sealed"));
}
