//! `gather layout show` as an operator runs it: ingest writes a table with
//! a layout file, `show` prints the table's layout, and ingest accepts what
//! it printed against the same table (an edited layout is refused).

use std::path::Path;
use std::process::{Command, Output};

fn run(bin: &str, args: &[&str], dir: &Path) -> Output {
    Command::new(bin).args(args).current_dir(dir).env("RUST_LOG", "warn").output().unwrap()
}

fn ingest(dir: &Path, config: &str, seed: &str) -> Output {
    let args = ["--records", "2000", "--seed", seed, "--sink", "ingest", "--db", "z.db", "--config", config];
    run(env!("CARGO_BIN_EXE_loadgen"), &args, dir)
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A table ingest wrote with `examples/layouts/with-by-referrer.toml`
/// (written beside it as `layout.toml`), and that layout's text.
fn ingested() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let layout =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/layouts/with-by-referrer.toml"))
            .unwrap();
    std::fs::write(dir.path().join("layout.toml"), &layout).unwrap();
    let out = ingest(dir.path(), "layout.toml", "1");
    assert!(out.status.success(), "the first ingest: {:?}", text(&out));
    (dir, layout)
}

#[test]
fn the_layout_shown_is_one_ingest_accepts_and_its_cadences_are_the_config_s() {
    let (dir, _) = ingested();
    let d = dir.path();

    let gather = env!("CARGO_BIN_EXE_gather");
    let out = run(gather, &["--db", "z.db", "--config", "layout.toml", "layout", "show"], d);
    let (shown, err) = text(&out);
    assert!(out.status.success(), "{err}");
    assert!(shown.starts_with("# The layout recorded in the table (digest "), "{shown}");
    assert!(shown.contains("cadences are those of --config layout.toml"), "{shown}");
    for cadence in ["by_referrer = 300000", "\"cc.hour\" = 300000", "referrer_country = 300000", "interval_ms = 10000"]
    {
        assert!(shown.contains(cadence), "the config's cadence {cadence}:\n{shown}");
    }
    for projection in ["name = \"total\"", "name = \"cc\"", "name = \"referrer_country\"", "name = \"by_referrer\""] {
        assert!(shown.contains(projection), "{projection}:\n{shown}");
    }

    // What it printed is the table's layout: ingest writes on with it.
    std::fs::write(d.join("shown.toml"), &shown).unwrap();
    let out = ingest(d, "shown.toml", "2");
    assert!(out.status.success(), "ingest with the shown layout: {:?}", text(&out));

    // Its cadences edited: still the layout (cadences are not layout).
    let slower = shown.replace("interval_ms = 10000", "interval_ms = 20000");
    std::fs::write(d.join("slower.toml"), &slower).unwrap();
    let out = ingest(d, "slower.toml", "3");
    assert!(out.status.success(), "another cadence is the same layout: {:?}", text(&out));

    // Its layout edited: refused, as any other layout is.
    let other = shown.replacen("prefixes = 16", "prefixes = 8", 1);
    assert_ne!(other, shown, "the shown layout has a scatter of 16:\n{shown}");
    std::fs::write(d.join("other.toml"), &other).unwrap();
    let out = ingest(d, "other.toml", "4");
    let (_, err) = text(&out);
    assert!(!out.status.success(), "another layout is refused");
    assert!(err.contains("another layout") && err.contains("`gather layout show` prints the table's layout"), "{err}");

    // Without --config: the default cadences, said so.
    let out = run(gather, &["--db", "z.db", "layout", "show"], d);
    let (shown, _) = text(&out);
    assert!(out.status.success());
    assert!(shown.contains("cadences are the defaults"), "{shown}");
    assert!(shown.contains("interval_ms = 2000"), "{shown}");
}

#[test]
fn a_table_without_a_layout_has_none_to_show() {
    let dir = tempfile::tempdir().unwrap();
    // A table no ingest wrote to.
    drop(zigzag_sqlite::SqliteTable::open(dir.path().join("empty.db")).unwrap());
    let out = run(env!("CARGO_BIN_EXE_gather"), &["--db", "empty.db", "layout", "show"], dir.path());
    let (_, err) = text(&out);
    assert!(!out.status.success());
    assert!(err.contains("the table records no layout"), "{err}");
    assert!(!err.contains("panicked") && !err.contains("stack backtrace"), "{err}");
}

