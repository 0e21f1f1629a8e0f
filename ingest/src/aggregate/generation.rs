//! A generation: the partial aggregates since the last flush, one map per
//! source shard. A shard's events are added by its task alone, so shards
//! aggregate in parallel without sharing a map (a shared one cost the
//! second core half its speed: cache lines and locks bouncing between the
//! two); the flush merges the shards' maps.
//!
//! A flushed generation's maps are cleared and kept ([`Spare`]) for the
//! generations after it: filling freshly allocated maps cost a page fault
//! per 4 KiB touched, a fifth of the hot path's time.

use super::spare::Spare;
use super::{AggKey, IdentityCollision, KeyValues};
use dashmap::DashMap;
use hashbrown::hash_table::{self, HashTable};
use rustc_hash::{FxBuildHasher, FxHashMap};
use std::hash::Hasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use zigzag_model::measure::Partial;
use zigzag_model::{Identity, MeasureSet, Rollup};

/// One shard's partials of the finest rollup, and its keys' names (once
/// per key, whatever its buckets). Entries are kept dense, in vectors, and
/// found through tables of their indices: only the pages the entries fill
/// are resident (a hash table's whole capacity is, and it is 50-87 % full),
/// and a key's names are bytes in one shard-wide buffer, not an allocation
/// each.
#[derive(Debug, Default)]
pub(super) struct ShardPartials {
    slots: Vec<Slot>,
    /// Indices into `slots`, by (name, bucket).
    index: HashTable<u32>,
    names: Names,
}

#[derive(Debug)]
struct Slot {
    /// The finest rollup's bucket start.
    bucket: i64,
    /// The key: an index into `names`.
    name: u32,
    partial: Partial,
}

#[derive(Debug, Default)]
struct Names {
    keys: Vec<Name>,
    /// Indices into `keys`, by identity.
    index: HashTable<u32>,
    /// Every key's values, packed (`super::pack`), back to back.
    packed: Vec<u8>,
}

#[derive(Debug)]
struct Name {
    /// The identity as two words (alignment 8, not 16: 24-byte entries).
    id: [u64; 2],
    start: u64,
}

impl Name {
    fn id(&self) -> Identity {
        (self.id[0] as u128) << 64 | self.id[1] as u128
    }
}

impl Names {
    fn values(&self, i: usize) -> &[u8] {
        let start = self.keys[i].start as usize;
        let end = self.keys.get(i + 1).map_or(self.packed.len(), |n| n.start as usize);
        &self.packed[start..end]
    }
}

fn slot_hash(name: u32, bucket: i64) -> u64 {
    let mut h = rustc_hash::FxHasher::default();
    h.write_u32(name);
    h.write_i64(bucket);
    h.finish()
}

impl ShardPartials {
    pub(super) fn with_capacity(partials: usize, names: usize) -> Self {
        ShardPartials {
            slots: Vec::with_capacity(partials),
            index: HashTable::with_capacity(partials),
            names: Names {
                keys: Vec::with_capacity(names),
                index: HashTable::with_capacity(names),
                packed: Vec::new(),
            },
        }
    }

    /// Room for `partials` and `names` more, without rehashing.
    pub(super) fn reserve(&mut self, partials: usize, names: usize) {
        let ShardPartials { slots, index, names: n } = self;
        slots.reserve(partials);
        index.reserve(partials, |&i| slot_hash(slots[i as usize].name, slots[i as usize].bucket));
        n.keys.reserve(names);
        n.index.reserve(names, |&i| n.keys[i as usize].id() as u64);
    }

    /// Partials it has room for without growing.
    pub(super) fn slot_capacity(&self) -> usize {
        self.slots.capacity()
    }

