//! One lease pass over the table: read a [`View`], decide ([`plan`]), and
//! take / steal / free / complete.
//!
//! What a pass reads, and why it is cheap at 1,000 shards and 100 workers:
//! - the stream's lease generation (one small item, moved on by every
//!   lease write other workers must see: owners, handoffs, new leases,
//!   finished shards), then the leases whole only when it moved, something
//!   is pending, who is alive changed, or every [`LEASES_EVERY`] passes;
//!   otherwise the last whole read with this worker's own writes since.
//!   Eventually consistent: every decision on a lease is a conditional
//!   write on the counter or checkpoint seen, so a stale read costs a
//!   failed write, never a wrong one; a shard newly held is read again
//!   strongly before it is read from the stream;
//! - the beat items, eventually consistent (a few bytes a lane): expiry
//!   and who is alive (a stale beat can only make a live lane look
//!   expired, and then the claim from the beat seen fails);
//! - the lane items (intents and their ranges, up to ~180 KB each) only
//!   when a decision needs them: before a shard newly held is read (an
//!   intent its previous owner proved is then visible and blocks it), when
//!   a lane expired or changed hands, while a held shard is blocked or a
//!   checkpoint waits to be completed, and every [`LANES_EVERY`] passes.
//!   Otherwise the last lane items read stand, with fresh beats: a shard
//!   held since then cannot be covered by a later intent of another lane
//!   (that intent's proof finds the lease held by this worker and drops it).

use crate::balance::{plan, Plan, View};
use crate::coordinator::{lock, replace, with_beats, Coordinator, LanesRead, LeaseCache};
use crate::items::{self, ShardLease};
use crate::{LeaseError, ShardInfo};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use zigzag_core::table::UpdateOutcome;

/// Passes between reads of the lane items when nothing asks for one.
pub const LANES_EVERY: u64 = 12;
/// Passes between whole reads of the leases when the generation stands
/// still and nothing is pending (12 x failover / 2: a minute at the default
/// failover of 10 s).
pub const LEASES_EVERY: u64 = 12;

