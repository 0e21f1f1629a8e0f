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
}
