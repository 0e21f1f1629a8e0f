//! Enhanced fan-out (SubscribeToShard over HTTP/2) against kinesis-local's
//! TLS port, whose certificate only these clients trust, with the
//! in-memory store so only the source is under test:
//!
//! - every record once while subscriptions are renewed every 2 s (Kinesis
//!   ends them at 5 minutes): each renewal resumes after the last event
//!   delivered, and meets ResourceInUse (a subscribe within 5 s of the
//!   last), which is waited out; totals exact;
//! - a worker stopped dead mid-subscription (its runtime dropped, as a
//!   kill does): the next takes the shards over, waits out the dead
//!   subscription if the emulator still holds it (ResourceInUse), and the
//!   totals stay exact.
//!
//! - a dead worker's flush is recovered (a bounded re-read) by GetRecords
//!   while a subscription to the shard is live: the recovery neither
//!   subscribes nor waits on the subscription.
//!
//! kinesis-local sends no child shards at a shard's end; SHARD_END is
//! covered by hand-built events in `zigzag-kinesis` (fanout::progress).

use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use zigzag_aws::emulator;
use zigzag_core::table::{MemoryTable, SortedTable};
use zigzag_gather::check;
use zigzag_gather::execute::ExecOptions;
use zigzag_ingest::{Pipeline, PipelineOptions, RunSummary};
use zigzag_kinesis::stream::ensure_stream;
use zigzag_kinesis::{FanOutSource, KinesisSource, Producer, StartingPosition};
use zigzag_loadgen::{truth, GenConfig, Generator};
use zigzag_model::source::{Source, StartAt};
use zigzag_model::{Config, KeyModel, Truth};
use zigzag_tests::interleaved_records;
use zigzag_tests::unique_name as unique;

fn seeded(seed: u64, records: u64) -> Generator {
    Generator::new(GenConfig {
        seed,
        shards: 2,
        records,
        referrers: 100,
        span_ms: 3_600_000,
        malformed_fraction: 0.01,
        ..GenConfig::default()
    })
}

async fn client() -> aws_sdk_kinesis::Client {
    zigzag_kinesis::client(&emulator::kinesis_tls_options().unwrap_or_else(|e| panic!("{e}"))).await
}

fn fan_out(client: &aws_sdk_kinesis::Client, stream: &str, consumer: &str) -> Arc<FanOutSource> {
    let polling = KinesisSource::new(client.clone(), stream, StartingPosition::TrimHorizon);
    Arc::new(FanOutSource::new(polling, consumer).with_renew_after(Duration::from_secs(2)))
}

/// Puts `records` in `chunks` parts, `pause` apart.
async fn put_paced(
    client: aws_sdk_kinesis::Client,
    name: String,
    records: Vec<(String, Vec<u8>)>,
    chunks: usize,
    pause: Duration,
) {
    let mut producer = Producer::new(client, &name);
    let per = records.len().div_ceil(chunks.max(1));
    for chunk in records.chunks(per.max(1)) {
        for (k, d) in chunk {
            producer.send(k.clone(), d.clone()).await.expect("put");
        }
        producer.flush().await.expect("flush");
        tokio::time::sleep(pause).await;
    }
}

async fn assert_exact(table: &MemoryTable, summary: &RunSummary, truth: &Truth) {
    assert_eq!((summary.records, summary.valid, summary.rejected), (truth.records, truth.valid, truth.malformed));
    let km = KeyModel::new(&Config::default()).expect("key model");
    let report = check::check(
        table,
        &zigzag_model::Projections::from(km),
        truth,
        truth.last_ms.unwrap_or_default(),
        &ExecOptions::default(),
    )
    .await
    .expect("check");
    assert_eq!(report.mismatches(), 0, "{}", check::render(&report));
}

