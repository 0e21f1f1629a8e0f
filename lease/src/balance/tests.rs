use super::*;
use crate::items::Intent;
use proptest::prelude::*;
use zigzag_model::Position;

fn lease(shard: &str, owner: Option<&str>) -> ShardLease {
    ShardLease {
        seal: 0,
        shard: shard.into(),
        lag_ms: None,
        at_ms: None,
        owner: owner.map(String::from),
        lease: 1,
        parents: vec![],
        checkpoint: Checkpoint::none(),
        finished: false,
        handoff: None,
        start_ms: None,
        owed: None,
        layout: None,
    }
}

fn lane(n: u32, owner: &str) -> Lane {
    Lane {
        seal: 0,
        layout: Default::default(),
        wrote_to_ms: 0,
        lane: n,
        owner: Some(owner.into()),
        beater: Some(owner.into()),
        stream: "st".into(),
        beat: 1,
        flush: 0,
        intent: None,
    }
}

fn view(leases: Vec<ShardLease>, lanes: Vec<Lane>) -> View {
    View {
        stream: "st".into(),
        leases,
        listed: None,
        children: Default::default(),
        lanes,
        expired: HashSet::new(),
        my_lane: None,
    }
}

fn shards(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("s{i:02}")).collect()
}

#[test]
fn takes_unowned_up_to_the_target_and_every_expired_lease() {
    let ids = shards(6);
    let mut leases: Vec<_> = ids.iter().map(|s| lease(s, None)).collect();
    leases[0].owner = Some("dead".into());
    let mut v = view(leases.clone(), vec![lane(0, "me"), lane(1, "other"), lane(2, "dead")]);
    v.expired.insert(2);
    let p = plan(&v, "me");
    assert_eq!(p.live_workers, 2, "the dead worker does not count");
    assert_eq!(p.target, 3);
    assert_eq!(p.take.len(), 4, "three unowned (the target) and the expired one: {:?}", p.take);
    assert!(p.take.iter().any(|(s, _)| s == "s00"));
    assert_eq!(p.steal, None, "nothing is stolen while leases are available");
    assert_eq!(p.free, vec![(2, "dead".to_string(), 1)], "the dead lane is freed");
    // At the target already: unowned leases wait for others, expired ones do not.
    for l in leases.iter_mut().skip(1).take(3) {
        l.owner = Some("me".into());
    }
    v.leases = leases;
    let p = plan(&v, "me");
    assert_eq!(p.take.iter().map(|(s, _)| s.as_str()).collect::<Vec<_>>(), vec!["s00"]);
}

#[test]
fn a_lease_left_for_another_worker_counts_as_unheld_until_someone_holds_it() {
    // Three shards, two live workers: "me" holds its two (the target), one
    // was handed over to "other" and released; it is not mine to take.
    let mut leases: Vec<_> = shards(3).iter().map(|s| lease(s, Some("me"))).collect();
    leases[2].owner = None;
    let v = view(leases.clone(), vec![lane(0, "me"), lane(1, "other")]);
    let p = plan(&v, "me");
    assert!(p.take.is_empty(), "at the target: {:?}", p.take);
    assert_eq!(p.unheld, 1, "but nobody reads it yet: a caught-up worker must not stop on it");
    // Once "other" holds it, nothing is left unheld.
    leases[2].owner = Some("other".into());
    assert_eq!(plan(&view(leases, vec![lane(0, "me"), lane(1, "other")]), "me").unheld, 0);
}

#[test]
fn steals_one_lease_from_the_most_loaded_and_never_to_rise_above_target() {
    let ids = shards(8);
    let leases: Vec<_> = ids.iter().enumerate().map(|(i, s)| lease(s, Some(if i < 6 { "a" } else { "b" }))).collect();
    let v = view(leases, vec![lane(0, "a"), lane(1, "b"), lane(2, "me")]);
    let p = plan(&v, "me");
    assert_eq!(p.target, 3);
    let (_, _, victim) = p.steal.clone().expect("a steal");
    assert_eq!(victim, "a");
    assert!(p.take.is_empty());
    // b holds 2 and me 0: b may not steal from a worker with 3 if it has 2.
    let mut leases = v.leases.clone();
    for l in leases.iter_mut().take(3) {
        l.owner = Some("me".into());
    }
    let v = view(leases, v.lanes.clone());
    // Now a: 3, b: 2, me: 3.
    assert_eq!(plan(&v, "b").steal, None, "3 vs 2 is balanced: no thrash");
    assert_eq!(plan(&v, "me").steal, None, "at target: no steal");
}

