//! What the layout-change tests share: the two layouts (version 1 with a
//! `cc` projection; version 2 adding `by_campaign` and a day rollup), the
//! traffic, one worker ingesting a stream into SQLite, the fill, and the
//! item-for-item comparison of two tables.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use zigzag_core::table::{AttrValue, Item, QueryRequest, SortKeyCondition, SortedTable};
use zigzag_gather::relayout::fill::{fill, FillOptions, Totals};
use zigzag_ingest::{Pipeline, PipelineOptions};
use zigzag_loadgen::{GenConfig, Generator, SyntheticSource};
use zigzag_model::versions::Version;
use zigzag_model::{Config, Projections, Rollup};
use zigzag_sqlite::SqliteTable;

pub const T0: i64 = 1_795_132_800_000; // 2026-11-20T00:00:00Z
pub const HOUR: i64 = 3_600_000;
pub const DAY: i64 = 24 * HOUR;

pub const MEASURES: &str = r#"
[[measure]]
name = "clicks"
type = "count"
where = "type = click"
[[measure]]
name = "impressions"
type = "count"
where = "type = impression"
[[measure]]
name = "cost"
type = "sum"
field = "cost"
[[measure]]
name = "cost_max"
type = "max"
field = "cost"
[[measure]]
name = "users"
type = "distinct"
field = "user_id"
[[measure]]
name = "cost_q"
type = "quantile"
field = "cost"
[[projection]]
name = "cc"
dimensions = ["campaign", "country"]
"#;

/// Measures a version adds: `cost_min` declared before `cost_max`, and
/// `clickers` (a distinct count of clicking users) before `users`, so the
/// sketch items of `users` and `cost_q` move to other sort keys.
pub const GAINED: [&str; 2] = ["cost_min", "clickers"];

/// [`MEASURES`] with [`GAINED`] declared among them (every projection that
/// names no measures keeps them all, so gains them).
pub fn measures_gained() -> String {
    let measures = MEASURES
        .replace(
            "[[measure]]\nname = \"cost_max\"",
            "[[measure]]\nname = \"cost_min\"\ntype = \"min\"\nfield = \"cost\"\n[[measure]]\nname = \"cost_max\"",
        )
        .replace(
            "[[measure]]\nname = \"users\"",
            "[[measure]]\nname = \"clickers\"\ntype = \"distinct\"\nfield = \"user_id\"\nwhere = \"type = click\"\n\
             [[measure]]\nname = \"users\"",
        );
    assert_ne!(measures, MEASURES);
    measures
}

pub fn v1() -> Config {
    measuring(MEASURES)
}

/// Version 1's layout with `measures` (and its `cc` projection) in place
/// of [`MEASURES`].
pub fn measuring(measures: &str) -> Config {
    Config::from_toml(&format!(
        "rollups = [\"minute\", \"hour\"]\n{measures}rollups = [\"minute\", \"hour\"]\n[flush]\ninterval_ms = 100\n"
    ))
    .expect("a layout")
}

/// `gather layout apply`'s first step on `table`: `new` against the
/// table's layout, priced, with both layouts' projections.
pub struct Diffed {
    pub priced: Vec<zigzag_gather::relayout::Priced>,
    pub old: Projections,
    pub new: Projections,
    pub layout: zigzag_model::layout::Layout,
}

pub async fn diffed(table: &dyn SortedTable, old: &Config, new: &Config) -> Diffed {
    let stored = zigzag_model::versions::load(table).await.unwrap().expect("recorded");
    let (old, new_ps) = (Projections::new(old).unwrap(), Projections::new(new).unwrap());
    let layout = zigzag_model::layout::Layout::of(new);
    let priced = zigzag_gather::relayout::diff(table, stored.layout(), &old, &layout, &new_ps, T0).await.unwrap();
    Diffed { priced, old, new: new_ps, layout }
}

/// An item's bucket start (its time attribute).
pub fn bucket(item: &Item) -> i64 {
    match item.attrs.get(zigzag_model::rollup::TIME_ATTR) {
        Some(AttrValue::N(t)) => i64::try_from(*t).expect("a time"),
        other => panic!("an item's time is {other:?}"),
    }
}

pub fn v2() -> Config {
    Config::from_toml(&format!(
        "rollups = [\"minute\", \"hour\"]\n{MEASURES}rollups = [\"minute\", \"hour\", \"day\"]\n\
         [[projection]]\nname = \"by_campaign\"\ndimensions = [\"campaign\"]\nrollups = [\"minute\", \"hour\", \"day\"]\n\
         [flush]\ninterval_ms = 100\n"
    ))
    .expect("v2")
}

pub fn generator(seed: u64, start_ms: i64, span_ms: i64, late: f64) -> Generator {
    Generator::new(GenConfig {
        seed,
        shards: 2,
        records: 6_000,
        start_ms,
        span_ms,
        late_fraction: late,
        late_max_ms: 3 * HOUR,
        referrers: 100,
        campaigns: 12,
        malformed_fraction: 0.0,
        ..GenConfig::default()
    })
}

