//! `gather` reports as a user runs them: a database file written like
//! ingest writes it, a configuration file, and the binary's output.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::OnceLock;
use zigzag_model::ScatterMode;
use zigzag_sqlite::SqliteTable;
use zigzag_testkit::fixture::*;
use zigzag_testkit::fixture::{Field, Measures};

const CONFIG: &str = "[scatter]\nprefixes = 4\nmode = \"random\"\n";

struct Fixture {
    _dir: tempfile::TempDir,
    db: PathBuf,
    config: PathBuf,
    dir: PathBuf,
    events: Vec<Event>,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("zigzag.db");
        let config = dir.path().join("zigzag.toml");
        std::fs::write(&config, CONFIG).unwrap();
        let events = events(11, 1_500);
        let table = SqliteTable::open(&db).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(write_store(&table, &zigzag_testkit::fixture::config(4, ScatterMode::Random), &events));
        let path = dir.path().to_path_buf();
        Fixture { _dir: dir, db, config, dir: path, events }
    })
}

fn gather(args: &[&str]) -> Output {
    let f = fixture();
    Command::new(env!("CARGO_BIN_EXE_gather"))
        .arg("--db")
        .arg(&f.db)
        .arg("--config")
        .arg(&f.config)
        .args(args)
        .output()
        .unwrap()
}

fn ok(args: &[&str]) -> String {
    let out = gather(args);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "gather {args:?} failed:\n{stderr}\n{stdout}");
    stdout.into_owned()
}

fn fails(args: &[&str]) -> String {
    let out = gather(args);
    assert!(!out.status.success(), "gather {args:?} should fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

const FROM: &str = "2026-10-31T06:00:00Z";
const TO: &str = "2026-11-01T18:00:00Z";
const FROM_MS: i64 = T0 + 6 * HOUR;
const TO_MS: i64 = T0 + 42 * HOUR;

/// Under the default strategy, the cost model's (planned from the
/// statistics ingest wrote) and the plainest.
#[test]
fn json_totals_equal_brute_force() {
    let want =
        brute(&fixture().events, FROM_MS, TO_MS, None, &[Field::Campaign], |e| ["DE", "FR"].contains(&e.country));
    for strategy in ["auto", "costed", "naive"] {
        let out = ok(&[
            "totals",
            "--from",
            FROM,
            "--to",
            TO,
            "--where",
            "country in DE,FR",
            "--group-by",
            "campaign",
            "--format",
            "json",
            "--strategy",
            strategy,
        ]);
        totals_equal(&out, &want);
    }
}

fn totals_equal(out: &str, want: &std::collections::BTreeMap<(Option<i64>, Vec<String>), Measures>) {
    let v: serde_json::Value = serde_json::from_str(out).unwrap();
    assert_eq!(v["report"], "totals");
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), want.len());
    for row in rows {
        let key = (None, vec![row["campaign"].as_str().unwrap().to_string()]);
        let m: &Measures = &want[&key];
        assert_eq!(row["clicks"].as_u64(), Some(m.clicks));
        assert_eq!(row["impressions"].as_u64(), Some(m.impressions));
        let cost = row["cost"].as_f64().unwrap();
        assert!((cost - m.cost_sum as f64 / 1e6).abs() < 1e-6, "{cost} vs {}", m.cost_sum);
    }
}

#[test]
fn csv_timeseries_parses_and_adds_up() {
    let out = ok(&["timeseries", "--from", FROM, "--to", TO, "--step", "1h", "--format", "csv"]);
    let mut r = csv::Reader::from_reader(out.as_bytes());
    let headers = r.headers().unwrap().clone();
    assert_eq!(&headers[0], "time");
    let clicks = headers.iter().position(|h| h == "clicks").unwrap();
    let rows: Vec<csv::StringRecord> = r.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 36, "one row per hour, zeros included");
    assert_eq!(&rows[0][0], FROM);
    let sum: u64 = rows.iter().map(|row| row[clicks].parse::<u64>().unwrap()).sum();
    let want = brute(&fixture().events, FROM_MS, TO_MS, None, &[], |_| true);
    assert_eq!(sum, want.values().next().unwrap().clicks);
}

