//! Item sets flushed on cadences of their own (`flush.every_ms`): minute
//! series every flush, hour and day items of a large key set every few
//! minutes, so each item is written once per its cadence, not once per
//! flush.
//!
//! The sets with one cadence form a **class**. A flush writes the classes
//! that are due (and every faster one, so the slowest class's flush writes
//! everything and the checkpoints meet again); a class not due keeps the
//! flush's records in memory (`pending`: per shard, already as its sets'
//! items, so it holds a projection's keys, not every dimension's),
//! and the shards' checkpoints advance only for the sets written
//! (`zigzag_lease::Checkpoint`), so every set's items hold exactly the
//! records up to its own checkpoint, whatever happens to the process.
//!
//! A flush writes everything (**whole**) when a shard ends (its lease is
//! finished only when every set reached its end), when a shard is handed
//! over or the worker stops (nothing is left behind in memory), when a
//! shard has a set with nothing applied yet (its first flush: a restart
//! then never needs its first record again), and when the pending records
//! hold more than their share of memory. A worker that takes a shard whose
//! sets are apart first writes the sets that are behind from the stream
//! (`job.rs`, catch-up), then reads on from where the furthest set is.

use crate::aggregate::{Generation, IdentityCollision, MergedPartials, Shape};
use crate::flush::{Flusher, Merged};
use rustc_hash::FxHashMap;
use std::time::{Duration, Instant};
use zigzag_lease::ItemSet;
use zigzag_model::MeasureSet;

/// The sets of one cadence and the records they wait for.
struct Class {
    sets: Vec<ItemSet>,
    every: Duration,
    /// When its sets were last written.
    last: Instant,
    shapes: Vec<Shape>,
    /// Per shard, the records read since its sets' checkpoint (up to the
    /// last flush), as partials of its sets' items.
    pending: FxHashMap<u32, MergedPartials>,
}

/// Estimated bytes of one waiting partial: its key (32), the partial (~72),
/// the names' pointer (16) and the map's share.
const WAITING_BYTES: u64 = 160;

/// Which classes a flush writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Due {
    /// Every set.
    Whole,
    /// These classes (by index), the fastest always among them.
    Classes(Vec<usize>),
}

pub(super) struct Cadences {
    /// Fastest first.
    classes: Vec<Class>,
    /// Memory the pending records may hold before a flush writes them all.
    budget: u64,
    /// The flush cycle's tick: a class is due at the tick nearest its time.
    tick: Duration,
}

impl Cadences {
    pub fn new(flusher: &Flusher, interval: Duration, budget: u64) -> Cadences {
        let mut classes: Vec<Class> = Vec::new();
        for (i, set) in flusher.item_sets().iter().enumerate() {
            let every = Duration::from_millis(set.every_ms).max(interval);
            match classes.iter_mut().find(|c| c.every == every) {
                Some(c) => c.sets.push(i as ItemSet),
                None => classes.push(Class {
                    sets: vec![i as ItemSet],
                    every,
                    last: Instant::now(),
                    shapes: Vec::new(),
                    pending: FxHashMap::default(),
                }),
            }
        }
        classes.sort_by_key(|c| c.every);
        for c in &mut classes {
            c.shapes = flusher.shapes(Some(&c.sets));
        }
        Cadences { classes, budget, tick: interval }
    }

    /// The classes due now (None: none is); `whole` forces every one,
    /// `full` (the generation is full) at least the fastest.
    pub fn due(&self, now: Instant, whole: bool, full: bool) -> Option<Due> {
        if whole || self.pending_bytes() >= self.budget {
            return Some(Due::Whole);
        }
        // The slowest class due, and every faster one with it (so the
        // slowest one's flush writes every set: the checkpoints meet).
        let elapsed = |i: usize| now + self.tick / 2 >= self.classes[i].last + self.classes[i].every;
        let slowest = (0..self.classes.len()).rev().find(|&i| elapsed(i)).or(full.then_some(0));
        match slowest {
            Some(i) if i + 1 >= self.classes.len() => Some(Due::Whole),
            Some(i) => Some(Due::Classes((0..=i).collect())),
            None => None,
        }
    }

    /// The sets `due` writes (None: every one).
    pub fn sets(&self, due: &Due) -> Option<Vec<ItemSet>> {
        match due {
            Due::Whole => None,
            Due::Classes(c) => {
                let mut sets: Vec<ItemSet> = c.iter().flat_map(|&i| self.classes[i].sets.iter().copied()).collect();
                sets.sort_unstable();
                Some(sets)
            }
        }
    }

    fn is_due(due: &Due, class: usize) -> bool {
        match due {
            Due::Whole => true,
            Due::Classes(c) => c.contains(&class),
        }
    }