#[test]
fn children_wait_for_finished_parents_and_then_start_at_trim_horizon() {
    let mut parent = lease("p", Some("me"));
    let mut child = lease("c", Some("me"));
    child.parents = vec!["p".into(), "gone".into()];
    let mut v = view(vec![parent.clone(), child.clone()], vec![lane(0, "me")]);
    v.listed = Some(["p".to_string(), "c".to_string()].into());
    let p = plan(&v, "me");
    assert_eq!(p.ready.iter().map(|r| r.shard.as_str()).collect::<Vec<_>>(), vec!["p"]);
    assert_eq!(p.waiting_for_parents, 1);
    parent.finished = true;
    v.leases = vec![parent, child.clone()];
    let p = plan(&v, "me");
    assert_eq!(p.ready.len(), 1);
    assert_eq!((p.ready[0].shard.as_str(), p.ready[0].from_trim_horizon), ("c", true));
    // A parent neither leased nor listed has aged out: the child is readable.
    child.parents = vec!["aged-out".into()];
    v.leases = vec![child.clone()];
    let p = plan(&v, "me");
    assert_eq!(p.ready.len(), 1);
    assert!(!p.ready[0].from_trim_horizon, "no leased parent: the configured start applies");
    // A leased parent that aged out before it was finished: not read, and
    // its child goes on.
    let stale = lease("gone", Some("me"));
    child.parents = vec!["gone".into()];
    v.leases = vec![stale, child];
    let p = plan(&v, "me");
    assert_eq!(p.ready.iter().map(|r| r.shard.as_str()).collect::<Vec<_>>(), vec!["c"]);
    assert_eq!(p.aged_out, 1);
}

#[test]
fn intents_in_flight_block_their_shards_and_committed_ranges_get_completed() {
    let mut held = lease("s", Some("me"));
    held.checkpoint = Some(Position::at(3)).into();
    let range = ShardRange {
        seal: 0,
        shard: "s".into(),
        lease: 1,
        from: Some(Position::at(3)).into(),
        sets: None,
        of: 0,
        first: None,
        to: Position::at(9),
        ends: false,
        behind_ms: None,
        owed: None,
        layout: String::new(),
    };
    let mut other = lane(1, "old");
    other.intent = Some(Intent { k: 4, state: IntentState::Valid, ranges: vec![range.clone()], layout: "L".into() });
    let mut v = view(vec![held.clone()], vec![lane(0, "me"), other.clone()]);
    let p = plan(&v, "me");
    assert!(p.ready.is_empty(), "blocked by a valid intent");
    assert!(p.recover.is_empty(), "its lane is alive");
    v.expired.insert(1);
    assert_eq!(plan(&v, "me").recover, vec![1]);
    other.intent.as_mut().unwrap().state = IntentState::Done;
    v.lanes[1] = other;
    let p = plan(&v, "me");
    assert_eq!(p.complete, vec![range.clone()]);
    assert!(p.ready.is_empty(), "blocked until completed");
    // Another worker's view: blocked for it too, but only the holder
    // completes (its leases may be older than the lanes it just read).
    let theirs = plan(&v, "them");
    assert!(theirs.complete.is_empty(), "a shard it does not hold: {:?}", theirs.complete);
    held.checkpoint = Some(Position::at(9)).into();
    v.leases = vec![held];
    let p = plan(&v, "me");
    assert!(p.complete.is_empty());
    assert_eq!(p.ready.len(), 1);
}

#[test]
fn handoffs_are_honoured_only_for_live_requesters() {
    let mut l = lease("s", Some("me"));
    l.handoff = Some("b".into());
    let v = view(vec![l.clone()], vec![lane(0, "me"), lane(1, "b")]);
    assert_eq!(plan(&v, "me").handoffs, vec![("s".to_string(), 1, "b".to_string())]);
    let v = view(vec![l], vec![lane(0, "me")]);
    assert!(plan(&v, "me").handoffs.is_empty(), "b has no lane: not alive");
}