#[test]
fn a_diff_prices_each_fill_from_the_statistics_and_says_what_cannot_be_filled() {
    let (dir, layout) = ingested();
    let d = dir.path();
    let diff = |name: &str, file: &str| {
        std::fs::write(d.join(name), file).unwrap();
        let out = run(env!("CARGO_BIN_EXE_gather"), &["--db", "z.db", "layout", "diff", name], d);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{stderr}");
        stdout
    };
    assert_eq!(diff("same.toml", &layout), "no change: the layout is the table's\n");

    let by_campaign = format!("{layout}\n[[projection]]\nname = \"by_campaign\"\ndimensions = [\"campaign\"]\nrollups = [\"hour\", \"day\"]\n");
    let said = diff("by_campaign.toml", &by_campaign);
    assert!(said.contains("- add projection by_campaign (campaign), hour\n  summed from cc hour items: ~"), "{said}");
    assert!(said.contains("- add projection by_campaign (campaign), day\n  summed from cc day items: ~"), "{said}");
    assert!(said.contains("\nall fills: ~"), "{said}");
    // The day's items by campaign are bounded by the campaigns the value
    // catalog holds times the days, far under cc's day items (campaign x
    // country).
    let day = said.split("- add projection by_campaign (campaign), day\n").nth(1).expect("the day line");
    let number = |after: &str| -> f64 {
        let at = day.find(after).expect(after) + after.len();
        day[at..].split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap()
    };
    let (read, written) = (number("items: ~"), number("at most ~"));
    assert!(written > 0.0 && written * 3.0 < read, "{written} written of {read} read:\n{said}");

    // referrer_country by the minute: nothing the table holds has referrers by the minute.
    let minutes = layout.replace(
        "name = \"referrer_country\"\ndimensions = [\"referrer\", \"country\"]\nrollups = [\"hour\", \"day\"]",
        "name = \"referrer_country\"\ndimensions = [\"referrer\", \"country\"]\nrollups = [\"minute\", \"hour\", \"day\"]",
    );
    assert_ne!(minutes, layout);
    let said = diff("minutes.toml", &minutes);
    assert!(
        said.contains("- projection referrer_country: add rollup minute\n  counted from each worker's adoption on"),
        "{said}"
    );

    // by_referrer dropped.
    let dropped = layout.replace("by_referrer", "by_referrer_again");
    let said = diff("dropped.toml", &dropped);
    assert!(
        said.contains("- drop projection by_referrer, hour\n  nothing to write: reports stop reading it"),
        "{said}"
    );
}

