//! The shipped example schemas end to end through the `loadgen` binary:
//! records drawn for the schema by its field traffic file, ingested in
//! process into SQLite, then `check` against the ground truth loadgen wrote
//! must match every measure (distinct counts register for register) in
//! every rollup, per day and per value of every dimension; every malformed
//! record must be dead-lettered. The files sink writes the same records.

use std::path::{Path, PathBuf};
use std::process::Command;
use zigzag_gather::check::{check, render};
use zigzag_gather::execute::ExecOptions;
use zigzag_ingest::decode::{DecodeLimits, Decoder};
use zigzag_model::{Config, MeasureValue, Truth};
use zigzag_sqlite::SqliteTable;

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/schemas").join(name)
}

fn loadgen(dir: &Path, schema: &str, sink: &str) -> Truth {
    let out = Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .args(["--records", "20000", "--shards", "3", "--seed", "11", "--malformed", "0.01", "--sink", sink])
        .arg("--config")
        .arg(example(&format!("{schema}.toml")))
        .arg("--fields")
        .arg(example(&format!("{schema}.traffic.toml")))
        .arg("--db")
        .arg(dir.join("z.db"))
        .arg("--truth")
        .arg(dir.join("truth.json"))
        .arg("--dead-letters")
        .arg(dir.join("dead.jsonl"))
        .env("RUST_LOG", "warn")
        .output()
        .expect("run loadgen");
    assert!(out.status.success(), "{schema}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(&std::fs::read_to_string(dir.join("truth.json")).unwrap()).unwrap()
}

fn config(schema: &str) -> Config {
    Config::from_toml(&std::fs::read_to_string(example(&format!("{schema}.toml"))).unwrap()).unwrap()
}

fn count(truth: &Truth, measure: &str) -> u64 {
    match truth.totals.get(measure) {
        Some(MeasureValue::Count(n)) => *n,
        other => panic!("{measure}: {other:?}"),
    }
}

fn ingested_and_checked(schema: &str) -> Truth {
    let dir = tempfile::tempdir().unwrap();
    let truth = loadgen(dir.path(), schema, "ingest");
    assert_eq!(truth.records, 20_000);
    assert!((100..300).contains(&truth.malformed), "{schema}: {} malformed at 1 %", truth.malformed);
    let dead = std::fs::read_to_string(dir.path().join("dead.jsonl")).unwrap();
    assert_eq!(dead.lines().count() as u64, truth.malformed, "{schema}: every malformed record dead-lettered");

    let km = zigzag_model::Projections::new(&config(schema)).unwrap();
    let table = SqliteTable::open(dir.path().join("z.db")).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let report = rt.block_on(check(&table, &km, &truth, 0, &ExecOptions::default())).unwrap();
    assert_eq!(report.mismatches(), 0, "{schema}:\n{}", render(&report));
    for d in km.all_dims().dims() {
        assert!(truth.by.get(&d.name).is_some_and(|groups| groups.len() > 1), "{schema}: groups of {}", d.name);
    }
    truth
}

#[test]
fn the_ad_server_example_runs_end_to_end_against_its_truth() {
    let truth = ingested_and_checked("ad_server");
    // The traffic file's weights (90/8/2) reached the records.
    let (views, clicks, conversions) = (count(&truth, "views"), count(&truth, "clicks"), count(&truth, "conversions"));
    assert_eq!(views + clicks + conversions, truth.valid);
    assert!(views > 8 * clicks && clicks > 2 * conversions && conversions > 0, "{views} {clicks} {conversions}");
    // Eight listed countries and the default for absent ones.
    assert_eq!(truth.by["country"].len(), 9, "{:?}", truth.by["country"].keys());
    assert!(truth.by["country"].contains_key("ZZ"));
    // The price quantiles were checked against the exact prices of every
    // group (the check passed above), not only sketch for sketch.
    let prices = &truth.raw["price_micros"];
    assert!(prices["total/all"].as_ref().is_some_and(|v| v.len() > 1_000), "prices kept");
    assert!(prices.len() > 200, "the priced groups of every day, campaign, country and os: {}", prices.len());
}

#[test]
fn the_access_log_example_runs_end_to_end_against_its_truth() {
    let truth = ingested_and_checked("access_log");
    let (requests, errors) = (count(&truth, "requests"), count(&truth, "errors"));
    // 5xx weights sum to 4 of 100.
    let share = errors as f64 / requests as f64;
    assert!((0.03..0.05).contains(&share), "{errors} errors of {requests}");
    assert_eq!(truth.by["status"].len(), 13, "the listed statuses");
}

#[test]
fn the_files_sink_writes_csv_lines_that_decode_as_the_truth_says() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("logs");
    let truth = loadgen(dir.path(), "access_log", &format!("files:{}", out.display()));
    let decoder = Decoder::new(&config("access_log"), DecodeLimits::default()).unwrap();
    let (mut lines, mut refused) = (0u64, 0u64);
    for shard in 0..3 {
        let text = std::fs::read(out.join(format!("shard-{shard:03}.csv"))).unwrap();
        for line in text.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            lines += 1;
            refused += u64::from(decoder.decode(line).is_err());
        }
    }
    assert_eq!(lines, truth.records);
    assert_eq!(refused, truth.malformed);
}
