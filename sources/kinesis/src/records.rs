//! Kinesis records → the pipeline's records, shared by both readers
//! (GetRecords polling and SubscribeToShard fan-out): each record is split
//! into user records ([`crate::kpl`]) at (sequence number, sub-sequence
//! number), and those at or before the reader's last delivered position are
//! dropped (a checkpoint may sit inside an aggregate).

use crate::kpl;
use aws_sdk_kinesis::types::Record;
use zigzag_model::source::{RecordBatch, SourceError};
use zigzag_model::{Position, SeqNo};

/// Appends `records` to `batch`, skipping positions at or before `after`,
/// and moves `after` to the last position appended.
pub(crate) fn push_records(
    shard: &str,
    records: &[Record],
    after: &mut Option<Position>,
    batch: &mut RecordBatch,
) -> Result<(), SourceError> {
    for record in records {
        let seq: SeqNo = record.sequence_number().parse().map_err(|e| SourceError::Shard {
            shard: shard.to_string(),
            message: format!("sequence number {:?}: {e:?}", record.sequence_number()),
        })?;
        let data = record.data().as_ref();
        let fresh = |pos: Position| after.is_none_or(|a| pos > a);
        match kpl::deaggregate(record.partition_key().unwrap_or_default(), data) {
            Ok(users) => {
                for user in &users {
                    let pos = Position::new(seq, user.sub_sequence);
                    if fresh(pos) {
                        batch.push(pos, user.data);
                    }
                }
            }
            // An aggregate that cannot be trusted goes on whole, at sub 0:
            // it does not decode as an event, so it is dead-lettered with
            // its bytes rather than lost.
            Err(e) => {
                tracing::warn!(%shard, %seq, error = %e, "KPL aggregate does not decode");
                metrics::counter!("zigzag_kinesis_bad_aggregates_total", "shard" => shard.to_string()).increment(1);
                let pos = Position::new(seq, 0);
                if fresh(pos) {
                    batch.push(pos, data);
                }
            }
        }
    }
    if let Some(last) = batch.last_position() {
        *after = Some(last);
    }
    Ok(())
}

/// The shard's lag for `zigzag_kinesis_millis_behind_latest`; a reader
/// dropped (its lease given, lost or finished) sets 0, since a stale value
/// would stay in every maximum over shards.
pub(crate) fn report_lag(shard: &str, millis_behind: i64) {
    metrics::gauge!("zigzag_kinesis_millis_behind_latest", "shard" => shard.to_string()).set(millis_behind as f64);
}
