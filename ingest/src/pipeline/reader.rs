//! One shard's read → decode → aggregate task. It aggregates into the
//! current generation under the read side of the gate (the swap takes the
//! write side, so a generation holds exactly the records read between two
//! swaps) and waits instead of growing the generation past `max_keys` keys
//! or `max_memory_mb` of memory.
//!
//! An outage does not end it: when the source's own retries are spent, the
//! task pauses (capped backoff), reopens the shard after the last record it
//! aggregated, and goes on. On a stream even an error retrying cannot fix
//! pauses the shard (loudly); only a bounded source's (a file's) ends the
//! task, reported to the main loop.

use super::{lock, Batch, Event, Pipeline};
use crate::source::{SourceError, StartAt};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::{mpsc, watch, Notify, RwLock};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use zigzag_core::retry::Retryable;

/// How far a reader is: when its reads found the shard at its tip.
#[derive(Debug, Default)]
pub(super) struct CaughtUp {
    /// Start of the first of the current run of reads that found nothing
    /// new with the shard at its tip (None: the last read had records or lag).
    pub since: Option<Instant>,
    /// Start of the latest such read.
    pub last: Option<Instant>,
}

/// What the main loop keeps of a running reader.
pub(super) struct ReaderHandle {
    pub cancel: CancellationToken,
    pub task: tokio::task::JoinHandle<()>,
    pub caught_up: Arc<Mutex<CaughtUp>>,
}

impl ReaderHandle {
    /// Stops the task after its current batch and waits for it: nothing it
    /// read is aggregated after this returns.
    pub async fn stop(self) {
        self.cancel.cancel();
        let _ = self.task.await;
    }
}

pub(super) struct ShardTask {
    pub pipeline: Arc<Pipeline>,
    pub index: u32,
    pub id: String,
    /// The lease counter it is read under.
    pub lease: u64,
    pub start: StartAt,
    pub gate: Arc<RwLock<Batch>>,
    pub swapped: watch::Receiver<u64>,
    pub full: Arc<Notify>,
    pub cancel: CancellationToken,
    pub caught_up: Arc<Mutex<CaughtUp>>,
    pub events: mpsc::UnboundedSender<Event>,
}

impl ShardTask {
    pub fn spawn(self) -> ReaderHandle {
        let (cancel, caught_up) = (self.cancel.clone(), self.caught_up.clone());
        // The shard's span: every line the task logs (the source's too: an
        // iterator renewed, an aggregate that does not decode) names it.
        let span = tracing::info_span!("shard", shard = %self.id, lease = self.lease);
        ReaderHandle { cancel, caught_up, task: tokio::spawn(self.run().instrument(span)) }
    }

    async fn run(mut self) {
        tracing::info!(start = ?self.start, "reading");
        if let Err(error) = self.read().await {
            let _ = self.events.send(Event::SourceFailed { shard: self.id.clone(), error });
        }
        metrics::gauge!("zigzag_ingest_shard_reading", "shard" => self.id.clone()).set(0.0);
        // Not behind on a shard it no longer reads: a stale lag would stay
        // in every maximum over shards (the EMF document's, an alarm's).
        metrics::gauge!("zigzag_ingest_millis_behind", "shard" => self.id.clone()).set(0.0);
    }

    /// After a failed call: a retryable error pauses the shard (capped
    /// backoff; true = reopen and go on, false = cancelled meanwhile); any
    /// other error ends the task.
    async fn outage(&self, failures: &mut u32, paused: &mut PausedGauge, e: SourceError) -> Result<bool, SourceError> {
        let p = &self.pipeline;
        // A file or generator that cannot be read is a mistake to report;
        // a stream's shard that fails for good (deleted, aged out) must not
        // take the worker, and every worker after it, down with it.
        if !e.is_retryable() && p.source.bounded() {
            return Err(e);
        }
        paused.set(true);
        *failures += 1;
        let wait = p.pause_after(*failures);
        if e.is_retryable() {
            tracing::warn!(error = %e, retry_in_s = wait.as_secs_f64(), "source unavailable: shard paused");
        } else {
            metrics::counter!("zigzag_ingest_shard_failures_total").increment(1);
            tracing::error!(error = %e, retry_in_s = wait.as_secs_f64(), "shard cannot be read: paused");
        }
        metrics::counter!("zigzag_ingest_shard_pauses_total").increment(1);
        p.counters.shard_pauses.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(tokio::select! {
            _ = self.cancel.cancelled() => false,
            _ = tokio::time::sleep(wait) => true,
        })
    }

