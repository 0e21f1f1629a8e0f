//! A generation: the partial aggregates since the last flush, one map per
//! source shard. A shard's events are added by its task alone, so shards
//! aggregate in parallel without sharing a map (a shared one cost the
//! second core half its speed: cache lines and locks bouncing between the
//! two); the flush merges the shards' maps.

use super::{AggKey, IdentityCollision, KeyValues};
use dashmap::DashMap;
use rustc_hash::{FxBuildHasher, FxHashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use zigzag_model::measure::Partial;
use zigzag_model::{Identity, MeasureSet, Rollup};

/// One shard's partials of the finest rollup, and its keys' names (once
/// per key, whatever its buckets).
#[derive(Debug, Default)]
pub(super) struct ShardPartials {
    pub partials: FxHashMap<AggKey, Partial>,
    pub names: FxHashMap<Identity, KeyValues>,
}

/// Estimated bytes of one partial in its map: key 32 + partial 72 (six
/// accumulator words inline, seen bits, the sketches' pointer), the
/// table's control byte and its spare room (a hash table is 50-87 % full).
pub(super) const PARTIAL_BYTES: u64 = 144;
/// Estimated bytes of one key's names beyond their packed text: the map
/// entry (16 + 16) with its spare room, and the allocation's header.
pub(super) const NAME_BYTES: u64 = 72;

/// Capacity to reserve per shard: (partials, names).
pub type Sizes = FxHashMap<u32, (usize, usize)>;

#[derive(Debug, Default)]
pub struct Generation {
    shards: DashMap<u32, Arc<Mutex<ShardPartials>>, FxBuildHasher>,
    /// Room to reserve in a shard's maps when it first adds.
    sizes: Sizes,
    /// Partials in all shards.
    len: AtomicU64,
    /// Memory the maps hold, estimated per entry.
    bytes: AtomicU64,
}

/// A flush's partials merged across shards, every rollup, one per item,
/// with the key's names.
pub type MergedPartials = FxHashMap<AggKey, (Partial, KeyValues)>;

fn lock(m: &Mutex<ShardPartials>) -> MutexGuard<'_, ShardPartials> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Generation {
    /// A generation whose shards reserve room for `sizes` at first use: the
    /// pipeline sizes each one like the last ([`Generation::sizes`]), since
    /// a steady stream brings about as many keys per flush, so the maps do
    /// not rehash as they fill.
    pub fn with_capacity(sizes: Sizes) -> Self {
        Generation { sizes, ..Default::default() }
    }

    /// Each shard's partials and names now.
    pub fn sizes(&self) -> Sizes {
        self.shards
            .iter()
            .map(|e| {
                let part = lock(e.value());
                (*e.key(), (part.partials.len(), part.names.len()))
            })
            .collect()
    }

    /// A shard's maps, locked for its task's batch.
    pub(super) fn shard(&self, shard: u32) -> Arc<Mutex<ShardPartials>> {
        if let Some(part) = self.shards.get(&shard) {
            return part.clone();
        }
        let (partials, names) = self.sizes.get(&shard).copied().unwrap_or_default();
        let fresh = ShardPartials {
            partials: FxHashMap::with_capacity_and_hasher(partials, FxBuildHasher),
            names: FxHashMap::with_capacity_and_hasher(names, FxBuildHasher),
        };
        self.shards.entry(shard).or_insert_with(|| Arc::new(Mutex::new(fresh))).clone()
    }

    pub(super) fn lock(part: &Mutex<ShardPartials>) -> MutexGuard<'_, ShardPartials> {
        lock(part)
    }

    /// Partials in all shards (bounded by `flush.max_keys`).
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Estimated memory held, in bytes (bounded by `flush.max_memory_mb`).
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Distinct keys, counted once per shard that holds them.
    pub fn identities(&self) -> usize {
        self.shards.iter().map(|e| lock(e.value()).names.len()).sum()
    }

    /// Replaces every key's names in a shard (tests: a forged collision).
    #[cfg(test)]
    pub(super) fn forge_names(&self, shard: u32, values: &[&str]) {
        let part = self.shard(shard);
        for names in lock(&part).names.values_mut() {
            *names = KeyValues::new(values);
        }
    }

    /// Every rollup's partials of the shards `keep` accepts, merged across
    /// shards (a flush writes one partial per key): the finest as
    /// aggregated, each coarser one summed from it (flooring a finest bucket
    /// start to a coarser unit is the coarser bucket of every event in it:
    /// the units nest). Two shards' keys of one identity must have the same
    /// names, else two keys share the identity.
    pub fn into_rollups(
        self,
        set: &MeasureSet,
        rollups: &[Rollup],
        keep: impl Fn(u32) -> bool,
    ) -> Result<MergedPartials, IdentityCollision> {
        let mut merged = MergedPartials::default();
        merged.reserve(self.len() * rollups.len());
        for (shard, part) in self.shards {
            if !keep(shard) {
                continue;
            }
            let part = std::mem::take(&mut *lock(&part));
            for (key, p) in part.partials {
                let names = part.names.get(&key.id()).expect("a shard keeps the names of each of its partials' keys");
                for &r in rollups {
                    let k = AggKey { rollup: r, bucket: r.floor(key.bucket), shard: 0, ..key };
                    match merged.entry(k) {
                        std::collections::hash_map::Entry::Occupied(mut e) => {
                            let (mine, known) = e.get_mut();
                            if known != names {
                                let values: Vec<&str> = names.iter().collect();
                                return Err(super::collision(key.id(), known, &values));
                            }
                            mine.merge(set, &p);
                        }
                        std::collections::hash_map::Entry::Vacant(e) => {
                            e.insert((p.clone(), names.clone()));
                        }
                    }
                }
            }
        }
        Ok(merged)
    }
}

/// What a batch added to a generation (partials, estimated bytes), counted
/// into its totals once, when dropped (so an early return counts what was
/// added before it): one shared atomic per event made the shard threads
/// fight over its cache line.
pub(super) struct Grown<'g> {
    gen: &'g Generation,
    pub partials: u64,
    pub bytes: u64,
}

impl<'g> Grown<'g> {
    pub fn new(gen: &'g Generation) -> Self {
        Grown { gen, partials: 0, bytes: 0 }
    }
}

impl Drop for Grown<'_> {
    fn drop(&mut self) {
        if self.partials > 0 {
            self.gen.len.fetch_add(self.partials, Ordering::Relaxed);
        }
        if self.bytes > 0 {
            self.gen.bytes.fetch_add(self.bytes, Ordering::Relaxed);
        }
    }
}
