//! The two background loops of the lease protocol, apart from the main
//! loop so a long flush never delays them:
//!
//! - the heartbeat, every failover / 3: keeps this worker's lane (and so
//!   every lease it holds) alive; a fence (the lane taken) is reported as
//!   [`Event::LaneLost`];
//! - the lease pass, every failover / 2 and at once when the main loop asks
//!   (a shard ended, a flush gave leases away): lists the shards every
//!   `relist` (and when asked), then takes, steals, frees and completes
//!   (`Coordinator::pass`) and sends the plan as [`Event::Leases`].
//!
//! Failures of either (an outage) are logged and tried again next period:
//! neither ends the process, except a replacement (a later process with
//! this worker id, [`LeaseError::Superseded`]) or a stream recreated under
//! the worker (checked at every listing), sent as [`Event::Fatal`].

use super::Event;
use crate::source::Source;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;
use zigzag_lease::{Coordinator, LeaseError};

pub(super) async fn heartbeat(coord: Arc<Coordinator>, events: mpsc::UnboundedSender<Event>, stop: CancellationToken) {
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
                let _ = events.send(Event::Fatal(e));
                return;
            }
            Err(LeaseError::LaneLost { lane, joined }) => {
                let _ = events.send(Event::LaneLost { lane, joined });
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

pub(super) async fn passes(
    coord: Arc<Coordinator>,
    source: Arc<dyn Source>,
    relist: Duration,
    events: mpsc::UnboundedSender<Event>,
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
                            let _ = events.send(Event::Fatal(e));
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
                if events.send(Event::Leases { plan: Box::new(plan), read_at }).is_err() {
                    return;
                }
            }
            Err(LeaseError::NotJoined) => {}
            Err(e @ LeaseError::Superseded { .. }) => {
                let _ = events.send(Event::Fatal(e));
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
