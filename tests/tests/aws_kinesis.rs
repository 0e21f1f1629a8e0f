//! The Kinesis source against kinesalite (fast, correct resharding), with
//! the in-memory store so only the source is under test:
//!
//! - a shard split mid-stream: the parent is read to its end (GetRecords
//!   stops returning a NextShardIterator: SHARD_END) and its children from
//!   their start, each opened only once the parent's lease records SHARD_END
//!   (checked as it happens); every record once, totals exact;
//! - ExpiredIteratorException on a share of GetRecords calls (through the
//!   fault proxy): the reader renews its iterator after the last record it
//!   delivered; nothing is lost or read twice;
//! - a stream deleted and created again under its name (same shard ids):
//!   read from its start under leases of its own, totals exact;
//! - `--start latest`, the first reader killed before any checkpoint: the
//!   next begins where the first did (recorded in the lease), not at a
//!   later LATEST.

use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use zigzag_aws::emulator;
use zigzag_core::table::{MemoryTable, SortedTable};
use zigzag_gather::check;
use zigzag_gather::execute::ExecOptions;
use zigzag_ingest::source::Source;
use zigzag_ingest::{Pipeline, PipelineOptions, RunSummary};
use zigzag_kinesis::stream::{ensure_stream, list_shards};
use zigzag_kinesis::{KinesisSource, Producer, StartingPosition};
use zigzag_loadgen::{truth, GenConfig, Generator};
use zigzag_model::{Config, KeyModel, Truth};
use zigzag_tests::fault_proxy::{kinesis, Fault, FaultProxy, Rule};
use zigzag_tests::order::ParentOrder;

use zigzag_tests::interleaved_records;
use zigzag_tests::unique_name as unique;

fn generator() -> Generator {
    seeded(5)
}

fn seeded(seed: u64) -> Generator {
    Generator::new(GenConfig {
        seed,
        shards: 2,
        records: 3_000,
        referrers: 100,
        span_ms: 3_600_000,
        malformed_fraction: 0.01,
        ..GenConfig::default()
    })
}

async fn ingest_until_idle(
    source: Arc<dyn Source>,
    table: Arc<MemoryTable>,
    checkpoints: Arc<dyn SortedTable>,
) -> RunSummary {
    let dir = tempfile::tempdir().unwrap();
    let opts = PipelineOptions {
        batch_size: 500,
        ..PipelineOptions::new(Config::default(), "s", "kinesis-test", dir.path().join("dead.jsonl"))
    };
    let pipeline = Arc::new(Pipeline::new(source, table, checkpoints, opts).expect("pipeline"));
    // Everything was written before ingest starts.
    let produced = CancellationToken::new();
    produced.cancel();
    pipeline.run_until_drained(CancellationToken::new(), produced).await.expect("ingest")
}

/// Puts every record of `gen` into the stream.
async fn put_all(client: aws_sdk_kinesis::Client, name: String, gen: Generator) {
    let mut producer = Producer::new(client, &name);
    for (k, d) in interleaved_records(&gen) {
        producer.send(k, d).await.expect("put");
    }
    producer.flush().await.expect("flush");
}

