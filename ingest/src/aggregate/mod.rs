//! Aggregate: decoded events → partial measures per (shard, bucket, key),
//! in memory, one map per source shard (`generation.rs`), so shards
//! aggregate in parallel without sharing one.
//!
//! Only the finest configured rollup is aggregated per event; the coarser
//! rollups are sums of its partials, derived once per flush
//! ([`Generation::into_rollups`]): one map update per event instead of one
//! per rollup.
//!
//! A key is identified by the xxh3-128 of its dimension values; the values
//! themselves are kept once per shard's generation, every event is checked
//! against them, and so are the shards' names when the flush merges them:
//! a hash collision is an error, never a merge.
//! Partials are kept per source shard until the flush, which merges the
//! shards whose leases it proved still held and drops the others.

mod generation;
mod spare;

use crate::decode::{DecodeError, Decoder, Event, FieldValue, Values};
use crate::source::RecordBatch;
pub use generation::{Generation, MergedPartials, Shape, Sizes};
use generation::{Grown, ShardPartials, PARTIAL_BYTES};
use std::sync::Arc;
use zigzag_model::keys::{identity_of_packed, pack_values, push_packed, unpack_values};
use zigzag_model::schema::value::display;
use zigzag_model::{Identity, MeasureSet, Position, Projections, Rollup};

/// One item of a flush. Packed: 32 bytes (the identity as two u64 keeps
/// the alignment at 8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AggKey {
    id: [u64; 2],
    pub bucket: i64,
    /// The projection's index in [`Projections`] (the identity is of its
    /// dimensions' values).
    pub projection: u8,
    pub rollup: Rollup,
}

impl AggKey {
    pub fn new(projection: u8, rollup: Rollup, bucket: i64, id: Identity) -> Self {
        AggKey { id: [(id >> 64) as u64, id as u64], bucket, projection, rollup }
    }

    pub fn id(&self) -> Identity {
        (self.id[0] as u128) << 64 | self.id[1] as u128
    }
}

/// One record the pipeline could not use, with where it came from.
#[derive(Debug, Clone)]
pub struct Rejected {
    pub pos: Position,
    pub error: DecodeError,
    pub record: Vec<u8>,
}

/// Dimension values of one key, in [`zigzag_model::KeyModel::dims`] order, packed in
/// one allocation (u32 length + UTF-8 bytes each): a key's names cost one
/// small allocation, not one per value plus a list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValues(Arc<[u8]>);

impl KeyValues {
    pub fn new(values: &[&str]) -> Self {
        let mut packed = Vec::with_capacity(values.iter().map(|v| 4 + v.len()).sum());
        pack_values(values, &mut packed);
        KeyValues(packed.into())
    }

    /// From values already packed.
    fn from_packed(packed: &[u8]) -> Self {
        KeyValues(packed.into())
    }

    pub fn iter(&self) -> impl Iterator<Item = &str> + '_ {
        unpack_values(&self.0)
    }
}

/// The aggregation rules: how records decode, which fields key an
/// aggregate (each dimension's field index), which measures, which rollup.
#[derive(Debug, Clone)]
pub struct Aggregator {
    decoder: Decoder,
    /// Per key dimension: its field's index and declaration.
    dims: Vec<(usize, zigzag_model::schema::FieldSpec)>,
    measures: MeasureSet,
    finest: Rollup,
    /// The newest event time aggregated (ms; i64::MIN: none): how far what
    /// this layout wrote reached, said when the worker adopts another
    /// (`zigzag_lease::adoption`). Raised once per batch.
    newest: std::sync::Arc<std::sync::atomic::AtomicI64>,
}

#[derive(Debug, Clone, thiserror::Error)]
#[error("two keys share identity {id:032x}: {a:?} and {b:?}")]
pub struct IdentityCollision {
    pub id: Identity,
    pub a: Vec<String>,
    pub b: Vec<String>,
}

/// What one batch contributed.
#[derive(Debug, Default, Clone, Copy)]
pub struct BatchCounts {
    pub valid: u64,
    pub rejected: u64,
    /// CSV header rows skipped.
    pub headers: u64,
}

impl Aggregator {
    /// Events are keyed by every dimension, at the finest rollup any
    /// projection writes: each projection is a sum of these partials.
    pub fn new(projections: &Projections, decoder: Decoder, measures: MeasureSet) -> Self {
        let finest = projections.finest();
        let fields: Vec<_> = decoder.fields().map(|f| f.spec.clone()).collect();
        let dims = projections.all_dims().dims().iter().map(|d| (d.field, fields[d.field].clone())).collect();
        Aggregator {
            dims,
            decoder,
            measures,
            finest,
            newest: std::sync::Arc::new(std::sync::atomic::AtomicI64::new(i64::MIN)),
        }
    }