/// Applies one worker's plan to the leases the way the coordinator and
/// the owner would: takes at once; a steal is handed over at once.
fn apply(leases: &mut [ShardLease], me: &str, p: &Plan) -> usize {
    let mut moves = 0;
    for (s, seen) in &p.take {
        let l = leases.iter_mut().find(|l| &l.shard == s).unwrap();
        assert_eq!(l.lease, *seen);
        l.owner = Some(me.into());
        l.lease += 1;
        moves += 1;
    }
    if let Some((s, seen, _)) = &p.steal {
        let l = leases.iter_mut().find(|l| &l.shard == s).unwrap();
        assert_eq!(l.lease, *seen);
        l.owner = Some(me.into());
        l.lease += 1;
        moves += 1;
    }
    moves
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// From any assignment (some leases a dead worker's), workers running
    /// passes in any order end within one lease of each other, none above
    /// the target, and then stop moving leases (no thrash). Only expired
    /// leases are ever taken past the target.
    #[test]
    fn passes_converge_to_balance_and_stop(
        n_shards in 1usize..40,
        n_workers in 1usize..6,
        initial in proptest::collection::vec(0usize..8, 40),
        order in proptest::collection::vec(0usize..6, 200),
    ) {
        let workers: Vec<String> = (0..n_workers).map(|i| format!("w{i}")).collect();
        let lanes: Vec<Lane> = workers.iter().enumerate().map(|(i, w)| lane(i as u32, w)).collect();
        // Owners: a worker, nobody, or a dead worker (no lane).
        let mut leases: Vec<ShardLease> = shards(n_shards).iter().enumerate().map(|(i, s)| {
            let o = initial[i];
            lease(s, if o < n_workers { Some(workers[o].as_str()) } else if o == 7 { Some("dead") } else { None })
        }).collect();
        let target = n_shards.div_ceil(n_workers);
        for &w in &order {
            let me = &workers[w % n_workers];
            let v = view(leases.clone(), lanes.clone());
            let p = plan(&v, me);
            prop_assert_eq!(p.target, target);
            let before = leases.iter().filter(|l| l.owner.as_deref() == Some(me)).count();
            let expired = leases.iter().filter(|l| l.owner.as_deref() == Some("dead")).count();
            prop_assert!(p.steal.is_none() || p.take.is_empty(), "a steal only when nothing is available");
            apply(&mut leases, me, &p);
            let after = leases.iter().filter(|l| l.owner.as_deref() == Some(me)).count();
            prop_assert!(
                after <= target.max(before) + expired,
                "{me} went from {before} to {after} (target {target}, {expired} expired)"
            );
            if expired == 0 && p.steal.is_some() {
                prop_assert!(after <= target, "a steal never takes {me} above the target");
            }
        }
        // Settle: a few more rounds of every worker.
        for _ in 0..(n_shards + 3) {
            for me in &workers {
                let p = plan(&view(leases.clone(), lanes.clone()), me);
                apply(&mut leases, me, &p);
            }
        }
        let counts: Vec<usize> =
            workers.iter().map(|w| leases.iter().filter(|l| l.owner.as_deref() == Some(w.as_str())).count()).collect();
        prop_assert!(leases.iter().all(|l| l.owner.as_deref().is_some_and(|o| workers.iter().any(|w| w == o))),
            "every lease is held by a live worker");
        prop_assert!(counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1, "unbalanced: {counts:?}");
        prop_assert!(counts.iter().all(|c| *c <= target));
        for me in &workers {
            let p = plan(&view(leases.clone(), lanes.clone()), me);
            prop_assert!(p.take.is_empty() && p.steal.is_none(), "{me} still moves leases at balance: {p:?}");
        }
    }
}

#[test]
fn no_worker_takes_more_than_an_intent_can_list_and_the_rest_is_counted() {
    let max = MAX_SHARDS_PER_WORKER;
    let ids: Vec<String> = (0..max + 300).map(|i| format!("shard-{i:05}")).collect();
    let mut leases: Vec<_> = ids.iter().map(|s| lease(s, None)).collect();
    // 200 of them a dead worker's: expired leases are capped too.
    for l in leases.iter_mut().take(200) {
        l.owner = Some("dead".into());
    }
    let mut v = view(leases, vec![lane(0, "me"), lane(1, "dead")]);
    v.expired.insert(1);
    let p = plan(&v, "me");
    assert_eq!((p.live_workers, p.target), (1, max));
    assert_eq!(p.take.len(), max, "at most {max}, expired ones included");
    assert_eq!(p.over_capacity, 300, "the rest waits, counted");
    // A second live worker: room for every shard, nothing over.
    v.lanes.push(lane(2, "other"));
    let p = plan(&v, "me");
    assert_eq!((p.target, p.over_capacity), ((max + 300).div_ceil(2), 0));
}

