//! A flush in progress, as steps that can each be run again: a flush that
//! meets an outage keeps its state and is driven again later from where it
//! stopped (nothing new is swapped in meanwhile).
//!
//! 1. `begin`: the intent on this worker's lane, proven against the leases
//!    (`Coordinator::begin`); shards whose lease was lost are dropped;
//! 2. dead letters of the kept shards, synced;
//! 3. the kept shards' partials merged — for the item sets due, with what
//!    waited for them (`cadence.rs`) — and written under (lane, k);
//! 4. `commit`, then `complete` (the shards' checkpoints, per item set).
//!
//! A recovery is the same with a dead worker's intent: its ranges are read
//! again from the source and written under that worker's (lane, k). So is
//! a catch-up (a shard taken with its item sets apart): the sets behind
//! are read again up to the furthest one's checkpoint, under this
//! worker's lane. Re-reading writes each set the records after its own
//! checkpoint (`reread_ranges`).

use super::cadence::Due;
use super::older::Writing;
use super::{lock, Batch, Pipeline, PipelineError};
use crate::aggregate::IdentityCollision;
use crate::aggregate::{Aggregator, Generation};
use crate::flush::{Merged, Writer};
use crate::source::StartAt;
use std::collections::{BTreeMap, HashSet};
use zigzag_lease::{Began, ItemSet, LeaseError, ShardRange};
use zigzag_model::Position;

/// What a job writes.
enum Content {
    /// A swapped generation, for the item sets due.
    Read(Batch, Due),
    /// The ranges' records, read again from the source.
    Reread,
}

pub(super) struct FlushJob {
    /// (shard index, its range) for every shard with progress.
    pub ranges: Vec<(u32, ShardRange)>,
    content: Option<Content>,
    pub began: Option<Began>,
    merged: Option<Merged>,
    /// Why the batch could not be merged: it is gone, so every later
    /// attempt fails the same way.
    unmergeable: Option<IdentityCollision>,
    dead_letters_written: bool,
    written: bool,
    committed: bool,
    catch_up: bool,
    pub keys: usize,
    pub started: std::time::Instant,
}

impl FlushJob {
    pub fn new(batch: Batch, ranges: Vec<(u32, ShardRange)>, due: Due) -> Self {
        let keys = batch.gen.len();
        Self::with(Content::Read(batch, due), ranges, keys)
    }

    /// A catch-up: `ranges` read again from the source.
    pub fn reread(ranges: Vec<(u32, ShardRange)>) -> Self {
        Self::with(Content::Reread, ranges, 0)
    }

    fn with(content: Content, ranges: Vec<(u32, ShardRange)>, keys: usize) -> Self {
        FlushJob {
            catch_up: matches!(content, Content::Reread),
            ranges,
            keys,
            content: Some(content),
            began: None,
            merged: None,
            unmergeable: None,
            dead_letters_written: false,
            written: false,
            committed: false,
            started: std::time::Instant::now(),
        }
    }

    /// A catch-up (its records read again from the source).
    pub fn is_catch_up(&self) -> bool {
        self.catch_up
    }

    /// Runs the remaining steps. On error the job keeps its state; calling
    /// again resumes.
    pub async fn drive(&mut self, p: &Pipeline) -> Result<(), PipelineError> {
        // A catch-up reads its records before it records an intent: one it
        // cannot fill is never opened. Its records' dead letters were
        // written when the sets ahead were flushed.
        if matches!(self.content, Some(Content::Reread)) && self.merged.is_none() && self.began.is_none() {
            let ranges: Vec<ShardRange> = self.ranges.iter().map(|(_, r)| r.clone()).collect();
            self.merged = Some(p.reread_ranges(p.writing(), &ranges, false).await?);
        }
        if self.began.is_none() {
            let ranges = self.ranges.iter().map(|(_, r)| r.clone()).collect();
            if let Some(newest) = p.aggregator.newest_event_ms() {
                p.coord.read_events_to(newest.saturating_add(1));
            }
            self.began = Some(p.coord.begin(ranges, &p.layout).await?);
        }
        let began = self.began.clone().expect("begun above");
        let kept: HashSet<&str> = began.ranges.iter().map(|r| r.shard.as_str()).collect();
        let keep: HashSet<u32> =
            self.ranges.iter().filter(|(_, r)| kept.contains(r.shard.as_str())).map(|(i, _)| *i).collect();
        let dropped: HashSet<u32> =
            self.ranges.iter().filter(|(_, r)| !kept.contains(r.shard.as_str())).map(|(i, _)| *i).collect();
        match self.content.take() {
            Some(Content::Read(batch, due)) => {
                if !self.dead_letters_written {
                    p.write_dead_letters(&batch, |i| keep.contains(&i).then(|| self.shard_id(i)).flatten())?;
                    self.dead_letters_written = true;
                }
                let merged = lock(&p.cadences).merge(
                    &p.flusher,
                    batch.gen,
                    &due,
                    |i| keep.contains(&i),
                    |i| dropped.contains(&i),
                );
                match merged {
                    Ok(merged) => self.merged = Some(merged),
                    Err(e) => self.unmergeable = Some(e),
                }
            }
            Some(Content::Reread) if kept.is_empty() => {
                // Its one shard's lease moved on: nothing to write.
                self.merged = Some(Merged::default());
            }
            _ => {}
        }
        if let Some(e) = &self.unmergeable {
            return Err(e.clone().into());
        }
        if !self.written {
            let merged = self.merged.as_ref().expect("merged above");
            p.flusher.write(merged, Writer { lane: began.lane, k: began.k }).await?;
            self.written = true;
            self.merged = None;
        }
        if !self.committed {
            p.coord.commit(&began).await?;
            self.committed = true;
        }
        p.coord.complete(&began.ranges).await?;
        Ok(())
    }

