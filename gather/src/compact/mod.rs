//! `gather compact`: the GSI write-scaling article's asynchronous re-gather. The partials of
//! closed buckets — every scatter prefix's items of one key and bucket,
//! each carrying its writers' marks — are folded into one item per key in
//! one partition per (projection, rollup, bin), which a report then reads
//! with one query instead of one per prefix, and without the marks.
//!
//! A bucket is closed by the **seal** (`zigzag_lease::seal`): "no event
//! before S is written any more", acknowledged by every worker before
//! anything is folded. The steps, each safe to repeat after a kill:
//!
//! 1. raise the seal to `--before` and wait for its barrier;
//! 2. per bin ending by then that has statistics and no marker: read every
//!    prefix's partition whole, fold ([`zigzag_model::measure::fold`]),
//!    write the folded items to the bin's compacted partition, then its
//!    marker `compacted` ([`marker`]): readers switch to it;
//! 3. a grace period after the last marker (reports that planned before
//!    it finish without a retry), per bin: marker `deleting`, the partials
//!    deleted, marker `cleaned`.
//!
//! A report never counts a bin twice or misses it (`crate::route`): it reads a
//! bin from its compacted partition if a marker exists, else from the
//! prefixes, and then reads the markers again (strongly consistent); a
//! prefix-read bin whose marker went `deleting` meanwhile makes the report
//! read again.
//!
//! Projections keyed by a dimension's value (`partition_by`) are not
//! compacted: their partitions are per value already ([`folds`]). A report
//! on one reads no markers, before or after its items: none can exist.

pub mod marker;

use crate::error::{GatherError, Result};
use futures::stream::{self, StreamExt, TryStreamExt};
use marker::{Marker, State};
use std::time::Duration;
use zigzag_core::table::{DeleteRequest, Item, QueryRequest, SortKeyCondition, SortedTable};
use zigzag_model::stats::{StoredStats, STATS_PK};
use zigzag_model::{KeyModel, Projections, Rollup};

/// Whether compaction folds `km`'s bins: not a projection keyed by a
/// dimension's value, whose partitions are per value already. A report on
/// one it does not fold reads no markers (`crate::route`).
pub fn folds(km: &KeyModel) -> bool {
    km.partition_dim().is_none()
}

#[derive(Debug, Clone)]
pub struct CompactOptions {
    /// Buckets ending at or before this (ms) are folded.
    pub before: i64,
    /// Between a bin's marker and the deletion of its partials.
    pub grace: Duration,
    /// How long to wait for the seal's barrier before giving up.
    pub wait: Duration,
    /// Requests in flight at once.
    pub concurrency: usize,
}

/// What happened to one bin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BinOutcome {
    pub projection: String,
    pub rollup: Rollup,
    pub label: String,
    /// Partials read and folded items written (this run or an earlier one).
    pub partials: u64,
    pub items: u64,
    /// Partials deleted by this run.
    pub deleted: u64,
    pub state: State,
}

