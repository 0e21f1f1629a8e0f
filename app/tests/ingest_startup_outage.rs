#![cfg(feature = "aws")]
//! A worker that starts during an outage waits; it never exits. `ingest`
//! is started against DynamoDB Local behind a frozen proxy (every call held
//! past the client's timeout, as a frozen or unreachable service) and
//! kinesalite behind a proxy that resets every connection (a stopped
//! emulator). It stays up through both, `/health` 200 and `/ready` 503
//! saying what it waits for, past the 10 s after which a worker used to
//! exit; once the services are back it starts, reads every record, and
//! the table equals the generator's truth. A worker stopped (SIGTERM)
//! while it waits exits at once, cleanly.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use zigzag_aws::emulator;
use zigzag_dynamodb::DynamoTable;
use zigzag_gather::check;
use zigzag_gather::execute::ExecOptions;
use zigzag_kinesis::stream::ensure_stream;
use zigzag_kinesis::Producer;
use zigzag_loadgen::kinesis_sink::{produce, PartitionKey, SinkOptions};
use zigzag_loadgen::{truth, GenConfig, Generator, Traffic};
use zigzag_model::Config;
use zigzag_testkit::Reaped;
use zigzag_tests::fault_proxy::{Fault, FaultProxy, Rule};

fn socket(url: &str) -> SocketAddr {
    url.trim_start_matches("http://").trim_end_matches('/').parse().expect("emulator URL is http://127.0.0.1:PORT")
}

fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("{name}-{}-{}", std::process::id(), nanos % 1_000_000_000_000)
}

/// GET `path` of the worker's listener: status code and body.
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").ok()?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).ok()?;
    let code = answer.split(' ').nth(1)?.parse().ok()?;
    Some((code, answer.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default()))
}

fn metric(port: u16, name: &str) -> Option<u64> {
    let (_, body) = get(port, "/metrics")?;
    body.lines().find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))?.split(' ').nth(1)?.parse().ok()
}

/// Waits (up to `within`) until `/ready` answers `code` with a body holding `text`.
fn await_ready(port: u16, code: u16, text: &str, within: Duration, worker: &mut Reaped, log: &Path) -> String {
    let deadline = Instant::now() + within;
    let mut last = None;
    while Instant::now() < deadline {
        assert!(worker.try_wait().unwrap().is_none(), "ingest exited:\n{}", read(log));
        last = get(port, "/ready");
        if last.as_ref().is_some_and(|(c, body)| *c == code && body.contains(text)) {
            return last.unwrap().1;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("/ready never answered {code} with {text:?}: last {last:?}\n{}", read(log));
}

fn read(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

struct Worker {
    child: Reaped,
    port: u16,
    log: std::path::PathBuf,
}

fn spawn(dir: &Path, stream: &str, dynamo: &str, kinesis: &str) -> Worker {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let config = dir.join("zigzag.toml");
    std::fs::write(&config, "[flush]\ninterval_ms = 1000\n").unwrap();
    let log = dir.join("ingest.log");
    let child = Reaped::spawn(
        Command::new(env!("CARGO_BIN_EXE_ingest"))
            .args(["--kinesis", stream, "--dynamodb", stream, "--start", "trim-horizon"])
            .args(["--aws-timeout", "2s", "--max-pause", "2", "--failover", "3"])
            .arg("--metrics-addr")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--config")
            .arg(&config)
            .arg("--dead-letters")
            .arg(dir.join("dead.jsonl"))
            .env("AWS_ENDPOINT_URL_DYNAMODB", dynamo)
            .env("AWS_ENDPOINT_URL_KINESIS", kinesis)
            .env("AWS_ACCESS_KEY_ID", emulator::ACCESS_KEY)
            .env("AWS_SECRET_ACCESS_KEY", emulator::SECRET_KEY)
            .env("AWS_REGION", emulator::REGION)
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&log).unwrap())),
    )
    .unwrap();
    Worker { child, port, log }
}

fn sigterm(child: &Reaped) {
    assert!(Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap().success());
}

