//! Reading the statistics ingest keeps (`zigzag_model::stats`) for the
//! planner's estimates: one query per candidate plan, over the statistics
//! items of its projection, rollup and the plan's partition bins, the
//! candidates' at once.

use crate::error::{GatherError, Result};
use crate::plan::Plan;
use std::collections::HashMap;
use zigzag_core::table::{QueryRequest, SortKeyCondition, SortedTable};
use zigzag_model::stats::{stats_range, stats_sk, StoredStats, STATS_PK};

/// Statistics items read, by their sort key; and what reading them cost.
#[derive(Debug, Clone, Default)]
pub struct Statistics {
    by_sk: HashMap<Vec<u8>, StoredStats>,
    pub requests: u64,
    pub rcu: f64,
}

impl Statistics {
    /// No statistics at all (a table written before ingest kept them).
    pub fn is_empty(&self) -> bool {
        self.by_sk.is_empty()
    }

    /// When `plan`'s items were last written (the latest flush into any of
    /// its bins), if the statistics say.
    pub fn written_at(&self, projection: &str, plan: &Plan) -> Option<i64> {
        plan.boxes
            .iter()
            .filter_map(|b| b.bin_start)
            .filter_map(|bin| self.by_sk.get(&stats_sk(projection, plan.rollup, bin)))
            .filter_map(|s| s.at_ms)
            .max()
    }

    /// The items one bin of `projection`'s `rollup` holds (every prefix),
    /// if its statistics were read.
    pub fn bin_items(&self, projection: &str, rollup: zigzag_model::Rollup, bin_start: i64) -> Option<f64> {
        self.by_sk.get(&stats_sk(projection, rollup, bin_start)).map(|s| s.items as f64)
    }

    /// Estimated items of `plan`'s time range in `projection`: per bin,
    /// [`StoredStats::items_between`] (none when the bin has no statistics:
    /// nothing was written).
    pub fn items(&self, projection: &str, plan: &Plan) -> f64 {
        plan.boxes
            .iter()
            .filter_map(|b| b.bin_start)
            .filter_map(|bin| Some((bin, self.by_sk.get(&stats_sk(projection, plan.rollup, bin))?)))
            .map(|(bin, s)| s.items_between(plan.rollup, bin, plan.window.start, plan.window.end))
            .sum()
    }

    /// The share of the items of `bin` of `projection`'s `rollup` that
    /// `plan`'s window covers; None without statistics for it.
    pub fn window_share(&self, projection: &str, plan: &Plan, bin: i64) -> Option<f64> {
        let s = self.by_sk.get(&stats_sk(projection, plan.rollup, bin))?;
        let covered = s.items_between(plan.rollup, bin, plan.window.start, plan.window.end);
        Some(if s.items == 0 { 0.0 } else { covered / s.items as f64 })
    }
}

/// The statistics of every plan's projection, rollup and bins: one query
/// per plan, all at once (a report waits for one round trip, not one per
/// candidate).
pub async fn load<T: SortedTable + ?Sized>(table: &T, plans: &[&Plan]) -> Result<Statistics> {
    let reads = plans.iter().filter_map(|plan| {
        let bins: Vec<i64> = plan.boxes.iter().filter_map(|b| b.bin_start).collect();
        let (first, last) = (*bins.iter().min()?, *bins.iter().max()?);
        Some(read(table, stats_range(&plan.projection, plan.rollup, first, last)))
    });
    let mut stats = Statistics::default();
    for read in futures::future::try_join_all(reads).await? {
        stats.requests += read.requests;
        stats.rcu += read.rcu;
        stats.by_sk.extend(read.by_sk);
    }
    Ok(stats)
}

/// Every statistics item between two sort keys, page after page.
async fn read<T: SortedTable + ?Sized>(table: &T, (lo, hi): (Vec<u8>, Vec<u8>)) -> Result<Statistics> {
    let mut stats = Statistics::default();
    let mut req = QueryRequest::new(STATS_PK, SortKeyCondition::Between(lo, hi));
    loop {
        let page = table.query(&req).await.map_err(|e| GatherError::Query {
            pk: STATS_PK.into(),
            source: zigzag_core::query::QueryError::Table(e),
        })?;
        stats.requests += 1;
        stats.rcu += page.consumed_rcu;
        for item in &page.items {
            let s = StoredStats::from_item(item)
                .map_err(|why| GatherError::Item { pk: item.pk.clone(), why: format!("statistics: {why}") })?;
            stats.by_sk.insert(item.sk.clone(), s);
        }
        match page.last_evaluated {
            Some(k) => req.exclusive_start = Some(k),
            None => return Ok(stats),
        }
    }
}
