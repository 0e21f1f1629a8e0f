//! A table whose reads of one partition are throttled now and then, as
//! DynamoDB throttles a hot partition: a reader that retries throttled
//! reads answers through it as through the table itself, and one that does
//! not fails. The reads throttled are the 1st, 2nd, 4th, 7th, 11th, … (the
//! gaps grow by one), so a caller that reads several times per attempt
//! and starts over on a throttle still gets through, where throttling
//! every other read would stop one that reads twice for ever.

use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use zigzag_core::table::{
    DeleteOutcome, DeleteRequest, Item, ItemResult, QueryPage, QueryRequest, SortedTable, TableError, UpdateOutcome,
    UpdateRequest,
};

pub struct ThrottledReads<T> {
    inner: T,
    pk: String,
    reads: AtomicU64,
    throttled: AtomicU64,
}

impl<T> ThrottledReads<T> {
    /// `inner`, its reads of partition `pk` throttled now and then.
    pub fn new(inner: T, pk: &str) -> Self {
        ThrottledReads { inner, pk: pk.to_string(), reads: AtomicU64::new(0), throttled: AtomicU64::new(0) }
    }

    /// Reads of the partition throttled so far.
    pub fn throttled(&self) -> u64 {
        self.throttled.load(Ordering::SeqCst)
    }
}

/// Whether read number `n` (from 0) is throttled: `n` is a triangular
/// number (0, 1, 3, 6, 10, …), `8n + 1` a perfect square.
fn throttles(n: u64) -> bool {
    let m = 8 * n + 1;
    let r = m.isqrt();
    r * r == m
}

/// Over any handle of a table (`Arc`, a reference).
#[async_trait::async_trait]
impl<T> SortedTable for ThrottledReads<T>
where
    T: Deref + Send + Sync,
    T::Target: SortedTable,
{
    async fn put(&self, item: Item) -> Result<(), TableError> {
        self.inner.put(item).await
    }
    async fn put_batch(&self, items: Vec<Item>) -> Result<(), TableError> {
        self.inner.put_batch(items).await
    }
    async fn query(&self, req: &QueryRequest) -> Result<QueryPage, TableError> {
        if req.pk == self.pk && throttles(self.reads.fetch_add(1, Ordering::SeqCst)) {
            self.throttled.fetch_add(1, Ordering::SeqCst);
            return Err(TableError::Throttled("ProvisionedThroughputExceededException (injected by the test)".into()));
        }
        self.inner.query(req).await
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

#[cfg(test)]
mod tests {
    #[test]
    fn the_reads_throttled_are_ever_further_apart() {
        let throttled: Vec<u64> = (0..30).filter(|&n| super::throttles(n)).collect();
        assert_eq!(throttled, [0, 1, 3, 6, 10, 15, 21, 28]);
    }
}
