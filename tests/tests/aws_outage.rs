//! Outages do not end the worker. A worker reads kinesalite and writes
//! DynamoDB Local through fault proxies while a producer writes at a steady
//! rate straight to the stream; then every DynamoDB call fails (500s and
//! 503s) for a while, then every Kinesis call. The worker must stay up
//! (pausing its flush, its shards and its lease work, keeping what it read),
//! resume by itself each time, catch up, and count every record exactly
//! once, in every rollup.
//!
//! Each outage lasts 60 s (the figure); `ZIGZAG_OUTAGE_SECS` sets
//! another length.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use zigzag_aws::emulator;
use zigzag_core::table::SortedTable;
use zigzag_dynamodb::{ensure_table, Billing, DynamoTable};
use zigzag_gather::check;
use zigzag_gather::execute::ExecOptions;
use zigzag_ingest::{Pipeline, PipelineOptions};
use zigzag_kinesis::stream::ensure_stream;
use zigzag_kinesis::{KinesisSource, Producer, StartingPosition};
use zigzag_loadgen::kinesis_sink::{produce, PartitionKey, SinkOptions};
use zigzag_loadgen::traffic::Traffic;
use zigzag_loadgen::{truth, GenConfig, Generator};
use zigzag_model::{Config, KeyModel};
use zigzag_tests::fault_proxy::{dynamodb, kinesis, FaultProxy, Rule};
use zigzag_tests::unique_name as unique;

fn socket(url: &str) -> SocketAddr {
    url.trim_start_matches("http://").trim_end_matches('/').parse().expect("emulator URL is http://127.0.0.1:PORT")
}