    /// Nothing in it (the memory may be kept).
    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.slots.is_empty()
            && self.index.is_empty()
            && self.names.keys.is_empty()
            && self.names.index.is_empty()
            && self.names.packed.is_empty()
    }

    /// Memory its vectors and tables hold, filled or not.
    pub(super) fn capacity_bytes(&self) -> u64 {
        let entry = std::mem::size_of::<u32>() + 1;
        (self.slots.capacity() * std::mem::size_of::<Slot>()
            + self.index.capacity() * entry
            + self.names.keys.capacity() * std::mem::size_of::<Name>()
            + self.names.index.capacity() * entry
            + self.names.packed.capacity()) as u64
    }

    /// Empty, its memory kept.
    pub(super) fn clear(&mut self) {
        self.slots.clear();
        self.index.clear();
        self.names.keys.clear();
        self.names.index.clear();
        self.names.packed.clear();
    }

    /// The index of key `id`'s names, kept if new (their bytes added to
    /// `grown`; then true); an error when the kept names are not `packed`.
    pub fn name(&mut self, id: Identity, packed: &[u8], grown: &mut u64) -> Result<(u32, bool), IdentityCollision> {
        let Names { keys, index, packed: all } = &mut self.names;
        // The identity is a hash already.
        let hash = id as u64;
        let i = match index.entry(hash, |&i| keys[i as usize].id() == id, |&i| keys[i as usize].id() as u64) {
            hash_table::Entry::Occupied(e) => *e.get(),
            hash_table::Entry::Vacant(e) => {
                let i = keys.len() as u32;
                keys.push(Name { id: [(id >> 64) as u64, id as u64], start: all.len() as u64 });
                all.extend_from_slice(packed);
                *grown += NAME_BYTES + packed.len() as u64;
                e.insert(i);
                return Ok((i, true));
            }
        };
        let known = self.names.values(i as usize);
        if known != packed {
            return Err(super::collision(id, known, packed));
        }
        Ok((i, false))
    }

    /// The partial of (name, bucket), made by `new` when absent (then
    /// true). A name just kept (`new_name`) has no partial yet: not
    /// looked for (with keys that rarely repeat, most events make one).
    pub fn partial(
        &mut self,
        name: u32,
        new_name: bool,
        bucket: i64,
        new: impl FnOnce() -> Partial,
    ) -> (&mut Partial, bool) {
        let ShardPartials { slots, index, .. } = self;
        let hash = slot_hash(name, bucket);
        let found = |&i: &u32| slots[i as usize].name == name && slots[i as usize].bucket == bucket;
        let (i, created) = match (!new_name).then(|| index.find(hash, found)).flatten() {
            Some(&i) => (i, false),
            None => {
                let i = slots.len() as u32;
                slots.push(Slot { bucket, name, partial: new() });
                index.insert_unique(hash, i, |&i| slot_hash(slots[i as usize].name, slots[i as usize].bucket));
                (i, true)
            }
        };
        (&mut slots[i as usize].partial, created)
    }
}

/// Estimated bytes of one partial: its slot (bucket 8, name 4 + 4, partial
/// 72: six accumulator words inline, seen bits, the sketches' pointer) and
/// its index entry (4 + a control byte, the table 50-87 % full).
pub(super) const PARTIAL_BYTES: u64 = 96;
/// Estimated bytes of one key's names beyond their packed text: its entry
/// (24) and its index entry.
pub(super) const NAME_BYTES: u64 = 32;

/// Capacity to reserve per shard: (partials, names).
pub type Sizes = FxHashMap<u32, (usize, usize)>;

#[derive(Debug, Default)]
pub struct Generation {
    shards: DashMap<u32, Arc<Mutex<ShardPartials>>, FxBuildHasher>,
    /// Room to reserve in a shard's maps when it first adds.
    sizes: Sizes,
    spare: Arc<Spare>,
    /// Partials in all shards.
    len: AtomicU64,
    /// Memory the maps hold, estimated per entry.
    bytes: AtomicU64,
}

/// A flush's partials merged across shards, every rollup, one per item,
/// with the key's names.
pub type MergedPartials = FxHashMap<AggKey, (Partial, KeyValues)>;

