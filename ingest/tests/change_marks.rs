//! A flush's change marks bracket its items: every slice it touches is
//! marked begun before the first item write and done after the last, a
//! flush that fails between them leaves its slices busy (a reader trusts
//! none of them) until it is run again, and a replay writes no new mark.

use async_trait::async_trait;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use zigzag_core::table::{
    DeleteOutcome, DeleteRequest, ItemResult, MemoryTable, QueryPage, QueryRequest, SortedTable, TableError,
    UpdateOutcome, UpdateRequest,
};
use zigzag_ingest::aggregate::{Aggregator, Generation};
use zigzag_ingest::decode::{DecodeLimits, Decoder};
use zigzag_ingest::flush::{Flusher, Writer};
use zigzag_ingest::source::RecordBatch;
use zigzag_model::changes::{self, CHANGES_PK};
use zigzag_model::{Config, Position, Projections, Rollup};

const CONFIG: &str = r#"
rollups = ["minute", "hour"]
[[dimension]]
field = "country"
bytes = 2
[[measure]]
name = "clicks"
type = "count"
where = "type = click"
"#;

/// A memory table that records what each write call touched, in order;
/// while `failing`, the item write calls after the first `items_ok` fail.
#[derive(Default)]
struct Recording {
    inner: MemoryTable,
    calls: Mutex<Vec<Vec<String>>>,
    items_ok: AtomicU32,
    failing: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl SortedTable for Recording {
    async fn put(&self, item: zigzag_core::table::Item) -> Result<(), TableError> {
        self.inner.put(item).await
    }
    async fn query(&self, req: &QueryRequest) -> Result<QueryPage, TableError> {
        self.inner.query(req).await
    }
    async fn update(&self, req: &UpdateRequest) -> Result<UpdateOutcome, TableError> {
        self.inner.update(req).await
    }
    async fn delete(&self, req: &DeleteRequest) -> Result<DeleteOutcome, TableError> {
        self.inner.delete(req).await
    }
    async fn update_batch(&self, reqs: &[UpdateRequest]) -> Result<Vec<ItemResult>, TableError> {
        let is_item = |r: &UpdateRequest| !r.pk.starts_with('#');
        if self.failing.load(Ordering::SeqCst) && reqs.iter().any(is_item) {
            let spent = self.items_ok.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_err();
            if spent {
                return Ok(reqs.iter().map(|_| Err(TableError::InvalidRequest("injected".into()))).collect());
            }
        }
        self.calls.lock().unwrap().push(reqs.iter().map(|r| r.pk.clone()).collect());
        self.inner.update_batch(reqs).await
    }
}

fn record(ts: &str, country: &str) -> String {
    format!(r#"{{"type":"click","ts":"{ts}","referrer":"r","campaign":"c","country":"{country}","url":"/"}}"#)
}

/// Clicks in two 45-minute slices of minutes (10:15, 11:40) and one day of hours.
fn generation(config: &Config) -> Generation {
    let agg = Aggregator::new(
        &Projections::new(config).unwrap(),
        Decoder::new(config, DecodeLimits::default()).unwrap(),
        config.measure_set().unwrap(),
    );
    let gen = Generation::default();
    let mut batch = RecordBatch::default();
    let events = [("2026-11-21T10:15:30Z", "DE"), ("2026-11-21T10:16:00Z", "FR"), ("2026-11-21T11:40:00Z", "DE")];
    for (i, (ts, c)) in events.iter().enumerate() {
        batch.push(Position::at(i as u64 + 1), record(ts, c).as_bytes());
    }
    agg.add_batch(&gen, 0, &batch, &mut Vec::new()).unwrap();
    gen
}

fn ms(text: &str) -> i64 {
    zigzag_core::schema::parse_instant(text, zigzag_core::schema::TimeUnit::Millisecond).unwrap()
}

async fn marks(t: &dyn SortedTable, rollup: Rollup) -> Vec<(i64, changes::SliceMarks)> {
    let (from, to) = (ms("2026-11-21T00:00:00Z"), ms("2026-11-22T00:00:00Z"));
    changes::read(t, "base", rollup, from, to).await.unwrap().into_iter().collect()
}

#[tokio::test]
async fn begun_marks_precede_every_item_and_a_bins_done_marks_follow_its_last_item() {
    let config = Config::from_toml(CONFIG).unwrap();
    let table = Arc::new(Recording::default());
    let flusher = Flusher::new(Projections::new(&config).unwrap(), &config, table.clone()).unwrap();
    let merged = flusher.merge(generation(&config), |_| true).unwrap();
    flusher.write(&merged, Writer { lane: 2, k: 5 }).await.unwrap();

    let calls = table.calls.lock().unwrap().clone();
    // Each call's partitions as (kind, rollup and bin): `c` change marks,
    // `i` items (`<prefix>#<rollup>#<bin>`), other `#` items skipped.
    let calls: Vec<(char, String)> = calls
        .iter()
        .map(|call| {
            let pk = &call[0];
            match pk.strip_prefix(CHANGES_PK) {
                Some(rest) => ('c', rest.splitn(3, '#').nth(2).unwrap_or_default().to_string()),
                None if pk.starts_with('#') => ('s', String::new()),
                None => ('i', pk.split_once('#').map(|(_, bin)| bin.to_string()).unwrap_or_default()),
            }
        })
        .filter(|(k, _)| *k != 's')
        .collect();
    let first_item = calls.iter().position(|(k, _)| *k == 'i').expect("items");
    assert_eq!(calls[0].0, 'c', "the begun marks first: {calls:?}");
    assert!(
        calls[1..first_item].iter().all(|(k, _)| *k == 'c') && first_item == 1,
        "one call of begun marks: {calls:?}"
    );
    // 10:15 and 11:40 are in two slices of minutes (45 minutes each), one day of hours: three slices, two bins.
    let dones: Vec<&(char, String)> = calls[first_item..].iter().filter(|(k, _)| *k == 'c').collect();
    assert_eq!(dones.len(), 2, "one call of done marks per bin: {calls:?}");
    for (at, (_, bin)) in calls.iter().enumerate().skip(first_item).filter(|(_, (k, _))| *k == 'c') {
        let items: Vec<usize> =
            calls.iter().enumerate().filter(|(_, (k, b))| *k == 'i' && b == bin).map(|(i, _)| i).collect();
        assert!(!items.is_empty() && items.iter().all(|&i| i < at), "{bin}: done after its items: {calls:?}");
    }
    // The minute bin is done before the hour bin's first item is written.
    fn of(kind: char, rollup: &'static str) -> impl Fn(&(char, String)) -> bool {
        move |(k, b)| *k == kind && b.starts_with(rollup)
    }
    let last_minute_item = calls.iter().rposition(of('i', "minute")).unwrap();
    let minute_done = first_item + calls[first_item..].iter().position(of('c', "minute")).unwrap();
    let first_hour_item = calls.iter().position(of('i', "hour")).unwrap();
    assert!(last_minute_item < minute_done && minute_done < first_hour_item, "{calls:?}");
    let minute = marks(table.as_ref(), Rollup::Minute).await;
    let starts: Vec<i64> = minute.iter().map(|(s, _)| *s).collect();
    assert_eq!(starts, vec![ms("2026-11-21T09:45:00Z"), ms("2026-11-21T11:15:00Z")]);
    for (_, m) in minute.iter().chain(&marks(table.as_ref(), Rollup::Hour).await) {
        assert_eq!(m.lanes.iter().collect::<Vec<_>>(), vec![(&2, &(5, 5))], "begun and done by flush 5 of lane 2");
    }
    // A replay of the same flush writes no new mark.
    let before = marks(table.as_ref(), Rollup::Minute).await;
    flusher.write(&merged, Writer { lane: 2, k: 5 }).await.unwrap();
    assert_eq!(marks(table.as_ref(), Rollup::Minute).await, before);
}

#[tokio::test]
async fn a_flush_failing_among_its_items_leaves_its_slices_busy_until_run_again() {
    let config = Config::from_toml(CONFIG).unwrap();
    let table = Arc::new(Recording::default());
    let flusher = Flusher::new(Projections::new(&config).unwrap(), &config, table.clone()).unwrap();
    let merged = flusher.merge(generation(&config), |_| true).unwrap();
    flusher.write(&merged, Writer { lane: 0, k: 1 }).await.unwrap();
    assert!(marks(table.as_ref(), Rollup::Minute).await.iter().all(|(_, m)| m.quiet()));

    table.failing.store(true, Ordering::SeqCst);
    table.items_ok.store(1, Ordering::SeqCst);
    let merged = flusher.merge(generation(&config), |_| true).unwrap();
    assert!(flusher.write(&merged, Writer { lane: 0, k: 2 }).await.is_err());
    let busy = marks(table.as_ref(), Rollup::Minute).await;
    assert!(busy.iter().all(|(_, m)| !m.quiet() && m.lanes[&0] == (2, 1)), "{busy:?}");

    table.failing.store(false, Ordering::SeqCst);
    flusher.write(&merged, Writer { lane: 0, k: 2 }).await.unwrap();
    let done = marks(table.as_ref(), Rollup::Minute).await;
    assert!(done.iter().all(|(_, m)| m.quiet() && m.lanes[&0] == (2, 2)), "{done:?}");
}
