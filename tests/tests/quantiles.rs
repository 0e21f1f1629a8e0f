//! Quantile measures end to end: loadgen → two workers (one table, two
//! lanes, so sketch items are merged concurrently under version guards and
//! lane marks) → SQLite →
//! - `gather check`: every sketch equals the ground truth's byte for byte,
//!   in every rollup, day and dimension group, and every checked quantile is
//!   within the declared accuracy of the exact one;
//! - a report with `--quantiles`: a group's p50/p99 columns are its merged
//!   sketch's, within the accuracy of the exact values;
//! - `gather serve`: `histogram_quantile(q, sum by (...) (...))` answers
//!   the same merged sketches as the report, to the bit; `quantile_over_time`
//!   answers per series; a count has no quantiles.

mod two_workers;

use std::sync::Arc;
use zigzag_gather::check;
use zigzag_gather::execute::ExecOptions;
use zigzag_gather::filter::FilterSet;
use zigzag_gather::plan::PlanRequest;
use zigzag_gather::report::{self, Cell};
use zigzag_gather::window::WindowSpec;
use zigzag_loadgen::{truth, GenConfig, Generator};
use zigzag_model::measure::ShowOptions;
use zigzag_model::{Config, KeyModel};
use zigzag_serve::series::Value;
use zigzag_serve::{Catalog, Engine, Limits};
use zigzag_sqlite::SqliteTable;

const DAY: i64 = 86_400_000;

fn config() -> Config {
    let text = r#"
[[measure]]
name = "clicks"
type = "count"
where = "type = click"
[[measure]]
name = "cost"
type = "sum"
field = "cost"
[[measure]]
name = "cost_q"
type = "quantile"
field = "cost"
[[measure]]
name = "cost_q2"
type = "quantile"
field = "cost"
accuracy = 0.02
bins = 64
[flush]
interval_ms = 150
"#;
    Config::from_toml(text).expect("config")
}

/// The value at rank floor(q (n - 1)) of the sorted exact values.
fn exact(values: &[i64], q: f64) -> f64 {
    let mut v = values.to_vec();
    v.sort_unstable();
    v[(q * (v.len() - 1) as f64).floor() as usize] as f64
}

fn within(got: f64, want: f64, accuracy: f64) -> bool {
    (got - want).abs() <= accuracy * want.abs() * (1.0 + 1e-9)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quantiles_are_exact_sketches_and_within_accuracy_in_check_reports_and_the_server() {
    let _ = tracing_subscriber::fmt().with_env_filter("info").with_test_writer().try_init();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("z.db");
    let gen = Generator::new(GenConfig {
        seed: 5,
        shards: 4,
        records: 20_000,
        referrers: 200,
        span_ms: 3 * 3_600_000,
        malformed_fraction: 0.002,
        ..GenConfig::default()
    });
    let truth = truth::compute_for(&gen, &config()).unwrap();
    let read: u64 = two_workers::ingest(&config(), &gen, &db).await.iter().map(|s| s.records).sum();
    assert_eq!(read, truth.records, "each record read once");

    let table = Arc::new(SqliteTable::open(&db).unwrap());
    let km = KeyModel::new(&config()).unwrap();
    let report = check::check(table.as_ref(), &zigzag_model::Projections::from(km), &truth, 0, &ExecOptions::default())
        .await
        .unwrap();
    assert_eq!(report.mismatches(), 0, "store != truth:\n{}", check::render(&report));
    let raw = &truth.raw["cost_q"];
    let checked = raw.values().filter(|v| v.is_some()).count();
    assert!(checked > 100, "groups held to the accuracy against their exact values: {checked}");

    // A report by country with p50 and p99, against each country's values.
    let (first, last) = (truth.first_ms.unwrap(), truth.last_ms.unwrap());
    let (start, end) = (first.div_euclid(DAY) * DAY, last.div_euclid(DAY) * DAY + DAY);
    let req = PlanRequest {
        window: WindowSpec::Absolute { from: start.to_string(), to: end.to_string() },
        rollup: None,
        step: None,
        timeseries: false,
        filters: FilterSet::default(),
        now: end,
        source: Default::default(),
        mixing: None,
        snap: None,
        filling: Default::default(),
    };
    let mut g = zigzag_gather::gather(table.as_ref(), &config(), req, vec!["country".into()], &ExecOptions::default())
        .await
        .unwrap();
    g.aggregation.show = ShowOptions { quantiles: vec![0.5, 0.99] };
    let totals = report::totals(&g.aggregation);
    for column in ["cost_q_p50", "cost_q_p99", "cost_q2_p50", "cost_q2_p99"] {
        assert!(totals.column(column).is_some(), "{column} in {:?}", totals.columns);
    }
    assert_eq!(totals.rows.len(), truth.by["country"].len());
    for row in &totals.rows {
        let Cell::Text(country) = &row[0] else { panic!("a country first") };
        let values = raw[&format!("country/{country}")].as_ref().expect("kept");
        for (column, q, a) in [("cost_q_p50", 0.5, 0.01), ("cost_q_p99", 0.99, 0.01), ("cost_q2_p99", 0.99, 0.02)] {
            let got = row[totals.column(column).unwrap()].number().expect("a value") * 1e6;
            assert!(within(got, exact(values, q), a), "{country} {column}: {got} vs {}", exact(values, q));
        }
    }

    // The server: the day's sketch per country, merged in the read.
    let engine = Engine::new(table, Catalog::new(config()).unwrap(), ExecOptions::default(), Limits::default());
    let ask = |q: String| {
        let engine = &engine;
        async move {
            match engine.query(&q, vec![end], end + DAY).await.unwrap_or_else(|e| panic!("{q}: {e}")).value {
                Value::Vector(v) => v,
                other => panic!("{q}: {other:?}"),
            }
        }
    };
    let by_country = ask("histogram_quantile(0.99, sum by (country) (sum_over_time(cost_q[1d])))".into()).await;
    assert_eq!(by_country.series.len(), truth.by["country"].len());
    for (labels, values) in &by_country.series {
        let country = labels.get("country").expect("grouped by country");
        let exact_values = raw[&format!("country/{country}")].as_ref().unwrap();
        let got = values[0].expect("a value") * 1e6;
        assert!(within(got, exact(exact_values, 0.99), 0.01), "{country}: {got}");
        // The report merged the same sketches: the same number, exactly.
        let row = totals.rows.iter().find(|r| r[0] == Cell::Text(country.clone())).unwrap();
        assert_eq!(row[totals.column("cost_q_p99").unwrap()].number(), values[0], "{country}");
    }
    // The median of everything: every sketch of the day merged.
    let whole = ask("histogram_quantile(0.5, sum(sum_over_time(cost_q[1d])))".into()).await;
    let total_values = raw["total/all"].as_ref().expect("kept");
    let got = whole.series.values().next().unwrap()[0].unwrap() * 1e6;
    assert!(within(got, exact(total_values, 0.5), 0.01), "{got} vs {}", exact(total_values, 0.5));
    let refused = engine.query("histogram_quantile(0.5, sum(sum_over_time(clicks[1d])))", vec![end], end).await;
    assert!(refused.unwrap_err().to_string().contains("clicks is not a quantile measure"));
    let per_series = ask("quantile_over_time(0.5, cost_q[1d])".into()).await;
    assert!(per_series.series.len() > truth.by["country"].len(), "one series per key read");
}
