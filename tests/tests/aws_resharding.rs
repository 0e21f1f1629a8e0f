//! Live resharding: the stream is resharded while workers read it and a
//! producer writes it, and no worker is restarted.
//!
//! - kinesalite, two workers: one shard is split and two adjacent shards
//!   are merged mid-stream;
//! - kinesis-local, one worker: UpdateShardCount closes every shard at once
//!   (the worker must wait for the children instead of exiting).
//!
//! Each worker's source is wrapped in `ParentOrder`, which records any
//! child opened before the lease table shows every parent read to
//! SHARD_END and checkpointed; there must be none. Totals are exact in
//! every rollup; every closed parent's lease is finished.

use aws_sdk_kinesis::types::ScalingType;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use zigzag_aws::emulator;
use zigzag_core::table::SortedTable;
use zigzag_dynamodb::{ensure_table, Billing, DynamoTable};
use zigzag_gather::check;
use zigzag_gather::execute::ExecOptions;
use zigzag_ingest::{Pipeline, PipelineOptions, RunSummary};
use zigzag_kinesis::stream::{ensure_stream, list_shards};
use zigzag_kinesis::{KinesisSource, Producer, StartingPosition};
use zigzag_lease::items::shards_pk;
use zigzag_lease::ShardLease;
use zigzag_loadgen::{truth, GenConfig, Generator};
use zigzag_model::{Config, KeyModel, Truth};
use zigzag_tests::interleaved_records;
use zigzag_tests::order::ParentOrder;
use zigzag_tests::unique_name as unique;

fn config() -> Config {
    let mut c = Config::default();
    c.flush.interval_ms = 300;
    c
}

fn generator(seed: u64, records: u64) -> Generator {
    Generator::new(GenConfig {
        seed,
        shards: 3,
        records,
        referrers: 150,
        span_ms: 2 * 3_600_000,
        malformed_fraction: 0.01,
        ..GenConfig::default()
    })
}

async fn tables(name: &str) -> (DynamoTable, DynamoTable) {
    let client = zigzag_dynamodb::client(&emulator::options("DYNAMODB").unwrap_or_else(|e| panic!("{e}"))).await;
    let leases = format!("{name}-checkpoints");
    for t in [name, leases.as_str()] {
        ensure_table(&client, t, Billing::OnDemand, true).await.expect("create table");
    }
    (DynamoTable::new(client.clone(), name), DynamoTable::new(client, leases))
}

struct Worker {
    order: Arc<ParentOrder>,
    run: tokio::task::JoinHandle<RunSummary>,
}

fn start_worker(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
    (aggregates, leases): &(DynamoTable, DynamoTable),
    worker: &str,
    produced: CancellationToken,
) -> Worker {
    let source = Arc::new(KinesisSource::new(kinesis.clone(), stream, StartingPosition::TrimHorizon));
    let lease_table: Arc<dyn SortedTable> = Arc::new(leases.clone());
    let order = ParentOrder::new(source, lease_table.clone(), stream);
    let dir = std::env::temp_dir();
    let opts = PipelineOptions {
        failover: Duration::from_secs(3),
        relist: Duration::from_secs(1),
        ..PipelineOptions::new(config(), stream, worker, dir.join(format!("{}-dead.jsonl", unique(worker))))
    };
    let pipeline =
        Arc::new(Pipeline::new(order.clone(), Arc::new(aggregates.clone()), lease_table, opts).expect("pipeline"));
    let run = tokio::spawn(async move {
        pipeline.run_until_drained(CancellationToken::new(), produced).await.expect("worker run")
    });
    Worker { order, run }
}

async fn assert_exact(aggregates: &DynamoTable, truth: &Truth) {
    let km = KeyModel::new(&config()).unwrap();
    let exec = ExecOptions { consistent: true, ..ExecOptions::default() };
    let report = check::check(
        aggregates,
        &zigzag_model::Projections::from(km.clone()),
        truth,
        truth.last_ms.unwrap_or_default(),
        &exec,
    )
    .await
    .expect("check");
    assert_eq!(report.mismatches(), 0, "DynamoDB != truth:\n{}", check::render(&report));
}

