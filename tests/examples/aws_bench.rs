//! Benchmarks on the AWS path, against the local emulators (start them with
//! `deploy/local/up.sh --kinesalite` and source the environment it prints).
//! Not tests: they measure, print a table, and never fail on speed.
//!
//! ```text
//! cargo run --release -p zigzag-tests --example aws_bench -- gather [RECORDS]
//! cargo run --release -p zigzag-tests --example aws_bench -- ingest [RECORDS]
//! ```
//!
//! - `gather`: loads a 3-day stream into DynamoDB Local under 100 scatter
//!   prefixes (through the real pipeline; the load rate is printed too),
//!   then times an hourly report over one day at concurrency 1, 8, 32 and
//!   128, beside a plain sequential per-prefix gatherer that reads each
//!   prefix's partition whole, one Query page after another, and keeps the
//!   day's items. Both must agree on the totals.
//! - `ingest`: puts RECORDS into a 4-shard kinesalite stream, then times
//!   ingest reading it (Kinesis source, KPL off) into SQLite, and into
//!   DynamoDB Local.

use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use zigzag_aws::emulator;
use zigzag_core::query::{AutoConfig, Strategy};
use zigzag_core::table::{QueryRequest, SortKeyCondition, SortedTable};
use zigzag_dynamodb::{ensure_table, Billing, DynamoTable};
use zigzag_gather::execute::ExecOptions;
use zigzag_gather::filter::FilterSet;
use zigzag_gather::merge::{bucket_of, Aggregation};
use zigzag_gather::plan::PlanRequest;
use zigzag_gather::window::WindowSpec;
use zigzag_ingest::source::Source;
use zigzag_ingest::{Pipeline, PipelineOptions, RunSummary};
use zigzag_kinesis::stream::ensure_stream;
use zigzag_kinesis::{KinesisSource, Producer, StartingPosition};
use zigzag_loadgen::kinesis_sink::{produce, PartitionKey, SinkOptions};
use zigzag_loadgen::traffic::Traffic;
use zigzag_loadgen::{GenConfig, Generator, SyntheticSource};
use zigzag_model::{Config, KeyModel, MeasureValues};

const DAY: i64 = 86_400_000;
const START: i64 = 1_795_132_800_000; // 2026-11-20T00:00:00Z

use zigzag_tests::unique_name as unique;

/// Aggregates and lease table.
type Stores = (Arc<dyn SortedTable>, Arc<dyn SortedTable>);

async fn dynamo_tables(name: &str) -> (DynamoTable, DynamoTable) {
    let client = zigzag_dynamodb::client(&emulator::options("DYNAMODB").unwrap_or_else(|e| panic!("{e}"))).await;
    let cps = format!("{name}-checkpoints");
    for t in [name, cps.as_str()] {
        ensure_table(&client, t, Billing::OnDemand, true).await.expect("table");
    }
    (DynamoTable::new(client.clone(), name), DynamoTable::new(client, cps))
}

async fn run_pipeline(
    source: Arc<dyn Source>,
    aggregates: Arc<dyn SortedTable>,
    checkpoints: Arc<dyn SortedTable>,
    config: &Config,
    stop: CancellationToken,
) -> RunSummary {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = PipelineOptions {
        batch_size: 10_000,
        ..PipelineOptions::new(config.clone(), "bench", unique("bench"), dir.path().join("dead.jsonl"))
    };
    let pipeline = Arc::new(Pipeline::new(source, aggregates, checkpoints, opts).expect("pipeline"));
    let produced = CancellationToken::new();
    produced.cancel(); // the stream is written before ingest starts
    pipeline.run_until_drained(stop, produced).await.expect("pipeline run")
}

fn generator(records: u64) -> Generator {
    Generator::new(GenConfig {
        records,
        start_ms: START,
        span_ms: 3 * DAY,
        referrers: 2_000,
        malformed_fraction: 0.0,
        ..GenConfig::default()
    })
}

/// Every item of `pk`, one page after another.
async fn read_partition(table: &DynamoTable, pk: &str, window: (i64, i64), agg: &mut Aggregation) -> (u64, u64) {
    let mut req = QueryRequest::new(pk, SortKeyCondition::Any);
    let (mut requests, mut scanned) = (0, 0);
    loop {
        let page = table.query(&req).await.expect("query");
        requests += 1;
        scanned += page.scanned_count as u64;
        for item in &page.items {
            let t = bucket_of(item).expect("bucket");
            if (window.0..window.1).contains(&t) {
                agg.add_item(item).expect("item");
            }
        }
        match page.last_evaluated {
            Some(k) => req.exclusive_start = Some(k),
            None => return (requests, scanned),
        }
    }
}

