//! The cache of unchanged slices around flushes, written by hand so each
//! moment is exact: a slice a flush is changing (begun, items written, not
//! done) is answered as it was before the flush, where a read of the table
//! shows the flush half done; once the flush is done, the answer is the
//! table's; and viewers asking at once after a flush read the slice it
//! changed once, whatever their windows.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use zigzag_core::table::*;
use zigzag_gather::execute::ExecOptions;
use zigzag_model::ScatterMode;
use zigzag_serve::engine::DEFAULT_CACHE_BYTES;
use zigzag_serve::series::Value;
use zigzag_serve::{Catalog, Engine, Limits};
use zigzag_testkit::fixture::{self, Event, Until, HOUR, MINUTE, SPAN, T0};

/// A store whose reads of aggregates take a while (so reads asked at once
/// overlap), counting them.
struct Slow {
    inner: MemoryTable,
    item_reads: AtomicU64,
}

#[async_trait::async_trait]
impl SortedTable for Slow {
    async fn put(&self, item: Item) -> Result<(), TableError> {
        self.inner.put(item).await
    }
    async fn query(&self, req: &QueryRequest) -> Result<QueryPage, TableError> {
        if !req.pk.starts_with('#') {
            self.item_reads.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.inner.query(req).await
    }
    async fn update(&self, req: &UpdateRequest) -> Result<UpdateOutcome, TableError> {
        self.inner.update(req).await
    }
    async fn delete(&self, req: &DeleteRequest) -> Result<DeleteOutcome, TableError> {
        self.inner.delete(req).await
    }
}

struct World {
    table: Arc<Slow>,
    config: zigzag_model::Config,
    /// Caching (change marks read at every query: `recheck` 0).
    cached: Engine,
    /// Reading everything every time.
    fresh: Engine,
}

async fn world() -> World {
    let config = fixture::config(4, ScatterMode::Random);
    let table = Arc::new(Slow { inner: MemoryTable::new(), item_reads: AtomicU64::new(0) });
    fixture::write_store(&table.inner, &config, &fixture::events(5, 3_000)).await;
    let engine = |bytes| {
        Engine::new(table.clone(), Catalog::new(config.clone()).unwrap(), ExecOptions::default(), Limits::default())
            .with_cache(bytes, Duration::ZERO)
    };
    World { cached: engine(DEFAULT_CACHE_BYTES), fresh: engine(0), table, config }
}

/// `sum(clicks)` at every minute of `[from, to]`: minute buckets, the
/// change marks' 45-minute slices. (Its value per step, and its infos.)
async fn ask(engine: &Engine, from: i64, to: i64) -> (Vec<Option<f64>>, Vec<String>) {
    let ts: Vec<i64> = (from..=to).step_by(MINUTE as usize).collect();
    let answer = engine.query("sum(clicks)", ts, T0 + SPAN).await.unwrap();
    let Value::Vector(v) = answer.value else { panic!("a vector: {:?}", answer.value) };
    let steps = v.series.into_values().next().unwrap_or_default();
    (steps, answer.report.infos)
}

fn total(steps: &[Option<f64>]) -> f64 {
    steps.iter().flatten().sum()
}

/// `n` clicks in the slice `[10:30, 11:15)` of the fixture's first day
/// (slices start at multiples of 45 minutes since the epoch).
fn clicks_in_slice(n: usize) -> Vec<Event> {
    fixture::events(9, n)
        .into_iter()
        .enumerate()
        .map(|(i, e)| Event { t: T0 + 10 * HOUR + 30 * MINUTE + (i as i64 * 7_919) % (45 * MINUTE), click: true, ..e })
        .collect()
}

const FROM: i64 = T0 + 10 * HOUR;
const TO: i64 = T0 + 12 * HOUR;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slice_being_flushed_is_answered_as_before_the_flush_until_it_is_done() {
    let w = world().await;
    let cache = &w.cached.reader().cache;
    let (before, _) = ask(&w.cached, FROM, TO).await;
    assert_eq!(before, ask(&w.fresh, FROM, TO).await.0);
    let read = cache.misses.load(Ordering::SeqCst);
    assert!(read > 0);
    assert_eq!(ask(&w.cached, FROM, TO).await.0, before);
    assert_eq!(cache.misses.load(Ordering::SeqCst), read, "asked again: every slice from memory");
    assert_eq!(cache.reassembled.load(Ordering::SeqCst), 1, "and the read as assembled the first time");

    // Flush 4 begins on the slice and writes its items, not yet its done marks.
    let events = clicks_in_slice(40);
    let refs: Vec<&Event> = events.iter().collect();
    fixture::write_flush(&w.table.inner, &w.config, &refs, 4, Until::Items).await;
    let (half, _) = ask(&w.fresh, FROM, TO).await;
    assert_eq!(total(&half), total(&before) + 40.0, "the table shows the flush's items");
    let (held, infos) = ask(&w.cached, FROM, TO).await;
    assert_eq!(held, before, "the slice as it was before the flush");
    assert_eq!(cache.reassembled.load(Ordering::SeqCst), 2, "the same entries: the same assembled read");
    assert!(
        infos.iter().any(|i| i.contains("1 of 3 time slices shown as they were before a flush now in progress")),
        "the answer says so: {infos:?}"
    );
    assert_eq!(cache.misses.load(Ordering::SeqCst), read, "nothing read while the flush is in progress");
    assert_eq!(cache.before_flush.load(Ordering::SeqCst), 1);

    // Done: the next answer is the table's, and says nothing more.
    fixture::finish_flush(&w.table.inner, &w.config, &refs, 4).await;
    let (after, infos) = ask(&w.cached, FROM, TO).await;
    assert_eq!(after, half);
    assert_eq!(after, ask(&w.fresh, FROM, TO).await.0);
    assert!(!infos.iter().any(|i| i.contains("before a flush")), "{infos:?}");
    assert_eq!(cache.misses.load(Ordering::SeqCst), read + 1, "the changed slice read again, only it");
    assert_eq!(ask(&w.cached, FROM, TO).await.0, half, "and kept");
    assert_eq!(cache.misses.load(Ordering::SeqCst), read + 1);
}

/// A cold cache under a long flush (a backlog): a slice the flush has
/// begun on but not yet written is read once and kept, as before the
/// flush; one whose items it wrote is read again at every ask until done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slice_read_before_a_begun_flush_wrote_there_is_kept_and_one_read_after_is_not() {
    let w = world().await;
    let cache = &w.cached.reader().cache;
    let events = clicks_in_slice(40);
    let refs: Vec<&Event> = events.iter().collect();
    // Flush 4 begins on the slice (and every rollup's), writes nothing yet.
    for rollup in [zigzag_model::Rollup::Minute, zigzag_model::Rollup::Hour, zigzag_model::Rollup::Day] {
        let s = zigzag_model::changes::slice_start(rollup, rollup.floor(events[0].t));
        w.table.inner.update(&zigzag_model::changes::begin("base", rollup, s, 1, 4)).await.unwrap();
    }
    let (before, _) = ask(&w.cached, FROM, TO).await;
    assert_eq!(before, ask(&w.fresh, FROM, TO).await.0);
    let read = cache.misses.load(Ordering::SeqCst);
    let (again, infos) = ask(&w.cached, FROM, TO).await;
    assert_eq!(again, before);
    assert_eq!(cache.misses.load(Ordering::SeqCst), read, "kept: nothing read again");
    assert!(
        infos.iter().any(|i| i.contains("1 of 3 time slices shown as they were before a flush now in progress")),
        "{infos:?}"
    );
    // Its items written, not done: still the slice as before it, from memory.
    fixture::write_flush(&w.table.inner, &w.config, &refs, 4, Until::Items).await;
    assert_eq!(ask(&w.cached, FROM, TO).await.0, before);
    assert_eq!(cache.misses.load(Ordering::SeqCst), read);
    // Another cache, cold now, holding nothing read part way through a
    // flush: it sees the flush half written and keeps nothing.
    let cold = cold_engine(&w, Duration::ZERO);
    let (half, _) = ask(&cold, FROM, TO).await;
    assert_eq!(total(&half), total(&before) + 40.0);
    let cold_read = cold.reader().cache.misses.load(Ordering::SeqCst);
    ask(&cold, FROM, TO).await;
    assert_eq!(cold.reader().cache.misses.load(Ordering::SeqCst), cold_read + 1, "the busy slice read again");
    // Done: both read it once more, and keep it.
    fixture::finish_flush(&w.table.inner, &w.config, &refs, 4).await;
    assert_eq!(ask(&w.cached, FROM, TO).await.0, half);
    assert_eq!(ask(&w.cached, FROM, TO).await.0, half);
    assert_eq!(cache.misses.load(Ordering::SeqCst), read + 1);
}

