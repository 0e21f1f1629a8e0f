//! Exactly-once under `kill -9`: the real `ingest` binary consumes JSONL
//! shards into a SQLite file and is killed with SIGKILL at random moments
//! (at least 20 times while it is working), restarted each time, then
//! allowed to finish. The store's totals must equal the generator's ground
//! truth exactly (no loss, no double count), and the dead-letter file must
//! hold every malformed record. The layout has a quantile measure: its
//! sketches must equal the truth's byte for byte too. Meanwhile `gather` reads the same file from
//! this process (WAL: readers never block the writer).

use rand::{Rng, SeedableRng};
use std::collections::HashSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use zigzag_gather::check::check;
use zigzag_gather::execute::ExecOptions;
use zigzag_gather::filter::FilterSet;
use zigzag_gather::gather;
use zigzag_gather::plan::PlanRequest;
use zigzag_gather::window::WindowSpec;
use zigzag_loadgen::generator::Generated;
use zigzag_loadgen::{truth, write_shard_files, GenConfig, Generator};
use zigzag_model::{Config, KeyModel};
use zigzag_sqlite::SqliteTable;
use zigzag_testkit::Reaped;

const KILLS: usize = 20;

/// Small generations and a short interval (many flushes, so kills land
/// before, during and after flushes); the shipped measures and a quantile
/// of the cost, whose sketch items add counts and so must be written
/// exactly once like the counters.
const CONFIG: &str = r#"
[flush]
interval_ms = 40
max_keys = 3000
[[measure]]
name = "clicks"
type = "count"
where = "type = click"
[[measure]]
name = "impressions"
type = "count"
where = "type = impression"
[[measure]]
name = "cost"
type = "sum"
field = "cost"
[[measure]]
name = "cost_min"
type = "min"
field = "cost"
[[measure]]
name = "cost_max"
type = "max"
field = "cost"
[[measure]]
name = "cost_q"
type = "quantile"
field = "cost"
"#;
const STREAM: &str = "kill9";

/// Every item of one lease-table partition, read from the file as it is.
fn lease_items(db: &Path, pk: &str) -> Vec<zigzag_core::table::Item> {
    use zigzag_core::table::{QueryRequest, SortKeyCondition, SortedTable};
    let t = SqliteTable::open_table(db, "checkpoints").unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(t.query(&QueryRequest::new(pk, SortKeyCondition::Any))).unwrap().items
}

/// Lanes with a flush begun and not committed.
fn pending_flushes(db: &Path) -> usize {
    let lanes = lease_items(db, zigzag_lease::items::LANES_PK);
    lanes.iter().filter(|i| zigzag_lease::Lane::from_item(i).unwrap().in_flight().is_some()).count()
}

/// Records committed so far: the sum of the shards' checkpoints (a JSONL
/// position is the line number).
fn committed(db: &Path) -> u64 {
    lease_items(db, &zigzag_lease::items::shards_pk(STREAM))
        .iter()
        .filter_map(|i| zigzag_lease::ShardLease::from_item(i).unwrap().checkpoint.earliest())
        .map(|cp| cp.seq.as_u64().expect("a line number"))
        .sum()
}

/// How long the next run lives before its kill, and the mean it was drawn around.
struct Wait {
    ms: u64,
    mean_ms: u64,
}

/// Random around a mean that fits the kills left into about half the work
/// left, at the speed measured so far: the faster of the last three runs'
/// and the overall one, so a machine that speeds up does not let ingest
/// finish first. One run gets at most a quarter of the work left.
fn next_wait(rng: &mut impl Rng, progress: &[(Duration, u64)], mean_ms: u64, left: u64, kills_left: usize) -> Wait {
    let last = progress.last().expect("starts with (0, 0)");
    let speed = |from: &(Duration, u64)| (last.1 - from.1) as f64 / (last.0 - from.0).as_millis().max(1) as f64;
    let per_ms = speed(&progress[progress.len().saturating_sub(4)]).max(speed(&progress[0]));
    let (mean_ms, cap_ms) = if per_ms > 0.0 {
        let left_ms = left as f64 / per_ms;
        ((left_ms / (2 * kills_left) as f64) as u64, (left_ms / 4.0) as u64)
    } else if progress.len() > 1 {
        // Killed before anything was committed: live longer.
        (mean_ms * 2, u64::MAX)
    } else {
        (mean_ms, u64::MAX) // the calibration's
    };
    // Bounded, so a poor estimate cannot stall the test.
    let mean_ms = mean_ms.clamp(10, 30_000);
    let ms = rng.gen_range(mean_ms / 10..=mean_ms * 19 / 10).min(cap_ms);
    Wait { ms, mean_ms }
}

