//! Throttling, server errors and timeouts on the AWS path. The emulators
//! never throttle, so the clients talk to them through the fault proxy
//! (`zigzag_tests::fault_proxy`), which answers a share of the calls with
//! the errors DynamoDB and Kinesis really send — or applies a write and
//! then lets the client time out. Totals must still equal the ground truth
//! exactly, and every injected fault must show up as exactly one retry in
//! the component that made the call.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
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
use zigzag_tests::fault_proxy::{dynamodb, kinesis, Fault, FaultProxy, Rule};

use zigzag_tests::unique_name as unique;

fn socket(url: &str) -> SocketAddr {
    url.trim_start_matches("http://").trim_end_matches('/').parse().expect("emulator URL is http://127.0.0.1:PORT")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn throttles_5xx_and_timeouts_are_retried_and_totals_stay_exact() {
    if !zigzag_aws::emulator::gate("throttles_5xx_and_timeouts_are_retried_and_totals_stay_exact") {
        return;
    }
    let dynamo_url = emulator::endpoint("DYNAMODB").unwrap_or_else(|e| panic!("{e}"));
    let kinesis_url = emulator::endpoint_in("ZIGZAG_KINESALITE_ENDPOINT").unwrap_or_else(|e| panic!("{e}"));
    let name = unique("throttle");

    // Set-up goes straight to the emulators.
    let direct_kinesis = zigzag_kinesis::client(&emulator::options_at(kinesis_url.clone())).await;
    let shards = 2;
    ensure_stream(&direct_kinesis, &name, shards).await.expect("create stream");
    let direct_dynamo = zigzag_dynamodb::client(&emulator::options_at(dynamo_url.clone())).await;
    let checkpoint_table = format!("{name}-checkpoints");
    for t in [name.as_str(), checkpoint_table.as_str()] {
        ensure_table(&direct_dynamo, t, Billing::OnDemand, true).await.expect("create table");
    }

    let hold = Duration::from_millis(700);
    let dynamo_proxy = FaultProxy::start(
        socket(&dynamo_url),
        vec![
            Rule::new(
                dynamodb::UPDATE_ITEM,
                0.08,
                vec![
                    dynamodb::provisioned_throughput_exceeded(),
                    dynamodb::throttling(),
                    dynamodb::request_limit_exceeded(),
                    dynamodb::internal_server_error(),
                    dynamodb::service_unavailable(),
                    // Applied by DynamoDB, but the client times out: the
                    // retry must not add the same partials twice.
                    Fault::ApplyThenTimeout { hold },
                ],
            ),
            Rule::new(
                dynamodb::QUERY,
                0.15,
                vec![dynamodb::provisioned_throughput_exceeded(), dynamodb::internal_server_error()],
            ),
        ],
        11,
    )
    .await
    .expect("DynamoDB proxy");
    let kinesis_proxy = FaultProxy::start(
        socket(&kinesis_url),
        vec![
            Rule::new(
                kinesis::GET_RECORDS,
                0.25,
                vec![
                    kinesis::provisioned_throughput_exceeded(&name, "shardId-000000000000"),
                    kinesis::internal_failure_exception(),
                    kinesis::service_unavailable(),
                ],
            ),
            Rule::new(
                kinesis::PUT_RECORDS,
                0.25,
                vec![kinesis::provisioned_throughput_exceeded(&name, "shardId-000000000001")],
            ),
        ],
        12,
    )
    .await
    .expect("Kinesis proxy");

    let mut dynamo_opts = emulator::options_at(dynamo_proxy.url());
    dynamo_opts.attempt_timeout = Duration::from_millis(400);
    let dynamo = zigzag_dynamodb::client(&dynamo_opts).await;
    let kinesis_client = zigzag_kinesis::client(&emulator::options_at(kinesis_proxy.url())).await;

    let gen = Generator::new(GenConfig {
        seed: 3,
        shards: 2,
        records: 2_000,
        referrers: 200,
        span_ms: 2 * 3_600_000,
        malformed_fraction: 0.01,
        ..GenConfig::default()
    });
    let truth = truth::compute(&gen);

    // loadgen: whole PutRecords calls throttled and retried.
    let mut producer = Producer::new(kinesis_client.clone(), &name);
    let opts = SinkOptions {
        partition_key: PartitionKey::parse("referrer", gen.fields()).expect("a shipped field"),
        rate: None,
        kpl_max_bytes: None,
    };
    let sent = produce(&gen, &mut producer, &opts, |_| {}).await.expect("produce despite throttling");
    assert_eq!(sent, truth.records);
    let put = kinesis_proxy.stats().target(kinesis::PUT_RECORDS);
    assert!(put.injected_total() > 0, "some PutRecords were throttled: {put:?}");
    assert_eq!(
        producer.stats.failed_calls.load(Ordering::Relaxed),
        put.injected_total(),
        "one retry per throttled call"
    );
    assert_eq!(producer.stats.records.load(Ordering::Relaxed), truth.records);

    // ingest: GetRecords throttled/failing, UpdateItem throttled/failing/timing out.
    let mut config = Config::default();
    config.flush.interval_ms = 200;
    let aggregates = DynamoTable::new(dynamo.clone(), &name);
    let checkpoints = DynamoTable::new(dynamo.clone(), &checkpoint_table);
    let source = Arc::new(KinesisSource::new(kinesis_client, &name, StartingPosition::TrimHorizon));
    let dir = tempfile::tempdir().unwrap();
    let opts = PipelineOptions {
        batch_size: 500,
        ..PipelineOptions::new(config.clone(), name.clone(), "throttled-ingest", dir.path().join("dead.jsonl"))
    };
    let agg: Arc<dyn SortedTable> = Arc::new(aggregates.clone());
    let cps: Arc<dyn SortedTable> = Arc::new(checkpoints.clone());
    let pipeline = Arc::new(Pipeline::new(source.clone(), agg, cps, opts).expect("pipeline"));
    let produced = CancellationToken::new();
    produced.cancel(); // the stream is complete before ingest starts
    let summary =
        pipeline.run_until_drained(CancellationToken::new(), produced).await.expect("ingest despite throttling");
    assert_eq!((summary.records, summary.valid, summary.rejected), (truth.records, truth.valid, truth.malformed));

    let updates = dynamo_proxy.stats().target(dynamodb::UPDATE_ITEM);
    assert!(
        updates.injected(&Fault::ApplyThenTimeout { hold }.label()) > 0,
        "some updates applied then timed out: {updates:?}"
    );
    assert!(updates.injected_total() >= 10, "{updates:?}");
    // Item writes are retried by the flusher, lease-table writes by the
    // lease coordinator (the store retries neither): once per retryable
    // failure. Those are the injected faults, plus any answer DynamoDB
    // Local was too slow to give within the 400 ms attempt timeout on a
    // loaded machine (a real timeout, counted by the store, not the proxy).
    let classified = aggregates.capacity().retryable_errors + checkpoints.capacity().retryable_errors;
    assert_eq!(summary.retries, classified, "one retry per retryable failure: {summary:?}");
    assert!(classified >= updates.injected_total(), "every injected fault classified as retryable: {updates:?}");
    eprintln!("{classified} retryable failures, {} of them injected", updates.injected_total());
    let gets = kinesis_proxy.stats().target(kinesis::GET_RECORDS);
    assert!(gets.injected_total() > 0, "{gets:?}");
    // One source retry per injected GetRecords fault, except that stopping
    // a reader at the drain drops its call in flight: a fault the proxy
    // already counted, never retried. At most one per reader (shard).
    let (retries, injected) = (source.retries(), gets.injected_total());
    assert!(retries <= injected, "{retries} source retries, only {injected} GetRecords faults injected");
    assert!(
        injected - retries <= shards as u64,
        "{injected} GetRecords faults injected, only {retries} retried: {gets:?}"
    );

    // gather: throttled Query pages are retried; the totals are exact
    // (so a timed-out update that had applied was not applied twice).
    let km = KeyModel::new(&config).unwrap();
    let exec = ExecOptions { consistent: true, ..ExecOptions::default() };
    // Faults injected into gather's Queries only: the worker's lease reads
    // met some too, more the slower the machine (its passes are timed).
    let earlier = dynamo_proxy.stats().target(dynamodb::QUERY).injected_total();
    // Through the proxy, but without ingest's 400 ms attempt timeout (no
    // Query fault needs it): an answer slow on a loaded machine is then no
    // retry of its own, and the count below is the injected faults' alone.
    let gather_table =
        DynamoTable::new(zigzag_dynamodb::client(&emulator::options_at(dynamo_proxy.url())).await, &name);
    let report = check::check(
        &gather_table,
        &zigzag_model::Projections::from(km.clone()),
        &truth,
        truth.last_ms.unwrap_or_default(),
        &exec,
    )
    .await
    .expect("gather check");
    assert_eq!(report.mismatches(), 0, "DynamoDB != truth:\n{}", check::render(&report));
    let queries = dynamo_proxy.stats().target(dynamodb::QUERY);
    let injected = queries.injected_total() - earlier;
    assert!(injected > 0, "{queries:?}");
    assert_eq!(report.actual.retries, injected, "one gather retry per injected Query fault");
}
