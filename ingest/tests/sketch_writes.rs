//! What a distinct count's sketch items cost a flusher: with the stored
//! sketch remembered from its last write, the next flush's merge into it is
//! one write, not a refused attempt and a second one; a flusher without the
//! memory (another worker) pays the refusal and still merges exactly; a
//! flush that adds nothing new writes nothing. The store's sketches equal
//! the union of every value, register for register.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use zigzag_core::table::{MemoryTable, SortedTable};
use zigzag_gather::check::check;
use zigzag_gather::execute::ExecOptions;
use zigzag_ingest::aggregate::{Aggregator, Generation};
use zigzag_ingest::decode::{DecodeLimits, Decoder};
use zigzag_ingest::flush::{Flusher, Writer};
use zigzag_ingest::source::RecordBatch;
use zigzag_model::{Config, KeyModel, Position, Rollup, Truth};

const CONFIG: &str = r#"
rollups = ["hour", "day"]
[[dimension]]
field = "country"
bytes = 2
[[measure]]
name = "clicks"
type = "count"
where = "type = click"
[[measure]]
name = "users"
type = "distinct"
field = "user_id"
"#;

fn record(user: u32) -> String {
    format!(
        r#"{{"type":"click","ts":"2026-11-21T10:15:30Z","referrer":"r","campaign":"c","country":"DE","url":"/","user_id":"u{user}"}}"#
    )
}

/// One flush of `users`' clicks by `flusher`; returns its write requests.
async fn flush(flusher: &Flusher, agg: &Aggregator, users: std::ops::Range<u32>, k: u64, truth: &mut Truth) -> u64 {
    let config = Config::from_toml(CONFIG).unwrap();
    let (set, keys, fields) =
        (config.measure_set().unwrap(), KeyModel::new(&config).unwrap(), config.typed_fields().unwrap());
    let decoder = Decoder::new(&config, DecodeLimits::default()).unwrap();
    let gen = Generation::default();
    let mut batch = RecordBatch::default();
    for (i, u) in users.enumerate() {
        let r = record(u);
        batch.push(Position::at(i as u64 + 1), r.as_bytes());
        let e = decoder.decode(r.as_bytes()).unwrap();
        truth.records += 1;
        truth.add_event(&set, &keys, &fields, e.ts_ms, &e.values);
    }
    agg.add_batch(&gen, 0, &batch, &mut Vec::new()).unwrap();
    // Item writes: the planner's statistics, the change marks and the
    // value catalog are written besides them.
    let writes = || {
        flusher.stats.write_requests.load(Ordering::Relaxed)
            - flusher.stats.statistics_writes.load(Ordering::Relaxed)
            - flusher.stats.change_writes.load(Ordering::Relaxed)
            - flusher.stats.value_writes.load(Ordering::Relaxed)
    };
    let before = writes();
    let merged = flusher.merge(gen, |_| true).unwrap();
    flusher.write(&merged, Writer { lane: 0, k }).await.unwrap();
    writes() - before
}

#[tokio::test]
async fn a_remembered_sketch_is_merged_in_one_write_and_the_store_holds_the_union() {
    let config = Config::from_toml(CONFIG).unwrap();
    let keys = KeyModel::new(&config).unwrap();
    let agg = Aggregator::new(
        &zigzag_model::Projections::from(keys.clone()),
        Decoder::new(&config, DecodeLimits::default()).unwrap(),
        config.measure_set().unwrap(),
    );
    let table: Arc<dyn SortedTable> = Arc::new(MemoryTable::new());
    let flusher = Flusher::new(zigzag_model::Projections::from(keys.clone()), &config, table.clone()).unwrap();
    let mut truth = Truth::default();
    // One key in two rollups: two counter items and two sketch items.
    assert_eq!(flush(&flusher, &agg, 0..50, 1, &mut truth).await, 4, "new items: one write each");
    assert_eq!(flush(&flusher, &agg, 50..90, 2, &mut truth).await, 4, "remembered sketches: one write each");
    assert_eq!(flush(&flusher, &agg, 10..20, 3, &mut truth).await, 2, "nothing new for the sketches: not written");
    // Another worker, with no memory: each sketch write is refused once
    // (it assumed a new item), then merged under the stored version.
    let other = Flusher::new(zigzag_model::Projections::from(keys.clone()), &config, table.clone()).unwrap();
    assert_eq!(flush(&other, &agg, 90..120, 4, &mut truth).await, 6, "two refused first attempts");
    // The first flusher's memory is stale now: its version is refused, the
    // stored item comes back, and the merge is still exact.
    assert_eq!(flush(&flusher, &agg, 120..130, 5, &mut truth).await, 6, "a stale memory costs the refusal");

    let report = check(&*table, &zigzag_model::Projections::from(keys.clone()), &truth, 0, &ExecOptions::default())
        .await
        .unwrap();
    assert_eq!(report.mismatches(), 0, "{}", zigzag_gather::check::render(&report));
    assert!(report.rows.iter().any(|r| r.rollup == Rollup::Hour));
}
