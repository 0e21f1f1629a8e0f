//! Retention end to end on the embedded store: items of a rollup with a
//! retention carry `expires`; `ingest` purges the ones past it; a report
//! whose window reaches past a rollup's retention is answered from a
//! coarser rollup or refused naming the retention, never answered short;
//! `gather check` says which rollups it could not check.

use std::path::Path;
use std::process::{Command, Output};
use zigzag_core::table::{AttrValue, QueryRequest, SortKeyCondition, SortedTable, TTL_ATTR};
use zigzag_model::{Config, KeyModel, Rollup};
use zigzag_sqlite::SqliteTable;

const DAY_MS: i64 = 86_400_000;

fn run(bin: &str, args: &[&str]) -> Output {
    let exe = match bin {
        "ingest" => env!("CARGO_BIN_EXE_ingest"),
        "gather" => env!("CARGO_BIN_EXE_gather"),
        _ => env!("CARGO_BIN_EXE_loadgen"),
    };
    Command::new(exe).args(args).env("RUST_LOG", "info").output().unwrap()
}

fn ok(out: Output) -> String {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).unwrap().to_rfc3339()
}

/// Items of `rollup` in the table, each with its `expires` (if any).
fn items_of(db: &Path, config: &Config, rollup: Rollup, day: i64) -> Vec<Option<i64>> {
    let km = KeyModel::new(config).unwrap();
    let table = SqliteTable::open(db).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut found = Vec::new();
    for prefix in 0..km.prefixes() {
        let pk = km.partition_key(prefix, rollup, rollup.bin().start_of(day));
        let page = rt.block_on(table.query(&QueryRequest::new(pk, SortKeyCondition::Any))).unwrap();
        found.extend(page.items.iter().filter(|i| i.attrs.contains_key("t")).map(|i| match i.attrs.get(TTL_ATTR) {
            Some(AttrValue::N(n)) => Some(n.to_string().parse().unwrap()),
            _ => None,
        }));
    }
    found
}

#[test]
fn a_rollup_past_its_retention_is_purged_and_reports_read_a_coarser_one_or_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let (db, truth, events) = (p("z.db"), p("truth.json"), p("events"));
    // Every rollup of every dimension; minutes kept a day, hours a year.
    let toml = "[retention]\nminute = \"1d\"\nhour = \"365d\"\nday = \"forever\"\n";
    std::fs::write(p("retention.toml"), toml).unwrap();
    let config = Config::from_toml(toml).unwrap();
    // A day of events that ended two days ago: its minutes are past
    // retention now, its hours and days are not.
    let now = chrono::Utc::now().timestamp_millis();
    let day = now.div_euclid(DAY_MS) * DAY_MS - 3 * DAY_MS;
    let start = rfc3339(day);
    ok(run(
        "loadgen",
        &["--records", "4000", "--shards", "2", "--start", &start, "--late", "0", "--malformed", "0"]
            .iter()
            .copied()
            .chain(["--sink", &format!("files:{events}"), "--truth", &truth])
            .collect::<Vec<_>>(),
    ));
    let inputs: Vec<String> = ["shard-000.jsonl", "shard-001.jsonl"].iter().map(|f| format!("{events}/{f}")).collect();
    let (conf, dead) = (p("retention.toml"), p("dead.jsonl"));
    let ingest = |extra: &[&str]| {
        let mut args = vec!["--db", &db, "--config", &conf, "--dead-letters", &dead, "--input"];
        args.extend(inputs.iter().map(String::as_str));
        args.extend(extra);
        let out = run("ingest", &args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    ingest(&[]);

    // Every minute item expires a day after its bucket ends; hours a year;
    // days carry no expiry.
    let minutes = items_of(Path::new(&db), &config, Rollup::Minute, day);
    assert!(!minutes.is_empty(), "minute items were written");
    assert!(minutes.iter().all(|e| e.is_some_and(|e| e > day / 1000 && e <= (day + 2 * DAY_MS) / 1000 + 60)));
    let hours = items_of(Path::new(&db), &config, Rollup::Hour, day);
    assert!(hours.iter().all(|e| e.is_some_and(|e| e >= (day + 365 * DAY_MS) / 1000)), "{hours:?}");
    assert!(items_of(Path::new(&db), &config, Rollup::Day, day).iter().all(Option::is_none));

    // While the minutes were still kept (--now an hour after a 6-hour
    // window), they answer, and equal the hour items' totals.
    let window = ["--from", &start, "--to", &rfc3339(day + 6 * 3_600_000)];
    let g =
        |extra: &[&str]| run("gather", &[&["--db", &db, "totals"][..], &window, extra, &["--format", "csv"]].concat());
    let then = rfc3339(day + 7 * 3_600_000);
    let by_minute = ok(g(&["--rollup", "minute", "--now", &then]));
    let by_hour = ok(g(&[]));
    assert_eq!(by_minute, by_hour, "minutes, read while kept, sum to the hours");

    // A second run (nothing new to read) purges the expired minutes first.
    let log = ingest(&[]);
    assert!(log.contains("purged the items past their retention"), "{log}");
    assert!(items_of(Path::new(&db), &config, Rollup::Minute, day).is_empty(), "minutes purged");
    assert_eq!(items_of(Path::new(&db), &config, Rollup::Hour, day).len(), hours.len(), "hours kept");

    // Now: minutes refused by name; the window's totals from the hour items,
    // unchanged; a 5-minute series of it refused, an hourly one read.
    let refused = g(&["--rollup", "minute"]);
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && why.contains("minute items are kept 1d"), "{why}");
    assert_eq!(ok(g(&[])), by_hour, "the hour items answer as before");
    let series = |step: &str| {
        run("gather", &[&["--db", &db, "timeseries"][..], &window, &["--step", step, "--format", "csv"]].concat())
    };
    let five = series("5m");
    assert!(!five.status.success() && String::from_utf8_lossy(&five.stderr).contains("from items still kept"));
    ok(series("1h"));

    // check: every rollup still kept matches the truth; the minutes are
    // said not to be checked, not counted as matching.
    let checked = ok(run("gather", &["--db", &db, "check", "--truth", &truth]));
    assert!(checked.contains("not checked, past retention: base.minute"), "{checked}");
    assert!(checked.contains("all groups MATCH"), "{checked}");
}
