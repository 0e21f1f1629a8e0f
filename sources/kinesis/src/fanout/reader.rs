//! A shard read by SubscribeToShard: one subscription at a time, renewed
//! from the last delivered event (see [`super::progress`]).
//!
//! - At most one SubscribeToShard per second per shard ([`SubscribeGate`],
//!   shared by every reader of the source, so a reader reopened at once
//!   after a failure still waits its turn).
//! - ResourceInUse (another subscription of this consumer and shard is
//!   still live, e.g. the previous worker's after a redeploy, or one made
//!   less than 5 s ago) is waited out, never fatal: Kinesis lets a call 5 s
//!   after the last take the subscription over (kinesis-local only once
//!   the other closes). A wait of 30 s is warned about once.
//! - The 5-minute end, a forced early renewal, a silent or broken stream:
//!   the subscription is made again; throttling, timeouts and failures are
//!   retried with the source's backoff, then reported as an outage (the
//!   pipeline pauses the shard and reopens it).
//! - The consumer gone (deregistered, the stream recreated): its ARN is
//!   forgotten and the error reported, so reopening registers it again.

use super::progress::Progress;
use async_trait::async_trait;
use aws_sdk_kinesis::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_kinesis::types::error::SubscribeToShardEventStreamError;
use aws_sdk_kinesis::types::SubscribeToShardEventStream;
use aws_sdk_kinesis::Client;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use zigzag_aws::{classify, describe, ErrorClass};
use zigzag_core::retry::RetryPolicy;
use zigzag_model::source::{RecordBatch, ShardReader, SourceError};

/// The SDK's event receiver is not nameable; its output holds it.
type Events = aws_sdk_kinesis::operation::subscribe_to_shard::SubscribeToShardOutput;

/// Kinesis allows one SubscribeToShard per second per consumer and shard.
const SUBSCRIBE_GAP: Duration = Duration::from_secs(1);

/// How long to wait before trying again after ResourceInUse. Kinesis lets a
/// call made 5 s after the last successful one take the subscription over.
const IN_USE_WAIT: Duration = Duration::from_secs(2);

/// A shard kept from us by another subscription this long is more than a
/// takeover (Kinesis: 5 s): another reader shares the consumer's name, or
/// the service (an emulator) holds a dead one. Said once, as a warning.
const IN_USE_WARN_AFTER: Duration = Duration::from_secs(30);

/// When each shard may be subscribed to next (tokio's clock, so tests can
/// pause it).
#[derive(Default)]
pub(crate) struct SubscribeGate {
    next: Mutex<HashMap<String, tokio::time::Instant>>,
}

impl SubscribeGate {
    /// Waits for `shard`'s turn and takes it.
    async fn turn(&self, shard: &str) {
        let now = tokio::time::Instant::now();
        let at = {
            let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
            let at = next.get(shard).copied().unwrap_or(now).max(now);
            next.insert(shard.to_string(), at + SUBSCRIBE_GAP);
            at
        };
        tokio::time::sleep_until(at).await;
    }
}

pub(crate) struct Subscription {
    events: Events,
    since: Instant,
}

pub(crate) struct FanOutReader {
    pub(crate) client: Client,
    pub(crate) consumer_arn: String,
    pub(crate) known_arn: Arc<tokio::sync::Mutex<Option<String>>>,
    pub(crate) shard: String,
    pub(crate) progress: Progress,
    pub(crate) subscription: Option<Subscription>,
    pub(crate) gate: Arc<SubscribeGate>,
    pub(crate) renew_after: Duration,
    pub(crate) silence: Duration,
    pub(crate) retry: RetryPolicy,
    pub(crate) retries: Arc<AtomicU64>,
    pub(crate) subscriptions: Arc<AtomicU64>,
    pub(crate) in_use: Arc<AtomicU64>,
    /// Since when another subscription has kept the shard from this reader
    /// (ResourceInUse at the call or in the stream), until an event comes.
    pub(crate) in_use_since: Option<Instant>,
    pub(crate) in_use_warned: bool,
}

/// What a failed subscribe call or event stream means here.
enum Failure {
    /// Another live subscription of this consumer and shard.
    InUse,
    /// The consumer or the shard does not exist (any more).
    NotFound(String),
    Retry(SourceError),
    Fatal(SourceError),
}

impl FanOutReader {
    fn renewed(&self, reason: &'static str) {
        metrics::counter!("zigzag_kinesis_subscription_renewals_total", "reason" => reason).increment(1);
        tracing::debug!(shard = %self.shard, reason, "renewing the shard's subscription");
    }

