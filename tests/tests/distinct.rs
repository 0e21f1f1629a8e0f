//! Distinct counts end to end: loadgen → two workers (one table, two lanes,
//! so sketch items are written concurrently) → SQLite → gather check. The
//! sketches in the store equal the ground truth's register for register in
//! every rollup, day and dimension group, and the total's estimate is
//! within three standard errors of the exact count.

mod two_workers;

use std::collections::HashSet;
use zigzag_gather::check;
use zigzag_gather::execute::ExecOptions;
use zigzag_loadgen::{truth, GenConfig, Generated, Generator};
use zigzag_model::hll::relative_error_bound;
use zigzag_model::{Config, KeyModel};
use zigzag_sqlite::SqliteTable;

fn config() -> Config {
    let text = r#"
[[measure]]
name = "clicks"
type = "count"
where = "type = click"
[[measure]]
name = "impressions"
type = "count"
where = "type = impression"
[[measure]]
name = "users"
type = "distinct"
field = "user_id"
[[measure]]
name = "clicking_users"
type = "distinct"
field = "user_id"
where = "type = click"
precision = 10
[flush]
interval_ms = 150
"#;
    Config::from_toml(text).expect("config")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distinct_users_match_the_truth_register_for_register_across_two_workers() {
    let _ = tracing_subscriber::fmt().with_env_filter("info").with_test_writer().try_init();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("z.db");
    let gen = Generator::new(GenConfig {
        seed: 11,
        shards: 4,
        records: 20_000,
        referrers: 200,
        span_ms: 3 * 3_600_000,
        malformed_fraction: 0.002,
        ..GenConfig::default()
    });
    let truth = truth::compute_for(&gen, &config()).unwrap();
    let summaries = two_workers::ingest(&config(), &gen, &db).await;
    let read: u64 = summaries.iter().map(|s| s.records).sum();
    assert_eq!(read, truth.records, "each record read once: {summaries:#?}");

    let table = SqliteTable::open(&db).unwrap();
    let km = KeyModel::new(&config()).unwrap();
    let report = check::check(&table, &zigzag_model::Projections::from(km.clone()), &truth, 0, &ExecOptions::default())
        .await
        .unwrap();
    assert_eq!(report.mismatches(), 0, "store != truth:\n{}", check::render(&report));
    assert!(report.rows.len() > 100, "days and every referrer, campaign and country, in 3 rollups");

    // The estimate against the exact count of distinct users.
    let mut buf = Vec::new();
    let mut users = HashSet::new();
    for shard in 0..4 {
        for seq in 1..=gen.shard_len(shard) {
            if let Generated::Valid(ev) = gen.record(shard, seq, &mut buf) {
                users.insert(ev.user);
            }
        }
    }
    let estimate = truth.totals["users"].units().expect("a distinct count's estimate") as f64;
    let exact = users.len() as f64;
    let error = (estimate - exact).abs() / exact;
    assert!(error <= 3.0 * relative_error_bound(14), "{estimate} vs {exact} distinct users: {:.2} %", error * 100.0);
}
