use super::*;
use zigzag_core::table::{apply_update, UpdateOutcome};

fn run(item: Option<Item>, req: &UpdateRequest) -> (bool, Option<Item>) {
    match apply_update(item.clone(), req).unwrap() {
        UpdateOutcome::Applied(i) => (true, Some(i)),
        UpdateOutcome::ConditionFailed(_) => (false, item),
    }
}

fn range(shard: &str, from: Option<u64>, to: u64) -> ShardRange {
    ShardRange {
        seal: 0,
        shard: shard.into(),
        lease: 1,
        from: from.map(Position::at).into(),
        sets: None,
        of: 0,
        first: None,
        to: Position::at(to),
        ends: false,
        behind_ms: None,
        owed: None,
        layout: String::new(),
    }
}

#[test]
fn a_lease_changes_owner_only_from_the_counter_last_seen() {
    let (ok, item) = run(None, &create_lease("st", "s1", &["p0".into()]));
    assert!(ok);
    let (ok, again) = run(item.clone(), &create_lease("st", "s1", &[]));
    assert!(ok);
    assert_eq!(again, item, "creating an existing lease changes nothing");
    let (ok, item) = run(item, &take_lease("st", "s1", 0, "a"));
    assert!(ok);
    let (ok, item) = run(item, &take_lease("st", "s1", 0, "b"));
    assert!(!ok, "a take from a stale counter fails");
    let lease = ShardLease::from_item(item.as_ref().unwrap()).unwrap();
    assert_eq!((lease.owner.as_deref(), lease.lease, lease.parents), (Some("a"), 1, vec!["p0".to_string()]));
    let (ok, item) = run(item, &request_handoff("st", "s1", 1, "b"));
    assert!(ok);
    let (ok, _) = run(item.clone(), &request_handoff("st", "s1", 0, "c"));
    assert!(!ok, "a request names the counter it saw");
    assert_eq!(ShardLease::from_item(item.as_ref().unwrap()).unwrap().handoff.as_deref(), Some("b"));
    let (ok, _) = run(item.clone(), &give_lease("st", "s1", 1, "b", "b"));
    assert!(!ok, "only the owner gives a lease");
    let (ok, item) = run(item, &give_lease("st", "s1", 1, "a", "b"));
    assert!(ok);
    let lease = ShardLease::from_item(item.as_ref().unwrap()).unwrap();
    assert_eq!((lease.owner.as_deref(), lease.lease, lease.handoff), (Some("b"), 2, None));
    let (ok, item) = run(item, &give_lease("st", "s1", 2, "b", ""));
    assert!(ok);
    assert_eq!(ShardLease::from_item(item.as_ref().unwrap()).unwrap().owner, None, "released");
}

#[test]
fn checkpoints_move_by_compare_and_set() {
    let (_, item) = run(None, &create_lease("st", "s1", &[]));
    let (_, item) = run(item, &take_lease("st", "s1", 0, "a"));
    let (ok, item) =
        run(item, &advance_checkpoint("st", "s1", &Checkpoint::none(), &Some(Position::at(10)).into(), false));
    assert!(ok);
    let (ok, item) =
        run(item, &advance_checkpoint("st", "s1", &Checkpoint::none(), &Some(Position::at(20)).into(), false));
    assert!(!ok, "a stale completion cannot move it again");
    let (ok, item) = run(
        item,
        &advance_checkpoint("st", "s1", &Some(Position::at(10)).into(), &Some(Position::at(20)).into(), true),
    );
    assert!(ok);
    let lease = ShardLease::from_item(item.as_ref().unwrap()).unwrap();
    assert_eq!((lease.checkpoint, lease.finished, lease.owner), (Some(Position::at(20)).into(), true, None));
}

