//! Deleting what layout versions dropped (`gather layout delete-dropped`):
//! the items of every projection's rollup an earlier version wrote and
//! the newest does not, under a write budget, with the space freed.
//!
//! Reports stopped reading such a part when the version dropping it was
//! applied, and no writer of the newest version writes it (an older one
//! is refused), so deleting it changes no answer. A part written again
//! under the same name by the newest version is not dropped. What is
//! deleted, per bin the statistics know: every scatter prefix's partition,
//! the compacted partition, the change marks, then the statistics item
//! (last: a delete killed part way is found again by the next run).
//! A projection keyed by a dimension's value (`partition_by`) has a
//! partition per value; it is left to its retention, and said so.

use crate::compact::marker::compacted_pk;
use crate::error::{GatherError, Result};
use zigzag_core::table::{DeleteRequest, Item, QueryRequest, SortKeyCondition, SortedTable};
use zigzag_model::layout::Layout;
use zigzag_model::stats::{stats_sk, StoredStats, STATS_PK};
use zigzag_model::versions::Stored;
use zigzag_model::{Config, Projections, Rollup};

/// A part an earlier version wrote and the newest does not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped<'a> {
    pub projection: String,
    pub rollup: Rollup,
    /// The last version that wrote it.
    pub version: u32,
    pub layout: &'a Layout,
}

/// Every part earlier versions wrote that the newest layout does not.
pub fn dropped(stored: &Stored) -> Vec<Dropped<'_>> {
    let parts = zigzag_model::layout_diff::written_parts;
    let now = parts(stored.layout());
    let mut out: Vec<Dropped<'_>> = Vec::new();
    for v in &stored.versions {
        for (projection, rollup) in parts(&v.layout) {
            if now.contains(&(projection.clone(), rollup)) {
                continue;
            }
            out.retain(|d| (d.projection.as_str(), d.rollup) != (projection.as_str(), rollup));
            out.push(Dropped { projection, rollup, version: v.number, layout: &v.layout });
        }
    }
    out
}

/// What deleting took.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Deleted {
    pub items: u64,
    /// The items' size by DynamoDB's rules: the space freed.
    pub bytes: u64,
    pub wcu: f64,
    /// Parts left to their retention, and why.
    pub left: Vec<String>,
}

fn table_err(pk: &str, e: impl Into<zigzag_core::query::QueryError>) -> GatherError {
    GatherError::Query { pk: pk.to_string(), source: e.into() }
}

async fn partition(table: &dyn SortedTable, pk: &str) -> Result<Vec<Item>> {
    let mut req = QueryRequest::new(pk, SortKeyCondition::Any);
    req.consistent = true;
    Ok(zigzag_core::query::run_key_range(table, req).await.map_err(|e| table_err(pk, e))?.items)
}

/// Deletes every dropped part's items (`given`: the flush settings the
/// layouts are read with), at most `wcu_per_sec` write units a second;
/// `say` hears each part as it is done.
pub async fn delete_dropped(
    table: &dyn SortedTable,
    stored: &Stored,
    given: &Config,
    wcu_per_sec: Option<f64>,
    say: &mut (dyn FnMut(String) + Send),
) -> Result<Deleted> {
    // Deletes are idempotent: a throttled or timed-out one is sent again.
    let retried = crate::throttle::Retried::new(table);
    let table: &dyn SortedTable = &retried;
    let mut out = Deleted::default();
    let mut budget = super::fill::Budget::new(wcu_per_sec);
    for d in dropped(stored) {
        let config = d.layout.apply(given);
        let projections = Projections::new(&config).map_err(|e| GatherError::Config(e.to_string()))?;
        let Some(km) = projections.by_name(&d.projection) else { continue };
        if km.partition_dim().is_some() {
            out.left.push(format!("{} {}: partitioned by value, left to its retention", d.projection, d.rollup));
            continue;
        }
        let prefix = format!("{}#{}#", d.projection, d.rollup).into_bytes();
        let stats = crate::statistics::read(table, SortKeyCondition::BeginsWith(prefix)).await?;
        let mut bins: Vec<i64> = stats.bins().map(|s: &StoredStats| d.rollup.bin().start_of(s.lo)).collect();
        bins.sort_unstable();
        bins.dedup();
        let before = (out.items, out.bytes);
        for bin in bins {
            let mut pks: Vec<String> = (0..km.prefixes()).map(|p| km.partition_key(p, d.rollup, bin)).collect();
            pks.push(compacted_pk(&d.projection, d.rollup, bin));
            pks.push(zigzag_model::changes::changes_pk(&d.projection, d.rollup, bin));
            for pk in pks {
                for item in partition(table, &pk).await? {
                    let size = item.size() as u64;
                    let wcu = (size as f64 / 1024.0).ceil().max(1.0);
                    budget.spend(wcu).await;
                    table.delete(&DeleteRequest::new(pk.clone(), item.sk)).await.map_err(|e| table_err(&pk, e))?;
                    (out.items, out.bytes, out.wcu) = (out.items + 1, out.bytes + size, out.wcu + wcu);
                }
            }
            let sk = stats_sk(&d.projection, d.rollup, bin);
            table.delete(&DeleteRequest::new(STATS_PK, sk)).await.map_err(|e| table_err(STATS_PK, e))?;
        }
        say(format!(
            "{} {} (last written by layout version {}): {} items deleted, {} bytes",
            d.projection,
            d.rollup,
            d.version,
            out.items - before.0,
            out.bytes - before.1
        ));
    }
    Ok(out)
}
