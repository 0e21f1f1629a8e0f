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

mod layout_support;

use async_trait::async_trait;
use layout_support::*;
use std::sync::atomic::{AtomicI64, Ordering};
use zigzag_core::table::{
    DeleteOutcome, DeleteRequest, Item, ItemResult, QueryPage, QueryRequest, SortedTable, TableError, UpdateOutcome,
    UpdateRequest,
};
use zigzag_gather::relayout::apply::{cut, version_changes};
use zigzag_loadgen::{GenConfig, Generator};
use zigzag_model::versions;
use zigzag_model::{Config, Projections, Rollup};
use zigzag_sqlite::SqliteTable;

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
    let Diffed { priced, old: old_ps, new: new_ps, layout: new_layout } = diffed(&table, &v1(), &v2()).await;
    let changes = version_changes(&priced, &old_ps, &new_ps).expect("applicable");
    let targets: Vec<(String, Rollup, String)> =
        changes.fills.iter().map(|f| (f.projection.clone(), f.rollup, f.source.clone())).collect();
    assert_eq!(targets.len(), 4, "by_campaign minute, hour, day and cc day: {targets:?}");
    assert!(changes.counted.is_empty());
    let (span, _, _) = zigzag_gather::kept_span(&table, &old_ps).await.unwrap();
    let cut_ms = cut(&changes, &new_ps, T0 + 16 * HOUR, span.map(|w| w.end));
    assert_eq!(cut_ms, T0 + DAY, "the day target's first edge after the data");
    let version = versions::record(&table, 1, &new_layout, cut_ms, changes, T0, true).await.unwrap();
    let lost = versions::record(&table, 1, &new_layout, cut_ms, Default::default(), T0, true).await;
    assert!(lost.is_err(), "a second apply of version 2 is refused");

    // Killed after a few batches, then run again: it converges.
    let failing = FailingPuts { inner: SqliteTable::open(&a).unwrap(), left: AtomicI64::new(3) };
    assert!(run_fill(&failing, &version).await.is_err(), "the kill");
    let totals = run_fill(&table, &version).await.unwrap();
    assert!(totals.derived > 0 && totals.pending == 0, "{totals:?}");
    let again = run_fill(&table, &version).await.unwrap();
    assert_eq!((again.derived, again.current), (0, totals.units), "nothing to do: every unit current");
    let filling = zigzag_gather::relayout::filling(&table, &versions::load(&table).await.unwrap().unwrap(), T0, cut_ms)
        .await
        .unwrap();
    assert!(filling.is_empty(), "every target readable: {:?}", filling.notes().collect::<Vec<_>>());

    // Version 2's workers: targets written from the cut on; late events
    // before it reach the sources only, so the targets are stale there.
    let filled = items(&table, "by_campaign", Rollup::Minute, T0, cut_ms).await;
    let sources = items(&table, "cc", Rollup::Minute, T0, cut_ms).await;
    assert!(!filled.is_empty());
    ingest(&v2(), &second, &a, "second").await;
    let after = items(&table, "by_campaign", Rollup::Minute, T0, cut_ms).await;
    assert!(filled == after, "no worker wrote a target's bucket before the cut (the fill owns them)");
    assert!(
        items(&table, "cc", Rollup::Minute, T0, cut_ms).await != sources,
        "events before the cut reached the source"
    );
    let filling =
        zigzag_gather::relayout::filling(&table, &versions::load(&table).await.unwrap().unwrap(), T0, T0 + 2 * DAY)
            .await
            .unwrap();
    for (p, r) in [("by_campaign", Rollup::Minute), ("by_campaign", Rollup::Hour), ("cc", Rollup::Day)] {
        let e = filling.readable(p, r, T0).unwrap_err();
        assert!(e.contains("filling:") && e.contains("read from"), "{e}");
        assert!(filling.readable(p, r, cut_ms).is_ok(), "from the cut on, the workers'");
    }
    let refill = run_fill(&table, &version).await.unwrap();
    assert!(refill.derived > 0 && refill.pending == 0, "the late events' bins derived again: {refill:?}");
    let filling =
        zigzag_gather::relayout::filling(&table, &versions::load(&table).await.unwrap().unwrap(), T0, T0 + 2 * DAY)
            .await
            .unwrap();
    assert!(filling.is_empty(), "{:?}", filling.notes().collect::<Vec<_>>());

    // The reference: version 2 from the start, the same two streams.
    ingest(&v2(), &first, &b, "first").await;
    ingest(&v2(), &second, &b, "second").await;
    let reference = SqliteTable::open(&b).unwrap();
    assert_same_items(&table, &reference, &TARGETS).await;

    // Against the generator's truth, every rollup of every projection the
    // new layout writes (the filled targets too) matches, before and after
    // `gather compact` folds their closed buckets.
    let truth_of = |gen: &Generator| zigzag_loadgen::truth::compute_for(gen, &v2()).unwrap();
    let mut truth = truth_of(&first);
    truth.merge(&truth_of(&second));
    let new_ps = Projections::new(&v2()).unwrap();
    let checked = |table: SqliteTable| {
        let (truth, new_ps) = (&truth, &new_ps);
        async move {
            let opts = zigzag_gather::execute::ExecOptions::default();
            let report = zigzag_gather::check::check(&table, new_ps, truth, T0 + 3 * DAY, &opts).await.unwrap();
            assert_eq!(report.mismatches(), 0, "{}", zigzag_gather::check::render(&report));
            assert!(report.counted_from_cut.is_empty(), "every target was filled: {:?}", report.counted_from_cut);
            report.rows.iter().filter(|r| r.projection == "by_campaign").count()
        }
    };
    assert!(checked(SqliteTable::open(&a).unwrap()).await > 0, "by_campaign compared");
    let leases = SqliteTable::open_table(&a, "checkpoints").unwrap();
    let options = zigzag_gather::compact::CompactOptions {
        before: T0 + 2 * DAY,
        grace: std::time::Duration::from_millis(10),
        wait: std::time::Duration::from_secs(30),
        concurrency: 4,
    };
    let compacted = zigzag_gather::compact::compact(&table, &leases, &new_ps, &options, &mut |_| {}).await.unwrap();
    assert!(
        compacted.bins.iter().any(|b| b.projection == "by_campaign" && b.deleted > 0 && b.items > 0),
        "the filled projection's bins folded: {compacted:?}"
    );
    checked(SqliteTable::open(&a).unwrap()).await;
}

