//! Aggregate: decoded events → partial measures per (shard, rollup, bucket,
//! key), in memory, shared by the shard tasks (a `DashMap`, so shards
//! aggregate in parallel without a global lock).
//!
//! A key is identified by the xxh3-128 of its dimension values; the values
//! themselves are kept once per generation in `names`, and every event is
//! checked against them, so a hash collision is an error, never a merge.
//! Partials are kept per source shard because each shard flushes under its
//! own mark (exactly-once; see `flush`).

use crate::decode::{decode, DecodeError, DecodeLimits, Event, EventType};
use crate::source::RecordBatch;
use dashmap::DashMap;
use rustc_hash::FxBuildHasher;
use std::sync::Arc;
use zigzag_model::config::Field;
use zigzag_model::measures::cost_to_micros;
use zigzag_model::{Identity, KeyModel, Measures, Position, Rollup};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AggKey {
    /// Index of the shard in the pipeline's shard list.
    pub shard: u32,
    pub rollup: Rollup,
    pub bucket: i64,
    pub id: Identity,
}

/// One record the pipeline could not use, with where it came from.
#[derive(Debug, Clone)]
pub struct Rejected {
    pub pos: Position,
    pub error: DecodeError,
    pub record: Vec<u8>,
}

/// Dimension values of one key, in [`KeyModel::fields`] order.
pub type KeyValues = Arc<[Box<str>]>;

/// The partial aggregates since the last flush.
pub struct Generation {
    pub partials: DashMap<AggKey, Measures, FxBuildHasher>,
    pub names: DashMap<Identity, KeyValues, FxBuildHasher>,
}

impl Default for Generation {
    fn default() -> Self {
        Generation { partials: DashMap::with_hasher(FxBuildHasher), names: DashMap::with_hasher(FxBuildHasher) }
    }
}

impl Generation {
    pub fn len(&self) -> usize {
        self.partials.len()
    }

    pub fn is_empty(&self) -> bool {
        self.partials.is_empty()
    }
}

/// The aggregation rules: which fields key an aggregate, which rollups.
#[derive(Debug, Clone)]
pub struct Aggregator {
    fields: Vec<Field>,
    rollups: Vec<Rollup>,
    limits: DecodeLimits,
}

#[derive(Debug, thiserror::Error)]
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
}

fn field_value<'e>(e: &'e Event, f: Field) -> &'e str {
    match f {
        Field::Referrer => &e.referrer,
        Field::Campaign => &e.campaign,
        Field::Country => &e.country,
        Field::Url => &e.url,
    }
}

impl Aggregator {
    pub fn new(keys: &KeyModel, limits: DecodeLimits) -> Self {
        Aggregator { fields: keys.fields().to_vec(), rollups: keys.rollups().collect(), limits }
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
        let mut counts = BatchCounts::default();
        for (pos, bytes) in batch.iter() {
            match decode(bytes, &self.limits) {
                Ok(event) => {
                    self.add_event(gen, shard, &event)?;
                    counts.valid += 1;
                }
                Err(error) => {
                    counts.rejected += 1;
                    rejected.push(Rejected { pos, error, record: bytes.to_vec() });
                }
            }
        }
        Ok(counts)
    }

    #[inline]
    pub fn add_event(&self, gen: &Generation, shard: u32, e: &Event) -> Result<(), IdentityCollision> {
        const INLINE: usize = 4;
        let mut values: smallvec::SmallVec<[&str; INLINE]> = smallvec::SmallVec::new();
        values.extend(self.fields.iter().map(|f| field_value(e, *f)));
        let id = KeyModel::identity(&values);
        self.check_names(gen, id, &values)?;
        let click = e.kind == EventType::Click;
        // Decode admits only finite, non-negative costs; absurd ones (beyond
        // i64 micro-units) were rejected there too.
        let cost = e.cost.and_then(cost_to_micros);
        for &rollup in &self.rollups {
            let key = AggKey { shard, rollup, bucket: rollup.floor(e.ts_ms), id };
            gen.partials.entry(key).or_default().add_event(click, cost);
        }
        Ok(())
    }

    fn check_names(&self, gen: &Generation, id: Identity, values: &[&str]) -> Result<(), IdentityCollision> {
        if let Some(known) = gen.names.get(&id) {
            if known.iter().map(|s| &**s).eq(values.iter().copied()) {
                return Ok(());
            }
            return Err(IdentityCollision {
                id,
                a: known.iter().map(|s| s.to_string()).collect(),
                b: values.iter().map(|s| s.to_string()).collect(),
            });
        }
        gen.names.entry(id).or_insert_with(|| values.iter().map(|s| Box::<str>::from(*s)).collect());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zigzag_model::Config;

    #[test]
    fn one_event_feeds_every_rollup_and_bad_records_are_kept() {
        let keys = KeyModel::new(&Config::default()).unwrap();
        let agg = Aggregator::new(&keys, DecodeLimits::default());
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
        assert_eq!(gen.len(), 3, "minute, hour and day partials");
        for p in gen.partials.iter() {
            assert_eq!(p.value().clicks, 2);
            assert_eq!(p.value().cost_sum, 500_000);
        }
        let minute = gen.partials.iter().find(|p| p.key().rollup == Rollup::Minute).unwrap();
        assert_eq!(minute.key().bucket, 1_795_256_100_000); // 2026-11-21T10:15:00Z
    }
}
