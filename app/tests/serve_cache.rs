//! `gather serve`'s cache while ingest writes: two servers on one SQLite
//! table, one caching unchanged slices (`--recheck 0s`: it checks the
//! change marks at every query), one reading everything (`--cache-bytes
//! 0 --recheck 0s`: with the default recheck, its view of which hour items
//! are complete may be a second old, and it then reads an hour item a
//! flush since left behind its minutes, the staleness that flag allows).
//! A running `loadgen --sink ingest` (late events up to an hour, so
//! flushes keep changing slices already read) is stopped (SIGSTOP) at
//! random points, possibly in the middle of a flush, and both servers are
//! asked the same queries: the cached answers equal the fresh ones every
//! time, and at the end both equal the generator's truth.

use rand::{Rng, SeedableRng};
use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};
use zigzag_testkit::{spawn_listening, Reaped};

fn get(addr: SocketAddr, path: &str) -> String {
    zigzag_testkit::http_get(addr, path).unwrap().1
}

/// The result of a query (status checked), and whether the answer shows
/// a slice as it was before a flush in progress (its `infos` say so).
fn answer(addr: SocketAddr, path: &str) -> (serde_json::Value, bool) {
    let body: serde_json::Value = serde_json::from_str(&get(addr, path)).unwrap();
    assert_eq!(body["status"], "success", "{path}: {body}");
    // A slice shown as before a flush in progress, or as read part way
    // through one still in progress (at most --unsettled-for ago).
    let held = body["infos"].as_array().is_some_and(|i| {
        i.iter().any(|i| i.to_string().contains("before a flush") || i.to_string().contains("part way through a flush"))
    });
    (body["data"].clone(), held)
}

fn result(addr: SocketAddr, path: &str) -> serde_json::Value {
    answer(addr, path).0
}

fn signal(child: &Reaped, sig: &str) {
    let ok = Command::new("kill").arg(format!("-{sig}")).arg(child.id().to_string()).status().unwrap().success();
    assert!(ok || sig == "CONT", "kill -{sig}");
}

fn encode(q: &str) -> String {
    form_urlencoded::byte_serialize(q.as_bytes()).collect()
}

#[test]
fn an_answer_from_the_cache_equals_a_fresh_read_while_ingest_writes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("zigzag.db");
    let truth = dir.path().join("truth.json");
    // 2 hours of events from 2026-11-20T00:00Z, 5 % of them up to an hour late.
    let start = 1_795_132_800i64;
    let mut loadgen = Reaped::spawn(
        Command::new(env!("CARGO_BIN_EXE_loadgen"))
            .current_dir(dir.path())
            .arg("--db")
            .arg(&db)
            .arg("--truth")
            .arg(&truth)
            .args(["--records", "60000", "--rate", "3000", "--span", "2h", "--late", "0.05", "--late-max", "1h"])
            .args(["--shards", "2", "--flush-interval-ms", "300"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null()),
    )
    .unwrap();
    // The layout is recorded by the first flush.
    let t0 = Instant::now();
    while !db.exists() && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(800));
    let serve = |extra: &[&str]| {
        spawn_listening(
            Command::new(env!("CARGO_BIN_EXE_gather"))
                .arg("--db")
                .arg(&db)
                .args(["serve", "--listen", "127.0.0.1:0"])
                .args(extra),
        )
        .unwrap()
    };
    let (_cached, a) = serve(&["--recheck", "0s"]);
    let (_fresh, b) = serve(&["--cache-bytes", "0", "--recheck", "0s"]);

    let end = start + 2 * 3600;
    let queries: Vec<String> = vec![
        format!("/api/v1/query_range?query={}&start={start}&end={end}&step=60", encode("sum by (country) (clicks)")),
        format!(
            "/api/v1/query_range?query={}&start={start}&end={end}&step=300",
            encode("sum by (campaign) (impressions)")
        ),
        // An hour on either side: jitter puts a few events outside the span.
        format!("/api/v1/query?query={}&time={}", encode("sum(sum_over_time(clicks[4h]))"), end + 3600),
        format!(
            "/api/v1/query?query={}&time={}",
            encode("sum by (campaign) (sum_over_time(clicks[1h]))"),
            start + 3600
        ),
    ];
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let (mut rounds, mut compared, mut mid_flush) = (0, 0, 0);
    while loadgen.try_wait().unwrap().is_none() && rounds < 40 {
        signal(&loadgen, "CONT");
        std::thread::sleep(Duration::from_millis(rng.gen_range(50..400)));
        signal(&loadgen, "STOP");
        // Stopped anywhere, mid-flush included: both read the same table.
        // A slice a flush is changing is the cache's as it was before the
        // flush, or as read part way through it (serve/tests/cache_flushes.rs
        // checks those states exactly), where the table shows the flush as
        // far as it got now: compared when the answer holds no such slice.
        for q in &queries {
            let (cached, held) = answer(a, q);
            if held {
                mid_flush += 1;
                continue;
            }
            assert_eq!(cached, result(b, q), "round {rounds}: {q}");
            compared += 1;
        }
        rounds += 1;
    }
    signal(&loadgen, "CONT");
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        match loadgen.try_wait().unwrap() {
            Some(status) => break status,
            None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            None => panic!("loadgen did not finish in 2 minutes"),
        }
    };
    assert!(status.success(), "loadgen: {status:?}");
    assert!(
        compared >= 20,
        "compared while ingest wrote: {compared} answers in {rounds} rounds ({mid_flush} mid-flush)"
    );

    let truth: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&truth).unwrap()).unwrap();
    let clicks = truth["totals"]["clicks"]["count"].as_u64().unwrap();
    for q in &queries {
        let (cached, held) = answer(a, q);
        assert!(!held, "every flush is done: {q}");
        assert_eq!(cached, result(b, q), "after the run: {q}");
    }
    let total = result(a, &queries[2]);
    assert_eq!(total["result"][0]["value"][1], clicks.to_string(), "the total is the truth's: {total}");
    // The cache did serve: slices unchanged between rounds came from memory.
    let metrics = get(a, "/metrics");
    let hits: f64 = metrics
        .lines()
        .find(|l| l.starts_with("zigzag_serve_cache_slices_total{result=\"hit\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    assert!(hits > 0.0, "no slice was served from the cache:\n{metrics}");
}