#[test]
fn top_ctr_and_explain() {
    let out = ok(&[
        "top",
        "--from",
        FROM,
        "--to",
        TO,
        "-n",
        "2",
        "--by",
        "impressions",
        "--group-by",
        "referrer",
        "--explain",
    ]);
    let want = brute(&fixture().events, FROM_MS, TO_MS, None, &[Field::Referrer], |_| true);
    let best = want.iter().max_by_key(|(k, m)| (m.impressions, std::cmp::Reverse(k.1.clone()))).unwrap();
    let first_row = out.lines().skip_while(|l| !l.starts_with('╞')).nth(1).unwrap_or_default();
    assert!(first_row.contains(&best.0 .1[0]), "{out}");
    for part in [
        "rollups:  hour (auto",
        "read:     base hour",
        "queries:  8",
        "requests:",
        "scanned:",
        "returned:",
        "RCU:",
        "cost:",
        "wall:",
    ] {
        assert!(out.contains(part), "explain lacks {part:?}:\n{out}");
    }
    let out = ok(&["ctr", "--from", FROM, "--to", TO, "--group-by", "country", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["rows"].as_array().unwrap().len(), COUNTRIES.len());
    assert!(v["rows"][0]["ctr"].as_f64().unwrap() > 0.0);
}

#[test]
fn last_window_and_errors_name_the_bad_part() {
    let now = "2026-11-01T12:00:30Z";
    let out = ok(&["totals", "--last", "1h", "--now", now, "--explain"]);
    assert!(out.contains("2026-11-01T11:01:00Z, 2026-11-01T12:01:00Z"), "{out}");
    let cases: [(&[&str], &[&str]); 7] = [
        (&["totals", "--last", "1x"], &["--last \"1x\""]),
        (&["totals", "--from", "yesterday", "--to", TO], &["--from \"yesterday\""]),
        (&["totals", "--from", "2026-10-31T06:00:30Z", "--to", TO], &["--from", "not on a boundary"]),
        (&["totals", "--last", "1h", "--where", "colour=red"], &["colour=red", "unknown field \"colour\""]),
        (&["totals", "--last", "1h", "--where", "country~DE"], &["country~DE", "expected FIELD=VALUE"]),
        (&["totals", "--last", "1h", "--group-by", "city"], &["--group-by \"city\""]),
        (&["totals", "--last", "1h", "--where", "url=/a"], &["url is not a configured dimension"]),
    ];
    for (args, parts) in cases {
        let e = fails(args);
        for p in parts {
            assert!(e.contains(p), "gather {args:?}: {p:?} not in {e}");
        }
    }
    let e = Command::new(env!("CARGO_BIN_EXE_gather"))
        .args(["--db", "/nonexistent/zigzag.db", "totals", "--last", "1h"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&e.stderr).contains("does not exist"));
}

fn chart(name: &str, group: bool) -> PathBuf {
    let path = fixture().dir.join(name);
    let p = path.to_str().unwrap();
    let mut args = vec!["timeseries", "--from", FROM, "--to", TO, "--step", "30m", "--chart", p, "--format", "csv"];
    if group {
        args.extend(["--group-by", "country", "--measure", "cost"]);
    }
    ok(&args);
    path
}

#[test]
fn charts_are_written() {
    let svg = std::fs::read_to_string(chart("clicks.svg", false)).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("<polyline") && svg.contains("clicks per 30 min"), "{svg}");
    let svg = std::fs::read_to_string(chart("by_country.svg", true)).unwrap();
    assert!(svg.matches("<polyline").count() >= COUNTRIES.len(), "one line per country");
    for c in COUNTRIES {
        assert!(svg.contains(c), "legend names {c}");
    }
    let png = std::fs::read(chart("clicks.png", false)).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 5_000, "{} bytes", png.len());
    let e = fails(&["timeseries", "--from", FROM, "--to", TO, "--chart", "/tmp/x.gif"]);
    assert!(e.contains("x.gif") && e.contains(".svg or .png"), "{e}");
}