/// A lease read to `to` on every item set.
fn started_at(mut l: ShardLease, to: u64) -> ShardLease {
    l.checkpoint = Some(Position::at(to)).into();
    l
}

#[test]
fn a_finished_lease_is_retired_once_every_listed_child_started_and_never_before() {
    let mut parent = lease("p", None);
    parent.finished = true;
    let mut c1 = lease("c1", Some("me"));
    c1.parents = vec!["p".into()];
    let mut c2 = lease("c2", Some("me"));
    c2.parents = vec!["p".into()];
    let mut v = view(vec![parent.clone(), c1.clone(), c2.clone()], vec![lane(0, "me")]);
    assert!(plan(&v, "me").retire.is_empty(), "never without a listing");
    v.listed = Some(["p", "c1", "c2"].map(String::from).into());
    v.children = [("p".to_string(), vec!["c1".to_string(), "c2".to_string()])].into();
    assert!(plan(&v, "me").retire.is_empty(), "no child started");
    v.leases = vec![parent.clone(), started_at(c1.clone(), 3), c2.clone()];
    assert!(plan(&v, "me").retire.is_empty(), "one child of two started");
    v.leases = vec![parent.clone(), started_at(c1.clone(), 3), started_at(c2.clone(), 4)];
    assert_eq!(plan(&v, "me").retire, vec![("p".to_string(), 1)], "both started");
    // Retired: the children are read from their checkpoints as before.
    v.leases = vec![started_at(c1.clone(), 3), started_at(c2.clone(), 4)];
    let p = plan(&v, "me");
    assert_eq!(p.ready.len(), 2, "a started child needs no parent lease: {p:?}");
    assert_eq!(p.waiting_for_parents, 0);
    // A child that has not started still waits for a parent that is listed
    // and has no lease (made, not yet seen): it cannot know it was read.
    v.leases = vec![c1.clone()];
    assert_eq!(plan(&v, "me").waiting_for_parents, 1);
    // Aged out of the listing and finished: retired whatever its children.
    let mut old = lease("old", None);
    old.finished = true;
    v.leases = vec![old.clone(), c1.clone()];
    assert_eq!(plan(&v, "me").retire, vec![("old".to_string(), 1)]);
    // Unfinished: never.
    old.finished = false;
    v.leases = vec![old, c1];
    assert!(plan(&v, "me").retire.is_empty());
}

#[test]
fn a_retired_shard_is_consumed_through_its_descendants_and_a_new_one_is_not() {
    // g -> c -> k: k started; c and g were retired.
    let k = started_at(lease("k", Some("me")), 7);
    let children: HashMap<String, Vec<String>> =
        [("g".to_string(), vec!["c".to_string()]), ("c".to_string(), vec!["k".to_string()])].into();
    let by_id: HashMap<&str, &ShardLease> = [("k", &k)].into();
    assert!(consumed("c", &children, &by_id));
    assert!(consumed("g", &children, &by_id), "through a retired child");
    assert!(!consumed("k", &children, &by_id), "a shard without children was not consumed");
    let fresh = lease("k", None);
    let by_id: HashMap<&str, &ShardLease> = [("k", &fresh)].into();
    assert!(!consumed("c", &children, &by_id), "its child has not started: c was not read to its end");
}

#[test]
fn listed_shards_without_leases_are_unfinished_unless_retired() {
    let mut v = view(vec![], vec![lane(0, "me")]);
    assert_eq!(plan(&v, "me").unfinished, 1, "nothing listed, no lease: not known finished");
    v.listed = Some(["a", "b"].map(String::from).into());
    assert_eq!(plan(&v, "me").unfinished, 2, "another worker makes their leases: not finished");
    let mut b = started_at(lease("b", None), 9);
    b.finished = true;
    b.parents = vec!["a".into()];
    v.leases = vec![b];
    v.children = [("a".to_string(), vec!["b".to_string()])].into();
    assert_eq!(plan(&v, "me").unfinished, 0, "a retired parent and a finished child: the stream is read");
}
