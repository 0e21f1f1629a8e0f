//! What the exactly-once state costs on each aggregate item: the largest
//! item, the mean, the marks per item, and the DynamoDB write units a
//! write of the largest costs (1 WCU per started KB), measured on items the
//! real pipeline wrote into SQLite:
//!
//! - `shards`: 64 shards, one worker, then four workers at once;
//! - `reshards`: 8 shards resharded 10 times (a chain of 11 generations,
//!   each child reading after its parent, as after 10 splits/merges).
//!
//! Beside each, what per-shard marks (`w#<shard>`, the single-writer
//! format) would have added to the same items: one mark per shard whose
//! events reached the item, computed from the generator's records.
//!
//!     cargo run --release -p zigzag-tests --example item_size -- [records]

use async_trait::async_trait;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use zigzag_core::query::run_key_range;
use zigzag_core::table::{Item, QueryRequest, SortKeyCondition, SortedTable};
use zigzag_ingest::source::{ShardInfo, ShardReader, Source, SourceError, StartAt};
use zigzag_ingest::{Pipeline, PipelineOptions};
use zigzag_loadgen::generator::referrer_name;
use zigzag_loadgen::{GenConfig, Generated, Generator, SyntheticSource};
use zigzag_model::{Config, KeyModel, Rollup};
use zigzag_sqlite::SqliteTable;

/// `generations` × `width` shards; generation g's shard i is the child of
/// generation g-1's shard i, read from the generator's shard g·width + i.
struct Chain {
    inner: SyntheticSource,
    width: u32,
    generations: u32,
}

fn chain_id(g: u32, i: u32) -> String {
    format!("g{g:02}-s{i:02}")
}

#[async_trait]
impl Source for Chain {
    async fn shards(&self) -> Result<Vec<ShardInfo>, SourceError> {
        let mut out = Vec::new();
        for g in 0..self.generations {
            for i in 0..self.width {
                let parents = if g == 0 { vec![] } else { vec![chain_id(g - 1, i)] };
                out.push(ShardInfo { id: chain_id(g, i), parents });
            }
        }
        Ok(out)
    }

    async fn open(&self, shard: &str, start: StartAt) -> Result<Box<dyn ShardReader>, SourceError> {
        let bad = || SourceError::Shard { shard: shard.into(), message: "not a chain shard".into() };
        let (g, i) = shard.strip_prefix('g').and_then(|s| s.split_once("-s")).ok_or_else(bad)?;
        let (g, i): (u32, u32) = (g.parse().map_err(|_| bad())?, i.parse().map_err(|_| bad())?);
        let start = if start == StartAt::TrimHorizon { StartAt::Configured } else { start };
        self.inner.open(&Generator::shard_id(g * self.width + i), start).await
    }

    fn bounded(&self) -> bool {
        true
    }
}

/// Per-shard marks are named after Kinesis shard ids (`shardId-` + 12 digits).
fn kinesis_id(shard: u32) -> String {
    format!("shardId-{shard:012}")
}

fn generator(shards: u32, records: u64) -> Generator {
    Generator::new(GenConfig { seed: 17, shards, records, ..GenConfig::default() })
}

async fn ingest(source: Arc<dyn Source>, db: &std::path::Path, workers: usize, stream: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mut runs = Vec::new();
    for w in 0..workers {
        let opts = PipelineOptions::new(Config::default(), stream, format!("w{w}"), dir.path().join(format!("d{w}")));
        let aggregates: Arc<dyn SortedTable> = Arc::new(SqliteTable::open(db).unwrap());
        let leases: Arc<dyn SortedTable> = Arc::new(SqliteTable::open_table(db, "checkpoints").unwrap());
        let p = Arc::new(Pipeline::new(source.clone(), aggregates, leases, opts).unwrap());
        runs.push(tokio::spawn(p.run(CancellationToken::new())));
    }
    for r in runs {
        r.await.unwrap().expect("ingest");
    }
}

