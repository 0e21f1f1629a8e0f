//! A long-lived `ingest` (`--follow`: shards never end) serves Prometheus
//! metrics, `/health` and `/ready` on loopback (which `ingest probe`, the
//! container health check, reads), and on SIGTERM flushes, checkpoints and hands its
//! leases and lane back before it exits: with a flush interval far longer
//! than the test, the final flush is the only one, so exact totals prove it
//! happened.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use zigzag_gather::check::check;
use zigzag_gather::execute::ExecOptions;
use zigzag_loadgen::{truth, write_shard_files, GenConfig, Generator};
use zigzag_model::Config;
use zigzag_sqlite::SqliteTable;
use zigzag_testkit::Reaped;

/// GET `path`: the status code and the whole response.
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    let code = body.split(' ').nth(1)?.parse().ok()?;
    Some((code, body))
}

fn scrape(port: u16) -> Option<String> {
    get(port, "/metrics").filter(|(code, _)| *code == 200).map(|(_, body)| body)
}

fn metric(body: &str, name: &str) -> Option<u64> {
    body.lines().find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))?.split(' ').nth(1)?.parse().ok()
}

#[test]
fn sigterm_flushes_and_checkpoints_and_metrics_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let gen = Generator::new(GenConfig { seed: 5, shards: 2, records: 5_000, ..Default::default() });
    let truth = truth::compute(&gen);
    let inputs = write_shard_files(&gen, dir.path(), || {}).unwrap();
    let config = dir.path().join("zigzag.toml");
    std::fs::write(&config, "[flush]\ninterval_ms = 3600000\n").unwrap();
    let db = dir.path().join("zigzag.db");
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut child = Reaped::spawn(
        Command::new(env!("CARGO_BIN_EXE_ingest"))
            .arg("--db")
            .arg(&db)
            .arg("--config")
            .arg(&config)
            .arg("--dead-letters")
            .arg(dir.path().join("dead.jsonl"))
            .arg("--follow")
            .arg("--metrics-addr")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--input")
            .args(&inputs)
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
    )
    .unwrap();

    // Wait until every record was read (the counter moves per batch).
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut read = None;
    while Instant::now() < deadline {
        if let Some(body) = scrape(port) {
            read = metric(&body, "zigzag_ingest_records_total");
            if read == Some(truth.records) {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(read, Some(truth.records), "records_total never reached the input size");
    check_metrics(&scrape(port).unwrap());
    assert_eq!(child.try_wait().unwrap(), None, "--follow must keep running");
    let (code, body) = get(port, "/health").expect("/health answers");
    assert_eq!(code, 200, "alive: {body}");
    // Joined, its lane renewed, nothing paused: ready (the join precedes
    // the first record read, so it is ready now).
    let (code, body) = get(port, "/ready").expect("/ready answers");
    assert_eq!(code, 200, "ready once reading: {body}");
    assert!(body.ends_with("ready\n"), "{body}");
    assert_eq!(get(port, "/nothing").map(|r| r.0), Some(404), "only the three paths");
    // The container health check (`ingest probe`, the image has no curl)
    // passes on both probes and fails on anything but a 200.
    let addr = format!("127.0.0.1:{port}");
    for path in ["/health", "/ready"] {
        let out = probe(&addr, path);
        assert!(out.status.success(), "probe {path}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let out = probe(&addr, "/nothing");
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("404"), "{out:?}");

    let status = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "ingest after SIGTERM: {stderr}");
    assert!(stderr.contains("1 flushes"), "exactly the final flush: {stderr}");

    let table = SqliteTable::open(&db).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let report = rt
        .block_on(check(
            &table,
            &zigzag_model::Projections::new(&Config::default()).unwrap(),
            &truth,
            0,
            &ExecOptions::default(),
        ))
        .unwrap();
    assert_eq!(report.mismatches(), 0, "{}", zigzag_gather::check::render(&report));

    // It handed everything back: no lease owned, its lane free.
    let leases: std::sync::Arc<dyn zigzag_core::table::SortedTable> =
        std::sync::Arc::new(SqliteTable::open_table(&db, "checkpoints").unwrap());
    let reader = zigzag_lease::Coordinator::new(leases, zigzag_lease::LeaseOptions::new("default", "test"));
    let (held, lanes) =
        rt.block_on(async { (reader.read_leases().await.unwrap(), reader.read_lanes().await.unwrap()) });
    assert_eq!(held.len(), 2);
    assert!(
        held.iter().all(|l| l.owner.is_none() && l.checkpoint.earliest().is_some()),
        "released, checkpointed: {held:?}"
    );
    assert!(lanes.iter().all(|l| l.owner.is_none()), "lane freed: {lanes:?}");
    // Gone: the health check fails (the connection is refused).
    assert!(!probe(&addr, "/health").status.success(), "a probe of an exited ingest passed");
}

/// A live scrape passes `promtool check metrics` (every metric has its
/// `# HELP` from docs/METRICS.md, names and types as Prometheus wants
/// them). Skipped without promtool unless ZIGZAG_REQUIRE_EMULATORS=1
/// (`test.sh` installs it).
fn check_metrics(response: &str) {
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or(response);
    assert!(
        body.contains("# HELP zigzag_ingest_records_total Records the shard readers"),
        "described from docs/METRICS.md: {body}"
    );
    if let Err(e) = zigzag_testkit::promtool_check_metrics(body) {
        panic!("promtool check metrics:\n{e}");
    }
}

fn probe(addr: &str, path: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ingest")).args(["probe", "--addr", addr, "--path", path]).output().unwrap()
}
