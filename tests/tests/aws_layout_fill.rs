//! The layout fill on DynamoDB Local through the fault proxy
//! (`zigzag_tests::fault_proxy`): a tenth of its queries, item batches and
//! updates answered with throttling or a 5xx, or applied and then left to
//! time out. Every such call is sent again (`throttle::Retried`: all the
//! fill's writes are idempotent), and every target item then equals,
//! attribute for attribute, what ingest writes into a table that had the
//! new layout from the start.

mod layout_support;

use layout_support::*;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use zigzag_aws::emulator;
use zigzag_core::table::SortedTable;
use zigzag_dynamodb::{ensure_table, Billing, DynamoTable};
use zigzag_gather::relayout::apply::{cut, version_changes};
use zigzag_ingest::{Pipeline, PipelineOptions};
use zigzag_loadgen::SyntheticSource;
use zigzag_model::versions;
use zigzag_sqlite::SqliteTable;
use zigzag_tests::fault_proxy::{dynamodb, Fault, FaultProxy, Rule};
use zigzag_tests::unique_name as unique;

fn socket(url: &str) -> SocketAddr {
    url.trim_start_matches("http://").trim_end_matches('/').parse().expect("emulator URL is http://127.0.0.1:PORT")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_through_throttles_5xx_and_timeouts_on_dynamodb_local_equals_ingest_with_the_new_layout() {
    if !emulator::gate("a_fill_through_throttles_5xx_and_timeouts_on_dynamodb_local_equals_ingest_with_the_new_layout")
    {
        return;
    }
    let dynamo_url = emulator::endpoint("DYNAMODB").unwrap_or_else(|e| panic!("{e}"));
    let name = unique("fill");
    let direct = zigzag_dynamodb::client(&emulator::options_at(dynamo_url.clone())).await;
    let leases_name = format!("{name}-checkpoints");
    for t in [name.as_str(), leases_name.as_str()] {
        ensure_table(&direct, t, Billing::OnDemand, true).await.expect("create table");
    }
    let table = DynamoTable::new(direct.clone(), &name);
    let dir = tempfile::tempdir().unwrap();

    // Version 1 ingested straight into DynamoDB Local; version 2 recorded.
    let gen = generator(7, T0 + 20 * HOUR, 8 * HOUR, 0.05);
    let opts =
        PipelineOptions { batch_size: 500, ..PipelineOptions::new(v1(), "s", "w1", dir.path().join("dead.jsonl")) };
    let aggregates: Arc<dyn SortedTable> = Arc::new(table.clone());
    let leases: Arc<dyn SortedTable> = Arc::new(DynamoTable::new(direct.clone(), &leases_name));
    let source = Arc::new(SyntheticSource::new(gen.clone(), None));
    let p = Arc::new(Pipeline::new(source, aggregates, leases, opts).unwrap());
    tokio::time::timeout(Duration::from_secs(300), p.run(CancellationToken::new()))
        .await
        .expect("in time")
        .expect("ingest version 1");
    let Diffed { priced, old: old_ps, new: new_ps, layout } = diffed(&table, &v1(), &v2()).await;
    let changes = version_changes(&priced, &old_ps, &new_ps).expect("applicable");
    let written_to = zigzag_gather::written_to(&table, &old_ps).await.unwrap();
    let version =
        versions::record(&table, 1, &layout, cut(&changes, &new_ps, T0, written_to), changes, T0, true).await.unwrap();

    // The fill through the proxy.
    let faults = || {
        vec![
            dynamodb::throttling(),
            dynamodb::provisioned_throughput_exceeded(),
            dynamodb::internal_server_error(),
            Fault::ApplyThenTimeout { hold: Duration::from_millis(700) },
        ]
    };
    let rules = [dynamodb::BATCH_WRITE_ITEM, dynamodb::UPDATE_ITEM, dynamodb::QUERY]
        .into_iter()
        .map(|target| Rule::new(target, 0.1, faults()))
        .collect();
    let proxy = FaultProxy::start(socket(&dynamo_url), rules, 13).await.expect("DynamoDB proxy");
    let mut faulty_opts = emulator::options_at(proxy.url());
    faulty_opts.attempt_timeout = Duration::from_millis(400);
    let faulty = DynamoTable::new(zigzag_dynamodb::client(&faulty_opts).await, &name);
    let totals = run_fill(&faulty, &version).await.expect("the fill retries what the proxy refuses");
    assert!(totals.derived >= 2 && totals.pending == 0, "{totals:?}");
    let injected: u64 = [dynamodb::BATCH_WRITE_ITEM, dynamodb::UPDATE_ITEM, dynamodb::QUERY]
        .iter()
        .map(|t| proxy.stats().target(t).injected_total())
        .sum();
    assert!(injected > 0 && totals.retries > 0, "faults injected ({injected}) and retried: {totals:?}");

    // The reference: version 2 from the start, into SQLite.
    let reference_db = dir.path().join("reference.db");
    ingest(&v2(), &gen, &reference_db, "s").await;
    let reference = SqliteTable::open(&reference_db).unwrap();
    assert_same_items(&table, &reference, &TARGETS).await;
    let again = run_fill(&table, &version).await.unwrap();
    assert_eq!(again.derived, 0, "every day current: {again:?}");
}