async fn assert_exact(table: &MemoryTable, summary: &RunSummary, truth: &Truth) {
    assert_eq!((summary.records, summary.valid, summary.rejected), (truth.records, truth.valid, truth.malformed));
    let km = KeyModel::new(&Config::default()).unwrap();
    let report = check::check(
        table,
        &zigzag_model::Projections::from(km.clone()),
        truth,
        truth.last_ms.unwrap_or_default(),
        &ExecOptions::default(),
    )
    .await
    .expect("check");
    assert_eq!(report.mismatches(), 0, "{}", check::render(&report));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_shard_is_read_to_its_end_then_its_children() {
    if !zigzag_aws::emulator::gate("a_split_shard_is_read_to_its_end_then_its_children") {
        return;
    }
    let url = emulator::endpoint_in("ZIGZAG_KINESALITE_ENDPOINT").unwrap_or_else(|e| panic!("{e}"));
    let client = zigzag_kinesis::client(&emulator::options_at(url)).await;
    let name = unique("split");
    ensure_stream(&client, &name, 1).await.expect("stream");
    let gen = generator();
    let truth = truth::compute(&gen);
    let all = interleaved_records(&gen);
    let (before, after) = all.split_at(all.len() / 2);
    let mut producer = Producer::new(client.clone(), &name);
    for (k, d) in before {
        producer.send(k.clone(), d.clone()).await.expect("put");
    }
    producer.flush().await.expect("flush");
    client
        .split_shard()
        .stream_name(&name)
        .shard_to_split("shardId-000000000000")
        .new_starting_hash_key("170141183460469231731687303715884105728")
        .send()
        .await
        .expect("split");
    ensure_stream(&client, &name, 1).await.expect("ACTIVE again after the split");
    for (k, d) in after {
        producer.send(k.clone(), d.clone()).await.expect("put");
    }
    producer.flush().await.expect("flush");
    let shards = list_shards(&client, &name, 100).await.expect("shards");
    assert_eq!(shards.len(), 3, "the parent and two children");
    assert!(
        shards[0].sequence_number_range().and_then(|r| r.ending_sequence_number()).is_some(),
        "the parent is closed"
    );

    let table = Arc::new(MemoryTable::new());
    let leases: Arc<dyn SortedTable> = Arc::new(MemoryTable::new());
    let kinesis = Arc::new(KinesisSource::new(client, &name, StartingPosition::TrimHorizon));
    let source = ParentOrder::new(kinesis, leases.clone(), "s");
    let summary = ingest_until_idle(source.clone(), table.clone(), leases).await;
    assert_eq!(summary.shards, 3);
    let parent = shards[0].shard_id().to_string();
    let opened = source.opened.lock().unwrap().clone();
    assert_eq!(opened.len(), 3);
    assert_eq!(opened[0], parent, "the parent is read first: {opened:?}");
    let violations = source.violations.lock().unwrap().clone();
    assert!(violations.is_empty(), "children read before their parent's SHARD_END checkpoint: {violations:?}");
    assert_exact(&table, &summary, &truth).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_iterators_are_renewed_after_the_last_record() {
    if !zigzag_aws::emulator::gate("expired_iterators_are_renewed_after_the_last_record") {
        return;
    }
    let url = emulator::endpoint_in("ZIGZAG_KINESALITE_ENDPOINT").unwrap_or_else(|e| panic!("{e}"));
    let direct = zigzag_kinesis::client(&emulator::options_at(url.clone())).await;
    let name = unique("expired");
    ensure_stream(&direct, &name, 2).await.expect("stream");
    let gen = generator();
    let truth = truth::compute(&gen);
    let mut producer = Producer::new(direct, &name);
    for (k, d) in interleaved_records(&gen) {
        producer.send(k, d).await.expect("put");
    }
    producer.flush().await.expect("flush");

    let expired = Fault::Error {
        status: 400,
        shape: "ExpiredIteratorException".into(),
        message: "Iterator expired. The iterator was created at time X while right now it is Y".into(),
    };
    let upstream = url.trim_start_matches("http://").parse().expect("loopback address");
    let proxy = FaultProxy::start(upstream, vec![Rule::new(kinesis::GET_RECORDS, 0.3, vec![expired])], 21)
        .await
        .expect("proxy");
    let client = zigzag_kinesis::client(&emulator::options_at(proxy.url())).await;
    let table = Arc::new(MemoryTable::new());
    // Small reads: many GetRecords calls, so many expire mid-shard.
    let source = Arc::new(KinesisSource::new(client, &name, StartingPosition::TrimHorizon));
    let summary = ingest_until_idle(source.clone(), table.clone(), Arc::new(MemoryTable::new())).await;
    let injected = proxy.stats().target(kinesis::GET_RECORDS).injected_total();
    assert!(injected >= 3, "iterators expired {injected} times");
    assert_eq!(source.retries(), 0, "an expired iterator is renewed, not retried");
    assert_exact(&table, &summary, &truth).await;
}

/// The stream is deleted and created again under its name between two
/// runs (its shard ids repeat). The second run reads the new stream from
/// its start under leases of its own; the first stream's leases are retired.
/// (With leases keyed by the name, the old finished leases made the new
/// shards unreadable: no new event was read, and ingest waited without a
/// word.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_deleted_and_created_again_is_read_from_its_start_under_leases_of_its_own() {
    if !zigzag_aws::emulator::gate("a_stream_deleted_and_created_again_is_read_from_its_start_under_leases_of_its_own")
    {
        return;
    }
    let url = emulator::endpoint_in("ZIGZAG_KINESALITE_ENDPOINT").unwrap_or_else(|e| panic!("{e}"));
    let client = zigzag_kinesis::client(&emulator::options_at(url)).await;
    let name = unique("recreated");
    let (before, after) = (seeded(5), seeded(6));
    let put = |gen: Generator| put_all(client.clone(), name.clone(), gen);
    let table = Arc::new(MemoryTable::new());
    let leases: Arc<dyn SortedTable> = Arc::new(MemoryTable::new());
    let within = |what: &'static str, f| async move {
        tokio::time::timeout(std::time::Duration::from_secs(120), f).await.unwrap_or_else(|_| panic!("{what}"))
    };
    let source = || Arc::new(KinesisSource::new(client.clone(), &name, StartingPosition::TrimHorizon));

    ensure_stream(&client, &name, 2).await.expect("stream");
    put(before.clone()).await;
    let first = within("the first stream is read", ingest_until_idle(source(), table.clone(), leases.clone())).await;
    let mut truth = truth::compute(&before);
    assert_exact(&table, &first, &truth).await;
    let first_incarnation =
        zigzag_lease::Coordinator::new(leases.clone(), zigzag_lease::LeaseOptions::new("s", "observer"));
    let checkpoints = |l: Vec<zigzag_lease::ShardLease>| -> Vec<_> { l.into_iter().map(|l| l.checkpoint).collect() };
    let left = checkpoints(first_incarnation.read_leases().await.expect("leases"));

    client.delete_stream().stream_name(&name).send().await.expect("delete the stream");
    let deleted = std::time::Instant::now();
    while client.describe_stream_summary().stream_name(&name).send().await.is_ok() {
        assert!(deleted.elapsed().as_secs() < 30, "the stream is gone within 30 s");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // kinesalite's creation times are whole seconds: another second makes
    // the new stream another incarnation, as on Kinesis.
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    ensure_stream(&client, &name, 2).await.expect("the stream created again");
    put(after.clone()).await;
    let second = within(
        "the recreated stream is read (with leases keyed by name it never was)",
        ingest_until_idle(source(), table.clone(), leases.clone()),
    )
    .await;
    let new = truth::compute(&after);
    assert_eq!((second.records, second.valid), (new.records, new.valid), "every new record, once: {second:?}");
    truth.merge(&new);
    let merged = RunSummary { records: truth.records, valid: truth.valid, rejected: truth.malformed, ..second };
    assert_exact(&table, &merged, &truth).await;
    let retired = checkpoints(first_incarnation.read_leases().await.expect("leases"));
    assert_eq!(retired.len(), 2);
    assert_eq!(retired, left, "the first stream's leases are retired as they were");
}

/// `--start latest`: a worker opens the shard (its start is recorded in
/// the lease) and is killed before it checkpoints anything; events arrive;
/// the worker that takes the shard over begins where the first did and
/// reads them all. (Before starts were recorded it began at a new LATEST:
/// every event written in between was lost, silently.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_before_the_first_checkpoint_begins_where_the_first_reader_did() {
    if !zigzag_aws::emulator::gate("a_takeover_before_the_first_checkpoint_begins_where_the_first_reader_did") {
        return;
    }
    use std::time::{Duration, Instant};
    let url = emulator::endpoint_in("ZIGZAG_KINESALITE_ENDPOINT").unwrap_or_else(|e| panic!("{e}"));
    let client = zigzag_kinesis::client(&emulator::options_at(url)).await;
    let name = unique("latest");
    ensure_stream(&client, &name, 1).await.expect("stream");
    let put = |gen: Generator| put_all(client.clone(), name.clone(), gen);
    // Before any worker: never read under LATEST.
    put(seeded(5)).await;
    tokio::time::sleep(Duration::from_millis(2_500)).await;

    let table = Arc::new(MemoryTable::new());
    let leases: Arc<dyn SortedTable> = Arc::new(MemoryTable::new());
    let dir = tempfile::tempdir().unwrap();
    let pipeline = |worker: &str| {
        let opts = PipelineOptions {
            failover: Duration::from_millis(1_500),
            batch_size: 500,
            ..PipelineOptions::new(Config::default(), "s", worker, dir.path().join(format!("dead-{worker}.jsonl")))
        };
        let source = Arc::new(KinesisSource::new(client.clone(), &name, StartingPosition::Latest));
        Arc::new(Pipeline::new(source, table.clone(), leases.clone(), opts).expect("pipeline"))
    };
    // The first worker, on a runtime of its own: shutting it down ends all
    // of its tasks at once, as a kill does.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    rt.spawn(pipeline("first").run(CancellationToken::new()));
    let observer = zigzag_lease::Coordinator::new(leases.clone(), zigzag_lease::LeaseOptions::new("s", "observer"));
    let began = Instant::now();
    let recorded = loop {
        let l = observer.read_leases().await.expect("leases");
        if let Some(ms) = l.first().and_then(|l| l.start_ms) {
            assert!(l[0].checkpoint.earliest().is_none(), "nothing read, nothing checkpointed: {l:?}");
            break ms;
        }
        assert!(began.elapsed() < Duration::from_secs(30), "the first reader records where it starts: {l:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    rt.shutdown_background();
    let late = seeded(6);
    put(late.clone()).await;

    // Drained only once the second worker holds the shard (the first's
    // lease waits out its expiry until then).
    let produced = CancellationToken::new();
    let second = pipeline("second");
    let taken = {
        let (produced, leases) = (produced.clone(), leases.clone());
        tokio::spawn(async move {
            let observer = zigzag_lease::Coordinator::new(leases, zigzag_lease::LeaseOptions::new("s", "observer"));
            while !observer.read_leases().await.expect("leases").iter().any(|l| l.worker_id() == Some("second")) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            produced.cancel();
        })
    };
    let second =
        tokio::time::timeout(Duration::from_secs(120), second.run_until_drained(CancellationToken::new(), produced))
            .await
            .expect("in time")
            .expect("the second worker runs");
    taken.await.expect("the observer");
    let truth = truth::compute(&late);
    assert_exact(&table, &second, &truth).await;
    let l = observer.read_leases().await.expect("leases");
    assert_eq!(l[0].start_ms, Some(recorded), "recorded once, by the first reader");
}
