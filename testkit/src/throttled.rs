//! A table whose reads of one partition are throttled every other time
//! (the first of each pair), as DynamoDB throttles a hot partition: a
//! reader that retries throttled reads answers through it as through the
//! table itself, and one that does not fails.

use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use zigzag_core::table::{
    DeleteOutcome, DeleteRequest, Item, ItemResult, QueryPage, QueryRequest, SortedTable, TableError, UpdateOutcome,
    UpdateRequest,
};

pub struct ThrottledEveryOther<T> {
    inner: T,
    pk: String,
    reads: AtomicU64,
}

impl<T> ThrottledEveryOther<T> {
    /// `inner`, its reads of partition `pk` throttled every other time.
    pub fn new(inner: T, pk: &str) -> Self {
        ThrottledEveryOther { inner, pk: pk.to_string(), reads: AtomicU64::new(0) }
    }

    /// Reads of the partition throttled so far.
    pub fn throttled(&self) -> u64 {
        self.reads.load(Ordering::SeqCst).div_ceil(2)
    }
}

/// Over any handle of a table (`Arc`, a reference).
#[async_trait::async_trait]
impl<T> SortedTable for ThrottledEveryOther<T>
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
        if req.pk == self.pk && self.reads.fetch_add(1, Ordering::SeqCst).is_multiple_of(2) {
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
