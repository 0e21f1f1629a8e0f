//! [`ParentOrder`]: a source wrapper that checks the resharding rule as it
//! happens. Whenever a shard is opened, every parent the stream lists for
//! it must have a finished lease (read to SHARD_END and checkpointed) in
//! the lease table, or be retired: gone, which is legal only once the
//! child's own lease has started (retirement waits for every child to
//! start, so a child reopened later by a handoff finds its parent gone).
//! A violation is recorded with the shard's name. Recoveries re-read
//! ranges of shards that were already readable, so they never trip it.

use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use zigzag_core::table::SortedTable;
use zigzag_lease::balance::started;
use zigzag_lease::items::shards_pk;
use zigzag_lease::ShardLease;
use zigzag_model::source::{ShardInfo, ShardReader, Source, SourceError, StartAt};

pub struct ParentOrder {
    inner: Arc<dyn Source>,
    leases: Arc<dyn SortedTable>,
    stream: String,
    parents: Mutex<HashMap<String, Vec<String>>>,
    /// Shards in the order they were first opened.
    pub opened: Mutex<Vec<String>>,
    /// "child opened while parent P was not finished" messages.
    pub violations: Mutex<Vec<String>>,
}

impl ParentOrder {
    pub fn new(inner: Arc<dyn Source>, leases: Arc<dyn SortedTable>, stream: &str) -> Arc<Self> {
        Arc::new(ParentOrder {
            inner,
            leases,
            stream: stream.to_string(),
            parents: Mutex::default(),
            opened: Mutex::default(),
            violations: Mutex::default(),
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[async_trait]
impl Source for ParentOrder {
    async fn shards(&self) -> Result<Vec<ShardInfo>, SourceError> {
        let shards = self.inner.shards().await?;
        let mut parents = lock(&self.parents);
        for s in &shards {
            parents.insert(s.id.clone(), s.parents.clone());
        }
        Ok(shards)
    }

    async fn open(&self, shard: &str, start: StartAt) -> Result<Box<dyn ShardReader>, SourceError> {
        let parents = lock(&self.parents).get(shard).cloned().unwrap_or_default();
        let pk = shards_pk(&self.stream);
        for p in parents {
            let ok = match self.leases.get(&pk, p.as_bytes()).await {
                Ok(Some(i)) => ShardLease::from_item(&i).is_ok_and(|l| l.finished),
                // Retired: only legal once this child had started.
                Ok(None) => match self.leases.get(&pk, shard.as_bytes()).await {
                    Ok(Some(c)) => ShardLease::from_item(&c).is_ok_and(|c| started(&c)),
                    _ => false,
                },
                Err(_) => false,
            };
            if !ok {
                lock(&self.violations).push(format!("{shard} opened while its parent {p} was not finished"));
            }
        }
        {
            let mut opened = lock(&self.opened);
            if !opened.iter().any(|s| s == shard) {
                opened.push(shard.to_string());
            }
        }
        self.inner.open(shard, start).await
    }

    fn bounded(&self) -> bool {
        self.inner.bounded()
    }
}
