//! The lease protocol at scale (issue 20.11): 1,000 shards and 100 workers
//! on the in-memory table metered with DynamoDB's capacity rules, in
//! virtual time (tokio's paused clock, so an hour takes seconds), beside a
//! model of KCL 2.x's lease management with its documented defaults on the
//! same meter. A benchmark, not a test: it prints what it measured.
//!
//! Phases: 100 workers start at once (joins; leases created and taken until
//! every shard is held and no worker holds two more than another); a steady
//! idle window (no flushes: the protocol's own cost); 10 workers killed
//! (their tasks aborted, nothing released) until their shards are held by
//! the others again.
//!
//! `cargo bench -p zigzag-lease --bench simulation [-- SHARDS WORKERS MINUTES]`

mod kcl;
mod meter;

use meter::{Account, Meter, Metered};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use zigzag_core::table::{MemoryTable, SortedTable};
use zigzag_lease::items::shards_pk;
use zigzag_lease::{Checkpoint, Coordinator, LeaseError, LeaseOptions, ShardInfo, ShardLease, ShardRange};
use zigzag_model::Position;

const STREAM: &str = "clicks";
const FAILOVER: Duration = Duration::from_secs(10);
const KILLED: usize = 10;

struct Worker {
    id: String,
    account: Arc<Account>,
    tasks: Vec<JoinHandle<()>>,
}

/// One Zigzag worker's lease loops, as `ingest` runs them (heartbeat every
/// failover / 3; a pass every failover / 2 +- 25 % with a listing every 60 s;
/// handoffs given at once, as an idle worker has nothing to flush first).
/// Set while workers flush (the busy window): every [`FLUSH_EVERY`] each
/// worker flushes 100 more records of every shard it reads.
pub(crate) static BUSY: AtomicBool = AtomicBool::new(false);
pub(crate) const FLUSH_EVERY: Duration = Duration::from_secs(10);

/// The shards a worker reads: lease counter and committed checkpoint.
type Reading = Arc<std::sync::Mutex<BTreeMap<String, (u64, Checkpoint)>>>;

/// One flush of every shard read, as `ingest` makes it: the intent
/// (open, proof, validate), commit, then the checkpoints.
async fn flush(c: &Coordinator, reading: &Reading) {
    let ranges: Vec<ShardRange> = reading
        .lock()
        .unwrap()
        .iter()
        .map(|(shard, (lease, from))| {
            let at = from.single().flatten().and_then(|p| p.seq.as_u64()).unwrap_or(0);
            ShardRange {
                seal: 0,
                shard: shard.clone(),
                lease: *lease,
                from: from.clone(),
                sets: None,
                of: 0,
                first: (at == 0).then(|| Position::at(1)),
                to: Position::at(at + 100),
                ends: false,
                behind_ms: None,
                owed: None,
                layout: String::new(),
            }
        })
        .collect();
    if ranges.is_empty() {
        return;
    }
    let Ok(began) = c.begin(ranges, "layout").await else { return };
    if c.commit(&began).await.is_err() || c.complete(&began.ranges).await.is_err() {
        return;
    }
    let mut reading = reading.lock().unwrap();
    for r in &began.ranges {
        if let Some(s) = reading.get_mut(&r.shard) {
            s.1 = r.completed();
        }
    }
}