async fn items(db: &std::path::Path) -> Vec<Item> {
    let table = SqliteTable::open(db).unwrap();
    let km = KeyModel::new(&Config::default()).unwrap();
    let mut out = Vec::new();
    for prefix in 0..km.prefixes() {
        for rollup in km.rollups() {
            for day in -1..=2i64 {
                let t = 1_795_132_800_000 + day * 86_400_000;
                let req = QueryRequest::new(
                    km.partition_key(prefix, rollup, rollup.bin().start_of(t)),
                    SortKeyCondition::Any,
                );
                out.extend(run_key_range(&table, req).await.unwrap().items);
            }
        }
    }
    out
}

/// Per item key (rollup, bucket, referrer, campaign, country): the source
/// shards whose events reached it, named as `name(shard)`.
fn shards_per_key(
    gen: &Generator,
    name: impl Fn(u32) -> String,
) -> HashMap<(Rollup, i64, String, String, String), HashSet<String>> {
    let mut out: HashMap<_, HashSet<String>> = HashMap::new();
    let mut buf = Vec::new();
    for s in 0..gen.config().shards {
        for seq in 1..=gen.shard_len(s) {
            if let Generated::Valid(e) = gen.record(s, seq, &mut buf) {
                for r in Rollup::ALL {
                    let key =
                        (r, r.floor(e.ts_ms), referrer_name(e.referrer), e.campaign_name(), e.country.to_string());
                    out.entry(key).or_default().insert(name(s));
                }
            }
        }
    }
    out
}

fn report(label: &str, items: &[Item], would_be: &HashMap<(Rollup, i64, String, String, String), HashSet<String>>) {
    let sizes: Vec<usize> = items.iter().map(Item::size).collect();
    let largest = sizes.iter().copied().max().unwrap_or(0);
    let mean = sizes.iter().sum::<usize>() as f64 / sizes.len().max(1) as f64;
    let marks =
        items.iter().map(|i| i.attrs.keys().filter(|k| zigzag_model::mark::is_mark(k)).count()).max().unwrap_or(0);
    // Per-shard marks: "w#" + shard id, and a flush number (~2 bytes).
    let mark_bytes = |shards: &HashSet<String>| shards.iter().map(|s| 2 + s.len() + 2).sum::<usize>();
    let lane_mark = 3 + 2;
    let old: Vec<usize> = would_be.values().map(mark_bytes).collect();
    let old_largest = largest.saturating_sub(lane_mark) + old.iter().copied().max().unwrap_or(0);
    let old_marks = would_be.values().map(HashSet::len).max().unwrap_or(0);
    let wcu = |bytes: usize| bytes.div_ceil(1024);
    println!(
        "| {label} | {} | {largest} B ({} WCU) | {mean:.0} B | {marks} | {old_marks} | {old_largest} B ({} WCU) |",
        items.len(),
        wcu(largest),
        wcu(old_largest)
    );
}

#[tokio::main]
async fn main() {
    let records: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(200_000);
    println!("| case | items | largest item (WCU per write) | mean item | lane marks on an item, at most | per-shard marks that item would carry | largest with per-shard marks |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for workers in [1, 4] {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("z.db");
        let gen = generator(64, records);
        // Paced, so that every worker takes part.
        let rate = (workers > 1).then_some(40_000.0);
        ingest(Arc::new(SyntheticSource::new(gen.clone(), rate)), &db, workers, "s64").await;
        let would_be = shards_per_key(&gen, kinesis_id);
        report(&format!("64 shards, {workers} worker(s)"), &items(&db).await, &would_be);
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("z.db");
    let (width, generations) = (8, 11);
    let gen = generator(width * generations, records);
    let chain = Chain { inner: SyntheticSource::new(gen.clone(), None), width, generations };
    ingest(Arc::new(chain), &db, 1, "chain").await;
    let would_be = shards_per_key(&gen, kinesis_id);
    report("8 shards after 10 reshards (88 shards over the stream's life)", &items(&db).await, &would_be);
}