/// Every DynamoDB call held two minutes (the client gives up after 2 s).
fn frozen() -> Vec<Rule> {
    vec![Rule::new("", 1.0, vec![Fault::Delay(Duration::from_secs(120))])]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_started_while_dynamodb_then_kinesis_are_down_waits_then_ingests_exactly() {
    if !emulator::gate("a_worker_started_while_dynamodb_then_kinesis_are_down_waits_then_ingests_exactly") {
        return;
    }
    let dynamo_url = emulator::endpoint("DYNAMODB").unwrap_or_else(|e| panic!("{e}"));
    let kinesis_url = emulator::endpoint_in("ZIGZAG_KINESALITE_ENDPOINT").unwrap_or_else(|e| panic!("{e}"));
    let name = unique("startup");
    let kinesis = zigzag_kinesis::client(&emulator::options_at(kinesis_url.clone())).await;
    ensure_stream(&kinesis, &name, 2).await.expect("create stream");
    let gen = Generator::new(GenConfig { seed: 12, shards: 2, records: 3_000, ..GenConfig::default() });
    let truth = truth::compute(&gen);
    let mut producer = Producer::new(kinesis, &name);
    let opts = SinkOptions {
        partition_key: PartitionKey::parse("referrer", gen.fields()).expect("a shipped field"),
        rate: None,
        kpl_max_bytes: None,
    };
    produce(&gen, &mut producer, &opts, |_| {}).await.expect("produce");

    let dynamo_proxy = FaultProxy::start(socket(&dynamo_url), frozen(), 41).await.expect("DynamoDB proxy");
    let stopped_stream = vec![Rule::new("", 1.0, vec![Fault::Reset])];
    let kinesis_proxy = FaultProxy::start(socket(&kinesis_url), stopped_stream, 42).await.expect("Kinesis proxy");
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let Worker { child: mut worker, port, log } = spawn(dir.path(), &name, &dynamo_proxy.url(), &kinesis_proxy.url());

    // DynamoDB frozen: alive, not ready, saying what it waits out.
    let why = await_ready(port, 503, "opening the tables, waiting out", Duration::from_secs(30), &mut worker, &log);
    assert!(why.contains("timed out") || why.contains("timeout"), "the reason is the timeout: {why}");
    assert_eq!(get(port, "/health").map(|r| r.0), Some(200));
    std::thread::sleep(Duration::from_secs(12).saturating_sub(started.elapsed()));
    let why = await_ready(port, 503, "opening the tables, waiting out", Duration::from_secs(5), &mut worker, &log);
    assert!(!why.contains("attempt 1;"), "it kept trying: {why}");

    // DynamoDB back, Kinesis down: the tables open; joining waits.
    dynamo_proxy.set_rules(vec![]).unwrap();
    await_ready(port, 503, "joining a lane, waiting out", Duration::from_secs(60), &mut worker, &log);
    std::thread::sleep(Duration::from_secs(4));
    let why = await_ready(port, 503, "joining a lane, waiting out", Duration::from_secs(5), &mut worker, &log);
    assert!(why.contains("source"), "the stream is what it waits for: {why}");
    assert_eq!(get(port, "/health").map(|r| r.0), Some(200));

    // Both back: ready, every record read, the totals exact.
    kinesis_proxy.set_rules(vec![]).unwrap();
    await_ready(port, 200, "ready", Duration::from_secs(60), &mut worker, &log);
    let deadline = Instant::now() + Duration::from_secs(60);
    while metric(port, "zigzag_ingest_records_total") != Some(truth.records) {
        assert!(Instant::now() < deadline, "not every record read: {:?}", metric(port, "zigzag_ingest_records_total"));
        std::thread::sleep(Duration::from_millis(200));
    }
    sigterm(&worker);
    let status = worker.wait_with_output().unwrap().status;
    assert!(status.success(), "ingest after SIGTERM: {status:?}\n{}", read(&log));

    let dynamo = zigzag_dynamodb::client(&emulator::options_at(dynamo_url)).await;
    let table = DynamoTable::new(dynamo, &name);
    let exec = ExecOptions { consistent: true, ..ExecOptions::default() };
    let projections = zigzag_model::Projections::new(&Config::default()).unwrap();
    let report =
        check::check(&table, &projections, &truth, truth.last_ms.unwrap_or_default(), &exec).await.expect("check");
    assert_eq!(report.mismatches(), 0, "DynamoDB != truth:\n{}", check::render(&report));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stopped_while_it_waits_for_a_frozen_store_exits_cleanly() {
    if !emulator::gate("a_worker_stopped_while_it_waits_for_a_frozen_store_exits_cleanly") {
        return;
    }
    let dynamo_url = emulator::endpoint("DYNAMODB").unwrap_or_else(|e| panic!("{e}"));
    let kinesis_url = emulator::endpoint_in("ZIGZAG_KINESALITE_ENDPOINT").unwrap_or_else(|e| panic!("{e}"));
    let dynamo_proxy = FaultProxy::start(socket(&dynamo_url), frozen(), 43).await.expect("DynamoDB proxy");
    let dir = tempfile::tempdir().unwrap();
    let Worker { child: mut worker, port, log } =
        spawn(dir.path(), &unique("startup-stop"), &dynamo_proxy.url(), &kinesis_url);
    await_ready(port, 503, "opening the tables, waiting out", Duration::from_secs(30), &mut worker, &log);
    let asked = Instant::now();
    sigterm(&worker);
    let status = worker.wait_with_output().unwrap().status;
    assert!(status.success(), "stopped while waiting: {status:?}\n{}", read(&log));
    assert!(asked.elapsed() < Duration::from_secs(8), "it took {:?} to stop", asked.elapsed());
    assert!(read(&log).contains("stopped before it started"), "{}", read(&log));
}