#[test]
fn a_lane_runs_open_valid_done_and_fences_other_owners() {
    let (ok, item) = run(None, &take_lane(0, None, "a", "st"));
    assert!(ok);
    let (ok, item) = run(item, &take_lane(0, None, "b", "st"));
    assert!(!ok, "an owned lane is not free");
    let mut ranges = vec![range("s1", None, 5), range("s2", Some(3), 9)];
    ranges[0].first = Some(Position::new(zigzag_model::SeqNo::from_u128(2), 1));
    let (ok, item) = run(item, &open_intent(0, "a", 1, &ranges, "L"));
    assert!(ok);
    let (ok, item) = run(item, &open_intent(0, "a", 2, &ranges, "L"));
    assert!(!ok, "one intent at a time");
    let (ok, item) = run(item, &commit_intent(0, "a", 1));
    assert!(!ok, "an open intent is validated before it commits");
    let lane = Lane::from_item(item.as_ref().unwrap()).unwrap();
    assert_eq!(lane.in_flight().unwrap().ranges, ranges, "ranges survive the JSON round trip");
    let (ok, item) = run(item, &validate_intent(0, "a", 1, &ranges[1..]));
    assert!(ok);
    let lane = Lane::from_item(item.as_ref().unwrap()).unwrap();
    let intent = lane.in_flight().unwrap();
    assert_eq!((intent.k, intent.state, intent.ranges.len()), (1, IntentState::Valid, 1));
    assert_eq!(intent.ranges[0], ranges[1]);
    // The owner stops beating; a recoverer (holding the beat) takes the lane
    // from the owner it saw.
    let (ok, item) = run(item, &take_lane(0, Some("b"), "r", "other"));
    assert!(!ok, "only from its owner");
    let (ok, item) = run(item, &take_lane(0, Some("a"), "r", "other"));
    assert!(ok);
    let (ok, item) = run(item, &commit_intent(0, "a", 1));
    assert!(!ok, "the old owner is fenced");
    let (ok, item) = run(item, &commit_intent(0, "r", 1));
    assert!(ok);
    let lane = Lane::from_item(item.as_ref().unwrap()).unwrap();
    assert_eq!((lane.flush, lane.stream.as_str(), lane.in_flight()), (1, "st", None));
    let (ok, item) = run(item, &release_lane(0, "r"));
    assert!(ok);
    let (ok, item) = run(item, &take_lane(0, None, "c", "st"));
    assert!(ok, "a released lane is free");
    let (ok, item) = run(item, &open_intent(0, "c", 2, &ranges, "L"));
    assert!(ok, "flush numbers continue on the lane");
    let (ok, item) = run(item, &abort_intent(0, "c", 2));
    assert!(ok);
    let lane = Lane::from_item(item.as_ref().unwrap()).unwrap();
    assert_eq!((lane.flush, lane.intent.as_ref().map(|i| i.k)), (1, Some(1)));
    let (ok, _) = run(item, &open_intent(0, "c", 2, &ranges, "L"));
    assert!(ok, "an aborted number is used again");
}

#[test]
fn a_beat_is_claimed_free_or_from_the_beat_that_stopped_and_beaten_only_by_its_holder() {
    let beat = |item: &Option<Item>| Beat::from_item(item.as_ref().unwrap()).unwrap();
    let (ok, item) = run(None, &claim_beat(3, None, "a"));
    assert!(ok, "a lane without a beat item is free");
    assert_eq!(beat(&item), Beat { lane: 3, owner: Some("a".into()), beat: 1 });
    let (ok, item) = run(item, &claim_beat(3, None, "b"));
    assert!(!ok, "a claimed beat is not free");
    let (ok, item) = run(item, &heartbeat(3, 1, "a"));
    assert!(ok);
    let (ok, item) = run(item, &heartbeat(3, 1, "a"));
    assert!(!ok, "a beat moves on from the value seen, once");
    let (ok, item) = run(item, &claim_beat(3, Some(("a", 1)), "r"));
    assert!(!ok, "a beat that moved is not taken");
    let (ok, item) = run(item, &claim_beat(3, Some(("a", 2)), "r"));
    assert!(ok, "one that stopped is");
    assert_eq!(beat(&item), Beat { lane: 3, owner: Some("r".into()), beat: 3 });
    let (ok, item) = run(item, &heartbeat(3, 3, "a"));
    assert!(!ok, "the old holder can no longer beat");
    let (ok, item) = run(item, &release_beat(3, "a"));
    assert!(!ok, "nor free it");
    let (ok, item) = run(item, &release_beat(3, "r"));
    assert!(ok);
    assert_eq!(beat(&item).owner, None);
    let (ok, _) = run(item, &claim_beat(3, None, "c"));
    assert!(ok, "a freed beat is free");
    // A lane of the format before beat items: claimed from the lane's own beat.
    let (ok, _) = run(None, &claim_beat(4, Some(("old", 7)), "r"));
    assert!(ok);
}

#[test]
fn a_heartbeat_writes_a_few_bytes_whatever_the_intent_holds() {
    let (_, item) = run(None, &claim_beat(0, None, "a-worker~1700000000000.0123abcd"));
    let (_, item) = run(item, &heartbeat(0, 1, "a-worker~1700000000000.0123abcd"));
    let size = item.unwrap().size();
    assert!(size < 100, "a beat item of {size} bytes");
}
