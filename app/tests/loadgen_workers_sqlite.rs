//! The lease protocol on the embedded store, across processes: three
//! `loadgen --sink ingest` processes (the synthetic source, paced) share
//! eight shards through one SQLite file; one is killed with SIGKILL mid-run
//! and a new worker (a new id) joins. The survivors take the dead worker's
//! shards after the failover time, recover its flush in flight, and every
//! process exits once every shard is finished. The file's totals must equal
//! the ground truth in every rollup, every lease must be finished and every
//! lane free.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use zigzag_core::table::SortedTable;
use zigzag_gather::check::check;
use zigzag_gather::execute::ExecOptions;
use zigzag_model::{Config, Truth};
use zigzag_sqlite::SqliteTable;
use zigzag_testkit::Reaped;

fn worker(dir: &Path, id: &str) -> Reaped {
    Reaped::spawn(
        Command::new(env!("CARGO_BIN_EXE_loadgen"))
            .args(["--records", "48000", "--shards", "8", "--rate", "6000", "--seed", "5", "--sink", "ingest"])
            .args(["--worker-id", id, "--failover", "2"])
            .arg("--db")
            .arg(dir.join("z.db"))
            .arg("--truth")
            .arg(dir.join(format!("{id}.truth.json")))
            .arg("--dead-letters")
            .arg(dir.join(format!("{id}.dead.jsonl")))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(dir.join(format!("{id}.log"))).unwrap())),
    )
    .expect("spawn loadgen")
}

fn wait(child: &mut Child, deadline: Instant) -> std::process::ExitStatus {
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("a worker did not finish in time");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn three_processes_share_eight_shards_on_sqlite_and_a_kill_9_changes_no_total() {
    let dir = tempfile::tempdir().unwrap();
    let mut workers: Vec<(String, Reaped)> =
        ["w0", "w1", "w2"].iter().map(|w| (w.to_string(), worker(dir.path(), w))).collect();
    std::thread::sleep(Duration::from_secs(3));
    let (victim, mut child) = workers.remove(1);
    assert!(child.try_wait().unwrap().is_none(), "{victim} is still working when killed");
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    workers.push(("w3".into(), worker(dir.path(), "w3")));
    let deadline = Instant::now() + Duration::from_secs(180);
    for (id, child) in workers.iter_mut() {
        let status = wait(child, deadline);
        let log = std::fs::read_to_string(dir.path().join(format!("{id}.log"))).unwrap_or_default();
        assert!(status.success(), "{id}: {status}\n{log}");
    }

    let truth: Truth =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("w0.truth.json")).unwrap()).unwrap();
    let db = dir.path().join("z.db");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let table = SqliteTable::open(&db).unwrap();
    // loadgen without --config writes the shipped layout.
    let km = zigzag_model::Projections::new(&Config::shipped()).unwrap();
    let report = rt.block_on(check(&table, &km, &truth, 0, &ExecOptions::default())).unwrap();
    assert_eq!(report.mismatches(), 0, "{}", zigzag_gather::check::render(&report));

    let leases: Arc<dyn SortedTable> = Arc::new(SqliteTable::open_table(&db, "checkpoints").unwrap());
    let reader = zigzag_lease::Coordinator::new(leases, zigzag_lease::LeaseOptions::new("loadgen", "test"));
    let (held, lanes) =
        rt.block_on(async { (reader.read_leases().await.unwrap(), reader.read_lanes().await.unwrap()) });
    assert_eq!(held.len(), 8);
    assert!(held.iter().all(|l| l.finished && l.owner.is_none()), "{held:?}");
    assert!(lanes.iter().all(|l| l.owner.is_none()), "every lane freed, the dead worker's too: {lanes:?}");
}
