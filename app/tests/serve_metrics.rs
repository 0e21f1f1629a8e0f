//! `gather serve`'s `/metrics`: requests by handler and code, their
//! duration as a histogram, queries refused by each limit, queries in
//! flight, and the RCU each query read as a histogram, in a scrape that
//! `promtool check metrics` passes.

use std::net::SocketAddr;
use std::process::Command;
use zigzag_testkit::spawn_listening;

/// (status code, body).
fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    zigzag_testkit::http_get(addr, path).unwrap()
}

/// The value of the sample line that starts with `series` (labels in the
/// exporter's order), or 0.
fn value(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

fn encode(q: &str) -> String {
    form_urlencoded::byte_serialize(q.as_bytes()).collect()
}

#[test]
fn the_server_counts_requests_refusals_in_flight_and_rcu_in_a_scrape_promtool_passes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("zigzag.db");
    let out = Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .current_dir(dir.path())
        .args(["--records", "20000", "--span", "2h", "--sink", "ingest", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    assert!(out.status.success(), "loadgen: {}", String::from_utf8_lossy(&out.stderr));
    let (_server, addr) = spawn_listening(Command::new(env!("CARGO_BIN_EXE_gather")).arg("--db").arg(&db).args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--rcu-budget",
        "40",
        "--max-buckets",
        "5000",
    ]))
    .unwrap();
    // 2026-11-20T00:00Z + 2h of events.
    let (start, end) = (1_795_132_800i64, 1_795_132_800i64 + 7_200);
    let ok = format!("/api/v1/query_range?query={}&start={start}&end={end}&step=60", encode("sum(clicks)"));
    assert_eq!(get(addr, &ok).0, 200);
    assert_eq!(get(addr, &ok).0, 200);
    let instant = format!("/api/v1/query?query={}&time={end}", encode("sum(sum_over_time(clicks[1h]))"));
    assert_eq!(get(addr, &instant).0, 200);
    // Every referrer's hourly series: more RCU than the budget.
    let dear = format!(
        "/api/v1/query_range?query={}&start={start}&end={end}&step=3600",
        encode("sum by (referrer, country) (sum_over_time(clicks[1h]))")
    );
    let (code, body) = get(addr, &dear);
    assert_eq!(code, 422, "refused by the RCU budget: {body}");
    assert!(body.contains("--rcu-budget"), "{body}");
    // A week of minutes: more buckets than --max-buckets.
    let long = format!("/api/v1/query?query={}&time={end}", encode("sum(count_over_time(clicks[7d]))"));
    let (code, body) = get(addr, &long);
    assert_eq!(code, 422, "refused by the bucket limit: {body}");
    assert!(body.contains("--max-buckets"), "{body}");
    assert_eq!(get(addr, "/api/v1/query?query=sum(").0, 400);
    assert_eq!(get(addr, "/nowhere").0, 404);

    let (code, metrics) = get(addr, "/metrics");
    assert_eq!(code, 200);
    let requests = |handler: &str, code: u16| {
        value(&metrics, &format!("zigzag_serve_http_requests_total{{handler=\"{handler}\",code=\"{code}\"}}"))
    };
    assert_eq!(requests("/api/v1/query_range", 200), 2.0, "{metrics}");
    assert_eq!(requests("/api/v1/query_range", 422), 1.0, "{metrics}");
    assert_eq!(requests("/api/v1/query", 200), 1.0, "{metrics}");
    assert_eq!(requests("/api/v1/query", 422), 1.0, "{metrics}");
    assert_eq!(requests("/api/v1/query", 400), 1.0, "{metrics}");
    assert_eq!(requests("other", 404), 1.0, "{metrics}");
    let refused = |limit: &str| value(&metrics, &format!("zigzag_serve_queries_refused_total{{limit=\"{limit}\"}}"));
    assert_eq!((refused("rcu"), refused("buckets")), (1.0, 1.0), "{metrics}");
    assert_eq!(value(&metrics, "zigzag_serve_queries_in_flight"), 0.0, "every query answered: {metrics}");
    let timed = value(&metrics, "zigzag_serve_http_request_duration_seconds_count{handler=\"/api/v1/query_range\"}");
    assert_eq!(timed, 3.0, "{metrics}");
    assert!(
        metrics
            .contains("zigzag_serve_http_request_duration_seconds_bucket{handler=\"/api/v1/query_range\",le=\"0.1\"}"),
        "a histogram, not a summary: {metrics}"
    );
    assert_eq!(value(&metrics, "zigzag_serve_query_read_capacity_units_count"), 3.0, "one per answered query");
    assert!(value(&metrics, "zigzag_serve_query_read_capacity_units_sum") > 0.0, "{metrics}");
    assert!(metrics.contains("# HELP zigzag_serve_queries_refused_total Queries refused"), "{metrics}");
    if let Err(e) = zigzag_testkit::promtool_check_metrics(&metrics) {
        panic!("promtool check metrics:\n{e}");
    }
}
