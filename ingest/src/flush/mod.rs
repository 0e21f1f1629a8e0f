//! Flush: one generation of partials → aggregate items, under one lane's
//! flush number (the intent and the checkpoints are the lease protocol's:
//! `zigzag_lease::Coordinator::begin/commit/complete`).
//!
//! The partials of every shard in the flush are merged first, so a key
//! costs one write per flush however many shards touched it (plus one when
//! its stored min or max moves: `measures::plan_update`). Each write is
//! guarded by the lane's mark (`w@<lane> < k`, then `SET w@<lane> = k`): a
//! retried, replayed or recovered write of flush `k` is a no-op.
//!
//! A flush's items are bracketed by its change marks (`changes.rs`): every
//! time slice it touches says, before the flush's first item and after the
//! last of the slice's bin, that this lane's flush `k` is changing it. Before its items too, the
//! values of their keys go in the value catalog (`values.rs`).
//!
//! The item sets a layout version added are written from its cut on
//! only (`cuts.rs`): the fill owns their buckets before it.
//!
//! This is the pipeline's one retry loop for item writes: the store returns
//! each item's result and only the failed items are sent again.

mod changes;
mod chunk;
mod counts;
mod cuts;
mod merged;
mod statistics;
mod values;

pub use counts::FlushStats;
pub use merged::Merged;

use crate::aggregate::{AggKey, Generation, IdentityCollision, KeyValues, Shape};
use dashmap::DashMap;
use futures::stream::{self, StreamExt, TryStreamExt};
use rustc_hash::FxBuildHasher;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use thiserror::Error;
use zigzag_core::retry::{RetryPolicy, Retryable};
use zigzag_core::schema::DimError;
use zigzag_core::table::{AttrValue, Item, SortedTable, TableError, UpdateOutcome, UpdateRequest};
use zigzag_model::measure::update::{
    extremes_of, plan_sketch_update, plan_update, remembered_extremes, sketch_key, ItemWrite, SketchWrite,
};
use zigzag_model::measure::Partial;
use zigzag_model::stats::BinStats;
use zigzag_model::MeasureValue;
use zigzag_model::{Config, ConfigError, KeyModel, MeasureSet, MeasureValues, Projections};

