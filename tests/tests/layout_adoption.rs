//! A layout version announced while workers run (`gather layout apply`
//! with workers running): two workers ingest version 1 from a stream held
//! at a gate; version 2 is recorded as announced, with its cut ahead of
//! everything read; each worker asks for newer versions every 100 ms,
//! writes what it holds, and joins again under version 2 saying so on its
//! lane; the version holds once every lane does. The gate then opens and
//! the rest of the stream (across the cut, some of it late) is read by
//! the adopted workers; the fill derives the targets before the cut. Every
//! item of every target and source then equals, attribute for attribute
//! (sketches byte for byte), what ingest writes into a table that had
//! version 2 from the start: no event reached a target twice or never,
//! and no worker restarted. One worker's reads of the layout versions are
//! throttled now and then: it retries each one, and counts it.

mod layout_support;

use async_trait::async_trait;
use layout_support::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use zigzag_core::table::SortedTable;
use zigzag_gather::relayout::adoption::{check, Adoption};
use zigzag_gather::relayout::apply::{cut, version_changes};
use zigzag_ingest::source::{RecordBatch, ShardInfo, ShardReader, Source, SourceError, StartAt};
use zigzag_ingest::{run_adopting, PipelineOptions};
use zigzag_loadgen::SyntheticSource;
use zigzag_model::versions;
use zigzag_model::Rollup;
use zigzag_sqlite::SqliteTable;
use zigzag_testkit::throttled::ThrottledReads;

/// Synthetic traffic read up to a gate (a record number per shard): later
/// records wait until it opens.
struct Gated {
    inner: SyntheticSource,
    open_to: Arc<AtomicU64>,
}

#[async_trait]
impl Source for Gated {
    async fn shards(&self) -> Result<Vec<ShardInfo>, SourceError> {
        self.inner.shards().await
    }

    fn bounded(&self) -> bool {
        true
    }

    async fn open(&self, shard: &str, start: StartAt) -> Result<Box<dyn ShardReader>, SourceError> {
        let next = start.position().and_then(|p| p.seq.as_u64()).map_or(1, |s| s + 1);
        let inner = self.inner.open(shard, start).await?;
        Ok(Box::new(GatedReader { inner, next, open_to: self.open_to.clone() }))
    }
}

struct GatedReader {
    inner: Box<dyn ShardReader>,
    next: u64,
    open_to: Arc<AtomicU64>,
}

#[async_trait]
impl ShardReader for GatedReader {
    async fn next_batch(&mut self, max: usize) -> Result<RecordBatch, SourceError> {
        let open_to = self.open_to.load(Ordering::SeqCst);
        if self.next > open_to {
            tokio::time::sleep(Duration::from_millis(20)).await;
            return Ok(RecordBatch::default());
        }
        let max = max.min(usize::try_from(open_to - self.next + 1).unwrap_or(usize::MAX));
        let batch = self.inner.next_batch(max).await?;
        if let Some(last) = batch.last_position().and_then(|p| p.seq.as_u64()) {
            self.next = last + 1;
        }
        Ok(batch)
    }
}

