//! Synthetic traffic for load tests and end-to-end checks.
//!
//! - [`traffic`]: what every generator is ([`Traffic`]): record `n` of
//!   shard `s` is a pure function of (seed, s, n), so any shard can be
//!   replayed from any position, exactly, which makes a generator a
//!   stand-in for a Kinesis stream; and each record says what it is.
//! - [`generator`]: the shipped click/impression traffic.
//! - [`declared`]: traffic for any declared schema.
//! - [`synthetic`]: that stream as an ingest [`Source`](zigzag_model::source::Source),
//!   optionally paced to a target rate.
//! - [`truth`]: the ground truth of a run, summed as reports sum.
//! - `kinesis_sink` (feature `kinesis`, the AWS SDK): the records into a
//!   Kinesis stream (PutRecords, paced, optionally KPL-aggregated).

pub mod declared;
pub mod generator;
#[cfg(feature = "kinesis")]
pub mod kinesis_sink;
pub mod synthetic;
pub mod traffic;
pub mod truth;

pub use declared::SchemaGenerator;
pub use generator::{Generated, Generator};
pub use synthetic::SyntheticSource;
pub use traffic::{write_shard_files, Drawn, DrawnEvent, GenConfig, Traffic};