/// A drawn layout change: version 1 (the base's rollups, one projection)
/// and what version 2 adds (a projection, a rollup of the first one, or
/// both).
#[derive(Debug, Clone)]
struct Drawn {
    base: Vec<Rollup>,
    first_dims: Vec<&'static str>,
    first_rollups: Vec<Rollup>,
    added_dims: Option<Vec<&'static str>>,
    added_rollups: Vec<Rollup>,
    extra_rollup: Option<Rollup>,
    seeds: (u64, u64),
    late: f64,
    kill_after: i64,
    fill_between: bool,
    /// Version 2 also declares [`GAINED`]: every projection gains them.
    gain_measures: bool,
}

fn toml(rollups: &[Rollup]) -> String {
    let names: Vec<String> = rollups.iter().map(|r| format!("\"{r}\"")).collect();
    format!("[{}]", names.join(", "))
}

impl Drawn {
    fn v1(&self) -> Config {
        self.config(false)
    }

    fn v2(&self) -> Config {
        self.config(true)
    }

    fn config(&self, second: bool) -> Config {
        let dims = |d: &[&str]| d.iter().map(|x| format!("\"{x}\"")).collect::<Vec<_>>().join(", ");
        let mut first = self.first_rollups.clone();
        if second {
            first.extend(self.extra_rollup);
            first.sort();
        }
        let mut text = format!(
            "rollups = {}\n{}\n[[projection]]\nname = \"first\"\ndimensions = [{}]\nrollups = {}\n",
            toml(&self.base),
            match second && self.gain_measures {
                true => measures_gained(),
                false => MEASURES.to_string(),
            }
            .split("[[projection]]")
            .next()
            .unwrap(),
            dims(&self.first_dims),
            toml(&first)
        );
        if let (true, Some(added)) = (second, &self.added_dims) {
            text.push_str(&format!(
                "[[projection]]\nname = \"added\"\ndimensions = [{}]\nrollups = {}\n",
                dims(added),
                toml(&self.added_rollups)
            ));
        }
        text.push_str("[flush]\ninterval_ms = 100\n");
        Config::from_toml(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
    }
}

fn drawn() -> impl proptest::strategy::Strategy<Value = Drawn> {
    use proptest::prelude::*;
    let all = vec!["referrer", "campaign", "country"];
    let dims = proptest::sample::subsequence(all.clone(), 0..=3);
    let rollups = || proptest::sample::subsequence(vec![Rollup::Minute, Rollup::Hour, Rollup::Day], 1..=3);
    // The added projection: mostly over some of the first one's dimensions
    // (summed from it), else over any (often counted from the cut).
    let first_and_added = dims.prop_flat_map(move |first: Vec<&'static str>| {
        let n = first.len();
        let some_of_first = proptest::sample::subsequence(first.clone(), 0..=n);
        let any = proptest::sample::subsequence(all.clone(), 0..=3);
        let added = proptest::option::of(prop_oneof![3 => some_of_first, 1 => any]);
        (Just(first), added)
    });
    (
        proptest::sample::subsequence(vec![Rollup::Minute, Rollup::Hour], 0..=2),
        first_and_added,
        rollups(),
        rollups(),
        proptest::option::of(proptest::sample::select(vec![Rollup::Hour, Rollup::Day])),
        (1u64..1000, 1u64..1000),
        prop_oneof![Just(0.0), Just(0.2)],
        0i64..4,
        any::<bool>(),
        proptest::bool::weighted(0.3),
    )
        .prop_map(
            |(
                base,
                (first_dims, added_dims),
                first_rollups,
                added_rollups,
                extra,
                seeds,
                late,
                kill_after,
                fill_between,
                gain_measures,
            )| {
                // A rollup the first projection has already is no change.
                let extra_rollup = extra.filter(|r| !first_rollups.contains(r));
                Drawn {
                    base,
                    first_dims,
                    first_rollups,
                    added_dims,
                    added_rollups,
                    extra_rollup,
                    seeds,
                    late,
                    kill_after,
                    fill_between,
                    gain_measures,
                }
            },
        )
        .prop_filter("a change", |d| d.added_dims.is_some() || d.extra_rollup.is_some() || d.gain_measures)
}

