//! One lease pass over the table: read a [`View`], decide ([`plan`]), and
//! take / steal / free / complete.
//!
//! What a pass reads, and why it is cheap at 1,000 shards and 100 workers:
//! - the leases, eventually consistent: every decision on them is a
//!   conditional write on the lease counter or checkpoint seen, so a stale
//!   read costs a failed write, never a wrong one; a shard newly held is
//!   read again strongly before it is read from the stream;
//! - the beat items, strongly consistent (a few bytes a lane): expiry and
//!   who is alive;
//! - the lane items (intents and their ranges, up to ~180 KB each) only
//!   when a decision needs them: before a shard newly held is read (an
//!   intent its previous owner proved is then visible and blocks it), when
//!   a lane expired or changed hands, while a held shard is blocked or a
//!   checkpoint waits to be completed, and every [`LANES_EVERY`] passes.
//!   Otherwise the last lane items read stand, with fresh beats: a shard
//!   held since then cannot be covered by a later intent of another lane
//!   (that intent's proof finds the lease held by this worker and drops it).

use crate::balance::{plan, Plan, View};
use crate::coordinator::{lock, replace, with_beats, Coordinator, LanesRead};
use crate::items::{self, ShardLease};
use crate::{LeaseError, ShardInfo};
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::Instant;
use zigzag_core::table::UpdateOutcome;

/// Passes between reads of the lane items when nothing asks for one.
pub const LANES_EVERY: u64 = 10;

impl Coordinator {
    /// Reads the table into a [`View`], creating leases for listed shards
    /// that have none. Leases are read before beats: an owner seen on a
    /// lease claimed its lane's beat before it, so the beats read after
    /// show it alive.
    pub async fn view(&self, listed: Option<&[ShardInfo]>) -> Result<View, LeaseError> {
        let mut leases = self.read_leases_with(false).await?;
        if let Some(listed) = listed {
            let known: HashSet<&str> = leases.iter().map(|l| l.shard.as_str()).collect();
            let missing: Vec<&ShardInfo> = listed.iter().filter(|s| !known.contains(s.id.as_str())).collect();
            for s in &missing {
                if let UpdateOutcome::Applied(item) =
                    self.update(&items::create_lease(self.stream(), &s.id, &s.parents)).await?
                {
                    let lease = ShardLease::from_item(&item)?;
                    match leases.iter_mut().find(|l| l.shard == lease.shard) {
                        Some(l) => *l = lease,
                        None => leases.push(lease),
                    }
                }
            }
        }
        let beats = self.read_beats().await?;
        let (cached, pass, want) = {
            let mut st = lock(&self.state);
            st.passes += 1;
            (st.lanes.clone(), st.passes, st.want_lanes)
        };
        let overlaid = with_beats(cached.clone(), &beats);
        // Lane items are read again when: none were read, the periodic read
        // is due, the last pass asked, a lane changed hands or is new, or a
        // lane expired (to free or recover it).
        let since = lock(&self.state).lanes_read.as_ref().map(|r| r.pass);
        let changed = overlaid.len() != cached.len()
            || overlaid.iter().zip(&cached).any(|(now, was)| now.lane != was.lane || now.beater != was.beater);
        let expired_now = {
            let mut st = lock(&self.state);
            let mine = st.lane.map(|l| l.lane);
            let mut expired = st.observer.observe(&overlaid, Instant::now(), self.worker(), mine);
            if let Some(n) = st.joining {
                expired.remove(&n);
            }
            !expired.is_empty()
        };
        let stale = since.is_none_or(|p| pass - p >= LANES_EVERY);
        let lanes = if stale || want || changed || expired_now {
            let lanes = self.read_lanes().await?;
            let held = leases.iter().filter(|l| l.owner.as_deref() == Some(self.worker())).map(|l| l.shard.clone());
            lock(&self.state).lanes_read = Some(LanesRead { pass, held: held.collect() });
            lanes
        } else {
            overlaid
        };
        let mut st = lock(&self.state);
        let mine = st.lane.map(|l| l.lane);
        let mut expired = st.observer.observe(&lanes, Instant::now(), self.worker(), mine);
        if let Some(n) = st.joining {
            expired.remove(&n);
        }
        self.superseded(lanes.iter().filter(|l| !expired.contains(&l.lane)))?;
        st.lanes = lanes.clone();
        if let Some(l) = listed {
            st.listed = Some(l.iter().map(|s| s.id.clone()).collect());
        }
        Ok(View { stream: self.stream().to_string(), leases, listed: st.listed.clone(), lanes, expired, my_lane: mine })
    }