    pub fn measures(&self) -> &MeasureSet {
        &self.measures
    }

    /// The newest event time aggregated (ms), if any.
    pub fn newest_event_ms(&self) -> Option<i64> {
        Some(self.newest.load(std::sync::atomic::Ordering::Relaxed)).filter(|&t| t != i64::MIN)
    }

    fn saw(&self, newest: i64) {
        self.newest.fetch_max(newest, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn decoder(&self) -> &Decoder {
        &self.decoder
    }

    /// Decodes and aggregates every record of a batch into `gen`; records
    /// that do not decode go to `rejected`.
    pub fn add_batch(
        &self,
        gen: &Generation,
        shard: u32,
        batch: &RecordBatch,
        rejected: &mut Vec<Rejected>,
    ) -> Result<BatchCounts, IdentityCollision> {
        self.add_batch_under(gen, shard, batch, i64::MIN, rejected)
    }

    /// [`Self::add_batch`] under a seal: events before `seal` (ms) are
    /// rejected too (`DecodeError::Sealed`), as every reading of the same
    /// records under the same seal rejects them.
    pub fn add_batch_under(
        &self,
        gen: &Generation,
        shard: u32,
        batch: &RecordBatch,
        seal: i64,
        rejected: &mut Vec<Rejected>,
    ) -> Result<BatchCounts, IdentityCollision> {
        let mut counts = BatchCounts::default();
        let part = gen.shard(shard);
        let mut part = generation::lock(&part);
        let mut grown = Grown::new(gen);
        let mut packed = Vec::new();
        let mut values = Values::new();
        let mut newest = i64::MIN;
        for (pos, bytes) in batch.iter() {
            match self.decoder.decode_into(bytes, &mut values) {
                Ok(ts_ms) if ts_ms < seal => {
                    counts.rejected += 1;
                    rejected.push(Rejected { pos, error: DecodeError::Sealed { ts_ms, seal }, record: bytes.to_vec() });
                }
                Ok(ts_ms) => {
                    self.add(&mut part, ts_ms, &values, &mut grown, &mut packed)?;
                    newest = newest.max(ts_ms);
                    counts.valid += 1;
                }
                // A CSV header row is framing, not a record: nothing to keep.
                Err(DecodeError::Header) => counts.headers += 1,
                Err(error) => {
                    counts.rejected += 1;
                    rejected.push(Rejected { pos, error, record: bytes.to_vec() });
                }
            }
        }
        self.saw(newest);
        Ok(counts)
    }

    /// Aggregates decoded events into `gen`, as a batch would.
    pub fn add_events(&self, gen: &Generation, shard: u32, events: &[Event]) -> Result<(), IdentityCollision> {
        let part = gen.shard(shard);
        let mut part = generation::lock(&part);
        let (mut grown, mut packed) = (Grown::new(gen), Vec::new());
        for e in events {
            self.add(&mut part, e.ts_ms, &e.values, &mut grown, &mut packed)?;
        }
        self.saw(events.iter().map(|e| e.ts_ms).max().unwrap_or(i64::MIN));
        Ok(())
    }

    /// Aggregates one event into its shard's maps (`packed`: scratch space
    /// for the key's values, reused from event to event).
    #[inline]
    fn add(
        &self,
        part: &mut ShardPartials,
        ts_ms: i64,
        values: &[FieldValue],
        grown: &mut Grown,
        packed: &mut Vec<u8>,
    ) -> Result<(), IdentityCollision> {
        packed.clear();
        for (f, spec) in &self.dims {
            match &values[*f] {
                FieldValue::Str(s) => push_packed(s, packed),
                other => push_packed(&display(spec, other), packed),
            }
        }
        let id = identity_of_packed(packed);
        // Every event is checked against its key's names (a hash collision
        // is an error, never a merge); a new key's are kept.
        let (name, new_name) = part.name(id, packed, &mut grown.bytes)?;
        let (p, created) = part.partial(name, new_name, self.finest.floor(ts_ms), || self.measures.partial());
        if created {
            p.add(&self.measures, values);
            grown.bytes += PARTIAL_BYTES + p.heap_bytes() as u64;
            grown.partials += 1;
        } else if self.measures.has_sketches() {
            // A sketch grows as values arrive: counted as it grows.
            let before = p.heap_bytes();
            p.add(&self.measures, values);
            grown.bytes += p.heap_bytes().saturating_sub(before) as u64;
        } else {
            p.add(&self.measures, values);
        }
        Ok(())
    }
}

/// Two keys' packed names under one identity.
fn collision(id: Identity, known: &[u8], other: &[u8]) -> IdentityCollision {
    let names = |packed| unpack_values(packed).map(str::to_string).collect();
    IdentityCollision { id, a: names(known), b: names(other) }
}

#[cfg(test)]
mod tests {
    use super::generation::NAME_BYTES;
    use super::*;
    use zigzag_model::{Config, KeyModel, MeasureValue};

    fn aggregator(_keys: &KeyModel) -> Aggregator {
        let c = Config::default();
        Aggregator::new(&Projections::new(&c).unwrap(), Decoder::shipped(), c.measure_set().unwrap())
    }

    #[test]
    fn one_event_feeds_every_rollup_and_bad_records_are_kept() {
        let keys = KeyModel::new(&Config::default()).unwrap();
        let agg = aggregator(&keys);
        let gen = Generation::default();
        let mut batch = RecordBatch::default();
        let ev = br#"{"type":"click","ts":"2026-11-21T10:15:30Z","referrer":"r","campaign":"c","country":"DE","url":"/","cost":0.25}"#;
        batch.push(Position::at(1), ev);
        batch.push(Position::at(2), b"{not json");
        batch.push(Position::at(3), ev);
        let mut rejected = Vec::new();
        let counts = agg.add_batch(&gen, 0, &batch, &mut rejected).unwrap();
        assert_eq!((counts.valid, counts.rejected), (2, 1));
        assert_eq!(rejected[0].pos, Position::at(2));
        assert_eq!(rejected[0].record, b"{not json");
        assert_eq!(gen.len(), 1, "the finest rollup only");
        let all = gen.into_rollups(agg.measures(), &Rollup::ALL, |_| true).unwrap();
        let all: Vec<_> = all.into_iter().collect();
        assert_eq!(all.len(), 3, "minute, hour and day partials");
        for (_, (p, _)) in &all {
            let m = p.values(agg.measures());
            assert_eq!(m.0[0], MeasureValue::Count(2));
            assert_eq!(m.0[2], MeasureValue::Sum(500_000));
            assert_eq!(m.0[3..5], [MeasureValue::Min(Some(250_000)), MeasureValue::Max(Some(250_000))]);
        }
        let minute = all.iter().find(|(k, _)| k.rollup == Rollup::Minute).unwrap();
        assert_eq!(minute.0.bucket, 1_795_256_100_000); // 2026-11-21T10:15:00Z
        let day = all.iter().find(|(k, _)| k.rollup == Rollup::Day).unwrap();
        assert_eq!(day.0.bucket, 1_795_219_200_000); // 2026-11-21T00:00:00Z
    }

    #[test]
    fn shards_merge_into_one_partial_per_key_and_dropped_shards_are_left_out() {
        let keys = KeyModel::new(&Config::default()).unwrap();
        let agg = aggregator(&keys);
        let gen = Generation::default();
        let ev = br#"{"type":"click","ts":"2026-11-21T10:15:30Z","referrer":"r","campaign":"c","country":"DE","url":"/","cost":1}"#;
        for shard in 0..3u32 {
            let mut batch = RecordBatch::default();
            batch.push(Position::at(1), ev);
            agg.add_batch(&gen, shard, &batch, &mut Vec::new()).unwrap();
        }
        assert_eq!(gen.len(), 3, "one partial per shard in memory");
        let merged = gen.into_rollups(agg.measures(), &[Rollup::Minute], |shard| shard != 1).unwrap();
        assert_eq!(merged.len(), 1, "one item write for the key");
        let m = merged.values().next().unwrap().0.values(agg.measures());
        assert_eq!((&m.0[0], &m.0[2]), (&MeasureValue::Count(2), &MeasureValue::Sum(2_000_000)), "shards 0 and 2 only");
    }

    #[test]
    fn memory_is_counted_once_per_new_key_with_its_names() {
        let keys = KeyModel::new(&Config::default()).unwrap();
        let agg = aggregator(&keys);
        let gen = Generation::default();
        let event = |referrer: &str| {
            format!(
                r#"{{"type":"click","ts":"2026-11-21T10:15:30Z","referrer":"{referrer}","campaign":"c","country":"DE","url":"/"}}"#
            )
        };
        let mut batch = RecordBatch::default();
        batch.push(Position::at(1), event("a").as_bytes());
        batch.push(Position::at(2), event("a").as_bytes());
        agg.add_batch(&gen, 0, &batch, &mut Vec::new()).unwrap();
        let one = gen.bytes();
        assert!(one >= PARTIAL_BYTES + NAME_BYTES, "{one}");
        let mut batch = RecordBatch::default();
        batch.push(Position::at(3), event(&"r".repeat(200)).as_bytes());
        agg.add_batch(&gen, 0, &batch, &mut Vec::new()).unwrap();
        assert!(gen.bytes() - one >= PARTIAL_BYTES + NAME_BYTES + 200, "a longer value costs more");
        // Another minute of a known key in the same shard: its names are shared.
        let mut batch = RecordBatch::default();
        batch.push(Position::at(4), event("a").replace("10:15:30", "10:16:30").as_bytes());
        let before = gen.bytes();
        agg.add_batch(&gen, 0, &batch, &mut Vec::new()).unwrap();
        assert_eq!(gen.bytes() - before, PARTIAL_BYTES, "a new bucket of a known key: no new names");
        // Another shard keeps its own map, names included.
        let mut batch = RecordBatch::default();
        batch.push(Position::at(5), event("a").as_bytes());
        let before = gen.bytes();
        agg.add_batch(&gen, 1, &batch, &mut Vec::new()).unwrap();
        assert_eq!(gen.bytes() - before, one, "another shard's partial of a key costs what the first did");
        assert_eq!((gen.len(), gen.identities()), (4, 3), "partials, and each shard's keys");
    }

    #[test]
    fn a_generation_in_a_flushed_ones_maps_aggregates_exactly_as_in_fresh_ones() {
        let keys = KeyModel::new(&Config::default()).unwrap();
        let agg = aggregator(&keys);
        let event = |referrer: &str, minute: u32, cost: u32| {
            format!(
                r#"{{"type":"click","ts":"2026-11-21T10:{minute:02}:30Z","referrer":"{referrer}","campaign":"c","country":"DE","url":"/","cost":{cost}}}"#
            )
        };
        let batch = |events: &[String]| {
            let mut b = RecordBatch::default();
            for (i, e) in events.iter().enumerate() {
                b.push(Position::at(i as u64 + 1), e.as_bytes());
            }
            b
        };
        let first: Vec<_> = (0..300).map(|i| event(&format!("r{}", i % 120), i % 7, i)).collect();
        let second: Vec<_> = (0..300).map(|i| event(&format!("q{}", i % 90), i % 5, 2 * i)).collect();
        let merged = |gen: Generation| {
            let mut all: Vec<_> = gen
                .into_rollups(agg.measures(), &Rollup::ALL, |_| true)
                .unwrap()
                .into_iter()
                .map(|(k, (p, names))| (k.rollup, k.bucket, k.id(), p.values(agg.measures()), names))
                .collect();
            all.sort_by_key(|(r, b, id, ..)| (r.unit_ms(), *b, *id));
            all
        };
        // As the pipeline goes: the next generation is made at the swap,
        // then the swapped one is merged and its maps kept; a third one
        // fills them.
        let one = Generation::default();
        agg.add_batch(&one, 0, &batch(&first), &mut Vec::new()).unwrap();
        agg.add_batch(&one, 1, &batch(&second), &mut Vec::new()).unwrap();
        let two = one.next(1_000_000);
        let first_merged = merged(one);
        assert_eq!(two.spare_maps(), 2, "both shards' maps are kept");
        let three = two.next(1_000_000);
        drop(merged(two));
        agg.add_batch(&three, 0, &batch(&second), &mut Vec::new()).unwrap();
        agg.add_batch(&three, 1, &batch(&first), &mut Vec::new()).unwrap();
        assert_eq!(three.spare_maps(), 0, "the two shards filled the kept maps");
        let fresh = Generation::default();
        agg.add_batch(&fresh, 0, &batch(&second), &mut Vec::new()).unwrap();
        agg.add_batch(&fresh, 1, &batch(&first), &mut Vec::new()).unwrap();
        assert_eq!((three.len(), three.identities()), (fresh.len(), fresh.identities()));
        assert_eq!(merged(three), merged(fresh), "recycled maps hold nothing of the generation before");
        assert!(!first_merged.is_empty());
    }

    #[test]
    fn shards_whose_names_differ_for_one_identity_are_a_collision_at_merge() {
        let keys = KeyModel::new(&Config::default()).unwrap();
        let agg = aggregator(&keys);
        let gen = Generation::default();
        let ev =
            br#"{"type":"click","ts":"2026-11-21T10:15:30Z","referrer":"r","campaign":"c","country":"DE","url":"/"}"#;
        let mut batch = RecordBatch::default();
        batch.push(Position::at(1), ev);
        agg.add_batch(&gen, 0, &batch, &mut Vec::new()).unwrap();
        // Forge shard 1's names for the same identity (a real collision
        // needs two values with one xxh3-128).
        agg.add_batch(&gen, 1, &batch, &mut Vec::new()).unwrap();
        gen.forge_names(1, &["x", "y", "z"]);
        let err = gen.into_rollups(agg.measures(), &[Rollup::Minute], |_| true).unwrap_err();
        assert!(err.to_string().contains("share identity"), "{err}");
    }
}