    /// ResourceInUse, at the call or in the stream: waits, then the caller
    /// subscribes again. Said when it starts, and warned once if it lasts.
    async fn wait_in_use(&mut self) {
        metrics::counter!("zigzag_kinesis_subscribe_in_use_total").increment(1);
        self.in_use.fetch_add(1, Ordering::Relaxed);
        let since = match self.in_use_since {
            Some(since) => since,
            None => {
                tracing::info!(shard = %self.shard,
                    "the shard has another live subscription of this consumer (a previous worker's?): waiting it out");
                *self.in_use_since.insert(Instant::now())
            }
        };
        if since.elapsed() >= IN_USE_WARN_AFTER && !self.in_use_warned {
            self.in_use_warned = true;
            tracing::warn!(shard = %self.shard, consumer = %self.consumer_arn, waited_s = since.elapsed().as_secs(),
                "another subscription still holds the shard; Kinesis hands a subscription over after 5 s, \
                 so another reader may be using this consumer name: give each deployment its own --consumer");
        }
        tokio::time::sleep(IN_USE_WAIT).await;
    }

    /// An event came: whatever held the shard has let go.
    fn reading_again(&mut self) {
        if let Some(since) = self.in_use_since.take() {
            tracing::info!(shard = %self.shard, waited_s = since.elapsed().as_secs_f64(),
                "reading after waiting out another subscription of the shard");
        }
        self.in_use_warned = false;
    }

    async fn forget_consumer(&self) {
        let mut known = self.known_arn.lock().await;
        if known.as_deref() == Some(self.consumer_arn.as_str()) {
            *known = None;
        }
    }

    /// Subscribes where the progress says, waiting out ResourceInUse.
    async fn subscribe(&mut self) -> Result<(), SourceError> {
        let mut attempt = 0;
        loop {
            self.gate.turn(&self.shard).await;
            let asked = Instant::now();
            let sent = self
                .client
                .subscribe_to_shard()
                .consumer_arn(&self.consumer_arn)
                .shard_id(&self.shard)
                .starting_position(self.progress.subscribe_at())
                .send()
                .await;
            let failure = match sent {
                Ok(out) => {
                    metrics::counter!("zigzag_kinesis_subscriptions_total").increment(1);
                    self.subscriptions.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(shard = %self.shard, ms = asked.elapsed().as_millis() as u64, "subscribed");
                    self.subscription = Some(Subscription { events: out, since: Instant::now() });
                    return Ok(());
                }
                Err(e) => self.call_failure(&e),
            };
            match failure {
                Failure::InUse => self.wait_in_use().await,
                Failure::Retry(e) if self.retry.pause(&mut attempt, &self.retries).await => {
                    tracing::debug!(shard = %self.shard, error = %e, "SubscribeToShard failed; retrying");
                }
                Failure::Retry(e) | Failure::Fatal(e) => return Err(e),
                Failure::NotFound(message) => {
                    self.forget_consumer().await;
                    return Err(SourceError::Unavailable(message));
                }
            }
        }
    }

    fn call_failure<E>(&self, e: &SdkError<E>) -> Failure
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
    {
        let message = format!("SubscribeToShard on shard {}: {}", self.shard, describe(e));
        match e.code() {
            Some("ResourceInUseException") => Failure::InUse,
            Some("ResourceNotFoundException") => Failure::NotFound(message),
            _ => match classify(e) {
                ErrorClass::Throttled => Failure::Retry(SourceError::Throttled(message)),
                ErrorClass::Unavailable => Failure::Retry(SourceError::Unavailable(message)),
                ErrorClass::Fatal => Failure::Fatal(SourceError::Shard { shard: self.shard.clone(), message }),
            },
        }
    }

    /// An error inside the event stream (after the subscription was made).
    fn stream_failure(
        &self,
        e: &SdkError<SubscribeToShardEventStreamError, aws_smithy_types::event_stream::RawMessage>,
    ) -> Failure {
        let message = format!("subscription to shard {}: {}", self.shard, stream_error_text(e));
        match e {
            SdkError::ServiceError(ctx) => match ctx.err() {
                SubscribeToShardEventStreamError::ResourceInUseException(_) => Failure::InUse,
                SubscribeToShardEventStreamError::ResourceNotFoundException(_) => Failure::NotFound(message),
                SubscribeToShardEventStreamError::InternalFailureException(_)
                | SubscribeToShardEventStreamError::KmsThrottlingException(_) => {
                    Failure::Retry(SourceError::Unavailable(message))
                }
                _ => Failure::Fatal(SourceError::Shard { shard: self.shard.clone(), message }),
            },
            // Transport: a reset stream, a dropped connection, a timeout.
            _ => Failure::Retry(SourceError::Unavailable(message)),
        }
    }
}

