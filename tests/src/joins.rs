//! Many workers joining one lease table at once (issue 20: a deployment of
//! 100 starting together), for every store's tests.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use zigzag_core::table::SortedTable;
use zigzag_lease::{Coordinator, LeaseOptions};

/// `n` workers join at once, each with the store `table()` makes (its own
/// connection or client, as processes would have): every one takes a lane
/// of its own within 120 s, and the table shows `n` owned lanes.
pub async fn all_join_at_once(n: usize, table: impl Fn() -> Arc<dyn SortedTable>) {
    let mut joins = tokio::task::JoinSet::new();
    for i in 0..n {
        let c = Coordinator::new(table(), LeaseOptions::new("st", format!("w{i}")));
        joins.spawn(async move { c.join().await });
    }
    let lanes = tokio::time::timeout(Duration::from_secs(120), joins.join_all())
        .await
        .expect("every worker joins within 120 s");
    let lanes: Vec<u32> = lanes.into_iter().collect::<Result<_, _>>().unwrap_or_else(|e| panic!("a worker: {e}"));
    let distinct: BTreeSet<u32> = lanes.iter().copied().collect();
    assert_eq!(distinct.len(), n, "each worker holds a lane of its own: {lanes:?}");
    let reader = Coordinator::new(table(), LeaseOptions::new("st", "reader"));
    let stored = reader.read_lanes().await.expect("the lanes");
    assert_eq!(stored.iter().filter(|l| l.owner.is_some()).count(), n, "{stored:?}");
}
