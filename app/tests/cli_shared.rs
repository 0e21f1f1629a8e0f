//! What the three binaries share through the application layer, as a
//! user meets it: one duration grammar whose errors name the flag, and a
//! SIGTERM that flushes whichever binary runs a pipeline.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use zigzag_testkit::Reaped;

fn run(bin: &str, args: &[&str]) -> Output {
    Command::new(bin).args(args).output().unwrap()
}

fn fails_naming(out: &Output, flag: &str, why: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{flag}: accepted: {stderr}");
    assert!(stderr.contains(flag) && stderr.contains(why), "{flag}: {stderr}");
}

#[test]
fn every_binary_reads_durations_by_one_grammar_and_names_the_flag_it_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("none.db");
    let db = db.to_str().unwrap();
    let ingest = env!("CARGO_BIN_EXE_ingest");
    let gather = env!("CARGO_BIN_EXE_gather");
    let loadgen = env!("CARGO_BIN_EXE_loadgen");
    fails_naming(
        &run(ingest, &["--db", db, "--input", "x.jsonl", "--failover", "0s"]),
        "--failover",
        "longer than zero",
    );
    fails_naming(&run(ingest, &["--db", db, "--input", "x.jsonl", "--aws-timeout", "5x"]), "--aws-timeout", "unit");
    fails_naming(&run(gather, &["--db", db, "compact", "--before", "2026-01-01", "--grace", "10q"]), "--grace", "unit");
    fails_naming(&run(gather, &["--db", db, "scatter", "--interval", "1y"]), "--interval", "unit");
    fails_naming(&run(loadgen, &["--sink", "files:-", "--records", "5", "--span", "0"]), "--span", "longer than zero");
    fails_naming(
        &run(loadgen, &["--sink", "files:-", "--records", "5", "--late-max", "1.5.0h"]),
        "--late-max",
        "a number and a unit",
    );
    // The same grammar accepted everywhere: decimals, a bare number of
    // seconds, zero where zero means something (no jitter).
    let truth = dir.path().join("truth.json");
    let args = ["--sink", "files:-", "--records", "7", "--span", "1.5h", "--jitter", "0", "--late-max", "90"];
    let out = run(loadgen, &[&args[..], &["--truth", truth.to_str().unwrap()]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.stdout.iter().filter(|&&b| b == b'\n').count(), 7, "7 records on stdout");
}

/// `loadgen --sink ingest` told to stop by SIGTERM (what an orchestrator
/// sends) flushes what it read and checkpoints it, as Ctrl-C does: with a
/// flush interval far longer than the run, the final flush is the only one.
#[test]
fn loadgen_into_ingest_flushes_and_checkpoints_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("zigzag.db");
    let config = dir.path().join("zigzag.toml");
    std::fs::write(&config, "[flush]\ninterval_ms = 3600000\n").unwrap();
    let mut child = Reaped::spawn(
        Command::new(env!("CARGO_BIN_EXE_loadgen"))
            .args(["--sink", "ingest", "--rate", "2000", "--records", "200000", "--shards", "2"])
            .arg("--config")
            .arg(&config)
            .arg("--db")
            .arg(&db)
            .arg("--truth")
            .arg(dir.path().join("truth.json"))
            .arg("--dead-letters")
            .arg(dir.path().join("dead.jsonl"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
    )
    .unwrap();
    wait_for_lease_table(&db, &mut child);
    std::thread::sleep(Duration::from_secs(2));
    let status = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "loadgen after SIGTERM: {stderr}");
    let summary = stderr.lines().find(|l| l.starts_with("loadgen → ingest: ")).expect("the run summary");
    assert!(summary.contains("; 1 flushes ("), "exactly the final flush: {summary}");
    let read: u64 = summary["loadgen → ingest: ".len()..].split(' ').next().unwrap().parse().unwrap();
    assert!(read > 0 && read < 200_000, "stopped part-way: {summary}");

    let leases: std::sync::Arc<dyn zigzag_core::table::SortedTable> =
        std::sync::Arc::new(zigzag_sqlite::SqliteTable::open_table(&db, "checkpoints").unwrap());
    let reader = zigzag_lease::Coordinator::new(leases, zigzag_lease::LeaseOptions::new("loadgen", "test"));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (held, lanes) =
        rt.block_on(async { (reader.read_leases().await.unwrap(), reader.read_lanes().await.unwrap()) });
    assert_eq!(held.len(), 2, "{held:?}");
    assert!(
        held.iter().all(|l| l.owner.is_none() && l.checkpoint.earliest().is_some()),
        "released and checkpointed: {held:?}"
    );
    assert!(lanes.iter().all(|l| l.owner.is_none()), "lane freed: {lanes:?}");
}