async fn gather_bench(records: u64) {
    let mut config = Config::default();
    config.scatter.prefixes = 100;
    let name = unique("bench-gather");
    let (aggregates, checkpoints) = dynamo_tables(&name).await;
    let gen = generator(records);
    let t0 = Instant::now();
    let s = run_pipeline(
        Arc::new(SyntheticSource::new(gen, None)),
        Arc::new(aggregates.clone()),
        Arc::new(checkpoints),
        &config,
        CancellationToken::new(),
    )
    .await;
    let load = t0.elapsed().as_secs_f64();
    println!(
        "load: {} records → {} items, {} write requests into DynamoDB Local in {load:.1}s \
         ({:.0} records/s, {:.0} writes/s, {:.0} WCU)",
        s.records,
        s.items,
        s.write_requests,
        s.records as f64 / load,
        s.write_requests as f64 / load,
        aggregates.capacity().write_units
    );

    let km = KeyModel::new(&config).expect("keys");
    let day = (START + DAY, START + 2 * DAY);
    let request = || PlanRequest {
        window: WindowSpec::Absolute { from: day.0.to_string(), to: day.1.to_string() },
        rollup: None,
        step: Some(3_600_000),
        timeseries: true,
        filters: FilterSet::default(),
        now: START + 3 * DAY,

        source: Default::default(),
        mixing: None,
        snap: None,
        filling: Default::default(),
    };
    println!("\none-day hourly report, 100 prefixes (DynamoDB Local, eventually consistent reads)");
    println!("{:<34} {:>9} {:>9} {:>11} {:>10}", "gatherer", "wall s", "requests", "items read", "RCU");
    let mut reference: Option<MeasureValues> = None;
    for concurrency in [1, 8, 32, 128] {
        let opts = ExecOptions {
            concurrency,
            strategy: Strategy::Auto(AutoConfig::default()),
            rcu_per_sec: None,
            consistent: false,
            rcu_allowance: None,
            choose_way: false,
        };
        let g = zigzag_gather::gather(&aggregates, &config, request(), vec![], &opts).await.expect("gather");
        let total = g.aggregation.total();
        if let Some(r) = &reference {
            assert_eq!(&total, r, "same totals at every concurrency");
        }
        reference = Some(total);
        println!(
            "{:<34} {:>9.3} {:>9} {:>11} {:>10.1}",
            format!("zigzag gather, concurrency {concurrency}"),
            g.actual.wall.as_secs_f64(),
            g.actual.stats.requests,
            g.actual.stats.scanned,
            g.actual.stats.rcu
        );
        if concurrency == 32 {
            // The sequential baseline reads the same partitions.
            let t = Instant::now();
            let mut agg = Aggregation::new(Some(3_600_000), vec![], km.measures().clone());
            let (mut requests, mut scanned) = (0, 0);
            let mut pks: Vec<&str> = g.plan.reads.iter().flat_map(|r| &r.queries).map(|q| q.pk.as_str()).collect();
            pks.dedup();
            let rcu_before = aggregates.capacity().read_units;
            for pk in pks {
                let (r, s) = read_partition(&aggregates, pk, day, &mut agg).await;
                requests += r;
                scanned += s;
            }
            let rcu = aggregates.capacity().read_units - rcu_before;
            assert_eq!(Some(agg.total()), reference, "the baseline agrees");
            println!(
                "{:<34} {:>9.3} {:>9} {:>11} {:>10.1}",
                "sequential per-prefix, whole bins",
                t.elapsed().as_secs_f64(),
                requests,
                scanned,
                rcu
            );
        }
    }
}

async fn ingest_bench(records: u64) {
    let url = emulator::endpoint_in("ZIGZAG_KINESALITE_ENDPOINT").unwrap_or_else(|e| panic!("{e}"));
    let kinesis = zigzag_kinesis::client(&emulator::options_at(url)).await;
    let name = unique("bench-ingest");
    ensure_stream(&kinesis, &name, 4).await.expect("stream");
    let gen = generator(records);
    let t0 = Instant::now();
    let mut producer = Producer::new(kinesis.clone(), &name);
    let opts = SinkOptions {
        partition_key: PartitionKey::parse("referrer", gen.fields()).expect("a shipped field"),
        rate: None,
        kpl_max_bytes: None,
    };
    produce(&gen, &mut producer, &opts, |_| {}).await.expect("produce");
    let put = t0.elapsed().as_secs_f64();
    println!("loadgen → kinesalite: {records} records in {put:.1}s ({:.0}/s)", records as f64 / put);

    let config = Config::default();
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("bench.db");
    let sqlite = |t: &str| Arc::new(zigzag_sqlite::SqliteTable::open_table(&db, t).expect("sqlite"));
    let (dynamo_aggs, dynamo_cps) = dynamo_tables(&name).await;
    let targets: Vec<(&str, Stores)> = vec![
        ("SQLite", (sqlite("items"), sqlite("checkpoints"))),
        ("DynamoDB Local", (Arc::new(dynamo_aggs), Arc::new(dynamo_cps))),
    ];
    for (label, (aggregates, checkpoints)) in targets {
        let source = Arc::new(KinesisSource::new(kinesis.clone(), &name, StartingPosition::TrimHorizon));
        let t = Instant::now();
        let s = run_pipeline(source, aggregates, checkpoints, &config, CancellationToken::new()).await;
        let secs = t.elapsed().as_secs_f64().max(1e-3);
        assert_eq!(s.records, records);
        println!(
            "ingest kinesalite → {label}: {} records in {secs:.1}s = {:.0} records/s ({} flushes, {} write requests)",
            s.records,
            s.records as f64 / secs,
            s.flushes,
            s.write_requests
        );
    }
}