/// One drawn change, end to end: v1 ingested, v2 applied and filled (a
/// kill first), more events under v2 (late ones before the cut), filled
/// again (sometimes once in between), against v2 from the start.
async fn check_drawn(d: &Drawn) {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.db"), dir.path().join("b.db"));
    let first = Generator::new(GenConfig {
        records: 1_500,
        ..generator(d.seeds.0, T0 + 10 * HOUR, 6 * HOUR, 0.0).config().clone()
    });
    let second = Generator::new(GenConfig {
        records: 1_500,
        ..generator(d.seeds.1, T0 + 20 * HOUR, 8 * HOUR, d.late).config().clone()
    });
    let (v1, v2) = (d.v1(), d.v2());
    ingest(&v1, &first, &a, "first").await;
    let table = SqliteTable::open(&a).unwrap();
    let Diffed { priced, old: old_ps, new: new_ps, layout: new_layout } = diffed(&table, &v1, &v2).await;
    let changes = version_changes(&priced, &old_ps, &new_ps).expect("applicable");
    let (span, _, _) = zigzag_gather::kept_span(&table, &old_ps).await.unwrap();
    let cut_ms = cut(&changes, &new_ps, T0 + 16 * HOUR, span.map(|w| w.end));
    let version = versions::record(&table, 1, &new_layout, cut_ms, changes, T0, true).await.unwrap();
    let failing = FailingPuts { inner: SqliteTable::open(&a).unwrap(), left: AtomicI64::new(d.kill_after) };
    let _ = fill_with(&failing, &v1, &v2, &version).await;
    if d.fill_between {
        fill_with(&table, &v1, &v2, &version).await.unwrap();
    }
    ingest(&v2, &second, &a, "second").await;
    let totals = fill_with(&table, &v1, &v2, &version).await.unwrap();
    assert_eq!(totals.pending, 0, "{totals:?}");
    let filling = zigzag_gather::relayout::filling(
        &table,
        &versions::load(&table).await.unwrap().unwrap(),
        T0 - DAY,
        T0 + 3 * DAY,
    )
    .await
    .unwrap();
    for f in &version.changes.fills {
        assert!(filling.readable(&f.projection, f.rollup, T0 - DAY).is_ok(), "{f:?} filled");
    }
    ingest(&v2, &first, &b, "first").await;
    ingest(&v2, &second, &b, "second").await;
    let reference = SqliteTable::open(&b).unwrap();
    let targets = version
        .changes
        .fills
        .iter()
        .map(|f| (f.projection.clone(), f.rollup, T0 - DAY))
        .chain(version.changes.counted.iter().map(|t| (t.projection.clone(), t.rollup, cut_ms)));
    for (projection, rollup, from) in targets {
        let mine = items_of(&table, &v2, &projection, rollup, T0 - DAY, T0 + 3 * DAY).await;
        let mut theirs = items_of(&reference, &v2, &projection, rollup, T0 - DAY, T0 + 3 * DAY).await;
        // A counted target holds nothing before the cut; from it on, what
        // the reference holds.
        theirs.retain(|_, i| bucket(i) >= from);
        let differ = differing(&mine, &theirs);
        assert!(
            differ.is_empty(),
            "{projection} {rollup}: {} items vs {}: {differ:#?}\n{d:#?}",
            mine.len(),
            theirs.len()
        );
    }
    // A measure gained: from the cut on, every item of the projection is
    // the reference's; before it, none holds the measure.
    assert_eq!(version.changes.measures.is_empty(), !d.gain_measures, "{:?}", version.changes);
    for g in &version.changes.measures {
        assert_eq!(g.measures, GAINED);
        let km = new_ps.by_name(&g.projection).expect("written");
        for rollup in km.rollups() {
            let mut mine = items_of(&table, &v2, &g.projection, rollup, T0 - DAY, T0 + 3 * DAY).await;
            let mut theirs = items_of(&reference, &v2, &g.projection, rollup, T0 - DAY, T0 + 3 * DAY).await;
            for item in mine.values().filter(|i| bucket(i) < cut_ms) {
                assert!(GAINED.iter().all(|m| !item.attrs.contains_key(*m)), "before the cut: {item:?}\n{d:#?}");
            }
            mine.retain(|_, i| bucket(i) >= cut_ms);
            theirs.retain(|_, i| bucket(i) >= cut_ms);
            let differ = differing(&mine, &theirs);
            assert!(differ.is_empty(), "{} {rollup} from the cut: {differ:#?}\n{d:#?}", g.projection);
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 12, max_shrink_iters: 0, ..Default::default() })]

    /// Random layouts v1 → v2 (projections and rollups added, each from
    /// the table or counted from the cut; measures every projection
    /// gains), random kills of the fill, fills between ingests or not,
    /// late events: every target item equals ingest with v2 from the start
    /// (a counted one, and a projection gaining measures, from the cut on;
    /// before it, no item holds a gained measure).
    #[test]
    fn random_layout_changes_fill_to_what_ingest_with_the_new_layout_writes(d in drawn()) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(check_drawn(&d));
    }
}