/// One worker reads all of `gen` (stream `stream`) into `db` under `config`.
pub async fn ingest(config: &Config, gen: &Generator, db: &Path, stream: &str) {
    let opts = PipelineOptions {
        failover: Duration::from_secs(5),
        max_pause: Duration::from_millis(200),
        batch_size: 200,
        ..PipelineOptions::new(config.clone(), stream, "w1", db.with_file_name(format!("dead-{stream}.jsonl")))
    };
    let aggregates: Arc<dyn SortedTable> = Arc::new(SqliteTable::open(db).unwrap());
    let leases: Arc<dyn SortedTable> = Arc::new(SqliteTable::open_table(db, "checkpoints").unwrap());
    let source = Arc::new(SyntheticSource::new(gen.clone(), None));
    let p = Arc::new(Pipeline::new(source, aggregates, leases, opts).unwrap());
    tokio::time::timeout(Duration::from_secs(120), p.run(CancellationToken::new()))
        .await
        .expect("in time")
        .expect("run");
}

pub async fn run_fill(table: &dyn SortedTable, version: &Version) -> Result<Totals, zigzag_gather::GatherError> {
    fill_with(table, &v1(), &v2(), version).await
}

pub async fn fill_with(
    table: &dyn SortedTable,
    old: &Config,
    new: &Config,
    version: &Version,
) -> Result<Totals, zigzag_gather::GatherError> {
    let opts = FillOptions { rcu_per_sec: None, wcu_per_sec: None, concurrency: 4, now_ms: T0 + 3 * DAY };
    fill(table, old, new, version, &opts, &mut |_| {}).await
}

/// Every item of `projection`'s `rollup` in `[from, to)`, by (pk without
/// its prefix, sk), without writers' marks and sketch versions.
pub async fn items(table: &dyn SortedTable, projection: &str, rollup: Rollup, from: i64, to: i64) -> Items {
    items_of(table, &v2(), projection, rollup, from, to).await
}

pub async fn items_of(
    table: &dyn SortedTable,
    config: &Config,
    projection: &str,
    rollup: Rollup,
    from: i64,
    to: i64,
) -> Items {
    let ps = Projections::new(config).unwrap();
    let km = ps.by_name(projection).unwrap();
    let mut out = BTreeMap::new();
    let mut bin = rollup.bin().start_of(from);
    while bin < to {
        for prefix in 0..km.prefixes() {
            let pk = km.partition_key(prefix, rollup, bin);
            let mut req = QueryRequest::new(pk.clone(), SortKeyCondition::Any);
            req.consistent = true;
            for mut item in zigzag_core::query::run_key_range(table, req).await.unwrap().items {
                item.attrs.retain(|name, _| !zigzag_model::mark::is_mark(name) && name != "v");
                let unprefixed = pk.split_once('#').map_or(pk.clone(), |(_, rest)| rest.to_string());
                let key = (unprefixed, item.sk.clone());
                assert!(out.insert(key, item).is_none(), "one item per key and bucket in {projection} {rollup}");
            }
        }
        bin = rollup.bin().next_start(bin);
    }
    out
}

pub type Items = BTreeMap<(String, Vec<u8>), Item>;

/// The first few keys whose items differ (or are in one table only), each
/// with both items' attributes in words (a sketch by its length).
pub fn differing(mine: &Items, theirs: &Items) -> Vec<String> {
    let described = |items: &Items, key: &(String, Vec<u8>)| {
        items.get(key).map_or("absent".into(), |i| {
            let attr = |v: &AttrValue| match v {
                AttrValue::B(b) => format!("{} bytes", b.len()),
                v => format!("{v:?}"),
            };
            i.attrs.iter().map(|(k, v)| format!("{k}={}", attr(v))).collect::<Vec<_>>().join(", ")
        })
    };
    let keys: std::collections::BTreeSet<_> = mine.keys().chain(theirs.keys()).collect();
    keys.into_iter()
        .filter(|k| mine.get(*k).map(|i| &i.attrs) != theirs.get(*k).map(|i| &i.attrs))
        .take(3)
        .map(|k| format!("{k:?}: filled {} / ingested {}", described(mine, k), described(theirs, k)))
        .collect()
}

/// Version 2's targets: by_campaign at every rollup, cc's day rollup.
pub const TARGETS: [(&str, Rollup); 4] =
    [("by_campaign", Rollup::Minute), ("by_campaign", Rollup::Hour), ("by_campaign", Rollup::Day), ("cc", Rollup::Day)];

/// Every item of each of `parts` over the test's days equals the
/// reference's, attribute for attribute (the reference holds some).
pub async fn assert_same_items(mine: &dyn SortedTable, reference: &dyn SortedTable, parts: &[(&str, Rollup)]) {
    for &(projection, rollup) in parts {
        let (mine, theirs) = (
            items(mine, projection, rollup, T0 - DAY, T0 + 3 * DAY).await,
            items(reference, projection, rollup, T0 - DAY, T0 + 3 * DAY).await,
        );
        assert!(!theirs.is_empty());
        let differ = differing(&mine, &theirs);
        assert!(differ.is_empty(), "{projection} {rollup}: {} items vs {}: {differ:#?}", mine.len(), theirs.len());
    }
}
