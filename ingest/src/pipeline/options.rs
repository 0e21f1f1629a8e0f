//! What a worker is told (`PipelineOptions`), its id, and what it reports
//! when it stops (`RunSummary`).

use crate::decode::DecodeLimits;
use std::path::PathBuf;
use std::time::Duration;
use zigzag_core::retry::{Outage, RetryPolicy};
use zigzag_model::Config;

#[derive(Debug, Clone)]
pub struct PipelineOptions {
    pub config: Config,
    /// The stream's name in the lease table.
    pub stream: String,
    /// This worker's id, unique among live workers (see `worker_id`).
    pub worker: String,
    /// A worker whose heartbeat has not moved this long is presumed dead.
    pub failover: Duration,
    /// The stream's shards are listed again this often (and when one ends).
    pub relist: Duration,
    /// Stop once every held shard has been caught up this long and no lease
    /// is waiting to be taken.
    pub idle_exit: Option<Duration>,
    /// The longest pause between attempts while a store or stream is down.
    pub max_pause: Duration,
    pub limits: DecodeLimits,
    /// How a failing store call is tried again (the flusher's item writes,
    /// the lease protocol's calls) before the worker pauses it.
    pub retry: RetryPolicy,
    /// Records per source read.
    pub batch_size: usize,
    pub dead_letters: PathBuf,
    /// How often a running worker asks whether a newer layout version was
    /// announced (one small query; `adoption.rs`).
    pub layout_check: Duration,
    /// The end (ms) of the newest event this process wrote under an older
    /// layout version (0: none), said on the lanes it takes
    /// (`zigzag_lease::adoption`).
    pub older_events_to_ms: i64,
}

impl PipelineOptions {
    /// How the worker waits out a store or stream that is down.
    pub fn outage(&self) -> Outage {
        Outage { max_pause: self.max_pause }
    }

    pub fn new(config: Config, stream: impl Into<String>, worker: impl Into<String>, dead_letters: PathBuf) -> Self {
        PipelineOptions {
            config,
            stream: stream.into(),
            worker: worker.into(),
            failover: Duration::from_secs(10),
            relist: Duration::from_secs(30),
            idle_exit: None,
            max_pause: Duration::from_secs(30),
            limits: DecodeLimits::default(),
            retry: RetryPolicy::default(),
            batch_size: 1000,
            dead_letters,
            layout_check: Duration::from_secs(10),
            older_events_to_ms: 0,
        }
    }
}

/// A worker id unique per process: the host name and random bits.
pub fn worker_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".into());
    format!("{host}-{:08x}", rand::random::<u32>())
}

/// What a run did, for the summary line and the benchmarks.
#[derive(Debug, Clone, Default)]
pub struct RunSummary {
    /// Shards this worker read.
    pub shards: usize,
    pub records: u64,
    pub valid: u64,
    pub rejected: u64,
    /// CSV header rows skipped (records, but not events: records = valid +
    /// rejected + headers).
    pub headers: u64,
    pub flushes: u64,
    /// Dead workers' flushes this worker finished.
    pub recovered: u64,
    pub items: u64,
    pub write_requests: u64,
    /// What the item writes of `write_requests` bill (a unit per started
    /// KB of each item written), and the largest item written, in bytes.
    pub item_write_units: u64,
    pub largest_item: u64,
    pub skipped: u64,
    /// Requests to the lease table (heartbeats, passes, intents, checkpoints).
    pub lease_requests: u64,
    /// Store calls tried again after a retryable failure (item writes,
    /// lease-table calls, joining). A call whose retries ran out is not
    /// one: it paused a flush or failed a lease pass or heartbeat.
    pub retries: u64,
    pub leases_taken: u64,
    pub leases_lost: u64,
    pub leases_handed_off: u64,
    pub per_prefix: Vec<u64>,
    pub max_generation_keys: u64,
    /// Times a flush was paused by an outage (and tried again later).
    pub flush_pauses: u64,
    /// Times a shard's reading was paused by an outage.
    pub shard_pauses: u64,
    /// Catch-ups of a shard's slower item sets that could not read their
    /// records (the shard waited, unread, and was tried again).
    pub catch_up_failures: u64,
    /// Heartbeats and lease passes that failed (outages of the lease table
    /// or of ListShards); the worker went on.
    pub lease_failures: u64,
    /// A newer layout version was announced: the run wrote everything it
    /// held and left, to go on under it (`adoption.rs`).
    pub adopt: Option<u32>,
    /// The newest event time it aggregated (ms).
    pub newest_event_ms: Option<i64>,
}

impl RunSummary {
    /// This run and `later`, one after the other in one process.
    pub fn then(mut self, later: RunSummary) -> RunSummary {
        let sum = |a: &mut u64, b: u64| *a += b;
        self.shards = self.shards.max(later.shards);
        sum(&mut self.records, later.records);
        sum(&mut self.valid, later.valid);
        sum(&mut self.rejected, later.rejected);
        sum(&mut self.headers, later.headers);
        sum(&mut self.flushes, later.flushes);
        sum(&mut self.recovered, later.recovered);
        sum(&mut self.items, later.items);
        sum(&mut self.write_requests, later.write_requests);
        sum(&mut self.item_write_units, later.item_write_units);
        self.largest_item = self.largest_item.max(later.largest_item);
        sum(&mut self.skipped, later.skipped);
        sum(&mut self.lease_requests, later.lease_requests);
        sum(&mut self.retries, later.retries);
        sum(&mut self.leases_taken, later.leases_taken);
        sum(&mut self.leases_lost, later.leases_lost);
        sum(&mut self.leases_handed_off, later.leases_handed_off);
        self.per_prefix.resize(self.per_prefix.len().max(later.per_prefix.len()), 0);
        for (a, b) in self.per_prefix.iter_mut().zip(later.per_prefix) {
            *a += b;
        }
        self.max_generation_keys = self.max_generation_keys.max(later.max_generation_keys);
        sum(&mut self.flush_pauses, later.flush_pauses);
        sum(&mut self.shard_pauses, later.shard_pauses);
        sum(&mut self.catch_up_failures, later.catch_up_failures);
        sum(&mut self.lease_failures, later.lease_failures);
        self.adopt = later.adopt;
        self.newest_event_ms = self.newest_event_ms.max(later.newest_event_ms);
        self
    }
}