fn write_truth(name: &str, t: &zigzag_model::Truth) -> String {
    let path: PathBuf = fixture().dir.join(name);
    std::fs::write(&path, serde_json::to_string(t).unwrap()).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn check_matches_truth_and_catches_tampering() {
    let truth = zigzag_testkit::fixture::truth(&fixture().events);
    let good = write_truth("truth.json", &truth);
    let out = ok(&["check", "--truth", &good]);
    assert!(out.contains("all groups MATCH") && !out.contains("MISMATCH"), "{out}");
    assert!(out.contains("2026-10-31") && out.contains("2026-11-01"), "{out}");
    assert!(out.contains("hour by campaign: 4 of 4 groups MATCH") && out.contains("day by country: 4 of 4"), "{out}");

    let mut bad = truth.clone();
    let fr = bad.by.get_mut("country").unwrap().get_mut("FR").unwrap();
    fr.get_mut("clicks").unwrap().merge(&zigzag_model::MeasureValue::Count(1));
    let path = write_truth("tampered.json", &bad);
    let out = gather(&["check", "--truth", &path]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    // FR is off by one click in every rollup (minute, hour, day), each
    // checked on its own.
    assert!(stdout.contains("MISMATCH") && stdout.contains("3 group(s) MISMATCH"), "{stdout}");
    for rollup in ["minute", "hour", "day"] {
        let row = stdout.lines().find(|l| l.contains(rollup) && l.contains("FR")).unwrap_or_else(|| panic!("{stdout}"));
        assert!(row.contains("MISMATCH"), "{rollup}: {row}");
    }
    assert!(stdout.contains("(truth)"), "the mismatch shows both values: {stdout}");
}

/// A table that records its layout (as ingest does) is read without
/// `--config`; a `--config` that disagrees is refused, naming the
/// difference, rather than read with the wrong scatter (missing items).
#[test]
fn the_layout_comes_from_the_table_and_a_contradicting_config_is_refused() {
    let f = fixture();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("layout.db");
    let config = zigzag_testkit::fixture::config(4, ScatterMode::Random);
    let table = SqliteTable::open(&db).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    rt.block_on(async {
        write_store(&table, &config, &f.events).await;
        zigzag_model::layout::ensure(&table, &zigzag_model::layout::Layout::of(&config)).await.unwrap();
    });
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_gather"))
            .arg("--db")
            .arg(&db)
            .args(extra)
            .args(["totals", "--from", FROM, "--to", TO, "--format", "json"])
            .output()
            .unwrap()
    };
    let without = run(&[]);
    assert!(without.status.success(), "{}", String::from_utf8_lossy(&without.stderr));
    let with = ok(&["totals", "--from", FROM, "--to", TO, "--format", "json"]);
    assert_eq!(String::from_utf8_lossy(&without.stdout), with, "the table's layout reads what --config read");

    let wrong = dir.path().join("wrong.toml");
    std::fs::write(&wrong, "[scatter]\nprefixes = 16\n").unwrap();
    let refused = run(&["--config", wrong.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "a contradicting --config is refused");
    assert!(stderr.contains("scatter.prefixes is 16 here but 4 in the table"), "{stderr}");
}

/// A report plans with the layout it read from the table last time (a
/// cache file) while it reads the table's again, and keeps that plan only
/// if they agree: a table recreated under the same path with more scatter
/// prefixes is read whole (a plan on the cached 2 prefixes would miss the
/// items of the other 2), and the cache then holds the new layout; a
/// garbled cache file is ignored.
#[test]
fn a_cached_layout_plans_a_report_only_while_the_table_still_has_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("recreated.db");
    let cache = dir.path().join("cache");
    let write = |config: &zigzag_model::Config, events: &[Event]| {
        let _ = std::fs::remove_file(&db);
        let table = SqliteTable::open(&db).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            write_store(&table, config, events).await;
            zigzag_model::layout::ensure(&table, &zigzag_model::layout::Layout::of(config)).await.unwrap();
        });
    };
    let report = || {
        let out = Command::new(env!("CARGO_BIN_EXE_gather"))
            .env("XDG_CACHE_HOME", &cache)
            .arg("--db")
            .arg(&db)
            .args(["totals", "--from", FROM, "--to", TO, "--group-by", "campaign", "--format", "json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let cached = || -> Vec<String> {
        let dir = cache.join("zigzag").join("layouts");
        std::fs::read_dir(dir).unwrap().map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap()).collect()
    };
    let want = |events: &[Event]| brute(events, FROM_MS, TO_MS, None, &[Field::Campaign], |_| true);

    let (narrow, wide) =
        (zigzag_testkit::fixture::config(2, ScatterMode::Hash), zigzag_testkit::fixture::config(4, ScatterMode::Hash));
    let (first, second) = (events(21, 600), events(22, 900));
    write(&narrow, &first);
    totals_equal(&report(), &want(&first));
    assert_eq!(cached(), vec![zigzag_model::layout::Layout::of(&narrow).canonical()], "the layout read is cached");
    totals_equal(&report(), &want(&first));

    write(&wide, &second);
    totals_equal(&report(), &want(&second));
    assert_eq!(cached(), vec![zigzag_model::layout::Layout::of(&wide).canonical()], "the stale entry is replaced");

    let entry = std::fs::read_dir(cache.join("zigzag").join("layouts")).unwrap().next().unwrap().unwrap().path();
    std::fs::write(&entry, "{\"version\": 2, torn").unwrap();
    totals_equal(&report(), &want(&second));
}