fn zigzag_worker(inner: Arc<MemoryTable>, meter: Arc<Meter>, id: String, shards: Arc<Vec<ShardInfo>>) -> Worker {
    let account = Arc::new(Account::default());
    let table: Arc<dyn SortedTable> = Arc::new(Metered { inner, meter, account: account.clone() });
    let opts = LeaseOptions { failover: FAILOVER, ..LeaseOptions::new(STREAM, id.clone()) };
    let coord = Arc::new(Coordinator::new(table, opts));
    let joined = Arc::new(tokio::sync::Notify::new());
    let c = coord.clone();
    let j = joined.clone();
    let beats = tokio::spawn(async move {
        j.notified().await;
        loop {
            tokio::time::sleep(c.options().renew_every()).await;
            let _ = c.heartbeat().await;
        }
    });
    let reading: Reading = Arc::default();
    let (c, r) = (coord.clone(), reading.clone());
    let flushes = tokio::spawn(async move {
        // As ingest: the first flush at a random point of the interval.
        tokio::time::sleep(zigzag_lease::first_flush_after(FLUSH_EVERY)).await;
        loop {
            if BUSY.load(Ordering::Relaxed) {
                flush(&c, &r).await;
            }
            tokio::time::sleep(FLUSH_EVERY).await;
        }
    });
    let c = coord;
    let passes = tokio::spawn(async move {
        loop {
            match c.join().await {
                Ok(_) => break,
                Err(LeaseError::Contended(_)) => tokio::time::sleep(Duration::from_secs(1)).await,
                Err(e) => panic!("join: {e}"),
            }
        }
        joined.notify_one();
        let mut listed_at: Option<tokio::time::Instant> = None;
        loop {
            let relist = listed_at.is_none_or(|t| t.elapsed() >= Duration::from_secs(60));
            if relist {
                listed_at = Some(tokio::time::Instant::now());
            }
            if let Ok(plan) = c.pass(relist.then_some(shards.as_slice())).await {
                {
                    let mut r = reading.lock().unwrap();
                    r.retain(|s, (lease, _)| plan.held.get(s) == Some(lease));
                    for ready in &plan.ready {
                        r.entry(ready.shard.clone()).or_insert((ready.lease, ready.checkpoint.clone()));
                    }
                    for (shard, _, _) in &plan.handoffs {
                        r.remove(shard);
                    }
                }
                for (shard, lease, to) in &plan.handoffs {
                    let _ = c.give(shard, *lease, to).await;
                }
            }
            tokio::time::sleep(c.options().next_pass()).await;
        }
    });
    Worker { id, account, tasks: vec![beats, flushes, passes] }
}

fn kcl_worker(inner: Arc<MemoryTable>, meter: Arc<Meter>, id: String, shards: Arc<Vec<String>>) -> Worker {
    let account = Arc::new(Account::default());
    let task = tokio::spawn(kcl::worker(inner, meter, account.clone(), id.clone(), shards));
    Worker { id, account, tasks: vec![task] }
}

/// Held counts per live worker, and shards held by nobody live.
type Spread = (HashMap<String, usize>, usize);

fn spread(owners: &[String], live: &[String]) -> Spread {
    let mut held: HashMap<String, usize> = live.iter().map(|w| (w.clone(), 0)).collect();
    let mut orphans = 0;
    for o in owners {
        match held.get_mut(o) {
            Some(n) => *n += 1,
            None => orphans += 1,
        }
    }
    (held, orphans)
}

/// (every shard held by a live worker, and none holds more than the
/// target ceil(shards / live workers): both protocols' own balance rule).
fn settled((held, orphans): &Spread) -> (bool, bool) {
    let total: usize = held.values().sum::<usize>() + orphans;
    let target = total.div_ceil(held.len().max(1));
    let most = held.values().max().copied().unwrap_or(0);
    (*orphans == 0, *orphans == 0 && most <= target)
}

async fn zigzag_owners(inner: &MemoryTable) -> Vec<String> {
    let req = zigzag_core::table::QueryRequest::new(shards_pk(STREAM), zigzag_core::table::SortKeyCondition::Any);
    let items = zigzag_core::query::run_key_range(inner, req).await.map(|o| o.items).unwrap_or_default();
    items
        .iter()
        .filter_map(|i| ShardLease::from_item(i).ok())
        .map(|l| l.worker_id().unwrap_or("").to_string())
        .collect()
}

/// Per worker, (RCU/s, WCU/s) since `before`.
fn rates_since(all: &[Worker], before: &[(f64, f64)], secs: f64) -> Vec<(f64, f64)> {
    all.iter()
        .zip(before)
        .map(|(w, b)| {
            let a = w.account.snapshot();
            ((a.0 - b.0) / secs, (a.1 - b.1) / secs)
        })
        .collect()
}

fn mean(rates: &[(f64, f64)], f: fn(&(f64, f64)) -> f64) -> f64 {
    rates.iter().map(f).sum::<f64>() / rates.len().max(1) as f64
}

fn max(rates: &[(f64, f64)], f: fn(&(f64, f64)) -> f64) -> f64 {
    rates.iter().map(f).fold(0.0, f64::max)
}

#[derive(Default)]
struct Report {
    converged_s: f64,
    balanced_s: f64,
    idle_rcu: (f64, f64),
    idle_wcu: (f64, f64),
    hottest_rcu: (f64, String),
    hottest_wcu: (f64, String),
    largest: usize,
    busy_rcu: (f64, f64),
    busy_wcu: (f64, f64),
    busy_hottest_rcu: (f64, String),
    busy_hottest_wcu: (f64, String),
    busy_largest: usize,
    orphans_held_s: f64,
    rebalanced_s: f64,
}