/// Waits (at most 60 s) until the worker joined: its database exists.
fn wait_for_lease_table(db: &Path, child: &mut Reaped) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !db.exists() {
        assert!(Instant::now() < deadline, "loadgen never opened {}", db.display());
        assert_eq!(child.try_wait().unwrap(), None, "loadgen exited early");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One configuration: an option of any binary is a flag, a `ZIGZAG_*`
/// variable or a key of the binary's table in the configuration file, and
/// `--print-config` says which one each value came from.
#[test]
fn every_binary_layers_flags_variables_and_its_table_and_prints_where_each_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("zigzag.toml");
    std::fs::write(&file, "[flush]\ninterval_ms = 5000\n[ingest]\nrelist = \"7s\"\n[loadgen]\nshards = 3\n").unwrap();
    let f = file.to_str().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ingest"))
        .args(["--config", f, "--batch", "9", "--input", "x.jsonl", "--print-config"])
        .env("ZIGZAG_FAILOVER", "12s")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let line = |name: &str| text.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_default().to_string();
    assert!(line("relist").contains("7s") && line("relist").contains(&format!("file ({f})")), "{text}");
    assert!(line("failover").contains("12s") && line("failover").contains("environment (ZIGZAG_FAILOVER)"), "{text}");
    assert!(line("batch").contains(" 9 ") && line("batch").contains("flag"), "{text}");
    assert!(line("max-pause").contains("default"), "{text}");
    assert!(
        text.contains(&format!("pipeline configuration: {f}"))
            && text.lines().any(|l| l.trim_start().starts_with("flush.interval_ms ") && l.contains(" 5000 ")),
        "{text}"
    );

    let out = run(env!("CARGO_BIN_EXE_loadgen"), &["--config", f, "--print-config"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().any(|l| l.starts_with("shards ") && l.contains(" 3 ") && l.contains("file")), "{text}");

    // A bad value from a variable: one error, naming the flag and the variable.
    let out = Command::new(env!("CARGO_BIN_EXE_ingest"))
        .args(["--input", "x.jsonl", "--db", dir.path().join("z.db").to_str().unwrap()])
        .env("ZIGZAG_FAILOVER", "0s")
        .output()
        .unwrap();
    fails_naming(&out, "--failover", "ZIGZAG_FAILOVER");
}

/// The pipeline configuration's settings (`[flush] interval_ms`, the
/// retention, ...) are flags and `ZIGZAG_*` variables too, laid over the
/// file's keys; `--print-config` says where each came from; a bad one is
/// one error naming it; and what they set is what the run writes.
#[test]
fn pipeline_settings_are_flags_and_variables_over_the_file_and_reach_the_written_layout() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let f = p("zigzag.toml");
    std::fs::write(&f, "[flush]\ninterval_ms = 5000\nmax_keys = 100\n[retention]\nhour = \"400d\"\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ingest"))
        .args(["--config", &f, "--input", "x.jsonl", "--flush-max-keys", "300", "--print-config"])
        .env("ZIGZAG_FLUSH_INTERVAL_MS", "7000")
        .env("ZIGZAG_RETENTION", "minute=1d")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let line = |key: &str| text.lines().find(|l| l.trim_start().starts_with(&format!("{key} "))).unwrap_or_default();
    let interval = line("flush.interval_ms");
    assert!(interval.contains(" 7000 ") && interval.contains("environment (ZIGZAG_FLUSH_INTERVAL_MS)"), "{text}");
    assert!(line("flush.max_keys").contains(" 300 ") && line("flush.max_keys").contains(" flag "), "{text}");
    let retention = line("retention");
    assert!(retention.contains("minute 1d, hour 400d, day forever"), "merged with the file's: {text}");
    assert!(retention.contains("environment (ZIGZAG_RETENTION)"), "{text}");
    assert!(line("flush.concurrency").contains(" default "), "{text}");
    assert!(!text.lines().any(|l| l.starts_with("flush-interval-ms")), "listed once, with the configuration: {text}");

    // A key of the configuration in the binary's table: refused, saying
    // where it belongs.
    std::fs::write(p("wrong.toml"), "[ingest]\nflush-interval-ms = 5000\n").unwrap();
    let out = run(env!("CARGO_BIN_EXE_ingest"), &["--config", &p("wrong.toml"), "--input", "x.jsonl"]);
    fails_naming(&out, "flush-interval-ms", "the pipeline configuration's flush.interval_ms");
    // A value of the right form the configuration refuses: one error naming
    // the flag, the variable and why.
    let out = Command::new(env!("CARGO_BIN_EXE_ingest"))
        .args(["--input", "x.jsonl", "--db", &p("z.db")])
        .env("ZIGZAG_FLUSH_EVERY_MS", "nope=60000")
        .output()
        .unwrap();
    fails_naming(&out, "--flush-every-ms from environment (ZIGZAG_FLUSH_EVERY_MS)", "\"nope\" is no projection");
    let out = run(env!("CARGO_BIN_EXE_ingest"), &["--input", "x.jsonl", "--flush-interval-ms", "5s"]);
    fails_naming(&out, "--flush-interval-ms", "not a non-negative integer");

    // What the variable set is in the table's layout: a reader (which
    // needs no configuration) refuses the minutes past their retention,
    // and answers them from a table written without it.
    let start = chrono::Utc::now() - chrono::Duration::days(3);
    let start = start.format("%Y-%m-%dT00:00:00Z").to_string();
    let write =
        |db: &str, retention: Option<&str>| {
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_loadgen"));
            cmd.args(["--sink", "ingest", "--records", "2000", "--shards", "1", "--span", "1h", "--start", &start])
                .args(["--db", db, "--truth", &p("truth.json"), "--dead-letters", &p("dead.jsonl")]);
            if let Some(r) = retention {
                cmd.env("ZIGZAG_RETENTION", r);
            }
            let out = cmd.output().unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        };
    let minutes = |db: &str| {
        let to = start.replace("T00:", "T01:");
        let args = ["--db", db, "totals", "--from", &start, "--to", &to, "--rollup", "minute"];
        run(env!("CARGO_BIN_EXE_gather"), &args)
    };
    write(&p("kept.db"), None);
    let out = minutes(&p("kept.db"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    write(&p("expiring.db"), Some("minute=1d"));
    fails_naming(&minutes(&p("expiring.db")), "minute items are kept 1d", "retention");
}

/// The worker's limits and retries are settings too: a variable moving
/// the accepted event times dead-letters the events outside them, and a
/// flag bounding a record's bytes dead-letters the larger ones, each with
/// its reason; the retry policy's bounds are checked when parsed.
#[test]
fn decode_limits_and_retries_are_settings_that_take_effect() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let day = |d: u32| format!("2026-11-{d:02}T12:00:00Z");
    let lines: Vec<String> = [(20, "a"), (21, "b"), (21, &"x".repeat(300) as &str)]
        .iter()
        .map(|(d, r)| {
            let rest = r#""campaign":"c","country":"DE","url":"/p/1","user_id":"u1""#;
            format!(r#"{{"ts":"{}","type":"click","referrer":"{r}",{rest}}}"#, day(*d))
        })
        .collect();
    std::fs::write(p("shard-0.jsonl"), lines.join("\n") + "\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ingest"))
        .args(["--db", &p("z.db"), "--dead-letters", &p("dead.jsonl"), "--input", &p("shard-0.jsonl")])
        .args(["--max-record-bytes", "200", "--retry-attempts", "3", "--retry-base", "5ms"])
        .env("ZIGZAG_MIN_EVENT_TIME", "2026-11-21T00:00:00Z")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dead = std::fs::read_to_string(p("dead.jsonl")).unwrap();
    let reasons: Vec<String> = dead
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["reason"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(reasons, ["timestamp_out_of_range", "oversize"], "{dead}");
    let out = run(env!("CARGO_BIN_EXE_ingest"), &["--input", "x.jsonl", "--retry-attempts", "0"]);
    fails_naming(&out, "--retry-attempts", "not in 1..");
    let out = Command::new(env!("CARGO_BIN_EXE_ingest"))
        .args(["--input", "x.jsonl"])
        .env("ZIGZAG_MAX_EVENT_TIME", "tomorrow")
        .output()
        .unwrap();
    fails_naming(&out, "ZIGZAG_MAX_EVENT_TIME", "not an RFC 3339 time");
}

/// A user's error is one message, said once, with no backtrace even when
/// RUST_BACKTRACE asks for one (exit 1; a bad command line is clap's 2).
#[test]
fn a_user_error_is_one_message_without_a_backtrace() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("empty.db");
    zigzag_sqlite::SqliteTable::open(&db).unwrap();
    let db = db.to_str().unwrap();
    let gather = env!("CARGO_BIN_EXE_gather");
    let with_backtrace =
        |bin: &str, args: &[&str]| Command::new(bin).args(args).env("RUST_BACKTRACE", "1").output().unwrap();
    for (args, says) in [
        (&["--db", db, "totals", "--from", "someday", "--to", "today"][..], "--from \"someday\""),
        // Off the minute: the same fix for every projection, said once.
        (
            &["--db", db, "totals", "--from", "2026-11-20", "--to", "2026-11-20T10:00:30Z"][..],
            "try 2026-11-20T10:00:00Z",
        ),
        (&["--db", db, "serve", "--token-file", "/nonexistent/token"][..], "token file"),
    ] {
        let out = with_backtrace(gather, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert_eq!(stderr.matches("Error:").count(), 1, "{args:?}: {stderr}");
        assert_eq!(stderr.matches(says).count(), 1, "{args:?}: said once: {stderr}");
        assert!(!stderr.to_lowercase().contains("backtrace"), "{args:?}: {stderr}");
    }
    let out = with_backtrace(gather, &["--db", db, "totals", "--frm", "x"]);
    assert_eq!(out.status.code(), Some(2), "a bad command line: {}", String::from_utf8_lossy(&out.stderr));
    // Grafana's relative times are windows too: yesterday through today.
    let out = with_backtrace(gather, &["--db", db, "totals", "--from", "yesterday", "--to", "today"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `--print-config` shows the settings of a run not yet complete: `ingest`
/// without its `--input` prints them (a bad value is still an error).
#[test]
fn print_config_does_not_demand_the_input() {
    let ingest = env!("CARGO_BIN_EXE_ingest");
    let out = run(ingest, &["--print-config"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("failover"));
    fails_naming(&run(ingest, &["--print-config", "--failover", "0s"]), "--failover", "longer than zero");
}
