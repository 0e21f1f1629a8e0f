//! Many workers on one stream, in one process, on SQLite files (each worker
//! with its own connections, as separate processes would have): the lease
//! protocol end to end with the synthetic source, checked against the
//! generator's ground truth in every rollup.
//!
//! - three workers join one after another on eight shards: leases move by
//!   graceful handoff until balanced, no record is read twice, totals exact;
//! - a worker frozen mid-flush past its expiry (every store call it makes
//!   hangs, as under SIGSTOP) is recovered by another; when it thaws, its
//!   late writes change nothing and it rejoins;
//! - a worker that stops hands its leases back: the other takes them as
//!   released, not as expired; its heartbeat goes on through a final flush
//!   longer than the failover;
//! - two streams with identical shard ids write into one table: the totals
//!   are the sum of both truths;
//! - operators' mistakes (`operator.rs`): one worker id on two live
//!   processes, a lease table lost while the aggregates are kept.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use zigzag_core::table::{QueryRequest, SortKeyCondition, SortedTable};
use zigzag_gather::check;
use zigzag_gather::execute::ExecOptions;
use zigzag_ingest::{Pipeline, PipelineOptions, RunSummary};
use zigzag_lease::items::{shards_pk, LANES_PK};
use zigzag_lease::{Lane, ShardLease};
use zigzag_loadgen::{truth, GenConfig, Generator, SyntheticSource};
use zigzag_model::{Config, KeyModel, Truth};
use zigzag_sqlite::SqliteTable;
use zigzag_tests::freeze::{FreezeWhenIdle, Freezer};
use zigzag_tests::gated::{Gated, Opened};

mod operator;

fn generator(seed: u64, shards: u32, records: u64) -> Generator {
    Generator::new(GenConfig {
        seed,
        shards,
        records,
        referrers: 300,
        campaigns: 12,
        span_ms: 6 * 3_600_000,
        malformed_fraction: 0.002,
        ..GenConfig::default()
    })
}

fn config() -> Config {
    let mut c = Config::default();
    c.flush.interval_ms = 150;
    c
}

struct Stores {
    aggregates: Arc<dyn SortedTable>,
    leases: Arc<dyn SortedTable>,
}

fn open(db: &Path) -> Stores {
    Stores {
        aggregates: Arc::new(SqliteTable::open(db).expect("items")),
        leases: Arc::new(SqliteTable::open_table(db, "checkpoints").expect("leases")),
    }
}

fn options(stream: &str, worker: &str, dir: &Path, failover_ms: u64) -> PipelineOptions {
    PipelineOptions {
        failover: Duration::from_millis(failover_ms),
        max_pause: Duration::from_millis(200),
        batch_size: 200,
        ..PipelineOptions::new(config(), stream, worker, dir.join(format!("dead-{worker}.jsonl")))
    }
}

type Worker = tokio::task::JoinHandle<RunSummary>;

fn spawn(pipeline: Arc<Pipeline>, stop: CancellationToken) -> Worker {
    tokio::spawn(async move { pipeline.run(stop).await.expect("worker run") })
}

fn worker(gen: &Generator, rate: Option<f64>, stores: Stores, opts: PipelineOptions) -> Arc<Pipeline> {
    let source = Arc::new(SyntheticSource::new(gen.clone(), rate));
    Arc::new(Pipeline::new(source, stores.aggregates, stores.leases, opts).expect("pipeline"))
}

/// A worker on the generator's shards, which do not end until `open` is
/// true (see [`Gated`]), and the shards it has begun reading.
fn gated_worker(
    gen: &Generator,
    rate: Option<f64>,
    open: &watch::Receiver<bool>,
    stores: Stores,
    opts: PipelineOptions,
) -> (Arc<Pipeline>, Opened) {
    let source = Arc::new(Gated::new(Arc::new(SyntheticSource::new(gen.clone(), rate)), open.clone()));
    let opened = source.opened();
    (Arc::new(Pipeline::new(source, stores.aggregates, stores.leases, opts).expect("pipeline")), opened)
}

