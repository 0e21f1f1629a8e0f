//! [`FanOutSource`]: the pipeline's source over a Kinesis stream read with
//! enhanced fan-out (SubscribeToShard), as KCL 3 reads by default.
//!
//! A registered consumer gets its own 2 MB/s per shard, pushed over HTTP/2,
//! instead of sharing the shard's 5 GetRecords calls/s and 2 MB/s with every
//! other reader. Only the reading differs from [`KinesisSource`]: the shard
//! list, the stream's identity and the start time come from it, and the
//! lease protocol, checkpoints and exactly-once are the pipeline's, unchanged.
//!
//! - `consumer`: register or find the consumer, wait for ACTIVE.
//! - `reader`: a shard's subscriptions: renewal, ResourceInUse, pacing.
//! - `progress`: what was delivered and where to resume (pure).

mod consumer;
mod progress;
mod reader;

use crate::source::KinesisSource;
use async_trait::async_trait;
use reader::{FanOutReader, SubscribeGate};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use zigzag_model::source::{ShardInfo, ShardReader, Source, SourceError, StartAt};

/// Kinesis ends a subscription after 5 minutes. Renewing a little before
/// spares the reader the end's round trip (the renewal starts from the
/// last delivered event either way).
pub const DEFAULT_RENEW_AFTER: Duration = Duration::from_secs(290);

/// Kinesis sends an event at least every 5 seconds, records or not; a
/// subscription silent for this long is treated as broken and renewed.
pub const DEFAULT_SILENCE: Duration = Duration::from_secs(30);

pub struct FanOutSource {
    polling: KinesisSource,
    consumer: String,
    /// The consumer's ARN once found ACTIVE; cleared when a subscription
    /// says it no longer exists (deregistered, or the stream recreated).
    arn: Arc<tokio::sync::Mutex<Option<String>>>,
    gate: Arc<SubscribeGate>,
    renew_after: Duration,
    silence: Duration,
    subscriptions: Arc<AtomicU64>,
    in_use: Arc<AtomicU64>,
}

impl FanOutSource {
    /// Fan-out reads of `polling`'s stream as consumer `consumer`.
    pub fn new(polling: KinesisSource, consumer: impl Into<String>) -> Self {
        FanOutSource {
            polling,
            consumer: consumer.into(),
            arn: Arc::new(tokio::sync::Mutex::new(None)),
            gate: Arc::new(SubscribeGate::default()),
            renew_after: DEFAULT_RENEW_AFTER,
            silence: DEFAULT_SILENCE,
            subscriptions: Arc::new(AtomicU64::new(0)),
            in_use: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Times a subscribe or a subscription met ResourceInUse (another live
    /// subscription of the consumer and shard) and waited it out.
    pub fn waited_in_use(&self) -> u64 {
        self.in_use.load(Ordering::Relaxed)
    }

    /// SubscribeToShard calls that succeeded, over every reader.
    pub fn subscriptions(&self) -> u64 {
        self.subscriptions.load(Ordering::Relaxed)
    }

    /// Renew each subscription after this long (tests force short ones).
    pub fn with_renew_after(mut self, renew_after: Duration) -> Self {
        self.renew_after = renew_after.max(Duration::from_secs(1));
        self
    }

    /// Renew a subscription that sent nothing for this long.
    pub fn with_silence(mut self, silence: Duration) -> Self {
        self.silence = silence.max(Duration::from_secs(1));
        self
    }

    /// The consumer's ARN, registering it and waiting for ACTIVE if needed.
    async fn consumer_arn(&self) -> Result<String, SourceError> {
        let mut arn = self.arn.lock().await;
        if let Some(a) = arn.as_ref() {
            return Ok(a.clone());
        }
        let (retry, retries) = self.polling.retry();
        let found = retry
            .run(&retries, || consumer::active_consumer(self.polling.client(), self.polling.stream(), &self.consumer))
            .await?;
        *arn = Some(found.clone());
        Ok(found)
    }
}

#[async_trait]
impl Source for FanOutSource {
    async fn shards(&self) -> Result<Vec<ShardInfo>, SourceError> {
        self.polling.shards().await
    }

    fn start_time(&self) -> Option<i64> {
        self.polling.start_time()
    }

    async fn identity(&self) -> Result<Option<String>, SourceError> {
        self.polling.identity().await
    }

    async fn open(&self, shard: &str, start: StartAt) -> Result<Box<dyn ShardReader>, SourceError> {
        let arn = self.consumer_arn().await?;
        let (retry, retries) = self.polling.retry();
        Ok(Box::new(FanOutReader {
            client: self.polling.client().clone(),
            consumer_arn: arn,
            known_arn: self.arn.clone(),
            shard: shard.to_string(),
            progress: progress::Progress::new(shard, self.polling.starting(start), start.position()),
            subscription: None,
            gate: self.gate.clone(),
            renew_after: self.renew_after,
            silence: self.silence,
            retry,
            retries,
            subscriptions: self.subscriptions.clone(),
            in_use: self.in_use.clone(),
            in_use_since: None,
            in_use_warned: false,
        }))
    }

    /// Recoveries read by GetRecords: a subscription to the shard may
    /// still be live (the dead worker's, or this consumer's elsewhere), and
    /// a second one would wait it out (ResourceInUse) while the recovery
    /// holds up every shard of its lane. A re-read is rare and bounded,
    /// so the shard's shared 5 reads/s are enough for it.
    async fn open_reread(&self, shard: &str, start: StartAt) -> Result<Box<dyn ShardReader>, SourceError> {
        self.polling.open(shard, start).await
    }
}