impl Coordinator {
    /// Reads the table into a [`View`], creating leases for listed shards
    /// that have none.
    pub async fn view(&self, listed: Option<&[ShardInfo]>) -> Result<View, LeaseError> {
        let mut leases = self.pass_leases().await?;
        let beats = self.read_beats(false).await?;
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
            let mut expired = st.observer.observe(&overlaid, now(), self.worker(), mine);
            if let Some(n) = st.joining {
                expired.remove(&n);
            }
            !expired.is_empty()
        };
        if changed || expired_now {
            // Who is alive changed: the next pass reads the leases whole.
            lock(&self.state).want_leases = true;
        }
        let stale = since.is_none_or(|p| pass - p >= LANES_EVERY);
        let lanes = if stale || want || changed || expired_now {
            let lanes = self.read_lanes().await?;
            let held = leases.iter().filter(|l| l.owner.as_deref() == Some(self.worker())).map(|l| l.shard.clone());
            lock(&self.state).lanes_read = Some(LanesRead { pass, held: held.collect() });
            lanes
        } else {
            overlaid
        };
        let (mine, expired) = {
            let mut st = lock(&self.state);
            let mine = st.lane.map(|l| l.lane);
            let mut expired = st.observer.observe(&lanes, now(), self.worker(), mine);
            if let Some(n) = st.joining {
                expired.remove(&n);
            }
            (mine, expired)
        };
        self.superseded(lanes.iter().filter(|l| !expired.contains(&l.lane)))?;
        // Missing leases are created by one worker of the stream: the one on
        // the lowest live lane (the next one once it dies), not by all.
        let creator = mine.is_none_or(|m| {
            let live = lanes.iter().filter(|l| l.stream == self.stream() && l.beater.is_some());
            live.filter(|l| !expired.contains(&l.lane)).map(|l| l.lane).min().is_none_or(|low| low >= m)
        });
        if let Some(listed) = listed {
            let mut children: HashMap<String, Vec<String>> = HashMap::new();
            for s in listed {
                for p in &s.parents {
                    children.entry(p.clone()).or_default().push(s.id.clone());
                }
            }
            lock(&self.state).children = children;
            if creator {
                self.create_missing(listed, &mut leases).await?;
            }
        }
        let mut st = lock(&self.state);
        st.creator = creator;
        st.lanes = lanes.clone();
        if let Some(l) = listed {
            st.listed = Some(l.iter().map(|s| s.id.clone()).collect());
        }
        Ok(View {
            stream: self.stream().to_string(),
            leases,
            listed: st.listed.clone(),
            children: st.children.clone(),
            lanes,
            expired,
            my_lane: mine,
        })
    }

    /// Deletes finished leases nothing needs any more (the creator does, so
    /// one worker, not all), and tells the others once.
    async fn retire(&self, retire: &[(String, u64)]) -> Result<(), LeaseError> {
        if !lock(&self.state).creator || retire.is_empty() {
            return Ok(());
        }
        let mut retired = 0;
        for (shard, seen) in retire {
            if self.retire_lease(shard, *seen).await? {
                retired += 1;
                tracing::info!(shard = %shard, "retired a finished lease (its children all started)");
            }
        }
        metrics::counter!("zigzag_lease_retired_total").increment(retired);
        if retired > 0 {
            self.tell_others(self.stream()).await;
        }
        Ok(())
    }

    /// Creates the leases of listed shards that have none.
    async fn create_missing(&self, listed: &[ShardInfo], leases: &mut Vec<ShardLease>) -> Result<(), LeaseError> {
        let by_id: HashMap<&str, &ShardLease> = leases.iter().map(|l| (l.shard.as_str(), l)).collect();
        let children = lock(&self.state).children.clone();
        // A shard whose lease was retired (read to its end, its children
        // started) is never given a lease again: it would be read twice.
        let missing: Vec<&ShardInfo> = listed
            .iter()
            .filter(|s| !by_id.contains_key(s.id.as_str()) && !crate::balance::consumed(&s.id, &children, &by_id))
            .collect();
        let created = !missing.is_empty();
        for s in missing {
            if let UpdateOutcome::Applied(item) =
                self.write_lease(&items::create_lease(self.stream(), &s.id, &s.parents), false).await?
            {
                let lease = ShardLease::from_item(&item)?;
                match leases.iter_mut().find(|l| l.shard == lease.shard) {
                    Some(l) => *l = lease,
                    None => leases.push(lease),
                }
            }
        }
        if created {
            self.tell_others(self.stream()).await; // once for all of them
        }
        Ok(())
    }

    /// The leases for a pass: read whole (eventually consistent) when the
    /// generation moved since the last whole read, the last pass left work
    /// pending, none was read, or every [`LEASES_EVERY`] passes; else the
    /// last whole read with this worker's own writes since.
    async fn pass_leases(&self) -> Result<Vec<ShardLease>, LeaseError> {
        let generation = self.read_generation().await?;
        let (cached, want, pass) = {
            let st = lock(&self.state);
            (st.leases.clone(), st.want_leases, st.passes + 1)
        };
        match cached {
            Some(c) if !want && c.generation == generation && pass - c.pass < LEASES_EVERY => Ok(c.leases),
            _ => {
                let leases = self.read_leases_with(false).await?;
                lock(&self.state).leases = Some(LeaseCache { generation, pass, leases: leases.clone() });
                Ok(leases)
            }
        }
    }

    /// One lease pass: read, decide, take / steal / free / complete, and
    /// return the plan as it stands after those writes.
    pub async fn pass(&self, listed: Option<&[ShardInfo]>) -> Result<Plan, LeaseError> {
        // Half a unit a pass: how a worker learns of a seal (`seal.rs`).
        self.read_seal(false).await?;
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
        self.retire(&first.retire).await?;
        let mut taken = HashSet::new();
        for (shard, seen) in &first.take {
            let expired = view.leases.iter().any(|l| &l.shard == shard && l.owner.is_some());
            match self.write_lease(&items::take_lease(self.stream(), shard, *seen, &me), true).await? {
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
            if self.write_lease(&items::request_handoff(self.stream(), shard, *seen, &me), true).await?.applied() {
                self.stats.steals_requested.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("zigzag_lease_steals_requested_total").increment(1);
                tracing::info!(shard = %shard, from = %owner, "asked for a lease (balancing)");
            }
        }
        let after = plan(&view, &me);
        // Blocked held shards and pending completions are settled by the
        // lane items: read them next pass; and the leases, after anything
        // this pass asked for or changed.
        let pending = !after.complete.is_empty() || after.ready.len() < after.held.len();
        let acted =
            !first.take.is_empty() || first.steal.is_some() || !first.free.is_empty() || !after.handoffs.is_empty();
        let mut st = lock(&self.state);
        st.want_lanes = pending;
        st.want_leases = pending || acted;
        drop(st);
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

/// The observer's clock: tokio's, which is the monotonic clock except on a
/// paused runtime (the lease simulation runs hours of virtual time).
fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}
