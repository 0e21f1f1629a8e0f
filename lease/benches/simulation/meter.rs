//! A sorted table metered with DynamoDB's capacity rules: a read costs its
//! bytes in 4 KB units (halved when eventually consistent), a write the
//! larger of the item before and after in 1 KB units (a refused
//! conditional write too). Charged per worker and per partition key and
//! second of (virtual) time.

use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use zigzag_core::table::{
    DeleteOutcome, DeleteRequest, Item, MemoryTable, QueryPage, QueryRequest, SortedTable, TableError, UpdateOutcome,
    UpdateRequest,
};

/// Capacity one worker consumed.
#[derive(Debug, Default)]
pub struct Account {
    pub used: Mutex<(f64, f64)>,
}

impl Account {
    pub fn snapshot(&self) -> (f64, f64) {
        *self.used.lock().unwrap()
    }
}

/// Capacity per (partition key, second), and the largest item written.
pub struct Meter {
    start: tokio::time::Instant,
    seconds: Mutex<HashMap<(String, u64), (f64, f64)>>,
    pub largest: AtomicUsize,
}

impl Meter {
    pub fn new() -> Arc<Meter> {
        Arc::new(Meter { start: tokio::time::Instant::now(), seconds: Mutex::default(), largest: AtomicUsize::new(0) })
    }

    pub fn now_s(&self) -> u64 {
        self.start.elapsed().as_secs()
    }

    pub fn charge(&self, pk: &str, rcu: f64, wcu: f64, account: &Account) {
        let mut used = account.used.lock().unwrap();
        used.0 += rcu;
        used.1 += wcu;
        let mut seconds = self.seconds.lock().unwrap();
        let slot = seconds.entry((pk.to_string(), self.now_s())).or_default();
        slot.0 += rcu;
        slot.1 += wcu;
    }

    /// The busiest partition key's (RCU, WCU) in any one second of
    /// `[from, to)`, and which keys they were.
    pub fn hottest(&self, from: u64, to: u64) -> ((f64, String), (f64, String)) {
        let seconds = self.seconds.lock().unwrap();
        let mut rcu = (0.0, String::new());
        let mut wcu = (0.0, String::new());
        for ((pk, s), (r, w)) in seconds.iter().filter(|((_, s), _)| (from..to).contains(s)) {
            let _ = s;
            if *r > rcu.0 {
                rcu = (*r, pk.clone());
            }
            if *w > wcu.0 {
                wcu = (*w, pk.clone());
            }
        }
        (rcu, wcu)
    }
}

/// One worker's view of the shared table.
pub struct Metered {
    pub inner: Arc<MemoryTable>,
    pub meter: Arc<Meter>,
    pub account: Arc<Account>,
}

pub fn write_units(bytes: usize) -> f64 {
    bytes.div_ceil(1024).max(1) as f64
}

#[async_trait]
impl SortedTable for Metered {
    async fn put(&self, item: Item) -> Result<(), TableError> {
        let before = self.inner.get(&item.pk, &item.sk).await?.map_or(0, |i| i.size());
        let size = item.size();
        self.meter.largest.fetch_max(size, Ordering::Relaxed);
        self.meter.charge(&item.pk.clone(), 0.0, write_units(before.max(size)), &self.account);
        self.inner.put(item).await
    }

    async fn query(&self, req: &QueryRequest) -> Result<QueryPage, TableError> {
        let page = self.inner.query(req).await?;
        self.meter.charge(&req.pk, page.consumed_rcu, 0.0, &self.account);
        Ok(page)
    }

    async fn update(&self, req: &UpdateRequest) -> Result<UpdateOutcome, TableError> {
        let before = self.inner.get(&req.pk, &req.sk).await?.map_or(0, |i| i.size());
        let out = self.inner.update(req).await?;
        let after = match &out {
            UpdateOutcome::Applied(item) => item.size(),
            UpdateOutcome::ConditionFailed(_) => before,
        };
        self.meter.largest.fetch_max(after, Ordering::Relaxed);
        self.meter.charge(&req.pk, 0.0, write_units(before.max(after)), &self.account);
        Ok(out)
    }

    async fn delete(&self, req: &DeleteRequest) -> Result<DeleteOutcome, TableError> {
        let before = self.inner.get(&req.pk, &req.sk).await?.map_or(0, |i| i.size());
        self.meter.charge(&req.pk, 0.0, write_units(before), &self.account);
        self.inner.delete(req).await
    }
}