    /// One lease pass: read, decide, take / steal / free / complete, and
    /// return the plan as it stands after those writes.
    pub async fn pass(&self, listed: Option<&[ShardInfo]>) -> Result<Plan, LeaseError> {
        let mut view = self.view(listed).await?;
        let me = self.worker().to_string();
        let first = plan(&view, &me);
        for (lane, owner, beat) in &first.free {
            self.free_dead_lane(*lane, owner, *beat).await?;
        }
        for r in &first.complete {
            if let Some(lease) = self.complete_one(r).await? {
                replace(&mut view.leases, lease);
            }
        }
        let mut taken = HashSet::new();
        for (shard, seen) in &first.take {
            let expired = view.leases.iter().any(|l| &l.shard == shard && l.owner.is_some());
            match self.update(&items::take_lease(self.stream(), shard, *seen, &me)).await? {
                UpdateOutcome::Applied(item) => {
                    self.stats.taken.fetch_add(1, Ordering::Relaxed);
                    metrics::counter!("zigzag_lease_taken_total", "from" => if expired { "expired" } else { "unowned" })
                        .increment(1);
                    if expired {
                        self.stats.taken_expired.fetch_add(1, Ordering::Relaxed);
                    }
                    tracing::info!(shard = %shard, expired, "lease taken");
                    replace(&mut view.leases, ShardLease::from_item(&item)?);
                    taken.insert(shard.clone());
                }
                UpdateOutcome::ConditionFailed(_) => {} // someone else was faster
            }
        }
        self.settle_newly_held(&mut view, &taken).await?;
        if let Some((shard, seen, owner)) = &first.steal {
            if self.update(&items::request_handoff(self.stream(), shard, *seen, &me)).await?.applied() {
                self.stats.steals_requested.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("zigzag_lease_steals_requested_total").increment(1);
                tracing::info!(shard = %shard, from = %owner, "asked for a lease (balancing)");
            }
        }
        let after = plan(&view, &me);
        // Blocked held shards and pending completions are settled by the
        // lane items: read them next pass.
        lock(&self.state).want_lanes = !after.complete.is_empty() || after.ready.len() < after.held.len();
        metrics::gauge!("zigzag_leases_held").set(after.held.len() as f64);
        metrics::gauge!("zigzag_lease_target").set(after.target as f64);
        metrics::gauge!("zigzag_lease_live_workers").set(after.live_workers as f64);
        metrics::gauge!("zigzag_lease_shards_aged_out").set(after.aged_out as f64);
        metrics::gauge!("zigzag_lease_shards_over_capacity").set(after.over_capacity as f64);
        if after.over_capacity > 0 {
            tracing::warn!(
                shards = after.over_capacity,
                workers = after.live_workers,
                per_worker = crate::balance::MAX_SHARDS_PER_WORKER,
                "more shards than the live workers may hold: they wait; start more workers"
            );
        }
        Ok(Plan { take: first.take, steal: first.steal, free: first.free, complete: first.complete, ..after })
    }

    /// A shard held now that was not held when the lane items were last
    /// read (taken in this pass, handed over by another worker, or seen on a
    /// stale read before) may be read only on a lanes read made after it
    /// became ours: an intent its previous owner proved before is then
    /// visible and blocks it. Its lease is read again strongly too (one
    /// handed over was seen on an eventually consistent read), unless this
    /// pass's own take returned it.
    async fn settle_newly_held(&self, view: &mut View, taken: &HashSet<String>) -> Result<(), LeaseError> {
        let me = self.worker();
        let held: HashSet<String> = view
            .leases
            .iter()
            .filter(|l| l.owner.as_deref() == Some(me) && !l.finished)
            .map(|l| l.shard.clone())
            .collect();
        let before = lock(&self.state).lanes_read.as_ref().map(|r| r.held.clone()).unwrap_or_default();
        let new: Vec<&str> = held.iter().filter(|s| !before.contains(*s)).map(String::as_str).collect();
        if new.is_empty() {
            return Ok(());
        }
        let unread: Vec<&str> = new.iter().copied().filter(|s| !taken.contains(*s)).collect();
        if !unread.is_empty() {
            for lease in self.read_some_leases(&unread).await? {
                replace(&mut view.leases, lease);
            }
        }
        let lanes = self.read_lanes().await?;
        let mut st = lock(&self.state);
        let pass = st.passes;
        st.lanes = lanes.clone();
        st.lanes_read = Some(LanesRead { pass, held });
        view.lanes = lanes;
        Ok(())
    }
}
