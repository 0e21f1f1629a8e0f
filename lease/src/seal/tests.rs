use super::*;
use crate::checkpoint::Checkpoint;
use crate::items::{Intent, IntentState};
use zigzag_core::table::MemoryTable;
use zigzag_model::Position;

fn lane(n: u32, owner: Option<&str>, seal: i64, intent: Option<Intent>) -> Lane {
    Lane {
        lane: n,
        owner: owner.map(String::from),
        beater: owner.map(String::from),
        stream: "st".into(),
        beat: 1,
        flush: intent.as_ref().map_or(0, |i| i.k),
        intent,
        seal,
        layout: Default::default(),
        wrote_to_ms: 0,
    }
}

fn range(shard: &str, from: u64, to: u64, seal: i64) -> ShardRange {
    ShardRange {
        shard: shard.into(),
        lease: 3,
        from: Checkpoint::uniform(Some(Position::at(from))),
        sets: None,
        of: 0,
        first: None,
        to: Position::at(to),
        ends: false,
        behind_ms: None,
        seal,
        owed: None,
        layout: String::new(),
    }
}

fn lease(shard: &str, at: u64, seal: i64) -> ShardLease {
    ShardLease {
        shard: shard.into(),
        lag_ms: None,
        at_ms: None,
        owner: Some("w".into()),
        lease: 3,
        parents: vec![],
        checkpoint: Checkpoint::uniform(Some(Position::at(at))),
        finished: false,
        handoff: None,
        start_ms: None,
        seal,
        owed: None,
        layout: None,
    }
}

fn intent(k: u64, state: IntentState, ranges: Vec<ShardRange>) -> Option<Intent> {
    Some(Intent { k, state, ranges, layout: "L".into() })
}

#[test]
fn an_owned_lane_blocks_until_it_acknowledges_and_a_free_one_never_does() {
    let leases = vec![("st".to_string(), lease("s1", 10, 0))];
    let lanes = vec![lane(0, Some("a"), 0, None), lane(1, None, 0, None), lane(2, Some("b"), 500, None)];
    let b = blockers(500, &lanes, &leases);
    assert_eq!(b, vec![Blocker::NotAcknowledged { lane: 0, owner: "a".into(), acknowledged: 0 }]);
    assert!(blockers(400, &lanes[1..], &leases).is_empty(), "acknowledged a later seal, or free");
    assert!(blockers(0, &lanes, &leases).is_empty(), "no seal: nothing to wait for");
}

#[test]
fn a_flush_read_under_an_older_seal_blocks_until_done_and_completed() {
    let old = range("s1", 10, 20, 100);
    // In flight (valid), even on an acknowledged lane: it holds records read under 100.
    let lanes = vec![lane(0, Some("a"), 500, intent(4, IntentState::Valid, vec![old.clone()]))];
    let leases = vec![("st".to_string(), lease("s1", 10, 100))];
    assert_eq!(
        blockers(500, &lanes, &leases),
        vec![Blocker::OlderFlush { lane: 0, k: 4, shard: "s1".into(), seal: 100 }]
    );
    // Committed but its checkpoint not moved: still blocks.
    let lanes = vec![lane(0, Some("a"), 500, intent(4, IntentState::Done, vec![old.clone()]))];
    assert_eq!(blockers(500, &lanes, &leases).len(), 1, "committed, not completed");
    // Completed: the lease moved past the range's start.
    let moved = vec![("st".to_string(), lease("s1", 20, 100))];
    assert!(blockers(500, &lanes, &moved).is_empty(), "completed");
    // A range read under the seal itself never blocks.
    let lanes = vec![lane(0, Some("a"), 500, intent(5, IntentState::Valid, vec![range("s1", 20, 30, 500)]))];
    assert!(blockers(500, &lanes, &moved).is_empty());
    // A dead lane (no owner) with a valid intent under an older seal waits for its recovery.
    let lanes = vec![lane(3, None, 0, intent(9, IntentState::Valid, vec![range("s2", 1, 2, 0)]))];
    assert_eq!(blockers(500, &lanes, &[]), vec![Blocker::OlderFlush { lane: 3, k: 9, shard: "s2".into(), seal: 0 }]);
}

#[test]
fn item_sets_apart_under_an_older_seal_block_and_finished_or_together_do_not() {
    let apart: Checkpoint = "5|9@1".parse().expect("a checkpoint with set 1 apart");
    assert!(!apart.is_uniform());
    let mut l = lease("s1", 0, 100);
    l.checkpoint = apart;
    let leases = vec![("st".to_string(), l.clone())];
    assert_eq!(
        blockers(500, &[], &leases),
        vec![Blocker::Apart { stream: "st".into(), shard: "s1".into(), seal: 100 }]
    );
    let mut read_under_it = l.clone();
    read_under_it.seal = 500;
    assert!(blockers(500, &[], &[("st".into(), read_under_it)]).is_empty(), "apart under the seal itself");
    let mut finished = l;
    finished.finished = true;
    assert!(blockers(500, &[], &[("st".into(), finished)]).is_empty(), "finished: never read again");
}

#[tokio::test]
async fn the_seal_only_rises_and_the_barrier_reads_every_registered_stream() {
    let t = MemoryTable::new();
    assert_eq!(read(&t, true).await.unwrap(), 0, "no seal item: none");
    assert_eq!(raise(&t, 1000).await.unwrap(), 1000);
    assert_eq!(raise(&t, 500).await.unwrap(), 1000, "never lowered");
    assert_eq!(read(&t, true).await.unwrap(), 1000);
    assert_eq!(raise(&t, 2000).await.unwrap(), 2000);
    // A lane owned by "a" that has not acknowledged, and a stream whose shard is apart.
    t.update(&crate::items::take_lane(0, None, "a", "st")).await.unwrap();
    t.update(&register_stream("st")).await.unwrap();
    t.update(&crate::items::create_lease("st", "s1", &[])).await.unwrap();
    let apart: Checkpoint = "5|9@1".parse().unwrap();
    let req = crate::items::advance_checkpoint("st", "s1", &Checkpoint::none(), &apart, false);
    t.update(&crate::items::with_seal(req, 1500)).await.unwrap();
    let b = barrier(&t, 2000).await.unwrap();
    assert_eq!(b.len(), 2, "{b:?}");
    assert!(matches!(&b[0], Blocker::NotAcknowledged { lane: 0, .. }));
    assert!(matches!(&b[1], Blocker::Apart { shard, seal: 1500, .. } if shard == "s1"));
    assert!(!t.update(&acknowledge(0, "someone else", 2000)).await.unwrap().applied(), "owner-guarded");
    t.update(&acknowledge(0, "a", 2000)).await.unwrap();
    let b = barrier(&t, 2000).await.unwrap();
    assert_eq!(b.len(), 1, "acknowledged: only the shard apart is left: {b:?}");
}
