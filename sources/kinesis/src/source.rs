//! [`KinesisSource`]: the pipeline's source over a Kinesis stream.
//!
//! A shard reader holds a shard iterator and loops GetRecords within the
//! shard's limits ([`crate::pacing`]). Records are split into user records
//! ([`crate::kpl`]); each gets the position (sequence number, sub-sequence
//! number), which is what checkpoints store.
//!
//! - Resuming after a checkpoint `(seq, sub)` reads AT_SEQUENCE_NUMBER `seq`
//!   and drops user records up to `sub`: an aggregated record may have been
//!   checkpointed half way through.
//! - An expired iterator (they live 5 minutes) is replaced by one AFTER the
//!   last record delivered (or at the original start if none was).
//! - A closed shard ends when GetRecords returns no NextShardIterator: the
//!   batch is marked `end_of_shard`.
//! - Throttling, timeouts and 5xx are retried with backoff (bounded); the
//!   count is in `zigzag_kinesis_retries_total`.

use crate::pacing::{Pacer, ReadLimits};
use crate::stream::{list_shards, stream_identity, LIST_SHARDS_PAGE};
use async_trait::async_trait;
use aws_sdk_kinesis::error::SdkError;
use aws_sdk_kinesis::operation::get_records::{GetRecordsError, GetRecordsOutput};
use aws_sdk_kinesis::primitives::DateTime;
use aws_sdk_kinesis::types::ShardIteratorType;
use aws_sdk_kinesis::Client;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use zigzag_aws::{classify, describe, ErrorClass};
use zigzag_core::retry::RetryPolicy;
use zigzag_model::source::{RecordBatch, ShardInfo, ShardReader, Source, SourceError, StartAt};
use zigzag_model::{Position, SeqNo};

/// Where a shard without a checkpoint starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StartingPosition {
    /// The oldest record still in the stream.
    #[default]
    TrimHorizon,
    /// Only records written after the reader opens.
    Latest,
    /// The first record written at or after this time (milliseconds since
    /// the Unix epoch).
    AtTimestamp(i64),
}

/// GetRecords returns at most 10,000 records per call.
const GET_RECORDS_MAX: usize = 10_000;

pub struct KinesisSource {
    client: Client,
    stream: String,
    start: StartingPosition,
    limits: ReadLimits,
    retry: RetryPolicy,
    page_size: i32,
    retries: Arc<AtomicU64>,
}

impl KinesisSource {
    pub fn new(client: Client, stream: impl Into<String>, start: StartingPosition) -> Self {
        KinesisSource {
            client,
            stream: stream.into(),
            start,
            limits: ReadLimits::default(),
            retry: RetryPolicy::default(),
            page_size: LIST_SHARDS_PAGE,
            retries: Arc::new(AtomicU64::new(0)),
        }
    }

    pub fn with_limits(mut self, limits: ReadLimits) -> Self {
        self.limits = limits;
        self
    }

    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// ListShards page size (tests use a small one to exercise pagination).
    pub fn with_list_page_size(mut self, page_size: i32) -> Self {
        self.page_size = page_size.clamp(1, 10_000);
        self
    }

    /// Calls retried (throttling, timeouts, 5xx) by this source's readers.
    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    pub(crate) fn stream(&self) -> &str {
        &self.stream
    }

    pub(crate) fn retry(&self) -> (RetryPolicy, Arc<AtomicU64>) {
        (self.retry, self.retries.clone())
    }

    /// Where a reader opened at `start` begins when it has no checkpoint.
    pub(crate) fn starting(&self, start: StartAt) -> StartingPosition {
        match start {
            StartAt::TrimHorizon => StartingPosition::TrimHorizon,
            StartAt::AtTime(ms) => StartingPosition::AtTimestamp(ms),
            StartAt::After(_) | StartAt::Configured => self.start,
        }
    }
}

