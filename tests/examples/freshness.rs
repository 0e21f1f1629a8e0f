//! Freshness, end to end: how long from an event being put on the stream to
//! the first `gather serve` answer that includes it, with polling or with
//! enhanced fan-out. A benchmark (`bench/freshness/run.sh` runs it against
//! the local emulators); it measures and prints, and never fails on speed.
//!
//! ```text
//! cargo run --release -p zigzag-tests --example freshness -- polling|fan-out [SECONDS] [EVENTS_PER_S]
//! ```
//!
//! - A release `ingest` (the shipped layout: minute items flushed every
//!   10 s) reads a 2-shard stream of kinesis-local into DynamoDB Local, by
//!   GetRecords (plain port) or by SubscribeToShard (TLS port); a `gather
//!   serve` reads the table.
//! - A producer puts background events (now-stamped, both shards) at a
//!   steady rate, and once a second a probe: a click of its own campaign,
//!   `probe-N`, put alone, its put time taken when PutRecords returns.
//! - A reader asks the server every 250 ms for the clicks of the newest
//!   minutes by campaign (`sum by (campaign) (sum_over_time(clicks{campaign=~"probe-.*"}[3m]))`
//!   at the end of the current minute): a probe is fresh when it first
//!   appears there.
//! - Stages, per probe: read (put → a side reader of the same kind sees it),
//!   aggregate wait (→ the start of the first flush after that), flush (its
//!   duration, from ingest's log), query (flush end → the answer, which
//!   includes the 250 ms poll); and the server's answer time alone.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use zigzag_aws::{emulator, AwsOptions};
use zigzag_ingest::source::Source;
use zigzag_kinesis::stream::ensure_stream;
use zigzag_kinesis::{FanOutSource, KinesisSource, Producer, StartingPosition};
use zigzag_model::source::StartAt;
use zigzag_testkit::Reaped;
use zigzag_tests::unique_name as unique;

const POLL: Duration = Duration::from_millis(250);
const WARM_UP: Duration = Duration::from_secs(20);

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Polling,
    FanOut,
}

/// Wall-clock milliseconds (ingest's log is stamped in wall-clock time).
fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

type Seen = Arc<Mutex<BTreeMap<u64, i64>>>;

fn event(kind: &str, campaign: &str, referrer: u64) -> Vec<u8> {
    format!(
        r#"{{"type":"{kind}","ts":{},"referrer":"r{referrer}","campaign":"{campaign}","country":"DE","url":"/p/1","cost":0.25,"user_id":"u{referrer:06}"}}"#,
        now_ms()
    )
    .into_bytes()
}

/// Puts background events at `rate`/s and a probe every second until
/// `until`; returns each probe's put time.
async fn produce(client: aws_sdk_kinesis::Client, stream: String, rate: u32, until: Instant) -> BTreeMap<u64, i64> {
    let mut background = Producer::new(client.clone(), &stream);
    let mut probes = Producer::new(client, &stream);
    let mut put = BTreeMap::new();
    let tick = Duration::from_millis(100);
    let per_tick = (rate / 10).max(1) as u64;
    let (mut n, mut probe, mut next_probe) = (0u64, 0u64, Instant::now());
    let mut ticker = tokio::time::interval(tick);
    while Instant::now() < until {
        ticker.tick().await;
        for _ in 0..per_tick {
            n += 1;
            let kind = if n % 4 == 0 { "click" } else { "impression" };
            background.send(format!("k{n}"), event(kind, &format!("c{}", n % 20), n % 500)).await.expect("put");
        }
        background.flush().await.expect("put");
        if Instant::now() >= next_probe {
            probe += 1;
            probes.send(format!("probe{probe}"), event("click", &format!("probe-{probe}"), 0)).await.expect("put");
            probes.flush().await.expect("put");
            put.insert(probe, now_ms());
            next_probe += Duration::from_secs(1);
        }
    }
    put
}