#[derive(Debug, Error)]
pub enum FlushError {
    #[error("store: {0}")]
    Table(#[from] TableError),
    #[error("item key: {0}")]
    Key(#[from] DimError),
    #[error("item {pk} did not converge after {attempts} conditional attempts")]
    NoConvergence { pk: String, attempts: u32 },
    #[error("item {pk}: {why}")]
    Corrupt { pk: String, why: String },
    #[error("item {pk}: {why}")]
    Overflow { pk: String, why: String },
}

impl Retryable for FlushError {
    fn is_retryable(&self) -> bool {
        matches!(self, FlushError::Table(e) if e.is_retryable())
    }
}

/// Writes that only move an attribute upwards: a refusal means the store
/// has it already (a replay, or another worker's), never a failure.
#[derive(Debug, Clone, Copy)]
enum Upward {
    ChangeMarks,
    Values,
}

impl Upward {
    /// Counts `sent` writes of this kind.
    fn count(self, stats: &FlushStats, sent: u64) {
        match self {
            Upward::ChangeMarks => {
                stats.change_writes.fetch_add(sent, Ordering::Relaxed);
                metrics::counter!("zigzag_ingest_change_mark_writes_total").increment(sent);
            }
            Upward::Values => {
                stats.value_writes.fetch_add(sent, Ordering::Relaxed);
                metrics::counter!("zigzag_ingest_value_catalog_writes_total").increment(sent);
            }
        }
    }
}

/// The writer of one flush: a lane's mark and the flush number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Writer {
    pub lane: u32,
    pub k: u64,
}

pub struct Flusher {
    /// Every projection a flush writes (the base first, if written).
    projections: Projections,
    /// Per projection: what it keeps of the finest partials.
    shapes: Vec<Shape>,
    /// The item sets (a projection's rollup), numbered in layout order.
    sets: Vec<zigzag_model::projection::ItemSet>,
    /// Stored minima and maxima of items this worker wrote lately (by a
    /// hash of the key), so a flush that moves them writes once
    /// (`remembered_extremes`). Empty when no measure is a min or max.
    extremes: DashMap<u64, smallvec::SmallVec<[Option<i64>; 2]>, FxBuildHasher>,
    remember: bool,
    /// Sketch items as this worker's last write of them left them (by a
    /// hash of the key), so the next merge into one is written at once
    /// under its version instead of after a refused attempt; bounded by
    /// `sketch_bytes`.
    sketches: DashMap<u64, Item, FxBuildHasher>,
    sketch_bytes: AtomicU64,
    /// The value catalog's (dimension, value) pairs this flusher recorded,
    /// and their day (`values.rs`).
    recorded: values::Recorded,
    set: MeasureSet,
    aggregates: Arc<dyn SortedTable>,
    concurrency: usize,
    retry: RetryPolicy,
    statistics: statistics::StatisticsWriter,
    /// Item sets a layout version added, and the cut their buckets are
    /// written from (`zigzag_model::versions`): the fill writes those
    /// before it, so a partial of an earlier bucket is not written here.
    written_from: std::sync::RwLock<cuts::Cuts>,
    pub stats: FlushStats,
}

impl Flusher {
    pub fn new(
        projections: Projections,
        config: &Config,
        aggregates: Arc<dyn SortedTable>,
    ) -> Result<Self, ConfigError> {
        let per_prefix = (0..projections.max_prefixes()).map(|_| AtomicU64::new(0)).collect();
        let shapes = projections
            .iter()
            .enumerate()
            .map(|(i, p)| Shape {
                projection: i as u8,
                dims: (!p.is_base()).then(|| p.dim_positions().to_vec()),
                rollups: p.rollups().collect(),
            })
            .collect();
        let sets = config.item_sets();
        let set = config.measure_set()?;
        let remember = set.measures().iter().any(|m| {
            matches!(m.kind, zigzag_model::measure::MeasureKind::Min | zigzag_model::measure::MeasureKind::Max)
        });
        Ok(Flusher {
            extremes: DashMap::with_hasher(FxBuildHasher),
            remember,
            sketches: DashMap::with_hasher(FxBuildHasher),
            sketch_bytes: AtomicU64::new(0),
            recorded: Default::default(),
            projections,
            shapes,
            sets,
            set,
            aggregates,
            concurrency: config.flush.concurrency,
            retry: RetryPolicy::default(),
            statistics: Default::default(),
            written_from: Default::default(),
            stats: FlushStats { per_prefix, ..Default::default() },
        })
    }

    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// The merged partials of the shards `keep` accepts (by index), ready
    /// to write under any writer. Partials of other shards (leases lost
    /// before the flush) are dropped: the new owner reads them again.
    pub fn merge(&self, gen: Generation, keep: impl Fn(u32) -> bool) -> Result<Merged, IdentityCollision> {
        Ok(Merged { partials: gen.into_projections(&self.set, &self.shapes, keep)? })
    }

    /// Writes the item sets layout versions added only from their cut on
    /// (the fill owns the buckets before it; nothing holds them for a
    /// counted one).
    pub fn adopt(&self, adopted: &zigzag_model::versions::Adopted) {
        *self.written_from.write().unwrap_or_else(|e| e.into_inner()) = cuts::Cuts::of(&self.projections, adopted);
    }

    /// The item sets, numbered in layout order.
    pub fn item_sets(&self) -> &[zigzag_model::projection::ItemSet] {
        &self.sets
    }

    /// The layout's measures (what every partial holds).
    pub fn measures(&self) -> &MeasureSet {
        &self.set
    }

