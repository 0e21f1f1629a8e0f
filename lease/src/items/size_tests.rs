//! The lane item at the most shards a worker holds.

use super::*;
use crate::balance::MAX_SHARDS_PER_WORKER;
use zigzag_core::table::{apply_update, UpdateOutcome};

/// DynamoDB's largest item.
const ITEM_LIMIT: usize = 400 * 1024;

/// A worker at the bound opens and validates a flush over every shard
/// it may hold, each range as large as a range gets: the lane item stays
/// under DynamoDB's 400 KB (with room for growth).
#[test]
fn an_intent_over_the_most_shards_a_worker_holds_fits_in_one_item() {
    // Kinesis sequence numbers are up to 56 digits; a shard id up to 128
    // characters; sets apart, the first record, and the lag all given;
    // the owed and written event times at their most spans.
    let spans = crate::owed::Owed::of_buckets(
        (0..2 * crate::owed::MAX_SPANS as i64).map(|k| 1_795_899_480_000 + k * 7_200_000),
        60_000,
    );
    assert_eq!(spans.spans().len(), crate::owed::MAX_SPANS);
    let seq = |i: usize| format!("{:0>56}", 49_000_000_000_000_000_000u128 + i as u128);
    let pos = |i: usize, sub: u32| -> Position { format!("{}.{sub}", seq(i)).parse().expect("a position") };
    let ranges: Vec<ShardRange> = (0..MAX_SHARDS_PER_WORKER)
        .map(|i| ShardRange {
            seal: 0,
            shard: format!("{:x<128}", format!("shardId-{i:012}")),
            lease: u64::MAX / 2,
            from: format!("{}|{}@0,1,2|{}@3,4,5", pos(i, 7), pos(i + 1, 8), pos(i + 2, 9))
                .parse()
                .expect("a checkpoint with sets apart"),
            sets: Some(vec![0, 1, 2, 3, 4, 5, 6, 7]),
            of: 12,
            first: Some(pos(i + 3, 1)),
            to: pos(i + 4, 65_000),
            ends: true,
            behind_ms: Some(86_400_000),
            owed: Some(spans.clone()),
            // The layout numbering its sets (`adoption.rs`): a digest.
            layout: "0123456789abcdef".into(),
        })
        .collect();
    let me = "a-long-host-name-0123456789abcdef~1795534537453.fb619fc5";
    let apply = |item: Option<Item>, req: &UpdateRequest| match apply_update(item, req).expect("applies") {
        UpdateOutcome::Applied(item) => item,
        other => panic!("refused: {other:?}"),
    };
    let lane = apply(None, &take_lane(7, None, me, "a-stream-name-of-some-length"));
    let opened = apply(Some(lane), &open_intent_to(7, me, 1, &ranges, "0123456789abcdef", 1_795_899_480_000));
    let valid = apply(Some(opened.clone()), &validate_intent(7, me, 1, &ranges));
    for (what, item) in [("opened", &opened), ("validated", &valid)] {
        assert!(item.size() < ITEM_LIMIT * 3 / 4, "{what}: {} bytes", item.size());
    }
    eprintln!("a lane item with {MAX_SHARDS_PER_WORKER} worst-case ranges: {} bytes", valid.size());
    assert_eq!(Lane::from_item(&valid).unwrap().in_flight().unwrap().ranges.len(), MAX_SHARDS_PER_WORKER);
}