/// `gather compact` on a store of its own: bins that ended before --before
/// are folded (random scatter: fewer items than partials) and read with one
/// query each; reports over compacted and open bins stay equal to brute
/// force; a --before in the future is refused.
#[test]
fn compact_folds_closed_bins_and_reports_stay_exact() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("zigzag.db");
    let events = events(12, 1_500);
    {
        let table = SqliteTable::open(&db).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let layout = zigzag_model::layout::Layout::of(&zigzag_testkit::fixture::config(4, ScatterMode::Random));
        // As ingest writes it: the layout first (compaction refuses a table without one).
        rt.block_on(zigzag_model::layout::ensure(&table, &layout)).unwrap();
        rt.block_on(write_store(&table, &zigzag_testkit::fixture::config(4, ScatterMode::Random), &events));
    }
    let config = dir.path().join("zigzag.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_gather")).arg("--db").arg(&db).arg("--config").arg(&config).args(args).output()
    };
    let totals = |extra: &[&str]| {
        let mut args = vec!["totals", "--from", FROM, "--to", TO, "--format", "json"];
        args.extend_from_slice(extra);
        let out = run(&args).unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (before, _) = totals(&[]);

    let future = run(&["compact", "--before", "2099-01-01"]).unwrap();
    assert!(!future.status.success());
    assert!(String::from_utf8_lossy(&future.stderr).contains("in the future"));

    // 2026-11-01: the minute bin of 2026-10-31 and the October bins of hours and days ended.
    let out = run(&["compact", "--before", "2026-11-01", "--grace", "1s"]).unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{said}", String::from_utf8_lossy(&out.stderr));
    let numbers: Vec<u64> = said.split(|c: char| !c.is_ascii_digit()).filter_map(|w| w.parse().ok()).collect();
    // "compacted 3 bins before 2026-11-01: P partials folded into I items; D partials deleted"
    let (bins, partials, items, deleted) = (numbers[0], numbers[4], numbers[5], numbers[6]);
    assert_eq!(bins, 3, "{said}");
    assert!(items < partials && deleted == partials, "{said}");

    let (after, explained) = totals(&["--explain"]);
    assert_eq!(after, before, "the same report before and after compaction");
    assert!(explained.contains("compacted: 1 bin(s)"), "the day bin of 2026-10-31 read compacted: {explained}");
    let want = brute(&events, FROM_MS, TO_MS, None, &[], |_| true);
    let v: serde_json::Value = serde_json::from_str(&after).unwrap();
    assert_eq!(v["rows"][0]["clicks"].as_u64(), Some(want[&(None, vec![])].clicks));
}

/// On the shipped layout referrers are kept by the hour: a window off the
/// hour grouped by referrer is refused naming `--snap`; `--snap out` reads
/// the hours it touches and `--snap in` those inside it, each equal to the
/// events' over that window and said on stderr; a report a minute
/// projection answers reads the window asked, `--snap` or not.
#[test]
fn a_window_off_the_referrer_hours_is_refused_or_read_over_the_hours_snap_names() {
    let f = fixture();
    let db = f.dir.join("shipped.db");
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    rt.block_on(write_recorded(&SqliteTable::open(&db).unwrap(), &zigzag_model::Config::shipped(), &f.events));
    let run =
        |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_gather")).arg("--db").arg(&db).args(args).output().unwrap();
    let (from, to) = ("2026-10-31T06:30:00Z", "2026-11-01T18:30:00Z");
    let by_referrer = ["totals", "--group-by", "referrer", "--from", from, "--to", to, "--format", "json"];
    let refused = run(&by_referrer);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && stderr.contains("--snap out") && stderr.contains("--snap in"), "{stderr}");
    for (snap, start, end) in [("out", T0 + 6 * HOUR, T0 + 43 * HOUR), ("in", T0 + 7 * HOUR, T0 + 42 * HOUR)] {
        let out = run(&[&by_referrer[..], &["--snap", snap]].concat());
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "--snap {snap}: {stderr}");
        let read = zigzag_gather::window::Window { start, end };
        let note = format!("note: read {read} (--snap {snap}): projection referrer_country keeps hours");
        assert!(stderr.contains(&note), "--snap {snap}: {stderr}");
        let want = brute(&f.events, start, end, None, &[Field::Referrer], |_| true);
        let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        let rows = v["rows"].as_array().unwrap();
        assert_eq!(rows.len(), want.len(), "--snap {snap}: {stdout}");
        for row in rows {
            let m = &want[&(None, vec![row["referrer"].as_str().unwrap().to_string()])];
            assert_eq!((row["clicks"].as_u64(), row["impressions"].as_u64()), (Some(m.clicks), Some(m.impressions)));
        }
    }
    let by_campaign =
        ["totals", "--group-by", "campaign", "--from", from, "--to", to, "--format", "json", "--snap", "out"];
    let out = run(&by_campaign);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && !stderr.contains("note:"), "{stderr}");
    let want =
        brute(&f.events, T0 + 6 * HOUR + 30 * MINUTE, T0 + 42 * HOUR + 30 * MINUTE, None, &[Field::Campaign], |_| true);
    totals_equal(&String::from_utf8_lossy(&out.stdout), &want);
}