#[async_trait]
impl Source for KinesisSource {
    async fn shards(&self) -> Result<Vec<ShardInfo>, SourceError> {
        let shards = self.retry.run(&self.retries, || list_shards(&self.client, &self.stream, self.page_size)).await?;
        Ok(shards
            .iter()
            .map(|s| ShardInfo {
                id: s.shard_id().to_string(),
                parents: s
                    .parent_shard_id()
                    .into_iter()
                    .chain(s.adjacent_parent_shard_id())
                    .map(String::from)
                    .collect(),
            })
            .collect())
    }

    fn start_time(&self) -> Option<i64> {
        match self.start {
            StartingPosition::TrimHorizon => None,
            StartingPosition::AtTimestamp(ms) => Some(ms),
            // A second before now: Kinesis refuses a time after its own
            // clock, and a worker's may run a little ahead. Reading a
            // second more than LATEST would is harmless (nothing of the
            // shard was applied yet).
            StartingPosition::Latest => Some(
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
                    - 1_000,
            ),
        }
    }

    async fn identity(&self) -> Result<Option<String>, SourceError> {
        Ok(Some(self.retry.run(&self.retries, || stream_identity(&self.client, &self.stream)).await?))
    }

    async fn open(&self, shard: &str, start: StartAt) -> Result<Box<dyn ShardReader>, SourceError> {
        let mut reader = KinesisShardReader {
            client: self.client.clone(),
            stream: self.stream.clone(),
            shard: shard.to_string(),
            start: self.starting(start),
            after: start.position(),
            last_whole: None,
            iterator: None,
            ended: false,
            pacer: Pacer::new(self.limits),
            retry: self.retry,
            retries: self.retries.clone(),
        };
        reader.iterator = Some(reader.fresh_iterator().await?);
        Ok(Box::new(reader))
    }
}

struct KinesisShardReader {
    client: Client,
    stream: String,
    shard: String,
    start: StartingPosition,
    /// The last position delivered (or the checkpoint it opened after):
    /// user records at or before it are dropped.
    after: Option<Position>,
    /// The last record this reader delivered whole (all its user records).
    last_whole: Option<SeqNo>,
    iterator: Option<String>,
    ended: bool,
    pacer: Pacer,
    retry: RetryPolicy,
    retries: Arc<AtomicU64>,
}

impl KinesisShardReader {
    fn err(&self, message: String) -> SourceError {
        SourceError::Shard { shard: self.shard.clone(), message }
    }

    fn sdk_error<E>(&self, e: SdkError<E>) -> SourceError
    where
        E: aws_sdk_kinesis::error::ProvideErrorMetadata + std::error::Error + 'static,
    {
        let message = format!("shard {}: {}", self.shard, describe(&e));
        match classify(&e) {
            ErrorClass::Throttled => SourceError::Throttled(message),
            ErrorClass::Unavailable => SourceError::Unavailable(message),
            ErrorClass::Fatal => SourceError::Shard { shard: self.shard.clone(), message: describe(&e) },
        }
    }

    /// An iterator at the resume point: at the last delivered record's
    /// sequence number (its remaining sub-records are then filtered), or at
    /// the configured start.
    async fn fresh_iterator(&self) -> Result<String, SourceError> {
        match (self.after, self.start) {
            (Some(p), _) => self.iterator_at(ShardIteratorType::AtSequenceNumber, Some(p.seq), None).await,
            (None, StartingPosition::TrimHorizon) => self.iterator_at(ShardIteratorType::TrimHorizon, None, None).await,
            (None, StartingPosition::Latest) => self.iterator_at(ShardIteratorType::Latest, None, None).await,
            (None, StartingPosition::AtTimestamp(ms)) => {
                self.iterator_at(ShardIteratorType::AtTimestamp, None, Some(DateTime::from_millis(ms))).await
            }
        }
    }