#[test]
fn totals_are_exact_after_repeated_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let gen = Generator::new(GenConfig {
        seed: 9,
        shards: 3,
        records: 150_000,
        referrers: 500,
        campaigns: 10,
        malformed_fraction: 0.002,
        span_ms: 6 * 3_600_000,
        ..Default::default()
    });
    let truth = truth::compute_for(&gen, &Config::from_toml(CONFIG).unwrap()).unwrap();
    let inputs = write_shard_files(&gen, dir.path(), || {}).unwrap();
    let config_path = dir.path().join("zigzag.toml");
    std::fs::write(&config_path, CONFIG).unwrap();
    let db = dir.path().join("zigzag.db");
    let dead = dir.path().join("dead.jsonl");
    let spawn = |db: &Path, inputs: &[std::path::PathBuf]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ingest"));
        cmd.arg("--db").arg(db).arg("--config").arg(&config_path).arg("--dead-letters").arg(&dead);
        // The same worker id every time: a restart takes over its killed
        // predecessor's lane at once instead of waiting out the failover.
        cmd.arg("--batch").arg("200").arg("--worker-id").arg("kill9").arg("--stream").arg(STREAM);
        cmd.arg("--input").args(inputs);
        cmd.env("RUST_LOG", "warn").stdout(Stdio::null()).stderr(Stdio::piped());
        Reaped::spawn(&mut cmd).expect("spawn ingest")
    };
    let run = || spawn(&db, &inputs);

    // Calibrate on a tenth of the data for the first wait; after each kill
    // the next is set from the progress so far (the machine's speed drifts).
    let calib_dir = dir.path().join("calibration");
    std::fs::create_dir(&calib_dir).unwrap();
    let small = Generator::new(GenConfig { records: gen.config().records / 10, ..gen.config().clone() });
    let started = Instant::now();
    let out = spawn(&calib_dir.join("zigzag.db"), &write_shard_files(&small, &calib_dir, || {}).unwrap())
        .wait_with_output()
        .unwrap();
    assert!(out.status.success(), "calibration run failed: {}", String::from_utf8_lossy(&out.stderr));
    let whole_run_ms = started.elapsed().as_millis() as u64 * 10;
    let mut mean_ms = (whole_run_ms / (2 * KILLS as u64)).max(10);
    std::fs::remove_file(&dead).unwrap();
    let total = gen.config().records;
    // (time alive, records committed) after each kill, to measure the speed.
    let mut progress: Vec<(Duration, u64)> = vec![(Duration::ZERO, 0)];
    let mut alive = Duration::ZERO;

    let rt = tokio::runtime::Runtime::new().unwrap();
    let config = Config::from_toml(CONFIG).unwrap();
    let km = KeyModel::new(&config).unwrap();
    let reader = SqliteTable::open(&db).unwrap();
    let mut reads = 0;
    let mut rng = rand::rngs::StdRng::seed_from_u64(20261121);
    let mut kills = 0;
    let mut restarts = 0;
    let mut mid_flush = 0;
    let deadline = Instant::now() + Duration::from_secs(600);
    while kills < KILLS && Instant::now() < deadline {
        let remaining = total - progress.last().unwrap().1;
        let wait = next_wait(&mut rng, &progress, mean_ms, remaining, KILLS - kills);
        let mut child = run();
        restarts += 1;
        let started = Instant::now();
        // gather reads while ingest writes from another process (WAL):
        // the read must succeed (its totals are a snapshot, not final).
        let hour = PlanRequest {
            window: WindowSpec::Absolute { from: "2026-11-20T01:00:00Z".into(), to: "2026-11-20T02:00:00Z".into() },
            rollup: None,
            step: None,
            timeseries: false,
            filters: FilterSet::default(),
            now: 0,

            source: Default::default(),
            mixing: None,
            snap: None,
            filling: Default::default(),
        };
        let snapshot = rt.block_on(gather(&reader, &config, hour, vec![], &ExecOptions::default()));
        assert!(snapshot.is_ok(), "a read during ingestion failed: {:?}", snapshot.err());
        reads += 1;
        std::thread::sleep(Duration::from_millis(wait.ms).saturating_sub(started.elapsed()));
        match child.try_wait().unwrap() {
            None => {
                child.kill().unwrap(); // SIGKILL
                child.wait().unwrap();
                alive += started.elapsed();
                kills += 1;
                if pending_flushes(&db) > 0 {
                    mid_flush += 1;
                }
                progress.push((alive, committed(&db)));
                mean_ms = wait.mean_ms;
            }
            Some(status) => {
                let mut err = String::new();
                std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
                assert!(status.success(), "ingest failed on its own: {err}");
                break; // finished before we could kill it
            }
        }
    }
    assert!(
        kills >= KILLS,
        "only {kills} kills landed while ingest was working ({restarts} starts, last mean wait {mean_ms} ms, \
         (ms alive, records committed) after each kill: {:?})",
        progress.iter().map(|(t, n)| (t.as_millis(), *n)).collect::<Vec<_>>()
    );
    // The interesting kills: between a flush's begin and its commit, so the
    // restart has to finish that flush (some items applied, some not).
    assert!(mid_flush >= 1, "no kill landed inside a flush ({kills} kills)");
    eprintln!(
        "{kills} kills, {mid_flush} inside a flush, {reads} concurrent reads; calibration {whole_run_ms} ms for the \
         whole run; (ms alive, records committed of {total}) after each kill: {:?}",
        progress.iter().map(|(t, n)| (t.as_millis(), *n)).collect::<Vec<_>>()
    );
    let out = run().wait_with_output().unwrap();
    assert!(out.status.success(), "final run failed: {}", String::from_utf8_lossy(&out.stderr));

    let report = rt
        .block_on(check(&reader, &zigzag_model::Projections::from(km.clone()), &truth, 0, &ExecOptions::default()))
        .unwrap();
    assert_eq!(report.mismatches(), 0, "after {kills} kills:\n{}", zigzag_gather::check::render(&report));

    // Every malformed record is in the dead-letter file (at least once: a
    // kill between the file sync and the checkpoint commit repeats some).
    let mut want = HashSet::new();
    let mut buf = Vec::new();
    for s in 0..gen.config().shards {
        for seq in 1..=gen.shard_len(s) {
            if let Generated::Malformed(_) = gen.record(s, seq, &mut buf) {
                want.insert((Generator::shard_id(s), seq.to_string()));
            }
        }
    }
    let text = std::fs::read_to_string(&dead).unwrap();
    let got: HashSet<(String, String)> = text
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (v["shard"].as_str().unwrap().to_string(), v["seq"].as_str().unwrap().to_string())
        })
        .collect();
    assert_eq!(got, want, "dead letters differ from the malformed records");
    assert_eq!(want.len() as u64, truth.malformed);
}
