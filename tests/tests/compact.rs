//! `gather compact` under fire: reports run in a loop, each checked exact
//! against the generator's truth in every projection and rollup, while the
//! compactor (its own process: this test binary run as `compact_child`)
//! is killed with SIGKILL again and again mid-way, then run to its end.
//! Afterwards the closed bins' partials are gone, every bin is read from
//! its compacted partition, exactly, with fewer requests.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use zigzag_core::table::{QueryRequest, SortKeyCondition, SortedTable};
use zigzag_gather::check;
use zigzag_gather::compact::{compact, marker, CompactOptions};
use zigzag_gather::execute::ExecOptions;
use zigzag_ingest::{Pipeline, PipelineOptions};
use zigzag_loadgen::{truth, GenConfig, Generator, SyntheticSource};
use zigzag_model::{Config, Projections, Truth};
use zigzag_sqlite::SqliteTable;
use zigzag_testkit::Reaped;

const START_MS: i64 = 1_763_596_800_000; // 2025-11-20T00:00:00Z
/// Every bin of the data has ended by then (the month bins of hours and days too).
const BEFORE_MS: i64 = 1_764_547_200_000; // 2025-12-01T00:00:00Z
const CHILD_ENV: &str = "ZIGZAG_COMPACT_CHILD_DB";

/// The base scattered at random over 4 prefixes (a key's bucket has
/// partials in several: real folding), a projection by hash over 3.
fn config() -> Config {
    Config::from_toml(
        r#"
[scatter]
prefixes = 4
mode = "random"
[[projection]]
name = "ref_country"
dimensions = ["referrer", "country"]
rollups = ["hour", "day"]
[projection.scatter]
prefixes = 3
mode = "hash"
[flush]
interval_ms = 50
"#,
    )
    .expect("config")
}

fn generator() -> Generator {
    Generator::new(GenConfig {
        seed: 77,
        shards: 3,
        records: 15_000,
        referrers: 40,
        campaigns: 5,
        start_ms: START_MS,
        span_ms: 2 * 86_400_000,
        ..GenConfig::default()
    })
}

fn options(grace_ms: u64) -> CompactOptions {
    CompactOptions {
        before: BEFORE_MS,
        grace: Duration::from_millis(grace_ms),
        wait: Duration::from_secs(30),
        concurrency: 4,
    }
}

async fn run_compaction(db: &Path, grace_ms: u64) -> zigzag_gather::compact::CompactReport {
    let aggregates = SqliteTable::open(db).unwrap();
    let leases = SqliteTable::open_table(db, "checkpoints").unwrap();
    let projections = Projections::new(&config()).unwrap();
    let mut say = |line: String| eprintln!("compact: {line}");
    compact(&aggregates, &leases, &projections, &options(grace_ms), &mut say).await.expect("compaction")
}

/// The compactor's process (run by the test below, killed by it): does
/// nothing unless started with the database in its environment.
#[tokio::test]
#[ignore = "the compactor process of compaction_under_reports_and_sigkill_is_exact"]
async fn compact_child() {
    let Ok(db) = std::env::var(CHILD_ENV) else { return };
    run_compaction(Path::new(&db), 300).await;
}

async fn check_exact(db: &Path, truth: &Truth) -> zigzag_gather::execute::Actual {
    let table = SqliteTable::open(db).unwrap();
    let projections = Projections::new(&config()).unwrap();
    let report = check::check(&table, &projections, truth, 0, &ExecOptions::default()).await.unwrap();
    assert_eq!(report.mismatches(), 0, "store != truth:\n{}", check::render(&report));
    report.actual
}

