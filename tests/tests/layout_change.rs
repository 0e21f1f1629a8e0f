//! A layout change applied to a table ingest wrote (`gather layout
//! apply`'s steps: `relayout::diff`, `version_changes`, `cut`,
//! `versions::record`, `fill`), through the real pipeline into SQLite:
//! version 1 written from one stream, version 2 recorded (a projection
//! by campaign added, and a day rollup added to `cc`), filled (killed part
//! way by a failing write, then run again), more events ingested under
//! version 2 (some before the cut: late, source only), filled again. Every
//! item of every target then equals, attribute for attribute (sketches
//! byte for byte), the item ingest writes into a table that had version 2
//! from the start, and the planner read a target only where it was
//! derived at its source's current marks.

use async_trait::async_trait;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use zigzag_core::table::{
    AttrValue, DeleteOutcome, DeleteRequest, Item, ItemResult, QueryPage, QueryRequest, SortKeyCondition, SortedTable,
    TableError, UpdateOutcome, UpdateRequest,
};
use zigzag_gather::relayout::apply::{cut, version_changes};
use zigzag_gather::relayout::fill::{fill, FillOptions, Totals};
use zigzag_ingest::{Pipeline, PipelineOptions};
use zigzag_loadgen::{GenConfig, Generator, SyntheticSource};
use zigzag_model::layout::Layout;
use zigzag_model::versions::{self, Version};
use zigzag_model::{Config, Projections, Rollup};
use zigzag_sqlite::SqliteTable;

const T0: i64 = 1_795_132_800_000; // 2026-11-20T00:00:00Z
const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;

const MEASURES: &str = r#"
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

fn v1() -> Config {
    Config::from_toml(&format!("rollups = [\"minute\", \"hour\"]\n{MEASURES}rollups = [\"minute\", \"hour\"]\n[flush]\ninterval_ms = 100\n"))
        .expect("v1")
}

fn v2() -> Config {
    Config::from_toml(&format!(
        "rollups = [\"minute\", \"hour\"]\n{MEASURES}rollups = [\"minute\", \"hour\", \"day\"]\n\
         [[projection]]\nname = \"by_campaign\"\ndimensions = [\"campaign\"]\nrollups = [\"minute\", \"hour\", \"day\"]\n\
         [flush]\ninterval_ms = 100\n"
    ))
    .expect("v2")
}

