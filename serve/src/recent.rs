//! Small reads shared between queries: the layout items, the planner's
//! statistics, the change marks, a layout fill's progress and the
//! compaction markers read before a report's items (the partitions
//! `#layout`, `#stats`, `#changes`, `#fill`, and eventually consistent
//! reads of `#compacted`) are read at most once per
//! `recheck` whatever the number of queries asking, and concurrent
//! identical reads are one read. A hundred dashboards then cost the table
//! what one does: every query still plans and checks what changed, on
//! reads at most `recheck` old (the planner's inputs, statistics and the
//! compaction-marker hint: ten times that: `Recent::horizon`).
//!
//! Everything else passes through: the items, and the strongly consistent
//! read of the compaction markers after a report's items (it must be
//! fresh: it is what tells the report nothing was folded meanwhile; the
//! read before the items is only a hint it corrects). A caller that needs
//! a read begun after some instant (the second read of change marks,
//! after the items) asks [`Recent::since`].

use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use zigzag_core::table::{
    DeleteOutcome, DeleteRequest, Item, ItemResult, QueryPage, QueryRequest, SortedTable, TableError, UpdateOutcome,
    UpdateRequest,
};
use zigzag_gather::compact::marker::MARKERS_PK;
use zigzag_gather::relayout::fill::FILL_PK;
use zigzag_model::changes::CHANGES_PK;
use zigzag_model::layout::LAYOUT_PK;
use zigzag_model::stats::STATS_PK;

/// The planner's inputs are shared this many times `recheck`.
const PLANNING_AGE: u32 = 10;

/// Entries kept before the stale ones are dropped (windows slide, so the
/// requests asked change).
const KEPT: usize = 4096;

type Slot = Arc<tokio::sync::Mutex<Option<(Instant, QueryPage)>>>;

pub struct Recent {
    inner: Arc<dyn SortedTable>,
    recheck: Duration,
    slots: Mutex<HashMap<String, Slot>>,
    /// Reads sent to the table for shared partitions, and reads answered
    /// without one.
    pub fetched: std::sync::atomic::AtomicU64,
    pub shared: std::sync::atomic::AtomicU64,
}

/// The partition a read is of, as `/metrics` counts them.
fn partition(req: &QueryRequest) -> &'static str {
    match req.pk.as_str() {
        LAYOUT_PK => "layout",
        STATS_PK => "stats",
        MARKERS_PK => "compacted",
        pk if pk.starts_with(CHANGES_PK) => "changes",
        pk if pk.starts_with(FILL_PK) => "fill",
        _ => "items",
    }
}

fn is_shared(req: &QueryRequest) -> bool {
    req.exclusive_start.is_none()
        && match partition(req) {
            "layout" | "stats" | "changes" | "fill" => true,
            "compacted" => !req.consistent,
            _ => false,
        }
}

impl Recent {
    pub fn new(inner: Arc<dyn SortedTable>, recheck: Duration) -> Recent {
        Recent {
            inner,
            recheck,
            slots: Mutex::new(HashMap::new()),
            fetched: Default::default(),
            shared: Default::default(),
        }
    }

    /// How old a shared read may be.
    pub fn recheck(&self) -> Duration {
        self.recheck
    }

    /// How long a read of a partition is shared: `recheck` for what
    /// decides an answer (the layout item, the change marks); ten times
    /// that for the planner's inputs (statistics, the compaction-marker
    /// hint), which steer how a read is made, never what it returns (the
    /// hint is checked after the items).
    fn horizon(&self, class: &str) -> Duration {
        match class {
            "stats" | "compacted" => self.recheck * PLANNING_AGE,
            _ => self.recheck,
        }
    }

    /// A view whose shared reads were all begun at or after `t`.
    pub fn since(&self, t: Instant) -> Since<'_> {
        Since { recent: self, t }
    }

    async fn read(&self, req: &QueryRequest, not_before: Option<Instant>) -> Result<QueryPage, TableError> {
        use std::sync::atomic::Ordering::Relaxed;
        let class = partition(req);
        if !is_shared(req) {
            metrics::counter!("zigzag_serve_table_reads_total", "partition" => class, "shared" => "no").increment(1);
            return self.inner.query(req).await;
        }
        let slot = {
            let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            if slots.len() > KEPT {
                let old = (self.recheck * 2 * PLANNING_AGE).max(Duration::from_secs(10));
                slots.retain(|_, s| s.try_lock().map_or(true, |v| v.as_ref().is_some_and(|(t, _)| t.elapsed() < old)));
            }
            slots.entry(format!("{req:?}")).or_default().clone()
        };
        // Held across the read: a query arriving meanwhile waits for it.
        let mut held = slot.lock().await;
        if let Some((at, page)) = held.as_ref() {
            let fresh_enough = not_before.map_or(at.elapsed() < self.horizon(class), |t| *at >= t);
            if fresh_enough {
                self.shared.fetch_add(1, Relaxed);
                metrics::counter!("zigzag_serve_table_reads_total", "partition" => class, "shared" => "yes")
                    .increment(1);
                return Ok(page.clone());
            }
        }
        let began = Instant::now();
        self.fetched.fetch_add(1, Relaxed);
        metrics::counter!("zigzag_serve_table_reads_total", "partition" => class, "shared" => "no").increment(1);
        let page = self.inner.query(req).await?;
        *held = Some((began, page.clone()));
        Ok(page)
    }
}

