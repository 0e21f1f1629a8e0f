//! The change marks around a flush's items (`zigzag_model::changes`): `b@L
//! = k` on every slice the flush touches before its first item, `d@L = k`
//! after its last. Unlike the statistics they are not best effort: a
//! reader trusts a slice whose marks say no flush is changing it, so a
//! flush whose begin marks are not all written writes no item, and one
//! whose done marks are not all written fails like a failed item write
//! (the caller runs it again; every applied write is then skipped).

use super::*;
use std::collections::BTreeSet;
use zigzag_model::changes;
use zigzag_model::Rollup;

/// The slices a flush touches: (projection index, rollup, slice start).
pub(super) type Slices = BTreeSet<(u8, Rollup, i64)>;

#[derive(Clone, Copy)]
pub(super) enum Phase {
    Begin,
    Done,
}

impl Flusher {
    /// Writes one phase's marks on every slice, retrying what failed
    /// retryably; a mark found already there (a replay) is done.
    pub(super) async fn write_changes(&self, slices: &Slices, writer: Writer, phase: Phase) -> Result<(), FlushError> {
        let mut todo: Vec<UpdateRequest> = slices
            .iter()
            .map(|&(p, rollup, start)| {
                let name = self.projections.get(p as usize).map_or("?", |km| km.name());
                match phase {
                    Phase::Begin => changes::begin(name, rollup, start, writer.lane, writer.k),
                    Phase::Done => changes::done(name, rollup, start, writer.lane, writer.k),
                }
            })
            .collect();
        let mut failed_rounds = 0;
        while !todo.is_empty() {
            let sent = todo.len() as u64;
            self.stats.write_requests.fetch_add(sent, Ordering::Relaxed);
            self.stats.change_writes.fetch_add(sent, Ordering::Relaxed);
            metrics::counter!("zigzag_ingest_write_requests_total").increment(sent);
            metrics::counter!("zigzag_ingest_change_mark_writes_total").increment(sent);
            let results = match self.aggregates.update_batch(&todo).await {
                Ok(r) => r,
                Err(e) if e.is_retryable() => {
                    todo.iter().map(|_| Err(TableError::Unavailable(e.to_string()))).collect()
                }
                Err(e) => return Err(e.into()),
            };
            let mut again = Vec::new();
            let mut last_error = None;
            for (req, result) in todo.drain(..).zip(results) {
                match result {
                    // Refused: the mark is at k or beyond already.
                    Ok(UpdateOutcome::Applied(_) | UpdateOutcome::ConditionFailed(_)) => {}
                    Err(e) if e.is_retryable() => {
                        last_error = Some(e);
                        again.push(req);
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            if let Some(e) = last_error {
                let n = again.len() as u64;
                self.stats.retries.fetch_add(n, Ordering::Relaxed);
                metrics::counter!("zigzag_ingest_store_retries_total").increment(n);
                if !self.retry.pause(&mut failed_rounds, &AtomicU64::new(0)).await {
                    return Err(e.into());
                }
            }
            todo = again;
        }
        Ok(())
    }
}
