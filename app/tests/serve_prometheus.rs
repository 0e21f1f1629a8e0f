//! A real Prometheus as the oracle of `gather serve`: the fixture's minute
//! buckets are loaded into Debian's `prometheus` (2.42) with `promtool tsdb
//! create-blocks-from openmetrics`, and both servers answer the same
//! varied queries (random matchers, groupings, aggregations, range
//! functions, steps and windows) over HTTP. `promtool query` is a second
//! real client of `gather serve`.
//!
//! Where the two meanings differ, by design:
//! - Prometheus 2.x ranges are closed, `[t - r, t]`; `gather serve`'s are
//!   left-open as in Prometheus 3, `(t - r, t]`. Prometheus is asked with
//!   each range 1 ms shorter, and [`prometheus_2_ranges_hold_one_more_bucket`]
//!   tests the difference itself.
//! - A bare selector is the bucket ending at `t` (floored to the minute):
//!   Prometheus runs with `--query.lookback-delta=59999ms`, so its lookback
//!   holds that one sample, never an older bucket's.
//!
//! Needs `prometheus` and `promtool` on the PATH (`test.sh` installs
//! them); without them the tests skip, unless ZIGZAG_REQUIRE_EMULATORS=1.

use proptest::prelude::*;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use zigzag_model::ScatterMode;
use zigzag_sqlite::SqliteTable;
use zigzag_testkit::fixture::{self, DAY, MINUTE, T0};
use zigzag_testkit::promql::{instants, openmetrics, samples, shape};
use zigzag_testkit::{spawn_listening, Reaped};

struct Servers {
    _dir: tempfile::TempDir,
    _children: Vec<Reaped>,
    ours: SocketAddr,
    prometheus: SocketAddr,
}

