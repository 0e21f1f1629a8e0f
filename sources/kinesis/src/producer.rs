//! [`Producer`]: PutRecords in batches of at most 500 records and 5 MB (the
//! API's limits; each record counts its data and partition key). A call can
//! partly fail — FailedRecordCount > 0, with an error per failed entry
//! (usually ProvisionedThroughputExceeded) — and then only the failed
//! records are sent again, after a backoff; whole-call throttling, timeouts
//! and 5xx are retried the same way. Retries are bounded.

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use aws_sdk_kinesis::Client;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use thiserror::Error;
use zigzag_aws::{classify, describe, ErrorClass};
use zigzag_core::retry::RetryPolicy;

pub const MAX_BATCH_RECORDS: usize = 500;
pub const MAX_BATCH_BYTES: usize = 5 * 1024 * 1024;
/// One record's limit (data + partition key).
pub const MAX_RECORD_BYTES: usize = 1024 * 1024;

#[derive(Debug, Error)]
pub enum ProduceError {
    #[error("record of {0} bytes exceeds Kinesis's 1 MiB limit")]
    TooLarge(usize),
    #[error("partition key must be 1..=256 characters, got {0}")]
    BadPartitionKey(usize),
    #[error("{failed} record(s) still failing after {attempts} attempts: {last}")]
    GaveUp { failed: usize, attempts: u32, last: String },
    #[error("PutRecords: {0}")]
    Sdk(String),
}

#[derive(Debug, Default)]
pub struct ProducerStats {
    pub records: AtomicU64,
    pub bytes: AtomicU64,
    pub calls: AtomicU64,
    /// Records sent again after failing in a call (FailedRecordCount).
    pub failed_records: AtomicU64,
    /// Whole calls retried (throttled, timed out, 5xx).
    pub failed_calls: AtomicU64,
    /// Backoff pauses before sending again (after either kind of failure).
    pub retries: AtomicU64,
}

pub struct Producer {
    client: Client,
    stream: String,
    retry: RetryPolicy,
    pending: Vec<(String, Vec<u8>)>,
    pending_bytes: usize,
    /// When the oldest queued record was queued.
    pending_since: Option<Instant>,
    pub stats: ProducerStats,
}

impl Producer {
    pub fn new(client: Client, stream: impl Into<String>) -> Self {
        Producer {
            client,
            stream: stream.into(),
            retry: RetryPolicy { max_attempts: 20, ..RetryPolicy::default() },
            pending: Vec::new(),
            pending_bytes: 0,
            pending_since: None,
            stats: ProducerStats::default(),
        }
    }

    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Queues a record, sending a batch first if this one would not fit.
    pub async fn send(&mut self, partition_key: String, data: Vec<u8>) -> Result<(), ProduceError> {
        let size = data.len() + partition_key.len();
        if partition_key.is_empty() || partition_key.chars().count() > 256 {
            return Err(ProduceError::BadPartitionKey(partition_key.chars().count()));
        }
        if size > MAX_RECORD_BYTES {
            return Err(ProduceError::TooLarge(size));
        }
        if self.pending.len() == MAX_BATCH_RECORDS || self.pending_bytes + size > MAX_BATCH_BYTES {
            self.flush().await?;
        }
        self.pending.push((partition_key, data));
        self.pending_bytes += size;
        self.pending_since.get_or_insert_with(Instant::now);
        Ok(())
    }

    /// Sends what is queued if its oldest record has waited `linger` (as
    /// the KPL's RecordMaxBufferedTime: a slow producer's records are not
    /// held until a batch fills).
    pub async fn flush_if_older(&mut self, linger: Duration) -> Result<(), ProduceError> {
        match self.pending_since {
            Some(since) if since.elapsed() >= linger => self.flush().await,
            _ => Ok(()),
        }
    }

    /// Sends everything queued, retrying failed records until all are in.
    pub async fn flush(&mut self) -> Result<(), ProduceError> {
        let mut batch: Vec<(String, Vec<u8>)> = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        self.pending_since = None;
        let mut attempt = 0u32;
        while !batch.is_empty() {
            let entries = batch
                .iter()
                .map(|(k, d)| {
                    PutRecordsRequestEntry::builder()
                        .partition_key(k)
                        .data(Blob::new(d.clone()))
                        .build()
                        .map_err(|e| ProduceError::Sdk(e.to_string()))
                })
                .collect::<Result<Vec<_>, _>>()?;
            self.stats.calls.fetch_add(1, Ordering::Relaxed);
            let last_error =
                match self.client.put_records().stream_name(&self.stream).set_records(Some(entries)).send().await {
                    Ok(out) => {
                        let results = out.records();
                        if results.len() != batch.len() {
                            return Err(ProduceError::Sdk(format!(
                                "PutRecords answered {} entries for {} records",
                                results.len(),
                                batch.len()
                            )));
                        }
                        let mut failed = Vec::new();
                        let mut last = String::new();
                        for (entry, (k, d)) in results.iter().zip(batch.drain(..)) {
                            if let Some(code) = entry.error_code() {
                                last = format!("{code}: {}", entry.error_message().unwrap_or(""));
                                failed.push((k, d));
                            } else {
                                self.stats.records.fetch_add(1, Ordering::Relaxed);
                                self.stats.bytes.fetch_add(d.len() as u64, Ordering::Relaxed);
                            }
                        }
                        self.stats.failed_records.fetch_add(failed.len() as u64, Ordering::Relaxed);
                        batch = failed;
                        if batch.is_empty() {
                            return Ok(());
                        }
                        attempt = 0; // progress was made; only stalls count against the bound
                        last
                    }
                    Err(e) if classify(&e) != ErrorClass::Fatal => {
                        self.stats.failed_calls.fetch_add(1, Ordering::Relaxed);
                        describe(&e)
                    }
                    Err(e) => return Err(ProduceError::Sdk(describe(&e))),
                };
            if !self.retry.pause(&mut attempt, &self.stats.retries).await {
                return Err(ProduceError::GaveUp { failed: batch.len(), attempts: attempt + 1, last: last_error });
            }
        }
        Ok(())
    }
}
