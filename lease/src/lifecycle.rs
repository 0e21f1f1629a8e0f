//! A worker's lease lifecycle apart from what it reads and writes: what
//! happens before its first join (`Coordinator::prepare`) and the two
//! background loops, which report what happened as [`LeaseEvent`]s for the
//! pipeline to handle (apart from its main loop, so a long flush never
//! delays them):
//!
//! - the heartbeat, every failover / 3: keeps this worker's lane (and so
//!   every lease it holds) alive; a fence (the lane taken) is reported as
//!   [`LeaseEvent::LaneLost`];
//! - the lease pass, every failover / 2 (+-25 %) and at once when poked (a
//!   shard ended, a flush gave leases away): lists the shards every
//!   `relist` (and when poked), then takes, steals, frees and completes
//!   (`Coordinator::pass`) and reports the plan as [`LeaseEvent::Plan`].
//!
//! Failures of either (an outage) are logged and tried again next period:
//! neither ends the process, except a replacement (a later process with
//! this worker id, [`LeaseError::Superseded`]) or a stream recreated under
//! the worker (checked at every listing), reported as [`LeaseEvent::Fatal`].

use crate::{Coordinator, LeaseError, Plan};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;
use zigzag_core::table::SortedTable;
use zigzag_model::source::Source;

/// What the lease loops tell the pipeline.
#[derive(Debug)]
pub enum LeaseEvent {
    /// A lease pass finished: leases gained, lost, asked for; lanes to
    /// recover. `read_at`: when it began reading the table.
    Plan { plan: Box<Plan>, read_at: Instant },
    /// This worker's lane (held since its join number `joined`) was taken:
    /// it was presumed dead.
    LaneLost { lane: u32, joined: u64 },
    /// A lease error no retry fixes: a later process with this worker id
    /// holds a live lane, or the stream was recreated under the worker.
    Fatal(LeaseError),
}

impl Coordinator {
    /// What precedes a worker's first join: checkpoints of the old format
    /// moved, the lease table checked to be the one the aggregate table
    /// was written with (`epoch.rs`; the aggregate table's layout item must
    /// exist), and the lease state keyed by the stream's incarnation
    /// (`stream.rs`), registered for seals' barriers (`seal.rs`). Every
    /// step can be repeated.
    pub async fn prepare(&self, aggregates: &dyn SortedTable, identity: Option<String>) -> Result<(), LeaseError> {
        crate::legacy::migrate(self.table(), &self.options().stream).await?;
        crate::epoch::check(self.table().as_ref(), aggregates).await?;
        self.resolve_stream(identity).await?;
        // A seal's barrier reads the leases of every stream key ever used.
        self.table().update(&crate::seal::register_stream(self.stream())).await?;
        Ok(())
    }
}

/// The heartbeat loop, until `stop`.
pub async fn heartbeat<E: From<LeaseEvent>>(
    coord: Arc<Coordinator>,
    events: mpsc::UnboundedSender<E>,
    stop: CancellationToken,
) {
    let every = coord.options().renew_every();
    let mut failing_since: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        match coord.heartbeat().await {
            Ok(()) => {
                if failing_since.take().is_some() {
                    tracing::info!("heartbeat restored");
                }
            }
            Err(LeaseError::NotJoined) => {} // rejoining
            Err(e @ LeaseError::Superseded { .. }) => {
                let _ = events.send(LeaseEvent::Fatal(e).into());
                return;
            }
            Err(LeaseError::LaneLost { lane, joined }) => {
                let _ = events.send(LeaseEvent::LaneLost { lane, joined }.into());
            }
            Err(e) => {
                let since = *failing_since.get_or_insert_with(Instant::now);
                metrics::counter!("zigzag_lease_heartbeat_failures_total").increment(1);
                coord.stats.heartbeat_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, failing_for_s = since.elapsed().as_secs_f64(), "heartbeat failed");
            }
        }
    }
}

/// The lease pass loop, until `stop` (or the receiver is gone).
pub async fn passes<E: From<LeaseEvent>>(
    coord: Arc<Coordinator>,
    source: Arc<dyn Source>,
    relist: Duration,
    events: mpsc::UnboundedSender<E>,
    poke: Arc<Notify>,
    stop: CancellationToken,
) {
    let options = coord.options().clone();
    let mut listed_at: Option<Instant> = None;
    let mut listing = None;
    let mut relist_now = true;
    loop {
        if relist_now || listed_at.is_none_or(|t| t.elapsed() >= relist) {
            match source.shards().await {
                Ok(shards) => {
                    listing = Some(shards);
                    listed_at = Some(Instant::now());
                    if let Ok(Some(now)) = source.identity().await {
                        if let Err(e) = coord.check_stream(&now) {
                            let _ = events.send(LeaseEvent::Fatal(e).into());
                            return;
                        }
                    }
                }
                Err(e) => {
                    metrics::counter!("zigzag_ingest_list_shards_failures_total").increment(1);
                    coord.stats.pass_failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %e, "listing shards failed; the pass uses the lease table alone");
                }
            }
        }
        let read_at = Instant::now();
        match coord.pass(listing.as_deref()).await {
            Ok(plan) => {
                // Created leases are in the table now: later passes need no listing
                // until the next re-list.
                if events.send(LeaseEvent::Plan { plan: Box::new(plan), read_at }.into()).is_err() {
                    return;
                }
            }
            Err(LeaseError::NotJoined) => {}
            Err(e @ LeaseError::Superseded { .. }) => {
                let _ = events.send(LeaseEvent::Fatal(e).into());
                return;
            }
            Err(e) => {
                metrics::counter!("zigzag_lease_pass_failures_total").increment(1);
                coord.stats.pass_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "lease pass failed; trying again next period");
            }
        }
        listing = None;
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(options.next_pass()) => relist_now = false,
            _ = poke.notified() => relist_now = true,
        }
    }
}