    /// After an ExpiredIteratorException: resume AFTER_SEQUENCE_NUMBER of the
    /// last record this reader delivered whole (batches end on record
    /// boundaries). Before any, a checkpoint may sit inside an aggregate, so
    /// the iterator is made afresh (AT its sequence number).
    async fn renewed_iterator(&self) -> Result<String, SourceError> {
        match self.last_whole {
            Some(last) => self.iterator_at(ShardIteratorType::AfterSequenceNumber, Some(last), None).await,
            None => self.fresh_iterator().await,
        }
    }

    async fn iterator_at(
        &self,
        kind: ShardIteratorType,
        sequence: Option<SeqNo>,
        timestamp: Option<DateTime>,
    ) -> Result<String, SourceError> {
        let retries = self.retries.clone();
        self.retry
            .run(&retries, || async {
                let out = self
                    .client
                    .get_shard_iterator()
                    .stream_name(&self.stream)
                    .shard_id(&self.shard)
                    .shard_iterator_type(kind.clone())
                    .set_starting_sequence_number(sequence.map(|s| s.to_string()))
                    .set_timestamp(timestamp)
                    .send()
                    .await
                    .map_err(|e| self.sdk_error(e))?;
                out.shard_iterator.ok_or_else(|| self.err("GetShardIterator returned no iterator".into()))
            })
            .await
    }

    async fn get_records(&mut self, limit: usize) -> Result<GetRecordsOutput, SourceError> {
        let mut attempt = 0;
        loop {
            let Some(iterator) = self.iterator.clone() else {
                return Err(self.err("no shard iterator".into()));
            };
            tokio::time::sleep(self.pacer.wait(Instant::now())).await;
            let sent = Instant::now();
            let result = self.client.get_records().shard_iterator(iterator).limit(limit as i32).send().await;
            let failure = match result {
                Ok(out) => {
                    let bytes: usize = out.records().iter().map(|r| r.data().as_ref().len()).sum();
                    self.pacer.completed(sent, bytes, out.records().is_empty());
                    return Ok(out);
                }
                Err(e) => e,
            };
            self.pacer.completed(sent, 0, false);
            if let Some(GetRecordsError::ExpiredIteratorException(_)) = failure.as_service_error() {
                metrics::counter!("zigzag_kinesis_expired_iterators_total", "shard" => self.shard.clone()).increment(1);
                tracing::info!(shard = %self.shard, "shard iterator expired; renewing it after the last record read");
                self.iterator = Some(self.renewed_iterator().await?);
                continue;
            }
            let error = self.sdk_error(failure);
            if zigzag_core::retry::Retryable::is_retryable(&error)
                && self.retry.pause(&mut attempt, &self.retries).await
            {
                metrics::counter!("zigzag_kinesis_retries_total", "shard" => self.shard.clone()).increment(1);
                continue;
            }
            return Err(error);
        }
    }
}

/// A reader dropped (its lease given, lost or finished) leaves no lag
/// behind: a stale value would stay in every maximum over shards.
impl Drop for KinesisShardReader {
    fn drop(&mut self) {
        crate::records::report_lag(&self.shard, 0);
    }
}

#[async_trait]
impl ShardReader for KinesisShardReader {
    async fn next_batch(&mut self, max: usize) -> Result<RecordBatch, SourceError> {
        let mut batch = RecordBatch::default();
        if self.ended {
            batch.end_of_shard = true;
            return Ok(batch);
        }
        // A KPL record holds many user records, so `max` only bounds the
        // number of Kinesis records asked for.
        let out = self.get_records(max.clamp(1, GET_RECORDS_MAX)).await?;
        crate::records::push_records(&self.shard, out.records(), &mut self.after, &mut batch)?;
        if let Some(r) = out.records().last() {
            self.last_whole = r.sequence_number().parse().ok();
        }
        if let Some(behind) = out.millis_behind_latest() {
            batch.millis_behind = Some(behind);
            crate::records::report_lag(&self.shard, behind);
        }
        self.iterator = out.next_shard_iterator.clone();
        if self.iterator.is_none() {
            // A closed shard, read to its end (SHARD_END).
            self.ended = true;
            batch.end_of_shard = true;
        }
        Ok(batch)
    }
}