fn have(tool: &str) -> bool {
    Command::new(tool).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// Both servers over the same data, or None (skipped) without Prometheus.
/// Each test starts its own: they are stopped when it ends (a static's
/// would outlive the test process).
fn servers() -> Option<Servers> {
    if !(have("prometheus") && have("promtool")) {
        if std::env::var("ZIGZAG_REQUIRE_EMULATORS").is_ok_and(|v| v == "1") {
            panic!("prometheus and promtool are not installed (test.sh installs Debian's prometheus package)");
        }
        eprintln!("skipped: prometheus/promtool not installed");
        return None;
    }
    Some(start())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn start() -> Servers {
    let dir = tempfile::tempdir().unwrap();
    let events = fixture::events(23, 4_000);
    // The store, as ingest writes it, with its layout recorded.
    let db = dir.path().join("zigzag.db");
    let config = fixture::config(4, ScatterMode::Random);
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    rt.block_on(fixture::write_recorded(&SqliteTable::open(&db).unwrap(), &config, &events));
    // The same minute samples in Prometheus's TSDB.
    let om = dir.path().join("samples.om");
    std::fs::write(&om, openmetrics(&samples(&events))).unwrap();
    let tsdb = dir.path().join("tsdb");
    let out = Command::new("promtool")
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(&om)
        .arg(&tsdb)
        .output()
        .unwrap();
    assert!(out.status.success(), "promtool: {}", String::from_utf8_lossy(&out.stderr));
    let prom_yml = dir.path().join("prometheus.yml");
    std::fs::write(&prom_yml, "global: {}\n").unwrap();
    let prometheus: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let prom = Reaped::spawn(
        Command::new("prometheus")
            .arg(format!("--config.file={}", prom_yml.display()))
            .arg(format!("--storage.tsdb.path={}", tsdb.display()))
            .arg(format!("--web.listen-address={prometheus}"))
            .arg("--storage.tsdb.retention.time=100y")
            .arg("--query.lookback-delta=59999ms")
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )
    .unwrap();
    let (ours, ours_addr) = spawn_listening(Command::new(env!("CARGO_BIN_EXE_gather")).arg("--db").arg(&db).args([
        "serve",
        "--listen",
        "127.0.0.1:0",
    ]))
    .unwrap();
    wait_ready(prometheus, "/-/ready");
    Servers { _dir: dir, _children: vec![prom, ours], ours: ours_addr, prometheus }
}

fn wait_ready(addr: SocketAddr, path: &str) {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(60) {
        if get(addr, path).is_ok_and(|(status, _)| status == 200) {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("{addr}{path} not ready in 60 s");
}

/// One HTTP/1.0 GET: status and body.
fn get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    zigzag_testkit::http_get(addr, path)
}

fn enc(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// A range query's matrix: per series, its samples (time → value).
type Matrix = BTreeMap<BTreeMap<String, String>, BTreeMap<i64, f64>>;

fn query_range(addr: SocketAddr, q: &str, start: i64, end: i64, step: i64) -> Matrix {
    let path = format!(
        "/api/v1/query_range?query={}&start={}&end={}&step={}",
        enc(q),
        start as f64 / 1000.0,
        end as f64 / 1000.0,
        step as f64 / 1000.0
    );
    let (status, body) = get(addr, &path).unwrap();
    assert_eq!(status, 200, "{addr} {q}: {body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["data"]["resultType"], "matrix", "{body}");
    let mut out = Matrix::new();
    for s in v["data"]["result"].as_array().unwrap() {
        let labels = s["metric"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()));
        let values = s["values"].as_array().unwrap().iter().map(|p| {
            let t = (p[0].as_f64().unwrap() * 1000.0).round() as i64;
            let x = match p[1].as_str().unwrap() {
                "NaN" => f64::NAN,
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                x => x.parse().unwrap(),
            };
            (t, x)
        });
        out.insert(labels.collect(), values.collect());
    }
    out
}

fn close(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

fn same(ours: &Matrix, theirs: &Matrix) -> Result<(), String> {
    if ours.keys().collect::<Vec<_>>() != theirs.keys().collect::<Vec<_>>() {
        return Err(format!("series differ:\nours   {:?}\ntheirs {:?}", ours.keys(), theirs.keys()));
    }
    for (l, xs) in theirs {
        let ys = &ours[l];
        if xs.keys().collect::<Vec<_>>() != ys.keys().collect::<Vec<_>>() {
            return Err(format!("{l:?}: samples at different times:\nours   {ys:?}\ntheirs {xs:?}"));
        }
        for (t, x) in xs {
            if !close(*x, ys[t]) {
                return Err(format!("{l:?} at {t}: ours {}, Prometheus {x}", ys[t]));
            }
        }
    }
    Ok(())
}

/// Start, end and step of a list of evaluation instants.
fn span(ts: &[i64]) -> (i64, i64, i64) {
    let step = if ts.len() > 1 { ts[1] - ts[0] } else { MINUTE };
    (ts[0], ts[ts.len() - 1], step)
}

#[test]
fn gather_serve_answers_as_prometheus_does() {
    let Some(s) = servers() else { return };
    let config = ProptestConfig { cases: 150, failure_persistence: None, ..ProptestConfig::default() };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let outcome = runner.run(&(shape(), instants()), |(shape, ts)| {
        let (start, end, step) = span(&ts);
        let ours = query_range(s.ours, &shape.text(), start, end, step);
        let theirs = query_range(s.prometheus, &shape.prometheus2_text(), start, end, step);
        same(&ours, &theirs).map_err(|why| {
            TestCaseError::fail(format!(
                "{} (Prometheus: {}) from {start} to {end} by {step}: {why}",
                shape.text(),
                shape.prometheus2_text()
            ))
        })
    });
    if let Err(e) = outcome {
        panic!("{e}");
    }
}

#[test]
fn prometheus_2_ranges_hold_one_more_bucket() {
    let Some(s) = servers() else { return };
    let (start, end, step) = (T0 + 5 * MINUTE, T0 + DAY, 5 * MINUTE);
    let five = |addr, r: &str| query_range(addr, &format!("sum(sum_over_time(clicks[{r}]))"), start, end, step);
    let (prom_closed, ours_open, ours_six) = (five(s.prometheus, "5m"), five(s.ours, "5m"), five(s.ours, "6m"));
    // [t - 5m, t] at minute-aligned t holds six minute buckets: ours over (t - 6m, t].
    same(&ours_six, &prom_closed).unwrap();
    assert!(same(&ours_open, &prom_closed).is_err(), "the closed range must differ somewhere over a day");
    // And 1 ms shorter it holds our five.
    same(&ours_open, &five(s.prometheus, "299999ms")).unwrap();
}

fn promtool(args: &[&str]) -> String {
    let out = Command::new("promtool").args(args).output().unwrap();
    assert!(out.status.success(), "promtool {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn sorted_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines.sort();
    lines
}

#[test]
fn promtool_reads_gather_serve_as_it_reads_prometheus() {
    let Some(s) = servers() else { return };
    let (ours, theirs) = (format!("http://{}", s.ours), format!("http://{}", s.prometheus));
    let day = ((T0 + DAY) / 1000).to_string();
    let (start, end) = ((T0 / 1000).to_string(), ((T0 + 2 * DAY) / 1000).to_string());
    // Prometheus 2.x is asked with ranges 1 ms shorter (its are closed).
    let q = |r: &str| format!("sum by (campaign) (sum_over_time(clicks[{r}]))");
    let instant = |url: &str, q: &str| promtool(&["query", "instant", "--time", &day, url, q]);
    let want = instant(&theirs, &q("86399999ms"));
    assert!(want.contains("campaign="), "Prometheus answered: {want}");
    assert_eq!(sorted_lines(&instant(&ours, &q("1d"))), sorted_lines(&want));
    let q = |r: &str| format!("sum(sum_over_time(impressions[{r}]))");
    let range =
        |url: &str, q: &str| promtool(&["query", "range", "--start", &start, "--end", &end, "--step", "1h", url, q]);
    let want = range(&theirs, &q("3599999ms"));
    assert!(want.lines().count() > 40, "hourly points over two days: {want}");
    assert_eq!(range(&ours, &q("1h")), want);
    let labels = |url: &str| promtool(&["query", "labels", "--start", &start, "--end", &end, url, "country"]);
    assert_eq!(labels(&ours), labels(&theirs));
    let series = |url: &str| {
        promtool(&["query", "series", "--match", "clicks{country=\"DE\"}", "--start", &start, "--end", &end, url])
    };
    let want = series(&theirs);
    assert!(want.contains("country=\"DE\""), "{want}");
    assert_eq!(sorted_lines(&series(&ours)), sorted_lines(&want));
}
