//! Expiry as this worker observes it: a lane is expired when its (beater,
//! beat) — its beat item's owner and beat — has not changed for the failover time on *this process's*
//! monotonic clock. Wall clocks of other hosts are never compared; a worker
//! that just started must watch a lane for the whole failover time before
//! it may call it expired.

use crate::items::Lane;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct Observer {
    failover: Duration,
    seen: HashMap<u32, (Option<String>, u64, Instant)>,
}

impl Observer {
    pub fn new(failover: Duration) -> Self {
        Observer { failover, seen: HashMap::new() }
    }

    /// Records what a pass read and returns the expired lanes. `mine` is
    /// this worker's own lane (never expired here); its other lanes (taken
    /// to recover a flush) and lanes of an older incarnation of `me`'s
    /// worker id (a previous process with the same id, `owner.rs`) are
    /// expired at once.
    pub fn observe(&mut self, lanes: &[Lane], now: Instant, me: &str, mine: Option<u32>) -> HashSet<u32> {
        let mut expired = HashSet::new();
        for lane in lanes {
            let key = (lane.beater.clone(), lane.beat);
            let since = match self.seen.get(&lane.lane) {
                Some((owner, beat, since)) if (owner, *beat) == (&key.0, key.1) => *since,
                _ => now,
            };
            self.seen.insert(lane.lane, (key.0, key.1, since));
            let Some(owner) = &lane.beater else { continue };
            let stale = now.saturating_duration_since(since) >= self.failover;
            // This process's own other lanes (taken to recover them) and an older
            // incarnation's are taken over at once.
            let predecessor = owner == me || crate::owner::supersedes(me, owner);
            if Some(lane.lane) != mine && (stale || predecessor) {
                expired.insert(lane.lane);
            }
        }
        expired
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lane(n: u32, owner: &str, beat: u64) -> Lane {
        Lane {
            seal: 0,
            layout: Default::default(),
            wrote_to_ms: 0,
            lane: n,
            owner: Some(owner.into()),
            beater: Some(owner.into()),
            stream: "st".into(),
            beat,
            flush: 0,
            intent: None,
        }
    }

    #[test]
    fn a_lane_expires_after_failover_without_a_beat_on_the_observers_clock() {
        let mut o = Observer::new(Duration::from_secs(10));
        let t0 = Instant::now();
        let s = Duration::from_secs;
        assert!(o.observe(&[lane(1, "a", 5)], t0, "me", None).is_empty(), "first sight starts the clock");
        assert!(o.observe(&[lane(1, "a", 5)], t0 + s(9), "me", None).is_empty());
        assert!(o.observe(&[lane(1, "a", 6)], t0 + s(11), "me", None).is_empty(), "a beat restarts it");
        assert!(o.observe(&[lane(1, "a", 6)], t0 + s(20), "me", None).is_empty());
        assert_eq!(o.observe(&[lane(1, "a", 6)], t0 + s(21), "me", None), HashSet::from([1]));
        assert!(o.observe(&[lane(1, "b", 6)], t0 + s(22), "me", None).is_empty(), "a new owner restarts it");
        let (me, before, after) = ("me~20.00000001", "me~10.00000001", "me~30.00000001");
        let mine = [lane(2, me, 1), lane(3, before, 9), lane(4, "me", 9), lane(5, after, 9), lane(6, me, 4)];
        assert_eq!(
            o.observe(&mine, t0 + s(23), me, Some(2)),
            HashSet::from([3, 4, 6]),
            "older incarnations' lanes and our own other lanes at once, never a newer one's"
        );
        assert!(o.observe(&[lane(2, me, 1)], t0 + s(99), me, Some(2)).is_empty(), "never our own");
    }
}
