//! Taking over dead workers' lanes: freeing one with nothing in flight
//! (its last committed ranges completed first), and recovering one with a
//! flush in flight (aborting an open intent; handing a valid one to the
//! pipeline to re-apply, then committing it and freeing the lane). The
//! lanes being recovered are beaten with the worker's own.

use crate::coordinator::{lock, Coordinator, Recovery};
use crate::items::{self, Beat, IntentState, Lane};
use crate::LeaseError;
use std::sync::atomic::Ordering;
use zigzag_core::table::UpdateOutcome;

impl Coordinator {
    /// Takes a dead worker's lane that has nothing in flight, completes its
    /// last committed ranges, and frees it for reuse.
    pub(crate) async fn free_dead_lane(&self, lane: u32, owner: &str, beat: u64) -> Result<(), LeaseError> {
        let me = self.worker().to_string();
        let Some((taken, _)) = self.take_dead_lane(lane, owner, beat).await? else {
            return Ok(()); // it beat again, someone else took it, or it was free
        };
        match &taken.intent {
            // Its owner opened an intent after the pass read the lane: the
            // lane is ours now; a valid intent is recovered by our next pass
            // (a lane we own that is not ours expires at once), an open one
            // wrote nothing and is aborted.
            Some(i) if i.state == IntentState::Valid => {
                tracing::info!(lane, k = i.k, dead = %owner, "a dead worker's lane has a flush in flight: recovering it");
                return Ok(());
            }
            Some(i) if i.state == IntentState::Open => {
                self.update(&items::abort_intent(lane, &me, i.k)).await?;
            }
            // Its last committed ranges are completed before the lane is
            // freed, whatever the stream: a freed lane's ranges are cleared
            // and its next owner may be of another stream.
            Some(i) => self.complete_in(&taken.stream, &i.ranges).await?,
            None => {}
        }
        self.release(lane, &me).await?;
        self.stats.lanes_freed.fetch_add(1, Ordering::Relaxed);
        tracing::info!(lane, dead = %owner, "freed a dead worker's lane");
        Ok(())
    }

    /// Takes over an expired lane with an intent in flight (from the last
    /// pass's view). An open intent wrote nothing: it is aborted and the
    /// lane freed (None). A valid one is returned for re-application.
    pub async fn take_for_recovery(&self, lane: u32, layout: &str) -> Result<Option<Recovery>, LeaseError> {
        let seen = lock(&self.state).lanes.iter().find(|l| l.lane == lane).cloned();
        let Some(Lane { beater: Some(owner), beat, intent, .. }) = seen else { return Ok(None) };
        // Checked before the take: a worker that cannot recover the flush
        // leaves the lane to one that can.
        if let Some(i) = intent.filter(|i| i.state == IntentState::Valid && i.layout != layout) {
            return Err(LeaseError::OtherLayout { lane, k: i.k });
        }
        let me = self.worker().to_string();
        let Some((taken, beat)) = self.take_dead_lane(lane, &owner, beat).await? else { return Ok(None) };
        self.stats.lanes_recovered.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("zigzag_lease_lanes_recovered_total").increment(1);
        match taken.intent {
            Some(i) if i.state == IntentState::Valid => {
                lock(&self.state).recovering.push((lane, beat));
                tracing::info!(lane, k = i.k, shards = i.ranges.len(), dead = %owner, "recovering a dead worker's flush");
                Ok(Some(Recovery { lane, k: i.k, ranges: i.ranges, layout: i.layout }))
            }
            Some(i) if i.state == IntentState::Open => {
                self.update(&items::abort_intent(lane, &me, i.k)).await?;
                self.release(lane, &me).await?;
                tracing::info!(lane, k = i.k, dead = %owner, "aborted a dead worker's unproven flush");
                Ok(None)
            }
            Some(i) => {
                self.complete(&i.ranges).await?;
                self.release(lane, &me).await?;
                Ok(None)
            }
            None => {
                self.release(lane, &me).await?;
                Ok(None)
            }
        }
    }

    /// Commits a recovered flush (its items re-applied), completes its
    /// checkpoints and frees the lane.
    pub async fn finish_recovery(&self, r: &Recovery) -> Result<(), LeaseError> {
        let me = self.worker().to_string();
        let done = async {
            self.commit_lane(r.lane, r.k, &me).await?;
            self.complete(&r.ranges).await?;
            self.release(r.lane, &me).await?;
            Ok(())
        }
        .await;
        if done.is_ok() || matches!(done, Err(LeaseError::LaneLost { .. })) {
            self.abandon_recovery(r.lane);
        }
        done
    }

