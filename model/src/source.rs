//! Sources: ordered, replayable shards of records (Kinesis, or files and a
//! synthetic generator standing in for it). A reader opens a shard after a
//! position, so a restart resumes from its checkpoint and a recovery can
//! re-read exactly the records of an unfinished flush.
//!
//! The contract lives here, not in `zigzag-ingest`, so source crates
//! (`zigzag-kinesis`) implement it without depending on the pipeline.

use crate::Position;
use async_trait::async_trait;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum SourceError {
    #[error("shard {shard}: {message}")]
    Shard { shard: String, message: String },
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("source throttled: {0}")]
    Throttled(String),
    /// No answer in time, a broken connection or a server-side failure.
    #[error("source unavailable: {0}")]
    Unavailable(String),
}

impl zigzag_core::retry::Retryable for SourceError {
    fn is_retryable(&self) -> bool {
        matches!(self, SourceError::Throttled(_) | SourceError::Unavailable(_))
    }
}

/// One record of a batch: its position and its bytes within `RecordBatch::data`.
#[derive(Debug, Clone, Copy)]
pub struct RecordRef {
    pub pos: Position,
    pub start: u32,
    pub len: u32,
}

/// A run of consecutive records of one shard, sharing one buffer.
#[derive(Debug, Default)]
pub struct RecordBatch {
    pub data: Vec<u8>,
    pub records: Vec<RecordRef>,
    /// The shard is closed and this batch holds its last records.
    pub end_of_shard: bool,
    /// How far behind the tip of the shard the reader is, when known.
    pub millis_behind: Option<i64>,
}

impl RecordBatch {
    pub fn push(&mut self, pos: Position, bytes: &[u8]) {
        let start = self.data.len() as u32;
        self.data.extend_from_slice(bytes);
        self.records.push(RecordRef { pos, start, len: bytes.len() as u32 });
    }

    pub fn iter(&self) -> impl Iterator<Item = (Position, &[u8])> + '_ {
        self.records.iter().map(|r| (r.pos, &self.data[r.start as usize..(r.start + r.len) as usize]))
    }

    pub fn last_position(&self) -> Option<Position> {
        self.records.last().map(|r| r.pos)
    }

    /// Drops the records after `end` (a recovery stops exactly there).
    pub fn truncate_after(&mut self, end: Position) {
        let keep = self.records.partition_point(|r| r.pos <= end);
        self.records.truncate(keep);
    }
}

#[async_trait]
pub trait Source: Send + Sync {
    /// Shard ids, in a stable order.
    async fn shards(&self) -> Result<Vec<String>, SourceError>;

    /// A reader of `shard` positioned after `after` (None: from the start).
    async fn open(&self, shard: &str, after: Option<Position>) -> Result<Box<dyn ShardReader>, SourceError>;
}

#[async_trait]
pub trait ShardReader: Send {
    /// Up to `max` records. An empty batch without `end_of_shard` means none
    /// are available yet (the reader has already waited a little).
    async fn next_batch(&mut self, max: usize) -> Result<RecordBatch, SourceError>;
}
