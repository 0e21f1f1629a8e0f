//! Runs a plan's queries in parallel (`futures`' `buffer_unordered` under a
//! concurrency limit), reading every page of every query, through the
//! `Paced` table (optional RCU/s budget, retries when throttled). Items
//! are handed to a sink as each query completes, after the exact filters,
//! so memory holds at most `concurrency` queries' items.

use crate::error::{GatherError, Result};
use crate::plan::{Plan, PlannedQuery, Read};
use crate::throttle::Paced;
use futures::stream::{self, StreamExt};
use std::time::{Duration, Instant};
use zigzag_core::query::{run_query, AutoConfig, Expected, QueryStats, Strategy, ZQuery};
use zigzag_core::table::{Item, SortedTable};

pub const DEFAULT_CONCURRENCY: usize = 32;

/// A partition the statistics say holds at most this many bytes is read
/// whole (`Strategy::Naive`: one request, costing at most its size, a few
/// read units) rather than by `auto`, whose first page alone is one unit and
/// which learns the items' size from scratch in every query.
pub const WHOLE_PARTITION_BYTES: f64 = 16_384.0;

/// A box the statistics say holds at least this share of its partition's
/// items is read whole (`Strategy::Naive`, in the store's largest pages):
/// it pays for at most a third more than it keeps, in a few requests, where
/// `auto` would have looked for garbage that is not there in many small
/// ones, one after the other.
pub const WHOLE_BOX_SHARE: f64 = 0.75;

/// How `q` is read: `opts.strategy`, except that `auto` reads whole a
/// partition the statistics say is small, or almost all inside the box.
fn strategy_for<'a>(plan: &Plan, read: &Read, q: &PlannedQuery, opts: &'a ExecOptions) -> &'a Strategy {
    const NAIVE: Strategy = Strategy::Naive;
    if !matches!(opts.strategy, Strategy::Auto(_)) {
        return &opts.strategy;
    }
    if plan.way == crate::plan::Way::Naive {
        return &NAIVE; // faster within the RCU allowance (`cost.rs`)
    }
    let small = expected(read, q).is_some_and(|e| e.items * e.item_bytes <= WHOLE_PARTITION_BYTES);
    let mostly_inside = read.box_share.get(q.box_index).copied().flatten().is_some_and(|s| s >= WHOLE_BOX_SHARE);
    if small || mostly_inside {
        &NAIVE
    } else {
        &opts.strategy
    }
}

/// What the statistics say the partition `q` reads holds: its bin's items
/// over the partitions a box of the bin is read from (the prefixes, and
/// the values of a projection keyed by value), or the whole bin's when it
/// is read compacted; at the projection's estimated item size.
pub fn expected(plan: &Read, q: &PlannedQuery) -> Option<Expected> {
    let items = plan.bin_items.get(q.box_index).copied().flatten()?;
    // Every box is read from the same partitions (`plan_source`: each
    // prefix, times each fixed value of a projection keyed by value).
    let partitions = match q.compacted {
        true => 1,
        false => (plan.queries.len() / plan.boxes.len().max(1)).max(1),
    };
    Some(Expected { items: items / partitions as f64, item_bytes: plan.item_bytes })
}

#[derive(Debug, Clone)]
pub struct ExecOptions {
    /// Queries in flight at once (at least 1).
    pub concurrency: usize,
    /// How each query's Z-range is read (`Strategy::named`). The default,
    /// `auto`, reads a box of a few exact Z-runs range by range and any
    /// other with page-jump sized in 4 KB read units (BENCHMARKS.md, "Z-query
    /// strategies on varied data").
    pub strategy: Strategy,
    /// Read budget, RCU per second.
    pub rcu_per_sec: Option<f64>,
    /// Strongly consistent reads (twice the price); gather reads eventually
    /// consistently by default.
    pub consistent: bool,
    /// RCU a read may cost to answer sooner: the planner takes the fastest
    /// reading within it (None: the cheapest reading's; `cost.rs`).
    pub rcu_allowance: Option<f64>,
    /// The planner may read a plan naively where that is faster within the
    /// allowance (`strategy` is auto and was not asked for by name).
    pub choose_way: bool,
}