fn outage() -> Duration {
    let secs = std::env::var("ZIGZAG_OUTAGE_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(60.0f64);
    Duration::from_secs_f64(secs.max(1.0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_survives_a_dynamodb_outage_then_a_kinesis_outage_and_catches_up_exactly() {
    if !zigzag_aws::emulator::gate("a_worker_survives_a_dynamodb_outage_then_a_kinesis_outage_and_catches_up_exactly") {
        return;
    }
    let dynamo_url = emulator::endpoint("DYNAMODB").unwrap_or_else(|e| panic!("{e}"));
    let kinesis_url = emulator::endpoint_in("ZIGZAG_KINESALITE_ENDPOINT").unwrap_or_else(|e| panic!("{e}"));
    let name = unique("outage");
    let direct_kinesis = zigzag_kinesis::client(&emulator::options_at(kinesis_url.clone())).await;
    ensure_stream(&direct_kinesis, &name, 2).await.expect("create stream");
    let direct_dynamo = zigzag_dynamodb::client(&emulator::options_at(dynamo_url.clone())).await;
    let lease_table = format!("{name}-checkpoints");
    for t in [name.as_str(), lease_table.as_str()] {
        ensure_table(&direct_dynamo, t, Billing::OnDemand, true).await.expect("create table");
    }
    let dynamo_proxy = FaultProxy::start(socket(&dynamo_url), vec![], 31).await.expect("DynamoDB proxy");
    let kinesis_proxy = FaultProxy::start(socket(&kinesis_url), vec![], 32).await.expect("Kinesis proxy");
    let dynamo = zigzag_dynamodb::client(&emulator::options_at(dynamo_proxy.url())).await;
    let kinesis_client = zigzag_kinesis::client(&emulator::options_at(kinesis_proxy.url())).await;

    let down = outage();
    // The producer writes through both outages (straight to the stream):
    // ~2.5 outages long at a steady rate.
    let records = ((down.as_secs_f64() * 2.5) * 40.0) as u64;
    let gen = Generator::new(GenConfig {
        seed: 8,
        shards: 2,
        records: records.max(400),
        referrers: 200,
        span_ms: 2 * 3_600_000,
        malformed_fraction: 0.01,
        ..GenConfig::default()
    });
    let truth = truth::compute(&gen);
    let produced = CancellationToken::new();
    let producer = {
        let (gen, name, produced) = (gen.clone(), name.clone(), produced.clone());
        let rate = gen.config().records as f64 / (down.as_secs_f64() * 2.5);
        tokio::spawn(async move {
            let mut producer = Producer::new(direct_kinesis, &name);
            let opts = SinkOptions {
                partition_key: PartitionKey::parse("referrer", gen.fields()).expect("a shipped field"),
                rate: Some(rate),
                kpl_max_bytes: None,
            };
            let sent = produce(&gen, &mut producer, &opts, |_| {}).await.expect("produce");
            produced.cancel();
            sent
        })
    };

    let mut config = Config::default();
    config.flush.interval_ms = 300;
    let aggregates = DynamoTable::new(dynamo.clone(), &name);
    let leases = DynamoTable::new(dynamo, &lease_table);
    let source = Arc::new(KinesisSource::new(kinesis_client, &name, StartingPosition::TrimHorizon));
    let dir = tempfile::tempdir().unwrap();
    let opts = PipelineOptions {
        failover: Duration::from_secs(3),
        relist: Duration::from_secs(2),
        max_pause: Duration::from_secs(2),
        ..PipelineOptions::new(config.clone(), name.clone(), "outage-worker", dir.path().join("dead.jsonl"))
    };
    let agg: Arc<dyn SortedTable> = Arc::new(aggregates.clone());
    let lt: Arc<dyn SortedTable> = Arc::new(leases);
    let pipeline = Arc::new(Pipeline::new(source, agg, lt, opts).expect("pipeline"));
    let run = tokio::spawn(pipeline.run_until_drained(CancellationToken::new(), produced.clone()));

    tokio::time::sleep(Duration::from_secs(3)).await;
    let t = Instant::now();
    dynamo_proxy
        .set_rules(vec![Rule::new(
            dynamodb::TARGET_PREFIX,
            1.0,
            vec![dynamodb::internal_server_error(), dynamodb::service_unavailable()],
        )])
        .expect("rules");
    tokio::time::sleep(down).await;
    assert!(!run.is_finished(), "the worker stays up through the DynamoDB outage");
    dynamo_proxy.set_rules(vec![]).expect("rules");
    let dynamo_faults = dynamo_proxy.stats().matching(dynamodb::TARGET_PREFIX).injected_total();
    kinesis_proxy
        .set_rules(vec![Rule::new(
            kinesis::TARGET_PREFIX,
            1.0,
            vec![kinesis::internal_failure(), kinesis::service_unavailable()],
        )])
        .expect("rules");
    tokio::time::sleep(down).await;
    assert!(!run.is_finished(), "the worker stays up through the Kinesis outage");
    kinesis_proxy.set_rules(vec![]).expect("rules");
    let kinesis_faults = kinesis_proxy.stats().matching(kinesis::TARGET_PREFIX).injected_total();
    eprintln!(
        "outages over after {:.0} s; {dynamo_faults} DynamoDB and {kinesis_faults} Kinesis calls failed",
        t.elapsed().as_secs_f64()
    );

    let sent = tokio::time::timeout(down * 2, producer).await.expect("producer done").expect("producer");
    assert_eq!(sent, truth.records);
    let summary = tokio::time::timeout(down * 3, run)
        .await
        .expect("the worker catches up after the outages")
        .expect("task")
        .expect("the worker never fails on an outage");
    assert!(dynamo_faults >= 10 && kinesis_faults >= 10, "both outages were felt");
    assert!(summary.flush_pauses >= 1, "flushes paused during the DynamoDB outage: {summary:?}");
    assert!(summary.shard_pauses >= 1, "shards paused during the Kinesis outage: {summary:?}");
    assert!(summary.lease_failures >= 1, "lease work failed and went on: {summary:?}");
    assert_eq!((summary.records, summary.valid, summary.rejected), (truth.records, truth.valid, truth.malformed));
    let km = KeyModel::new(&config).unwrap();
    let exec = ExecOptions { consistent: true, ..ExecOptions::default() };
    let report = check::check(
        &aggregates,
        &zigzag_model::Projections::from(km.clone()),
        &truth,
        truth.last_ms.unwrap_or_default(),
        &exec,
    )
    .await
    .expect("check");
    assert_eq!(report.mismatches(), 0, "DynamoDB != truth:\n{}", check::render(&report));
}
