//! The pipeline's steady state on one or more cores, shared by the
//! `aggregate` bench and the `hot_path` example.

use std::sync::Barrier;
use std::time::{Duration, Instant};
use zigzag_ingest::aggregate::{Aggregator, Generation};
use zigzag_ingest::source::RecordBatch;
use zigzag_model::KeyModel;

/// `rounds` rounds of the pipeline's steady state on `threads` shards,
/// one thread each, all sorted by duration: each round, every thread makes
/// its next generation at the swap, in the maps of the generations it
/// flushed before, and aggregates its shard's batch. A round lasts from the
/// first thread's start to the last one's end (the threads start together
/// and have the same records, so none waits long for the other). The
/// merge of the swapped generation (the flush's work, not the hot path's)
/// is not timed; each thread merges its own, as a shard's maps are its
/// own in the pipeline.
pub fn rounds(agg: &Aggregator, keys: &KeyModel, batch: &RecordBatch, rounds: u64, threads: usize) -> Vec<Duration> {
    let meet = Barrier::new(threads);
    let per_thread: Vec<Vec<(Instant, Instant)>> = std::thread::scope(|s| {
        let meet = &meet;
        let run = move |shard: u32| {
            let rollups: Vec<_> = keys.rollups().collect();
            let n = batch.records.len();
            let mut last = Generation::with_capacity([(shard, (n, n))].into_iter().collect());
            let mut spans = Vec::with_capacity(rounds as usize);
            for _ in 0..rounds {
                meet.wait();
                let started = Instant::now();
                let g = last.next(n);
                agg.add_batch(&g, shard, batch, &mut Vec::new()).expect("no identity collisions");
                spans.push((started, Instant::now()));
                meet.wait();
                let swapped = std::mem::replace(&mut last, g);
                swapped.into_rollups(agg.measures(), &rollups, |_| true).expect("no identity collisions");
            }
            spans
        };
        let tasks: Vec<_> = (0..threads as u32).map(|t| s.spawn(move || run(t))).collect();
        tasks.into_iter().map(|t| t.join().expect("a steady thread")).collect()
    });
    let mut durations: Vec<_> = (0..rounds as usize)
        .map(|r| {
            let first = per_thread.iter().map(|spans| spans[r].0).min().expect("a thread");
            let last = per_thread.iter().map(|spans| spans[r].1).max().expect("a thread");
            last - first
        })
        .collect();
    durations.sort();
    durations
}