impl Default for ExecOptions {
    fn default() -> Self {
        ExecOptions {
            concurrency: DEFAULT_CONCURRENCY,
            strategy: Strategy::Auto(AutoConfig::default()),
            rcu_per_sec: None,
            consistent: false,
            rcu_allowance: None,
            choose_way: true,
        }
    }
}

/// What running a plan cost.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Actual {
    pub queries: usize,
    pub stats: QueryStats,
    /// Items that passed the exact filters (what the report is made of).
    pub kept: u64,
    /// Requests retried after throttling, a timeout or a 5xx.
    pub retries: u64,
    /// Times the report was read again because a bin it read from its
    /// prefixes was compacted meanwhile.
    pub rereads: u32,
    /// Bins read from their compacted partitions (`gather compact`).
    pub compacted_bins: usize,
    /// Queries read whole: their partition small, or almost all inside the
    /// box, by the statistics ([`WHOLE_PARTITION_BYTES`],
    /// [`WHOLE_BOX_SHARE`]).
    pub whole: usize,
    pub wall: Duration,
}

impl Actual {
    /// Adds what another read cost (reads run one after another: their
    /// walls add up).
    pub fn add(&mut self, other: &Actual) {
        self.queries += other.queries;
        self.stats.add(&other.stats);
        self.kept += other.kept;
        self.retries += other.retries;
        self.rereads += other.rereads;
        self.compacted_bins += other.compacted_bins;
        self.whole += other.whole;
        self.wall += other.wall;
    }
}

