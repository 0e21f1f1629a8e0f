//! In-memory sorted table: a B-tree per partition behind a lock. The
//! reference implementation for tests, `zbench` and benchmarks.

use super::request::evaluate_page;
use super::{
    apply_update, check_delete, DeleteOutcome, DeleteRequest, Item, QueryPage, QueryRequest, SortKeyCondition,
    SortedTable, TableError, UpdateOutcome, UpdateRequest,
};
use async_trait::async_trait;
use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::RwLock;

#[derive(Debug, Default)]
pub struct MemoryTable {
    partitions: RwLock<HashMap<String, BTreeMap<Vec<u8>, Item>>>,
}

impl MemoryTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of items in all partitions.
    pub fn len(&self) -> usize {
        self.read().values().map(|p| p.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, BTreeMap<Vec<u8>, Item>>> {
        // A panic while holding the lock cannot leave a B-tree half-updated
        // (inserts are single calls), so a poisoned lock is still usable.
        self.partitions.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Synchronous query (the async trait method delegates here).
    pub fn query_sync(&self, req: &QueryRequest) -> Result<QueryPage, TableError> {
        req.validate()?;
        let parts = self.read();
        let Some(part) = parts.get(&req.pk) else {
            return Ok(evaluate_page(req, std::iter::empty()));
        };
        let start = match (&req.exclusive_start, req.sk.lower()) {
            (Some(s), _) => Bound::Excluded(s.clone()),
            (None, Some(lo)) => Bound::Included(lo.to_vec()),
            (None, None) => Bound::Unbounded,
        };
        let cond = &req.sk;
        let candidates = part
            .range((start, Bound::Unbounded))
            .take_while(|(k, _)| !is_past_end(cond, k))
            .filter(|(k, _)| cond.matches(k))
            .map(|(_, item)| item.clone());
        Ok(evaluate_page(req, candidates))
    }
}

/// True once a key (scanned in ascending order from the condition's lower
/// bound) lies past every key the condition can match.
fn is_past_end(cond: &SortKeyCondition, k: &[u8]) -> bool {
    match cond {
        SortKeyCondition::Eq(v) | SortKeyCondition::Le(v) => k > v.as_slice(),
        SortKeyCondition::Between(_, hi) => k > hi.as_slice(),
        SortKeyCondition::Lt(v) => k >= v.as_slice(),
        SortKeyCondition::BeginsWith(p) => !k.starts_with(p),
        SortKeyCondition::Any | SortKeyCondition::Ge(_) | SortKeyCondition::Gt(_) => false,
    }
}

#[async_trait]
impl SortedTable for MemoryTable {
    async fn put(&self, item: Item) -> Result<(), TableError> {
        self.put_batch(vec![item]).await
    }

    async fn put_batch(&self, items: Vec<Item>) -> Result<(), TableError> {
        for item in &items {
            item.validate_keys()?;
        }
        let mut parts = self.partitions.write().unwrap_or_else(|e| e.into_inner());
        for item in items {
            parts.entry(item.pk.clone()).or_default().insert(item.sk.clone(), item);
        }
        Ok(())
    }

    async fn query(&self, req: &QueryRequest) -> Result<QueryPage, TableError> {
        self.query_sync(req)
    }

    async fn update(&self, req: &UpdateRequest) -> Result<UpdateOutcome, TableError> {
        req.validate()?;
        let mut parts = self.partitions.write().unwrap_or_else(|e| e.into_inner());
        let part = parts.entry(req.pk.clone()).or_default();
        let outcome = apply_update(part.get(&req.sk).cloned(), req)?;
        if let UpdateOutcome::Applied(item) = &outcome {
            part.insert(req.sk.clone(), item.clone());
        }
        Ok(outcome)
    }

    async fn delete(&self, req: &DeleteRequest) -> Result<DeleteOutcome, TableError> {
        req.validate()?;
        let mut parts = self.partitions.write().unwrap_or_else(|e| e.into_inner());
        let current = parts.get(&req.pk).and_then(|p| p.get(&req.sk)).cloned();
        let outcome = check_delete(current, req);
        if outcome.deleted() {
            if let Some(part) = parts.get_mut(&req.pk) {
                part.remove(&req.sk);
            }
        }
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn passes_the_conformance_suite() {
        let table = MemoryTable::new();
        crate::table::conformance::run(&table, "mem").await.unwrap();
    }
}