    async fn read(&mut self) -> Result<(), SourceError> {
        let p = self.pipeline.clone();
        let max_keys = p.opts.config.flush.max_keys;
        let max_bytes = p.opts.config.flush.max_memory_mb.saturating_mul(1 << 20);
        let full = |gen: &crate::aggregate::Generation| gen.len() >= max_keys || gen.bytes() >= max_bytes;
        let mut failures = 0;
        let mut paused = PausedGauge::default();
        // A first reader that starts at a time (LATEST, a timestamp) records
        // it in the lease first: whoever takes the shard over before its
        // first checkpoint begins at the same records.
        while let (StartAt::Configured, Some(ms)) = (self.start, p.source.start_time()) {
            match p.coord.record_start(&self.id, self.lease, ms).await {
                Ok(Some(recorded)) => self.start = StartAt::AtTime(recorded),
                Ok(None) => return Ok(()), // the lease is not ours any more
                Err(e) => {
                    let e = SourceError::Unavailable(format!("recording where shard {} starts: {e}", self.id));
                    if !self.outage(&mut failures, &mut paused, e).await? {
                        return Ok(());
                    }
                }
            }
        }
        'open: loop {
            let mut reader = match p.source.open(&self.id, self.start).await {
                Ok(r) => r,
                Err(e) => match self.outage(&mut failures, &mut paused, e).await? {
                    true => continue 'open,
                    false => return Ok(()),
                },
            };
            loop {
                let asked = Instant::now();
                let batch = tokio::select! {
                    _ = self.cancel.cancelled() => return Ok(()),
                    b = reader.next_batch(p.opts.batch_size) => b,
                };
                let batch = match batch {
                    Ok(b) => b,
                    Err(e) => match self.outage(&mut failures, &mut paused, e).await? {
                        true => continue 'open,
                        false => return Ok(()),
                    },
                };
                failures = 0;
                paused.set(false);
                if let Some(ms) = batch.millis_behind {
                    metrics::gauge!("zigzag_ingest_millis_behind", "shard" => self.id.clone()).set(ms as f64);
                }
                {
                    let at_tip = batch.records.is_empty() && batch.millis_behind.is_none_or(|ms| ms == 0);
                    let mut c = lock(&self.caught_up);
                    if at_tip || batch.end_of_shard {
                        c.since.get_or_insert(asked);
                        c.last = Some(asked);
                    } else {
                        *c = CaughtUp::default();
                    }
                }
                if batch.records.is_empty() && !batch.end_of_shard {
                    continue;
                }
                // Backpressure: wait for the flush loop to swap in an empty
                // generation rather than grow past the key limit.
                loop {
                    let guard = self.gate.read().await;
                    if !full(&guard.gen) {
                        // Cancelled while waiting: this batch is not ours to add.
                        if self.cancel.is_cancelled() {
                            return Ok(());
                        }
                        let mut rejected = Vec::new();
                        let counts = p
                            .aggregator
                            .add_batch_under(&guard.gen, self.index, &batch, guard.seal, &mut rejected)
                            .map_err(|e| SourceError::Shard { shard: self.id.clone(), message: e.to_string() })?;
                        if !rejected.is_empty() {
                            lock(&guard.rejected).extend(rejected.into_iter().map(|r| (self.index, r)));
                        }
                        {
                            let mut progress = lock(&guard.progress);
                            let prog = progress.entry(self.index).or_default();
                            prog.first = prog.first.or(batch.records.first().map(|r| r.pos));
                            prog.last = batch.last_position().or(prog.last);
                            prog.ended |= batch.end_of_shard;
                            prog.behind_ms = batch.millis_behind.or(prog.behind_ms);
                        }
                        p.counters.add(&batch, counts);
                        if full(&guard.gen) {
                            self.full.notify_one();
                        }
                        break;
                    }
                    drop(guard);
                    self.full.notify_one();
                    self.swapped.borrow_and_update();
                    tokio::select! {
                        _ = self.cancel.cancelled() => return Ok(()),
                        r = self.swapped.changed() => if r.is_err() { return Ok(()) },
                    }
                }
                if let Some(last) = batch.last_position() {
                    self.start = StartAt::After(last);
                }
                if batch.end_of_shard {
                    let _ = self.events.send(Event::ShardEnded(self.index));
                    return Ok(());
                }
            }
        }
    }
}

/// This task's share of the "shards paused by an outage" gauge.
#[derive(Default)]
struct PausedGauge(bool);

impl PausedGauge {
    fn set(&mut self, paused: bool) {
        if paused != self.0 {
            self.0 = paused;
            metrics::gauge!("zigzag_ingest_shards_paused").increment(if paused { 1.0 } else { -1.0 });
        }
    }
}

impl Drop for PausedGauge {
    fn drop(&mut self) {
        self.set(false);
    }
}
