//! The options of a pipeline worker, shared by every binary that runs one
//! (`ingest`, `loadgen --sink ingest`).

use std::time::Duration;
use zigzag_core::retry::RetryPolicy;
use zigzag_core::schema::{parse_instant, TimeUnit};
use zigzag_ingest::decode::DecodeLimits;
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
    /// Attempts of a store or stream call that fails retryably (throttled,
    /// timed out, 5xx) before the worker pauses what needs it
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..), value_name = "N")]
    pub retry_attempts: u32,
    /// The first backoff between two attempts (it doubles, with full jitter)
    #[arg(long, default_value = "25ms", value_parser = crate::duration::positive, value_name = "DURATION")]
    pub retry_base: Duration,
    /// The longest backoff between two attempts
    #[arg(long, default_value = "5s", value_parser = crate::duration::positive, value_name = "DURATION")]
    pub retry_cap: Duration,
    /// Records larger than this are dead-lettered unread (Kinesis allows 1 MiB)
    #[arg(long, default_value_t = DecodeLimits::default().max_bytes, value_name = "BYTES")]
    pub max_record_bytes: usize,
    /// Events before this time are dead-lettered (RFC 3339, or epoch ms)
    #[arg(long, default_value = "2000-01-01T00:00:00Z", value_parser = instant, value_name = "TIME")]
    pub min_event_time: i64,
    /// Events at or after this time are dead-lettered (RFC 3339, or epoch ms)
    #[arg(long, default_value = "2100-01-01T00:00:00Z", value_parser = instant, value_name = "TIME")]
    pub max_event_time: i64,
}

fn instant(text: &str) -> Result<i64, String> {
    parse_instant(text, TimeUnit::Millisecond).ok_or_else(|| format!("{text:?} is not an RFC 3339 time or epoch ms"))
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
            retry: self.retry(),
            limits: DecodeLimits {
                max_bytes: self.max_record_bytes,
                min_ts_ms: self.min_event_time,
                max_ts_ms: self.max_event_time,
            },
            ..opts
        }
    }

    /// The retry policy of every call the worker makes (the stream's too).
    pub fn retry(&self) -> RetryPolicy {
        RetryPolicy {
            max_attempts: self.retry_attempts,
            base: self.retry_base,
            cap: self.retry_cap.max(self.retry_base),
        }
    }
}
