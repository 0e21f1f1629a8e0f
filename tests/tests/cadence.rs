//! Item sets on cadences of their own (`flush.every_ms`): the minute items
//! every flush, the hour and day items and a projection's items far less
//! often. Through the real pipeline into SQLite:
//! - a clean run is exact in every rollup of every projection, and writes
//!   fewer item updates than the same run with one cadence;
//! - a worker killed (its runtime shut down: no final flush, its lane and
//!   leases left as they were) while the slower sets' records wait in its memory
//!   leaves shards whose sets are apart; a second worker catches the sets
//!   behind up from the stream, reads on, and the totals are exact.

use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use zigzag_core::table::SortedTable;
use zigzag_gather::check;
use zigzag_gather::execute::ExecOptions;
use zigzag_ingest::{Pipeline, PipelineOptions, RunSummary};
use zigzag_lease::Coordinator;
use zigzag_loadgen::{truth, GenConfig, Generator, SyntheticSource};
use zigzag_model::source::{ShardInfo, ShardReader, Source, SourceError, StartAt};
use zigzag_model::{Config, Projections, Truth};
use zigzag_sqlite::SqliteTable;

fn config(cadences: bool) -> Config {
    let every =
        if cadences { "every_ms = { \"base.hour\" = 400, \"base.day\" = 900, \"ref_country\" = 400 }\n" } else { "" };
    Config::from_toml(&format!(
        r#"
[[projection]]
name = "ref_country"
dimensions = ["referrer", "country"]
rollups = ["hour", "day"]
[[projection]]
name = "cc"
dimensions = ["campaign", "country"]
rollups = ["minute"]
[flush]
interval_ms = 50
{every}"#
    ))
    .expect("config")
}

fn generator(records: u64) -> Generator {
    Generator::new(GenConfig {
        seed: 23,
        shards: 3,
        records,
        referrers: 30,
        campaigns: 4,
        span_ms: 20 * 60_000,
        malformed_fraction: 0.002,
        ..GenConfig::default()
    })
}

struct Store {
    _dir: tempfile::TempDir,
    db: std::path::PathBuf,
}

impl Store {
    fn new() -> Store {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("z.db");
        Store { _dir: dir, db }
    }

    fn pipeline(&self, config: &Config, gen: &Generator, worker: &str, rate: f64) -> Arc<Pipeline> {
        self.pipeline_over(config, Arc::new(SyntheticSource::new(gen.clone(), Some(rate))), worker)
    }

    fn pipeline_over(&self, config: &Config, source: Arc<dyn Source>, worker: &str) -> Arc<Pipeline> {
        let opts = PipelineOptions {
            failover: Duration::from_millis(1_500),
            max_pause: Duration::from_millis(200),
            batch_size: 100,
            ..PipelineOptions::new(config.clone(), "st", worker, self.db.with_file_name(format!("dead-{worker}")))
        };
        let aggregates: Arc<dyn SortedTable> = Arc::new(SqliteTable::open(&self.db).unwrap());
        let leases: Arc<dyn SortedTable> = Arc::new(SqliteTable::open_table(&self.db, "checkpoints").unwrap());
        Arc::new(Pipeline::new(source, aggregates, leases, opts).unwrap())
    }

    async fn check(&self, config: &Config, truth: &Truth) {
        let table = SqliteTable::open(&self.db).unwrap();
        let projections = Projections::new(config).unwrap();
        let report = check::check(&table, &projections, truth, 0, &ExecOptions::default()).await.unwrap();
        assert_eq!(report.mismatches(), 0, "store != truth:\n{}", check::render(&report));
        assert_eq!(report.sets.len(), 3, "the base and both projections checked");
    }
}

