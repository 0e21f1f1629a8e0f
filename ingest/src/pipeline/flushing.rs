//! The flush cycle in the main loop: swap the generation out, drive the
//! flush job (pausing it through an outage), advance or let go of the
//! shards it covered, hand over the leases asked for, and the final flush
//! and release on stop.

use super::job::FlushJob;
use super::{lock, Batch, Pipeline, PipelineError, Run, Tombstone};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::sync::RwLock;
use tokio_util::sync::CancellationToken;
use zigzag_core::retry::Retryable;
use zigzag_lease::{LeaseError, ShardRange};

impl Pipeline {
    /// One step of the flush cycle: drive the flush in flight (when its
    /// pause is over), or swap out the generation and start one.
    pub(super) async fn flush_step(&self, run: &mut Run) -> Result<(), PipelineError> {
        if run.job.is_none() {
            run.job = self.swap(run).await;
            if run.job.is_none() {
                self.acknowledge_seal(run).await;
                self.after_flush(run, &[]).await?;
                return Ok(());
            }
        }
        if run.retry_at.is_some_and(|t| Instant::now() < t) {
            return Ok(());
        }
        let job = run.job.as_mut().expect("a job");
        match job.drive(self).await {
            Ok(()) => {
                let job = run.job.take().expect("a job");
                run.job_failures = 0;
                run.retry_at = None;
                metrics::gauge!("zigzag_ingest_flush_paused").set(0.0);
                self.counters.flush_paused.store(false, Ordering::Relaxed);
                // A range the proof dropped: the lease moved on (lost, or this
                // reader started from a stale checkpoint). Stop it; a plan read
                // from now on says whether and where to read it again.
                for index in self.flushed(run, &job) {
                    if let Some(s) = run.shards.remove(&index) {
                        tracing::warn!(shard = %s.id, "range dropped by the flush's proof: reading stops");
                        if let Some(r) = s.reader {
                            r.stop().await;
                        }
                        run.tombstones.insert(s.id, Tombstone::now(false));
                    }
                }
                let began = job.began.expect("driven");
                self.acknowledge_seal(run).await;
                self.after_flush(run, &began.ranges).await
            }
            // A catch-up that could not read its records: only its shard
            // waits (loudly); the other shards' flushes go on.
            Err(e) if job.is_catch_up() && job.began.is_none() => {
                let job = run.job.take().expect("a job");
                for (index, _) in &job.ranges {
                    let Some(s) = run.shards.get_mut(index) else { continue };
                    s.catch_up_failures += 1;
                    let wait = self.pause_after(s.catch_up_failures).max(Duration::from_secs(1));
                    s.catch_up_after = Some(Instant::now() + wait);
                    metrics::counter!("zigzag_ingest_catch_up_failures_total").increment(1);
                    self.counters.catch_up_failures.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(shard = %s.id, error = %e, retry_in_s = wait.as_secs_f64(),
                        "catching the slower item sets up failed: the shard waits, unread");
                }
                Ok(())
            }
            Err(e) if e.is_retryable() => {
                run.job_failures += 1;
                let wait = self.pause_after(run.job_failures);
                run.retry_at = Some(Instant::now() + wait);
                metrics::gauge!("zigzag_ingest_flush_paused").set(1.0);
                self.counters.flush_paused.store(true, Ordering::Relaxed);
                metrics::counter!("zigzag_ingest_flush_pauses_total").increment(1);
                self.counters.flush_pauses.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, retry_in_s = wait.as_secs_f64(), "flush paused: store unavailable");
                Ok(())
            }
            Err(PipelineError::Lease(LeaseError::LaneLost { lane, .. })) => {
                let never = CancellationToken::new();
                self.rejoin(run, lane, &never).await
            }
            Err(e) => Err(e),
        }
    }

    /// Swaps the generation out; a job if any shard made progress or
    /// records wait for a cadence now due. A shard whose item sets are
    /// apart is caught up first, by a job of its own.
    async fn swap(&self, run: &mut Run) -> Option<FlushJob> {
        // A stopping worker gives such shards back as they are.
        if let Some(job) = self.catch_up(run).filter(|_| !run.stopping) {
            return Some(job);
        }
        // A seal raised since this generation began (`zigzag_lease::seal`):
        // this swap writes everything, so nothing read under the old seal
        // waits in memory, and the next generation is read under the new.
        let seal = self.coord.seal_seen();
        let adopting = seal > run.gate.read().await.seal;
        // Everything is written at once when a shard is handed over or
        // ended, or the worker stops (and, below, when a shard with a set
        // that has nothing applied yet made progress).
        let whole = adopting || run.stopping || run.shards.values().any(|s| s.leaving.is_some() || s.ended);
        let full = self.nearly_full(&run.gate);
        let waiting = {
            let mut cadences = lock(&self.cadences);
            // Records of shards let go of wait for no one.
            cadences.drop_shards(|i| !run.shards.contains_key(&i));
            // Nothing due: the generation keeps filling until something is.
            let due = cadences.due(Instant::now(), whole, full)?;
            cadences.shards_pending(&due)
        };
        let has_progress = !lock_progress_empty(&run.gate);
        if !has_progress && !waiting.iter().any(|i| run.shards.contains_key(i)) {
            if adopting {
                let mut gate = run.gate.write().await;
                if lock(&gate.progress).is_empty() {
                    gate.seal = seal; // nothing read under the old one
                }
            }
            return None;
        }
        let batch = {
            let mut gate = run.gate.write().await;
            // The next generation sized like this one, shard by shard
            // (bounded by the key limit): no rehashing while they fill it,
            // and in the memory of generations flushed before.
            let next = gate.gen.next(self.opts.config.flush.max_keys);
            let seal = if adopting { seal } else { gate.seal };
            std::mem::replace(&mut *gate, Batch { gen: next, seal, ..Default::default() })
        };
        run.swaps += 1;
        let _ = run.swapped_tx.send(run.swaps);
        self.counters.max_keys_seen.fetch_max(batch.gen.len() as u64, Ordering::Relaxed);
        let progress = lock(&batch.progress).clone();
        // A shard that ended is finished only once every set reached its
        // end; a shard's first range writes every set (a restart never
        // needs its first record again).
        let first = |i: &u32| run.shards.get(i).is_some_and(|s| s.checkpoint.has_unread_set());
        let whole = whole || progress.iter().any(|(i, p)| p.ended || first(i));
        let (due, sets, waiting) = {
            let cadences = lock(&self.cadences);
            let due = cadences.due(Instant::now(), whole, true).unwrap_or(super::cadence::Due::Whole);
            let sets = cadences.sets(&due);
            let waiting = cadences.shards_pending(&due);
            (due, sets, waiting)
        };
        let mut indices: Vec<u32> = progress.keys().copied().chain(waiting).collect();
        indices.sort_unstable();
        indices.dedup();
        let of = self.flusher.item_sets().len() as zigzag_lease::ItemSet;
        let finest_ms = self.flusher.item_sets().iter().map(|s| s.rollup.unit_ms()).min().unwrap_or(60_000);
        let mut ranges = Vec::new();
        for index in indices {
            let Some(s) = run.shards.get_mut(&index) else { continue };
            let p = progress.get(&index).copied().unwrap_or_default();
            s.read_to = p.last.or(s.read_to);
            let to = s.read_to.or(s.checkpoint.furthest()).unwrap_or_default();
            let first = if s.checkpoint.earliest().is_none() { p.first } else { None };
            let mut range = ShardRange {
                shard: s.id.clone(),
                lease: s.lease,
                from: s.checkpoint.clone(),
                sets: sets.clone(),
                of,
                first,
                to,
                ends: p.ended,
                behind_ms: p.behind_ms,
                seal: batch.seal,
                owed: None,
                layout: if sets.is_some() { self.layout.clone() } else { String::new() },
            };
            // The records from the earliest set's position on: this
            // generation's records of the shard (by their finest buckets)
            // and what the sets behind owed. They hold all it writes, and,
            // if it leaves sets apart, all those sets lack.
            let read = zigzag_lease::owed::Owed::of_buckets(batch.gen.shard_buckets(index), finest_ms);
            range.owed = s.owed.as_ref().map(|o| o.union(&read));
            ranges.push((index, range));
        }
        Some(FlushJob::new(batch, ranges, due))
    }

    /// Acknowledges on the lane the seal the generation is read under, once
    /// no flush is in flight (so everything read under an older seal is
    /// committed and completed). A failure is tried again after the next
    /// flush; until then a `gather compact` waits.
    async fn acknowledge_seal(&self, run: &mut Run) {
        if run.job.is_some() {
            return;
        }
        let seal = run.gate.read().await.seal;
        if seal <= run.acknowledged {
            return;
        }
        match self.coord.acknowledge_seal(seal).await {
            Ok(()) => {
                run.acknowledged = seal;
                tracing::info!(seal, "seal adopted: events before it are dead-lettered (reason `sealed`)");
            }
            Err(e) => tracing::warn!(error = %e, "could not acknowledge the seal: trying again after the next flush"),
        }
    }

    /// Whether the generation is near its key or memory bound (readers
    /// wait at the bound: a flush must make room before).
    fn nearly_full(&self, gate: &RwLock<Batch>) -> bool {
        let flush = &self.opts.config.flush;
        let max_bytes = flush.max_memory_mb.saturating_mul(1 << 20);
        gate.try_read().map_or(true, |b| b.gen.len() * 10 >= flush.max_keys * 9 || b.gen.bytes() * 10 >= max_bytes * 9)
    }

    /// A job writing, from the stream, the item sets behind in a shard
    /// taken with its sets apart, up to the furthest one's checkpoint (one
    /// shard a job: its records are read before the intent is opened, and
    /// a failure waits for that shard alone).
    fn catch_up(&self, run: &Run) -> Option<FlushJob> {
        let sets = self.flusher.item_sets().len() as zigzag_lease::ItemSet;
        let now = Instant::now();
        let ranges: Vec<(u32, ShardRange)> = run
            .shards
            .iter()
            .filter(|(_, s)| s.catching_up && s.catch_up_after.is_none_or(|t| t <= now))
            .take(1)
            .filter_map(|(index, s)| {
                let to = s.checkpoint.furthest()?;
                let behind = s.checkpoint.behind(sets);
                let range = ShardRange {
                    shard: s.id.clone(),
                    lease: s.lease,
                    from: s.checkpoint.clone(),
                    sets: Some(behind),
                    of: sets,
                    first: None,
                    to,
                    ends: false,
                    behind_ms: None,
                    seal: s.seal,
                    owed: None,
                    layout: self.layout.clone(),
                };
                Some((*index, range))
            })
            .collect();
        (!ranges.is_empty()).then(|| FlushJob::reread(ranges))
    }

    /// After a flush commits: advance the shards, let go of the finished,
    /// lost and leaving ones.
    fn flushed(&self, run: &mut Run, job: &FlushJob) -> Vec<u32> {
        let began = job.began.as_ref().expect("driven");
        let mut dropped = Vec::new();
        for (index, r) in &job.ranges {
            let Some(s) = run.shards.get_mut(index) else { continue };
            if !began.ranges.iter().any(|k| k.shard == r.shard) {
                dropped.push(*index);
            } else {
                s.checkpoint = r.completed();
                s.owed = match s.checkpoint.is_uniform() {
                    true => Some(Default::default()),
                    false => r.owed.clone(),
                };
                if r.finishes() {
                    run.finished_at = Some(Instant::now());
                    let s = run.shards.remove(index).expect("present");
                    run.tombstones.insert(s.id, Tombstone::now(true));
                } else if s.catching_up {
                    // Caught up: a lease pass read after this starts its
                    // reader from the (now single) checkpoint; one read
                    // before does not (it shows the old checkpoint).
                    let s = run.shards.remove(index).expect("present");
                    run.tombstones.insert(s.id, Tombstone::now(false));
                    run.poke.notify_one();
                }
            }
        }
        let ms = job.started.elapsed();
        metrics::counter!("zigzag_ingest_flushes_total").increment(1);
        metrics::histogram!("zigzag_ingest_flush_seconds").record(ms.as_secs_f64());
        metrics::gauge!("zigzag_ingest_generation_keys").set(job.keys as f64);
        tracing::info!(
            keys = job.keys,
            lane = began.lane,
            k = began.k,
            shards = began.ranges.len(),
            records = self.counters.records.load(Ordering::Relaxed),
            dead_letters = self.counters.rejected.load(Ordering::Relaxed),
            write_requests = self.flusher.stats.write_requests.load(Ordering::Relaxed),
            ms = ms.as_millis() as u64,
            "flushed"
        );
        dropped
    }

    /// Gives the leases asked for (their progress is committed) and pokes
    /// the lease pass when something changed hands or finished.
    async fn after_flush(&self, run: &mut Run, committed: &[ShardRange]) -> Result<(), PipelineError> {
        let leaving: Vec<u32> = run.shards.iter().filter(|(_, s)| s.leaving.is_some()).map(|(i, _)| *i).collect();
        let mut changed = committed.iter().any(|r| r.finishes());
        for index in leaving {
            let s = run.shards.get(&index).expect("listed");
            let to = s.leaving.clone().unwrap_or_default();
            match self.coord.give(&s.id, s.lease, &to).await {
                Ok(_) => {}
                Err(e) if e.is_retryable() => {
                    tracing::warn!(shard = %s.id, error = %e, "handing over failed; trying again after the next flush");
                    continue;
                }
                Err(e) => return Err(e.into()),
            }
            let s = run.shards.remove(&index).expect("listed");
            run.tombstones.insert(s.id, Tombstone::now(false));
            changed = true;
        }
        if changed {
            run.poke.notify_one();
        }
        Ok(())
    }

    /// Stop: readers end after their batch, the last flush commits
    /// everything read, the leases go back (or to whoever asked; held ones
    /// never read go back too). The lease passes have stopped: nothing is
    /// taken meanwhile. The lane is freed after, once its heartbeat stops.
    pub(super) async fn shutdown(&self, run: &mut Run) -> Result<(), PipelineError> {
        run.stopping = true;
        for s in run.shards.values_mut() {
            if let Some(r) = s.reader.take() {
                r.stop().await;
            }
        }
        let deadline = Instant::now() + self.opts.failover * 2;
        loop {
            run.retry_at = None;
            self.flush_step(run).await?;
            let waiting = !lock(&self.cadences).is_empty();
            if run.job.is_none() && lock_progress_empty(&run.gate) && !waiting {
                break;
            }
            if Instant::now() >= deadline {
                return Err(PipelineError::FinalFlush { waited: self.opts.failover * 2 });
            }
            tokio::time::sleep(self.pause_after(run.job_failures).min(Duration::from_secs(2))).await;
        }
        for (_, s) in std::mem::take(&mut run.shards) {
            let to = s.leaving.as_deref().unwrap_or("");
            if let Err(e) = self.coord.give(&s.id, s.lease, to).await {
                tracing::warn!(shard = %s.id, error = %e, "could not release a lease; it expires instead");
            }
        }
        if let Err(e) = self.coord.release_held().await {
            tracing::warn!(error = %e, "could not release the leases held but not read; they expire instead");
        }
        Ok(())
    }
}

pub(super) fn lock_progress_empty(gate: &RwLock<Batch>) -> bool {
    match gate.try_read() {
        Ok(b) => lock(&b.progress).is_empty(),
        Err(_) => false,
    }
}
