//! The planner weighs round trips as well as read units: on a table holding
//! only the base layout (every dimension, hour buckets, 100 scatter
//! prefixes), one referrer's day is read naively (one page per partition)
//! because `auto` would jump over the other referrers' items in many small
//! requests, one after another, for fewer units than the allowance saves;
//! asked by name, `--strategy auto` reads as asked, and the answers are
//! the same. With an allowance below the dearer way, the cheaper estimate
//! is read.

use std::process::Command;

struct Read {
    stdout: String,
    explain: String,
    requests: u64,
}

fn number_after(text: &str, label: &str) -> f64 {
    let line = text.lines().find(|l| l.trim_start().starts_with(label)).unwrap_or_else(|| panic!("{label}: {text}"));
    line.trim_start()[label.len()..].split_whitespace().next().unwrap().parse().unwrap()
}

/// The two ways' estimated RCU on the chosen candidate's line.
fn estimated_rcu(explain: &str) -> (f64, f64) {
    let line = explain.lines().find(|l| l.trim_start().starts_with("* ")).expect("a chosen candidate");
    let rcu = |way: &str| -> f64 {
        let part = line.split(&format!("{way} ~")).nth(1).unwrap();
        let before = part.split(" RCU").next().unwrap();
        before.rsplit('~').next().unwrap().parse().unwrap()
    };
    (rcu("auto"), rcu("naive"))
}

#[test]
fn one_referrers_day_on_the_base_layout_is_read_naively_in_a_fraction_of_the_requests() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("zigzag.db");
    let config = dir.path().join("base.toml");
    std::fs::write(&config, "rollups = [\"hour\"]\n[scatter]\nprefixes = 100\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .current_dir(dir.path())
        .arg("--config")
        .arg(&config)
        .arg("--db")
        .arg(&db)
        .args(["--records", "60000"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let read = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_gather"))
            .arg("--db")
            .arg(&db)
            .args(["totals", "--from", "2026-11-20", "--to", "2026-11-21", "--format", "csv", "--explain"])
            .args(["--where", "referrer=ref00001.example.com"])
            .args(extra)
            .output()
            .unwrap();
        let explain = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{explain}");
        let requests = number_after(&explain, "requests:") as u64;
        Read { stdout: String::from_utf8_lossy(&out.stdout).to_string(), explain, requests }
    };
    let planned = read(&[]);
    assert!(planned.explain.contains("strategy: naive (faster than auto"), "{}", planned.explain);
    assert!(planned.requests <= 2 * 100 + 2, "about one page per partition: {}", planned.explain);
    let auto = read(&["--strategy", "auto"]);
    assert!(auto.explain.contains("strategy: auto,"), "{}", auto.explain);
    assert!(auto.requests >= 10 * planned.requests, "auto: {} requests, naive: {}", auto.requests, planned.requests);
    assert_eq!(planned.stdout, auto.stdout, "the same totals either way");
    assert!(planned.stdout.lines().count() == 2, "{}", planned.stdout);

    // Within no allowance, the cheaper estimate is read.
    let cheapest = read(&["--rcu-allowance", "1"]);
    let (auto_rcu, naive_rcu) = estimated_rcu(&cheapest.explain);
    let want = if naive_rcu <= auto_rcu { "strategy: naive (faster" } else { "strategy: auto," };
    assert!(cheapest.explain.contains(want), "{auto_rcu} / {naive_rcu}: {}", cheapest.explain);
    assert_eq!(cheapest.stdout, auto.stdout);
}
