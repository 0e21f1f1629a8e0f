//! End to end on the AWS APIs, against the emulators on loopback
//! (deploy/local/up.sh): loadgen → Kinesis → ingest → DynamoDB Local →
//! gather, with the same library code the binaries run. Totals must equal
//! the generator's ground truth exactly.
//!
//! - kinesis-local (the faithful emulator), 4 shards, referrer partition
//!   keys, ingest reading while loadgen writes, and a restart half way (the
//!   second run resumes from the checkpoints in DynamoDB);
//! - kinesalite (fast) with KPL-aggregated records: user records are
//!   de-aggregated and checkpointed by (sequence, sub-sequence);
//! - a slow paced producer puts within its linger;
//! - fifty workers starting at once all join the lease table.

use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use zigzag_aws::emulator;
use zigzag_core::table::SortedTable;
use zigzag_dynamodb::{ensure_table, Billing, DynamoTable};
use zigzag_gather::check::{self, Status};
use zigzag_gather::execute::ExecOptions;
use zigzag_ingest::{Pipeline, PipelineOptions, RunSummary};
use zigzag_kinesis::stream::{ensure_stream, list_shards};
use zigzag_kinesis::{KinesisSource, Producer, StartingPosition};
use zigzag_lease::{Coordinator, LeaseOptions};
use zigzag_loadgen::kinesis_sink::{produce, PartitionKey, SinkOptions};
use zigzag_loadgen::traffic::Traffic;
use zigzag_loadgen::{truth, GenConfig, Generator};
use zigzag_model::{Config, KeyModel, MeasureValues, Truth};

use zigzag_tests::unique_name as unique;

fn config() -> Config {
    let mut c = Config::default();
    c.flush.interval_ms = 300;
    c
}

fn generator(records: u64) -> Generator {
    seeded(7, records)
}

fn seeded(seed: u64, records: u64) -> Generator {
    Generator::new(GenConfig {
        seed,
        shards: 4,
        records,
        referrers: 300,
        span_ms: 3 * 3_600_000,
        malformed_fraction: 0.01,
        ..GenConfig::default()
    })
}

struct Tables {
    aggregates: DynamoTable,
    checkpoints: DynamoTable,
}

async fn dynamodb_tables(name: &str) -> Tables {
    let opts = emulator::options("DYNAMODB").unwrap_or_else(|e| panic!("{e}"));
    let client = zigzag_dynamodb::client(&opts).await;
    let checkpoints = format!("{name}-checkpoints");
    for t in [name, checkpoints.as_str()] {
        ensure_table(&client, t, Billing::OnDemand, true).await.expect("create table");
    }
    Tables { aggregates: DynamoTable::new(client.clone(), name), checkpoints: DynamoTable::new(client, checkpoints) }
}

/// Runs ingest on `source` until `stop` fires, or (with `producing`) until
/// the producer is done and every shard was then read to its tip.
async fn ingest(
    source: Arc<KinesisSource>,
    tables: &Tables,
    stream: &str,
    dead_letters: &std::path::Path,
    stop: CancellationToken,
    producing: Option<CancellationToken>,
) -> RunSummary {
    let opts = PipelineOptions::new(config(), stream, unique("ingest"), dead_letters.to_path_buf());
    let aggregates: Arc<dyn SortedTable> = Arc::new(tables.aggregates.clone());
    let checkpoints: Arc<dyn SortedTable> = Arc::new(tables.checkpoints.clone());
    let pipeline = Arc::new(Pipeline::new(source, aggregates, checkpoints, opts).expect("pipeline"));
    pipeline.run_until_drained(stop, producing.unwrap_or_default()).await.expect("ingest run")
}

