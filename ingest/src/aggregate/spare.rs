//! Cleared maps of flushed generations, kept for the generations after
//! them: filling freshly allocated maps cost a page fault per 4 KiB
//! touched, a fifth of the hot path's time.

use super::generation::ShardPartials;
use std::sync::{Mutex, MutexGuard};

/// Cleared maps of flushed generations, for the next ones to fill (a
/// generation and the ones made from it by [`Generation::next`] share it).
/// It holds at most one generation's maps (the flush of generation k puts
/// them back after k + 1 has taken k - 1's), and at most `budget` bytes of
/// them: a spare map is memory held through the next flush, which the
/// largest generations cannot spare (the pipeline's budget is an eighth of
/// `flush.max_memory_mb`).
#[derive(Debug)]
pub struct Spare {
    kept: Mutex<Kept>,
    budget: u64,
}

#[derive(Debug, Default)]
struct Kept {
    maps: Vec<ShardPartials>,
    bytes: u64,
}

/// The spare budget of a generation made without one.
pub const SPARE_BYTES: u64 = 128 << 20;

impl Default for Spare {
    fn default() -> Self {
        Spare::new(SPARE_BYTES)
    }
}

impl Spare {
    pub fn new(budget: u64) -> Self {
        Spare { kept: Mutex::default(), budget }
    }

    fn kept(&self) -> MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Cleared maps with room for (`partials`, `names`). Maps more than
    /// four times too large (the stream slowed down) are let go, so the
    /// memory kept follows the traffic.
    pub(super) fn take(&self, partials: usize, names: usize) -> ShardPartials {
        let spare = {
            let mut kept = self.kept();
            let part = kept.maps.pop();
            kept.bytes -= part.as_ref().map_or(0, ShardPartials::capacity_bytes);
            part
        };
        match spare {
            Some(mut part) if part.slot_capacity() <= 4 * partials.max(1024) => {
                part.reserve(partials, names);
                part
            }
            _ => ShardPartials::with_capacity(partials, names),
        }
    }

    /// Keeps `part`, cleared, unless `limit` maps are kept already or it
    /// does not fit the budget.
    pub(super) fn put(&self, mut part: ShardPartials, limit: usize) {
        part.clear();
        let bytes = part.capacity_bytes();
        let mut kept = self.kept();
        if kept.maps.len() < limit && kept.bytes + bytes <= self.budget {
            kept.bytes += bytes;
            kept.maps.push(part);
        }
    }
}

#[cfg(test)]
impl Spare {
    pub(super) fn kept_maps(&self) -> usize {
        self.kept().maps.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spare_maps_come_back_empty_with_their_memory_and_oversized_ones_are_let_go() {
        let spare = Spare::default();
        let mut part = ShardPartials::with_capacity(3_000, 3_000);
        let mut grown = 0;
        let mut values = Vec::new();
        zigzag_model::keys::pack_values(&["a"], &mut values);
        let set = zigzag_model::Config::default().measure_set().expect("shipped measures");
        let (name, _) = part.name(7, &values, &mut grown).expect("new");
        part.partial(name, true, 0, || set.partial());
        spare.put(part, 1);
        spare.put(ShardPartials::default(), 1);
        assert_eq!(spare.kept().maps.len(), 1, "no more maps kept than the generation had shards");
        let again = spare.take(100, 100);
        assert!(again.is_empty());
        assert!(again.slot_capacity() >= 3_000, "the memory is kept: {}", again.slot_capacity());
        // Wanted far less than kept: a fresh map of the wanted size.
        spare.put(ShardPartials::with_capacity(20_000, 20_000), 1);
        let small = spare.take(1_000, 1_000);
        assert!(small.slot_capacity() < 20_000, "{}", small.slot_capacity());
        assert_eq!(spare.kept().maps.len(), 0, "the oversized map was let go, not kept");
        assert_eq!(spare.kept().bytes, 0);
        // A budget: maps past it are let go.
        let part = ShardPartials::with_capacity(3_000, 3_000);
        let bytes = part.capacity_bytes();
        assert!(bytes >= 3_000 * 88, "{bytes}");
        let spare = Spare::new(bytes + bytes / 2);
        spare.put(part, 4);
        spare.put(ShardPartials::with_capacity(3_000, 3_000), 4);
        let kept = spare.kept();
        assert_eq!((kept.maps.len(), kept.bytes), (1, bytes), "the second did not fit");
        drop(kept);
        drop(spare.take(3_000, 3_000));
        assert_eq!(spare.kept().bytes, 0, "a map taken is off the budget");
    }
}
