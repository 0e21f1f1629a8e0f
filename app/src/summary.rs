//! The summary a pipeline run prints when it ends (`ingest`, `loadgen
//! --sink ingest`): what was read, written and retried, and what the
//! DynamoDB tables consumed.

use std::path::Path;
use std::time::Duration;
use zigzag_ingest::RunSummary;

/// One line: records and where the dead letters went, flushes, items,
/// write requests (per item and per valid record: what DynamoDB bills),
/// the largest scatter prefix's share of them, retries and the lease work.
pub fn pipeline(label: &str, s: &RunSummary, elapsed: Duration, dead_letters: &Path) -> String {
    let secs = elapsed.as_secs_f64();
    let headers = if s.headers > 0 { format!(", {} CSV header rows skipped", s.headers) } else { String::new() };
    let max_share = s.per_prefix.iter().max().copied().unwrap_or(0) as f64 / s.write_requests.max(1) as f64;
    format!(
        "{label}: {} records ({} valid, {} dead-lettered to {}{headers}) from {} shards in {secs:.1}s ({:.0}/s); \
         {} flushes ({} recovered), {} items, {} write requests ({:.3} per item, {:.4} per valid record; largest \
         prefix share {max_share:.3}, 1/P = {:.3}), item writes {} WRU by size (largest item {} B), \
         {} replayed writes skipped, {} retries; \
         leases: {} taken, {} lost, {} handed over, {} lease-table requests",
        s.records,
        s.valid,
        s.rejected,
        match dead_letters.to_str() {
            Some(zigzag_ingest::deadletter::STDOUT) => "standard output".into(),
            _ => dead_letters.display().to_string(),
        },
        s.shards,
        s.records as f64 / secs.max(1e-9),
        s.flushes,
        s.recovered,
        s.items,
        s.write_requests,
        s.write_requests as f64 / s.items.max(1) as f64,
        s.write_requests as f64 / s.valid.max(1) as f64,
        1.0 / s.per_prefix.len().max(1) as f64,
        s.item_write_units,
        s.largest_item,
        s.skipped,
        s.retries,
        s.leases_taken,
        s.leases_lost,
        s.leases_handed_off,
        s.lease_requests
    )
}

/// One line per DynamoDB table: requests and capacity consumed, calls
/// retried. None for SQLite.
#[cfg(feature = "aws")]
pub fn capacity(label: &str, stores: &crate::store::Stores) -> Vec<String> {
    let Some((aggregates, leases)) = &stores.dynamo else { return Vec::new() };
    [aggregates, leases]
        .iter()
        .map(|table| {
            let c = table.capacity();
            format!(
                "{label}: DynamoDB {}: {} requests, {:.1} WCU + {:.1} RCU consumed, {} throttled/failed calls retried",
                table.name(),
                c.requests,
                c.write_units,
                c.read_units,
                c.retryable_errors
            )
        })
        .collect()
}

/// Nothing to say: built without DynamoDB.
#[cfg(not(feature = "aws"))]
pub fn capacity(_label: &str, _stores: &crate::store::Stores) -> Vec<String> {
    Vec::new()
}
