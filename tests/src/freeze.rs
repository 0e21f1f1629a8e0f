//! Freezing a worker in place: [`Freezer`], a table whose calls hang
//! while frozen (a process stopped mid-flush), and [`FreezeWhenIdle`], a
//! source that freezes it when a stopping worker closes its last reader
//! (so the freeze lands in its final flush).

use async_trait::async_trait;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::watch;
use zigzag_core::table::{ItemResult, QueryPage, QueryRequest, SortedTable, TableError, UpdateOutcome, UpdateRequest};
use zigzag_model::source::{RecordBatch, ShardInfo, ShardReader, Source, SourceError, StartAt};

/// A table whose calls hang while frozen; it freezes itself at the Nth
/// `update_batch` (before passing it on), like a process stopped mid-flush.
pub struct Freezer {
    inner: Arc<dyn SortedTable>,
    frozen: watch::Sender<bool>,
    pub batches: AtomicU64,
    freeze_at: Option<u64>,
    pub froze: AtomicBool,
    /// `update_batch` calls that found the table frozen (each hangs until
    /// it thaws).
    pub writes_held: AtomicU64,
}

impl Freezer {
    pub fn new(inner: Arc<dyn SortedTable>, freeze_at: Option<u64>, frozen: watch::Sender<bool>) -> Arc<Self> {
        Arc::new(Freezer {
            inner,
            frozen,
            batches: AtomicU64::new(0),
            freeze_at,
            froze: AtomicBool::new(false),
            writes_held: AtomicU64::new(0),
        })
    }

    /// Returns once thawed; a call that finds the table frozen counts in
    /// `held` (counted by the check that waits, so none is missed).
    async fn wait(&self, held: Option<&AtomicU64>) {
        let mut rx = self.frozen.subscribe();
        let mut counted = false;
        let _ = rx
            .wait_for(|&f| {
                if f && !counted {
                    counted = true;
                    if let Some(h) = held {
                        h.fetch_add(1, Ordering::SeqCst);
                    }
                }
                !f
            })
            .await;
    }
}

#[async_trait]
impl SortedTable for Freezer {
    async fn put(&self, item: zigzag_core::table::Item) -> Result<(), TableError> {
        self.wait(None).await;
        self.inner.put(item).await
    }
    async fn query(&self, req: &QueryRequest) -> Result<QueryPage, TableError> {
        self.wait(None).await;
        self.inner.query(req).await
    }
    async fn update(&self, req: &UpdateRequest) -> Result<UpdateOutcome, TableError> {
        self.wait(None).await;
        self.inner.update(req).await
    }
    async fn delete(
        &self,
        req: &zigzag_core::table::DeleteRequest,
    ) -> Result<zigzag_core::table::DeleteOutcome, TableError> {
        self.wait(None).await;
        self.inner.delete(req).await
    }
    async fn update_batch(&self, reqs: &[UpdateRequest]) -> Result<Vec<ItemResult>, TableError> {
        let n = self.batches.fetch_add(1, Ordering::SeqCst) + 1;
        if Some(n) == self.freeze_at {
            self.froze.store(true, Ordering::SeqCst);
            self.frozen.send_replace(true);
        }
        self.wait(Some(&self.writes_held)).await;
        self.inner.update_batch(reqs).await
    }
}

/// A source that sends `frozen` true once armed and its last open reader
/// closes. A worker that keeps a shard to read closes its last reader only
/// when it stops, just before its final flush.
pub struct FreezeWhenIdle {
    inner: Arc<dyn Source>,
    idle: Arc<Idle>,
}

struct Idle {
    readers: AtomicU64,
    armed: AtomicBool,
    frozen: watch::Sender<bool>,
}

struct IdleReader {
    inner: Box<dyn ShardReader>,
    idle: Arc<Idle>,
}

impl FreezeWhenIdle {
    pub fn new(inner: Arc<dyn Source>, frozen: watch::Sender<bool>) -> Arc<Self> {
        let idle = Arc::new(Idle { readers: AtomicU64::new(0), armed: AtomicBool::new(false), frozen });
        Arc::new(FreezeWhenIdle { inner, idle })
    }

    pub fn arm(&self) {
        self.idle.armed.store(true, Ordering::SeqCst);
    }
}

#[async_trait]
impl Source for FreezeWhenIdle {
    async fn shards(&self) -> Result<Vec<ShardInfo>, SourceError> {
        self.inner.shards().await
    }

    fn bounded(&self) -> bool {
        self.inner.bounded()
    }

    async fn open(&self, shard: &str, start: StartAt) -> Result<Box<dyn ShardReader>, SourceError> {
        let inner = self.inner.open(shard, start).await?;
        self.idle.readers.fetch_add(1, Ordering::SeqCst);
        Ok(Box::new(IdleReader { inner, idle: self.idle.clone() }))
    }
}

#[async_trait]
impl ShardReader for IdleReader {
    async fn next_batch(&mut self, max: usize) -> Result<RecordBatch, SourceError> {
        self.inner.next_batch(max).await
    }
}

impl Drop for IdleReader {
    fn drop(&mut self) {
        if self.idle.readers.fetch_sub(1, Ordering::SeqCst) == 1 && self.idle.armed.load(Ordering::SeqCst) {
            self.idle.frozen.send_replace(true);
        }
    }
}
