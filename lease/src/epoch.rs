//! The lease table and the aggregate table, bound to each other.
//!
//! Exactly-once rests on the two agreeing: a lane's flush numbers (lease
//! table) must stay above the `w@<lane>` marks its earlier flushes left on
//! the items (aggregate table). A lease table that is reset while the
//! aggregate table is kept (deleted and recreated, restored from a backup of
//! another time, or another table named by mistake) restarts the lanes at
//! flush 0: their writes would be skipped as "already applied", and the
//! lost checkpoints would read the shards again from the start. Nothing in
//! either table alone shows it.
//!
//! So each lease table has an **epoch**, a random id made once, in its item
//! `#epoch`; the aggregate table's layout item records the epoch of the
//! lease table its writers use (the first writer binds it). A writer whose
//! lease table has another epoch refuses before it writes anything
//! ([`LeaseError::OtherLeaseTable`]). Tables written before epochs existed
//! are bound by the first writer that has them.

use crate::LeaseError;
use zigzag_core::table::{AttrValue, SortedTable, UpdateOutcome, UpdateRequest};
use zigzag_model::layout::{LAYOUT_PK, LAYOUT_SK};

/// The lease table's epoch item.
pub const EPOCH_PK: &str = "#epoch";
pub const EPOCH_SK: &[u8] = b"epoch";
/// Its id (on the epoch item), and the bound id (on the layout item).
const ID: &str = "id";
const BOUND: &str = "leases";

fn stored_string(outcome: UpdateOutcome, attr: &str, what: &str) -> Result<String, LeaseError> {
    let item = match outcome {
        UpdateOutcome::Applied(item) | UpdateOutcome::ConditionFailed(Some(item)) => item,
        UpdateOutcome::ConditionFailed(None) => {
            return Err(LeaseError::Unreadable(format!("{what}: refused without an item")))
        }
    };
    match item.attrs.get(attr) {
        Some(AttrValue::S(s)) if !s.is_empty() => Ok(s.clone()),
        other => Err(LeaseError::Unreadable(format!("{what}: {attr} is {other:?}"))),
    }
}

/// The lease table's epoch, made now if it has none (every worker may race
/// to make it: the first write wins, the others read it).
pub async fn ensure(leases: &dyn SortedTable) -> Result<String, LeaseError> {
    let fresh = format!("{:016x}{:016x}", rand::random::<u64>(), rand::random::<u64>());
    let req = UpdateRequest::new(EPOCH_PK, EPOCH_SK.to_vec()).set_if_absent(ID, fresh.as_str());
    stored_string(leases.update(&req).await?, ID, "the lease table's epoch")
}

/// Binds the aggregate table to lease table `epoch` if it is not bound yet;
/// refuses if it is bound to another.
pub async fn bind(aggregates: &dyn SortedTable, epoch: &str) -> Result<(), LeaseError> {
    let req = UpdateRequest::new(LAYOUT_PK, LAYOUT_SK.to_vec()).set_if_absent(BOUND, epoch);
    let bound = stored_string(aggregates.update(&req).await?, BOUND, "the aggregate table's lease epoch")?;
    if bound == epoch {
        Ok(())
    } else {
        metrics::counter!("zigzag_lease_table_mismatches_total").increment(1);
        Err(LeaseError::OtherLeaseTable { bound, found: epoch.to_string() })
    }
}

/// [`ensure`] then [`bind`]: what a writer checks before its first write.
pub async fn check(leases: &dyn SortedTable, aggregates: &dyn SortedTable) -> Result<(), LeaseError> {
    bind(aggregates, &ensure(leases).await?).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use zigzag_core::table::MemoryTable;

    #[tokio::test]
    async fn the_first_lease_table_binds_and_another_is_refused_until_the_first_is_back() {
        let (aggregates, leases, other) = (MemoryTable::new(), MemoryTable::new(), MemoryTable::new());
        check(&leases, &aggregates).await.expect("binds an unbound table");
        check(&leases, &aggregates).await.expect("the same lease table again");
        let epoch = ensure(&leases).await.unwrap();
        assert_eq!(ensure(&leases).await.unwrap(), epoch, "made once");
        match check(&other, &aggregates).await {
            Err(e @ LeaseError::OtherLeaseTable { .. }) => {
                let text = e.to_string();
                assert!(text.contains(&epoch) && text.contains("restore"), "says what and how: {text}");
            }
            other => panic!("another lease table must be refused: {other:?}"),
        }
        check(&leases, &aggregates).await.expect("the bound lease table is still accepted");
    }
}