fn stream_error_text<R: std::fmt::Debug>(e: &SdkError<SubscribeToShardEventStreamError, R>) -> String {
    match e {
        SdkError::ServiceError(ctx) => {
            format!("{}: {}", ctx.err().code().unwrap_or("unknown error"), ctx.err().message().unwrap_or("no message"))
        }
        other => {
            let mut text = other.to_string();
            let mut source = std::error::Error::source(other);
            while let Some(s) = source {
                text = format!("{text}: {s}");
                source = s.source();
            }
            text
        }
    }
}

/// A reader dropped (its lease given, lost or finished) leaves no lag behind.
impl Drop for FanOutReader {
    fn drop(&mut self) {
        crate::records::report_lag(&self.shard, 0);
    }
}

#[async_trait]
impl ShardReader for FanOutReader {
    async fn next_batch(&mut self, _max: usize) -> Result<RecordBatch, SourceError> {
        let mut attempt = 0;
        loop {
            if self.progress.ended() {
                return Ok(RecordBatch { end_of_shard: true, ..RecordBatch::default() });
            }
            if self.subscription.as_ref().is_some_and(|s| s.since.elapsed() >= self.renew_after) {
                self.subscription = None;
                self.renewed("due");
            }
            if self.subscription.is_none() {
                self.subscribe().await?;
            }
            let Some(sub) = self.subscription.as_mut() else { continue };
            let wait =
                self.silence.min(self.renew_after.saturating_sub(sub.since.elapsed())).max(Duration::from_millis(1));
            let received = tokio::time::timeout(wait, sub.events.event_stream.recv()).await;
            let failure = match received {
                // Renewal due, or silence: the loop's top renews when due.
                Err(_) => {
                    if sub.since.elapsed() < self.renew_after {
                        self.subscription = None;
                        self.renewed("silent");
                    }
                    continue;
                }
                Ok(Ok(Some(SubscribeToShardEventStream::SubscribeToShardEvent(event)))) => {
                    self.reading_again();
                    let batch = self.progress.deliver(&event)?;
                    crate::records::report_lag(&self.shard, event.millis_behind_latest());
                    if batch.end_of_shard {
                        tracing::info!(shard = %self.shard, children = ?self.progress.children(), "shard ended (SHARD_END)");
                    }
                    return Ok(batch);
                }
                // An event type this SDK version does not know: skipped.
                Ok(Ok(Some(_))) => continue,
                Ok(Ok(None)) => {
                    self.subscription = None;
                    self.renewed("ended");
                    continue;
                }
                Ok(Err(e)) => {
                    self.subscription = None;
                    self.stream_failure(&e)
                }
            };
            match failure {
                // Refused in the stream (kinesis-local), or taken over by a
                // newer subscription (ours after a lease move, or a
                // zombie's): wait, then take it back unless the lease
                // protocol stops this reader first.
                Failure::InUse => self.wait_in_use().await,
                Failure::Retry(e) if self.retry.pause(&mut attempt, &self.retries).await => {
                    tracing::debug!(shard = %self.shard, error = %e, "subscription failed; renewing it");
                    self.renewed("failed");
                }
                Failure::Retry(e) | Failure::Fatal(e) => return Err(e),
                Failure::NotFound(message) => {
                    self.forget_consumer().await;
                    return Err(SourceError::Unavailable(message));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_shard_is_subscribed_to_at_most_once_a_second_and_other_shards_do_not_wait() {
        let gate = SubscribeGate::default();
        let t0 = tokio::time::Instant::now();
        gate.turn("shard-a").await;
        gate.turn("shard-b").await;
        assert_eq!(t0.elapsed(), Duration::ZERO, "first turns, and another shard's, are at once");
        gate.turn("shard-a").await;
        assert_eq!(t0.elapsed(), SUBSCRIBE_GAP, "the same shard again waits a second");
        gate.turn("shard-a").await;
        assert_eq!(t0.elapsed(), 2 * SUBSCRIBE_GAP);
        gate.turn("shard-b").await;
        assert_eq!(t0.elapsed(), 2 * SUBSCRIBE_GAP, "shard-b's last turn was long enough ago");
        // After a quiet spell, a turn is at once again.
        tokio::time::sleep(Duration::from_secs(10)).await;
        let t1 = tokio::time::Instant::now();
        gate.turn("shard-a").await;
        assert_eq!(t1.elapsed(), Duration::ZERO);
    }
}
