//! Many `ingest` processes on one Kinesis stream (kinesalite) and one
//! DynamoDB table (DynamoDB Local), while a producer writes at a steady
//! rate, with the things that happen to workers in production:
//!
//! - `kill -9` of a random worker every few seconds, restarted under a new
//!   id (a new pod): every shard it held resumes — its checkpoint moves
//!   past where it was at the kill, which only another worker can do. How
//!   long that takes is a benchmark (BENCHMARKS.md, "Failover"), printed
//!   here but not asserted: on a 2-core machine it depends on how fast
//!   DynamoDB Local writes the dead worker's flush again;
//! - SIGSTOP of a worker past its expiry while another takes over, then
//!   SIGCONT: it is fenced and its late writes change nothing;
//! - a rolling SIGTERM restart of every worker: each one's leases are taken
//!   over released, well before they could have expired.
//!
//! After each, the producer stops, the workers catch up (the store is
//! polled until `gather check` matches), they are stopped with SIGTERM, and
//! the totals must equal the ground truth exactly in every rollup.
//! The tests run one at a time (each starts several processes).

use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use zigzag_aws::emulator;
use zigzag_core::table::{QueryRequest, SortKeyCondition, SortedTable};
use zigzag_dynamodb::DynamoTable;
use zigzag_gather::check;
use zigzag_gather::execute::ExecOptions;
use zigzag_kinesis::stream::ensure_stream;
use zigzag_kinesis::Producer;
use zigzag_lease::items::{shards_pk, Lane, LANES_PK};
use zigzag_lease::ShardLease;
use zigzag_loadgen::kinesis_sink::{produce, PartitionKey, SinkOptions};
use zigzag_loadgen::{truth, GenConfig, Generator};
use zigzag_model::{Config, KeyModel, Position, Truth};
use zigzag_testkit::Reaped;

static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Env {
    dir: tempfile::TempDir,
    stream: String,
    kinesis_url: String,
    dynamo_url: String,
    config: PathBuf,
    failover: Duration,
}

fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("{name}-{}-{}", std::process::id(), nanos % 1_000_000_000_000)
}

fn flush_config() -> Config {
    let mut c = Config::default();
    c.flush.interval_ms = 1000;
    c
}

impl Env {
    async fn new(name: &str, shards: i32, failover: Duration) -> Env {
        let kinesis_url = emulator::endpoint_in("ZIGZAG_KINESALITE_ENDPOINT").unwrap_or_else(|e| panic!("{e}"));
        let dynamo_url = emulator::endpoint("DYNAMODB").unwrap_or_else(|e| panic!("{e}"));
        let stream = unique(name);
        let kinesis = zigzag_kinesis::client(&emulator::options_at(kinesis_url.clone())).await;
        ensure_stream(&kinesis, &stream, shards).await.expect("create stream");
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("zigzag.toml");
        std::fs::write(&config, "[flush]\ninterval_ms = 1000\n").unwrap();
        Env { dir, stream, kinesis_url, dynamo_url, config, failover }
    }

    fn spawn(&self, worker: &str) -> Reaped {
        let child = Command::new(env!("CARGO_BIN_EXE_ingest"))
            .args(["--kinesis", &self.stream, "--dynamodb", &self.stream, "--worker-id", worker])
            .args(["--failover", &self.failover.as_secs_f64().to_string(), "--relist", "2", "--max-pause", "1"])
            .arg("--config")
            .arg(&self.config)
            .arg("--dead-letters")
            .arg(self.dir.path().join(format!("{worker}.dead.jsonl")))
            .env("AWS_ENDPOINT_URL_KINESIS", &self.kinesis_url)
            .env("AWS_ENDPOINT_URL_DYNAMODB", &self.dynamo_url)
            .env("AWS_ACCESS_KEY_ID", emulator::ACCESS_KEY)
            .env("AWS_SECRET_ACCESS_KEY", emulator::SECRET_KEY)
            .env("AWS_REGION", emulator::REGION)
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(self.dir.path().join(format!("{worker}.log"))).unwrap()))
            .spawn()
            .expect("spawn ingest");
        Reaped::from(child)
    }

    fn log(&self, worker: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{worker}.log"))).unwrap_or_default()
    }

    async fn tables(&self) -> (DynamoTable, DynamoTable) {
        let client = zigzag_dynamodb::client(&emulator::options_at(self.dynamo_url.clone())).await;
        // ingest creates both on start: wait for them.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ok = zigzag_dynamodb::ensure_table(&client, &self.stream, zigzag_dynamodb::Billing::OnDemand, false)
                .await
                .is_ok()
                && zigzag_dynamodb::ensure_table(
                    &client,
                    &format!("{}-checkpoints", self.stream),
                    zigzag_dynamodb::Billing::OnDemand,
                    false,
                )
                .await
                .is_ok();
            if ok || Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        (
            DynamoTable::new(client.clone(), &self.stream),
            DynamoTable::new(client, format!("{}-checkpoints", self.stream)),
        )
    }

    /// A producer writing `gen` at `rate` records/s; cancelled token when done.
    fn produce(&self, gen: &Generator, rate: f64) -> (tokio::task::JoinHandle<u64>, CancellationToken) {
        let done = CancellationToken::new();
        let (gen, stream, url, d) = (gen.clone(), self.stream.clone(), self.kinesis_url.clone(), done.clone());
        let task = tokio::spawn(async move {
            let client = zigzag_kinesis::client(&emulator::options_at(url)).await;
            let mut producer = Producer::new(client, &stream);
            let opts = SinkOptions { partition_key: PartitionKey::Random, rate: Some(rate), kpl_max_bytes: None };
            let sent = produce(&gen, &mut producer, &opts, |_| {}).await.expect("produce");
            d.cancel();
            sent
        });
        (task, done)
    }
}

