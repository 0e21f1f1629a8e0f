//! Hand-built SubscribeToShard events: what kinesis-local never sends
//! (child shards) and what only a long run would show (renewal points).

use super::*;
use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::{ChildShard, HashKeyRange, Record};
use zigzag_model::SeqNo;

fn record(seq: u128, data: &[u8]) -> Record {
    Record::builder()
        .sequence_number(seq.to_string())
        .data(Blob::new(data))
        .partition_key("k")
        .build()
        .expect("a record has its required fields")
}

fn event(records: Vec<Record>, continuation: &str, behind: i64, children: &[(&str, &[&str])]) -> SubscribeToShardEvent {
    let mut b = SubscribeToShardEvent::builder()
        .set_records(Some(records))
        .continuation_sequence_number(continuation)
        .millis_behind_latest(behind);
    for (id, parents) in children {
        let mut c = ChildShard::builder().shard_id(*id).hash_key_range(
            HashKeyRange::builder().starting_hash_key("0").ending_hash_key("1").build().expect("range"),
        );
        for p in *parents {
            c = c.parent_shards(*p);
        }
        b = b.child_shards(c.build().expect("child"));
    }
    b.build().expect("an event has its required fields")
}

fn kind_and_seq(p: &Progress) -> (ShardIteratorType, Option<String>) {
    let at = p.subscribe_at();
    (at.r#type().clone(), at.sequence_number().map(String::from))
}

fn positions(batch: &RecordBatch) -> Vec<(u128, u32)> {
    batch.iter().map(|(p, _)| (p.seq.to_string().parse::<u128>().expect("a number"), p.sub)).collect()
}

#[test]
fn a_fresh_reader_subscribes_at_the_configured_start_or_at_its_checkpoint() {
    let fresh = |start| kind_and_seq(&Progress::new("s", start, None));
    assert_eq!(fresh(StartingPosition::TrimHorizon), (ShardIteratorType::TrimHorizon, None));
    assert_eq!(fresh(StartingPosition::Latest), (ShardIteratorType::Latest, None));
    let at = Progress::new("s", StartingPosition::AtTimestamp(1_700_000_000_123), None).subscribe_at();
    assert_eq!(at.r#type(), &ShardIteratorType::AtTimestamp);
    assert_eq!(at.timestamp().map(|t| t.to_millis().expect("millis")), Some(1_700_000_000_123));
    // A checkpoint may sit inside an aggregate: AT its sequence number.
    let p = Progress::new("s", StartingPosition::Latest, Some(Position::new(SeqNo::from_u128(42), 3)));
    assert_eq!(kind_and_seq(&p), (ShardIteratorType::AtSequenceNumber, Some("42".into())));
}

#[test]
fn renewal_resumes_after_the_last_delivered_events_continuation() {
    let mut p = Progress::new("s", StartingPosition::TrimHorizon, None);
    let b = p.deliver(&event(vec![record(10, b"a"), record(11, b"b")], "11", 500, &[])).expect("deliver");
    assert_eq!(positions(&b), [(10, 0), (11, 0)]);
    assert_eq!(b.millis_behind, Some(500));
    assert!(!b.end_of_shard);
    assert_eq!(kind_and_seq(&p), (ShardIteratorType::AfterSequenceNumber, Some("11".into())));
    // An empty event at the tip still moves the continuation (Kinesis
    // advances it through quiet periods) and reports being caught up.
    let b = p.deliver(&event(vec![], "19", 0, &[])).expect("deliver");
    assert!(b.records.is_empty());
    assert_eq!(b.millis_behind, Some(0));
    assert_eq!(kind_and_seq(&p), (ShardIteratorType::AfterSequenceNumber, Some("19".into())));
}

#[test]
fn records_at_or_before_the_checkpoint_are_not_delivered_again() {
    let mut p = Progress::new("s", StartingPosition::TrimHorizon, Some(Position::new(SeqNo::from_u128(5), 0)));
    let b = p.deliver(&event(vec![record(4, b"x"), record(5, b"y"), record(6, b"z")], "6", 0, &[])).expect("deliver");
    assert_eq!(positions(&b), [(6, 0)]);
    // A re-sent event (a renewal that overlapped) delivers nothing twice.
    let b = p.deliver(&event(vec![record(6, b"z")], "6", 0, &[])).expect("deliver");
    assert!(b.records.is_empty());
}

#[test]
fn a_checkpoint_inside_an_aggregate_keeps_only_the_later_user_records() {
    let agg = crate::kpl::aggregate(&[("k", b"u0".as_slice()), ("k", b"u1"), ("k", b"u2")]);
    let mut p = Progress::new("s", StartingPosition::TrimHorizon, Some(Position::new(SeqNo::from_u128(7), 1)));
    let b = p.deliver(&event(vec![record(7, &agg)], "7", 0, &[])).expect("deliver");
    assert_eq!(positions(&b), [(7, 2)]);
    assert_eq!(b.iter().map(|(_, d)| d.to_vec()).collect::<Vec<_>>(), [b"u2".to_vec()]);
}

#[test]
fn an_event_naming_child_shards_ends_the_shard_after_its_records() {
    let mut p = Progress::new("shardId-000000000000", StartingPosition::TrimHorizon, None);
    let b = p.deliver(&event(vec![record(1, b"a")], "1", 0, &[])).expect("deliver");
    assert!(!b.end_of_shard && !p.ended());
    // A split: the last event carries the last records and both children.
    let parents: &[&str] = &["shardId-000000000000"];
    let last = event(
        vec![record(2, b"b"), record(3, b"c")],
        "",
        0,
        &[("shardId-000000000001", parents), ("shardId-000000000002", parents)],
    );
    let b = p.deliver(&last).expect("deliver");
    assert_eq!(positions(&b), [(2, 0), (3, 0)], "the last event's records are delivered with the end");
    assert!(b.end_of_shard);
    assert!(p.ended());
    assert_eq!(p.children(), ["shardId-000000000001", "shardId-000000000002"]);
    // No continuation on the closing event: the resume point stays the last one's.
    assert_eq!(kind_and_seq(&p), (ShardIteratorType::AfterSequenceNumber, Some("1".into())));
}

#[test]
fn a_merge_ends_both_parents_with_the_same_child() {
    let parents: &[&str] = &["shardId-000000000001", "shardId-000000000002"];
    for parent in parents {
        let mut p = Progress::new(parent, StartingPosition::TrimHorizon, None);
        let b = p.deliver(&event(vec![], "", 0, &[("shardId-000000000003", parents)])).expect("deliver");
        assert!(b.end_of_shard && b.records.is_empty());
        assert_eq!(p.children(), ["shardId-000000000003"]);
    }
}

#[test]
fn a_sequence_number_that_is_not_a_number_is_an_error_naming_the_shard() {
    let mut p = Progress::new("shardId-7", StartingPosition::TrimHorizon, None);
    let bad = Record::builder().sequence_number("x1").data(Blob::new(b"a")).partition_key("k").build().expect("record");
    let e = p.deliver(&event(vec![bad], "1", 0, &[])).expect_err("not a number");
    assert!(e.to_string().contains("shardId-7"), "{e}");
}