/// [`Recent`] with reads begun at or after an instant.
pub struct Since<'a> {
    recent: &'a Recent,
    t: Instant,
}

#[async_trait]
impl SortedTable for Recent {
    async fn put(&self, item: Item) -> Result<(), TableError> {
        self.inner.put(item).await
    }
    async fn query(&self, req: &QueryRequest) -> Result<QueryPage, TableError> {
        self.read(req, None).await
    }
    async fn update(&self, req: &UpdateRequest) -> Result<UpdateOutcome, TableError> {
        self.inner.update(req).await
    }
    async fn update_batch(&self, reqs: &[UpdateRequest]) -> Result<Vec<ItemResult>, TableError> {
        self.inner.update_batch(reqs).await
    }
    async fn delete(&self, req: &DeleteRequest) -> Result<DeleteOutcome, TableError> {
        self.inner.delete(req).await
    }
    fn write_parallelism(&self) -> usize {
        self.inner.write_parallelism()
    }
}

#[async_trait]
impl SortedTable for Since<'_> {
    async fn put(&self, item: Item) -> Result<(), TableError> {
        self.recent.put(item).await
    }
    async fn query(&self, req: &QueryRequest) -> Result<QueryPage, TableError> {
        self.recent.read(req, Some(self.t)).await
    }
    async fn update(&self, req: &UpdateRequest) -> Result<UpdateOutcome, TableError> {
        self.recent.update(req).await
    }
    async fn delete(&self, req: &DeleteRequest) -> Result<DeleteOutcome, TableError> {
        self.recent.delete(req).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering::Relaxed;
    use zigzag_core::table::{MemoryTable, SortKeyCondition};

    fn layout_read() -> QueryRequest {
        let mut req = QueryRequest::new(LAYOUT_PK, SortKeyCondition::Any);
        req.consistent = true;
        req
    }

    #[tokio::test]
    async fn shared_partitions_are_read_once_per_recheck_and_items_every_time() {
        let table = Arc::new(MemoryTable::new());
        table.put(Item::new(LAYOUT_PK, b"layout".to_vec()).with("v", 1i64)).await.unwrap();
        let recent = Recent::new(table.clone(), Duration::from_millis(300));
        let stats = QueryRequest::new(STATS_PK, SortKeyCondition::Any);
        table.put(Item::new(STATS_PK, b"cc".to_vec()).with("items", 1i64)).await.unwrap();
        recent.query(&stats).await.unwrap();
        let req = layout_read();
        let reads = (0..20).map(|_| recent.query(&req));
        let pages = futures::future::try_join_all(reads).await.unwrap();
        assert!(pages.iter().all(|p| p.items.len() == 1));
        assert_eq!(recent.fetched.load(Relaxed), 2, "the statistics, then twenty queries at once: one read");
        // A change within the recheck is not seen; after it, it is.
        table.put(Item::new(LAYOUT_PK, b"layout".to_vec()).with("v", 2i64)).await.unwrap();
        assert_eq!(recent.query(&layout_read()).await.unwrap().items[0].attrs["v"], 1i64.into());
        let t = Instant::now();
        assert_eq!(
            recent.since(t).query(&layout_read()).await.unwrap().items[0].attrs["v"],
            2i64.into(),
            "since: fresh"
        );
        tokio::time::sleep(Duration::from_millis(350)).await;
        table.put(Item::new(LAYOUT_PK, b"layout".to_vec()).with("v", 3i64)).await.unwrap();
        assert_eq!(recent.query(&layout_read()).await.unwrap().items[0].attrs["v"], 3i64.into());
        // The planner's statistics: shared ten times longer.
        table.put(Item::new(STATS_PK, b"cc".to_vec()).with("items", 2i64)).await.unwrap();
        assert_eq!(recent.query(&stats).await.unwrap().items[0].attrs["items"], 1i64.into(), "shared for 3 s");
        // The compaction markers: the hint before the items is shared, the
        // strongly consistent check after them never.
        let mut markers = QueryRequest::new(MARKERS_PK, SortKeyCondition::Any);
        let before = recent.fetched.load(Relaxed);
        for _ in 0..3 {
            recent.query(&markers).await.unwrap();
        }
        assert_eq!(recent.fetched.load(Relaxed), before + 1, "the hint: read once");
        markers.consistent = true;
        let before = recent.fetched.load(Relaxed) + recent.shared.load(Relaxed);
        for _ in 0..3 {
            recent.query(&markers).await.unwrap();
        }
        assert_eq!(recent.fetched.load(Relaxed) + recent.shared.load(Relaxed), before, "the check: every time");
        // Items are never shared.
        let items = QueryRequest::new("p0#minute#2026-11-21", SortKeyCondition::Any);
        let before = recent.fetched.load(Relaxed) + recent.shared.load(Relaxed);
        for _ in 0..3 {
            recent.query(&items).await.unwrap();
        }
        assert_eq!(recent.fetched.load(Relaxed) + recent.shared.load(Relaxed), before);
    }
}
