//! The worker options every binary that runs a pipeline shares (`ingest`,
//! `loadgen --sink ingest`), flattened into their clap parsers.

use crate::pipeline::{worker_id, PipelineOptions};
use std::time::Duration;

#[derive(Debug, Clone, clap::Args)]
pub struct WorkerArgs {
    /// This worker's id in the lease table [default: host name + random];
    /// a restart with the same id takes over its predecessor's leases at once
    #[arg(long, value_name = "ID")]
    pub worker_id: Option<String>,
    /// Seconds without a heartbeat before a worker is presumed dead and its
    /// leases are taken (heartbeats and lease passes run every third of it)
    #[arg(long, default_value_t = 10.0, value_name = "SECS")]
    pub failover: f64,
    /// Seconds between listings of the stream's shards (new shards after a
    /// split or merge; a shard that ends triggers one at once)
    #[arg(long, default_value_t = 30.0, value_name = "SECS")]
    pub relist: f64,
    /// Stop once every shard this worker reads has been caught up (nothing
    /// new, MillisBehindLatest 0) for SECS seconds and no lease waits to be
    /// taken [default: a stream is read until SIGINT/SIGTERM]
    #[arg(long, value_name = "SECS")]
    pub idle_exit: Option<f64>,
    /// The longest pause, in seconds, between attempts while the store or
    /// the stream is down (the process stays up and resumes by itself)
    #[arg(long, default_value_t = 30.0, value_name = "SECS")]
    pub max_pause: f64,
}

fn secs(s: f64, flag: &str) -> Result<Duration, String> {
    if s.is_finite() && s > 0.0 && s < 1e6 {
        Ok(Duration::from_secs_f64(s))
    } else {
        Err(format!("--{flag} must be a positive number of seconds, not {s}"))
    }
}

impl WorkerArgs {
    /// `opts` with these settings; the worker id is generated when not given.
    pub fn apply(&self, opts: PipelineOptions) -> Result<PipelineOptions, String> {
        Ok(PipelineOptions {
            worker: self.worker_id.clone().unwrap_or_else(worker_id),
            failover: secs(self.failover, "failover")?,
            relist: secs(self.relist, "relist")?,
            idle_exit: self.idle_exit.map(|s| secs(s, "idle-exit")).transpose()?,
            max_pause: secs(self.max_pause, "max-pause")?,
            ..opts
        })
    }
}
