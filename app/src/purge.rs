//! Expiry for the embedded store: DynamoDB deletes expired items by itself
//! (its TTL on `expires`); SQLite has no TTL, so while `ingest` runs with a
//! retention, it deletes the items past it: once before it starts, then
//! every [`PURGE_EVERY`]. Reports never read what may be purged
//! (`Retention::readable`), so a purge never races a report into a short
//! answer.

use std::sync::Arc;
use std::time::Duration;
use zigzag_core::table::SortedTable;
use zigzag_model::Retention;

pub const PURGE_EVERY: Duration = Duration::from_secs(600);

/// Purges once now, then starts the periodic purge (None: every rollup is
/// kept forever, nothing to purge).
pub async fn start(table: Arc<dyn SortedTable>, retention: &Retention) -> Option<tokio::task::JoinHandle<()>> {
    if retention.is_forever() {
        return None;
    }
    purge(table.as_ref()).await;
    Some(tokio::spawn(async move {
        let mut every = tokio::time::interval(PURGE_EVERY);
        every.tick().await;
        loop {
            every.tick().await;
            purge(table.as_ref()).await;
        }
    }))
}

/// A failed purge is a warning: the next one deletes what this one left.
async fn purge(table: &dyn SortedTable) {
    match table.purge_expired(chrono::Utc::now().timestamp()).await {
        Ok(0) => {}
        Ok(n) => {
            tracing::info!(items = n, "purged the items past their retention");
            metrics::counter!("zigzag_ingest_items_purged_total").increment(n);
        }
        Err(e) => tracing::warn!(error = %e, "purging expired items failed; the next purge tries again"),
    }
}