    /// An operator's last resort (`ingest abandon-flush`): a dead worker's
    /// proven flush whose records the stream no longer holds is committed
    /// as it stands, without re-applying it: its items written before the
    /// worker died keep their share, the rest of its records are lost, and
    /// its shards' checkpoints move past them so the shards are read again.
    /// The lane must be expired in the last pass's view (watched for the
    /// failover time). Returns the abandoned flush (its ranges say what was
    /// lost), or None if the lane had no proven flush.
    pub async fn abandon_flush(&self, lane: u32) -> Result<Option<Recovery>, LeaseError> {
        let layout = lock(&self.state).lanes.iter().find(|l| l.lane == lane).and_then(|l| l.intent.clone());
        let Some(layout) = layout.map(|i| i.layout) else { return Ok(None) };
        let Some(r) = self.take_for_recovery(lane, &layout).await? else { return Ok(None) };
        self.finish_recovery(&r).await?;
        metrics::counter!("zigzag_lease_flushes_abandoned_total").increment(1);
        tracing::warn!(
            lane,
            k = r.k,
            shards = r.ranges.len(),
            "abandoned a dead worker's flush: its unwritten records are lost"
        );
        Ok(Some(r))
    }

    /// Takes a dead worker's lane: claims its beat item from the (beater,
    /// beat) a pass saw stop, then its lane item from whoever owns it
    /// (`beats.rs`: only the beat's holder may). The lane item as taken
    /// and the beat now, or None if the beat moved or another worker
    /// claimed it first, or if the lane item turned out free (its owner
    /// died between freeing the lane and its beat: the beat is freed here).
    pub(crate) async fn take_dead_lane(
        &self,
        lane: u32,
        beater: &str,
        beat: u64,
    ) -> Result<Option<(Lane, u64)>, LeaseError> {
        let me = self.worker().to_string();
        let now = match self.update(&items::claim_beat(lane, Some((beater, beat)), &me)).await? {
            UpdateOutcome::Applied(item) => Beat::from_item(&item)?.beat,
            UpdateOutcome::ConditionFailed(Some(item)) => {
                // A retry of a claim that applied but timed out.
                let b = Beat::from_item(&item)?;
                if b.owner.as_deref() != Some(&me) || b.beat != beat + 1 {
                    return Ok(None);
                }
                b.beat
            }
            UpdateOutcome::ConditionFailed(None) => return Ok(None),
        };
        // Its owner as last seen, then as the failed guard shows it: a lane
        // item changes owner only under its beat's holder, which is us now.
        let mut from = lock(&self.state).lanes.iter().find(|l| l.lane == lane).and_then(|l| l.owner.clone());
        for _ in 0..3 {
            let Some(owner) = from.clone() else { break };
            match self.update(&items::take_lane(lane, Some(&owner), &me, "")).await? {
                UpdateOutcome::Applied(item) => return Ok(Some((Lane::from_item(&item)?, now))),
                UpdateOutcome::ConditionFailed(Some(item)) => {
                    let l = Lane::from_item(&item)?;
                    if l.owner.as_deref() == Some(&me) {
                        return Ok(Some((l, now))); // a retry that applied
                    }
                    from = l.owner;
                }
                UpdateOutcome::ConditionFailed(None) => from = None,
            }
        }
        if from.is_none() {
            self.update(&items::release_beat(lane, &me)).await?;
            return Ok(None);
        }
        Err(LeaseError::Contended(format!("lane {lane} changed owners while its beat was held")))
    }

    /// Frees a lane: its lane item, then its beat item (`beats.rs`).
    pub(crate) async fn release(&self, lane: u32, me: &str) -> Result<(), LeaseError> {
        self.update(&items::release_lane(lane, me)).await?;
        self.update(&items::release_beat(lane, me)).await?;
        Ok(())
    }

    /// Stops beating a lane this worker was recovering (finished, failed,
    /// or taken by another worker; whoever holds it next finishes it).
    pub fn abandon_recovery(&self, lane: u32) {
        lock(&self.state).recovering.retain(|(l, _)| *l != lane);
    }
}
