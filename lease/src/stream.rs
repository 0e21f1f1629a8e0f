//! Which lease state belongs to which incarnation of a stream.
//!
//! A Kinesis stream deleted and created again under its name has the same
//! shard ids (`shardId-000000000000`, ...) and new records. Leases keyed by
//! the name alone would be the old stream's: its finished shards never read
//! again, its checkpoints a foreign stream's sequence numbers. So the lease
//! state is keyed by the stream's *incarnation* (`Source::identity`, its
//! creation time): item `#streams`/`<name>` records the incarnation the plain
//! name's leases belong to (the first one seen; tables from before
//! incarnations were kept are adopted by it), and any later incarnation
//! keys its leases `<name>@<incarnation>`. The old incarnation's leases are
//! retired: left in place, never read, reported.

use crate::LeaseError;
use zigzag_core::table::{AttrValue, SortedTable, UpdateOutcome, UpdateRequest};

pub const STREAMS_PK: &str = "#streams";
/// The incarnation the plain name's leases belong to.
const FIRST: &str = "first";

/// The key of `stream`'s lease state for incarnation `identity` (None: a
/// source that cannot be recreated, keyed by its name).
pub async fn resolve(leases: &dyn SortedTable, stream: &str, identity: Option<&str>) -> Result<String, LeaseError> {
    let Some(identity) = identity else { return Ok(stream.to_string()) };
    let req = UpdateRequest::new(STREAMS_PK, stream.as_bytes().to_vec()).set_if_absent(FIRST, identity);
    let first = match leases.update(&req).await? {
        UpdateOutcome::Applied(item) | UpdateOutcome::ConditionFailed(Some(item)) => match item.attrs.get(FIRST) {
            Some(AttrValue::S(s)) => s.clone(),
            other => return Err(LeaseError::Unreadable(format!("stream {stream}: first incarnation is {other:?}"))),
        },
        UpdateOutcome::ConditionFailed(None) => {
            return Err(LeaseError::Unreadable(format!("stream {stream}: incarnation refused without an item")))
        }
    };
    if first == identity {
        return Ok(stream.to_string());
    }
    tracing::warn!(
        stream,
        incarnation = identity,
        first,
        "the stream was deleted and created again: the leases of its earlier incarnations are retired, never read; \
         this one is read from the configured start"
    );
    Ok(format!("{stream}@{identity}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use zigzag_core::table::MemoryTable;

    #[tokio::test]
    async fn the_first_incarnation_keeps_the_name_and_a_later_one_gets_its_own_key() {
        let t = MemoryTable::new();
        assert_eq!(resolve(&t, "s", None).await.unwrap(), "s", "no identity: the name");
        assert_eq!(resolve(&t, "s", Some("100")).await.unwrap(), "s", "the first incarnation adopts the name");
        assert_eq!(resolve(&t, "s", Some("100")).await.unwrap(), "s", "and keeps it");
        assert_eq!(resolve(&t, "s", Some("200")).await.unwrap(), "s@200", "a recreated stream: its own key");
        assert_eq!(resolve(&t, "s", Some("300")).await.unwrap(), "s@300");
        assert_eq!(resolve(&t, "other", Some("200")).await.unwrap(), "other", "per stream name");
    }
}
