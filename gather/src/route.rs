//! How a report reads around compaction: each bin of the plan from its
//! compacted partition when a marker says it is compacted (one query), else
//! from its scatter prefixes; then, for the prefix-read bins, the markers
//! again, strongly consistent. A marker written `deleting` after the first
//! read may mean a partial was gone when read: the report is read again
//! ([`crate::execute::execute_fresh`]). `deleting` is written before any
//! partial is deleted, so a marker read after the items that is not yet
//! `deleting` proves every partial was there. A bin compacted under a
//! minute ago ([`FRESH_MS`]) is read strongly consistent: an eventually
//! consistent read could find its marker on a replica its folded items
//! have not reached yet.

use crate::compact::marker::{self, compacted_pk, Prefetched};
use crate::error::{GatherError, Result};
use crate::plan::{PlannedQuery, Read};
use std::collections::BTreeMap;
use zigzag_core::table::SortedTable;
use zigzag_model::Rollup;

/// A plan's queries routed around the compacted bins.
#[derive(Debug, Clone)]
pub struct Routed {
    pub queries: Vec<PlannedQuery>,
    /// Bin starts read from their prefixes.
    pub prefix_bins: Vec<i64>,
    /// Bins read from their compacted partitions.
    pub compacted_bins: usize,
    /// Reading the markers: requests and RCU.
    pub cost: (u64, f64),
}

fn bin_of(read: &Read, q: &PlannedQuery) -> Option<i64> {
    read.boxes.get(q.box_index).and_then(|b| b.bin_start)
}

/// A bin compacted less than this long ago (by the marker's clock against
/// ours, so skew only widens it) is read strongly consistent: its marker
/// may be on a replica its folded items have not reached yet.
pub const FRESH_MS: i64 = 60_000;

/// The first and last bin `read` reads, if it reads binned boxes of a
/// projection compaction folds (no other bin ever has a marker).
fn bin_range(read: &Read) -> Option<(i64, i64)> {
    if !read.compactable {
        return None;
    }
    let bins = read.boxes.iter().filter_map(|b| b.bin_start);
    Some((bins.clone().min()?, bins.max()?))
}

/// Markers prefetched, by (projection, rollup).
pub type PrefetchedAll = BTreeMap<(String, Rollup), Prefetched>;

/// The markers of every read's bins, one query per (projection, rollup)
/// over the bins of all its reads, all at once (beside the statistics:
/// the planner's round trip).
pub async fn prefetch<T: SortedTable + ?Sized>(table: &T, reads: &[&Read]) -> Result<PrefetchedAll> {
    let mut ranges: BTreeMap<(String, Rollup), (i64, i64)> = BTreeMap::new();
    for read in reads {
        let Some((first, last)) = bin_range(read) else { continue };
        let e = ranges.entry((read.projection.clone(), read.rollup)).or_insert((first, last));
        *e = (e.0.min(first), e.1.max(last));
    }
    let reads = ranges.into_iter().map(|((projection, rollup), bins)| async move {
        let (markers, cost) = marker::read(table, &projection, rollup, bins, false).await?;
        Ok::<_, GatherError>(((projection, rollup), Prefetched { markers, cost }))
    });
    Ok(futures::future::try_join_all(reads).await?.into_iter().collect())
}

/// Each of the chosen plan's `reads`' prefetched markers (of its
/// projection and rollup); the first is charged with every candidate's read.
pub fn prefetched_for(all: PrefetchedAll, reads: &[Read]) -> Vec<Option<Prefetched>> {
    let (requests, rcu) = all.values().fold((0, 0.0), |(n, r), p| (n + p.cost.0, r + p.cost.1));
    let mut charged = false;
    reads
        .iter()
        .map(|read| {
            bin_range(read)?;
            all.get(&(read.projection.clone(), read.rollup)).map(|p| {
                let cost = if std::mem::replace(&mut charged, true) { (0, 0.0) } else { (requests, rcu) };
                Prefetched { cost, ..p.clone() }
            })
        })
        .collect()
}

/// Routes `read`'s queries by the markers of its bins (eventually
/// consistent: [`verify`] catches a marker read stale): the ones read with
/// its statistics if there are, else read now.
pub async fn route<T: SortedTable + ?Sized>(table: &T, read: &Read) -> Result<Routed> {
    route_at(table, read, chrono::Utc::now().timestamp_millis()).await
}