/// [`execute`] into a sink `fresh` makes, made and read again (up to 5
/// times) when a bin read from its prefixes was compacted meanwhile
/// (`crate::route`).
pub async fn execute_fresh<T, S>(
    table: &T,
    plan: &Plan,
    opts: &ExecOptions,
    mut fresh: impl FnMut() -> S,
    mut add: impl FnMut(&mut S, &Item) -> Result<()>,
) -> Result<(S, Actual)>
where
    T: SortedTable + ?Sized,
{
    let mut attempt = 0;
    // Read again, the markers read with the statistics are out of date.
    let mut again: Option<Plan> = None;
    loop {
        attempt += 1;
        let mut state = fresh();
        let plan = again.as_ref().unwrap_or(plan);
        match execute(table, plan, opts, |item| add(&mut state, item)).await {
            Ok(mut actual) => {
                actual.rereads = attempt - 1;
                return Ok((state, actual));
            }
            Err(GatherError::CompactedWhileRead { .. }) if attempt < 5 => {
                let mut fresh = plan.clone();
                for read in &mut fresh.reads {
                    read.markers = None;
                }
                again = Some(fresh);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Runs every query of every read of `plan`, routed around compacted bins
/// (`crate::route`), all under one concurrency limit; `sink` receives
/// the items that pass the plan's exact filters. Err(CompactedWhileRead)
/// when a bin read from its prefixes was compacted meanwhile: `sink` saw
/// an incomplete read ([`execute_fresh`] reads again).
pub async fn execute<T, F>(table: &T, plan: &Plan, opts: &ExecOptions, mut sink: F) -> Result<Actual>
where
    T: SortedTable + ?Sized,
    F: FnMut(&Item) -> Result<()>,
{
    let t0 = Instant::now();
    let paced = Paced::new(table, opts.rcu_per_sec);
    let paced = &paced;
    let routed = futures::future::try_join_all(plan.reads.iter().map(|r| crate::route::route(paced, r))).await?;
    // The futures made first: a stream holding the closure that makes them
    // is not `Send` for every lifetime (rust-lang/rust#110338), which a
    // server on a multi-threaded runtime needs. They start when polled.
    let reads: Vec<_> = plan
        .reads
        .iter()
        .zip(&routed)
        .flat_map(|(read, r)| r.queries.iter().map(move |q| read_query(paced, plan, read, q, opts)))
        .collect();
    let runs = stream::iter(reads).buffer_unordered(opts.concurrency.max(1));
    futures::pin_mut!(runs);
    let mut actual = Actual::default();
    for (read, r) in plan.reads.iter().zip(&routed) {
        actual.queries += r.queries.len();
        actual.compacted_bins += r.compacted_bins;
        // Read whole by `strategy_for`'s rule (not because naive was asked).
        if matches!(opts.strategy, Strategy::Auto(_)) {
            actual.whole +=
                r.queries.iter().filter(|q| matches!(strategy_for(plan, read, q, opts), Strategy::Naive)).count();
        }
    }
    while let Some(outcome) = runs.next().await {
        let outcome = outcome?;
        actual.stats.add(&outcome.stats);
        for item in outcome.items.iter().filter(|i| plan.filters.matches(i)) {
            actual.kept += 1;
            sink(item)?;
        }
    }
    let verified = futures::future::try_join_all(
        plan.reads.iter().zip(&routed).map(|(read, r)| crate::route::verify(paced, read, r)),
    )
    .await?;
    for (requests, rcu) in routed.iter().map(|r| r.cost).chain(verified) {
        actual.stats.requests += requests;
        actual.stats.rcu += rcu;
    }
    actual.retries = paced.retries();
    actual.wall = t0.elapsed();
    Ok(actual)
}

/// One planned query read.
async fn read_query<T: SortedTable + ?Sized>(
    paced: &Paced<'_, T>,
    plan: &Plan,
    read: &Read,
    q: &PlannedQuery,
    opts: &ExecOptions,
) -> Result<zigzag_core::query::QueryOutcome> {
    let zq = ZQuery {
        pk: q.pk.clone(),
        zbox: &read.boxes[q.box_index].zbox,
        filter: plan.server_filter.clone(),
        suffixed: true,
        consistent: opts.consistent || q.consistent,
        expected: expected(read, q),
    };
    run_query(paced, &zq, strategy_for(plan, read, q, opts))
        .await
        .map_err(|source| GatherError::Query { pk: q.pk.clone(), source })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{plan_source, PlanRequest};
    use crate::window::WindowSpec;
    use zigzag_model::{Config, KeyModel};

    fn plan(bin_items: Option<f64>) -> Plan {
        let km = KeyModel::new(&Config::default()).unwrap();
        let t = 1_763_596_800_000; // 2025-11-20
        let req = PlanRequest {
            window: WindowSpec::Absolute { from: t.to_string(), to: (t + 86_400_000).to_string() },
            rollup: Some(zigzag_model::Rollup::Minute),
            step: None,
            timeseries: false,
            filters: Default::default(),
            now: t,
            source: Default::default(),
            mixing: None,
            snap: None,
            filling: Default::default(),
        };
        let mut p = plan_source(&km, req).unwrap();
        p.reads[0].bin_items = vec![bin_items; p.reads[0].boxes.len()];
        p
    }

    /// A table whose bin is compacted, and its partials set for deletion,
    /// while the first data query is read.
    struct CompactedDuringRead {
        inner: zigzag_core::table::MemoryTable,
        bin_start: i64,
        done: std::sync::atomic::AtomicBool,
    }

    #[async_trait::async_trait]
    impl SortedTable for CompactedDuringRead {
        async fn put(&self, item: Item) -> std::result::Result<(), zigzag_core::table::TableError> {
            self.inner.put(item).await
        }
        async fn query(
            &self,
            req: &zigzag_core::table::QueryRequest,
        ) -> std::result::Result<zigzag_core::table::QueryPage, zigzag_core::table::TableError> {
            use crate::compact::marker::{self, Marker, State, MARKERS_PK};
            use std::sync::atomic::Ordering;
            if req.pk != MARKERS_PK && !self.done.swap(true, Ordering::SeqCst) {
                let m = Marker {
                    bin_start: self.bin_start,
                    state: State::Compacted,
                    items: 0,
                    partials: 0,
                    seal: 0,
                    at_ms: 0,
                };
                self.inner.update(&marker::compacted("base", zigzag_model::Rollup::Minute, &m)).await?;
                let deleting = marker::advance("base", zigzag_model::Rollup::Minute, self.bin_start, State::Deleting);
                self.inner.update(&deleting).await?;
            }
            self.inner.query(req).await
        }
        async fn update(
            &self,
            req: &zigzag_core::table::UpdateRequest,
        ) -> std::result::Result<zigzag_core::table::UpdateOutcome, zigzag_core::table::TableError> {
            self.inner.update(req).await
        }
        async fn delete(
            &self,
            req: &zigzag_core::table::DeleteRequest,
        ) -> std::result::Result<zigzag_core::table::DeleteOutcome, zigzag_core::table::TableError> {
            self.inner.delete(req).await
        }
    }

    #[tokio::test]
    async fn a_report_read_again_reads_the_markers_again_not_the_ones_planned_with() {
        let mut p = plan(None);
        let bin_start = p.reads[0].boxes[0].bin_start.expect("a binned box");
        let table = CompactedDuringRead {
            inner: Default::default(),
            bin_start,
            done: std::sync::atomic::AtomicBool::new(false),
        };
        // Planned with the markers read beside the statistics: none yet.
        let read = crate::route::prefetch(&table, &[&p.reads[0]]).await.unwrap();
        let markers = crate::route::prefetched_for(read, &p.reads);
        for (r, m) in p.reads.iter_mut().zip(markers) {
            r.markers = m;
        }
        assert!(p.reads[0].markers.as_ref().is_some_and(|m| m.markers.is_empty()));
        let (items, actual) = execute_fresh(
            &table,
            &p,
            &ExecOptions::default(),
            || 0u64,
            |n, _| {
                *n += 1;
                Ok(())
            },
        )
        .await
        .unwrap();
        assert_eq!(items, 0);
        assert_eq!(actual.rereads, 1, "the first read met the deletion and was read again");
        assert_eq!((actual.compacted_bins, actual.queries), (1, 1), "the second read knew of the compaction");
    }

    #[test]
    fn auto_reads_a_partition_the_statistics_say_is_small_whole_and_nothing_else() {
        let auto = ExecOptions::default();
        let p = plan(None);
        let bytes = p.reads[0].item_bytes;
        let q = p.reads[0].queries[0].clone();
        let strategy_for = |p: &Plan, q: &PlannedQuery, o| strategy_for(p, &p.reads[0], q, o).clone();
        assert!(matches!(strategy_for(&p, &q, &auto), Strategy::Auto(_)), "no statistics: auto");
        // 16 prefixes: a bin of 16 x 100 items of ~item_bytes is ~100 items a partition.
        let per_partition = (WHOLE_PARTITION_BYTES / bytes).floor();
        let p = plan(Some(16.0 * per_partition));
        assert!(matches!(strategy_for(&p, &q, &auto), Strategy::Naive), "at the bound: whole");
        let compacted = PlannedQuery { compacted: true, ..q.clone() };
        assert!(
            matches!(strategy_for(&p, &compacted, &auto), Strategy::Auto(_)),
            "the compacted partition holds the whole bin: 16 times as much"
        );
        let p = plan(Some(16.0 * (per_partition + 2.0)));
        assert!(matches!(strategy_for(&p, &q, &auto), Strategy::Auto(_)), "past the bound: auto");
        // A large partition almost all inside the box: whole; half: auto.
        let mut p = plan(Some(1e6));
        p.reads[0].box_share = vec![Some(WHOLE_BOX_SHARE); p.reads[0].boxes.len()];
        assert!(matches!(strategy_for(&p, &q, &auto), Strategy::Naive), "three quarters inside: whole");
        p.reads[0].box_share = vec![Some(0.5); p.reads[0].boxes.len()];
        assert!(matches!(strategy_for(&p, &q, &auto), Strategy::Auto(_)), "half inside: auto");
        let forced = ExecOptions { strategy: Strategy::named("elastic").unwrap(), ..ExecOptions::default() };
        let p = plan(Some(1.0));
        assert!(matches!(strategy_for(&p, &q, &forced), Strategy::Elastic(_)), "a strategy asked for is kept");
    }
}
