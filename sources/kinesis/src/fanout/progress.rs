//! What a fan-out reader has delivered, and where its next subscription
//! starts: the pure part of the reader, tested without a network.
//!
//! - Records are delivered as [`crate::records::push_records`] does for
//!   polling: user records after the last delivered position.
//! - A renewal (the 5-minute end, a broken stream, a forced early renewal)
//!   resumes AFTER the continuation sequence number of the last event that
//!   was *delivered* (returned by `next_batch`, so processed by the
//!   pipeline before it asks for more). Before any event, it starts where
//!   the reader was opened: AT the checkpoint's sequence number (the
//!   checkpoint may sit inside an aggregate; the sub-records up to it are
//!   filtered), or the configured start.
//! - The shard ends (SHARD_END) at an event that names child shards: Kinesis
//!   sends them only in the last event of a closed shard. Children are not
//!   opened here: the lease protocol lists them and reads a child only
//!   after its parents ended, exactly as with polling.

use crate::records::push_records;
use crate::source::StartingPosition;
use aws_sdk_kinesis::primitives::DateTime;
use aws_sdk_kinesis::types::{ShardIteratorType, StartingPosition as SubscribeAt, SubscribeToShardEvent};
use zigzag_model::source::{RecordBatch, SourceError};
use zigzag_model::Position;

#[derive(Debug, Clone)]
pub(crate) struct Progress {
    shard: String,
    /// Where the reader was opened when no checkpoint applies.
    start: StartingPosition,
    /// The last position delivered, or the checkpoint it was opened after.
    after: Option<Position>,
    /// The continuation sequence number of the last event delivered.
    continuation: Option<String>,
    /// Child shards named by the last event: the shard is read to its end.
    children: Option<Vec<String>>,
}

impl Progress {
    pub(crate) fn new(shard: &str, start: StartingPosition, after: Option<Position>) -> Self {
        Progress { shard: shard.to_string(), start, after, continuation: None, children: None }
    }

    pub(crate) fn ended(&self) -> bool {
        self.children.is_some()
    }

    /// The child shards of an ended shard.
    pub(crate) fn children(&self) -> &[String] {
        self.children.as_deref().unwrap_or_default()
    }

    /// Where the next SubscribeToShard starts.
    pub(crate) fn subscribe_at(&self) -> SubscribeAt {
        let at = |kind: ShardIteratorType| SubscribeAt::builder().r#type(kind);
        let position = match (&self.continuation, self.after, self.start) {
            (Some(c), _, _) => at(ShardIteratorType::AfterSequenceNumber).sequence_number(c),
            (None, Some(p), _) => at(ShardIteratorType::AtSequenceNumber).sequence_number(p.seq.to_string()),
            (None, None, StartingPosition::TrimHorizon) => at(ShardIteratorType::TrimHorizon),
            (None, None, StartingPosition::Latest) => at(ShardIteratorType::Latest),
            (None, None, StartingPosition::AtTimestamp(ms)) => {
                at(ShardIteratorType::AtTimestamp).timestamp(DateTime::from_millis(ms))
            }
        };
        // The type is always set, which is all `build` checks.
        position.build().unwrap_or_else(|_| unreachable!("a starting position always has its type"))
    }

    /// The batch of one event, which then counts as delivered.
    pub(crate) fn deliver(&mut self, event: &SubscribeToShardEvent) -> Result<RecordBatch, SourceError> {
        let mut batch = RecordBatch::default();
        push_records(&self.shard, event.records(), &mut self.after, &mut batch)?;
        batch.millis_behind = Some(event.millis_behind_latest());
        let continuation = event.continuation_sequence_number();
        if !continuation.is_empty() {
            self.continuation = Some(continuation.to_string());
        }
        if !event.child_shards().is_empty() {
            self.children = Some(event.child_shards().iter().map(|c| c.shard_id().to_string()).collect());
            batch.end_of_shard = true;
        }
        Ok(batch)
    }
}

#[cfg(test)]
mod tests;