async fn finish(workers: Vec<Worker>, secs: u64) -> (Vec<RunSummary>, Vec<String>, Vec<String>) {
    let mut summaries = Vec::new();
    let (mut opened, mut violations) = (Vec::new(), Vec::new());
    for w in workers {
        let s = tokio::time::timeout(Duration::from_secs(secs), w.run).await.expect("workers drain").expect("task");
        summaries.push(s);
        opened.extend(w.order.opened.lock().unwrap().iter().cloned());
        violations.extend(w.order.violations.lock().unwrap().iter().cloned());
    }
    (summaries, opened, violations)
}

/// The stream's leases (finished ones may have been retired).
async fn finished_leases(leases: &DynamoTable, stream: &str) -> Vec<ShardLease> {
    let mut req = zigzag_core::table::QueryRequest::new(shards_pk(stream), zigzag_core::table::SortKeyCondition::Any);
    req.consistent = true;
    leases.query(&req).await.expect("leases").items.iter().map(|i| ShardLease::from_item(i).unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn split_and_merge_while_two_workers_read_and_a_producer_writes() {
    if !zigzag_aws::emulator::gate("split_and_merge_while_two_workers_read_and_a_producer_writes") {
        return;
    }
    let url = emulator::endpoint_in("ZIGZAG_KINESALITE_ENDPOINT").unwrap_or_else(|e| panic!("{e}"));
    let kinesis = zigzag_kinesis::client(&emulator::options_at(url)).await;
    let name = unique("reshard");
    ensure_stream(&kinesis, &name, 4).await.expect("stream");
    let t = tables(&name).await;
    let gen = generator(11, 6_000);
    let truth = truth::compute(&gen);
    let produced = CancellationToken::new();
    let workers = vec![
        start_worker(&kinesis, &name, &t, "w1", produced.clone()),
        start_worker(&kinesis, &name, &t, "w2", produced.clone()),
    ];
    let all = interleaved_records(&gen);
    let mut producer = Producer::new(kinesis.clone(), &name);
    let third = all.len() / 3;
    for (i, (k, d)) in all.iter().enumerate() {
        producer.send(k.clone(), d.clone()).await.expect("put");
        if i % 200 == 199 {
            producer.flush().await.expect("flush");
            tokio::time::sleep(Duration::from_millis(100)).await; // a steady ~2,000 records/s
        }
        if i == third {
            producer.flush().await.expect("flush");
            kinesis
                .split_shard()
                .stream_name(&name)
                .shard_to_split("shardId-000000000000")
                .new_starting_hash_key("42535295865117307932921825928971026432") // 2^125: half of shard 0
                .send()
                .await
                .expect("split");
            ensure_stream(&kinesis, &name, 4).await.expect("ACTIVE after the split");
        }
        if i == 2 * third {
            producer.flush().await.expect("flush");
            kinesis
                .merge_shards()
                .stream_name(&name)
                .shard_to_merge("shardId-000000000002")
                .adjacent_shard_to_merge("shardId-000000000003")
                .send()
                .await
                .expect("merge");
            ensure_stream(&kinesis, &name, 4).await.expect("ACTIVE after the merge");
        }
    }
    producer.flush().await.expect("flush");
    produced.cancel();
    let shards = list_shards(&kinesis, &name, 100).await.expect("shards");
    assert_eq!(shards.len(), 7, "4 + 2 children of the split + 1 of the merge");

    let (summaries, opened, violations) = finish(workers, 120).await;
    assert!(violations.is_empty(), "children read before their parents' SHARD_END checkpoint: {violations:?}");
    let children: Vec<String> =
        shards.iter().filter(|s| s.parent_shard_id().is_some()).map(|s| s.shard_id().to_string()).collect();
    assert_eq!(children.len(), 3);
    for c in &children {
        assert!(opened.contains(c), "child {c} was read: {opened:?}");
    }
    let read: u64 = summaries.iter().map(|s| s.records).sum();
    assert_eq!(read, truth.records, "every record read once across the workers: {summaries:?}");
    let leases = finished_leases(&t.1, &name).await;
    for parent in ["shardId-000000000000", "shardId-000000000002", "shardId-000000000003"] {
        // Finished, or retired (deleted) once its children started.
        if let Some(l) = leases.iter().find(|l| l.shard == parent) {
            assert!(l.finished, "{parent} was read to SHARD_END and checkpointed: {l:?}");
        }
    }
    for c in &children {
        let l = leases.iter().find(|l| &l.shard == c).expect("a lease per child");
        assert!(!l.parents.is_empty(), "the child's lease names its parents: {l:?}");
        let started = l.finished || l.checkpoint.earliest().is_some();
        let parents_kept = l.parents.iter().all(|p| leases.iter().any(|k| &k.shard == p));
        assert!(started || parents_kept, "a parent was retired before its child {c} started: {leases:?}");
    }
    assert_exact(&t.0, &truth).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn update_shard_count_closes_every_shard_and_the_worker_waits_for_the_children() {
    if !zigzag_aws::emulator::gate("update_shard_count_closes_every_shard_and_the_worker_waits_for_the_children") {
        return;
    }
    let kinesis = zigzag_kinesis::client(&emulator::options("KINESIS").unwrap_or_else(|e| panic!("{e}"))).await;
    let name = unique("rescale");
    ensure_stream(&kinesis, &name, 2).await.expect("stream");
    let t = tables(&name).await;
    let gen = generator(12, 900);
    let truth = truth::compute(&gen);
    let produced = CancellationToken::new();
    let workers = vec![start_worker(&kinesis, &name, &t, "w1", produced.clone())];
    let all = interleaved_records(&gen);
    let (before, after) = all.split_at(all.len() / 2);
    let mut producer = Producer::new(kinesis.clone(), &name);
    for (k, d) in before {
        producer.send(k.clone(), d.clone()).await.expect("put");
    }
    producer.flush().await.expect("flush");
    // Let the worker read the parents to their tip before they close.
    tokio::time::sleep(Duration::from_secs(2)).await;
    kinesis
        .update_shard_count()
        .stream_name(&name)
        .target_shard_count(4)
        .scaling_type(ScalingType::UniformScaling)
        .send()
        .await
        .expect("update shard count");
    ensure_stream(&kinesis, &name, 2).await.expect("ACTIVE after rescaling");
    // Every original shard is closed now: a worker that exits here loses the rest.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!workers[0].run.is_finished(), "the worker waits for the children");
    for (k, d) in after {
        producer.send(k.clone(), d.clone()).await.expect("put");
    }
    producer.flush().await.expect("flush");
    produced.cancel();
    let shards = list_shards(&kinesis, &name, 100).await.expect("shards");
    let open = shards.iter().filter(|s| s.sequence_number_range().and_then(|r| r.ending_sequence_number()).is_none());
    assert_eq!(open.count(), 4);

    let (summaries, _, violations) = finish(workers, 180).await;
    assert!(violations.is_empty(), "children read before their parents' SHARD_END checkpoint: {violations:?}");
    assert_eq!(summaries[0].records, truth.records, "each record once: {summaries:?}");
    let leases = finished_leases(&t.1, &name).await;
    for parent in ["shardId-000000000000", "shardId-000000000001"] {
        // Finished, or retired (deleted) once its children started.
        if let Some(l) = leases.iter().find(|l| l.shard == parent) {
            assert!(l.finished, "{parent}: {l:?}");
        }
    }
    assert!(leases.len() <= 4 + 2, "the open shards' leases and at most the finished parents: {leases:?}");
    assert_exact(&t.0, &truth).await;
}
