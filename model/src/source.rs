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

    /// Drops the records before `first` (a recovery starts exactly there).
    pub fn drop_before(&mut self, first: Position) {
        let skip = self.records.partition_point(|r| r.pos < first);
        self.records.drain(..skip);
    }

    /// Drops the records after `end` (a recovery stops exactly there).
    pub fn truncate_after(&mut self, end: Position) {
        let keep = self.records.partition_point(|r| r.pos <= end);
        self.records.truncate(keep);
    }
}

/// A shard as its source lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardInfo {
    pub id: String,
    /// The shards it was split or merged from (Kinesis: parent and adjacent
    /// parent); read to their end before it.
    pub parents: Vec<String>,
}

impl ShardInfo {
    pub fn root(id: impl Into<String>) -> Self {
        ShardInfo { id: id.into(), parents: Vec::new() }
    }
}

/// Where a reader starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartAt {
    /// After this position (a checkpoint).
    After(Position),
    /// At the oldest record (a child shard whose parents were read).
    TrimHorizon,
    /// Where the source is configured to start shards it has no checkpoint
    /// for (Kinesis: `--start`; files and generators: the beginning).
    Configured,
    /// At the first record written at or after this time (ms since the
    /// epoch): where a shard's first reader began (`Source::start_time`),
    /// recorded in its lease so a takeover before any checkpoint begins
    /// there too, not at a later LATEST.
    AtTime(i64),
}

impl StartAt {
    pub fn after(checkpoint: Option<Position>) -> Self {
        checkpoint.map_or(StartAt::Configured, StartAt::After)
    }

    /// The checkpoint a reader resumes after, if any.
    pub fn position(&self) -> Option<Position> {
        match self {
            StartAt::After(p) => Some(*p),
            _ => None,
        }
    }
}

#[async_trait]
pub trait Source: Send + Sync {
    /// Every shard the source has now (open and closed), in a stable order.
    /// Called again while running: new shards (resharding) appear here.
    async fn shards(&self) -> Result<Vec<ShardInfo>, SourceError>;

    /// A reader of `shard` starting at `start`.
    async fn open(&self, shard: &str, start: StartAt) -> Result<Box<dyn ShardReader>, SourceError>;

    /// A reader for a bounded re-read of records read once before (a dead
    /// worker's flush being recovered): read from `start` until a known
    /// position, then dropped. By default the same reader as `open`; a
    /// source whose `open` holds something live readers also need
    /// (Kinesis fan-out: the consumer's one subscription per shard) reads
    /// these another way, so a recovery never waits on a subscription.
    async fn open_reread(&self, shard: &str, start: StartAt) -> Result<Box<dyn ShardReader>, SourceError> {
        self.open(shard, start).await
    }

    /// Which incarnation of the stream this is, if a stream of the same
    /// name can be deleted and created again (Kinesis: its creation time).
    /// Lease state is kept per incarnation, so a recreated stream's shards,
    /// whose ids repeat, never resume at the old one's checkpoints. None:
    /// the source cannot be recreated (files, a generator).
    async fn identity(&self) -> Result<Option<String>, SourceError> {
        Ok(None)
    }

    /// Where `StartAt::Configured` begins, as a time, if it is one (Kinesis
    /// `--start latest`: now; `--start <time>`: that time). None: the
    /// oldest record (files, generators, TRIM_HORIZON), the same for
    /// every reader.
    fn start_time(&self) -> Option<i64> {
        None
    }

    /// True when the shard list never changes and every shard ends (files,
    /// a generator): a worker stops once every shard is finished. A stream
    /// is unbounded: when all its shards close, their children are awaited.
    fn bounded(&self) -> bool {
        false
    }
}

#[async_trait]
pub trait ShardReader: Send {
    /// Up to `max` records. An empty batch without `end_of_shard` means none
    /// are available yet (the reader has already waited a little).
    async fn next_batch(&mut self, max: usize) -> Result<RecordBatch, SourceError>;
}
