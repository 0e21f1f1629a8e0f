//! A generator ([`Traffic`]) as an ingest source: shard `s` is the sequence of records
//! 1..=shard_len(s); reopening after a position regenerates from there.
//! With a target rate, record `i` (global order) is released no earlier
//! than `i / rate` seconds after the source was created.

use crate::traffic::{GenConfig, Traffic};
use async_trait::async_trait;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use zigzag_model::source::{RecordBatch, ShardInfo, ShardReader, Source, SourceError, StartAt};
use zigzag_model::Position;

pub struct SyntheticSource {
    gen: Arc<dyn Traffic>,
    rate: Option<f64>,
    started: Instant,
    /// Records handed out (for progress bars).
    pub produced: Arc<AtomicU64>,
}

impl SyntheticSource {
    pub fn new(gen: impl Traffic + 'static, rate: Option<f64>) -> Self {
        Self::shared(Arc::new(gen), rate)
    }

    pub fn shared(gen: Arc<dyn Traffic>, rate: Option<f64>) -> Self {
        SyntheticSource {
            gen,
            rate: rate.filter(|r| *r > 0.0),
            started: Instant::now(),
            produced: Arc::new(AtomicU64::new(0)),
        }
    }
}

fn shard_index(id: &str) -> Option<u32> {
    id.strip_prefix("shard-")?.parse().ok()
}

#[async_trait]
impl Source for SyntheticSource {
    async fn shards(&self) -> Result<Vec<ShardInfo>, SourceError> {
        Ok((0..self.gen.config().shards).map(|s| ShardInfo::root(GenConfig::shard_id(s))).collect())
    }

    fn bounded(&self) -> bool {
        true
    }

    async fn open(&self, shard: &str, start: StartAt) -> Result<Box<dyn ShardReader>, SourceError> {
        let after = start.position();
        let err = |message: String| SourceError::Shard { shard: shard.to_string(), message };
        let index =
            shard_index(shard).filter(|i| *i < self.gen.config().shards).ok_or_else(|| err("no such shard".into()))?;
        let next = match after {
            None => 1,
            Some(p) => p.seq.as_u64().ok_or_else(|| err(format!("position {p} is out of range")))? + 1,
        };
        Ok(Box::new(SyntheticReader {
            gen: self.gen.clone(),
            shard: index,
            next,
            len: self.gen.shard_len(index),
            rate: self.rate,
            started: self.started,
            produced: self.produced.clone(),
        }))
    }
}

struct SyntheticReader {
    gen: Arc<dyn Traffic>,
    shard: u32,
    next: u64,
    len: u64,
    rate: Option<f64>,
    started: Instant,
    produced: Arc<AtomicU64>,
}

#[async_trait]
impl ShardReader for SyntheticReader {
    async fn next_batch(&mut self, max: usize) -> Result<RecordBatch, SourceError> {
        let mut last = (self.next + max as u64 - 1).min(self.len);
        if let Some(rate) = self.rate {
            // Per-shard share of the global rate.
            let per_shard = rate / self.gen.config().shards as f64;
            let due = (self.started.elapsed().as_secs_f64() * per_shard) as u64;
            if due < self.next {
                let wait = (self.next as f64 / per_shard) - self.started.elapsed().as_secs_f64();
                tokio::time::sleep(Duration::from_secs_f64(wait.clamp(0.001, 1.0))).await;
                return Ok(RecordBatch::default());
            }
            last = last.min(due);
        }
        let mut batch = RecordBatch::default();
        let mut buf = Vec::with_capacity(256);
        for seq in self.next..=last {
            self.gen.write(self.shard, seq, &mut buf);
            batch.push(Position::at(seq), &buf);
        }
        self.produced.fetch_add(batch.records.len() as u64, Ordering::Relaxed);
        self.next = last + 1;
        batch.end_of_shard = self.next > self.len;
        Ok(batch)
    }
}