/// A shard's maps, locked (a panic elsewhere leaves them usable).
pub(super) fn lock(m: &Mutex<ShardPartials>) -> MutexGuard<'_, ShardPartials> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Generation {
    /// Cleared maps kept for the next generations (tests).
    #[cfg(test)]
    pub(super) fn spare_maps(&self) -> usize {
        self.spare.kept_maps()
    }

    /// A generation whose shards reserve room for `sizes` at first use: the
    /// pipeline sizes each one like the last ([`Generation::sizes`]), since
    /// a steady stream brings about as many keys per flush, so the maps do
    /// not rehash as they fill.
    pub fn with_capacity(sizes: Sizes) -> Self {
        Generation { sizes, ..Default::default() }
    }

    /// A first generation whose flushed maps are kept for the next ones
    /// up to `budget` bytes.
    pub fn with_spare(budget: u64) -> Self {
        Generation { spare: Arc::new(Spare::new(budget)), ..Default::default() }
    }

    /// The next generation: each shard sized like this one's (at most
    /// `max_keys`), filling the maps of generations flushed before.
    pub fn next(&self, max_keys: usize) -> Generation {
        let sizes = self.sizes().into_iter().map(|(s, (p, n))| (s, (p.min(max_keys), n.min(max_keys)))).collect();
        Generation { sizes, spare: self.spare.clone(), ..Default::default() }
    }

    /// Each shard's partials and names now.
    pub fn sizes(&self) -> Sizes {
        self.shards
            .iter()
            .map(|e| {
                let part = lock(e.value());
                (*e.key(), (part.slots.len(), part.names.keys.len()))
            })
            .collect()
    }

    /// A shard's maps, locked for its task's batch.
    pub(super) fn shard(&self, shard: u32) -> Arc<Mutex<ShardPartials>> {
        if let Some(part) = self.shards.get(&shard) {
            return part.clone();
        }
        let (partials, names) = self.sizes.get(&shard).copied().unwrap_or_default();
        self.shards.entry(shard).or_insert_with(|| Arc::new(Mutex::new(self.spare.take(partials, names)))).clone()
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
        self.shards.iter().map(|e| lock(e.value()).names.keys.len()).sum()
    }

    /// Replaces every key's names in a shard (tests: a forged collision).
    #[cfg(test)]
    pub(super) fn forge_names(&self, shard: u32, values: &[&str]) {
        let part = self.shard(shard);
        let names = &mut lock(&part).names;
        names.packed.clear();
        for n in names.keys.iter_mut() {
            n.start = names.packed.len() as u64;
            zigzag_model::keys::pack_values(values, &mut names.packed);
        }
    }

    /// Every rollup's partials of the shards `keep` accepts, of the base
    /// (every dimension) alone: [`Self::into_projections`] with one shape.
    pub fn into_rollups(
        self,
        set: &MeasureSet,
        rollups: &[Rollup],
        keep: impl Fn(u32) -> bool,
    ) -> Result<MergedPartials, IdentityCollision> {
        self.into_projections(set, &[Shape { projection: 0, dims: None, rollups: rollups.to_vec() }], keep)
    }

    /// Every projection's partials of the shards `keep` accepts, merged
    /// across shards (a flush writes one partial per item): a projection's
    /// key is the finest partial's key with the other dimensions left out,
    /// its buckets the finest floored to each of its rollups (flooring a
    /// finest bucket start to a coarser unit is the coarser bucket of
    /// every event in it: the units nest). Two keys of one identity must
    /// have the same names (within a shard and across shards), else two
    /// keys share the identity. The maps, merged or not, go back to the
    /// spares.
    pub fn into_projections(
        self,
        set: &MeasureSet,
        shapes: &[Shape],
        keep: impl Fn(u32) -> bool,
    ) -> Result<MergedPartials, IdentityCollision> {
        let mut merged = MergedPartials::default();
        // One entry per finest partial of the widest shape at most; coarser
        // rollups and fewer dimensions fold many into one, and the map
        // grows if it must.
        merged.reserve(self.len());
        let shards = self.shards.len();
        for (shard, part) in self.shards {
            let part = std::mem::take(&mut *lock(&part));
            if keep(shard) {
                project_part(&part, set, shapes, &mut merged)?;
            }
            self.spare.put(part, shards);
        }
        Ok(merged)
    }

    /// One shard's partials of `shapes`, added into `into` (this
    /// generation is left as it was): how records wait, per shard, for the
    /// item sets flushed less often (`pipeline/cadence.rs`).
    pub fn project_shard(
        &self,
        shard: u32,
        set: &MeasureSet,
        shapes: &[Shape],
        into: &mut MergedPartials,
    ) -> Result<(), IdentityCollision> {
        match self.shards.get(&shard) {
            Some(part) => project_part(&lock(part.value()), set, shapes, into),
            None => Ok(()),
        }
    }

    /// The finest buckets a shard's partials are in, each once.
    pub fn shard_buckets(&self, shard: u32) -> Vec<i64> {
        let Some(part) = self.shards.get(&shard) else { return Vec::new() };
        let mut buckets: Vec<i64> = lock(part.value()).slots.iter().map(|s| s.bucket).collect();
        buckets.sort_unstable();
        buckets.dedup();
        buckets
    }

    /// The shards it holds partials of.
    pub fn shard_indices(&self) -> Vec<u32> {
        self.shards.iter().filter(|e| !lock(e.value()).slots.is_empty()).map(|e| *e.key()).collect()
    }
}

