//! Read pacing: an optional RCU/s budget (a token bucket) and retries of
//! throttled requests, as a [`SortedTable`] wrapper, so every page of every
//! query goes through it whatever strategy reads it; and [`Retried`], the
//! same retries for writers whose writes are idempotent.
//!
//! The bucket holds at most one second of budget and starts full. A
//! request waits until the balance is positive, then runs; its consumed
//! capacity, known only afterwards, is debited (the balance may go
//! negative, and the next requests wait it off). Over any interval `T`,
//! reads stay within `rate × (T + 1 s)` plus the pages in flight at once.

use async_trait::async_trait;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use zigzag_core::retry::RetryPolicy;
use zigzag_core::table::{QueryPage, QueryRequest, SortedTable, TableError, UpdateOutcome, UpdateRequest};

#[derive(Debug)]
pub struct TokenBucket {
    rate: f64,
    capacity: f64,
    state: Mutex<(f64, Instant)>,
}

impl TokenBucket {
    /// `rate` RCU per second (positive).
    pub fn new(rate: f64) -> Self {
        let capacity = rate.max(0.5);
        TokenBucket { rate, capacity, state: Mutex::new((capacity, Instant::now())) }
    }

    fn balance(&self) -> f64 {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        s.0 = (s.0 + now.duration_since(s.1).as_secs_f64() * self.rate).min(self.capacity);
        s.1 = now;
        s.0
    }

    /// Waits until the balance is positive.
    pub async fn acquire(&self) {
        loop {
            let b = self.balance();
            if b > 0.0 {
                return;
            }
            let wait = ((-b + 1e-3) / self.rate).min(60.0);
            tokio::time::sleep(Duration::from_secs_f64(wait)).await;
        }
    }

    pub fn spend(&self, rcu: f64) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.0 -= rcu;
    }
}

/// A read-only view of a table that paces and retries queries.
pub struct Paced<'a, T: SortedTable + ?Sized> {
    inner: &'a T,
    bucket: Option<TokenBucket>,
    retry: RetryPolicy,
    retries: AtomicU64,
}

impl<'a, T: SortedTable + ?Sized> Paced<'a, T> {
    pub fn new(inner: &'a T, rcu_per_sec: Option<f64>) -> Self {
        Paced {
            inner,
            bucket: rcu_per_sec.map(TokenBucket::new),
            retry: RetryPolicy::default(),
            retries: AtomicU64::new(0),
        }
    }

    /// Requests retried after throttling, a timeout or a 5xx.
    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }
}

fn read_only() -> TableError {
    TableError::InvalidRequest("gather reads only".into())
}

#[async_trait]
impl<T: SortedTable + ?Sized> SortedTable for Paced<'_, T> {
    async fn put(&self, _item: zigzag_core::table::Item) -> Result<(), TableError> {
        Err(read_only())
    }

    async fn query(&self, req: &QueryRequest) -> Result<QueryPage, TableError> {
        self.retry
            .run(&self.retries, || async {
                if let Some(b) = &self.bucket {
                    b.acquire().await;
                }
                let page = self.inner.query(req).await?;
                if let Some(b) = &self.bucket {
                    b.spend(page.consumed_rcu);
                }
                Ok(page)
            })
            .await
    }

    async fn update(&self, _req: &UpdateRequest) -> Result<UpdateOutcome, TableError> {
        Err(read_only())
    }

    async fn delete(
        &self,
        _req: &zigzag_core::table::DeleteRequest,
    ) -> Result<zigzag_core::table::DeleteOutcome, TableError> {
        Err(read_only())
    }
}

/// A view of a table whose every call is retried after throttling, a
/// timeout or a 5xx (the one retry loop, `RetryPolicy::run`), for writers
/// whose writes are all idempotent: the layout fill (puts of whole items,
/// upward change marks, statistics merged as sketches, progress set) and
/// `delete-dropped` (deletes). A write that applied and then timed out is
/// applied again to the same result. Also for the small reads beside a
/// report's or a check's (the layout versions), whose items `Paced` reads.
pub struct Retried<'a, T: SortedTable + ?Sized> {
    inner: &'a T,
    retry: RetryPolicy,
    retries: AtomicU64,
}

impl<'a, T: SortedTable + ?Sized> Retried<'a, T> {
    pub fn new(inner: &'a T) -> Self {
        Retried { inner, retry: RetryPolicy::default(), retries: AtomicU64::new(0) }
    }

    /// Calls retried so far.
    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }
}

#[async_trait]
impl<T: SortedTable + ?Sized> SortedTable for Retried<'_, T> {
    async fn put(&self, item: zigzag_core::table::Item) -> Result<(), TableError> {
        self.retry.run(&self.retries, || self.inner.put(item.clone())).await
    }

    async fn put_batch(&self, items: Vec<zigzag_core::table::Item>) -> Result<(), TableError> {
        self.retry.run(&self.retries, || self.inner.put_batch(items.clone())).await
    }

    async fn query(&self, req: &QueryRequest) -> Result<QueryPage, TableError> {
        self.retry.run(&self.retries, || self.inner.query(req)).await
    }

    async fn update(&self, req: &UpdateRequest) -> Result<UpdateOutcome, TableError> {
        self.retry.run(&self.retries, || self.inner.update(req)).await
    }

    async fn delete(
        &self,
        req: &zigzag_core::table::DeleteRequest,
    ) -> Result<zigzag_core::table::DeleteOutcome, TableError> {
        self.retry.run(&self.retries, || self.inner.delete(req)).await
    }

    fn write_parallelism(&self) -> usize {
        self.inner.write_parallelism()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_bucket_paces_spending() {
        let b = TokenBucket::new(20.0);
        let t0 = Instant::now();
        // 40 units at 20/s with a 20-unit burst: at least ~1 s.
        for _ in 0..40 {
            b.acquire().await;
            b.spend(1.0);
        }
        assert!(t0.elapsed() >= Duration::from_millis(900), "{:?}", t0.elapsed());
    }
}