/// Runs one protocol through the three phases.
async fn simulate(
    name: &str,
    shards: usize,
    workers: usize,
    minutes: u64,
    spawn: &dyn Fn(Arc<MemoryTable>, Arc<Meter>, String) -> Worker,
    owners: &dyn Fn(Arc<MemoryTable>) -> futures::future::BoxFuture<'static, Vec<String>>,
) -> Report {
    let inner = Arc::new(MemoryTable::new());
    let meter = Meter::new();
    let start = tokio::time::Instant::now();
    let mut all: Vec<Worker> =
        (0..workers).map(|i| spawn(inner.clone(), meter.clone(), format!("worker-{i:03}"))).collect();
    let mut report = Report::default();
    let ids = |all: &[Worker]| all.iter().map(|w| w.id.clone()).collect::<Vec<_>>();
    let limit = Duration::from_secs(3600);
    // Start: every shard held, then balanced.
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let s = spread(&owners(inner.clone()).await, &ids(&all));
        let owned = s.1 == 0 && s.0.values().sum::<usize>() == shards;
        let (_, balanced) = settled(&s);
        if owned && report.converged_s == 0.0 {
            report.converged_s = start.elapsed().as_secs_f64();
        }
        if owned && balanced {
            report.balanced_s = start.elapsed().as_secs_f64();
            break;
        }
        assert!(start.elapsed() < limit, "{name}: never balanced: {:?}", s);
    }
    // Steady idle window.
    tokio::time::sleep(FAILOVER * 6).await;
    let before: Vec<(f64, f64)> = all.iter().map(|w| w.account.snapshot()).collect();
    let from = meter.now_s();
    tokio::time::sleep(Duration::from_secs(minutes * 60)).await;
    let to = meter.now_s();
    let rates = rates_since(&all, &before, (to - from) as f64);
    report.idle_rcu = (mean(&rates, |r| r.0), max(&rates, |r| r.0));
    report.idle_wcu = (mean(&rates, |r| r.1), max(&rates, |r| r.1));
    (report.hottest_rcu, report.hottest_wcu) = meter.hottest(from, to);
    report.largest = meter.largest.load(Ordering::Relaxed);
    // Busy window: every worker flushes every shard it reads every 10 s.
    BUSY.store(true, Ordering::Relaxed);
    tokio::time::sleep(FLUSH_EVERY * 2).await;
    let before: Vec<(f64, f64)> = all.iter().map(|w| w.account.snapshot()).collect();
    let from = meter.now_s();
    tokio::time::sleep(Duration::from_secs(minutes * 60)).await;
    let to = meter.now_s();
    let rates = rates_since(&all, &before, (to - from) as f64);
    report.busy_rcu = (mean(&rates, |r| r.0), max(&rates, |r| r.0));
    report.busy_wcu = (mean(&rates, |r| r.1), max(&rates, |r| r.1));
    (report.busy_hottest_rcu, report.busy_hottest_wcu) = meter.hottest(from, to);
    report.busy_largest = meter.largest.load(Ordering::Relaxed);
    BUSY.store(false, Ordering::Relaxed);
    // Kill 10 workers.
    for w in all.drain(..KILLED) {
        for t in &w.tasks {
            t.abort();
        }
    }
    let killed_at = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let s = spread(&owners(inner.clone()).await, &ids(&all));
        let (held, balanced) = settled(&s);
        if held && report.orphans_held_s == 0.0 {
            report.orphans_held_s = killed_at.elapsed().as_secs_f64();
        }
        if balanced {
            report.rebalanced_s = killed_at.elapsed().as_secs_f64();
            break;
        }
        assert!(killed_at.elapsed() < limit, "{name}: never rebalanced after the kill: {:?}", s);
    }
    for w in all {
        for t in w.tasks {
            t.abort();
        }
    }
    report
}

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let shards = args.first().copied().unwrap_or(1_000);
    let workers = args.get(1).copied().unwrap_or(100);
    let minutes = args.get(2).copied().unwrap_or(30) as u64;
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().expect("runtime");
    let wall = std::time::Instant::now();
    let (z, k) = rt.block_on(async {
        let infos: Arc<Vec<ShardInfo>> =
            Arc::new((0..shards).map(|i| ShardInfo::root(format!("shardId-{i:012}"))).collect());
        let ids: Arc<Vec<String>> = Arc::new(infos.iter().map(|s| s.id.clone()).collect());
        let z =
            simulate("zigzag", shards, workers, minutes, &|t, m, id| zigzag_worker(t, m, id, infos.clone()), &|t| {
                Box::pin(async move { zigzag_owners(&t).await })
            })
            .await;
        let k = {
            let ids2 = ids.clone();
            simulate(
                "kcl",
                shards,
                workers,
                minutes,
                &|t, m, id| {
                    // KCL's leases exist before its workers (its shard sync makes them).
                    kcl_worker(t, m, id, ids2.clone())
                },
                &|t| {
                    let ids = ids.clone();
                    Box::pin(async move {
                        // Created on first sight so the model has a table to scan.
                        for s in ids.iter() {
                            if t.get(s, kcl::LEASE_SK).await.ok().flatten().is_none() {
                                let _ = t.put(kcl::lease_item(s)).await;
                            }
                        }
                        kcl::owners(&t, &ids).await
                    })
                },
            )
            .await
        };
        (z, k)
    });
    println!("lease simulation: {shards} shards, {workers} workers, failover {FAILOVER:?}, idle window {minutes} min, {KILLED} killed; {:.1} s of wall time", wall.elapsed().as_secs_f64());
    println!("| | Zigzag | KCL 2.x model (documented defaults) |");
    println!("|---|---:|---:|");
    let row = |what: &str, a: String, b: String| println!("| {what} | {a} | {b} |");
    row("start: every shard held (s)", format!("{:.0}", z.converged_s), format!("{:.0}", k.converged_s));
    row("start: none above ceil(shards / workers) (s)", format!("{:.0}", z.balanced_s), format!("{:.0}", k.balanced_s));
    row(
        "idle RCU/s per worker, mean (max)",
        format!("{:.3} ({:.3})", z.idle_rcu.0, z.idle_rcu.1),
        format!("{:.3} ({:.3})", k.idle_rcu.0, k.idle_rcu.1),
    );
    row(
        "idle WCU/s per worker, mean (max)",
        format!("{:.3} ({:.3})", z.idle_wcu.0, z.idle_wcu.1),
        format!("{:.3} ({:.3})", k.idle_wcu.0, k.idle_wcu.1),
    );
    row(
        "idle RCU per worker per hour",
        format!("{:.0}", z.idle_rcu.0 * 3600.0),
        format!("{:.0}", k.idle_rcu.0 * 3600.0),
    );
    row(
        "idle WCU per worker per hour",
        format!("{:.0}", z.idle_wcu.0 * 3600.0),
        format!("{:.0}", k.idle_wcu.0 * 3600.0),
    );
    row(
        "hottest partition RCU in one second",
        format!("{:.1} ({})", z.hottest_rcu.0, z.hottest_rcu.1),
        format!("{:.1} ({})", k.hottest_rcu.0, k.hottest_rcu.1),
    );
    row(
        "hottest partition WCU in one second",
        format!("{:.1} ({})", z.hottest_wcu.0, z.hottest_wcu.1),
        format!("{:.1} ({})", k.hottest_wcu.0, k.hottest_wcu.1),
    );
    row("idle: largest lease-table item (bytes)", z.largest.to_string(), k.largest.to_string());
    let pair = |a: (f64, f64)| format!("{:.2} ({:.2})", a.0, a.1);
    let hot = |a: &(f64, String)| format!("{:.1} ({})", a.0, a.1);
    row("busy (a flush every 10 s): RCU/s per worker, mean (max)", pair(z.busy_rcu), pair(k.busy_rcu));
    row("busy: WCU/s per worker, mean (max)", pair(z.busy_wcu), pair(k.busy_wcu));
    row("busy: hottest partition RCU in one second", hot(&z.busy_hottest_rcu), hot(&k.busy_hottest_rcu));
    row("busy: hottest partition WCU in one second", hot(&z.busy_hottest_wcu), hot(&k.busy_hottest_wcu));
    row("busy: largest lease-table item (bytes)", z.busy_largest.to_string(), k.busy_largest.to_string());
    row(
        &format!("{KILLED} killed: their shards held again (s)"),
        format!("{:.0}", z.orphans_held_s),
        format!("{:.0}", k.orphans_held_s),
    );
    row(
        &format!("{KILLED} killed: balanced again (s)"),
        format!("{:.0}", z.rebalanced_s),
        format!("{:.0}", k.rebalanced_s),
    );
}
