//! `ingest --log-format json`: every line on stderr is one JSON log event
//! (a log service reads one format), the run summary included.

use std::process::Command;
use zigzag_loadgen::{write_shard_files, GenConfig, Generator};

#[test]
fn every_stderr_line_is_a_json_event_and_the_summary_is_one_of_them() {
    let dir = tempfile::tempdir().unwrap();
    let gen = Generator::new(GenConfig { seed: 9, shards: 2, records: 2_000, ..Default::default() });
    let inputs = write_shard_files(&gen, dir.path(), || {}).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ingest"))
        .arg("--db")
        .arg(dir.path().join("zigzag.db"))
        .arg("--dead-letters")
        .arg(dir.path().join("dead.jsonl"))
        .arg("--log-format")
        .arg("json")
        .arg("--input")
        .args(&inputs)
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let events: Vec<serde_json::Value> = stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON event ({e}): {l}")))
        .collect();
    assert!(events.len() >= 3, "starting, joined, summary at least: {stderr}");
    for e in &events {
        assert!(
            e["level"].is_string() && e["fields"]["message"].is_string(),
            "an event with a level and a message: {e}"
        );
    }
    let summary = events
        .iter()
        .filter_map(|e| e["fields"]["message"].as_str())
        .find(|m| m.starts_with("ingest: ") && m.contains(" records ("))
        .unwrap_or_else(|| panic!("the run summary as an event: {stderr}"));
    let records: u64 = (0..2).map(|s| gen.shard_len(s)).sum();
    assert!(summary.contains(&format!("ingest: {records} records")), "{summary}");

    // Per-shard spans: each shard task logs inside a span naming its
    // shard and lease, itself inside the worker's.
    let stems: Vec<String> = inputs.iter().map(|p| p.file_stem().unwrap().to_string_lossy().into_owned()).collect();
    let mut read: Vec<String> = events
        .iter()
        .filter(|e| e["fields"]["message"] == "reading")
        .map(|e| {
            assert_eq!(e["span"]["name"], "shard", "{e}");
            assert!(e["span"]["lease"].is_u64(), "{e}");
            let spans = e["spans"].as_array().unwrap();
            assert_eq!((spans[0]["name"].as_str(), spans.len()), (Some("worker"), 2), "{e}");
            e["span"]["shard"].as_str().unwrap().to_string()
        })
        .collect();
    read.sort();
    assert_eq!(read, stems, "one shard span per shard read: {stderr}");
}

/// An error that stops the process is a JSON event too, its last line,
/// with the whole chain of causes; `ZIGZAG_LOG_FILTER` (`--log-filter`)
/// wins over RUST_LOG.
#[test]
fn a_fatal_error_is_the_last_json_event_and_the_log_filter_wins_over_rust_log() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-shard.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_ingest"))
        .args(["--log-format", "json", "--db", dir.path().join("z.db").to_str().unwrap()])
        .args(["--dead-letters", dir.path().join("dead.jsonl").to_str().unwrap()])
        .arg("--input")
        .arg(&missing)
        .env("RUST_LOG", "info")
        .env("ZIGZAG_LOG_FILTER", "error")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.lines().all(|l| l.contains("\"level\":\"ERROR\"")), "errors only: {stderr}");
    let last = stderr.lines().rfind(|l| !l.trim().is_empty()).expect("a last line");
    let e: serde_json::Value = serde_json::from_str(last).unwrap_or_else(|e| panic!("not JSON ({e}): {stderr}"));
    assert_eq!((e["level"].as_str(), e["fields"]["message"].as_str()), (Some("ERROR"), Some("stopped by an error")));
    let error = e["fields"]["error"].as_str().unwrap();
    assert!(error.contains("no-such-shard.jsonl") && error.contains("No such file"), "{error}");
    assert_eq!(error.matches("No such file").count(), 1, "each cause once: {error}");
}

/// Logs at info level carry neither a record's contents nor a credential:
/// records that fail to decode go to the dead letters, not the log, and
/// the AWS options are never logged.
#[test]
fn info_logs_carry_no_record_payload_and_no_credential() {
    const PAYLOAD: &str = "zz-payload-marker-7f3a";
    const SECRET: &str = "zz-secret-marker-91c2";
    let dir = tempfile::tempdir().unwrap();
    let gen = Generator::new(GenConfig { seed: 4, shards: 1, records: 500, ..Default::default() });
    let inputs = write_shard_files(&gen, dir.path(), || {}).unwrap();
    let mut text = std::fs::read_to_string(&inputs[0]).unwrap();
    text.push_str(&format!("{{\"broken\": \"{PAYLOAD}\"\n{{\"type\": \"{PAYLOAD}\", \"ts\": 1}}\n"));
    std::fs::write(&inputs[0], text).unwrap();
    let dead = dir.path().join("dead.jsonl");
    for format in ["text", "json"] {
        let out = Command::new(env!("CARGO_BIN_EXE_ingest"))
            .args(["--db", dir.path().join(format!("{format}.db")).to_str().unwrap()])
            .args(["--dead-letters", dead.to_str().unwrap(), "--log-format", format, "--input"])
            .args(&inputs)
            .env("RUST_LOG", "info")
            .env("AWS_SECRET_ACCESS_KEY", SECRET)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(!stderr.contains(PAYLOAD), "a record's contents in the {format} log: {stderr}");
    }
    assert!(std::fs::read_to_string(&dead).unwrap().contains(PAYLOAD), "the bad records are in the dead letters");
    // An AWS call that fails (nothing listens there) is logged and
    // explained without the credentials it was signed with.
    let out = Command::new(env!("CARGO_BIN_EXE_gather"))
        .args([
            "--dynamodb",
            "t",
            "--endpoint-url",
            "http://127.0.0.1:9",
            "--aws-timeout",
            "2s",
            "totals",
            "--last",
            "1d",
        ])
        .env("RUST_LOG", "info")
        .env("AWS_ACCESS_KEY_ID", "AKIDZZMARKER")
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "nothing listens on port 9: {stderr}");
    assert!(!stderr.contains(SECRET) && !stderr.contains("AKIDZZMARKER"), "a credential in the log: {stderr}");
}