async fn run(p: Arc<Pipeline>) -> RunSummary {
    tokio::time::timeout(Duration::from_secs(120), p.run(CancellationToken::new()))
        .await
        .expect("in time")
        .expect("run")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slower_cadences_stay_exact_and_write_less() {
    let gen = generator(24_000);
    let mut writes = Vec::new();
    for cadences in [false, true] {
        let config = config(cadences);
        let truth = truth::compute_for(&gen, &config).unwrap();
        let store = Store::new();
        let summary = run(store.pipeline(&config, &gen, "w", 20_000.0)).await;
        assert_eq!(summary.records, truth.records);
        store.check(&config, &truth).await;
        writes.push(summary.write_requests);
    }
    assert!(writes[1] * 10 < writes[0] * 9, "slower cadences write at least 10 % less: {writes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_between_cadences_is_caught_up_exactly_by_another() {
    let _ = tracing_subscriber::fmt().with_env_filter("info").with_test_writer().try_init();
    let gen = generator(30_000);
    let config = config(true);
    let truth = truth::compute_for(&gen, &config).unwrap();
    for (attempt, kill_after_ms) in [700u64, 1_100, 1_700].into_iter().enumerate() {
        let store = Store::new();
        // A runtime of its own: shutting it down ends every task of the
        // worker at once (readers, heartbeat, lease passes), as a kill does.
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let a = store.pipeline(&config, &gen, "a", 10_000.0);
        rt.spawn(a.clone().run(CancellationToken::new()));
        tokio::time::sleep(Duration::from_millis(kill_after_ms)).await;
        rt.shutdown_background();
        drop(a);
        // What it left: leases whose item sets are apart (the faster ones
        // flushed, the slower ones' records lost with its memory).
        let leases: Arc<dyn SortedTable> = Arc::new(SqliteTable::open_table(&store.db, "checkpoints").unwrap());
        let view = Coordinator::new(leases, zigzag_lease::LeaseOptions::new("st", "observer"));
        let held = view.read_leases().await.unwrap();
        let apart = held.iter().filter(|l| !l.checkpoint.is_uniform()).count();
        let summary = run(store.pipeline(&config, &gen, "b", 40_000.0)).await;
        assert!(summary.records > 0, "attempt {attempt}: b read the rest");
        store.check(&config, &truth).await;
        eprintln!("attempt {attempt}: killed after {kill_after_ms} ms, {apart} of {} leases apart", held.len());
        if attempt == 0 {
            assert!(apart > 0, "the kill left item sets apart: {held:?}");
        }
    }
}

/// A worker of layout version 1 killed between cadences leaves shards
/// whose sets are apart, numbered by version 1. Version 2 declares a
/// projection before the others (so every later set's number moves) and
/// is announced; a worker of version 2 renumbers each such checkpoint by
/// the sets' names before reading, catches the sets behind up, and reads
/// on: every projection version 1 had equals the truth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sets_left_apart_by_a_worker_of_an_older_layout_version_are_renumbered_and_caught_up_exactly() {
    use zigzag_model::versions;
    let _ = tracing_subscriber::fmt().with_env_filter("info").with_test_writer().try_init();
    let gen = generator(30_000);
    let v1 = config(true);
    let truth = truth::compute_for(&gen, &v1).unwrap();
    let mut v2 = v1.clone();
    let first = Config::from_toml("[[projection]]\nname = \"by_campaign\"\ndimensions = [\"campaign\"]\n").unwrap();
    v2.projections.splice(0..0, first.projections);
    let (sets_1, sets_2) = (v1.item_sets(), v2.item_sets());
    assert_ne!(sets_1[3].projection, sets_2[3].projection, "set numbers move: {sets_1:?} / {sets_2:?}");
    let store = Store::new();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let a = store.pipeline(&v1, &gen, "a", 10_000.0);
    rt.spawn(a.clone().run(CancellationToken::new()));
    tokio::time::sleep(Duration::from_millis(700)).await;
    rt.shutdown_background();
    drop(a);
    let leases: Arc<dyn SortedTable> = Arc::new(SqliteTable::open_table(&store.db, "checkpoints").unwrap());
    let view = Coordinator::new(leases, zigzag_lease::LeaseOptions::new("st", "observer"));
    let held = view.read_leases().await.unwrap();
    let apart: Vec<_> = held.iter().filter(|l| !l.checkpoint.is_uniform()).collect();
    assert!(!apart.is_empty(), "the kill left item sets apart: {held:?}");
    let digest = zigzag_model::layout::Layout::of(&v1).digest();
    assert!(apart.iter().all(|l| l.layout.as_deref() == Some(digest.as_str())), "numbered by version 1: {apart:?}");

    let table = SqliteTable::open(&store.db).unwrap();
    let layout = zigzag_model::layout::Layout::of(&v2);
    versions::record(&table, 1, &layout, i64::MAX / 2, Default::default(), 0, false).await.unwrap();
    let summary = run(store.pipeline(&v2, &gen, "b", 40_000.0)).await;
    assert!(summary.records > 0, "b read the rest");
    store.check(&v1, &truth).await;
    let after = view.read_leases().await.unwrap();
    assert!(after.iter().all(|l| l.finished && l.checkpoint.is_uniform()), "{after:?}");
}

/// A source whose first opens of one shard fail (the stream unreachable
/// for that shard), then work.
struct FailingOpens {
    inner: Arc<dyn Source>,
    shard: String,
    /// Only opens after this position fail (a catch-up's).
    after: zigzag_model::Position,
    failures: std::sync::atomic::AtomicU32,
}

#[async_trait::async_trait]
impl Source for FailingOpens {
    async fn shards(&self) -> Result<Vec<ShardInfo>, SourceError> {
        self.inner.shards().await
    }

    async fn open(&self, shard: &str, start: StartAt) -> Result<Box<dyn ShardReader>, SourceError> {
        use std::sync::atomic::Ordering;
        if shard == self.shard
            && start == StartAt::After(self.after)
            && self.failures.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
        {
            return Err(SourceError::Unavailable(format!("{shard}: unreachable (test)")));
        }
        self.inner.open(shard, start).await
    }

    fn bounded(&self) -> bool {
        self.inner.bounded()
    }
}

/// A catch-up (or a recovery) that cannot read its records waits for its
/// shard alone: the worker does not end, and once the records can be read
/// the totals are exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catch_up_that_cannot_read_waits_for_its_shard_alone() {
    let _ = tracing_subscriber::fmt().with_env_filter("info").with_test_writer().try_init();
    let gen = generator(30_000);
    let config = config(true);
    let truth = truth::compute_for(&gen, &config).unwrap();
    let store = Store::new();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    rt.spawn(store.pipeline(&config, &gen, "a", 10_000.0).run(CancellationToken::new()));
    // Killed as soon as a shard's sets are apart (the slowest class, the
    // base's day items, is then the one behind, and stays so until its next
    // flush, hundreds of milliseconds away: a recovery does not read it).
    let leases: Arc<dyn SortedTable> = Arc::new(SqliteTable::open_table(&store.db, "checkpoints").unwrap());
    let view = Coordinator::new(leases, zigzag_lease::LeaseOptions::new("st", "observer"));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let apart: Vec<zigzag_lease::ShardLease> = loop {
        let apart: Vec<_> =
            view.read_leases().await.unwrap_or_default().into_iter().filter(|l| !l.checkpoint.is_uniform()).collect();
        if !apart.is_empty() || std::time::Instant::now() > deadline {
            break apart;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    rt.shutdown_background();
    assert!(!apart.is_empty(), "a shard's item sets were apart within 30 s");
    let source = Arc::new(FailingOpens {
        inner: Arc::new(SyntheticSource::new(gen.clone(), Some(40_000.0))),
        shard: apart[0].shard.clone(),
        after: apart[0].checkpoint.earliest().expect("a set was written"),
        failures: 2.into(),
    });
    let summary = run(store.pipeline_over(&config, source, "b")).await;
    assert!(summary.records > 0);
    assert_eq!(summary.catch_up_failures, 2, "the catch-up was parked twice, then done: {summary:?}");
    store.check(&config, &truth).await;
}

/// The shipped layout (no `--config`) answers the README's reports, each
/// from a projection, and `gather check` matches the truth in all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_layout_answers_the_readme_reports_exactly() {
    use zigzag_gather::filter::FilterSet;
    use zigzag_gather::plan::PlanRequest;
    use zigzag_gather::plan::SourceRequest;
    use zigzag_gather::window::WindowSpec;
    let config = Config::shipped();
    let gen = Generator::new(GenConfig { seed: 3, shards: 2, records: 20_000, ..GenConfig::default() });
    let truth = truth::compute_for(&gen, &config).unwrap();
    let store = Store::new();
    run(store.pipeline(&config, &gen, "w", 50_000.0)).await;
    store.check(&config, &truth).await;
    let table = SqliteTable::open(&store.db).unwrap();
    let day = ("2026-11-20", "2026-11-21");
    // (window, step, group-by, filters, measures asked) → the projection read.
    type Report<'a> = (&'a str, &'a str, Option<i64>, &'a [&'a str], &'a [&'a str], Option<&'a [&'a str]>, &'a str);
    let reports: [Report; 4] = [
        (day.0, day.1, None, &["country"], &[], None, "cc"),
        ("2026-11-20T06:00:00Z", "2026-11-20T12:00:00Z", Some(300_000), &[], &[], None, "total"),
        (day.0, day.1, None, &["referrer"], &["country=DE"], Some(&["clicks", "impressions"]), "referrer_country"),
        ("2026-11-14", "2026-11-21", None, &["campaign"], &[], Some(&["clicks", "impressions"]), "cc"),
    ];
    for (from, to, step, group_by, filters, measures, want) in reports {
        let req = PlanRequest {
            window: WindowSpec::Absolute { from: from.into(), to: to.into() },
            rollup: None,
            step,
            timeseries: step.is_some(),
            filters: FilterSet::parse(filters, &config).unwrap(),
            now: 0,
            source: SourceRequest {
                projection: None,
                measures: measures.map(|m| m.iter().map(|s| s.to_string()).collect()),
            },
            mixing: None,
            snap: None,
            filling: Default::default(),
        };
        let group_by: Vec<String> = group_by.iter().map(|s| s.to_string()).collect();
        let g = zigzag_gather::gather(&table, &config, req, group_by.clone(), &ExecOptions::default()).await.unwrap();
        assert_eq!(g.plan.projection, want, "{from}..{to} by {group_by:?}: {:?}", g.plan.candidates);
        assert!(!g.aggregation.groups.is_empty(), "{want}: rows");
    }

    // The scatter rule on what the statistics measured, at the module docs'
    // 100 writers every 10 s: `total` (one item a bucket) needs the one
    // prefix it has; every rollup that holds items gets a recommendation
    // from its peak items per bucket, and the rule's arithmetic holds.
    let projections = Projections::new(&config).unwrap();
    let advice = zigzag_gather::scatter::advise(&table, &projections, 100, 10.0).await.unwrap();
    assert_eq!(advice.len(), 8, "every projection's every rollup: {advice:?}");
    for a in &advice {
        let items = a.peak_items.unwrap_or_else(|| panic!("{} {}: statistics were kept", a.projection, a.rollup));
        let want = zigzag_model::scatter::scatter_prefixes(items, 100, 10.0);
        assert_eq!(a.recommended, Some(want), "{a:?}");
        if a.projection == "total" {
            assert!((0.9..=1.1).contains(&items), "one item a bucket: {a:?}");
            assert_eq!((a.configured, want), (1, 1), "{a:?}");
        }
    }
    let cc_minute = advice.iter().find(|a| a.projection == "cc" && a.rollup == zigzag_model::Rollup::Minute).unwrap();
    let keys = truth.by["campaign"].len() * truth.by["country"].len();
    assert!(cc_minute.peak_items.unwrap() <= keys as f64 * 1.1, "at most every campaign x country: {cc_minute:?}");
}
