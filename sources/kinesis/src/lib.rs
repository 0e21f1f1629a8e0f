//! Kinesis for Zigzag, over aws-sdk-kinesis:
//!
//! - [`stream`]: list a stream's shards (ListShards, paginated); create a
//!   stream and wait for ACTIVE (tests, local runs).
//! - [`source`]: [`KinesisSource`], the pipeline's [`Source`] over a stream:
//!   GetShardIterator at the configured start (TRIM_HORIZON, LATEST,
//!   AT_TIMESTAMP) or after a checkpoint, and a per-shard GetRecords loop.
//! - [`fanout`]: [`FanOutSource`], the same over enhanced fan-out: a
//!   registered consumer, SubscribeToShard per shard, renewed from the last
//!   delivered event.
//! - `records`: Kinesis records → the pipeline's, for both readers.
//! - [`pacing`]: the per-shard read limits (5 GetRecords calls/s, 2 MB/s) and
//!   the idle backoff.
//! - [`kpl`]: KPL aggregated records → user records with sub-sequence numbers.
//! - [`producer`]: PutRecords in batches (≤ 500 records, ≤ 5 MB), retrying
//!   only the records that failed.
//!
//! [`Source`]: zigzag_model::source::Source

pub mod fanout;
pub mod kpl;
pub mod pacing;
pub mod producer;
mod records;
pub mod source;
pub mod stream;

pub use fanout::FanOutSource;
pub use producer::{Producer, ProducerStats};
pub use source::{KinesisSource, StartingPosition};

/// A Kinesis client from the default chain (see [`zigzag_aws::load_config`]),
/// its calls logged for an IAM audit when asked ([`zigzag_aws::CallLog`]).
pub async fn client(opts: &zigzag_aws::AwsOptions) -> aws_sdk_kinesis::Client {
    let sdk = zigzag_aws::load_config(opts).await;
    let conf = aws_sdk_kinesis::config::Builder::from(&sdk).interceptor(zigzag_aws::CallLog::from_env()).build();
    aws_sdk_kinesis::Client::from_conf(conf)
}
