//! The coordinator against an in-memory table, with the interleavings a
//! review found dangerous: a dead-looking lane whose owner opens a flush
//! between another worker's decision to free it and the take; and a dead
//! worker's committed, uncompleted flush on a lane that a worker of another
//! stream frees; a flush begun just after the heartbeat found the lane lost;
//! a worker leaving with leases it holds but never read.

use async_trait::async_trait;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use zigzag_core::table::{
    ItemResult, MemoryTable, QueryPage, QueryRequest, SortedTable, TableError, UpdateOutcome, UpdateRequest,
};
use zigzag_lease::items::{self, shards_pk};
use zigzag_lease::{Coordinator, IntentState, LeaseOptions, ShardInfo, ShardLease, ShardRange};
use zigzag_model::Position;

type Hook = Box<dyn FnOnce() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Send>;

/// Runs a hook once, just before the first update `at` picks.
struct BeforeTake {
    inner: Arc<dyn SortedTable>,
    hook: Mutex<Option<Hook>>,
    at: fn(&UpdateRequest) -> bool,
}

/// A dead-looking lane's beat item claimed from another worker (the
/// first write of a recovery's or a freeing's take).
fn claims_a_beat(req: &UpdateRequest) -> bool {
    req.pk == items::BEATS_PK && req.guards.iter().any(|g| g.attr == "beat") && sets_owner(req)
}

/// Its lane item taken from another owner (the second write).
fn takes_a_lane(req: &UpdateRequest) -> bool {
    let from_owner = |g: &zigzag_core::table::Guard| g.attr == "owner" && g.value != "".into();
    req.pk == items::LANES_PK && req.guards.iter().any(from_owner) && sets_owner(req)
}

fn sets_owner(req: &UpdateRequest) -> bool {
    req.actions.iter().any(|(a, act)| a == "owner" && *act != zigzag_core::table::Action::Set("".into()))
}

#[async_trait]
impl SortedTable for BeforeTake {
    async fn put(&self, item: zigzag_core::table::Item) -> Result<(), TableError> {
        self.inner.put(item).await
    }
    async fn query(&self, req: &QueryRequest) -> Result<QueryPage, TableError> {
        self.inner.query(req).await
    }
    async fn update(&self, req: &UpdateRequest) -> Result<UpdateOutcome, TableError> {
        if (self.at)(req) {
            let hook = self.hook.lock().unwrap().take();
            if let Some(h) = hook {
                h().await;
            }
        }
        self.inner.update(req).await
    }
    async fn update_batch(&self, reqs: &[UpdateRequest]) -> Result<Vec<ItemResult>, TableError> {
        self.inner.update_batch(reqs).await
    }
    async fn delete(
        &self,
        req: &zigzag_core::table::DeleteRequest,
    ) -> Result<zigzag_core::table::DeleteOutcome, TableError> {
        self.inner.delete(req).await
    }
}

fn options(stream: &str, worker: &str) -> LeaseOptions {
    LeaseOptions { failover: Duration::from_millis(60), ..LeaseOptions::new(stream, worker) }
}

/// A shard's first range, records 1 to 5, read under lease counter `lease`.
fn first_range(shard: &str, lease: u64) -> ShardRange {
    ShardRange {
        seal: 0,
        shard: shard.into(),
        lease,
        from: zigzag_lease::Checkpoint::none(),
        sets: None,
        of: 0,
        first: Some(Position::at(1)),
        to: Position::at(5),
        ends: false,
        behind_ms: None,
        owed: None,
        layout: String::new(),
    }
}

fn shard(id: &str) -> ShardInfo {
    ShardInfo::root(id)
}

#[tokio::test]
async fn a_lane_whose_owner_opens_a_flush_while_it_is_being_freed_is_recovered_not_freed() {
    // Before the beat is claimed, and between the claim and the lane's take.
    for at in [claims_a_beat as fn(&UpdateRequest) -> bool, takes_a_lane] {
        owner_opens_a_flush_while_its_lane_is_freed(at).await;
    }
}

