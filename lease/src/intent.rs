//! A flush's intent on this worker's lane: open, prove the leases, validate
//! ([`Coordinator::begin`]); commit once its items are written; complete the
//! checkpoints. docs/design/exactly-once.md ("A flush") gives the steps and why each is
//! safe to repeat.

use crate::coordinator::Coordinator;
use crate::items::{self, IntentState, Lane, ShardLease, ShardRange};
use crate::LeaseError;
use std::sync::atomic::Ordering;
use zigzag_core::table::UpdateOutcome;

/// A flush recorded and proven: write its items under `mark(lane)` = `k`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Began {
    pub lane: u32,
    pub k: u64,
    /// The ranges whose leases are held (the others were dropped).
    pub ranges: Vec<ShardRange>,
}

impl Coordinator {
    /// Moves one committed range's checkpoint; the lease as it now is, if
    /// this call moved it.
    pub(crate) async fn complete_one(&self, r: &ShardRange) -> Result<Option<ShardLease>, LeaseError> {
        self.complete_one_in(&self.options().stream, r).await
    }

    pub(crate) async fn complete_one_in(&self, stream: &str, r: &ShardRange) -> Result<Option<ShardLease>, LeaseError> {
        let wall_ms =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
        let completed = r.completed();
        let req = items::advance_checkpoint(stream, &r.shard, &r.from, &completed, r.finishes());
        let req = items::with_owed(req, &completed, r.owed.as_ref());
        let req = items::with_sets_layout(req, &completed, &r.layout);
        let req = items::with_seal(items::with_lag(req, r.behind_ms, wall_ms), r.seal);
        // A finished shard lets its children be read: other workers must see it.
        match self.write_lease(&req, r.finishes()).await? {
            UpdateOutcome::Applied(item) => Ok(Some(ShardLease::from_item(&item)?)),
            UpdateOutcome::ConditionFailed(_) => Ok(None), // completed already
        }
    }

    /// Completes the checkpoints of a committed flush (after [`Self::commit`]).
    pub async fn complete(&self, ranges: &[ShardRange]) -> Result<(), LeaseError> {
        let stream = self.options().stream.clone();
        self.complete_in(&stream, ranges).await
    }

    /// The same for a committed flush of `stream` (a dead worker's lane may
    /// have read another stream than ours).
    pub(crate) async fn complete_in(&self, stream: &str, ranges: &[ShardRange]) -> Result<(), LeaseError> {
        for r in ranges {
            self.complete_one_in(stream, r).await?;
        }
        Ok(())
    }

    /// Records the next flush of this worker's lane over `ranges`, then
    /// proves each range's lease is still held (a strongly consistent read
    /// after the write) and keeps only those. Items may be written after
    /// this returns.
    pub async fn begin(&self, ranges: Vec<ShardRange>, layout: &str) -> Result<Began, LeaseError> {
        let my = self.my_lane()?;
        let k = my.flush + 1;
        let me = self.worker().to_string();
        let open = items::open_intent_to(my.lane, &me, k, &ranges, layout, self.events_read_to());
        if let UpdateOutcome::ConditionFailed(old) = self.update(&open).await? {
            // A retry (this call again after an outage, or a write that
            // applied but timed out) finds its own intent: go on from there.
            let lane = old.as_ref().map(Lane::from_item).transpose()?;
            let intent = lane.as_ref().filter(|l| l.owner.as_deref() == Some(&me)).and_then(|l| l.in_flight());
            match intent {
                Some(i) if i.k == k && i.state == IntentState::Open && i.ranges == ranges => {}
                Some(i) if i.k == k && i.state == IntentState::Valid => {
                    return Ok(Began { lane: my.lane, k, ranges: i.ranges.clone() })
                }
                _ => return Err(self.lost_lane(my.lane)),
            }
        }
        // Proof of the leases, read strictly after the intent was recorded
        // (strongly consistent; only those it covers when that is cheaper): a
        // worker that takes one of these shards later finds the intent and
        // waits for it; one that took it before is seen here.
        let covered: Vec<&str> = ranges.iter().map(|r| r.shard.as_str()).collect();
        let leases = self.read_some_leases(&covered).await?;
        let held = |r: &ShardRange| {
            leases.iter().any(|l| {
                l.shard == r.shard && l.lease == r.lease && l.owner.as_deref() == Some(&me) && l.checkpoint == r.from
            })
        };
        let (kept, dropped): (Vec<ShardRange>, Vec<ShardRange>) = ranges.into_iter().partition(held);
        for r in &dropped {
            tracing::warn!(shard = %r.shard, "lease lost before the flush: its records are left to the new owner");
            self.stats.lost.fetch_add(1, Ordering::Relaxed);
            metrics::counter!("zigzag_lease_lost_total").increment(1);
        }
        let validate = items::validate_intent(my.lane, &me, k, &kept);
        if let UpdateOutcome::ConditionFailed(old) = self.update(&validate).await? {
            let applied = old.as_ref().map(Lane::from_item).transpose()?.is_some_and(|l| {
                l.owner.as_deref() == Some(&me)
                    && l.intent.as_ref().is_some_and(|i| i.k == k && i.state == IntentState::Valid && i.ranges == kept)
            });
            if !applied {
                return Err(self.lost_lane(my.lane));
            }
        }
        Ok(Began { lane: my.lane, k, ranges: kept })
    }

    /// Commits a flush of this worker's lane (its items are all written).
    pub async fn commit(&self, began: &Began) -> Result<(), LeaseError> {
        let me = self.worker().to_string();
        self.commit_lane(began.lane, began.k, &me).await?;
        self.committed(began.lane, began.k);
        Ok(())
    }

    pub(crate) async fn commit_lane(&self, lane: u32, k: u64, me: &str) -> Result<(), LeaseError> {
        if let UpdateOutcome::ConditionFailed(old) = self.update(&items::commit_intent(lane, me, k)).await? {
            let applied = old.as_ref().map(Lane::from_item).transpose()?.is_some_and(|l| {
                l.owner.as_deref() == Some(me)
                    && l.flush == k
                    && l.intent.as_ref().is_some_and(|i| i.k == k && i.state == IntentState::Done)
            });
            if !applied {
                return Err(self.lost_lane(lane));
            }
        }
        Ok(())
    }
}
