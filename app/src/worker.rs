//! The options of a pipeline worker, shared by every binary that runs one
//! (`ingest`, `loadgen --sink ingest`).

use std::time::Duration;
use zigzag_ingest::pipeline::worker_id;
use zigzag_ingest::PipelineOptions;

#[derive(Debug, Clone, clap::Args)]
pub struct WorkerArgs {
    /// This worker's id in the lease table [default: host name + random];
    /// a restart with the same id takes over its predecessor's leases at once
    #[arg(long, value_name = "ID")]
    pub worker_id: Option<String>,
    /// How long without a heartbeat before a worker is presumed dead and its
    /// leases are taken (heartbeats run every third of it, lease passes
    /// every half)
    #[arg(long, default_value = "10s", value_parser = crate::duration::positive, value_name = "DURATION")]
    pub failover: Duration,
    /// Between listings of the stream's shards (new shards after a split or
    /// merge; a shard that ends triggers one at once)
    #[arg(long, default_value = "30s", value_parser = crate::duration::positive, value_name = "DURATION")]
    pub relist: Duration,
    /// Stop once every shard this worker reads has been caught up (nothing
    /// new, MillisBehindLatest 0) for this long and no lease waits to be
    /// taken [default: a stream is read until SIGINT/SIGTERM]
    #[arg(long, value_parser = crate::duration::positive, value_name = "DURATION")]
    pub idle_exit: Option<Duration>,
    /// The longest pause between attempts while the store or the stream is
    /// down (the process stays up and resumes by itself)
    #[arg(long, default_value = "30s", value_parser = crate::duration::positive, value_name = "DURATION")]
    pub max_pause: Duration,
}

impl WorkerArgs {
    /// `opts` with these settings; the worker id is generated when not given.
    pub fn apply(&self, opts: PipelineOptions) -> PipelineOptions {
        PipelineOptions {
            worker: self.worker_id.clone().unwrap_or_else(worker_id),
            failover: self.failover,
            relist: self.relist,
            idle_exit: self.idle_exit,
            max_pause: self.max_pause,
            ..opts
        }
    }
}