fn options(worker: &str, dir: &std::path::Path) -> PipelineOptions {
    PipelineOptions {
        failover: Duration::from_millis(1_500),
        batch_size: 500,
        ..PipelineOptions::new(Config::default(), "s", worker, dir.join(format!("dead-{worker}.jsonl")))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fan_out_reads_every_record_once_across_renewed_subscriptions_waiting_out_resource_in_use() {
    if !emulator::gate("fan_out_reads_every_record_once_across_renewed_subscriptions_waiting_out_resource_in_use") {
        return;
    }
    let client = client().await;
    let name = unique("fanout");
    ensure_stream(&client, &name, 2).await.expect("stream");
    let gen = seeded(5, 3_000);
    let truth = truth::compute(&gen);
    let table = Arc::new(MemoryTable::new());
    let dir = tempfile::tempdir().expect("tempdir");
    let source = fan_out(&client, &name, "zigzag-test");
    let pipeline = Arc::new(
        Pipeline::new(source.clone(), table.clone(), Arc::new(MemoryTable::new()), options("w", dir.path()))
            .expect("pipeline"),
    );
    // Records keep arriving for ~8 s while each subscription lives 2 s.
    let produced = CancellationToken::new();
    let producing = {
        let (client, name, produced) = (client.clone(), name.clone(), produced.clone());
        let records = interleaved_records(&gen);
        tokio::spawn(async move {
            put_paced(client, name, records, 8, Duration::from_secs(1)).await;
            produced.cancel();
        })
    };
    let summary =
        tokio::time::timeout(Duration::from_secs(120), pipeline.run_until_drained(CancellationToken::new(), produced))
            .await
            .expect("drained in time")
            .expect("ingest");
    producing.await.expect("producer");
    assert!(
        source.subscriptions() >= 6,
        "subscriptions were renewed while records arrived: {}",
        source.subscriptions()
    );
    assert_exact(&table, &summary, &truth).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stopped_dead_mid_subscription_is_taken_over_exactly() {
    if !emulator::gate("a_worker_stopped_dead_mid_subscription_is_taken_over_exactly") {
        return;
    }
    let client = client().await;
    let name = unique("fanout-takeover");
    ensure_stream(&client, &name, 2).await.expect("stream");
    let gen = seeded(7, 4_000);
    let truth = truth::compute(&gen);
    let records = interleaved_records(&gen);
    let (early, late) = records.split_at(records.len() / 2);
    let table = Arc::new(MemoryTable::new());
    let leases: Arc<dyn SortedTable> = Arc::new(MemoryTable::new());
    let dir = tempfile::tempdir().expect("tempdir");
    put_paced(client.clone(), name.clone(), early.to_vec(), 1, Duration::ZERO).await;

    // The first worker on a runtime of its own: dropping it ends all of its
    // tasks and connections at once, as a kill does, mid-subscription.
    let first = Arc::new(
        Pipeline::new(
            fan_out(&client, &name, "zigzag-test"),
            table.clone(),
            leases.clone(),
            options("first", dir.path()),
        )
        .expect("pipeline"),
    );
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
    rt.spawn(first.run(CancellationToken::new()));
    let observer = zigzag_lease::Coordinator::new(leases.clone(), zigzag_lease::LeaseOptions::new("s", "observer"));
    let began = Instant::now();
    loop {
        let l = observer.read_leases().await.expect("leases");
        if l.len() == 2 && l.iter().all(|l| l.checkpoint.earliest().is_some()) {
            break;
        }
        assert!(began.elapsed() < Duration::from_secs(60), "the first worker checkpoints both shards: {l:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    rt.shutdown_background();
    put_paced(client.clone(), name.clone(), late.to_vec(), 1, Duration::ZERO).await;

    let source = fan_out(&client, &name, "zigzag-test");
    let second = Arc::new(
        Pipeline::new(source.clone(), table.clone(), leases.clone(), options("second", dir.path())).expect("pipeline"),
    );
    let produced = CancellationToken::new();
    let taken = {
        let (produced, leases) = (produced.clone(), leases.clone());
        tokio::spawn(async move {
            let observer = zigzag_lease::Coordinator::new(leases, zigzag_lease::LeaseOptions::new("s", "observer"));
            while observer
                .read_leases()
                .await
                .expect("leases")
                .iter()
                .filter(|l| l.worker_id() == Some("second"))
                .count()
                < 2
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            produced.cancel();
        })
    };
    let summary =
        tokio::time::timeout(Duration::from_secs(120), second.run_until_drained(CancellationToken::new(), produced))
            .await
            .expect("drained in time")
            .expect("the second worker runs");
    taken.await.expect("observer");
    // Whatever the first worker had checkpointed is not read again; the
    // store holds every record once.
    assert!(summary.records < truth.records, "the second worker resumed after the first's checkpoints: {summary:?}");
    let all = RunSummary { records: truth.records, valid: truth.valid, rejected: truth.malformed, ..summary };
    assert_exact(&table, &all, &truth).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovery_rereads_by_get_records_while_a_subscription_holds_the_shard() {
    if !emulator::gate("a_recovery_rereads_by_get_records_while_a_subscription_holds_the_shard") {
        return;
    }
    let client = client().await;
    let name = unique("fanout-reread");
    ensure_stream(&client, &name, 1).await.expect("stream");
    let records: Vec<(String, Vec<u8>)> =
        (0..300).map(|i| (format!("k{i}"), format!("{{\"n\":{i}}}").into_bytes())).collect();
    put_paced(client.clone(), name.clone(), records.clone(), 1, Duration::ZERO).await;
    let live = fan_out(&client, &name, "zigzag-test");
    let shard = live.shards().await.expect("shards").remove(0).id;

    // A live subscription holds the shard (the dead worker's, as the
    // emulator may keep it): it has delivered records.
    let mut subscribed = live.open(&shard, StartAt::TrimHorizon).await.expect("open");
    let began = Instant::now();
    while subscribed.next_batch(500).await.expect("subscribed batch").records.is_empty() {
        assert!(began.elapsed() < Duration::from_secs(60), "the subscription delivers");
    }
    assert_eq!(live.subscriptions(), 1);

    let recovering = fan_out(&client, &name, "zigzag-test");
    let mut reread = recovering.open_reread(&shard, StartAt::TrimHorizon).await.expect("open_reread");
    let mut read = Vec::new();
    let began = Instant::now();
    while read.len() < records.len() {
        let b = reread.next_batch(100).await.expect("re-read batch");
        read.extend(b.iter().map(|(_, d)| d.to_vec()));
        assert!(began.elapsed() < Duration::from_secs(60), "the re-read reaches the end: {} read", read.len());
    }
    assert_eq!(read, records.iter().map(|(_, d)| d.clone()).collect::<Vec<_>>(), "every record once, in order");
    assert_eq!(
        (recovering.subscriptions(), recovering.waited_in_use()),
        (0, 0),
        "the re-read neither subscribed nor met ResourceInUse"
    );
    drop(subscribed);
}