/// The workers' log goes to the test's output, which libtest prints when
/// the test fails.
fn keep_log() {
    let _ = tracing_subscriber::fmt().with_env_filter("info").with_test_writer().try_init();
}

async fn within<T>(secs: u64, what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), f).await.unwrap_or_else(|_| panic!("{what}: over {secs} s"))
}

async fn assert_exact(db: &Path, truth: &Truth) {
    let table = SqliteTable::open(db).unwrap();
    let km = KeyModel::new(&config()).unwrap();
    let report = check::check(
        &table,
        &zigzag_model::Projections::from(km.clone()),
        truth,
        truth.last_ms.unwrap_or_default(),
        &ExecOptions::default(),
    )
    .await
    .expect("gather check");
    assert_eq!(report.mismatches(), 0, "store != truth:\n{}", check::render(&report));
    assert_eq!(report.rows.iter().map(|r| r.rollup).collect::<std::collections::BTreeSet<_>>().len(), 3);
}

/// Every item of a partition, every page.
/// Waits until workers "a" and "b" both hold leases of stream "st".
async fn until_a_and_b_hold_leases(stores: &Stores) {
    within(30, "the leases are shared", async {
        loop {
            let held = leases(&*stores.leases, "st").await;
            let holds = |w: &str| held.iter().any(|l| l.worker_id() == Some(w));
            if holds("a") && holds("b") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

async fn read_all(t: &dyn SortedTable, pk: &str) -> Vec<zigzag_core::table::Item> {
    let mut req = QueryRequest::new(pk, SortKeyCondition::Any);
    req.consistent = true;
    zigzag_core::query::run_key_range(t, req).await.expect("query").items
}

async fn lanes(t: &dyn SortedTable) -> Vec<Lane> {
    read_all(t, LANES_PK).await.iter().map(|i| Lane::from_item(i).unwrap()).collect()
}

async fn leases(t: &dyn SortedTable, stream: &str) -> Vec<ShardLease> {
    read_all(t, &shards_pk(stream)).await.iter().map(|i| ShardLease::from_item(i).unwrap()).collect()
}

/// The largest number of lane marks on any aggregate item.
async fn most_marks(db: &Path) -> usize {
    let items = all_items(db).await;
    items.iter().map(|i| i.attrs.keys().filter(|k| zigzag_model::mark::is_mark(k)).count()).max().unwrap_or(0)
}

/// Every aggregate item of the generators' days (small test tables), read
/// partition by partition through the store API.
async fn all_items(db: &Path) -> Vec<zigzag_core::table::Item> {
    let table = SqliteTable::open(db).unwrap();
    let km = KeyModel::new(&config()).unwrap();
    let mut out = Vec::new();
    for prefix in 0..km.prefixes() {
        for rollup in km.rollups() {
            for day in -1..=1 {
                let bin = 1_795_132_800_000 + day * 86_400_000;
                let pk = km.partition_key(prefix, rollup, rollup.bin().start_of(bin));
                out.extend(read_all(&table, &pk).await);
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_balance_eight_shards_by_handoff_and_read_each_record_once() {
    keep_log();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("z.db");
    let gen = generator(3, 8, 24_000);
    let truth = truth::compute(&gen);
    // 8 s of data: leases still move while it comes (passes every 1.7 s).
    let rate = Some(3_000.0);
    let (gate, gate_rx) = watch::channel(false);
    // Not about expiry: a heartbeat waits behind the other workers' flush
    // transactions (one SQLite file), seconds on a slow machine.
    let failover = 5_000;
    let gated = |w: &str| gated_worker(&gen, rate, &gate_rx, open(&db), options("st", w, dir.path(), failover));
    let (w1, _) = gated("w1");
    let first = spawn(w1, CancellationToken::new());
    let stores = open(&db);
    // Alone, w1 takes all eight: the others can get theirs only by handoff.
    within(30, "w1 holds all eight", async {
        while leases(&*stores.leases, "st").await.iter().filter(|l| l.worker_id() == Some("w1")).count() < 8 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let ((w2, opened_2), (w3, opened_3)) = (gated("w2"), gated("w3"));
    let second = spawn(w2, CancellationToken::new());
    let third = spawn(w3, CancellationToken::new());
    // The shards end only once every worker holds its share (3, 3, 2) and
    // the late two read theirs: the first ends make the balancer move the
    // shards still open, which may take a lease before its new owner reads it.
    within(60, "balance", async {
        loop {
            let held = leases(&*stores.leases, "st").await;
            let owns = |w: &str| held.iter().filter(|l| l.worker_id() == Some(w)).count();
            let reading = |o: &Opened| o.lock().unwrap().len();
            if ["w1", "w2", "w3"].iter().all(|w| owns(w) >= 2) && reading(&opened_2) >= 2 && reading(&opened_3) >= 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    gate.send(true).expect("the workers' sources listen");
    let runs =
        within(90, "three workers", async { [first.await.unwrap(), second.await.unwrap(), third.await.unwrap()] })
            .await;
    let read: u64 = runs.iter().map(|r| r.records).sum();
    assert_eq!(
        read, truth.records,
        "every record read exactly once across workers (graceful handoffs re-read nothing)"
    );
    let handed: u64 = runs.iter().map(|r| r.leases_handed_off).sum();
    // w1 held all eight, nothing was released or expired, and w2 and w3
    // held two each: four handoffs at least.
    assert!(handed >= 4, "the first worker took all eight, then handed leases over: {runs:?}");
    for (i, r) in runs.iter().enumerate() {
        assert!(r.shards >= 2, "worker {} read {} shards: {runs:?}", i + 1, r.shards);
        assert_eq!(r.leases_lost, 0, "nothing expired or was lost: {r:?}");
    }
    assert_exact(&db, &truth).await;
    let stores = open(&db);
    let lanes = lanes(&*stores.leases).await;
    assert!(lanes.len() <= 3 && lanes.iter().all(|l| l.owner.is_none()), "lanes freed on exit: {lanes:?}");
    let leases = leases(&*stores.leases, "st").await;
    assert!(leases.iter().all(|l| l.finished && l.owner.is_none()), "{leases:?}");
    // A lease's counter steps once per take and once per handoff (nothing
    // was released: every shard finished first), so handoffs count once.
    let taken: u64 = runs.iter().map(|r| r.leases_taken).sum();
    let steps: u64 = leases.iter().map(|l| l.lease).sum();
    assert_eq!(taken + handed, steps, "each take and handoff counted once: {runs:?} {leases:?}");
    assert!(most_marks(&db).await <= 3, "at most one mark per lane on any item");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_frozen_past_its_expiry_is_recovered_and_its_late_writes_change_nothing() {
    keep_log();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("z.db");
    let gen = generator(4, 4, 16_000);
    let truth = truth::compute(&gen);
    let (frozen, _) = watch::channel(false);
    // A freezes inside its third flush, after its intent was proven and
    // before the items are written: the lane holds a valid intent.
    let a_items = Freezer::new(Arc::new(SqliteTable::open(&db).unwrap()), Some(3), frozen.clone());
    let a_leases = Freezer::new(Arc::new(SqliteTable::open_table(&db, "checkpoints").unwrap()), None, frozen.clone());
    let a = worker(
        &gen,
        Some(4_000.0),
        Stores { aggregates: a_items.clone(), leases: a_leases },
        options("st", "a", dir.path(), 800),
    );
    let a_run = spawn(a, CancellationToken::new());
    within(30, "A freezes", async {
        while !a_items.froze.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let stores = open(&db);
    let frozen_lane = lanes(&*stores.leases).await.into_iter().find(|l| l.worker_id() == Some("a")).unwrap();
    assert!(frozen_lane.in_flight().is_some(), "A froze with a flush in flight: {frozen_lane:?}");

    let b = worker(&gen, Some(4_000.0), open(&db), options("st", "b", dir.path(), 800));
    let b_run = spawn(b, CancellationToken::new());
    // B must see A's lane expire, recover its flush and take its shards.
    within(30, "B recovers A's lane", async {
        loop {
            let lane = lanes(&*stores.leases).await.into_iter().find(|l| l.lane == frozen_lane.lane).unwrap();
            if lane.worker_id() != Some("a") && lane.flush >= frozen_lane.intent.as_ref().unwrap().k {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    frozen.send_replace(false);
    let (a_sum, b_sum) = within(90, "both finish", async { (a_run.await.unwrap(), b_run.await.unwrap()) }).await;
    assert!(a_sum.leases_lost >= 1, "A learns it lost its lane: {a_sum:?}");
    assert!(b_sum.recovered >= 1, "B finished A's flush: {b_sum:?}");
    assert_exact(&db, &truth).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_worker_releases_its_leases_and_the_other_takes_them_without_expiry() {
    keep_log();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("z.db");
    let gen = generator(5, 6, 30_000);
    let truth = truth::compute(&gen);
    // Expiry would take 6 s of silence on B's clock; a released lease is
    // taken as unowned at B's next pass (every 2 s).
    let failover = 6_000;
    let stop_a = CancellationToken::new();
    // The shards end only after A has stopped.
    let (gate, gate_rx) = watch::channel(false);
    let rate = Some(6_000.0);
    let (a, _) = gated_worker(&gen, rate, &gate_rx, open(&db), options("st", "a", dir.path(), failover));
    let a = spawn(a, stop_a.clone());
    let (b_pipeline, _) = gated_worker(&gen, rate, &gate_rx, open(&db), options("st", "b", dir.path(), failover));
    let b_coord = b_pipeline.coordinator().clone();
    let b = spawn(b_pipeline, CancellationToken::new());
    // Let them share (B asks A for leases), then stop A.
    let stores = open(&db);
    until_a_and_b_hold_leases(&stores).await;
    stop_a.cancel();
    let a_sum = within(30, "A stops", a).await.unwrap();
    let released = Instant::now();
    let after_a: Vec<ShardLease> = leases(&*stores.leases, "st").await;
    assert!(after_a.iter().all(|l| l.worker_id() != Some("a")), "A released every lease: {after_a:?}");
    gate.send(true).expect("B's source listens");
    let b_sum = within(90, "B finishes", b).await.unwrap();
    assert_eq!(b_coord.stats.taken_expired.load(Ordering::Relaxed), 0, "nothing was taken by expiry");
    assert_eq!(a_sum.records + b_sum.records, truth.records, "nothing read twice");
    eprintln!("B finished {:.1} s after A released", released.elapsed().as_secs_f64());
    assert_exact(&db, &truth).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_worker_beats_through_a_final_flush_longer_than_the_failover() {
    keep_log();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("z.db");
    // 12 s of data (3,000/s): still coming when A stops, however slow the
    // setup.
    let gen = generator(8, 4, 36_000);
    let truth = truth::compute(&gen);
    // Long enough that a beat queued behind B's flushes never lets A's lane
    // expire by accident; the frozen flush below is longer still.
    let failover = 3_000;
    let (gate, gate_rx) = watch::channel(false);
    let (frozen, _) = watch::channel(false);
    // A's aggregate writes hang while frozen; its lease table does not.
    let a_items = Freezer::new(Arc::new(SqliteTable::open(&db).unwrap()), None, frozen.clone());
    let a_leases = Arc::new(SqliteTable::open_table(&db, "checkpoints").unwrap());
    let stop_a = CancellationToken::new();
    let rate = Some(3_000.0);
    let a_source = Gated::new(Arc::new(SyntheticSource::new(gen.clone(), rate)), gate_rx.clone());
    let a_source = FreezeWhenIdle::new(Arc::new(a_source), frozen.clone());
    let a = Pipeline::new(a_source.clone(), a_items.clone(), a_leases, options("st", "a", dir.path(), failover));
    let a = spawn(Arc::new(a.expect("pipeline")), stop_a.clone());
    let (b_pipeline, _) = gated_worker(&gen, rate, &gate_rx, open(&db), options("st", "b", dir.path(), failover));
    let b_coord = b_pipeline.coordinator().clone();
    let b = spawn(b_pipeline, CancellationToken::new());
    let stores = open(&db);
    until_a_and_b_hold_leases(&stores).await;
    // A has written items: it reads (and the data goes on coming), so it
    // stops with records to flush.
    within(30, "A flushes", async {
        while a_items.batches.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    // Stopped, A closes its readers, which freezes its items: its final
    // flush takes three failovers to write them.
    a_source.arm();
    stop_a.cancel();
    within(30, "A's final flush hangs", async {
        while a_items.writes_held.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(3 * failover)).await;
    let a_lane = lanes(&*stores.leases).await.into_iter().find(|l| l.worker_id() == Some("a"));
    let a_lane = a_lane.expect("A's lane is still A's three failovers into its final flush");
    assert!(a_lane.in_flight().is_some(), "A is mid-flush: {a_lane:?}");
    frozen.send_replace(false);
    let a_sum = within(30, "A stops", a).await.unwrap();
    gate.send(true).expect("B's source listens");
    let b_sum = within(90, "B finishes", b).await.unwrap();
    assert_eq!(a_sum.leases_lost, 0, "A's lane lived through its final flush: {a_sum:?}");
    assert_eq!(b_coord.stats.lanes_recovered.load(Ordering::Relaxed), 0, "B recovered no flush of A's");
    assert_eq!(b_coord.stats.taken_expired.load(Ordering::Relaxed), 0, "B took no lease by expiry");
    assert_eq!(a_sum.records + b_sum.records, truth.records, "nothing read twice");
    assert_exact(&db, &truth).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_streams_with_the_same_shard_ids_add_up_in_one_table() {
    keep_log();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("z.db");
    let (ga, gb) = (generator(6, 3, 9_000), generator(7, 3, 7_000));
    let mut truth = truth::compute(&ga);
    truth.merge(&truth::compute(&gb));
    // Both workers write one SQLite file, and their heartbeats wait for
    // each other's flushes: with a 1 s failover this test once counted 26,066
    // records for 16,000 (a worker presumed dead read its shards again) before
    // the store queued a file's writers fairly (zigzag-sqlite `turns`). Even
    // queued fairly, a beat can wait behind 4,096-item transactions (seconds
    // on a slow machine, unpaced): 5 s.
    let failover = 5_000;
    let a =
        spawn(worker(&ga, None, open(&db), options("stream-a", "wa", dir.path(), failover)), CancellationToken::new());
    let b =
        spawn(worker(&gb, None, open(&db), options("stream-b", "wb", dir.path(), failover)), CancellationToken::new());
    let (ra, rb) = within(60, "two streams", async { (a.await.unwrap(), b.await.unwrap()) }).await;
    assert_eq!(ra.records + rb.records, truth.records, "each stream's records read once, by its own worker");
    assert_exact(&db, &truth).await;
    let stores = open(&db);
    for s in ["stream-a", "stream-b"] {
        let l = leases(&*stores.leases, s).await;
        assert_eq!(l.len(), 3);
        assert!(l.iter().all(|l| l.finished), "{s}: {l:?}");
    }
    // Both streams' writers left their own mark on shared items.
    let items = all_items(&db).await;
    assert!(!items.is_empty());
    let shared =
        items.iter().filter(|i| i.attrs.keys().filter(|k| zigzag_model::mark::is_mark(k)).count() == 2).count();
    assert!(shared > 0, "some items were written by both streams' workers, each under its own lane's mark");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_bound_flushes_early_holds_readers_back_and_counts_exactly() {
    keep_log();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("z.db");
    let gen = Generator::new(GenConfig {
        seed: 9,
        shards: 2,
        records: 40_000,
        referrers: 20_000,
        span_ms: 24 * 3_600_000,
        ..GenConfig::default()
    });
    let truth = truth::compute(&gen);
    let mut opts = options("st", "m", dir.path(), 1000);
    opts.config.flush.max_memory_mb = 1;
    opts.config.flush.interval_ms = 60_000; // only the bound flushes
    let pipeline = worker(&gen, None, open(&db), opts);
    let s = within(60, "bounded run", pipeline.run(CancellationToken::new())).await.expect("run");
    // ~1 MiB at ~200 bytes a key: a few thousand keys per generation.
    assert!(s.max_generation_keys < 10_000, "{s:?}");
    assert!(s.flushes >= 5, "the bound, not the interval, flushed: {s:?}");
    assert_exact(&db, &truth).await;
}