async fn owner_opens_a_flush_while_its_lane_is_freed(at: fn(&UpdateRequest) -> bool) {
    let table: Arc<dyn SortedTable> = Arc::new(MemoryTable::new());
    let w = Arc::new(Coordinator::new(table.clone(), options("st", "w")));
    let w_lane = w.join().await.unwrap();
    w.pass(Some(&[shard("s1")])).await.unwrap();
    let lease = ShardLease::from_item(&table.get(&shards_pk("st"), b"s1").await.unwrap().unwrap()).unwrap();
    assert_eq!(lease.worker_id(), Some("w"));

    // R sees W's lane, then W stays silent past the failover...
    let hooked = Arc::new(BeforeTake { inner: table.clone(), hook: Mutex::new(None), at });
    let r = Coordinator::new(hooked.clone(), options("st", "r"));
    r.join().await.unwrap();
    r.pass(None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(80)).await;
    // ... and opens and proves a flush just before R's take of its lane.
    let range = first_range("s1", lease.lease);
    let w2 = w.clone();
    *hooked.hook.lock().unwrap() = Some(Box::new(move || {
        Box::pin(async move {
            let began = w2.begin(vec![range], "L").await.expect("W's flush opens and is proven");
            assert_eq!(began.ranges.len(), 1);
        })
    }));
    let plan = r.pass(None).await.unwrap();
    assert_eq!(plan.free.len(), 1, "R decided to free W's lane");
    let lanes = r.read_lanes().await.unwrap();
    let taken = lanes.iter().find(|l| l.lane == w_lane).expect("W's lane");
    assert_eq!(taken.worker_id(), Some("r"), "R holds the lane it took: {taken:?}");
    assert_eq!(taken.in_flight().map(|i| i.state), Some(IntentState::Valid), "the flush is still there");
    // W is fenced; R's next pass recovers the flush instead of freeing it.
    assert!(w.commit(&zigzag_lease::Began { lane: taken.lane, k: 1, ranges: vec![] }).await.is_err());
    let plan = r.pass(None).await.unwrap();
    assert_eq!(plan.recover, vec![taken.lane], "recovered, never released with a flush in flight");
    assert!(plan.free.is_empty());
}

#[tokio::test]
async fn a_lane_freed_by_another_streams_worker_completes_its_committed_ranges_first() {
    let table: Arc<dyn SortedTable> = Arc::new(MemoryTable::new());
    // D reads stream Y and commits a flush over Y's s1, then dies before
    // moving s1's checkpoint.
    let d = Coordinator::new(table.clone(), options("Y", "d"));
    d.join().await.unwrap();
    d.pass(Some(&[shard("s1")])).await.unwrap();
    let lease = ShardLease::from_item(&table.get(&shards_pk("Y"), b"s1").await.unwrap().unwrap()).unwrap();
    let range = ShardRange {
        seal: 0,
        shard: "s1".into(),
        lease: lease.lease,
        from: zigzag_lease::Checkpoint::none(),
        sets: None,
        of: 0,
        first: Some(Position::at(1)),
        to: Position::at(9),
        ends: false,
        behind_ms: None,
        owed: None,
        layout: String::new(),
    };
    let began = d.begin(vec![range], "L").await.unwrap();
    d.commit(&began).await.unwrap();
    // X's worker, with the same shard id in its own stream, frees the lane.
    let x = Coordinator::new(table.clone(), options("X", "x"));
    x.join().await.unwrap();
    x.pass(Some(&[shard("s1")])).await.unwrap();
    tokio::time::sleep(Duration::from_millis(80)).await;
    let plan = x.pass(Some(&[shard("s1")])).await.unwrap();
    assert_eq!(plan.free.len(), 1, "X frees D's lane");
    let y = ShardLease::from_item(&table.get(&shards_pk("Y"), b"s1").await.unwrap().unwrap()).unwrap();
    assert_eq!(y.checkpoint, Some(Position::at(9)).into(), "Y's range was completed before the lane was freed");
    let x_lease = ShardLease::from_item(&table.get(&shards_pk("X"), b"s1").await.unwrap().unwrap()).unwrap();
    assert_eq!(x_lease.checkpoint, zigzag_lease::Checkpoint::none(), "X's own s1 is untouched");
    let freed = x.read_lanes().await.unwrap().into_iter().find(|l| l.lane == began.lane).unwrap();
    assert!(freed.owner.is_none() && freed.intent.is_some_and(|i| i.ranges.is_empty()), "freed, ranges cleared");
}

#[tokio::test]
async fn a_flush_begun_after_the_heartbeat_found_the_lane_lost_is_told_the_lane_was_lost() {
    let table: Arc<dyn SortedTable> = Arc::new(MemoryTable::new());
    let w = Coordinator::new(table.clone(), options("st", "w"));
    let never_joined = w.begin(vec![], "L").await;
    assert!(matches!(never_joined, Err(zigzag_lease::LeaseError::NotJoined)), "{never_joined:?}");
    let w_lane = w.join().await.unwrap();
    let r = Coordinator::new(table.clone(), options("st", "r"));
    r.join().await.unwrap();
    r.pass(None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(80)).await;
    let freed: Vec<u32> = r.pass(None).await.unwrap().free.iter().map(|f| f.0).collect();
    assert_eq!(freed, vec![w_lane], "W silent past the failover: freed");

    // The heartbeat finds the loss first; the flush that follows is told of
    // the same loss (it rejoins), not that W never joined (a fatal error).
    let lost = w.heartbeat().await;
    assert!(matches!(lost, Err(zigzag_lease::LeaseError::LaneLost { lane, joined: 1 }) if lane == w_lane), "{lost:?}");
    let began = w.begin(vec![], "L").await;
    assert!(
        matches!(began, Err(zigzag_lease::LeaseError::LaneLost { lane, joined: 1 }) if lane == w_lane),
        "{began:?}"
    );
    // Joined again, W flushes under its new lane.
    let again = w.join().await.unwrap();
    assert_eq!(w.joined(), 2);
    assert_eq!(w.begin(vec![], "L").await.expect("a flush under the new lane").lane, again);
}

