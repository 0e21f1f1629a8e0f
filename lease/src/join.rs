//! Joining: taking a lane of the lease table (a writer slot of the
//! aggregate table), however many workers start at once.

use crate::coordinator::{lock, Coordinator, MyLane};
use crate::items::{self, Beat, Lane};
use crate::LeaseError;
use std::time::Duration;
use zigzag_core::table::UpdateOutcome;

impl Coordinator {
    /// Takes a lane: a free one, else a new one. Many workers start at
    /// once (a deployment of 100): each tries a few candidates in an order
    /// of its own (free lanes, then new lane numbers past the highest, in a
    /// window that grows while rounds meet contention), so most take a lane
    /// in an early round instead of all racing for the same next one;
    /// between rounds it waits a jittered while. `Contended` after
    /// [`JOIN_ROUNDS`] is retryable (the caller waits and joins again).
    pub async fn join(&self) -> Result<u32, LeaseError> {
        let me = self.worker().to_string();
        for round in 0..JOIN_ROUNDS {
            let lanes = self.read_lanes().await?;
            self.superseded(&lanes)?;
            for n in join_candidates(&lanes, &me, round) {
                // Marked first, so a pass that sees the lane owned by us
                // before `join` returns does not take it for a predecessor's.
                lock(&self.state).joining = Some(n);
                let taken = self.take_free_lane(n, &me).await;
                let (taken, beat) = match taken {
                    Ok(Some(taken)) => taken,
                    Ok(None) => continue,
                    Err(e) => {
                        lock(&self.state).joining = None;
                        return Err(e);
                    }
                };
                let mut st = lock(&self.state);
                st.joining = None;
                if taken.in_flight().is_some() {
                    // Freed with an intent in flight after all: keep it owned
                    // (not as our lane); our passes recover it like a
                    // predecessor's.
                    drop(st);
                    tracing::warn!(lane = n, "a free lane held an intent in flight: recovering it");
                    continue;
                }
                st.joins += 1;
                st.lost = None;
                st.lane = Some(MyLane {
                    lane: n,
                    beat,
                    flush: taken.flush,
                    joined: st.joins,
                    renewed: std::time::Instant::now(),
                });
                drop(st);
                tracing::info!(lane = n, worker = %me, "joined");
                return Ok(n);
            }
            lock(&self.state).joining = None;
            // Everyone else took the candidates: wait a little (jittered, so
            // the next round's reads and takes spread out), then read again.
            let most = Duration::from_millis(20).saturating_mul(1 << round.min(5));
            tokio::time::sleep(most.mul_f64(rand::random::<f64>())).await;
        }
        metrics::counter!("zigzag_lease_join_contended_total").increment(1);
        Err(LeaseError::Contended(format!("no lane could be taken in {JOIN_ROUNDS} rounds")))
    }

    /// Claims lane `n`'s beat item, then takes its lane item (`beats.rs`
    /// gives the order): the lane as taken and its beat, or None if another
    /// worker holds either (a beat claimed without its lane is freed again).
    async fn take_free_lane(&self, n: u32, me: &str) -> Result<Option<(Lane, u64)>, LeaseError> {
        let beat = match self.update(&items::claim_beat(n, None, me)).await? {
            UpdateOutcome::Applied(item) => Beat::from_item(&item)?.beat,
            UpdateOutcome::ConditionFailed(Some(item)) => {
                // A retry of a claim that applied but timed out.
                let b = Beat::from_item(&item)?;
                if b.owner.as_deref() != Some(me) {
                    return Ok(None);
                }
                b.beat
            }
            UpdateOutcome::ConditionFailed(None) => return Ok(None),
        };
        match self.update(&self.layout_ack().stamp(items::take_lane(n, None, me, self.stream()))).await? {
            UpdateOutcome::Applied(item) => Ok(Some((Lane::from_item(&item)?, beat))),
            UpdateOutcome::ConditionFailed(Some(item)) if Lane::from_item(&item)?.owner.as_deref() == Some(me) => {
                Ok(Some((Lane::from_item(&item)?, beat)))
            }
            UpdateOutcome::ConditionFailed(_) => {
                // Not free after all (only a crash between another worker's
                // two writes leaves a lane item owned under a free beat):
                // give the beat back; expiry settles the lane.
                self.update(&items::release_beat(n, me)).await?;
                Ok(None)
            }
        }
    }
}

/// Rounds of reading the lanes and trying candidates before `join` gives
/// up (retryably).
pub const JOIN_ROUNDS: u32 = 16;
/// Candidates a joiner tries per round.
const JOIN_TRIES: usize = 3;

/// The lanes a joiner tries this round, in its own order: free lanes (no
/// owner, nothing in flight) first, then new lane numbers past the highest,
/// in a window that doubles every round it meets contention (100 workers
/// starting at once all join within 5 rounds) and is at least half the
/// lanes there are.
fn join_candidates(lanes: &[Lane], me: &str, round: u32) -> Vec<u32> {
    let order = |lane: &u32| xxhash_rust::xxh3::xxh3_64(format!("{me}/{round}/{lane}").as_bytes());
    let mut free: Vec<u32> =
        lanes.iter().filter(|l| l.owner.is_none() && l.in_flight().is_none()).map(|l| l.lane).collect();
    free.sort_by_key(order);
    let next = lanes.iter().map(|l| l.lane + 1).max().unwrap_or(0);
    let window = (lanes.len() as u32 / 2).max(4 << round.min(6)).min(256);
    let mut new: Vec<u32> = (next..next.saturating_add(window)).collect();
    new.sort_by_key(order);
    free.into_iter().chain(new).take(JOIN_TRIES).collect()
}