async fn route_at<T: SortedTable + ?Sized>(table: &T, plan: &Read, now_ms: i64) -> Result<Routed> {
    let Some((first, last)) = bin_range(plan) else {
        return Ok(Routed { queries: plan.queries.clone(), prefix_bins: vec![], compacted_bins: 0, cost: (0, 0.0) });
    };
    let (markers, cost) = match &plan.markers {
        Some(p) => (p.markers.clone(), p.cost),
        None => marker::read(table, &plan.projection, plan.rollup, (first, last), false).await?,
    };
    let mut routed = Routed { queries: Vec::new(), prefix_bins: Vec::new(), compacted_bins: 0, cost };
    let mut compacted_boxes = Vec::new();
    for q in &plan.queries {
        match bin_of(plan, q) {
            Some(bin) if markers.contains_key(&bin) => {
                if !compacted_boxes.contains(&q.box_index) {
                    compacted_boxes.push(q.box_index);
                    let pk = compacted_pk(&plan.projection, plan.rollup, bin);
                    let fresh = markers[&bin].at_ms > now_ms - FRESH_MS;
                    routed.queries.push(PlannedQuery {
                        pk,
                        prefix: 0,
                        box_index: q.box_index,
                        compacted: true,
                        consistent: fresh,
                    });
                }
            }
            bin => {
                if let Some(bin) = bin.filter(|b| !routed.prefix_bins.contains(b)) {
                    routed.prefix_bins.push(bin);
                }
                routed.queries.push(q.clone());
            }
        }
    }
    routed.compacted_bins = compacted_boxes.len();
    Ok(routed)
}