#[tokio::test]
async fn leaving_releases_the_leases_held_but_never_read() {
    let table: Arc<dyn SortedTable> = Arc::new(MemoryTable::new());
    let w = Coordinator::new(table.clone(), options("st", "w"));
    w.join().await.unwrap();
    w.pass(Some(&[shard("s1"), shard("s2"), shard("s3")])).await.unwrap();
    let held = |leases: &[ShardLease]| leases.iter().filter(|l| l.worker_id() == Some("w")).count();
    let leases = w.read_leases().await.unwrap();
    assert_eq!(held(&leases), 3);
    // The one read here is given away as the pipeline does; the other two
    // (taken by a last pass, or waiting for parents) are found and released.
    let s1 = leases.iter().find(|l| l.shard == "s1").unwrap();
    assert!(w.give("s1", s1.lease, "").await.unwrap());
    assert_eq!(w.release_held().await.unwrap(), 2);
    let after = w.read_leases().await.unwrap();
    assert_eq!(held(&after), 0, "{after:?}");
    assert!(after.iter().all(|l| l.owner.as_deref().unwrap_or("").is_empty()), "released, not given: {after:?}");
}

/// `ingest abandon-flush`: a dead worker's proven flush (its records gone
/// from the stream) is committed as it stands: the lane is freed with the
/// flush counted, the shard's checkpoint moves past the range (the shard is
/// read again from there), and the abandoned ranges are returned to report.
#[tokio::test]
async fn an_abandoned_flush_is_committed_as_it_stands_and_its_shards_move_on() {
    let table: Arc<dyn SortedTable> = Arc::new(MemoryTable::new());
    let w = Coordinator::new(table.clone(), options("st", "w"));
    let w_lane = w.join().await.unwrap();
    w.pass(Some(&[shard("s1")])).await.unwrap();
    let lease = ShardLease::from_item(&table.get(&shards_pk("st"), b"s1").await.unwrap().unwrap()).unwrap();
    let range = first_range("s1", lease.lease);
    w.begin(vec![range], "L").await.expect("W's flush opens and is proven");
    // W dies. The operator watches its lane past the failover.
    let op = Coordinator::new(table.clone(), options("st", "operator"));
    assert!(op.abandon_flush(w_lane).await.unwrap().is_none(), "nothing read yet: nothing abandoned");
    op.view(None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(80)).await;
    let view = op.view(None).await.unwrap();
    assert!(view.expired.contains(&w_lane));
    let abandoned = op.abandon_flush(w_lane).await.unwrap().expect("the proven flush");
    assert_eq!((abandoned.k, abandoned.ranges.len()), (1, 1));
    let lane = op.read_lanes().await.unwrap().into_iter().find(|l| l.lane == w_lane).unwrap();
    assert_eq!((lane.owner.as_deref(), lane.flush, lane.in_flight().is_none()), (None, 1, true), "{lane:?}");
    let after = op.read_leases().await.unwrap();
    assert_eq!(after[0].checkpoint.earliest(), Some(Position::at(5)), "read again after the range: {after:?}");
}

/// A stream resharded again and again keeps only the leases it needs: a
/// parent read to its end is retired once its children started, by one
/// worker, and never made again while the stream still lists it.
#[tokio::test]
async fn finished_parents_are_retired_once_their_children_started_and_never_made_again() {
    let table: Arc<dyn SortedTable> = Arc::new(MemoryTable::new());
    let w = Coordinator::new(table.clone(), options("st", "w"));
    w.join().await.unwrap();
    let child = |id: &str, parent: &str| ShardInfo { id: id.into(), parents: vec![parent.into()] };
    // Ten generations: s0 -> s1 -> ... -> s9, each listed with all before it.
    let mut listing = vec![shard("s0")];
    for g in 1..10 {
        listing.push(child(&format!("s{g}"), &format!("s{}", g - 1)));
    }
    w.pass(Some(&listing)).await.unwrap();
    assert_eq!(w.read_leases().await.unwrap().len(), 10, "one lease per listed shard");
    // Every generation but the last is read to its end; the last started.
    for g in 0..10u64 {
        let to: zigzag_lease::Checkpoint = Some(Position::at(g + 1)).into();
        let req = items::advance_checkpoint("st", &format!("s{g}"), &zigzag_lease::Checkpoint::none(), &to, g < 9);
        assert!(table.update(&req).await.unwrap().applied());
    }
    w.pass(Some(&listing)).await.unwrap();
    w.pass(Some(&listing)).await.unwrap();
    let left: Vec<String> = w.read_leases().await.unwrap().into_iter().map(|l| l.shard).collect();
    assert_eq!(left, vec!["s9".to_string()], "every finished ancestor retired, none made again");
    let plan = w.pass(Some(&listing)).await.unwrap();
    assert_eq!(plan.ready.iter().map(|r| r.shard.as_str()).collect::<Vec<_>>(), vec!["s9"], "{plan:?}");
    assert_eq!(w.read_leases().await.unwrap().len(), 1, "listed ancestors stay retired");
}
