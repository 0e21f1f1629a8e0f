//! `gather zbench` as a user runs it: files in, report or error out.

use std::path::Path;
use std::process::Command;

const SCHEMA: &str = r#"
[[dimension]]
name = "t"
type = "timestamp"
unit = "second"
origin = "2016-01-01T00:00:00Z"
bits = 20
[[dimension]]
name = "x"
type = "scaled"
min = 0.0
max = 100.0
bits = 10
[[dimension]]
name = "c"
type = "int"
bits = 7
"#;

/// Deterministic rows: (t seconds after origin, x, c).
fn rows(n: usize) -> Vec<(i64, f64, i64)> {
    let mut s = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    (0..n).map(|_| ((next() % 900_000) as i64, (next() % 100_000) as f64 / 1000.0, (next() % 61) as i64 - 20)).collect()
}

const ORIGIN: i64 = 1_451_606_400;

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn gather(args: &[&Path], extra: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gather"));
    cmd.arg("zbench")
        .arg("--csv")
        .arg(args[0])
        .arg("--schema")
        .arg(args[1])
        .arg("--queries")
        .arg(args[2])
        .args(extra)
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE");
    cmd.output().unwrap()
}

#[test]
fn every_strategy_returns_the_brute_force_matches() {
    let dir = tempfile::tempdir().unwrap();
    let data = rows(5000);
    let mut csv = String::from("t,x,c,note\n");
    for (t, x, c) in &data {
        csv.push_str(&format!("{},{x:.3},{c},n{}\n", ORIGIN + t, c % 3));
    }
    let csv = write(dir.path(), "d.csv", &csv);
    let schema = write(dir.path(), "s.toml", SCHEMA);
    let queries = write(
        dir.path(),
        "q.toml",
        &format!(
            "[[query]]\nname = 'narrow'\nt = [{}, {}]\nx = [10.5, 12.25]\n\n\
             [[query]]\nname = 'slab'\nc = 0\n\n\
             [[query]]\nname = 'mixed'\nx = {{ min = 90 }}\nc = {{ in = [-3, 5, 7] }}\nnote = 'n1'\n",
            ORIGIN + 100_000,
            ORIGIN + 400_000
        ),
    );
    let out = gather(&[&csv, &schema, &queries], &["--json"]);
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let expected = [
        data.iter().filter(|(t, x, _)| (100_000..=400_000).contains(t) && (10.5..=12.25).contains(x)).count(),
        data.iter().filter(|(_, _, c)| *c == 0).count(),
        data.iter().filter(|(_, x, c)| *x >= 90.0 && [-3, 5, 7].contains(c) && c % 3 == 1).count(),
    ];
    assert!(expected.iter().all(|&n| n > 0), "queries should match something: {expected:?}");
    let queries = report["queries"].as_array().unwrap();
    assert_eq!(report["rows"], 5000);
    for (q, want) in queries.iter().zip(expected) {
        let runs = q["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 8, "timestamp index + seven strategies (costed given each partition's count)");
        for r in runs {
            assert_eq!(r["returned"].as_u64().unwrap() as usize, want, "{} / {}", q["name"], r["strategy"]);
            assert!(r["scanned"].as_u64() >= r["returned"].as_u64());
        }
        let get = |s: &str| runs.iter().find(|r| r["strategy"].as_str().unwrap().starts_with(s)).unwrap();
        assert!(get("adaptive")["scanned"].as_u64() <= get("naive")["scanned"].as_u64());
    }
    // The narrow box (deterministic data): page-jump scans a fraction of
    // the naive range (349 vs 1147 when written), adaptive stays near the
    // matches (68 for 33).
    let narrow = queries[0]["runs"].as_array().unwrap();
    let scanned = |s: &str| narrow.iter().find(|r| r["strategy"] == s).unwrap()["scanned"].as_u64().unwrap();
    assert!(scanned("page-jump(N=16)") * 3 < scanned("naive"));
    assert!(scanned("adaptive") <= 3 * expected[0] as u64, "adaptive scanned {}", scanned("adaptive"));

    // The table output names every strategy.
    let out = gather(&[&csv, &schema, &queries_path(dir.path())], &[]);
    let text = String::from_utf8(out.stdout).unwrap();
    for s in
        ["t index", "naive", "precise(R=256)", "page-jump(N=16)", "adaptive", "auto", "costed", "seed-001 estimate"]
    {
        assert!(text.contains(s), "{s} missing from:\n{text}");
    }
}

fn queries_path(dir: &Path) -> std::path::PathBuf {
    dir.join("q.toml")
}

#[test]
fn bad_input_names_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let schema = write(dir.path(), "s.toml", SCHEMA);
    let good_q = write(dir.path(), "q.toml", "[[query]]\nname = 'a'\nc = 1\n");
    let run = |csv: &str, q: &Path, schema: &Path| {
        let csv = write(dir.path(), "d.csv", csv);
        let out = gather(&[&csv, schema, q], &[]);
        assert!(!out.status.success());
        String::from_utf8(out.stderr).unwrap()
    };
    let ok_row = format!("{},1.5,3\n", ORIGIN + 5);
    let err = run(&format!("t,x,c\n{ok_row}{ok_row}{},abc,3\n", ORIGIN), &good_q, &schema);
    assert!(err.contains("CSV line 4: dimension \"x\": expected a number, got \"abc\""), "{err}");
    let err = run(&format!("t,x,c\n{ok_row}{},150,3\n", ORIGIN), &good_q, &schema);
    assert!(err.contains("CSV line 3: dimension \"x\": 150 is out of range 0..=100"), "{err}");
    let err = run(&format!("t,x,c\n{}x,1,3\n", ORIGIN), &good_q, &schema);
    assert!(err.contains("CSV line 2: dimension \"t\""), "{err}");
    let err = run("t,y,c\n", &good_q, &schema);
    assert!(err.contains("CSV line 1: the header has no column \"x\""), "{err}");
    let bad_q = write(dir.path(), "bad.toml", "[[query]]\nname = 'a'\nc = [1, 2, 3]\n");
    let err = run(&format!("t,x,c\n{ok_row}"), &bad_q, &schema);
    assert!(
        err.contains("query file, line 3: query \"a\", field \"c\": a range is [low, high]; got 3 elements"),
        "{err}"
    );
    let bad_q = write(dir.path(), "bad2.toml", "[[query]]\nname = 'a'\n\nx = 'wide'\n");
    let err = run(&format!("t,x,c\n{ok_row}"), &bad_q, &schema);
    assert!(err.contains("query file, line 4: query \"a\", field \"x\": expected a number, got \"wide\""), "{err}");
    let bad_schema = write(dir.path(), "bad.toml.s", "[[dimension]]\nname = 'x'\ntype = 'uint'\n");
    let err = run(&format!("t,x,c\n{ok_row}"), &good_q, &bad_schema);
    assert!(err.contains("dimension \"x\": type \"uint\" needs `bits`"), "{err}");
}