    /// Shards whose records wait in a class `due` writes.
    pub fn shards_pending(&self, due: &Due) -> Vec<u32> {
        let mut shards: Vec<u32> = (0..self.classes.len())
            .filter(|&i| Self::is_due(due, i))
            .flat_map(|i| self.classes[i].pending.iter().filter(|(_, m)| !m.is_empty()).map(|(s, _)| *s))
            .collect();
        shards.sort_unstable();
        shards.dedup();
        shards
    }

    /// Memory the waiting records hold (estimated).
    pub fn pending_bytes(&self) -> u64 {
        let partials: usize = self.classes.iter().flat_map(|c| c.pending.values()).map(|m| m.len()).sum();
        partials as u64 * WAITING_BYTES
    }

    pub fn is_empty(&self) -> bool {
        self.classes.iter().all(|c| c.pending.values().all(|m| m.is_empty()))
    }

    /// A flush's partials: the generation's records for the sets `due`
    /// writes, plus what waited for them; the generation's records wait in
    /// the other classes. Only the shards `keep` accepts (proven held);
    /// `drop`: shards whose waiting records are dropped (their lease moved
    /// on: the next owner reads them again).
    pub fn merge(
        &mut self,
        flusher: &Flusher,
        gen: Generation,
        due: &Due,
        keep: impl Fn(u32) -> bool + Copy,
        drop: impl Fn(u32) -> bool + Copy,
    ) -> Result<Merged, IdentityCollision> {
        let set: &MeasureSet = flusher.measures();
        self.drop_shards(drop);
        let shards: Vec<u32> = gen.shard_indices().into_iter().filter(|&s| keep(s)).collect();
        for (i, c) in self.classes.iter_mut().enumerate() {
            if !Self::is_due(due, i) {
                for &shard in &shards {
                    gen.project_shard(shard, set, &c.shapes, c.pending.entry(shard).or_default())?;
                }
            }
        }
        let shapes = match due {
            Due::Whole => flusher.shapes(None),
            due => flusher.shapes(self.sets(due).as_deref()),
        };
        let mut merged = flusher.merge_shapes(gen, &shapes, keep)?;
        for (i, c) in self.classes.iter_mut().enumerate() {
            if Self::is_due(due, i) {
                for (shard, partials) in std::mem::take(&mut c.pending) {
                    if keep(shard) {
                        merged.absorb(set, Merged::from(partials))?;
                    }
                }
                c.last = Instant::now();
            }
        }
        Ok(merged)
    }

    /// Everything waiting is dropped (the worker rejoins as new).
    pub fn clear(&mut self) {
        for c in &mut self.classes {
            c.pending.clear();
        }
    }

    /// Drops what waits for shards `drop` names.
    pub fn drop_shards(&mut self, drop: impl Fn(u32) -> bool + Copy) {
        for c in &mut self.classes {
            c.pending.retain(|&s, _| !drop(s));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use zigzag_model::{Config, Projections};

    fn cadences(every: &str) -> Cadences {
        let config = Config::from_toml(&format!(
            "[[projection]]\nname = \"cc\"\ndimensions = [\"country\"]\n[flush]\ninterval_ms = 1000\nevery_ms = {every}\n"
        ))
        .unwrap();
        let table = Arc::new(zigzag_core::table::MemoryTable::new());
        let flusher = Flusher::new(Projections::new(&config).unwrap(), &config, table).unwrap();
        Cadences::new(&flusher, Duration::from_millis(1000), 1 << 30)
    }

    #[test]
    fn classes_are_due_on_their_cadence_with_every_faster_one() {
        // Sets: base minute 0, hour 1, day 2; cc minute 3, hour 4, day 5.
        let c = cadences("{ \"base.hour\" = 5000, \"base.day\" = 60000, \"cc.day\" = 60000 }");
        assert_eq!(c.classes.iter().map(|c| c.sets.clone()).collect::<Vec<_>>(), [vec![0, 3, 4], vec![1], vec![2, 5]]);
        let t0 = c.classes[0].last;
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert_eq!(c.due(at(100), false, false), None, "nothing due yet");
        assert_eq!(c.due(at(100), false, true), Some(Due::Classes(vec![0])), "a full generation flushes the fastest");
        assert_eq!(c.due(at(900), false, false), Some(Due::Classes(vec![0])), "due at the tick nearest its time");
        assert_eq!(c.sets(&Due::Classes(vec![0])), Some(vec![0, 3, 4]));
        assert_eq!(c.due(at(5_000), false, false), Some(Due::Classes(vec![0, 1])), "with every faster class");
        assert_eq!(c.sets(&Due::Classes(vec![0, 1])), Some(vec![0, 1, 3, 4]));
        assert_eq!(c.due(at(60_000), false, false), Some(Due::Whole), "the slowest one writes every set");
        assert_eq!(c.due(at(100), true, false), Some(Due::Whole), "forced");
        assert_eq!(c.sets(&Due::Whole), None);
        let one = cadences("{}");
        assert_eq!(one.classes.len(), 1);
        assert_eq!(one.due(t0 + Duration::from_millis(900), false, false), Some(Due::Whole), "one cadence: whole");
    }
}
