//! The ingestion pipeline, one module per stage:
//! source → decode → aggregate → flush → store.
//!
//! - [`source`]: shards of records (files here; synthetic in `zigzag-loadgen`;
//!   Kinesis in `zigzag-kinesis`), replayable from a position.
//! - [`decode`]: bytes → validated event, or a typed reason.
//! - [`aggregate`]: events → partial measures per (shard, rollup, bucket, key).
//! - [`flush`]: partials → conditional item updates under the shard's flush
//!   mark, between the checkpoint's begin and commit (exactly-once).
//! - [`pipeline`]: the long-lived loop tying them together, with backpressure,
//!   recovery of unfinished flushes, and a final flush on stop.
//! - [`deadletter`]: the sink for bad records.

pub mod aggregate;
pub mod deadletter;
pub mod decode;
pub mod flush;
pub mod pipeline;
pub mod source;

pub use pipeline::{Pipeline, PipelineError, PipelineOptions, RunSummary};
