//! The single-writer checkpoint format (before leases): pk = the stream
//! name, sk = the shard id, with `seq`/`sub` (committed position), `flush`,
//! `pending_flush` and `finished`. Its aggregate items carry per-shard
//! marks `w#<shard>` that lanes do not use.
//!
//! A committed checkpoint moves into the shard's lease (once; later runs
//! find the lease's checkpoint set and leave it). A flush that was begun
//! and never committed cannot be finished under lanes (its marks are per
//! shard): the migration refuses with a message saying how to finish it.

use crate::checkpoint::Checkpoint;
use crate::items;
use crate::LeaseError;
use std::sync::Arc;
use zigzag_core::query::run_key_range;
use zigzag_core::table::{AttrValue, Item, QueryRequest, SortKeyCondition, SortedTable};
use zigzag_model::{Position, SeqNo};

/// A committed checkpoint of the old format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyCheckpoint {
    pub shard: String,
    pub committed: Option<Position>,
    pub finished: bool,
}

fn num(item: &Item, k: &str) -> Option<u64> {
    match item.attrs.get(k) {
        Some(AttrValue::N(d)) => u64::try_from(*d).ok(),
        _ => None,
    }
}

/// Reads one old item; None if it is not an old checkpoint.
pub fn parse(item: &Item) -> Result<Option<LegacyCheckpoint>, LeaseError> {
    if num(item, "flush").is_none() {
        return Ok(None);
    }
    let shard = String::from_utf8_lossy(&item.sk).into_owned();
    if num(item, "pending_flush").unwrap_or(0) != 0 {
        return Err(LeaseError::Legacy(format!(
            "shard {shard} has a flush begun by a previous version of ingest and never committed; \
             run that version once more to finish it, then upgrade"
        )));
    }
    let committed = match item.attrs.get("seq") {
        Some(AttrValue::S(s)) => {
            let seq: SeqNo = s.parse().map_err(|e| LeaseError::Legacy(format!("shard {shard}: {e}")))?;
            Some(Position::new(seq, num(item, "sub").unwrap_or(0) as u32))
        }
        _ => None,
    };
    Ok(Some(LegacyCheckpoint {
        shard,
        committed,
        finished: matches!(item.attrs.get("finished"), Some(AttrValue::Bool(true))),
    }))
}

/// Moves the stream's old checkpoints into leases that have none; returns
/// how many moved.
pub async fn migrate(table: &Arc<dyn SortedTable>, stream: &str) -> Result<usize, LeaseError> {
    let mut req = QueryRequest::new(stream, SortKeyCondition::Any);
    req.consistent = true;
    let mut old = Vec::new();
    for item in &run_key_range(table.as_ref(), req).await.map_err(crate::table_error)?.items {
        if let Some(cp) = parse(item)? {
            old.push(cp);
        }
    }
    let mut moved = 0;
    for cp in old {
        table.update(&items::create_lease(stream, &cp.shard, &[])).await?;
        let Some(at) = cp.committed else { continue };
        if table
            .update(&items::advance_checkpoint(
                stream,
                &cp.shard,
                &Checkpoint::none(),
                &Checkpoint::uniform(Some(at)),
                cp.finished,
            ))
            .await?
            .applied()
        {
            moved += 1;
            tracing::info!(shard = %cp.shard, checkpoint = %at, "checkpoint migrated from the single-writer format");
        }
    }
    Ok(moved)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::items::ShardLease;
    use zigzag_core::table::MemoryTable;

    #[tokio::test]
    async fn committed_checkpoints_move_once_and_pending_flushes_refuse() {
        let table: Arc<dyn SortedTable> = Arc::new(MemoryTable::new());
        let old = Item::new("st", b"s1".to_vec())
            .with("owner", "ingest-1")
            .with("seq", "42")
            .with("sub", 3)
            .with("flush", 7)
            .with("pending_flush", 0);
        table.put(old).await.unwrap();
        table.put(Item::new("st", b"s2".to_vec()).with("flush", 0)).await.unwrap();
        assert_eq!(migrate(&table, "st").await.unwrap(), 1);
        let lease = table.get(&items::shards_pk("st"), b"s1").await.unwrap().unwrap();
        let lease = ShardLease::from_item(&lease).unwrap();
        assert_eq!((lease.checkpoint, lease.owner), (Some(Position::new(SeqNo::from_u128(42), 3)).into(), None));
        assert!(table.get(&items::shards_pk("st"), b"s2").await.unwrap().is_some(), "a lease for every old shard");
        assert_eq!(migrate(&table, "st").await.unwrap(), 0, "only once");

        table.put(Item::new("st", b"s3".to_vec()).with("flush", 1).with("pending_flush", 2)).await.unwrap();
        let e = migrate(&table, "st").await.unwrap_err().to_string();
        assert!(e.contains("s3") && e.contains("previous version"), "{e}");
    }
}