async fn wait_for<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let until = Instant::now() + Duration::from_secs(90);
    while !done().await {
        assert!(Instant::now() < until, "waited 90 s for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_announced_while_workers_run_is_adopted_without_a_restart_and_filled_to_what_it_writes_from_the_start(
) {
    let _ = tracing_subscriber::fmt().with_env_filter("warn").with_test_writer().try_init();
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.db"), dir.path().join("b.db"));
    // 36 hours across midnight, a tenth of the events late; the first
    // third of each shard is read before the change.
    let gen = generator(3, T0 + 4 * HOUR, 36 * HOUR, 0.1);
    let gate = Arc::new(AtomicU64::new(1_000));
    let source: Arc<dyn Source> =
        Arc::new(Gated { inner: SyntheticSource::new(gen.clone(), None), open_to: gate.clone() });
    let aggregates: Arc<dyn SortedTable> = Arc::new(SqliteTable::open(&a).unwrap());
    let leases: Arc<dyn SortedTable> = Arc::new(SqliteTable::open_table(&a, "checkpoints").unwrap());
    // w2's reads of the layout versions are throttled now and then:
    // its join, its checks for a newer version and its adoption retry them.
    let throttled = Arc::new(ThrottledReads::new(aggregates.clone(), zigzag_model::layout::LAYOUT_PK));
    let workers: Vec<_> = ["w1", "w2"]
        .into_iter()
        .map(|w| {
            let aggregates: Arc<dyn SortedTable> = match w {
                "w2" => throttled.clone(),
                _ => aggregates.clone(),
            };
            let opts = PipelineOptions {
                failover: Duration::from_secs(5),
                max_pause: Duration::from_millis(200),
                batch_size: 200,
                layout_check: Duration::from_millis(100),
                ..PipelineOptions::new(v1(), "s", w, dir.path().join(format!("dead-{w}.jsonl")))
            };
            let (source, aggregates, leases) = (source.clone(), aggregates.clone(), leases.clone());
            tokio::spawn(async move {
                let (stop, done) = (CancellationToken::new(), CancellationToken::new());
                run_adopting(source, aggregates, leases, opts, stop, done, |_| {}).await
            })
        })
        .collect();
    let observer = zigzag_lease::Coordinator::new(leases.clone(), zigzag_lease::LeaseOptions::new("s", "observer"));
    let at_gate = || async {
        let held = observer.read_leases().await.unwrap_or_default();
        held.len() == 2 && held.iter().all(|l| l.checkpoint.earliest() == Some(zigzag_model::Position::at(1_000)))
    };
    wait_for("version 1 to commit every record before the gate", at_gate).await;

    // Version 2 announced: its cut ahead of everything read.
    let table = SqliteTable::open(&a).unwrap();
    let Diffed { priced, old: old_ps, new: new_ps, layout: new_layout } = diffed(&table, &v1(), &v2()).await;
    let changes = version_changes(&priced, &old_ps, &new_ps).expect("applicable");
    let (span, _, _) = zigzag_gather::kept_span(&table, &old_ps).await.unwrap();
    let read_to = span.expect("written").end;
    let cut_ms = cut(&changes, &new_ps, read_to + HOUR, Some(read_to));
    assert_eq!(cut_ms, T0 + DAY, "the day targets' first edge an hour past what was read");
    let version = versions::record(&table, 1, &new_layout, cut_ms, changes, T0, false).await.unwrap();
    let filling = zigzag_gather::relayout::filling(&table, &versions::load(&table).await.unwrap().unwrap(), T0, T0)
        .await
        .unwrap();
    let e = filling.readable("by_campaign", Rollup::Minute, T0 + 2 * DAY).unwrap_err();
    assert!(e.contains("not every worker writes yet"), "nothing of an announced version is read: {e}");
    assert!(zigzag_gather::relayout::fill::fill(
        &table,
        &v1(),
        &v2(),
        &version,
        &zigzag_gather::relayout::fill::FillOptions {
            rcu_per_sec: None,
            wcu_per_sec: None,
            concurrency: 2,
            now_ms: T0
        },
        &mut |_| {}
    )
    .await
    .is_err_and(|e| e.to_string().contains("not written by every worker yet")));

    let until = Instant::now() + Duration::from_secs(90);
    let judged = loop {
        match check(&table, leases.as_ref(), &version).await.unwrap() {
            Adoption::Waiting(lanes) => {
                assert!(Instant::now() < until, "waited 90 s for every worker to adopt version 2: {lanes:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => break other,
        }
    };
    assert_eq!(judged, Adoption::Held, "the workers' older events end before the cut");
    // It holds once every owned lane writes version 2; a worker that left
    // to adopt may still be joining again (its free lane read nothing past
    // the cut).
    let both = || async {
        let lanes = zigzag_lease::seal::read_lanes(leases.as_ref()).await.unwrap_or_default();
        lanes.iter().filter(|l| l.owner.is_some()).count() == 2
    };
    wait_for("both workers to hold a lane again", both).await;
    let lanes = zigzag_lease::seal::read_lanes(leases.as_ref()).await.unwrap();
    let owned: Vec<_> = lanes.iter().filter(|l| l.owner.is_some()).collect();
    for l in &owned {
        assert_eq!(l.layout.version, 2, "lane {} says it writes version 2", l.lane);
        assert!(l.layout.high_ms <= cut_ms, "lane {}: {:?}", l.lane, l.layout);
    }
    // A worker that held no shard before adopting read nothing and says 0.
    assert!(owned.iter().any(|l| l.layout.high_ms > 0), "some worker read before adopting: {owned:?}");

    gate.store(u64::MAX, Ordering::SeqCst);
    let mut valid = 0;
    for (name, w) in ["w1", "w2"].into_iter().zip(workers) {
        let s = tokio::time::timeout(Duration::from_secs(120), w).await.expect("in time").unwrap().expect("run");
        assert_eq!(s.adopt, None, "the last pipeline ended with its shards");
        valid += s.valid;
        let throttles = if name == "w2" { throttled.throttled() } else { 0 };
        assert_eq!(s.retries, throttles, "{name}: one retry per throttled read of the layout versions");
    }
    assert!(throttled.throttled() >= 3, "w2's join, a check and its adoption read the versions");
    assert!(valid >= 6_000, "every record was read (some twice, by a worker that took a shard after another)");

    let version = versions::load(&table).await.unwrap().unwrap().newest;
    assert!(version.adopted, "marked held");
    let totals = run_fill(&table, &version).await.unwrap();
    assert!(totals.derived > 0 && totals.pending == 0, "{totals:?}");
    let filling =
        zigzag_gather::relayout::filling(&table, &versions::load(&table).await.unwrap().unwrap(), T0, T0 + 3 * DAY)
            .await
            .unwrap();
    assert!(filling.is_empty(), "{:?}", filling.notes().collect::<Vec<_>>());

    ingest(&v2(), &gen, &b, "s").await;
    let reference = SqliteTable::open(&b).unwrap();
    assert_same_items(
        &table,
        &reference,
        &[
            ("by_campaign", Rollup::Minute),
            ("by_campaign", Rollup::Hour),
            ("by_campaign", Rollup::Day),
            ("cc", Rollup::Minute),
            ("cc", Rollup::Hour),
            ("cc", Rollup::Day),
        ],
    )
    .await;
}