/// An engine reading `w`'s table with a cold cache, changes marks read at
/// every query, whose slices read part way through a flush answer for
/// `unsettled_for` while it is in progress.
fn cold_engine(w: &World, unsettled_for: Duration) -> Engine {
    Engine::new(w.table.clone(), Catalog::new(w.config.clone()).unwrap(), ExecOptions::default(), Limits::default())
        .with_cache(DEFAULT_CACHE_BYTES, Duration::ZERO)
        .with_unsettled_for(unsettled_for)
}

/// A cold cache under a long flush, holding what it read part way through:
/// the busy slice is read once, answered from memory (its age in the
/// infos) while the flush is in progress and for at most `unsettled_for`,
/// and read again once the flush is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slice_read_part_way_through_a_flush_answers_while_it_is_in_progress_for_a_bounded_time() {
    let w = world().await;
    let events = clicks_in_slice(40);
    let refs: Vec<&Event> = events.iter().collect();
    let (before, _) = ask(&w.fresh, FROM, TO).await;
    fixture::write_flush(&w.table.inner, &w.config, &refs, 4, Until::Items).await;
    let (half, _) = ask(&w.fresh, FROM, TO).await;
    assert_eq!(total(&half), total(&before) + 40.0, "the table shows the flush's items");

    let held = cold_engine(&w, Duration::from_secs(3600));
    let cache = &held.reader().cache;
    assert_eq!(ask(&held, FROM, TO).await.0, half);
    let read = cache.misses.load(Ordering::SeqCst);
    assert_eq!(cache.unsettled.load(Ordering::SeqCst), 1, "the busy slice is not settled");
    let (again, infos) = ask(&held, FROM, TO).await;
    assert_eq!(again, half, "as it was read");
    assert_eq!(cache.misses.load(Ordering::SeqCst), read, "from memory while the flush is in progress");
    assert_eq!(cache.while_flushing.load(Ordering::SeqCst), 1);
    assert!(
        infos.iter().any(|i| i.contains("1 of 3 time slices shown as read up to 0 s ago, part way through a flush")),
        "the answer says so: {infos:?}"
    );

    // Past `unsettled_for`, the busy slice is read again.
    let brief = cold_engine(&w, Duration::from_millis(200));
    ask(&brief, FROM, TO).await;
    let brief_read = brief.reader().cache.misses.load(Ordering::SeqCst);
    ask(&brief, FROM, TO).await;
    assert_eq!(brief.reader().cache.misses.load(Ordering::SeqCst), brief_read, "within the time, from memory");
    tokio::time::sleep(Duration::from_millis(300)).await;
    ask(&brief, FROM, TO).await;
    assert_eq!(brief.reader().cache.misses.load(Ordering::SeqCst), brief_read + 1, "past it, read again");

    // The flush done: read again at once, whatever the time left, and kept.
    fixture::finish_flush(&w.table.inner, &w.config, &refs, 4).await;
    let (done, infos) = ask(&held, FROM, TO).await;
    assert_eq!(done, half);
    assert_eq!(done, ask(&w.fresh, FROM, TO).await.0);
    assert!(!infos.iter().any(|i| i.contains("part way")), "{infos:?}");
    assert_eq!(cache.misses.load(Ordering::SeqCst), read + 1, "the changed slice read again, only it");
    ask(&held, FROM, TO).await;
    assert_eq!(cache.misses.load(Ordering::SeqCst), read + 1, "and kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn viewers_asking_at_once_after_a_flush_read_the_slice_it_changed_once() {
    let w = world().await;
    let cache = &w.cached.reader().cache;
    ask(&w.cached, FROM, TO).await;
    let events = clicks_in_slice(25);
    let refs: Vec<&Event> = events.iter().collect();
    fixture::write_flush(&w.table.inner, &w.config, &refs, 4, Until::Done).await;

    // Eight viewers, each its own window (not one read in flight shared):
    // each starts a minute later, all within the first slice read before.
    let (misses, reads) = (cache.misses.load(Ordering::SeqCst), w.table.item_reads.load(Ordering::SeqCst));
    let windows: Vec<(i64, i64)> = (0..8).map(|k| (FROM + k * MINUTE, TO)).collect();
    let answers = futures::future::join_all(windows.iter().map(|&(a, b)| ask(&w.cached, a, b))).await;
    assert_eq!(cache.misses.load(Ordering::SeqCst) - misses, 1, "one viewer read the changed slice; seven waited");
    let item_reads = w.table.item_reads.load(Ordering::SeqCst) - reads;
    for ((a, b), (got, _)) in windows.iter().zip(&answers) {
        assert_eq!(got, &ask(&w.fresh, *a, *b).await.0, "window from {a}");
    }
    let (whole, _) = ask(&w.fresh, FROM, TO).await;
    assert_eq!(answers[0].0, whole);
    // What the eight cost the table is what one viewer alone pays for the
    // next flush of the slice.
    let more = clicks_in_slice(10);
    let refs: Vec<&Event> = more.iter().collect();
    fixture::write_flush(&w.table.inner, &w.config, &refs, 5, Until::Done).await;
    let reads = w.table.item_reads.load(Ordering::SeqCst);
    ask(&w.cached, FROM, TO).await;
    let alone = w.table.item_reads.load(Ordering::SeqCst) - reads;
    assert!(alone > 0);
    assert_eq!(item_reads, alone, "eight viewers read what one does");
}
