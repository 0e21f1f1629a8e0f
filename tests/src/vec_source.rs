//! A bounded source over records held in memory: shard `vec-<i>` is
//! `shards[i]`, record `n` (from 1) at position `n`.

use async_trait::async_trait;
use std::sync::Arc;
use zigzag_model::source::{RecordBatch, ShardInfo, ShardReader, Source, SourceError, StartAt};
use zigzag_model::Position;

/// Shards as vectors of records; record `i` (from 0) is at position `i + 1`.
pub struct VecSource {
    shards: Vec<Arc<Vec<Vec<u8>>>>,
}

struct VecReader {
    records: Arc<Vec<Vec<u8>>>,
    /// Position of the next record (from 1).
    next: u64,
}

fn shard_name(i: usize) -> String {
    format!("vec-{i}")
}

impl VecSource {
    pub fn new(shards: Vec<Arc<Vec<Vec<u8>>>>) -> VecSource {
        VecSource { shards }
    }
}

#[async_trait]
impl Source for VecSource {
    async fn shards(&self) -> Result<Vec<ShardInfo>, SourceError> {
        Ok((0..self.shards.len()).map(|i| ShardInfo::root(shard_name(i))).collect())
    }

    fn bounded(&self) -> bool {
        true
    }

    async fn open(&self, shard: &str, start: StartAt) -> Result<Box<dyn ShardReader>, SourceError> {
        let after = start.position();
        let err = |message: &str| SourceError::Shard { shard: shard.to_string(), message: message.to_string() };
        let index: usize =
            shard.strip_prefix("vec-").and_then(|i| i.parse().ok()).ok_or_else(|| err("no such shard"))?;
        let records = self.shards.get(index).ok_or_else(|| err("no such shard"))?.clone();
        let next = match after {
            None => 1,
            Some(p) => p.seq.as_u64().ok_or_else(|| err("position out of range"))? + 1,
        };
        Ok(Box::new(VecReader { records, next }))
    }
}

#[async_trait]
impl ShardReader for VecReader {
    async fn next_batch(&mut self, max: usize) -> Result<RecordBatch, SourceError> {
        let len = self.records.len() as u64;
        let last = (self.next + max as u64 - 1).min(len);
        let mut batch = RecordBatch::default();
        for seq in self.next..=last {
            batch.push(Position::at(seq), &self.records[seq as usize - 1]);
        }
        self.next = self.next.max(last + 1);
        batch.end_of_shard = self.next > len;
        Ok(batch)
    }
}
