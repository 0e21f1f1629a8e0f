//! Hostile files, whole runs through the `ingest` binary: valid records
//! drawn for an example schema with hostile lines between them (a 5 MiB
//! line, a 450 KB field, 100 000 levels of nesting, numbers at and past
//! their type's limits, wrong types, bad bytes, broken framing). The run
//! must complete; each hostile line must be dead-lettered with the reason
//! it deserves (or, for the few that are valid, counted); and the store must
//! equal the truth of the valid lines exactly. The JSON run writes its dead
//! letters to standard output (`--dead-letters -`, as in a container) beside
//! its metrics in CloudWatch's format (`--cloudwatch-emf`), the CSV run to a
//! file.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use zigzag_gather::check::{check, render};
use zigzag_gather::execute::ExecOptions;
use zigzag_loadgen::declared::traffic_file::TrafficFile;
use zigzag_loadgen::{Drawn, GenConfig, SchemaGenerator, Traffic};
use zigzag_model::schema::FieldValue;
use zigzag_model::{Config, KeyModel, Truth};
use zigzag_sqlite::SqliteTable;

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/schemas").join(name)
}

/// What a hostile line must come to.
enum Expect {
    /// Dead-lettered with this reason.
    Reason(&'static str),
    /// Valid, with these field values (schema order).
    Valid(Vec<FieldValue<'static>>),
    /// A CSV header row: skipped, neither an event nor dead-lettered.
    Header,
}

struct Run {
    schema: PathBuf,
    config: Config,
    lines: Vec<Vec<u8>>,
    /// Line number (from 1) → what it must come to.
    hostile: BTreeMap<u64, Expect>,
    truth: Truth,
}

/// `valid` drawn records with the hostile lines spread between them.
fn build(schema: &str, valid: u64, hostile: Vec<(Vec<u8>, Expect)>) -> Run {
    let config = Config::from_toml(&std::fs::read_to_string(example(&format!("{schema}.toml"))).unwrap()).unwrap();
    let traffic =
        TrafficFile::from_toml(&std::fs::read_to_string(example(&format!("{schema}.traffic.toml"))).unwrap()).unwrap();
    let cfg = GenConfig { seed: 3, shards: 1, records: valid, malformed_fraction: 0.0, ..Default::default() };
    let gen = SchemaGenerator::new(cfg, &config, &traffic).unwrap();
    let (set, keys, fields) =
        (config.measure_set().unwrap(), KeyModel::new(&config).unwrap(), config.typed_fields().unwrap());
    let mut truth = Truth::default();
    let mut lines = Vec::new();
    let mut expect = BTreeMap::new();
    let every = valid / (hostile.len() as u64 + 1);
    let mut hostile = hostile.into_iter();
    let mut buf = Vec::new();
    for seq in 1..=valid {
        let Drawn::Valid(ev) = gen.draw(0, seq, &mut buf) else { unreachable!("no malformed share") };
        truth.records += 1;
        truth.add_event(&set, &keys, &fields, ev.ts_ms, &ev.values);
        lines.push(buf.clone());
        if seq % every == 0 {
            if let Some((line, what)) = hostile.next() {
                truth.records += 1;
                match &what {
                    Expect::Reason(_) => truth.malformed += 1,
                    Expect::Header => {}
                    Expect::Valid(values) => {
                        let FieldValue::Time(ts) =
                            values[config.fields.iter().position(|f| f.name == config.input.time).unwrap()]
                        else {
                            panic!("a valid line has a time")
                        };
                        truth.add_event(&set, &keys, &fields, ts, values)
                    }
                }
                lines.push(line);
                expect.insert(lines.len() as u64, what);
            }
        }
    }
    assert!(hostile.next().is_none(), "every hostile line placed");
    Run { schema: example(&format!("{schema}.toml")), config, lines, hostile: expect, truth }
}

/// Where the run writes its dead letters: a file, or standard output
/// (`--dead-letters -`, as in a container).
#[derive(Clone, Copy)]
enum DeadTo {
    File,
    Stdout,
}

/// The dead letters by line number, and the run's summary line.
fn ingest(run: &Run, dir: &Path, dead_to: DeadTo) -> (BTreeMap<u64, String>, String) {
    let input = dir.join("hostile.txt");
    let mut bytes = Vec::new();
    for l in &run.lines {
        bytes.extend_from_slice(l);
        bytes.push(b'\n');
    }
    std::fs::write(&input, bytes).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ingest"))
        .arg("--input")
        .arg(&input)
        .arg("--config")
        .arg(&run.schema)
        .arg("--db")
        .arg(dir.join("z.db"))
        .arg("--dead-letters")
        .args(match dead_to {
            DeadTo::File => vec![dir.join("dead.jsonl").into_os_string()],
            DeadTo::Stdout => vec!["-".into(), "--cloudwatch-emf".into()],
        })
        .env("RUST_LOG", "warn")
        .output()
        .expect("run ingest");
    assert!(out.status.success(), "the run completes: {}", String::from_utf8_lossy(&out.stderr));
    let summary = String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or_default().to_string();
    let stdout = String::from_utf8(out.stdout).expect("standard output is UTF-8 JSON lines");
    let text = match dead_to {
        DeadTo::File => std::fs::read_to_string(dir.join("dead.jsonl")).unwrap_or_default(),
        DeadTo::Stdout => stdout,
    };
    let mut dead = BTreeMap::new();
    // With dead letters on standard output, the run also writes its metrics
    // there in CloudWatch's format: whole lines each, never inside another.
    // The total under `Stream`, and per reason under `Stream` and `reason`.
    let mut emf_dead_letters = 0;
    let mut emf_by_reason: BTreeMap<String, u64> = BTreeMap::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if v.get("_aws").is_some() {
            let n = v["zigzag_ingest_dead_letters_total"].as_u64().unwrap_or(0);
            match v["reason"].as_str() {
                Some(reason) => *emf_by_reason.entry(reason.to_string()).or_default() += n,
                None => emf_dead_letters += n,
            }
            continue;
        }
        let seq: u64 = v["seq"].as_str().and_then(|s| s.parse().ok()).expect("a sequence number");
        dead.insert(seq, v["reason"].as_str().unwrap_or_default().to_string());
    }
    if let DeadTo::Stdout = dead_to {
        assert_eq!(emf_dead_letters, dead.len() as u64, "the EMF documents count every dead letter");
        let mut by_reason: BTreeMap<String, u64> = BTreeMap::new();
        for reason in dead.values() {
            *by_reason.entry(reason.clone()).or_default() += 1;
        }
        emf_by_reason.retain(|_, n| *n > 0);
        assert_eq!(emf_by_reason, by_reason, "the EMF documents count the dead letters of each reason");
    }
    (dead, summary)
}

fn assert_run(schema: &str, run: Run, dead_to: DeadTo) {
    let dir = tempfile::tempdir().unwrap();
    let (dead, summary) = ingest(&run, dir.path(), dead_to);
    for (seq, what) in &run.hostile {
        let line = String::from_utf8_lossy(&run.lines[*seq as usize - 1]);
        let shown: String = line.chars().take(120).collect();
        match what {
            Expect::Reason(r) => {
                assert_eq!(dead.get(seq).map(String::as_str), Some(*r), "{schema} line {seq}: {shown}")
            }
            Expect::Valid(_) => assert!(!dead.contains_key(seq), "{schema} line {seq} is valid: {shown}"),
            Expect::Header => assert!(!dead.contains_key(seq), "{schema} line {seq} is a header: {shown}"),
        }
    }
    let headers = run.hostile.values().filter(|e| matches!(e, Expect::Header)).count();
    let (records, valid) = (run.lines.len(), run.lines.len() - headers - dead.len());
    let says = format!("ingest: {records} records ({valid} valid, {} dead-lettered to ", dead.len());
    assert!(summary.starts_with(&says), "{schema}: {says:?} in {summary:?}");
    let skipped = format!("{headers} CSV header rows skipped");
    assert_eq!(summary.contains(&skipped), headers > 0, "{schema}: {skipped:?} in {summary:?}");
    assert_eq!(dead.len() as u64, run.truth.malformed, "{schema}: only hostile lines are dead-lettered: {dead:?}");
    let km = zigzag_model::Projections::new(&run.config).unwrap();
    let table = SqliteTable::open(dir.path().join("z.db")).unwrap();
    let report = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(check(&table, &km, &run.truth, 0, &ExecOptions::default()))
        .unwrap();
    assert_eq!(report.mismatches(), 0, "{schema}:\n{}", render(&report));
}

const AT: i64 = 1_795_200_000_000; // 2026-11-20T18:40:00Z

/// An ad-server record with `tail` appended inside the object.
fn ad(tail: &str) -> Vec<u8> {
    format!(r#"{{"at":{AT},"event":"view","ad":{{"campaign":{{"id":7}}}},"geo":{{"cc":"DE"}}{tail}}}"#).into_bytes()
}

fn ad_values(price: Option<i64>, user: Option<&str>) -> Vec<FieldValue<'static>> {
    let s = |t: &str| FieldValue::Str(Cow::Owned(t.to_string()));
    vec![
        FieldValue::Time(AT),
        s("view"),
        FieldValue::Int(7),
        s("DE"),
        s("unknown"),
        price.map_or(FieldValue::Absent, FieldValue::Int),
        user.map_or(FieldValue::Absent, s),
    ]
}

#[test]
fn a_hostile_json_file_is_dead_lettered_line_by_line_and_the_run_completes() {
    use Expect::*;
    let deep = |n: usize| "[".repeat(n) + &"]".repeat(n);
    let hostile: Vec<(Vec<u8>, Expect)> = vec![
        // Framing and bytes.
        (ad(&format!(r#","pad":"{}""#, "x".repeat(5 << 20))), Reason("oversize")),
        (b"".to_vec(), Reason("malformed_json")),
        (b"   \t ".to_vec(), Reason("malformed_json")),
        (b"\xff\xfe{}".to_vec(), Reason("not_utf8")),
        (ad(",\"user\":{\"id\":\"a\u{0}b\"}"), Reason("malformed_json")),
        (ad(r#","user":{"id":"\ud800"}"#), Reason("malformed_json")),
        ([ad("").as_slice(), b" trailing"].concat(), Reason("malformed_json")),
        (b"[1,2,3]".to_vec(), Reason("malformed_json")),
        (b"\"just a string\"".to_vec(), Reason("malformed_json")),
        (ad("").into_iter().take(40).collect(), Reason("malformed_json")),
        (ad(r#","at":1"#), Reason("duplicate_field")),
        // Size: a 450 KB field, 60 000 keys (840 KB), 100 000 levels of nesting.
        (ad(&format!(r#","user":{{"id":"{}"}}"#, "u".repeat(450_000))), Reason("field_too_long")),
        (ad(&(0..60_000).map(|i| format!(",\"k{i}\":{i}")).collect::<String>()), Valid(ad_values(None, None))),
        (ad(&format!(r#","unasked":{}"#, deep(100_000))), Valid(ad_values(None, None))),
        (
            format!(r#"{{"at":{AT},"event":"view","ad":{},"geo":{{"cc":"DE"}}}}"#, deep(100_000)).into_bytes(),
            Reason("wrong_type"),
        ),
        // Numbers at and past their limits (campaign_id 0..=1048575, price ≥ 0).
        (ad(r#","price_micros":9223372036854775807"#), Valid(ad_values(Some(i64::MAX), None))),
        (ad(r#","price_micros":9223372036854775808"#), Reason("out_of_range")),
        (ad(r#","price_micros":-1"#), Reason("out_of_range")),
        (ad(r#","price_micros":1e400"#), Reason("out_of_range")),
        (ad(r#","price_micros":25e2"#), Valid(ad_values(Some(2500), None))),
        (ad(r#","price_micros":1.5"#), Reason("too_precise")),
        (ad(r#","price_micros":"12""#), Valid(ad_values(Some(12), None))),
        (ad(r#","price_micros":NaN"#), Reason("malformed_json")),
        (
            format!(r#"{{"at":{AT},"event":"view","ad":{{"campaign":{{"id":1048576}}}}}}"#).into_bytes(),
            Reason("out_of_range"),
        ),
        (
            format!(r#"{{"at":{},"event":"view","ad":{{"campaign":{{"id":7}}}}}}"#, i64::MAX).into_bytes(),
            Reason("timestamp_out_of_range"),
        ),
        (
            format!(r#"{{"at":"{AT}","event":"view","ad":{{"campaign":{{"id":7}}}}}}"#).into_bytes(),
            Valid({
                let mut v = ad_values(None, None);
                v[3] = FieldValue::Str(Cow::Borrowed("ZZ"));
                v
            }),
        ),
        // Wrong types.
        (ad(r#","price_micros":true"#), Reason("wrong_type")),
        (ad(r#","user":{"id":42}"#), Reason("wrong_type")),
        (ad(r#","user":{"id":["a"]}"#), Reason("wrong_type")),
        (
            format!(r#"{{"at":{AT},"event":{{"kind":"view"}},"ad":{{"campaign":{{"id":7}}}}}}"#).into_bytes(),
            Reason("wrong_type"),
        ),
        (
            format!(r#"{{"at":{AT},"event":"purchase","ad":{{"campaign":{{"id":7}}}}}}"#).into_bytes(),
            Reason("not_allowed"),
        ),
        (br#"{"event":"view","ad":{"campaign":{"id":7}}}"#.to_vec(), Reason("missing_field")),
        (
            format!(r#"{{"at":{AT},"event":"view","ad":{{"campaign":{{"id":7}}}},"geo":"DE"}}"#).into_bytes(),
            Reason("wrong_type"),
        ),
        (
            format!(r#"{{"at":{AT},"event":"view","ad":{{"campaign":{{"id":7}}}},"geo":null}}"#).into_bytes(),
            Valid({
                let mut v = ad_values(None, None);
                v[3] = FieldValue::Str(Cow::Borrowed("ZZ"));
                v
            }),
        ),
        // Windows line endings are whitespace.
        ([ad("").as_slice(), b"\r"].concat(), Valid(ad_values(None, None))),
    ];
    assert_run("ad_server", build("ad_server", 1_500, hostile), DeadTo::Stdout);
}

#[test]
fn a_hostile_csv_file_is_dead_lettered_line_by_line_and_the_run_completes() {
    use Expect::*;
    let line = |time: &str, method: &str, path: &str, status: &str, bytes: &str| {
        format!("{time},{method},{path},{status},{bytes}").into_bytes()
    };
    const T: &str = "20/Nov/2026:18:40:00 +0000";
    let valid = |status: i64, bytes: i64| {
        let s = |t: &str| FieldValue::Str(Cow::Owned(t.to_string()));
        Valid(vec![FieldValue::Time(AT), s("GET"), s("/x"), FieldValue::Int(status), FieldValue::Int(bytes)])
    };
    let hostile: Vec<(Vec<u8>, Expect)> = vec![
        (line(T, "GET", &"p".repeat(2 << 20), "200", "1"), Reason("oversize")),
        (b"".to_vec(), Reason("wrong_column_count")),
        (line(T, "GET", "/x", "200", "1,extra"), Reason("wrong_column_count")),
        (format!("{T},GET,\"/x,200,1").into_bytes(), Reason("wrong_column_count")),
        (b"\xff,GET,/x,200,1".to_vec(), Reason("not_utf8")),
        (line(T, "GET", "/x", "600", "1"), Reason("out_of_range")),
        (line(T, "GET", "/x", "99", "1"), Reason("out_of_range")),
        (line(T, "GET", "/x", "2OO", "1"), Reason("bad_number")),
        (line(T, "GET", "/x", "200", "-1"), Reason("out_of_range")),
        (line(T, "GET", "/x", "200", "9223372036854775808"), Reason("out_of_range")),
        (line(T, "GET", "/x", "200", "9223372036854775807"), valid(200, i64::MAX)),
        (line(T, "GET", "/x", "200", "1.5"), Reason("too_precise")),
        (line(T, "GET", "/x", "200", "true"), Reason("bad_number")),
        (line(T, "GET", "/x", "200", ""), Reason("missing_field")),
        (line(T, "PROPFINDX", "/x", "200", "1"), Reason("field_too_long")),
        (line(T, "GET", &"p".repeat(513), "200", "1"), Reason("field_too_long")),
        (line("2026-11-20T18:40:00Z", "GET", "/x", "200", "1"), Reason("bad_timestamp")),
        (line("20/Nov/1990:18:40:00 +0000", "GET", "/x", "200", "1"), Reason("timestamp_out_of_range")),
        (line(T, "\"GET\"", "\"/x\"", "\"200\"", "\"7\""), valid(200, 7)),
        // A producer that sends the header row (cat of several files).
        (b"time,method,path,status,bytes".to_vec(), Header),
        ([line(T, "GET", "/x", "304", "0").as_slice(), b"\r"].concat(), valid(304, 0)),
    ];
    assert_run("access_log", build("access_log", 1_000, hostile), DeadTo::File);
}