/// A shard's partials of `shapes`, merged into `merged`.
fn project_part(
    part: &ShardPartials,
    set: &MeasureSet,
    shapes: &[Shape],
    merged: &mut MergedPartials,
) -> Result<(), IdentityCollision> {
    let names: Vec<KeyValues> =
        (0..part.names.keys.len()).map(|i| KeyValues::from_packed(part.names.values(i))).collect();
    let ids: Vec<Identity> = part.names.keys.iter().map(Name::id).collect();
    // Per shape, per name: the projected key (the base's is the name).
    let projected: Vec<Option<Vec<(Identity, KeyValues)>>> = shapes
        .iter()
        .map(|shape| shape.dims.as_ref().map(|dims| project(&names, dims)).transpose())
        .collect::<Result<_, _>>()?;
    for slot in &part.slots {
        let name = slot.name as usize;
        for (s, shape) in shapes.iter().enumerate() {
            let (id, names) = match &projected[s] {
                None => (ids[name], &names[name]),
                Some(keys) => (keys[name].0, &keys[name].1),
            };
            for &r in &shape.rollups {
                let k = AggKey::new(shape.projection, r, r.floor(slot.bucket), id);
                match merged.entry(k) {
                    std::collections::hash_map::Entry::Occupied(mut e) => {
                        let (mine, known) = e.get_mut();
                        // One key's partials share its names.
                        if !Arc::ptr_eq(&known.0, &names.0) && known != names {
                            return Err(super::collision(id, &known.0, &names.0));
                        }
                        mine.merge(set, &slot.partial);
                    }
                    std::collections::hash_map::Entry::Vacant(e) => {
                        e.insert((slot.partial.clone(), names.clone()));
                    }
                }
            }
        }
    }
    Ok(())
}

/// What a flush derives from the finest partials for one projection: its
/// index (the items' [`AggKey::projection`]), the positions of the
/// dimensions it keeps (None: every one, the base) and the rollups wanted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    pub projection: u8,
    pub dims: Option<Vec<usize>>,
    pub rollups: Vec<Rollup>,
}

/// Each name's key in a projection keeping `dims`: its identity and
/// names, one allocation per distinct projected key (many names share one).
fn project(names: &[KeyValues], dims: &[usize]) -> Result<Vec<(Identity, KeyValues)>, IdentityCollision> {
    let mut interned: FxHashMap<Identity, KeyValues> = FxHashMap::default();
    let mut packed = Vec::new();
    let mut out = Vec::with_capacity(names.len());
    for n in names {
        packed.clear();
        for (i, v) in n.iter().enumerate() {
            if dims.contains(&i) {
                zigzag_model::keys::push_packed(v, &mut packed);
            }
        }
        let id = zigzag_model::keys::identity_of_packed(&packed);
        let kv = interned.entry(id).or_insert_with(|| KeyValues::from_packed(&packed));
        if kv.0[..] != packed[..] {
            return Err(super::collision(id, &kv.0, &packed));
        }
        out.push((id, kv.clone()));
    }
    Ok(out)
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

#[cfg(test)]
mod tests;