/// Records/s with 1, 2 and 3 workers (in one process, each with its own
/// store connections) sharing an 8-shard kinesalite stream, into SQLite (one
/// file) and DynamoDB Local. The workers start on the empty stream and
/// balance first; then `records` are put as fast as PutRecords goes, and the
/// clock runs from the first put until every worker has drained.
async fn workers_bench(records: u64) {
    let url = emulator::endpoint_in("ZIGZAG_KINESALITE_ENDPOINT").unwrap_or_else(|e| panic!("{e}"));
    let kinesis = zigzag_kinesis::client(&emulator::options_at(url)).await;
    let gen = generator(records);
    let config = Config::default();
    println!("| store | workers | records/s | s | put alone, records/s | lease-table requests/s per worker |");
    println!("|---|---:|---:|---:|---:|---:|");
    for store in ["SQLite", "DynamoDB Local"] {
        for workers in 1..=3usize {
            let name = unique("bench-workers");
            ensure_stream(&kinesis, &name, 8).await.expect("stream");
            let dir = tempfile::tempdir().expect("tempdir");
            let db = dir.path().join("bench.db");
            let dynamo = if store == "DynamoDB Local" { Some(dynamo_tables(&name).await) } else { None };
            let produced = CancellationToken::new();
            let mut runs = Vec::new();
            let mut lease_table = None;
            for w in 0..workers {
                let (aggregates, leases): Stores = match &dynamo {
                    Some((a, c)) => (Arc::new(a.clone()), Arc::new(c.clone())),
                    None => (
                        Arc::new(zigzag_sqlite::SqliteTable::open_table(&db, "items").expect("sqlite")),
                        Arc::new(zigzag_sqlite::SqliteTable::open_table(&db, "checkpoints").expect("sqlite")),
                    ),
                };
                lease_table.get_or_insert(leases.clone());
                let source = Arc::new(KinesisSource::new(kinesis.clone(), &name, StartingPosition::TrimHorizon));
                let opts = PipelineOptions {
                    batch_size: 10_000,
                    ..PipelineOptions::new(config.clone(), &name, format!("w{w}"), dir.path().join(format!("d{w}")))
                };
                let p = Arc::new(Pipeline::new(source, aggregates, leases, opts).expect("pipeline"));
                runs.push(tokio::spawn(p.run_until_drained(CancellationToken::new(), produced.clone())));
            }
            let leases = lease_table.expect("a worker");
            let balanced = Instant::now();
            loop {
                let mut req = QueryRequest::new(zigzag_lease::items::shards_pk(&name), SortKeyCondition::Any);
                req.consistent = true;
                let held: Vec<Option<String>> = leases
                    .query(&req)
                    .await
                    .expect("leases")
                    .items
                    .iter()
                    .map(|i| zigzag_lease::ShardLease::from_item(i).expect("lease").worker_id().map(str::to_string))
                    .collect();
                let mut per: std::collections::HashMap<&str, usize> = Default::default();
                for o in held.iter().flatten() {
                    *per.entry(o.as_str()).or_default() += 1;
                }
                let even = per.values().max().unwrap_or(&0) - per.values().min().unwrap_or(&0) <= 1;
                if held.len() == 8 && held.iter().all(Option::is_some) && per.len() == workers && even {
                    break;
                }
                assert!(balanced.elapsed().as_secs() < 120, "never balanced: {held:?}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let t = Instant::now();
            let mut producer = Producer::new(kinesis.clone(), &name);
            let opts = SinkOptions { partition_key: PartitionKey::Random, rate: None, kpl_max_bytes: None };
            produce(&gen, &mut producer, &opts, |_| {}).await.expect("produce");
            let put = t.elapsed().as_secs_f64();
            produced.cancel();
            let mut sums = Vec::new();
            for r in runs {
                sums.push(r.await.expect("task").expect("run"));
            }
            let secs = t.elapsed().as_secs_f64();
            let read: u64 = sums.iter().map(|s| s.records).sum();
            assert_eq!(read, records, "every record read once");
            let lease_requests: u64 = sums.iter().map(|s| s.lease_requests).sum();
            let whole = balanced.elapsed().as_secs_f64();
            println!(
                "| {store} | {workers} | {:.0} | {secs:.1} | {:.0} | {:.1} |",
                records as f64 / secs,
                records as f64 / put,
                lease_requests as f64 / whole / workers as f64
            );
        }
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let records = args.get(2).and_then(|n| n.parse().ok());
    match args.get(1).map(String::as_str) {
        Some("gather") => gather_bench(records.unwrap_or(100_000)).await,
        Some("ingest") => ingest_bench(records.unwrap_or(200_000)).await,
        Some("workers") => workers_bench(records.unwrap_or(20_000)).await,
        _ => eprintln!("usage: aws_bench gather|ingest|workers [RECORDS]"),
    }
}