fn generator(seed: u64, records: u64) -> Generator {
    Generator::new(GenConfig {
        seed,
        shards: 4,
        records,
        referrers: 40,
        campaigns: 5,
        span_ms: 3 * 3_600_000,
        malformed_fraction: 0.005,
        ..GenConfig::default()
    })
}

async fn leases(table: &DynamoTable, stream: &str) -> Vec<ShardLease> {
    let mut req = QueryRequest::new(shards_pk(stream), SortKeyCondition::Any);
    req.consistent = true;
    match table.query(&req).await {
        Ok(page) => page.items.iter().filter_map(|i| ShardLease::from_item(i).ok()).collect(),
        Err(_) => Vec::new(),
    }
}

/// [`leases`], read again while the store fails to answer.
async fn read_leases(table: &DynamoTable, stream: &str) -> Vec<ShardLease> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let l = leases(table, stream).await;
        if !l.is_empty() {
            return l;
        }
        assert!(Instant::now() < deadline, "the lease table never answered");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every lane, strongly consistent, read again while the store fails to answer.
async fn read_lanes(table: &DynamoTable) -> Vec<Lane> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let req = QueryRequest { consistent: true, ..QueryRequest::new(LANES_PK, SortKeyCondition::Any) };
        match table.query(&req).await {
            Ok(page) => return page.items.iter().map(|i| Lane::from_item(i).expect("a lane")).collect(),
            Err(e) => assert!(Instant::now() < deadline, "the lane table never answered: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A log without its colour codes (ESC [ ... m).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            chars.by_ref().find(|c| *c == 'm');
        } else {
            out.push(c);
        }
    }
    out
}

/// Watches one worker's lane beat in the lease table until stopped.
struct BeatWatch {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Option<Instant>>,
}

