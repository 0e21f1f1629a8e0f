//! The ingestion pipeline, one module per stage:
//! source → decode → aggregate → flush → store.
//!
//! - [`source`]: shards of records (files here; synthetic in `zigzag-loadgen`;
//!   Kinesis in `zigzag-kinesis`), replayable from a position.
//! - [`decode`]: bytes → validated event, or a typed reason.
//! - [`aggregate`]: events → partial measures per (shard, rollup, bucket, key).
//! - [`flush`]: partials merged across shards → conditional item updates
//!   under the worker's lane mark (exactly-once; the lease protocol around
//!   it is `zigzag-lease`).
//! - [`pipeline`]: the long-lived worker: an event loop over leases gained
//!   and lost, flush ticks, shard ends and outages, with backpressure, the
//!   recovery of dead workers' flushes, and a final flush and release on stop.
//! - [`deadletter`]: the sink for bad records.

pub mod aggregate;
pub mod deadletter;
pub mod decode;
pub mod flush;
pub mod pipeline;
pub mod source;

pub use pipeline::{run_adopting, Pipeline, PipelineError, PipelineOptions, RunSummary};