/// Reads every shard of `source` as ingest does, noting when each probe is seen.
async fn side_reader(source: Arc<dyn Source>, seen: Seen, stop: Instant) {
    let shards = source.shards().await.expect("shards");
    let mut tasks = Vec::new();
    for shard in shards {
        let (source, seen) = (source.clone(), seen.clone());
        tasks.push(tokio::spawn(async move {
            let mut reader = source.open(&shard.id, StartAt::Configured).await.expect("open");
            while Instant::now() < stop {
                let Ok(Ok(batch)) = tokio::time::timeout(Duration::from_secs(5), reader.next_batch(1000)).await else {
                    continue;
                };
                let at = now_ms();
                for (_, data) in batch.iter() {
                    let text = String::from_utf8_lossy(data);
                    if let Some(n) = text.split("\"probe-").nth(1).and_then(|r| r.split('"').next()) {
                        if let Ok(n) = n.parse() {
                            seen.lock().unwrap().entry(n).or_insert(at);
                        }
                    }
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

/// One GET of the server: the body.
fn get(addr: std::net::SocketAddr, path: &str) -> std::io::Result<String> {
    let mut conn = std::net::TcpStream::connect(addr)?;
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    conn.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())?;
    let mut answer = String::new();
    conn.read_to_string(&mut answer)?;
    Ok(answer.split("\r\n\r\n").nth(1).unwrap_or_default().to_string())
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Asks the server every [`POLL`] until `stop`; notes when each probe first
/// appears, and each answer's time.
fn poll_reports(addr: std::net::SocketAddr, seen: Seen, answer_ms: Arc<Mutex<Vec<f64>>>, stop: Instant) {
    let query = encode(r#"sum by (campaign) (sum_over_time(clicks{campaign=~"probe-.*"}[3m]))"#);
    while Instant::now() < stop {
        let asked = Instant::now();
        let end_of_minute = (now_ms() / 60_000 + 1) * 60;
        let body = get(addr, &format!("/api/v1/query?query={query}&time={end_of_minute}"));
        let answered = now_ms();
        answer_ms.lock().unwrap().push(asked.elapsed().as_secs_f64() * 1000.0);
        if let Ok(v) = body.as_deref().map(serde_json::from_str::<serde_json::Value>) {
            for r in v.ok().as_ref().and_then(|v| v["data"]["result"].as_array()).into_iter().flatten() {
                let campaign = r["metric"]["campaign"].as_str().unwrap_or_default();
                if let Some(Ok(n)) = campaign.strip_prefix("probe-").map(str::parse::<u64>) {
                    seen.lock().unwrap().entry(n).or_insert(answered);
                }
            }
        }
        std::thread::sleep(POLL.saturating_sub(asked.elapsed()));
    }
}

/// (start ms, end ms) of every flush that wrote records, from ingest's JSON log.
fn flushes(log: &Path) -> Vec<(i64, i64)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut out = Vec::new();
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        if v["fields"]["message"] != "flushed" || v["fields"]["records"].as_u64().unwrap_or(0) == 0 {
            continue;
        }
        let end = v["timestamp"]
            .as_str()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.timestamp_millis());
        if let (Some(end), Some(ms)) = (end, v["fields"]["ms"].as_i64()) {
            out.push((end - ms, end));
        }
    }
    out
}

fn percentile(values: &mut [f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    values[((values.len() - 1) as f64 * q).round() as usize]
}

fn binary(name: &str) -> PathBuf {
    // target/<profile>/examples/freshness → target/<profile>/<name>
    let exe = std::env::current_exe().expect("own path");
    let dir = exe.parent().and_then(Path::parent).expect("target/<profile>");
    let path = dir.join(name);
    assert!(path.exists(), "{} not built: cargo build --release -p zigzag-app --bins", path.display());
    path
}

fn aws_env(command: &mut Command, kinesis: &str, dynamo: &str, ca: Option<&str>) {
    command
        .env("AWS_ENDPOINT_URL_KINESIS", kinesis)
        .env("AWS_ENDPOINT_URL_DYNAMODB", dynamo)
        .env("AWS_ACCESS_KEY_ID", emulator::ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", emulator::SECRET_KEY)
        .env("AWS_REGION", emulator::REGION)
        .env("AWS_EC2_METADATA_DISABLED", "true");
    if let Some(ca) = ca {
        command.env("AWS_CA_BUNDLE", ca);
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = match args.first().map(String::as_str) {
        Some("polling") => Mode::Polling,
        Some("fan-out") => Mode::FanOut,
        _ => {
            eprintln!("usage: freshness polling|fan-out [SECONDS] [EVENTS_PER_S]");
            std::process::exit(2);
        }
    };
    let seconds: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(120);
    let rate: u32 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(200);
    let dynamo = emulator::endpoint("DYNAMODB").unwrap_or_else(|e| panic!("{e}"));
    let (kinesis, options, ca): (String, AwsOptions, Option<String>) = match mode {
        Mode::Polling => {
            let url = emulator::endpoint("KINESIS").unwrap_or_else(|e| panic!("{e}"));
            (url.clone(), emulator::options_at(url), None)
        }
        Mode::FanOut => {
            let (url, _) = emulator::kinesis_tls().unwrap_or_else(|e| panic!("{e}"));
            let ca = std::env::var("ZIGZAG_KINESIS_CA").expect("checked by kinesis_tls");
            (url, emulator::kinesis_tls_options().unwrap_or_else(|e| panic!("{e}")), Some(ca))
        }
    };
    let client = zigzag_kinesis::client(&options).await;
    let name = unique("fresh");
    ensure_stream(&client, &name, 2).await.expect("stream");
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("ingest.log");

    let mut ingest = Command::new(binary("ingest"));
    ingest.args(["--kinesis", &name, "--dynamodb", &name, "--start", "latest", "--log-format", "json"]);
    ingest.arg("--dead-letters").arg(dir.path().join("dead.jsonl"));
    if mode == Mode::FanOut {
        ingest.args(["--consumer", "zigzag-freshness"]);
    }
    aws_env(&mut ingest, &kinesis, &dynamo, ca.as_deref());
    ingest.env("RUST_LOG", "info").stdout(Stdio::null());
    ingest.stderr(Stdio::from(std::fs::File::create(&log).expect("log")));
    let mut ingest = Reaped::spawn(&mut ingest).expect("ingest");
    // The tables exist once ingest has joined a lane (it creates them first).
    let started = Instant::now();
    while !std::fs::read_to_string(&log).unwrap_or_default().contains("\"joined\"") {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "ingest never joined: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut serve = Command::new(binary("gather"));
    serve.args(["--dynamodb", &name, "serve", "--listen", "127.0.0.1:0"]);
    aws_env(&mut serve, &kinesis, &dynamo, None);
    let (serve, addr) = zigzag_testkit::spawn_listening(&mut serve).expect("gather serve");

    let side_source: Arc<dyn Source> = {
        let polling = KinesisSource::new(client.clone(), &name, StartingPosition::Latest);
        match mode {
            Mode::Polling => Arc::new(polling),
            Mode::FanOut => Arc::new(FanOutSource::new(polling, "zigzag-freshness-side")),
        }
    };
    let read: Seen = Arc::default();
    let reported: Seen = Arc::default();
    let answers: Arc<Mutex<Vec<f64>>> = Arc::default();
    let run = Duration::from_secs(seconds);
    let stop = Instant::now() + run + Duration::from_secs(30);
    let side = tokio::spawn(side_reader(side_source, read.clone(), stop));
    // Let the side reader subscribe before the first probe.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let poller = {
        let (reported, answers) = (reported.clone(), answers.clone());
        std::thread::spawn(move || poll_reports(addr, reported, answers, stop))
    };
    eprintln!("freshness: {seconds} s of {rate} events/s + 1 probe/s, then 30 s to drain");
    let put = produce(client, name.clone(), rate, Instant::now() + run).await;
    poller.join().expect("poller");
    let _ = side.await;
    for child in [&ingest, &serve] {
        let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
    }
    let _ = ingest.wait();
    drop(serve);

    let flushes = flushes(&log);
    let (read, reported) = (read.lock().unwrap().clone(), reported.lock().unwrap().clone());
    let warm = put.values().next().copied().unwrap_or_default() + WARM_UP.as_millis() as i64;
    let (mut total, mut reading, mut waiting, mut flushing, mut querying) = (vec![], vec![], vec![], vec![], vec![]);
    let mut missing = 0;
    for (n, &t_put) in put.iter().filter(|(_, &t)| t >= warm) {
        let Some(&t_report) = reported.get(n) else {
            missing += 1;
            continue;
        };
        total.push((t_report - t_put) as f64);
        if let Some(&t_read) = read.get(n) {
            reading.push((t_read - t_put) as f64);
            // The first flush that began after the record was read.
            if let Some(&(start, end)) = flushes.iter().find(|(start, _)| *start >= t_read) {
                waiting.push((start - t_read) as f64);
                flushing.push((end - start) as f64);
                querying.push((t_report - end) as f64);
            }
        }
    }
    let mut answers = answers.lock().unwrap().clone();
    let row = |name: &str, v: &mut Vec<f64>| {
        format!(
            "| {name} | {} | {:.0} | {:.0} | {:.0} |",
            v.len(),
            percentile(v, 0.5),
            percentile(v, 0.99),
            percentile(v, 1.0)
        )
    };
    let label = if mode == Mode::Polling { "polling (GetRecords)" } else { "fan-out (SubscribeToShard)" };
    println!("\n{label}: {} probes after a {} s warm-up, {missing} never reported", total.len(), WARM_UP.as_secs());
    println!("| stage (ms) | probes | p50 | p99 | max |\n|---|---|---|---|---|");
    for line in [
        row("put → in a `gather serve` answer", &mut total),
        row("read (put → a reader of the same kind has it)", &mut reading),
        row("aggregate wait (read → the next flush starts)", &mut waiting),
        row("flush", &mut flushing),
        row("query (flush end → in an answer; polled every 250 ms)", &mut querying),
        row("the server's answer alone", &mut answers),
    ] {
        println!("{line}");
    }
}