    fn shard_id(&self, index: u32) -> Option<&str> {
        self.ranges.iter().find(|(i, _)| *i == index).map(|(_, r)| r.shard.as_str())
    }
}

impl Pipeline {
    /// Finishes a dead worker's flush: reads its ranges again, writes them
    /// under its lane and number, commits, completes, frees the lane. A
    /// flush begun under an older layout version of the table (its worker
    /// died before adopting the newest) is finished under that version's
    /// layout (`older.rs`); under any other layout it is refused.
    pub(super) async fn recover(&self, lane: u32) -> Result<bool, PipelineError> {
        let older = match self.coord.seen_intent(lane) {
            Some(i) if i.layout != self.layout => Some(self.older_writer(lane, &i).await?),
            _ => None,
        };
        let (layout, w) = match &older {
            Some(o) => (o.digest.as_str(), o.writing()),
            None => (self.layout.as_str(), self.writing()),
        };
        let r = match self.coord.take_for_recovery(lane, layout).await {
            Ok(Some(r)) => r,
            Ok(None) => return Ok(false),
            Err(LeaseError::OtherLayout { lane, k }) => return Err(PipelineError::LayoutChanged { lane, flush: k }),
            Err(e) => return Err(e.into()),
        };
        if r.layout != layout {
            return Err(PipelineError::LayoutChanged { lane, flush: r.k });
        }
        let merged = self.reread_ranges(w, &r.ranges, true).await?;
        let written = w.flusher.write(&merged, Writer { lane: r.lane, k: r.k }).await;
        if let Some(o) = &older {
            self.flusher.stats.absorb(&o.writing().flusher.stats);
        }
        written?;
        self.coord.finish_recovery(&r).await?;
        tracing::info!(lane, k = r.k, shards = r.ranges.len(), items = merged.len(), "recovered a dead worker's flush");
        Ok(true)
    }

    /// The partials of `ranges` read again (`w`: under which layout): each
    /// item set the records after its own `from` (sets at one position are
    /// read together). `dead_letters`: write the bad records' dead letters
    /// (once, from the widest read).
    pub(super) async fn reread_ranges(
        &self,
        w: Writing<'_>,
        ranges: &[ShardRange],
        dead_letters: bool,
    ) -> Result<Merged, PipelineError> {
        let mut merged = Merged::default();
        let rejected = Batch::default();
        let all = w.flusher.item_sets().len() as ItemSet;
        for (index, r) in ranges.iter().enumerate() {
            let sets = r.sets.clone().unwrap_or_else(|| (0..all).collect());
            let mut cohorts: BTreeMap<Option<Position>, Vec<ItemSet>> = BTreeMap::new();
            for s in sets {
                cohorts.entry(r.from.get(s)).or_default().push(s);
            }
            // Earliest first: it reads every record the others do.
            for (n, (from, sets)) in cohorts.into_iter().enumerate() {
                let gen = Generation::default();
                let scratch = Batch::default();
                let into = if n == 0 { &rejected } else { &scratch };
                self.reread(w.aggregator, &gen, into, index as u32, from, r).await?;
                let shapes = w.flusher.shapes(Some(&sets));
                merged.absorb(w.flusher.measures(), w.flusher.merge_shapes(gen, &shapes, |_| true)?)?;
            }
        }
        if dead_letters {
            // Records up to the furthest set's checkpoint were dead-lettered
            // by the flushes that moved it.
            lock(&rejected.rejected)
                .retain(|(i, x)| ranges.get(*i as usize).is_some_and(|r| Some(x.pos) > r.from.furthest()));
            self.write_dead_letters(&rejected, |i| ranges.get(i as usize).map(|r| r.shard.as_str()))?;
        }
        Ok(merged)
    }

    /// Aggregates exactly the records `(from, to]` of one shard.
    async fn reread(
        &self,
        aggregator: &Aggregator,
        gen: &Generation,
        batch: &Batch,
        index: u32,
        from: Option<Position>,
        r: &ShardRange,
    ) -> Result<(), PipelineError> {
        if from == Some(r.to) || r.to == Position::default() {
            return Ok(());
        }
        // A first range re-reads from the oldest record and skips to the
        // first one it held (its start may have been LATEST or a time).
        let start = match (from, r.first) {
            (Some(from), _) => StartAt::After(from),
            (None, Some(_)) => StartAt::TrimHorizon,
            (None, None) => StartAt::Configured,
        };
        let mut reader = self.source.open_reread(&r.shard, start).await?;
        let mut reached: Option<Position> = None;
        let mut idle = 0;
        while reached < Some(r.to) {
            let mut b = reader.next_batch(self.opts.batch_size).await?;
            if b.records.is_empty() {
                // Empty pages while behind the tip are normal (Kinesis):
                // only count those at the tip.
                if b.millis_behind.is_none_or(|ms| ms == 0) {
                    idle += 1;
                }
                if b.end_of_shard || idle > 50 {
                    break;
                }
                continue;
            }
            b.truncate_after(r.to);
            if let Some(first) = r.first {
                b.drop_before(first);
            }
            let mut rejected = Vec::new();
            // Under the seal the range was first read under: the same
            // events are refused (I2).
            aggregator.add_batch_under(gen, index, &b, r.seal, &mut rejected)?;
            lock(&batch.rejected).extend(rejected.into_iter().map(|x| (index, x)));
            reached = b.last_position().or(reached);
            if b.end_of_shard {
                break;
            }
        }
        if reached != Some(r.to) {
            return Err(PipelineError::MissingRecords {
                shard: r.shard.clone(),
                end: Box::new(r.to),
                reached: reached.map(Box::new),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {}
