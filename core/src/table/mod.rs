//! The sorted-table abstraction: partitions of items ordered by a binary
//! sort key, updated atomically under conditions and queried with
//! DynamoDB's semantics (key condition, filter,
//! `Limit` counting evaluated items, `LastEvaluatedKey`, 1 MB pages,
//! ScannedCount/Count, read capacity in 4 KB units).
//!
//! Every store (in-memory here; SQLite and DynamoDB in their crates) passes
//! [`conformance::run`]. Query strategies are written against this trait only.

pub mod conformance;
mod delete;
mod item;
mod memory;
mod request;
mod update;

pub use delete::{check_delete, DeleteOutcome, DeleteRequest};
pub use item::{AttrValue, Item, PK_ATTR, SK_ATTR, TTL_ATTR};
pub use memory::MemoryTable;
pub use request::{
    evaluate_page, read_capacity, Condition, Filter, QueryPage, QueryRequest, SortKeyCondition, Test, PAGE_BYTES,
    RCU_BYTES,
};
pub use update::{apply_update, Action, CmpOp, Guard, UpdateOutcome, UpdateRequest};

use async_trait::async_trait;

/// One item's result in [`SortedTable::update_batch`].
pub type ItemResult = Result<UpdateOutcome, TableError>;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum TableError {
    /// The request is malformed (DynamoDB's ValidationException).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The store asked us to slow down; retryable.
    #[error("throttled: {0}")]
    Throttled(String),
    /// The store did not answer in time or failed on its side (timeouts,
    /// 5xx, InternalServerError); retryable. The request may have applied.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// Anything else the store reported.
    #[error("store error: {0}")]
    Store(#[source] Box<dyn std::error::Error + Send + Sync>),
}

#[async_trait]
pub trait SortedTable: Send + Sync {
    /// Inserts or wholly replaces the item with the same (pk, sk).
    async fn put(&self, item: Item) -> Result<(), TableError>;

    /// Inserts or replaces many items; stores override this to batch.
    async fn put_batch(&self, items: Vec<Item>) -> Result<(), TableError> {
        for item in items {
            self.put(item).await?;
        }
        Ok(())
    }

    /// One page of a Query.
    async fn query(&self, req: &QueryRequest) -> Result<QueryPage, TableError>;

    /// One atomic conditional update of one item (DynamoDB UpdateItem).
    async fn update(&self, req: &UpdateRequest) -> Result<UpdateOutcome, TableError>;

    /// Several independent updates of distinct items; each applies or fails
    /// on its own (this is not a transaction), and each item's result says
    /// which. No store retries here: the caller retries the failed items
    /// (one retry layer). An outer error means the whole call failed.
    /// Stores override this to save round trips.
    async fn update_batch(&self, reqs: &[UpdateRequest]) -> Result<Vec<ItemResult>, TableError> {
        Ok(futures::future::join_all(reqs.iter().map(|r| self.update(r))).await)
    }

    /// One atomic conditional delete of one item (DynamoDB DeleteItem with
    /// a condition).
    async fn delete(&self, req: &DeleteRequest) -> Result<DeleteOutcome, TableError>;

    /// How many `update_batch` calls are worth running at once: 1 for a
    /// store that serializes writes anyway (SQLite, memory); more for a
    /// remote store that bounds its own requests in flight (DynamoDB).
    fn write_parallelism(&self) -> usize {
        1
    }

    /// Strongly consistent read of one item (GetItem).
    async fn get(&self, pk: &str, sk: &[u8]) -> Result<Option<Item>, TableError> {
        let mut req = QueryRequest::new(pk, SortKeyCondition::Eq(sk.to_vec()));
        req.consistent = true;
        Ok(self.query(&req).await?.items.pop())
    }

    /// Deletes the items whose [`TTL_ATTR`] is before `now_s` (epoch
    /// seconds) and says how many. A store that expires items by itself
    /// (DynamoDB's TTL) or keeps none (memory) does nothing: the default.
    async fn purge_expired(&self, now_s: i64) -> Result<u64, TableError> {
        let _ = now_s;
        Ok(0)
    }
}