#[derive(Debug, Clone, Default)]
pub struct CompactReport {
    pub seal: i64,
    pub bins: Vec<BinOutcome>,
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn table_err(pk: &str, e: impl Into<zigzag_core::query::QueryError>) -> GatherError {
    GatherError::Query { pk: pk.to_string(), source: e.into() }
}

/// Every item of a partition, strongly consistent, every page.
async fn read_partition<T: SortedTable + ?Sized>(table: &T, pk: &str) -> Result<Vec<Item>> {
    let mut req = QueryRequest::new(pk, SortKeyCondition::Any);
    req.consistent = true;
    let out = zigzag_core::query::run_key_range(table, req).await.map_err(|e| table_err(pk, e))?;
    Ok(out.items)
}

/// The bins of `km`'s `rollup` that have statistics (written to) and end
/// at or before `before`, by start.
async fn closed_bins<T: SortedTable + ?Sized>(
    table: &T,
    km: &KeyModel,
    rollup: Rollup,
    before: i64,
) -> Result<Vec<i64>> {
    let lo = format!("{}#{rollup}#", km.name()).into_bytes();
    let mut hi = lo.clone();
    hi.push(0x7f);
    let mut req = QueryRequest::new(STATS_PK, SortKeyCondition::Between(lo, hi));
    req.consistent = true;
    let items = zigzag_core::query::run_key_range(table, req).await.map_err(|e| table_err(STATS_PK, e))?.items;
    let mut bins = Vec::new();
    for item in &items {
        let stats = StoredStats::from_item(item).map_err(|why| GatherError::Item { pk: STATS_PK.into(), why })?;
        let start = rollup.bin().start_of(stats.lo);
        // A statistics item covers one bin: its last bucket is in it too.
        if rollup.bin().next_start(start) <= before && !bins.contains(&start) {
            bins.push(start);
        }
    }
    bins.sort_unstable();
    Ok(bins)
}

/// Folds one bin (no marker yet): reads every prefix, writes the folded
/// items, then the marker.
async fn fold_bin<T: SortedTable + ?Sized>(
    table: &T,
    km: &KeyModel,
    rollup: Rollup,
    bin_start: i64,
    seal: i64,
    concurrency: usize,
) -> Result<Marker> {
    let pks: Vec<String> = (0..km.prefixes()).map(|p| km.partition_key(p, rollup, bin_start)).collect();
    let partials: Vec<Vec<Item>> = stream::iter(pks.iter().map(|pk| read_partition(table, pk)))
        .buffer_unordered(concurrency.max(1))
        .try_collect()
        .await?;
    let partials: Vec<Item> = partials.into_iter().flatten().collect();
    let n = partials.len() as u64;
    let pk = marker::compacted_pk(km.name(), rollup, bin_start);
    let folded = zigzag_model::measure::fold::fold_partials(km.measures(), &pk, partials)
        .map_err(|why| GatherError::Item { pk: pk.clone(), why })?;
    let items = folded.len() as u64;
    // Puts: a repeat after a kill writes the same items (the bin is closed).
    for chunk in folded.chunks(25) {
        table.put_batch(chunk.to_vec()).await.map_err(|e| table_err(&pk, e))?;
    }
    let m = Marker { bin_start, state: State::Compacted, items, partials: n, seal, at_ms: now_ms() };
    table.update(&marker::compacted(km.name(), rollup, &m)).await.map_err(|e| table_err(marker::MARKERS_PK, e))?;
    Ok(m)
}

/// Deletes a compacted bin's partials (marker `deleting` first, `cleaned`
/// after); the number deleted.
async fn delete_bin<T: SortedTable + ?Sized>(
    table: &T,
    km: &KeyModel,
    rollup: Rollup,
    bin_start: i64,
    concurrency: usize,
) -> Result<u64> {
    let markers = marker::MARKERS_PK;
    table
        .update(&marker::advance(km.name(), rollup, bin_start, State::Deleting))
        .await
        .map_err(|e| table_err(markers, e))?;
    let mut deleted = 0;
    for prefix in 0..km.prefixes() {
        let pk = km.partition_key(prefix, rollup, bin_start);
        let items = read_partition(table, &pk).await?;
        deleted += items.len() as u64;
        stream::iter(items.into_iter().map(|i| {
            let pk = pk.clone();
            async move { table.delete(&DeleteRequest::new(pk.clone(), i.sk)).await.map_err(|e| table_err(&pk, e)) }
        }))
        .buffer_unordered(concurrency.max(1))
        .try_collect::<Vec<_>>()
        .await?;
    }
    table
        .update(&marker::advance(km.name(), rollup, bin_start, State::Cleaned))
        .await
        .map_err(|e| table_err(markers, e))?;
    Ok(deleted)
}

/// Compacts every closed bin of every projection (see the module docs).
/// `leases` is the lease table of the workers writing `aggregates`; `say`
/// hears what it waits for and does.
pub async fn compact(
    aggregates: &dyn SortedTable,
    leases: &dyn SortedTable,
    projections: &Projections,
    opts: &CompactOptions,
    say: &mut (dyn FnMut(String) + Send),
) -> Result<CompactReport> {
    use zigzag_lease::{epoch, seal};
    let lease_err = |e: zigzag_lease::LeaseError| GatherError::Compact(e.to_string());
    // The lease table must be the one the workers writing this table use
    // (its epoch is bound in the layout item ingest records first).
    let layout =
        zigzag_model::versions::load_layout(aggregates).await.map_err(|e| GatherError::Compact(e.to_string()))?;
    if layout.is_none() {
        return Err(GatherError::Compact(
            "the table records no layout (written before layouts were recorded, or not by ingest): its writers \
             cannot be told to seal it; run a current ingest on it once first"
                .into(),
        ));
    }
    epoch::check(leases, aggregates).await.map_err(lease_err)?;
    let sealed = seal::raise(leases, opts.before).await.map_err(lease_err)?;
    say(format!("seal at {sealed} ms (events before it are refused from now on)"));
    let deadline = std::time::Instant::now() + opts.wait;
    let mut last = String::new();
    loop {
        let blockers = seal::barrier(leases, opts.before).await.map_err(lease_err)?;
        if blockers.is_empty() {
            break;
        }
        let text = blockers.iter().map(|b| format!("  {b}")).collect::<Vec<_>>().join("\n");
        if std::time::Instant::now() >= deadline {
            return Err(GatherError::Compact(format!(
                "the seal did not hold within {:?}; nothing was folded. Waiting for:\n{text}",
                opts.wait
            )));
        }
        if text != last {
            say(format!("waiting for the seal's barrier:\n{text}"));
            last = text;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut report = CompactReport { seal: sealed, bins: Vec::new() };
    let mut pending: Vec<(&KeyModel, Rollup, Marker)> = Vec::new();
    for km in projections.iter() {
        if !folds(km) {
            say(format!("projection {}: partitioned by value, not compacted", km.name()));
            continue;
        }
        for rollup in km.rollups() {
            let bins = closed_bins(aggregates, km, rollup, opts.before).await?;
            let (Some(&first), Some(&last)) = (bins.first(), bins.last()) else { continue };
            let (markers, _) = marker::read(aggregates, km.name(), rollup, (first, last), true).await?;
            for bin in bins {
                let m = match markers.get(&bin) {
                    Some(m) => m.clone(),
                    None => {
                        let m = fold_bin(aggregates, km, rollup, bin, sealed, opts.concurrency).await?;
                        say(format!(
                            "{} {rollup} {}: {} partials folded into {} items",
                            km.name(),
                            rollup.bin().label(bin),
                            m.partials,
                            m.items
                        ));
                        m
                    }
                };
                pending.push((km, rollup, m));
            }
        }
    }
    // The grace period: from the latest marker not yet cleaned.
    let latest = pending.iter().filter(|(_, _, m)| m.state == State::Compacted).map(|(_, _, m)| m.at_ms).max();
    if let Some(at) = latest {
        let wait = (at + opts.grace.as_millis() as i64 - now_ms()).max(0);
        if wait > 0 {
            say(format!("grace period: partials deleted in {:.0} s", wait as f64 / 1000.0));
            tokio::time::sleep(Duration::from_millis(wait as u64)).await;
        }
    }
    for (km, rollup, m) in pending {
        let label = rollup.bin().label(m.bin_start);
        let deleted = match m.state {
            State::Cleaned => 0,
            _ => {
                let n = delete_bin(aggregates, km, rollup, m.bin_start, opts.concurrency).await?;
                say(format!("{} {rollup} {label}: {n} partials deleted", km.name()));
                n
            }
        };
        report.bins.push(BinOutcome {
            projection: km.name().to_string(),
            rollup,
            label,
            partials: m.partials,
            items: m.items,
            deleted,
            state: State::Cleaned,
        });
    }
    Ok(report)
}