    /// What deriving `sets` (None: every one) takes of the finest partials.
    pub fn shapes(&self, sets: Option<&[u16]>) -> Vec<Shape> {
        let Some(sets) = sets else { return self.shapes.clone() };
        let mut shapes: Vec<Shape> = Vec::new();
        for &s in sets {
            let Some(set) = self.sets.get(s as usize) else { continue };
            let base = &self.shapes[set.index];
            match shapes.iter_mut().find(|x| x.projection == base.projection) {
                Some(x) => x.rollups.push(set.rollup),
                None => shapes.push(Shape { rollups: vec![set.rollup], ..base.clone() }),
            }
        }
        shapes
    }

    /// The partials of `shapes` from the shards `keep` accepts.
    pub fn merge_shapes(
        &self,
        gen: Generation,
        shapes: &[Shape],
        keep: impl Fn(u32) -> bool,
    ) -> Result<Merged, IdentityCollision> {
        Ok(Merged { partials: gen.into_projections(&self.set, shapes, keep)? })
    }

    fn projection(&self, key: AggKey) -> &KeyModel {
        self.projections.get(key.projection as usize).expect("merged by these projections")
    }

    /// Sends upward-only writes until each is applied or refused (already
    /// there), retrying what failed retryably: every such write of a flush
    /// goes through this one loop.
    async fn write_upward(&self, mut todo: Vec<UpdateRequest>, kind: Upward) -> Result<(), FlushError> {
        let mut failed_rounds = 0;
        while !todo.is_empty() {
            let sent = todo.len() as u64;
            self.stats.write_requests.fetch_add(sent, Ordering::Relaxed);
            metrics::counter!("zigzag_ingest_write_requests_total").increment(sent);
            kind.count(&self.stats, sent);
            let results = match self.aggregates.update_batch(&todo).await {
                Ok(r) => r,
                Err(e) if e.is_retryable() => {
                    todo.iter().map(|_| Err(TableError::Unavailable(e.to_string()))).collect()
                }
                Err(e) => return Err(e.into()),
            };
            let mut again = Vec::new();
            let mut last_error = None;
            for (req, result) in todo.drain(..).zip(results) {
                match result {
                    // Refused: the store holds it, or a later one, already.
                    Ok(UpdateOutcome::Applied(_) | UpdateOutcome::ConditionFailed(_)) => {}
                    Err(e) if e.is_retryable() => {
                        last_error = Some(e);
                        again.push(req);
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            if let Some(e) = last_error {
                let n = again.len() as u64;
                self.stats.retries.fetch_add(n, Ordering::Relaxed);
                metrics::counter!("zigzag_ingest_store_retries_total").increment(n);
                if !self.retry.pause(&mut failed_rounds, &AtomicU64::new(0)).await {
                    return Err(e.into());
                }
            }
            todo = again;
        }
        Ok(())
    }

    /// The measures of a prepared write's projection.
    fn set_of(&self, p: &Prepared) -> &MeasureSet {
        self.projections.get(p.projection as usize).expect("prepared by these projections").measures()
    }

    /// Writes merged partials under `writer`. Can be called again after a
    /// failure: what was applied is skipped.
    pub async fn write(&self, merged: &Merged, writer: Writer) -> Result<(), FlushError> {
        // A full memory holds items of past buckets too: start it over with
        // this flush's (the keys written now are the ones written next).
        if self.extremes.len() >= EXTREMES_REMEMBERED {
            self.extremes.clear();
        }
        if self.sketch_bytes.load(Ordering::Relaxed) >= SKETCHES_REMEMBERED_BYTES {
            self.sketches.clear();
            self.sketch_bytes.store(0, Ordering::Relaxed);
        }
        // Locate every partial (cheap), then build full item keys one
        // partition at a time: the flush's extra memory is the compact
        // partials plus one partition's writes, not every item key at once.
        let from = self.written_from.read().unwrap_or_else(|e| e.into_inner()).clone();
        let mut located: Vec<Located> = merged
            .partials
            .iter()
            .filter(|(key, _)| from.writes(key))
            .map(|(&key, p)| {
                let keys = self.projection(key);
                let prefix = keys.prefix(key.id(), key.rollup, key.bucket, writer.lane, writer.k);
                ((key.projection, key.rollup, key.rollup.bin().start_of(key.bucket), prefix), key, p)
            })
            .collect();
        // Every prefix of a bin together: the bin's slices are done when
        // its partitions are (below).
        located.sort_unstable_by_key(|(loc, _, _)| *loc);
        let mut statistics = statistics::FlushStatistics::default();
        let mut slices = changes::Slices::new();
        let mut bins: BTreeMap<(u8, zigzag_model::Rollup, i64), Bin> = BTreeMap::new();
        for (i, ((projection, rollup, bin, prefix), key, (_, names))) in located.iter().enumerate() {
            let slice = (*projection, *rollup, zigzag_model::changes::slice_start(*rollup, key.bucket));
            slices.insert(slice);
            let b = bins.entry((*projection, *rollup, *bin)).or_default();
            b.slices.insert(slice);
            // One partition per prefix: counted at its first item.
            if i == 0 || located[i - 1].0 != located[i].0 {
                *b.partitions.get_mut() += 1;
            }
            let s = statistics.entry((*projection, *rollup, *bin)).or_insert_with(|| BinStats::new(key.bucket));
            s.add(*rollup, *prefix, key.bucket, key.id());
            let keys = self.projection(*key);
            if keys.partition_dim().is_some() {
                let strs: smallvec::SmallVec<[&str; 4]> = names.iter().collect();
                if let Some(value) = keys.partition_value(&strs) {
                    s.add_value(value);
                }
            }
        }
        // Partitions at once: one for stores that serialize writes
        // (SQLite); many for DynamoDB, whose store bounds the requests in
        // flight itself, so small partitions do not serialize the flush
        // and concurrent writes land on different partition keys.
        let partitions_in_flight = self.aggregates.write_parallelism().clamp(1, 64);
        let mark = zigzag_lease::mark_attr(writer.lane);
        // Futures collected first, not built in a stream closure: keeps the
        // flush future `Send` for any caller (rust-lang/rust#102211). The
        // last partition of a bin written says its slices are done: a long
        // flush (a backlog) leaves each slice busy only while its own items
        // are written, and `gather serve` keeps what it reads of the others.
        let partitions: Vec<_> = located
            .chunk_by(|a, b| a.0 == b.0)
            .map(|partition| {
                let (projection, rollup, bin, _) = partition[0].0;
                let bin = &bins[&(projection, rollup, bin)];
                let (mark, from) = (&mark, &from);
                async move {
                    self.write_partition(partition, from, mark, writer.k).await?;
                    if bin.partitions.fetch_sub(1, Ordering::AcqRel) == 1 {
                        self.write_changes(&bin.slices, writer, changes::Phase::Done).await?;
                    }
                    Ok::<(), FlushError>(())
                }
            })
            .collect();
        self.write_changes(&slices, writer, changes::Phase::Begin).await?;
        self.write_values(&located).await?;
        stream::iter(partitions).buffer_unordered(partitions_in_flight).try_collect::<()>().await?;
        let sent = self
            .statistics
            .write(self.aggregates.as_ref(), &self.projections, statistics, &self.retry, &self.stats.retries)
            .await;
        self.stats.write_requests.fetch_add(sent, Ordering::Relaxed);
        self.stats.statistics_writes.fetch_add(sent, Ordering::Relaxed);
        metrics::counter!("zigzag_ingest_write_requests_total").increment(sent);
        self.stats.flushes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// One partition's items, in key order (a chunk then touches
    /// neighbouring B-tree pages: SQLite writes each dirty page once per
    /// transaction), CHUNK per store call.
    async fn write_partition(
        &self,
        partition: &[Located<'_>],
        cuts: &cuts::Cuts,
        mark: &str,
        k: u64,
    ) -> Result<(), FlushError> {
        let mut writes = Vec::with_capacity(partition.len());
        for ((_, _, _, prefix), key, (p, names)) in partition {
            self.prepare(*key, *prefix, p.values(&self.set), cuts, names.clone(), &mut writes)?;
        }
        writes.sort_unstable_by(|a, b| a.sk.cmp(&b.sk));
        let in_flight = self.concurrency.div_ceil(CHUNK).max(1);
        let chunks: Vec<_> = writes.chunks(CHUNK).map(|chunk| self.write_chunk(chunk, mark, k)).collect();
        stream::iter(chunks).buffer_unordered(in_flight).try_collect::<()>().await
    }

    /// The key's item write, and one write per non-empty sketch (its own item).
    fn prepare(
        &self,
        key: AggKey,
        prefix: u32,
        m: MeasureValues,
        cuts: &cuts::Cuts,
        values: KeyValues,
        out: &mut Vec<Prepared>,
    ) -> Result<(), FlushError> {
        let rollup = key.rollup;
        let keys = self.projection(key);
        let m = if keys.is_base() { m } else { keys.project_values(&m) };
        let m = cuts.measured(&key, m, keys.measures());
        let strs: smallvec::SmallVec<[&str; 4]> = values.iter().collect();
        let sk = keys.sort_key(rollup, key.bucket, &strs, key.id())?;
        let pk = keys.item_partition_key(prefix, rollup, rollup.bin().start_of(key.bucket), &strs);
        let expires = keys.retention().expires_at(rollup, key.bucket);
        drop(strs);
        let sketches: smallvec::SmallVec<[usize; 2]> =
            m.0.iter()
                .enumerate()
                .filter(|(_, v)| matches!(v, MeasureValue::Sketch(s) if !s.is_empty()))
                .map(|(i, _)| i)
                .collect();
        let measures = Arc::new(m);
        for i in sketches {
            out.push(Prepared {
                pk: pk.clone(),
                sk: sketch_key(&sk, i),
                projection: key.projection,
                prefix,
                bucket: key.bucket,
                expires,
                values: values.clone(),
                measures: measures.clone(),
                sketch: Some(i),
            });
        }
        out.push(Prepared {
            pk,
            sk,
            projection: key.projection,
            prefix,
            bucket: key.bucket,
            expires,
            values,
            measures,
            sketch: None,
        });
        Ok(())
    }
}

/// A merged partial with where its item goes: (projection, rollup,
/// partition start, prefix) first, for sorting into partitions, every
/// prefix of a bin together.
type Located<'a> = ((u8, zigzag_model::Rollup, i64, u32), AggKey, &'a (Partial, KeyValues));

/// One (projection, rollup, bin) of a flush: its slices, and its
/// partitions (one per prefix) still being written.
#[derive(Default)]
struct Bin {
    slices: changes::Slices,
    partitions: std::sync::atomic::AtomicUsize,
}

/// An item write with its keys computed.
struct Prepared {
    pk: String,
    sk: Vec<u8>,
    /// Its projection's index.
    projection: u8,
    prefix: u32,
    bucket: i64,
    /// The item's `expires` (its rollup's retention; None: forever).
    expires: Option<i64>,
    values: KeyValues,
    /// The key's values in its projection's measures (shared by its item
    /// and sketch writes).
    measures: Arc<MeasureValues>,
    /// The measure whose sketch item this is (None: the key's item).
    sketch: Option<usize>,
}

/// Items whose stored min/max a flusher remembers (~60 bytes each, ~16 MB):
/// enough for the keys a steady stream rewrites every flush; a bigger
/// flush (a backfill) remembers its first items only.
const EXTREMES_REMEMBERED: usize = 1 << 18;

/// Memory for remembered sketch items (a dense sketch at p = 14 is 12 KB;
/// sparse ones a few bytes each): past it, the next flush starts over.
const SKETCHES_REMEMBERED_BYTES: u64 = 64 << 20;

fn item_hash(pk: &str, sk: &[u8]) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(pk.as_bytes());
    h.update(&[0]);
    h.update(sk);
    h.digest()
}

/// Item updates per store call: one SQLite transaction (larger ones write
/// each dirty page fewer times); stores that send one request per item
/// bound their own concurrency within a call.
const CHUNK: usize = 4096;
