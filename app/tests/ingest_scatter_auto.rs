//! `prefixes = "auto"` end to end on the embedded store: the scatter rule
//! derives each projection's prefix count from the declared writers,
//! cardinalities and cadences (shown by `--print-config`), the table
//! records the derived counts and gather reads them back exactly; a later
//! writer whose inputs derive other counts takes the table's and says so,
//! while a writer that gives another count outright is refused.

use std::process::{Command, Output};
use zigzag_sqlite::SqliteTable;

fn run(bin: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let exe = match bin {
        "ingest" => env!("CARGO_BIN_EXE_ingest"),
        "gather" => env!("CARGO_BIN_EXE_gather"),
        _ => env!("CARGO_BIN_EXE_loadgen"),
    };
    Command::new(exe).args(args).envs(env.iter().copied()).env("RUST_LOG", "info").output().unwrap()
}

fn ok(out: Output) -> (String, String) {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

const CONFIG: &str = r#"
rollups = ["minute", "hour"]
[scatter]
prefixes = "auto"
writers = 20
events_per_sec = 20000
cardinality = { referrer = 10000, campaign = 40, country = 12 }

[[projection]]
name = "cc"
dimensions = ["campaign", "country"]
rollups = ["minute", "hour"]

[[projection]]
name = "total"
rollups = ["minute"]
[projection.scatter]
prefixes = 1

[flush]
interval_ms = 10000
every_ms = { "base.hour" = 300000, "cc.hour" = 300000 }
"#;

#[test]
fn derived_prefix_counts_are_recorded_read_back_and_kept_by_later_writers() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let (db, conf, truth, events) = (p("z.db"), p("auto.toml"), p("truth.json"), p("events"));
    std::fs::write(&conf, CONFIG).unwrap();

    // The rule: the base's 4.8 M keys a minute at 20 writers every 10 s
    // are capped by the stream's 20,000 events/s: 40 prefixes; cc's 480
    // keys x 20 / 10 s = 960 writes/s: 2; total keeps its own 1.
    let (printed, _) = ok(run("ingest", &["--config", &conf, "--input", "x.jsonl", "--print-config"], &[]));
    let line = |key: &str| printed.lines().find(|l| l.trim_start().starts_with(key)).unwrap_or_default().to_string();
    assert!(line("scatter.prefixes ").contains(" 40 (auto: 4800000 keys a bucket, 20000 writes/s"), "{printed}");
    assert!(line("projection.cc ").contains("2 prefix(es) hash (auto: 480 keys a bucket, 960 writes/s"), "{printed}");
    assert!(line("projection.total ").contains("1 prefix(es) hash") && !line("projection.total ").contains("(auto:"));
    assert!(line("scatter.cardinality ").contains("campaign=40,country=12,referrer=10000"), "{printed}");

    // Written with the derived counts; gather takes them from the table.
    ok(run(
        "loadgen",
        &["--records", "3000", "--shards", "2", "--sink", &format!("files:{events}"), "--truth", &truth],
        &[],
    ));
    let inputs = [format!("{events}/shard-000.jsonl"), format!("{events}/shard-001.jsonl")];
    let ingest = |conf: &str, env: &[(&str, &str)]| {
        let args =
            ["--db", &db, "--config", conf, "--dead-letters", &p("dead.jsonl"), "--input", &inputs[0], &inputs[1]];
        run("ingest", &args, env)
    };
    ok(ingest(&conf, &[]));
    let table = SqliteTable::open(std::path::Path::new(&db)).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let stored = rt
        .block_on(zigzag_model::versions::load_layout(&table))
        .unwrap()
        .expect("the first writer recorded the layout");
    assert_eq!(stored.scatter_prefixes, 40);
    let counts: Vec<(String, u32)> = stored.projections.iter().map(|p| (p.name.clone(), p.scatter.prefixes)).collect();
    assert_eq!(counts, vec![("cc".to_string(), 2), ("total".to_string(), 1)]);
    let (checked, _) = ok(run("gather", &["--db", &db, "check", "--truth", &truth], &[]));
    assert!(checked.contains("all groups MATCH"), "{checked}");

    // Twice the writers and the rate derive other counts (80 and 4): the
    // table's hold, said in the log; the records, read already, are not
    // read again, and the totals stay exact.
    let (_, log) = ok(ingest(&conf, &[("ZIGZAG_SCATTER_WRITERS", "40"), ("ZIGZAG_SCATTER_EVENTS_PER_SEC", "40000")]));
    assert!(log.contains("scatter prefixes of base: 40, as the table records them (the rule derives 80 now"), "{log}");
    assert!(log.contains("scatter prefixes of cc: 2, as the table records them (the rule derives 4 now"), "{log}");
    let (checked, _) = ok(run("gather", &["--db", &db, "check", "--truth", &truth], &[]));
    assert!(checked.contains("all groups MATCH"), "{checked}");

    // A count given outright is the operator's word: refused where it
    // differs from the table's, naming it.
    let out = ingest(&conf, &[("ZIGZAG_SCATTER_PREFIXES", "16")]);
    let why = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && why.contains("scatter.prefixes"), "{why}");

    // An input given only by a flag or a variable completes the file.
    std::fs::write(
        p("flagged.toml"),
        "[scatter]\nprefixes = \"auto\"\ncardinality = { campaign = 40, country = 12, referrer = 10 }\n",
    )
    .unwrap();
    let (printed, _) = ok(run(
        "ingest",
        &["--config", &p("flagged.toml"), "--input", "x.jsonl", "--print-config"],
        &[("ZIGZAG_SCATTER_WRITERS", "100")],
    ));
    assert!(printed.contains("(auto: 4800 keys a bucket, 240000 writes/s at minute every 2000 ms"), "{printed}");

    // Inputs missing: refused before anything is read, naming what to add.
    std::fs::write(p("bare.toml"), "[scatter]\nprefixes = \"auto\"\nwriters = 4\n").unwrap();
    let out = run("ingest", &["--db", &p("other.db"), "--config", &p("bare.toml"), "--input", &inputs[0]], &[]);
    let why = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && why.contains("needs the cardinality of dimension referrer"), "{why}");
}
