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

mod harness;
use harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_workers_shards_all_resume_and_totals_stay_exact() {
    if !zigzag_aws::emulator::gate("killed_workers_shards_all_resume_and_totals_stay_exact") {
        return;
    }
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
            .filter(|l| l.worker_id() == Some(victim.as_str()) && !l.finished)
            .map(|l| (l.shard, l.checkpoint.earliest()))
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

/// The same with enhanced fan-out against kinesis-local: workers killed
/// mid-subscription (their HTTP/2 streams cut without a goodbye), each
/// subscription renewed every 3 s; the next owner of a shard subscribes
/// after the dead worker's checkpoint, waiting out a subscription the
/// emulator may still hold (ResourceInUse; kinesis-local can hold a killed
/// worker's for up to 5 minutes, hence a longer catch-up, see
/// `Reading::catch_up`). A dead worker's flush is recovered by GetRecords
/// (`Source::open_reread`): over a subscription, the recovery once stalled
/// behind the dead one's. Totals exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fan_out_workers_killed_mid_subscription_leave_totals_exact() {
    if !zigzag_aws::emulator::gate("fan_out_workers_killed_mid_subscription_leave_totals_exact") {
        return;
    }
    let _serial = ONE_AT_A_TIME.lock().await;
    emulator::kinesis_tls().unwrap_or_else(|e| panic!("{e}"));
    let ca = std::env::var("ZIGZAG_KINESIS_CA").expect("checked by kinesis_tls");
    let reading = Reading::FanOut { consumer: "zigzag-kill9".into(), ca, renew: Duration::from_secs(3) };
    let failover = Duration::from_secs(4);
    let env = Env::reading("fanout-kill9", 4, failover, reading).await;
    let kills = 3;
    let gap = Duration::from_secs(6);
    let rate = 150.0;
    let gen = generator(24, ((kills as f64 + 2.0) * gap.as_secs_f64() * rate) as u64);
    let truth = truth::compute(&gen);
    let (producer, _) = env.produce(&gen, rate);
    let mut workers: BTreeMap<String, Reaped> =
        (0..2).map(|i| format!("f{i}")).map(|w| (w.clone(), env.spawn(&w))).collect();
    let (aggregates, lease_table) = env.tables().await;
    tokio::time::sleep(gap).await;
    let mut rng = rand::rngs::StdRng::seed_from_u64(8);
    let mut killed_holding = 0;
    for n in 0..kills {
        let ids: Vec<String> = workers.keys().cloned().collect();
        let victim = ids[rng.gen_range(0..ids.len())].clone();
        killed_holding += leases(&lease_table, &env.stream)
            .await
            .iter()
            .filter(|l| l.worker_id() == Some(victim.as_str()) && !l.finished)
            .count();
        let mut child = workers.remove(&victim).unwrap();
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let fresh = format!("f{}", 2 + n);
        workers.insert(fresh.clone(), env.spawn(&fresh));
        tokio::time::sleep(gap).await;
    }
    tokio::time::timeout(Duration::from_secs(120), producer).await.expect("producer").expect("task");
    assert!(killed_holding > 0, "the killed workers held shards");
    converge_and_stop(&env, &mut workers, &aggregates, &truth).await;
    // They read by fan-out (a worker that polled would have matched too).
    let logs: String = (0..2 + kills).map(|i| env.log(&format!("f{i}"))).collect();
    // How often kinesis-local held a killed worker's subscription (shown
    // with --nocapture; why the catch-up allows 5 minutes more).
    eprintln!(
        "shards kept ≥ 30 s from their new owner by a dead subscription: {}",
        logs.matches("another subscription still holds the shard").count()
    );
    assert_eq!(
        logs.matches("registered the stream consumer").count(),
        1,
        "one worker registered it, the others found it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stopped_worker_is_fenced_and_changes_nothing_when_it_continues() {
    if !zigzag_aws::emulator::gate("a_stopped_worker_is_fenced_and_changes_nothing_when_it_continues") {
        return;
    }
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
        while !leases(&lease_table, &env.stream).await.iter().any(|l| l.worker_id() == Some("a") && !l.finished) {
            assert!(Instant::now() < deadline, "A never held a lease");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        signal(&workers["a"], "STOP");
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = leases(&lease_table, &env.stream).await;
        held = now.into_iter().filter(|l| l.worker_id() == Some("a") && !l.finished).map(|l| l.shard).collect();
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
            if lease.finished || lease.worker_id() == Some("b") {
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
    if !zigzag_aws::emulator::gate("a_rolling_sigterm_restart_hands_every_lease_over_without_waiting_for_expiry") {
        return;
    }
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
            .filter(|l| l.worker_id() == Some(id.as_str()))
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
        let kept: Vec<&ShardLease> = l.iter().filter(|l| l.worker_id() == Some(id.as_str())).collect();
        assert!(kept.is_empty(), "{id} exited still owning leases: {kept:?}\n{}", env.log(&id));
        let lanes = read_lanes(&lease_table).await;
        let kept: Vec<&Lane> = lanes.iter().filter(|l| l.worker_id() == Some(id.as_str())).collect();
        assert!(kept.is_empty(), "{id} exited still owning its lane: {kept:?}\n{}", env.log(&id));
        // Liveness only: the others take them at a lease pass (every
        // failover / 3), which on a loaded 2-core machine may take seconds.
        loop {
            let l = leases(&lease_table, &env.stream).await;
            let moved = held.iter().all(|s| l.iter().any(|l| &l.shard == s && l.worker_id().is_some_and(|o| o != id)));
            if moved {
                break;
            }
            assert!(exited.elapsed() < Duration::from_secs(60), "{id}'s leases never taken over: {l:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // However late the reads above were, no taker found one of them
        // still owned (its log says "expired=true" then).
        for (w, from) in &logged {
            let log = &env.log(w)[*from..];
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
