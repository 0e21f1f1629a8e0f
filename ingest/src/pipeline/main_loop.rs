//! The main loop: one event at a time (flush ticks, shard ends, lease
//! plans, lost lanes, stop), and the reconciliation of each lease plan with
//! what this worker reads — start readers for leases gained, stop them for
//! leases lost or asked for, recover dead workers' flushes, rejoin after
//! being presumed dead.

use super::flushing::lock_progress_empty;
use super::reader::ShardTask;
use super::{lock, Event, Pipeline, PipelineError, Run, Shard, Tombstone};
use crate::source::StartAt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use zigzag_core::retry::Retryable;
use zigzag_lease::{LeaseError, Plan, Ready};

impl Pipeline {
    pub(super) async fn main_loop(
        self: &Arc<Self>,
        run: &mut Run,
        events: &mut mpsc::UnboundedReceiver<Event>,
        stop: &CancellationToken,
        producer_done: &CancellationToken,
    ) -> Result<(), PipelineError> {
        let every = Duration::from_millis(self.opts.config.flush.interval_ms);
        let first = tokio::time::Instant::now() + zigzag_lease::first_flush_after(every);
        let mut interval = tokio::time::interval_at(first, every);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let event = tokio::select! {
                _ = stop.cancelled() => Event::Stop,
                _ = interval.tick() => Event::Tick,
                _ = run.full.notified() => Event::GenerationFull,
                _ = producer_done.cancelled(), if run.drain_after.is_none() => Event::ProducerDone,
                Some(e) = events.recv() => e,
            };
            match event {
                Event::Tick | Event::GenerationFull => {
                    self.flush_step(run).await?;
                    if self.newer_layout(run).await {
                        return Ok(());
                    }
                }
                Event::ShardEnded(index) => {
                    run.finished_at = Some(Instant::now());
                    if let Some(s) = run.shards.get_mut(&index) {
                        s.ended = true;
                        s.reader = None;
                    }
                    // Commit its end promptly, then look for its children.
                    self.flush_step(run).await?;
                }
                Event::Leases { plan, read_at } => {
                    self.on_plan(run, &plan, read_at).await?;
                    let finished = self.source.bounded() && plan.unfinished == 0 && run.job.is_none();
                    run.last_plan = Some(*plan);
                    run.last_plan_read_at = Some(read_at);
                    if finished && run.shards.values().all(|s| s.reader.is_none()) {
                        tracing::info!("every shard is finished");
                        return Ok(());
                    }
                }
                // A loss reported twice (heartbeat and flush) rejoins once: a
                // report about an earlier join is stale.
                Event::LaneLost { lane, joined } if joined == self.coord.joined() => {
                    self.rejoin(run, lane, stop).await?
                }
                Event::LaneLost { .. } => {}
                Event::SourceFailed { shard, error } => {
                    tracing::error!(shard = %shard, error = %error, "shard failed");
                    return Err(error.into());
                }
                Event::Fatal(e) => {
                    tracing::error!(error = %e, "stopping");
                    return Err(e.into());
                }
                Event::ProducerDone => run.drain_after = Some(Instant::now()),
                Event::Stop => return Ok(()),
            }
            if self.idle_long_enough(run) {
                tracing::info!("every held shard is caught up: stopping");
                return Ok(());
            }
            if self.drained(run) {
                tracing::info!("drained: every held shard was read to its tip");
                return Ok(());
            }
        }
    }

    /// `--idle-exit`: every shard read here has been at its tip for the
    /// idle time, everything read is flushed, and no lease waits.
    fn idle_long_enough(&self, run: &Run) -> bool {
        let Some(idle) = self.opts.idle_exit else { return false };
        self.settled(run)
            && run.shards.values().filter_map(|s| s.reader.as_ref()).all(|r| {
                let c = lock(&r.caught_up);
                c.since.is_some_and(|t| t.elapsed() >= idle)
            })
    }

    /// Drained (see [`Pipeline::run_until_drained`]): every shard read here
    /// was found at its tip by a read that began after `after`.
    fn drained(&self, run: &Run) -> bool {
        let Some(after) = run.drain_after else { return false };
        self.settled(run)
            && run.shards.values().filter_map(|s| s.reader.as_ref()).all(|r| {
                let c = lock(&r.caught_up);
                c.last.is_some_and(|t| t >= after)
            })
    }

    /// Nothing unflushed, no lease waiting to be taken (by this worker or
    /// any other: one handed over to a worker that has stopped since is
    /// taken here at a later pass), no shard waiting for its parents, and
    /// the last plan was read after the last shard this worker finished
    /// (its children may appear only then).
    fn settled(&self, run: &Run) -> bool {
        let stale = run.last_plan_read_at.is_none_or(|read| run.finished_at.is_some_and(|f| f >= read));
        let waiting = run
            .last_plan
            .as_ref()
            .is_none_or(|p| !p.take.is_empty() || p.steal.is_some() || p.waiting_for_parents > 0 || p.unheld > 0);
        !stale && !waiting && run.job.is_none() && lock_progress_empty(&run.gate)
    }

    /// Reconciles a lease plan with what this worker reads.
    async fn on_plan(self: &Arc<Self>, run: &mut Run, plan: &Plan, read_at: Instant) -> Result<(), PipelineError> {
        // Lost: held here, not (or under another counter) in the table.
        let lost: Vec<u32> =
            run.shards.iter().filter(|(_, s)| plan.held.get(&s.id) != Some(&s.lease)).map(|(i, _)| *i).collect();
        for index in lost {
            let s = run.shards.remove(&index).expect("listed above");
            tracing::warn!(shard = %s.id, "lease lost: reading stops; unflushed records are left to the new owner");
            metrics::counter!("zigzag_lease_lost_total").increment(1);
            if let Some(r) = s.reader {
                r.stop().await;
            }
            run.tombstones.insert(s.id, Tombstone::now(false));
        }
        // Asked for: stop reading; the lease goes after the next flush (at
        // once if nothing of it is read here: waiting for parents, blocked).
        for (shard, lease, to) in &plan.handoffs {
            if !run.shards.values().any(|s| &s.id == shard) {
                if run.tombstones.get(shard).is_some_and(|t| t.after(read_at)) {
                    // Let go of since this plan was read (plans queue behind
                    // a long flush): giving it again would count it twice.
                    continue;
                }
                match self.coord.give(shard, *lease, to).await {
                    Ok(_) => run.tombstones.insert(shard.clone(), Tombstone::now(false)),
                    Err(e) if e.is_retryable() => None,
                    Err(e) => return Err(e.into()),
                };
                continue;
            }
            if let Some(s) = run.shards.values_mut().find(|s| &s.id == shard && s.lease == *lease) {
                if s.leaving.is_none() {
                    tracing::info!(shard = %shard, to = %to, "handing a lease over after the next flush");
                    if let Some(r) = s.reader.take() {
                        r.stop().await;
                    }
                    s.leaving = Some(to.clone());
                }
            }
        }
        for ready in &plan.ready {
            if run.shards.values().any(|s| s.id == ready.shard) {
                continue;
            }
            let Some(ready) = self.renumbered(ready).await? else { continue };
            self.start_reader(run, &ready, read_at);
        }
        // Dead workers' lanes at once, not one after another (each re-reads
        // its own shards and writes under its own lane).
        let recoveries =
            futures::future::join_all(plan.recover.iter().map(|&lane| async move { (lane, self.recover(lane).await) }))
                .await;
        let mut missing = 0;
        for (lane, result) in recoveries {
            match result {
                Ok(true) => {
                    self.counters.recovered.fetch_add(1, Ordering::Relaxed);
                    run.poke.notify_one();
                }
                Ok(false) => {}
                // The stream no longer holds records the dead worker's flush
                // was proven over (it aged out of retention before anyone
                // recovered it): its shards stay blocked. Loud: it does not
                // heal by itself (ARCHITECTURE.md, "Operating notes").
                Err(e @ PipelineError::MissingRecords { .. }) => {
                    missing += 1;
                    self.coord.abandon_recovery(lane);
                    metrics::counter!("zigzag_ingest_recovery_missing_records_total").increment(1);
                    tracing::error!(
                        lane,
                        error = %e,
                        "a dead worker's flush cannot be recovered: the stream no longer holds its records; \
                         its shards stay blocked until it is (see the operating notes)"
                    );
                }
                // Another worker took the lane over (it finishes the flush),
                // or the store or the stream is down (tried again later: the
                // lane expires once more and is taken again).
                Err(e) if e.is_retryable() || matches!(e, PipelineError::Lease(LeaseError::LaneLost { .. })) => {
                    self.coord.abandon_recovery(lane);
                    tracing::warn!(lane, error = %e, "recovering a dead worker's flush failed; trying again later");
                }
                Err(e) => return Err(e),
            }
        }
        metrics::gauge!("zigzag_ingest_recoveries_missing_records").set(missing as f64);
        if run.job.is_none() && run.shards.values().any(|s| s.leaving.is_some()) {
            self.flush_step(run).await?;
        }
        Ok(())
    }

    fn start_reader(self: &Arc<Self>, run: &mut Run, ready: &Ready, read_at: Instant) {
        if run.shards.values().any(|s| s.id == ready.shard) {
            return;
        }
        if let Some(t) = run.tombstones.get(&ready.shard) {
            if t.finished || t.after(read_at) {
                return; // a plan read before this worker let it go
            }
            run.tombstones.remove(&ready.shard);
        }
        let index = run.next_index;
        run.next_index += 1;
        let mut shard = Shard {
            id: ready.shard.clone(),
            lease: ready.lease,
            checkpoint: ready.checkpoint.clone(),
            seal: ready.seal,
            owed: ready.checkpoint.is_uniform().then(Default::default),
            read_to: ready.checkpoint.furthest(),
            catching_up: false,
            catch_up_after: None,
            catch_up_failures: 0,
            reader: None,
            leaving: None,
            ended: false,
        };
        // Sets apart (a worker died between a faster and a slower cadence's
        // flushes): the ones behind are written first, by the flush cycle.
        let sets = self.flusher.item_sets().len() as zigzag_lease::ItemSet;
        if !ready.checkpoint.behind(sets).is_empty() {
            tracing::info!(shard = %ready.shard, checkpoint = %ready.checkpoint, "catching the slower item sets up first");
            shard.catching_up = true;
            run.shards.insert(index, shard);
            run.poke.notify_one();
            return;
        }
        // Every set is at one position (whatever the text lists).
        let start = match (ready.checkpoint.furthest(), ready.from_trim_horizon) {
            (Some(p), _) => StartAt::After(p),
            (None, true) => StartAt::TrimHorizon,
            (None, false) => ready.start_ms.map_or(StartAt::Configured, StartAt::AtTime),
        };
        let task = ShardTask {
            pipeline: self.clone(),
            index,
            id: ready.shard.clone(),
            lease: ready.lease,
            start,
            gate: run.gate.clone(),
            swapped: run.swapped_tx.subscribe(),
            full: run.full.clone(),
            cancel: CancellationToken::new(),
            caught_up: Arc::default(),
            events: run.events_tx.clone(),
        };
        metrics::gauge!("zigzag_ingest_shard_reading", "shard" => ready.shard.clone()).set(1.0);
        run.shards_read.insert(ready.shard.clone());
        shard.reader = Some(task.spawn());
        run.shards.insert(index, shard);
    }

    /// This worker was presumed dead and its lane taken: everything in
    /// memory is dropped (another worker recovers or re-reads it) and the
    /// worker joins again as new.
    pub(super) async fn rejoin(&self, run: &mut Run, lane: u32, stop: &CancellationToken) -> Result<(), PipelineError> {
        tracing::warn!(lane, "this worker's lane was taken (it was presumed dead): dropping its state and rejoining");
        for (_, s) in std::mem::take(&mut run.shards) {
            if let Some(r) = s.reader {
                r.stop().await;
            }
            // Leases still ours are read again from their checkpoints once a
            // plan read after this shows them (the dead lane's flush, if any,
            // blocks them until it is recovered).
            run.tombstones.insert(s.id, Tombstone::now(false));
        }
        run.job = None;
        run.retry_at = None;
        lock(&self.cadences).clear();
        *run.gate.write().await = self.first_batch();
        run.swaps += 1;
        let _ = run.swapped_tx.send(run.swaps);
        self.join(stop).await?;
        run.gate.write().await.seal = self.coord.seal_seen();
        run.acknowledged = self.coord.seal_seen();
        run.poke.notify_one();
        Ok(())
    }
}