fn generator(seed: u64, start_ms: i64, span_ms: i64, late: f64) -> Generator {
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
async fn ingest(config: &Config, gen: &Generator, db: &Path, stream: &str) {
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
    tokio::time::timeout(Duration::from_secs(120), p.run(CancellationToken::new())).await.expect("in time").expect("run");
}

/// A table whose `put_batch` fails once `fail_after` batches went through
/// (a fill killed part way: what it put stays).
struct FailingPuts {
    inner: SqliteTable,
    left: AtomicI64,
}

#[async_trait]
impl SortedTable for FailingPuts {
    async fn get(&self, pk: &str, sk: &[u8]) -> Result<Option<Item>, TableError> {
        self.inner.get(pk, sk).await
    }
    async fn put(&self, item: Item) -> Result<(), TableError> {
        self.inner.put(item).await
    }
    async fn put_batch(&self, items: Vec<Item>) -> Result<(), TableError> {
        if self.left.fetch_sub(1, Ordering::SeqCst) <= 0 {
            return Err(TableError::Unavailable("killed".into()));
        }
        self.inner.put_batch(items).await
    }
    async fn update(&self, req: &UpdateRequest) -> Result<UpdateOutcome, TableError> {
        self.inner.update(req).await
    }
    async fn delete(&self, req: &DeleteRequest) -> Result<DeleteOutcome, TableError> {
        self.inner.delete(req).await
    }
    async fn query(&self, req: &QueryRequest) -> Result<QueryPage, TableError> {
        self.inner.query(req).await
    }
    async fn update_batch(&self, reqs: &[UpdateRequest]) -> Result<Vec<ItemResult>, TableError> {
        self.inner.update_batch(reqs).await
    }
    fn write_parallelism(&self) -> usize {
        self.inner.write_parallelism()
    }
}

async fn run_fill(table: &dyn SortedTable, version: &Version) -> Result<Totals, zigzag_gather::GatherError> {
    let opts = FillOptions { rcu_per_sec: None, wcu_per_sec: None, concurrency: 4, now_ms: T0 + 3 * DAY };
    fill(table, &v1(), &v2(), version, &opts, &mut |_| {}).await
}

/// Every item of `projection`'s `rollup` in `[from, to)`, by (pk without
/// its prefix, sk), without writers' marks and sketch versions.
async fn items(table: &dyn SortedTable, projection: &str, rollup: Rollup, from: i64, to: i64) -> BTreeMap<(String, Vec<u8>), Item> {
    let ps = Projections::new(&v2()).unwrap();
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

fn described(items: &BTreeMap<(String, Vec<u8>), Item>, key: &(String, Vec<u8>)) -> String {
    items.get(key).map_or("absent".into(), |i| {
        i.attrs.iter().map(|(k, v)| format!("{k}={}", match v { AttrValue::B(b) => format!("{} bytes", b.len()), v => format!("{v:?}") })).collect::<Vec<_>>().join(", ")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filled_layout_change_equals_ingest_with_the_new_layout_from_the_start_after_a_kill_and_late_events() {
    let _ = tracing_subscriber::fmt().with_env_filter("warn").with_test_writer().try_init();
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.db"), dir.path().join("b.db"));
    // Six hours, then eight more across midnight, some of them late (before
    // the cut, after the change).
    let first = generator(1, T0 + 10 * HOUR, 6 * HOUR, 0.0);
    let second = generator(2, T0 + 20 * HOUR, 8 * HOUR, 0.1);

    ingest(&v1(), &first, &a, "first").await;
    let table = SqliteTable::open(&a).unwrap();
    let stored = versions::load(&table).await.unwrap().expect("recorded");
    let (old_ps, new_ps) = (Projections::new(&v1()).unwrap(), Projections::new(&v2()).unwrap());
    let new_layout = Layout::of(&v2());
    let priced = zigzag_gather::relayout::diff(&table, stored.layout(), &old_ps, &new_layout, &new_ps, T0).await.unwrap();
    let changes = version_changes(&priced, &old_ps, &new_ps).expect("applicable");
    let targets: Vec<(String, Rollup, String)> =
        changes.fills.iter().map(|f| (f.projection.clone(), f.rollup, f.source.clone())).collect();
    assert_eq!(targets.len(), 4, "by_campaign minute, hour, day and cc day: {targets:?}");
    assert!(changes.counted.is_empty());
    let (span, _, _) = zigzag_gather::kept_span(&table, &old_ps).await.unwrap();
    let cut_ms = cut(&changes, T0 + 16 * HOUR, span.map(|w| w.end));
    assert_eq!(cut_ms, T0 + DAY, "the day target's first edge after the data");
    let version = versions::record(&table, 1, &new_layout, cut_ms, changes, T0).await.unwrap();
    let lost = versions::record(&table, 1, &new_layout, cut_ms, Default::default(), T0).await;
    assert!(lost.is_err(), "a second apply of version 2 is refused");

    // Killed after a few batches, then run again: it converges.
    let failing = FailingPuts { inner: SqliteTable::open(&a).unwrap(), left: AtomicI64::new(3) };
    assert!(run_fill(&failing, &version).await.is_err(), "the kill");
    let totals = run_fill(&table, &version).await.unwrap();
    assert!(totals.derived > 0 && totals.pending == 0, "{totals:?}");
    let again = run_fill(&table, &version).await.unwrap();
    assert_eq!((again.derived, again.current), (0, totals.units), "nothing to do: every unit current");
    let filling = zigzag_gather::relayout::filling(&table, &version, T0, cut_ms).await.unwrap();
    assert!(filling.is_empty(), "every target readable: {:?}", filling.notes().collect::<Vec<_>>());

    // Version 2's workers: targets written from the cut on; late events
    // before it reach the sources only, so the targets are stale there.
    let filled = items(&table, "by_campaign", Rollup::Minute, T0, cut_ms).await;
    let sources = items(&table, "cc", Rollup::Minute, T0, cut_ms).await;
    assert!(!filled.is_empty());
    ingest(&v2(), &second, &a, "second").await;
    let after = items(&table, "by_campaign", Rollup::Minute, T0, cut_ms).await;
    assert!(filled == after, "no worker wrote a target's bucket before the cut (the fill owns them)");
    assert!(items(&table, "cc", Rollup::Minute, T0, cut_ms).await != sources, "events before the cut reached the source");
    let filling = zigzag_gather::relayout::filling(&table, &version, T0, T0 + 2 * DAY).await.unwrap();
    for (p, r) in [("by_campaign", Rollup::Minute), ("by_campaign", Rollup::Hour), ("cc", Rollup::Day)] {
        let e = filling.readable(p, r, T0).unwrap_err();
        assert!(e.contains("filling:") && e.contains("read from"), "{e}");
        assert!(filling.readable(p, r, cut_ms).is_ok(), "from the cut on, the workers'");
    }
    let refill = run_fill(&table, &version).await.unwrap();
    assert!(refill.derived > 0 && refill.pending == 0, "the late events' bins derived again: {refill:?}");
    let filling = zigzag_gather::relayout::filling(&table, &version, T0, T0 + 2 * DAY).await.unwrap();
    assert!(filling.is_empty(), "{:?}", filling.notes().collect::<Vec<_>>());

    // The reference: version 2 from the start, the same two streams.
    ingest(&v2(), &first, &b, "first").await;
    ingest(&v2(), &second, &b, "second").await;
    let reference = SqliteTable::open(&b).unwrap();
    for (projection, rollup) in
        [("by_campaign", Rollup::Minute), ("by_campaign", Rollup::Hour), ("by_campaign", Rollup::Day), ("cc", Rollup::Day)]
    {
        let (mine, theirs) = (
            items(&table, projection, rollup, T0 - DAY, T0 + 3 * DAY).await,
            items(&reference, projection, rollup, T0 - DAY, T0 + 3 * DAY).await,
        );
        assert!(!theirs.is_empty());
        let keys: std::collections::BTreeSet<_> = mine.keys().chain(theirs.keys()).collect();
        let differ: Vec<String> = keys
            .into_iter()
            .filter(|k| mine.get(*k).map(|i| &i.attrs) != theirs.get(*k).map(|i| &i.attrs))
            .take(3)
            .map(|k| format!("{k:?}: filled {} / ingested {}", described(&mine, k), described(&theirs, k)))
            .collect();
        assert!(differ.is_empty(), "{projection} {rollup}: {} items vs {}: {differ:#?}", mine.len(), theirs.len());
    }
}