async fn assert_matches_truth(table: &DynamoTable, truth: &Truth) {
    let km = KeyModel::new(&config()).unwrap();
    let opts = ExecOptions { consistent: true, ..ExecOptions::default() };
    let report = check::check(
        table,
        &zigzag_model::Projections::from(km.clone()),
        truth,
        truth.last_ms.unwrap_or_default(),
        &opts,
    )
    .await
    .expect("gather check");
    let text = check::render(&report);
    assert_eq!(report.mismatches(), 0, "DynamoDB != truth:\n{text}");
    assert!(report.rows.iter().all(|r| r.status == Status::Match), "{text}");
    let total = report.rows.iter().find(|r| r.check == "total").expect("a total row");
    assert_eq!(total.store, MeasureValues::from_named(&report.set, &truth.totals), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kinesis_local_to_dynamodb_local_exactly_with_a_restart() {
    if !zigzag_aws::emulator::gate("kinesis_local_to_dynamodb_local_exactly_with_a_restart") {
        return;
    }
    let name = unique("e2e");
    let kinesis = zigzag_kinesis::client(&emulator::options("KINESIS").unwrap_or_else(|e| panic!("{e}"))).await;
    ensure_stream(&kinesis, &name, 4).await.expect("create stream");
    // kinesis-local honours MaxResults: a page of 1 makes ListShards paginate.
    assert_eq!(list_shards(&kinesis, &name, 1).await.expect("list shards").len(), 4);
    let tables = dynamodb_tables(&name).await;
    // Two parts: the second is written only once the first run has
    // stopped, so the restart has records to resume to, however fast or
    // slow the machine.
    let (early, late) = (seeded(7, 2_000), seeded(8, 2_000));
    let mut truth = truth::compute(&early);
    truth.merge(&truth::compute(&late));
    let dir = tempfile::tempdir().unwrap();
    let dead_letters = dir.path().join("dead.jsonl");

    // loadgen writes while ingest reads.
    let done = CancellationToken::new();
    let first_stopped = CancellationToken::new();
    let producer_task = {
        let (kinesis, name, done, first_stopped) = (kinesis.clone(), name.clone(), done.clone(), first_stopped.clone());
        tokio::spawn(async move {
            let mut producer = Producer::new(kinesis, &name);
            let opts = SinkOptions {
                partition_key: PartitionKey::parse("referrer", early.fields()).expect("a shipped field"),
                rate: None,
                kpl_max_bytes: None,
            };
            let mut sent = produce(&early, &mut producer, &opts, |_| {}).await.expect("produce");
            first_stopped.cancelled().await;
            sent += produce(&late, &mut producer, &opts, |_| {}).await.expect("produce");
            done.cancel();
            (sent, producer.stats.records.load(std::sync::atomic::Ordering::Relaxed))
        })
    };

    // First run: stopped part way through, once it has checkpointed a
    // shard (a fixed time read nothing on a loaded machine).
    let source =
        Arc::new(KinesisSource::new(kinesis.clone(), &name, StartingPosition::TrimHorizon).with_list_page_size(2));
    let stop = CancellationToken::new();
    let stopper = stop.clone();
    // Read through the lease protocol's own reader, as an observer.
    let leases = Coordinator::new(Arc::new(tables.checkpoints.clone()), LeaseOptions::new(name.clone(), "observer"));
    tokio::spawn(async move {
        let deadline = Instant::now() + Duration::from_secs(120);
        let any_checkpoint =
            async || leases.read_leases().await.is_ok_and(|l| l.iter().any(|l| l.checkpoint.earliest().is_some()));
        while !any_checkpoint().await && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        stopper.cancel();
    });
    let first = ingest(source, &tables, &name, &dead_letters, stop, None).await;
    first_stopped.cancel();

    // Second run: resumes from the checkpoints until the stream is drained.
    let started = Instant::now();
    let source = Arc::new(KinesisSource::new(kinesis.clone(), &name, StartingPosition::TrimHorizon));
    let (sent, put) = {
        let run = ingest(source, &tables, &name, &dead_letters, CancellationToken::new(), Some(done.clone()));
        let (second, produced) = tokio::join!(run, producer_task);
        let produced = produced.expect("producer task");
        assert_eq!(first.records + second.records, truth.records, "each record read once: {first:?} {second:?}");
        assert_eq!(first.valid + second.valid, truth.valid);
        assert_eq!(first.rejected + second.rejected, truth.malformed);
        eprintln!("first run {} records, second {} records", first.records, second.records);
        assert!(first.records > 0, "the first run read something before it stopped");
        assert!(second.records >= 2_000, "the second run resumed and read the second part: {second:?}");
        produced
    };
    assert_eq!((sent, put), (truth.records, truth.records));
    eprintln!("the second run took {:.1} s", started.elapsed().as_secs_f64());

    assert_matches_truth(&tables.aggregates, &truth).await;
    let cap = tables.aggregates.capacity();
    assert!(cap.write_units >= cap.requests as f64 * 0.5 && cap.read_units > 0.0, "capacity reported: {cap:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kinesalite_kpl_aggregated_records_count_exactly() {
    if !zigzag_aws::emulator::gate("kinesalite_kpl_aggregated_records_count_exactly") {
        return;
    }
    let url = emulator::endpoint_in("ZIGZAG_KINESALITE_ENDPOINT").unwrap_or_else(|e| panic!("{e}"));
    let kinesis = zigzag_kinesis::client(&emulator::options_at(url)).await;
    let name = unique("kpl");
    ensure_stream(&kinesis, &name, 4).await.expect("create stream");
    let tables = dynamodb_tables(&name).await;
    let gen = generator(6_000);
    let truth = truth::compute(&gen);
    let mut producer = Producer::new(kinesis.clone(), &name);
    // ~2 KB aggregates: about a dozen user records per Kinesis record.
    let opts = SinkOptions { partition_key: PartitionKey::Random, rate: None, kpl_max_bytes: Some(2048) };
    assert_eq!(produce(&gen, &mut producer, &opts, |_| {}).await.expect("produce"), truth.records);
    let kinesis_records = producer.stats.records.load(std::sync::atomic::Ordering::Relaxed);
    assert!(kinesis_records * 5 < truth.records, "records were aggregated: {kinesis_records} Kinesis records");

    let dir = tempfile::tempdir().unwrap();
    let source = Arc::new(KinesisSource::new(kinesis, &name, StartingPosition::TrimHorizon));
    let done = CancellationToken::new();
    done.cancel(); // everything is in the stream already
    let dead_letters = dir.path().join("dead.jsonl");
    let summary = ingest(source, &tables, &name, &dead_letters, CancellationToken::new(), Some(done)).await;
    assert_eq!((summary.records, summary.valid, summary.rejected), (truth.records, truth.valid, truth.malformed));
    assert_matches_truth(&tables.aggregates, &truth).await;
}

/// A slow paced producer sends each record within its linger (100 ms, as
/// the KPL's default), not when a 51,200-byte aggregate or a 500-record
/// batch fills: 60 records at 40/s fill neither, yet the first are on the
/// stream while it still runs, and every one is on it at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paced_producer_puts_within_its_linger_not_when_a_batch_fills() {
    if !zigzag_aws::emulator::gate("a_paced_producer_puts_within_its_linger_not_when_a_batch_fills") {
        return;
    }
    let url = emulator::endpoint_in("ZIGZAG_KINESALITE_ENDPOINT").unwrap_or_else(|e| panic!("{e}"));
    let kinesis = zigzag_kinesis::client(&emulator::options_at(url)).await;
    let name = unique("linger");
    ensure_stream(&kinesis, &name, 1).await.expect("create stream");
    let gen = Generator::new(GenConfig { records: 60, shards: 1, malformed_fraction: 0.0, ..GenConfig::default() });
    let producing = {
        let (kinesis, name) = (kinesis.clone(), name.clone());
        tokio::spawn(async move {
            let mut producer = Producer::new(kinesis, &name);
            let opts =
                SinkOptions { partition_key: PartitionKey::Random, rate: Some(40.0), kpl_max_bytes: Some(51_200) };
            let sent = produce(&gen, &mut producer, &opts, |_| {}).await.expect("produce");
            (sent, producer.stats.calls.load(std::sync::atomic::Ordering::Relaxed))
        })
    };
    let user_records = || async {
        let shard = list_shards(&kinesis, &name, 100).await.expect("shards").remove(0);
        let iterator = kinesis
            .get_shard_iterator()
            .stream_name(&name)
            .shard_id(shard.shard_id())
            .shard_iterator_type(aws_sdk_kinesis::types::ShardIteratorType::TrimHorizon)
            .send()
            .await
            .expect("iterator");
        let got = kinesis.get_records().shard_iterator(iterator.shard_iterator().expect("an iterator")).send().await;
        let records = got.expect("get records").records().to_vec();
        let mut count = 0;
        for r in &records {
            count += zigzag_kinesis::kpl::deaggregate(r.partition_key().unwrap_or_default(), r.data().as_ref())
                .expect("a KPL aggregate")
                .len();
        }
        count
    };
    // The first records are on the stream while the producer still runs.
    let seen_while_producing = loop {
        let running = !producing.is_finished();
        if user_records().await > 0 {
            break running;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let (sent, calls) = producing.await.expect("the producer");
    assert_eq!(sent, 60);
    assert!(seen_while_producing, "no record reached the stream before the producer finished");
    assert!(calls >= 5, "{calls} PutRecords calls in 1.5 s: records were held for a batch to fill");
    assert_eq!(user_records().await, 60);
}

/// Fifty workers starting at once all join the lease table on DynamoDB
/// Local (conditional writes racing for lanes; issue 20).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_workers_starting_at_once_all_join_on_dynamodb_local() {
    if !zigzag_aws::emulator::gate("fifty_workers_starting_at_once_all_join_on_dynamodb_local") {
        return;
    }
    let tables = dynamodb_tables(&unique("joins")).await;
    zigzag_tests::joins::all_join_at_once(50, || Arc::new(tables.checkpoints.clone())).await;
}