async fn items_in(table: &SqliteTable, pk: &str) -> usize {
    let out = zigzag_core::query::run_key_range(table, QueryRequest::new(pk, SortKeyCondition::Any)).await.unwrap();
    out.items.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_under_reports_and_sigkill_is_exact() {
    let gen = generator();
    let config = config();
    let truth = truth::compute_for(&gen, &config).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("z.db");
    {
        let opts = PipelineOptions {
            failover: Duration::from_millis(1_500),
            batch_size: 200,
            ..PipelineOptions::new(config.clone(), "st", "w", dir.path().join("dead"))
        };
        let aggregates: Arc<dyn SortedTable> = Arc::new(SqliteTable::open(&db).unwrap());
        let leases: Arc<dyn SortedTable> = Arc::new(SqliteTable::open_table(&db, "checkpoints").unwrap());
        let source = Arc::new(SyntheticSource::new(gen.clone(), None));
        let p = Arc::new(Pipeline::new(source, aggregates, leases, opts).unwrap());
        tokio::time::timeout(Duration::from_secs(120), p.run(CancellationToken::new())).await.unwrap().unwrap();
    }
    let before = check_exact(&db, &truth).await;

    // Reports in a loop, each exact, until the compactor is done.
    let stop = Arc::new(AtomicBool::new(false));
    let reports = Arc::new(AtomicU64::new(0));
    let loop_task = {
        let (db, truth, stop, reports) = (db.clone(), truth.clone(), stop.clone(), reports.clone());
        // A thread of its own, as another process's reports would be.
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async {
                while !stop.load(Ordering::Relaxed) {
                    check_exact(&db, &truth).await;
                    reports.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
    };
    let child_db = db.clone();
    let child = move || {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["compact_child", "--exact", "--ignored", "--nocapture"])
            .env(CHILD_ENV, &child_db)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Reaped::spawn(&mut cmd).expect("the compactor starts")
    };
    // Killed at points spread over its run: while folding, between folding
    // and deleting (its grace is 300 ms), while deleting.
    for kill_after in [150u64, 400, 700, 1_000, 1_500, 2_200] {
        let mut c = child();
        tokio::time::sleep(Duration::from_millis(kill_after)).await;
        let _ = c.kill(); // SIGKILL
        let out = c.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        let last = said.lines().rfind(|l| l.starts_with("compact:")).unwrap_or("(before its first step)");
        eprintln!("killed after {kill_after} ms; its last step: {last}");
    }
    let done = tokio::task::spawn_blocking(move || child().wait_with_output().unwrap()).await.unwrap();
    assert!(done.status.success(), "the last compactor ran to its end: {}", String::from_utf8_lossy(&done.stderr));
    stop.store(true, Ordering::Relaxed);
    loop_task.join().expect("every report during compaction was exact");
    let ran = reports.load(Ordering::Relaxed);
    eprintln!(
        "{ran} exact reports during 6 killed compactors and a last one:\n{}",
        String::from_utf8_lossy(&done.stderr)
    );
    assert!(ran >= 3, "reports ran during the compaction");

    // Done: every bin compacted and cleaned, its partials gone.
    let table = SqliteTable::open(&db).unwrap();
    let projections = Projections::new(&config).unwrap();
    let mut bins = 0;
    for km in projections.iter() {
        for rollup in km.rollups() {
            let (markers, _) = marker::read(&table, km.name(), rollup, (0, BEFORE_MS), true).await.unwrap();
            assert!(!markers.is_empty(), "{} {rollup}: compacted", km.name());
            for m in markers.values() {
                bins += 1;
                assert_eq!(m.state, marker::State::Cleaned, "{} {rollup}: {m:?}", km.name());
                assert!(m.items > 0 && m.partials >= m.items, "{m:?}");
                for prefix in 0..km.prefixes() {
                    let pk = km.partition_key(prefix, rollup, m.bin_start);
                    assert_eq!(items_in(&table, &pk).await, 0, "{pk}: partials deleted");
                }
                let pk = marker::compacted_pk(km.name(), rollup, m.bin_start);
                assert_eq!(items_in(&table, &pk).await as u64, m.items, "{pk}: the folded items");
            }
        }
    }
    assert!(bins >= 5, "minute bins of 2-3 days and the month bins: {bins}");
    let after = check_exact(&db, &truth).await;
    assert!(
        after.stats.requests * 2 < before.stats.requests,
        "one query per bin instead of one per prefix: {} requests after, {} before",
        after.stats.requests,
        before.stats.requests
    );
    // Again: nothing left to do, nothing changes.
    let again = run_compaction(&db, 0).await;
    assert!(again.bins.iter().all(|b| b.deleted == 0), "a repeat deletes nothing: {:?}", again.bins);
    check_exact(&db, &truth).await;
}