#[test]
fn an_applied_layout_is_filled_read_and_what_writers_must_match() {
    let (dir, layout) = ingested();
    let d = dir.path();
    let gather = |args: &[&str]| {
        let mut all = vec!["--db", "z.db"];
        all.extend_from_slice(args);
        let out = run(env!("CARGO_BIN_EXE_gather"), &all, d);
        let (stdout, stderr) = text(&out);
        (out.status.success(), stdout, stderr)
    };
    let by_campaign = format!(
        "{layout}\n[[projection]]\nname = \"by_campaign\"\ndimensions = [\"campaign\"]\nrollups = [\"hour\", \"day\"]\n"
    );
    std::fs::write(d.join("by_campaign.toml"), &by_campaign).unwrap();
    let (ok, _, err) = gather(&["layout", "apply", "by_campaign.toml"]);
    assert!(ok, "{err}");
    assert!(err.contains("layout version 2 recorded") && err.contains("filled: 4 days derived"), "{err}");
    let (ok, status, _) = gather(&["layout", "status"]);
    assert!(ok && status.contains("by_campaign hour (version 2) summed from cc hour: 2 of 2 days (100 %)"), "{status}");
    assert!(status.contains("reports read every target for any window"), "{status}");

    // `gather serve`'s /metrics says the same (refreshed in the background
    // once the server reads the table's layout).
    let (_server, addr) = zigzag_testkit::spawn_listening(
        std::process::Command::new(env!("CARGO_BIN_EXE_gather")).current_dir(d).args([
            "--db",
            "z.db",
            "serve",
            "--listen",
            "127.0.0.1:0",
        ]),
    )
    .unwrap();
    let (code, _) = zigzag_testkit::http_get(addr, "/api/v1/query?query=sum(clicks)&time=1795219200").unwrap();
    assert_eq!(code, 200);
    let gauge = |metrics: &str, name: &str, target: &str| -> Option<f64> {
        metrics
            .lines()
            .find(|l| l.starts_with(&format!("{name}{{")) && l.contains(&format!("target=\"{target}\"")))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    };
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let metrics = loop {
        let (_, metrics) = zigzag_testkit::http_get(addr, "/metrics").unwrap();
        if gauge(&metrics, "zigzag_layout_fill_days", "by_campaign hour").is_some() {
            break metrics;
        }
        assert!(std::time::Instant::now() < until, "no fill gauges after 20 s: {metrics}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    for target in ["by_campaign hour", "by_campaign day"] {
        let days = gauge(&metrics, "zigzag_layout_fill_days", target);
        assert!(days.is_some_and(|d| d > 0.0), "{target}: {metrics}");
        assert_eq!(gauge(&metrics, "zigzag_layout_fill_days_derived", target), days, "{target}: all derived");
        assert!(gauge(&metrics, "zigzag_layout_fill_items_written", target).is_some_and(|n| n > 0.0), "{metrics}");
        assert!(gauge(&metrics, "zigzag_layout_fill_write_units", target).is_some_and(|n| n > 0.0), "{metrics}");
        assert!(gauge(&metrics, "zigzag_layout_fill_read_units", target).is_some_and(|n| n > 0.0), "{metrics}");
    }
    assert!(metrics.contains("zigzag_layout_version 2"), "{metrics}");
    assert!(metrics.contains("zigzag_layout_version_adopted{version=\"2\"} 1"), "{metrics}");
    drop(_server);

    // The new projection answers what the one it was summed from answers.
    let top = |projection: &str| {
        let window = ["--from", "2026-11-19T00:00:00Z", "--to", "2026-11-23T00:00:00Z"];
        let mut args = vec!["top", "--by", "clicks", "--group-by", "campaign", "-n", "50", "--projection", projection];
        args.extend_from_slice(&window);
        let (ok, out, err) = gather(&args);
        assert!(ok, "{projection}: {err}");
        out
    };
    let from_cc = top("cc");
    assert!(from_cc.lines().count() > 5, "{from_cc}");
    assert_eq!(top("by_campaign"), from_cc);

    // Writers: the old layout is refused naming the versions; the new one
    // writes (its events before the cut reach cc only, so by_campaign is
    // read from cc until filled again).
    let out = ingest(d, "layout.toml", "2");
    let (_, err) = text(&out);
    assert!(!out.status.success(), "the superseded layout is refused");
    assert!(err.contains("version 1") && err.contains("version 2") && err.contains("gather layout show"), "{err}");
    // Another stream (the first one's shards are finished).
    let args = ["--records", "2000", "--seed", "3", "--stream", "more", "--sink", "ingest", "--db", "z.db", "--config"];
    let out = run(env!("CARGO_BIN_EXE_loadgen"), &[&args[..], &["by_campaign.toml"]].concat(), d);
    let (_, err) = text(&out);
    assert!(out.status.success() && err.contains("2000 records"), "the new layout writes: {err}");
    let refused = |projection: &str| {
        let window = ["--from", "2026-11-19T00:00:00Z", "--to", "2026-11-23T00:00:00Z"];
        let mut args = vec!["top", "--by", "clicks", "--group-by", "campaign", "--projection", projection];
        args.extend_from_slice(&window);
        let (ok, _, err) = gather(&args);
        assert!(!ok, "{projection} is read where it is not filled");
        err
    };
    let err = refused("by_campaign");
    assert!(err.contains("filling:") && err.contains("read from cc meanwhile"), "{err}");
    let (ok, _, err) = gather(&["layout", "fill"]);
    assert!(ok && err.contains("filled: 4 days derived"), "{err}");
    let from_cc = top("cc");
    assert_eq!(top("by_campaign"), from_cc, "filled again: the same answer");

    // Without --config, ingest writes the table's layout.
    let out = run(
        env!("CARGO_BIN_EXE_loadgen"),
        &["--records", "500", "--seed", "4", "--shards", "2", "--sink", "files:in"],
        d,
    );
    assert!(out.status.success(), "{:?}", text(&out));
    let inputs: Vec<String> = std::fs::read_dir(d.join("in"))
        .unwrap()
        .map(|e| format!("in/{}", e.unwrap().file_name().to_string_lossy()))
        .collect();
    let mut args = vec!["--db", "z.db", "--stream", "files"];
    args.push("--input");
    args.extend(inputs.iter().map(String::as_str));
    let out = run(env!("CARGO_BIN_EXE_ingest"), &args, d);
    assert!(out.status.success(), "ingest without --config: {:?}", text(&out));

    // Applying it again, or a change this build does not apply: refused,
    // nothing written.
    let (ok, _, err) = gather(&["layout", "apply", "by_campaign.toml"]);
    assert!(!ok && err.contains("is the table's layout already (version 2)"), "{err}");
    let respread = by_campaign.replacen("prefixes = 1\n", "prefixes = 2\n", 1);
    assert_ne!(respread, by_campaign);
    std::fs::write(d.join("respread.toml"), &respread).unwrap();
    let (ok, _, err) = gather(&["layout", "apply", "respread.toml"]);
    assert!(!ok && err.contains("cannot be applied, nothing was written") && err.contains("not built yet"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let (_, status, _) = gather(&["layout", "status"]);
    assert!(status.starts_with("layout version 2 "), "{status}");

    // Version 3 adds a projection by campaign and country, hourly; version 2's
    // target is still read only where its own fill holds it.
    let v3 = format!(
        "{by_campaign}\n[[projection]]\nname = \"by_cr\"\ndimensions = [\"campaign\", \"country\"]\nrollups = [\"hour\"]\n"
    );
    std::fs::write(d.join("v3.toml"), &v3).unwrap();
    let (ok, _, err) = gather(&["layout", "apply", "v3.toml"]);
    assert!(ok && err.contains("layout version 3 recorded"), "{err}");
    let args =
        ["--records", "2000", "--seed", "6", "--stream", "later", "--sink", "ingest", "--db", "z.db", "--config"];
    let out = run(env!("CARGO_BIN_EXE_loadgen"), &[&args[..], &["v3.toml"]].concat(), d);
    assert!(out.status.success(), "{:?}", text(&out));
    let err = refused("by_campaign");
    assert!(err.contains("layout version 2; read from cc"), "version 2's target, stale: {err}");
    let err = refused("by_cr");
    assert!(err.contains("layout version 3; read from cc"), "version 3's, stale: {err}");
    let (ok, _, err) = gather(&["layout", "fill"]);
    assert!(ok && err.matches("filled:").count() == 2, "each version's targets: {err}");
    let from_cc = top("cc");
    assert_eq!(top("by_campaign"), from_cc);
    assert_eq!(top("by_cr"), from_cc);
    let (_, status, _) = gather(&["layout", "status"]);
    assert!(status.contains("by_campaign hour (version 2)") && status.contains("by_cr hour (version 3)"), "{status}");

    // Undone: the first layout again, as version 4; the dropped parts'
    // items deleted, the rest untouched.
    let (ok, _, err) = gather(&["layout", "apply", "layout.toml"]);
    assert!(ok && err.contains("layout version 4 recorded") && err.contains("nothing to fill"), "{err}");
    let err = refused("by_campaign");
    assert!(err.contains("by_campaign"), "{err}");
    let count = |name: &str| {
        let conn = rusqlite::Connection::open(d.join("z.db")).unwrap();
        let like = format!("%#{name}#%");
        let n: i64 = conn.query_row("SELECT count(*) FROM items WHERE pk LIKE ?1", [like], |r| r.get(0)).unwrap();
        n
    };
    let kept = count("cc");
    assert!(count("by_campaign") > 0 && count("by_cr") > 0, "left until deleted");
    let (ok, out, err) = gather(&["layout", "delete-dropped", "--wcu-per-sec", "100000"]);
    assert!(ok && out.starts_with("deleted ") && out.contains("bytes freed"), "{out}{err}");
    assert!(err.contains("by_campaign hour (last written by layout version 3)"), "{err}");
    assert_eq!((count("by_campaign"), count("by_cr")), (0, 0), "{out}");
    assert_eq!(count("cc"), kept, "only the dropped parts");
    assert_eq!(top("cc"), from_cc, "answers unchanged");
    let (ok, out, err) = gather(&["layout", "delete-dropped"]);
    assert!(ok && err.contains("nothing to delete") || out.starts_with("deleted 0 items"), "{out}{err}");

    // Version 5 adds a measure to cc: counted from its cut on (after every
    // event here), so a report over the data leaves it out and says so,
    // and one asking it is refused naming the cut.
    let (ok, shown, _) = gather(&["layout", "show"]);
    let cc_measures = "    \"cost_max\",\n]\nname = \"cc\"";
    assert!(ok && shown.contains(cc_measures), "{shown}");
    let v5 = shown.replace(cc_measures, "    \"cost_max\",\n    \"cost_total\",\n]\nname = \"cc\"")
        + "\n[[measure]]\nname = \"cost_total\"\ntype = \"sum\"\nfield = \"cost\"\n";
    std::fs::write(d.join("v5.toml"), &v5).unwrap();
    let (ok, out, err) = gather(&["layout", "diff", "v5.toml"]);
    let said = format!("{out}{err}");
    assert!(ok && said.contains("projection cc: add measure(s) cost_total"), "{said}");
    assert!(said.contains("costs: cost_total add their bytes to cc's items, no write"), "{said}");
    let (ok, _, err) = gather(&["layout", "apply", "v5.toml"]);
    assert!(ok && err.contains("layout version 5 recorded") && err.contains("cost_total counted from"), "{err}");
    let (_, status, _) = gather(&["layout", "status"]);
    assert!(status.contains("measure cost_total of cc (version 5): counted from "), "{status}");
    let window = ["--from", "2026-11-19T00:00:00Z", "--to", "2026-11-23T00:00:00Z"];
    let (ok, out, err) = gather(&[&["totals", "--group-by", "campaign"][..], &window].concat());
    assert!(
        ok && err.contains("note: measure cost_total (and any ratio of it) not shown: added by layout version 5"),
        "{err}"
    );
    assert!(!out.contains("cost_total") && out.contains("clicks"), "{out}");
    let (ok, _, err) = gather(&[&["totals", "--measures", "cost_total"][..], &window].concat());
    assert!(!ok && err.contains("cost_total") && err.contains("counted from") && !err.contains("panicked"), "{err}");
}

#[test]
fn a_cut_past_future_dated_events_is_refused_unless_asked_for() {
    let (dir, layout) = ingested();
    let d = dir.path();
    // A producer's clock years ahead: accepted by ingest (before
    // --max-event-time), and the newest events the table holds.
    let args = [
        "--records",
        "200",
        "--seed",
        "9",
        "--stream",
        "future",
        "--start",
        "2030-01-01T00:00:00Z",
        "--span",
        "1h",
        "--sink",
        "ingest",
        "--db",
        "z.db",
        "--config",
        "layout.toml",
    ];
    let out = run(env!("CARGO_BIN_EXE_loadgen"), &args, d);
    assert!(out.status.success(), "{:?}", text(&out));
    let by_campaign = format!(
        "{layout}\n[[projection]]\nname = \"by_campaign\"\ndimensions = [\"campaign\"]\nrollups = [\"minute\", \"hour\"]\n"
    );
    std::fs::write(d.join("by_campaign.toml"), &by_campaign).unwrap();
    let apply = |extra: &[&str]| {
        let mut all = vec!["--db", "z.db", "layout", "apply", "by_campaign.toml"];
        all.extend_from_slice(extra);
        let out = run(env!("CARGO_BIN_EXE_gather"), &all, d);
        (out.status.success(), text(&out).1)
    };
    let (ok, err) = apply(&[]);
    assert!(!ok, "{err}");
    assert!(err.contains("future-dated") && err.contains("it would be 2030-01-01T01:00:00Z"), "{err}");
    assert!(err.contains("Nothing was written") && err.contains("--cut-past-future-events"), "{err}");
    assert!(!err.contains("panicked") && !err.contains("backtrace"), "{err}");
    let status = run(env!("CARGO_BIN_EXE_gather"), &["--db", "z.db", "layout", "status"], d);
    assert!(text(&status).0.starts_with("layout version 1 "), "{:?}", text(&status));
    let (ok, err) = apply(&["--cut-past-future-events"]);
    assert!(
        ok && err.contains("layout version 2 recorded") && err.contains("the cut is 2030-01-01T01:00:00Z"),
        "{err}"
    );
}
