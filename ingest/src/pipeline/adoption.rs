//! A running worker adopting a newer layout version
//! (`zigzag_model::versions`), announced by `gather layout apply` while
//! workers run.
//!
//! Every `layout_check` the main loop asks whether a version newer than
//! the one it writes was recorded (one eventually consistent query of at
//! most one small item). When one was, the run stops as on a signal: it
//! writes everything it holds (every item set, so no record read under
//! the old layout waits in memory), completes its checkpoints, hands its
//! leases back and leaves its lane. [`run_adopting`] then builds the
//! pipeline again under the table's newest layout and joins again, saying
//! on the lane it takes which version it writes and how far the events it
//! wrote under the older one reached (`zigzag_lease::adoption`). Nothing
//! else changes: the restarted pipeline is the one a restarted process
//! would run (same worker id, checkpoints as committed), so everything the
//! lease protocol guarantees across a restart holds across an adoption.
//! The version's cut lies ahead of now by the announcement's grace, and
//! `gather` reads or fills its targets only once every lane acknowledged
//! it with older events before the cut (`zigzag_gather::relayout::adoption`).

use super::{Pipeline, PipelineError, PipelineOptions, Run, RunSummary};
use crate::source::Source;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use tokio_util::sync::CancellationToken;
use zigzag_core::table::SortedTable;
use zigzag_model::layout::LayoutError;

impl Pipeline {
    /// Whether a newer layout version was announced (asked at most every
    /// `layout_check`): the run then stops to adopt it. A throttled read is
    /// retried (`opts.retry`); one that still fails is logged and asked
    /// again later: it never stops the worker.
    pub(super) async fn newer_layout(&self, run: &mut Run) -> bool {
        if run.stopping || run.layout_checked.elapsed() < self.opts.layout_check {
            return false;
        }
        run.layout_checked = Instant::now();
        let mine = self.version.load(Ordering::Relaxed);
        let asked = self
            .opts
            .retry
            .run(&self.counters.layout_retries, || zigzag_model::versions::newer_than(self.aggregates.as_ref(), mine))
            .await;
        match asked {
            Ok(Some(newer)) => {
                tracing::info!(
                    version = newer,
                    writing = mine,
                    "a newer layout version was announced: writing everything held, then adopting it"
                );
                run.adopt = Some(newer);
                true
            }
            Ok(None) => false,
            Err(e) => {
                tracing::warn!(error = %e, "could not ask for a newer layout version; asking again later");
                false
            }
        }
    }

    /// The table's layout versions, a throttled read retried (counted with
    /// the run's retries).
    pub(super) async fn versions(&self) -> Result<Option<zigzag_model::versions::Stored>, LayoutError> {
        let load = || zigzag_model::versions::load(self.aggregates.as_ref());
        self.opts.retry.run(&self.counters.layout_retries, load).await
    }

    /// The layout version this pipeline writes (0 before it joined).
    pub fn layout_version(&self) -> u32 {
        self.version.load(Ordering::Relaxed)
    }
}

/// Runs pipelines one after another until one ends for another reason than
/// a newer layout version: each next one under the table's newest layout
/// (its other settings as given). `started` is told of each pipeline as it
/// starts (the process's probes watch the current one). The summary is of
/// all of them.
pub async fn run_adopting(
    source: Arc<dyn Source>,
    aggregates: Arc<dyn SortedTable>,
    leases: Arc<dyn SortedTable>,
    mut opts: PipelineOptions,
    stop: CancellationToken,
    producer_done: CancellationToken,
    mut started: impl FnMut(&Arc<Pipeline>),
) -> Result<RunSummary, PipelineError> {
    let mut total: Option<RunSummary> = None;
    loop {
        let pipeline = Arc::new(Pipeline::new(source.clone(), aggregates.clone(), leases.clone(), opts.clone())?);
        started(&pipeline);
        let summary = pipeline.clone().run_until_drained(stop.clone(), producer_done.clone()).await?;
        let mine = pipeline.layout_version();
        let adopt = summary.adopt;
        let newest = summary.newest_event_ms;
        total = Some(match total {
            None => summary,
            Some(t) => t.then(summary),
        });
        if adopt.is_none() || stop.is_cancelled() {
            return Ok(total.unwrap_or_default());
        }
        // Retried when throttled (a worker between two pipelines has
        // nothing else to do), and counted with the run's retries.
        let retried = std::sync::atomic::AtomicU64::new(0);
        let stored = opts.retry.run(&retried, || zigzag_model::versions::load(aggregates.as_ref())).await;
        if let Some(t) = total.as_mut() {
            t.retries += retried.into_inner();
        }
        let stored =
            stored?.ok_or_else(|| zigzag_model::layout::LayoutError::Corrupt("the #layout item vanished".into()))?;
        tracing::info!(from = mine, version = stored.newest.number, "adopting the table's newest layout");
        opts.config = stored.layout().apply(&opts.config);
        // The end of the newest event's finest bucket would do; the event's
        // next millisecond is exact.
        let reached = newest.map_or(0, |t| t.saturating_add(1));
        opts.older_events_to_ms = opts.older_events_to_ms.max(reached);
    }
}
