//! Synthetic traffic for load tests and end-to-end checks.
//!
//! - [`generator`]: record `n` of shard `s` is a pure function of (seed, s,
//!   n): any shard can be replayed from any position, exactly, which makes
//!   the generator a stand-in for a Kinesis stream.
//! - [`synthetic`]: that stream as an ingest [`Source`](zigzag_ingest::source::Source),
//!   optionally paced to a target rate.
//! - [`truth`]: the ground truth of a run, summed as reports sum.
//! - [`kinesis_sink`]: the records into a Kinesis stream (PutRecords, paced,
//!   optionally KPL-aggregated).

pub mod generator;
pub mod kinesis_sink;
pub mod synthetic;
pub mod truth;

pub use generator::{GenConfig, Generated, Generator};
pub use synthetic::SyntheticSource;
