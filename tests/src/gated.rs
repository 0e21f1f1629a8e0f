//! [`Gated`]: a source whose shards do not end until a gate opens, so the
//! test, not the machine's speed, decides that the data outlasts what it
//! watches. It records the shards it was asked to open (a worker began
//! reading them).

use async_trait::async_trait;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use zigzag_model::source::{RecordBatch, ShardInfo, ShardReader, Source, SourceError, StartAt};

/// The shards a source was asked to open.
pub type Opened = Arc<Mutex<HashSet<String>>>;

pub struct Gated {
    inner: Arc<dyn Source>,
    open: watch::Receiver<bool>,
    opened: Opened,
}

impl Gated {
    /// `inner`'s shards, ending only once `open` is true.
    pub fn new(inner: Arc<dyn Source>, open: watch::Receiver<bool>) -> Gated {
        Gated { inner, open, opened: Opened::default() }
    }

    /// The shards opened so far (shared: it goes on filling).
    pub fn opened(&self) -> Opened {
        self.opened.clone()
    }
}

struct GatedReader {
    inner: Box<dyn ShardReader>,
    open: watch::Receiver<bool>,
}

#[async_trait]
impl Source for Gated {
    async fn shards(&self) -> Result<Vec<ShardInfo>, SourceError> {
        self.inner.shards().await
    }

    fn bounded(&self) -> bool {
        true
    }

    async fn open(&self, shard: &str, start: StartAt) -> Result<Box<dyn ShardReader>, SourceError> {
        self.opened.lock().unwrap_or_else(|e| e.into_inner()).insert(shard.to_string());
        Ok(Box::new(GatedReader { inner: self.inner.open(shard, start).await?, open: self.open.clone() }))
    }
}

#[async_trait]
impl ShardReader for GatedReader {
    async fn next_batch(&mut self, max: usize) -> Result<RecordBatch, SourceError> {
        let mut batch = self.inner.next_batch(max).await?;
        if batch.end_of_shard && !*self.open.borrow() {
            // Not yet: an empty batch says "nothing now" (after a short wait).
            batch.end_of_shard = false;
            if batch.records.is_empty() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Ok(batch)
    }
}