impl BeatWatch {
    fn start(table: Arc<DynamoTable>, worker: &'static str) -> BeatWatch {
        let stop = CancellationToken::new();
        let token = stop.clone();
        let task = tokio::spawn(async move {
            // (beat, start of the last read that showed the beat before it)
            let (mut last, mut written_after): (Option<u64>, Option<Instant>) = (None, None);
            let mut previous_read = None;
            while !token.is_cancelled() {
                let started = Instant::now();
                let req = QueryRequest::new(LANES_PK, SortKeyCondition::Any);
                if let Ok(page) = table.query(&QueryRequest { consistent: true, ..req }).await {
                    let beat = page
                        .items
                        .iter()
                        .filter_map(|i| Lane::from_item(i).ok())
                        .find(|l| l.owner.as_deref() == Some(worker))
                        .map(|l| l.beat);
                    if let (Some(b), Some(before)) = (beat, last) {
                        if b != before {
                            written_after = previous_read;
                        }
                    }
                    last = beat.or(last);
                    previous_read = Some(started);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            written_after
        });
        BeatWatch { stop, task }
    }

    /// The start of the read before the one that showed the last beat (the
    /// beat was written after it); None if no beat changed while watched.
    async fn stop(self) -> Option<Instant> {
        self.stop.cancel();
        self.task.await.expect("the watch ran")
    }
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill").arg(format!("-{sig}")).arg(child.id().to_string()).status().unwrap().success();
    assert!(ok, "kill -{sig}");
}

async fn check_report(aggregates: &DynamoTable, truth: &Truth) -> check::CheckReport {
    let km = KeyModel::new(&flush_config()).unwrap();
    let exec = ExecOptions { consistent: true, ..ExecOptions::default() };
    check::check(aggregates, &km, truth, truth.last_ms.unwrap_or_default(), &exec).await.expect("gather check")
}

/// Waits until the store matches the truth (the workers caught up), stops
/// every worker with SIGTERM (each must exit 0), and checks again.
async fn converge_and_stop(env: &Env, workers: &mut BTreeMap<String, Reaped>, aggregates: &DynamoTable, truth: &Truth) {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let report = check_report(aggregates, truth).await;
        if report.mismatches() == 0 {
            break;
        }
        if Instant::now() > deadline {
            let logs: Vec<String> = workers.keys().map(|w| format!("{w}:\n{}", env.log(w))).collect();
            panic!("the workers never caught up:\n{}\n{}", check::render(&report), logs.join("\n"));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    for (id, child) in workers.iter_mut() {
        signal(child, "TERM");
        let status = child.wait().unwrap();
        assert!(status.success(), "{id} after SIGTERM: {status}\n{}", env.log(id));
    }
    let report = check_report(aggregates, truth).await;
    assert_eq!(report.mismatches(), 0, "after the final flushes:\n{}", check::render(&report));
}

/// Every shard's owner and checkpoint at one moment.
type Snapshot = HashMap<String, (Option<String>, Option<Position>)>;

/// Owner and checkpoint of every shard, polled, for "when did it resume".
#[derive(Clone, Default)]
struct Watch(Arc<Mutex<Vec<(Instant, Snapshot)>>>);

impl Watch {
    fn start(&self, table: DynamoTable, stream: String, stop: CancellationToken) {
        let log = self.0.clone();
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                let now = Instant::now();
                let snapshot: Snapshot =
                    leases(&table, &stream).await.into_iter().map(|l| (l.shard, (l.owner, l.checkpoint))).collect();
                // An empty one is a failed query (the store is busy), not news.
                if !snapshot.is_empty() {
                    log.lock().unwrap().push((now, snapshot));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
    }

    /// The first time after `t` (just after the kill) that `shard`'s
    /// checkpoint is past where it stood then, with `dead` not its owner (a
    /// worker stopped at the end releases its leases: no owner then). The
    /// dead worker wrote nothing after `t`, so the move is another's work.
    fn resumed(&self, shard: &str, dead: &str, t: Instant) -> Option<Instant> {
        let log = self.0.lock().unwrap();
        let mut after = log.iter().filter(|(when, _)| *when >= t);
        let (_, first) = after.next()?;
        let (_, at_kill) = first.get(shard)?;
        after.find_map(|(when, snap)| {
            let (owner, cp) = snap.get(shard)?;
            (owner.as_deref() != Some(dead) && cp > at_kill).then_some(*when)
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_workers_shards_all_resume_and_totals_stay_exact() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let failover = Duration::from_secs(4);
    let env = Env::new("kill9", 8, failover).await;
    let kills: usize = std::env::var("ZIGZAG_KILLS").ok().and_then(|s| s.parse().ok()).unwrap_or(5);
    let gap = Duration::from_secs(8);
    // DynamoDB Local on a 2-core machine beside three debug workers and
    // kinesalite: a rate it keeps up with (a worker that falls behind has
    // big flushes, and a dead worker's big flush takes long to recover).
    let rate = 150.0;
    let gen = generator(21, ((kills as f64 + 2.0) * gap.as_secs_f64() * rate) as u64);
    let truth = truth::compute(&gen);
    let (producer, _) = env.produce(&gen, rate);
    let mut workers: BTreeMap<String, Reaped> =
        (0..3).map(|i| format!("w{i}")).map(|w| (w.clone(), env.spawn(&w))).collect();
    let (aggregates, lease_table) = env.tables().await;
    let watch = Watch::default();
    let stop_watch = CancellationToken::new();
    watch.start(lease_table.clone(), env.stream.clone(), stop_watch.clone());
    tokio::time::sleep(gap).await;

    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    // (victim, killed at, its shards and their checkpoints then)
    type Killed = (String, Instant, Vec<(String, Option<Position>)>);
    let mut pending: Vec<Killed> = Vec::new();
    for n in 0..kills {
        let ids: Vec<String> = workers.keys().cloned().collect();
        let victim = ids[rng.gen_range(0..ids.len())].clone();
        let held: Vec<(String, Option<Position>)> = leases(&lease_table, &env.stream)
            .await
            .into_iter()
            .filter(|l| l.owner.as_deref() == Some(victim.as_str()) && !l.finished)
            .map(|l| (l.shard, l.checkpoint))
            .collect();
        let mut child = workers.remove(&victim).unwrap();
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let killed_at = Instant::now();
        pending.push((victim.clone(), killed_at, held));
        // A new pod: a new worker id, so the others must wait out the
        // failover before the dead worker's leases are theirs.
        let fresh = format!("w{}", 3 + n);
        workers.insert(fresh.clone(), env.spawn(&fresh));
        tokio::time::sleep(gap).await;
    }
    tokio::time::timeout(Duration::from_secs(120), producer).await.expect("producer").expect("task");
    // The watch runs on until the workers have caught up and stopped: a
    // shard resumes when a live worker gets to it, however slow the store.
    converge_and_stop(&env, &mut workers, &aggregates, &truth).await;
    stop_watch.cancel();

    let mut resume_ms = Vec::new();
    for (victim, at, held) in &pending {
        for (shard, cp) in held {
            let Some(when) = watch.resumed(shard, victim, *at) else {
                let now = leases(&lease_table, &env.stream).await;
                let ids = (0..3 + kills).map(|i| format!("w{i}"));
                let logs: Vec<String> = ids.map(|w| format!("== {w}\n{}", env.log(&w))).collect();
                panic!(
                    "{shard} of {victim} (checkpoint {cp:?}) never resumed after the kill; leases now: {now:#?}\n{}",
                    logs.join("\n")
                );
            };
            resume_ms.push((when - *at).as_millis() as u64);
        }
    }
    resume_ms.sort_unstable();
    eprintln!(
        "resume after kill -9 (ms, {} shards over {kills} kills, failover {} s): {resume_ms:?}",
        resume_ms.len(),
        failover.as_secs()
    );
    assert!(!resume_ms.is_empty(), "the killed workers held shards");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stopped_worker_is_fenced_and_changes_nothing_when_it_continues() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let failover = Duration::from_secs(3);
    let env = Env::new("sigstop", 4, failover).await;
    let rate = 150.0;
    let gen = generator(22, 4_500);
    let truth = truth::compute(&gen);
    let (producer, _) = env.produce(&gen, rate);
    let mut workers: BTreeMap<String, Reaped> = ["a", "b"].iter().map(|w| (w.to_string(), env.spawn(w))).collect();
    let (aggregates, lease_table) = env.tables().await;
    let lease_table = Arc::new(lease_table);
    // A's lane beats as the lease table shows them, from before the stop:
    // B may call A dead only a failover time after A's last beat, which
    // A wrote after the last read that still showed the beat before it.
    let beats = BeatWatch::start(lease_table.clone(), "a");
    // Long enough for the watch to see A beat (every failover / 3).
    tokio::time::sleep(failover).await;
    // Stop A while it holds leases (after a fixed wait, a slow start could
    // leave it none), checked once it is stopped (a handoff may land
    // between a read and the stop).
    let mut held = Vec::new();
    for _ in 0..5 {
        let deadline = Instant::now() + Duration::from_secs(120);
        while !leases(&lease_table, &env.stream).await.iter().any(|l| l.owner.as_deref() == Some("a") && !l.finished) {
            assert!(Instant::now() < deadline, "A never held a lease");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        signal(&workers["a"], "STOP");
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = leases(&lease_table, &env.stream).await;
        held = now.into_iter().filter(|l| l.owner.as_deref() == Some("a") && !l.finished).map(|l| l.shard).collect();
        if !held.is_empty() {
            break;
        }
        signal(&workers["a"], "CONT");
    }
    assert!(!held.is_empty(), "A held no lease once stopped, five times");
    // B takes every lease A held, each seen B's (or finished) by a read
    // that ended at `seen`.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut taken_by: HashMap<String, Instant> = HashMap::new();
    while taken_by.len() < held.len() {
        let l = leases(&lease_table, &env.stream).await;
        let seen = Instant::now();
        for lease in l.iter().filter(|l| held.contains(&l.shard)) {
            if lease.finished || lease.owner.as_deref() == Some("b") {
                taken_by.entry(lease.shard.clone()).or_insert(seen);
            }
        }
        assert!(Instant::now() < deadline, "B never took A's leases: {l:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let last_beat_after = beats.stop().await.expect("A's lane beat while the test watched it");
    let earliest = last_beat_after + failover;
    for (shard, seen) in &taken_by {
        assert!(
            *seen >= earliest,
            "{shard} was taken {:?} before a failover time had passed since A's last beat",
            earliest - *seen
        );
    }
    eprintln!(
        "A's {} leases taken {:?} after its last beat could have been written (failover {failover:?})",
        held.len(),
        taken_by.values().max().map(|t| *t - last_beat_after)
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    signal(&workers["a"], "CONT");
    tokio::time::timeout(Duration::from_secs(120), producer).await.expect("producer").expect("task");
    converge_and_stop(&env, &mut workers, &aggregates, &truth).await;
    let a_log = env.log("a");
    assert!(a_log.contains("presumed dead") || a_log.contains("lease lost"), "A learned it was fenced:\n{a_log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rolling_sigterm_restart_hands_every_lease_over_without_waiting_for_expiry() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let failover = Duration::from_secs(6);
    let env = Env::new("rolling", 6, failover).await;
    let rate = 150.0;
    let gen = generator(23, 6_000);
    let truth = truth::compute(&gen);
    let (producer, _) = env.produce(&gen, rate);
    let mut workers: BTreeMap<String, Reaped> =
        (0..3).map(|i| format!("r{i}")).map(|w| (w.clone(), env.spawn(&w))).collect();
    let (aggregates, lease_table) = env.tables().await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut handoffs = Vec::new();
    for i in 0..3 {
        let id = format!("r{i}");
        let held: Vec<String> = leases(&lease_table, &env.stream)
            .await
            .into_iter()
            .filter(|l| l.owner.as_deref() == Some(id.as_str()))
            .map(|l| l.shard)
            .collect();
        // Where the others' logs stand before the stop: their takes after it
        // are what the check below reads.
        let logged: Vec<(String, usize)> =
            workers.keys().filter(|w| **w != id).map(|w| (w.clone(), env.log(w).len())).collect();
        let mut child = workers.remove(&id).unwrap();
        signal(&child, "TERM");
        let status = child.wait().unwrap();
        assert!(status.success(), "{id} after SIGTERM: {status}\n{}", env.log(&id));
        let exited = Instant::now();
        // Released at exit: it owns no lease and no lane (a lease may already
        // be another's), so nothing of it waits for an expiry.
        let l = read_leases(&lease_table, &env.stream).await;
        let kept: Vec<&ShardLease> = l.iter().filter(|l| l.owner.as_deref() == Some(id.as_str())).collect();
        assert!(kept.is_empty(), "{id} exited still owning leases: {kept:?}\n{}", env.log(&id));
        let lanes = read_lanes(&lease_table).await;
        let kept: Vec<&Lane> = lanes.iter().filter(|l| l.owner.as_deref() == Some(id.as_str())).collect();
        assert!(kept.is_empty(), "{id} exited still owning its lane: {kept:?}\n{}", env.log(&id));
        // Liveness only: the others take them at a lease pass (every
        // failover / 3), which on a loaded 2-core machine may take seconds.
        loop {
            let l = leases(&lease_table, &env.stream).await;
            let moved =
                held.iter().all(|s| l.iter().any(|l| &l.shard == s && l.owner.as_deref().is_some_and(|o| o != id)));
            if moved {
                break;
            }
            assert!(exited.elapsed() < Duration::from_secs(60), "{id}'s leases never taken over: {l:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // However late the reads above were, no taker found one of them
        // still owned (its log says "expired=true" then).
        for (w, from) in &logged {
            let log = strip_ansi(&env.log(w)[*from..]);
            let expired: Vec<&str> = log
                .lines()
                .filter(|line| line.contains("lease taken") && line.contains("expired=true"))
                .filter(|line| held.iter().any(|s| line.contains(&format!("shard={s} "))))
                .collect();
            assert!(expired.is_empty(), "{w} took {id}'s leases as expired: {expired:?}");
        }
        handoffs.push(exited.elapsed().as_millis() as u64);
        let again = format!("r{i}b");
        workers.insert(again.clone(), env.spawn(&again));
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    eprintln!("leases taken over after SIGTERM in {handoffs:?} ms (renew period {} ms)", failover.as_millis() / 3);
    tokio::time::timeout(Duration::from_secs(120), producer).await.expect("producer").expect("task");
    converge_and_stop(&env, &mut workers, &aggregates, &truth).await;
}