/// After the items were read: Err([`GatherError::CompactedWhileRead`]) if a
/// prefix-read bin's partials may have been deleted meanwhile; else what
/// the check cost.
pub async fn verify<T: SortedTable + ?Sized>(table: &T, plan: &Read, routed: &Routed) -> Result<(u64, f64)> {
    let (Some(&first), Some(&last)) = (routed.prefix_bins.iter().min(), routed.prefix_bins.iter().max()) else {
        return Ok((0, 0.0));
    };
    let (markers, cost) = marker::read(table, &plan.projection, plan.rollup, (first, last), true).await?;
    for bin in &routed.prefix_bins {
        if markers.get(bin).is_some_and(|m| m.state.deletes()) {
            return Err(GatherError::CompactedWhileRead { bin: plan.rollup.bin().label(*bin) });
        }
    }
    Ok(cost)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compact::marker::{Marker, State};
    use crate::plan::{plan_source, PlanRequest};
    use crate::window::WindowSpec;
    use zigzag_core::table::MemoryTable;
    use zigzag_model::{Config, KeyModel};

    const DAY: i64 = 86_400_000;
    const T: i64 = 1_763_596_800_000; // 2025-11-20

    fn two_day_plan() -> Read {
        let km = KeyModel::new(&Config::default()).unwrap();
        let req = PlanRequest {
            window: WindowSpec::Absolute { from: T.to_string(), to: (T + 2 * DAY).to_string() },
            rollup: Some(zigzag_model::Rollup::Minute),
            step: None,
            timeseries: false,
            filters: Default::default(),
            now: T,
            source: Default::default(),
            mixing: None,
            snap: None,
            filling: Default::default(),
        };
        plan_source(&km, req).unwrap().reads.remove(0)
    }

    async fn mark(t: &MemoryTable, bin_start: i64, state: State) {
        let m = Marker { bin_start, state: State::Compacted, items: 1, partials: 1, seal: 0, at_ms: 1_000_000 };
        t.update(&marker::compacted("base", zigzag_model::Rollup::Minute, &m)).await.unwrap();
        for s in [State::Deleting, State::Cleaned].into_iter().filter(|s| *s <= state) {
            t.update(&marker::advance("base", zigzag_model::Rollup::Minute, bin_start, s)).await.unwrap();
        }
    }

    #[tokio::test]
    async fn a_compacted_bin_is_one_query_and_the_others_stay_per_prefix() {
        let t = MemoryTable::new();
        let plan = two_day_plan();
        assert_eq!(plan.queries.len(), 32, "2 day bins x 16 prefixes");
        mark(&t, T + DAY, State::Compacted).await;
        let routed = route(&t, &plan).await.unwrap();
        assert_eq!(routed.queries.len(), 17, "16 prefixes of the first day, one compacted partition");
        assert_eq!(routed.prefix_bins, vec![T]);
        assert_eq!(routed.compacted_bins, 1);
        let compacted: Vec<&PlannedQuery> = routed.queries.iter().filter(|q| q.compacted).collect();
        assert_eq!(compacted.len(), 1);
        assert_eq!(compacted[0].pk, compacted_pk("base", zigzag_model::Rollup::Minute, T + DAY));
        assert!(!compacted[0].consistent, "compacted long ago: read as the options say");
        assert!(routed.queries.iter().all(|q| !q.consistent));
        // Compacted (at 1,000,000 ms) moments before "now": read strongly consistent.
        let fresh = route_at(&t, &plan, 1_000_000 + FRESH_MS / 2).await.unwrap();
        assert!(fresh.queries.iter().any(|q| q.compacted && q.consistent));
        assert!(fresh.queries.iter().filter(|q| !q.compacted).all(|q| !q.consistent));
    }

    #[tokio::test]
    async fn markers_read_with_the_statistics_route_the_plan_without_another_read() {
        let t = MemoryTable::new();
        mark(&t, T + DAY, State::Compacted).await;
        let mut plan = two_day_plan();
        let other = Read { projection: "cc".into(), ..plan.clone() };
        let all = prefetch(&t, &[&plan, &other]).await.unwrap();
        assert_eq!(all.len(), 2, "one read per candidate");
        plan.markers = prefetched_for(all, std::slice::from_ref(&plan)).remove(0);
        let p = plan.markers.clone().unwrap();
        assert_eq!(p.markers.keys().copied().collect::<Vec<_>>(), vec![T + DAY]);
        assert_eq!(p.cost.0, 2, "charged with every candidate's read");
        // Routed from what was read, not from the table: a marker written
        // since is not seen (verify, after the items, is what catches it).
        mark(&t, T, State::Compacted).await;
        let routed = route(&t, &plan).await.unwrap();
        assert_eq!((routed.prefix_bins.clone(), routed.compacted_bins, routed.cost), (vec![T], 1, p.cost));
        plan.markers = None;
        let fresh = route(&t, &plan).await.unwrap();
        assert_eq!((fresh.prefix_bins.len(), fresh.compacted_bins, fresh.cost.0), (0, 2, 1), "read now");
    }

    #[tokio::test]
    async fn a_bin_read_from_its_prefixes_that_went_deleting_meanwhile_is_read_again() {
        let t = MemoryTable::new();
        let plan = two_day_plan();
        let routed = route(&t, &plan).await.unwrap();
        assert_eq!(routed.prefix_bins.len(), 2, "no markers: every bin from its prefixes");
        verify(&t, &plan, &routed).await.expect("nothing happened meanwhile");
        // Compacted (not deleting) meanwhile: every partial was still there.
        mark(&t, T, State::Compacted).await;
        verify(&t, &plan, &routed).await.expect("compacted, partials intact");
        // Deleting meanwhile: a partial may have been gone when read.
        mark(&t, T, State::Deleting).await;
        match verify(&t, &plan, &routed).await {
            Err(GatherError::CompactedWhileRead { bin }) => assert_eq!(bin, "2025-11-20"),
            other => panic!("must be read again: {other:?}"),
        }
        mark(&t, T + DAY, State::Cleaned).await;
        assert!(verify(&t, &plan, &routed).await.is_err(), "cleaned as well");
        // Read again: both bins from their compacted partitions, nothing to verify.
        let again = route(&t, &plan).await.unwrap();
        assert_eq!((again.queries.len(), again.prefix_bins.len()), (2, 0));
        assert_eq!(verify(&t, &plan, &again).await.unwrap(), (0, 0.0));
    }

    /// A projection keyed by a value is never compacted (`folds`): a report
    /// on it reads no marker before or after its items, so even a marker
    /// that should not exist (written by hand here, `deleting`) neither
    /// routes it nor makes it read again.
    #[tokio::test]
    async fn a_report_on_a_projection_keyed_by_a_value_reads_no_markers() {
        let config = Config::from_toml(
            "[[projection]]\nname = \"by_country\"\ndimensions = [\"country\"]\nrollups = [\"day\"]\n\
             partition_by = \"country\"\n",
        )
        .unwrap();
        let km = KeyModel::projection(&config, &config.projections[0]).unwrap();
        assert!(!crate::compact::folds(&km) && crate::compact::folds(&KeyModel::new(&config).unwrap()));
        let req = PlanRequest {
            window: WindowSpec::Absolute { from: T.to_string(), to: (T + DAY).to_string() },
            rollup: Some(zigzag_model::Rollup::Day),
            step: None,
            timeseries: false,
            filters: crate::filter::FilterSet::parse(&["country=DE".to_string()], &config).unwrap(),
            now: T + 2 * DAY,
            source: Default::default(),
            mixing: None,
            snap: None,
            filling: Default::default(),
        };
        let plan = plan_source(&km, req).unwrap().reads.remove(0);
        assert!(!plan.compactable);
        let t = MemoryTable::new();
        let bin = plan.boxes[0].bin_start.expect("a binned box");
        let m = Marker { bin_start: bin, state: State::Compacted, items: 1, partials: 1, seal: 0, at_ms: 1_000_000 };
        t.update(&marker::compacted("by_country", zigzag_model::Rollup::Day, &m)).await.unwrap();
        t.update(&marker::advance("by_country", zigzag_model::Rollup::Day, bin, State::Deleting)).await.unwrap();

        assert!(prefetch(&t, &[&plan]).await.unwrap().is_empty(), "nothing read beside the statistics");
        let routed = route(&t, &plan).await.unwrap();
        assert_eq!(routed.queries, plan.queries, "read from its value's partitions");
        assert_eq!((routed.prefix_bins.len(), routed.compacted_bins, routed.cost), (0, 0, (0, 0.0)));
        assert_eq!(verify(&t, &plan, &routed).await.unwrap(), (0, 0.0), "nothing read after the items");
    }
}
