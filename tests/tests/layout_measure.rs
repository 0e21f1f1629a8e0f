//! Measures added to projections that exist (`gather layout apply`'s
//! steps: `relayout::diff`, `version_changes`, `cut`, `versions::record`),
//! through the real pipeline into SQLite. Version 1 is written from one
//! stream; version 2 adds a min and a distinct count (declared before
//! measures that exist, so the sketch items of those move to other sort
//! keys) to every projection; a second stream, some of it before the cut,
//! is ingested under version 2. The reference is a table that had version
//! 2 from the start.
//!
//! From the cut on, every item equals the reference's. Before it, no item
//! holds a new measure (a late event does not start one), and every
//! other measure reads as the reference's. A report naming a new measure
//! over a window that starts before the cut is refused naming the cut; a
//! report of every measure leaves the new ones out and says so. `gather
//! check` leaves them out too, and retries a throttled read of the
//! versions.

mod layout_support;

use layout_support::*;
use std::collections::BTreeMap;
use zigzag_core::schema::format_instant;
use zigzag_gather::execute::ExecOptions;
use zigzag_gather::filter::FilterSet;
use zigzag_gather::merge::GroupKey;
use zigzag_gather::plan::{Mixing, PlanRequest, SourceRequest};
use zigzag_gather::relayout::apply::{cut, version_changes};
use zigzag_gather::window::WindowSpec;
use zigzag_gather::{Completeness, GatherError, Gathered};
use zigzag_model::measure::MeasureValue;
use zigzag_model::versions::{self, NewMeasures};
use zigzag_model::{Config, Rollup};
use zigzag_sqlite::SqliteTable;
use zigzag_testkit::throttled::ThrottledReads;

const NEW: [&str; 2] = GAINED;

fn request(from: i64, to: i64, measures: Option<&[&str]>, filling: zigzag_gather::plan::Filling) -> PlanRequest {
    PlanRequest {
        window: WindowSpec::Absolute { from: from.to_string(), to: to.to_string() },
        rollup: None,
        step: Some(HOUR),
        timeseries: true,
        filters: FilterSet::default(),
        now: T0 + 3 * DAY,
        source: SourceRequest {
            projection: None,
            measures: measures.map(|m| m.iter().map(|s| s.to_string()).collect()),
        },
        mixing: Some(Mixing::complete(Completeness::unchecked())),
        snap: None,
        filling,
    }
}

async fn report(
    table: &SqliteTable,
    config: &Config,
    from: i64,
    to: i64,
    measures: Option<&[&str]>,
) -> Result<Gathered, GatherError> {
    let filling = zigzag_gather::relayout::filling_of(table, from, to).await?;
    let req = request(from, to, measures, filling);
    let group = vec!["campaign".to_string(), "country".to_string()];
    zigzag_gather::gather(table, config, req, group, &ExecOptions::default()).await
}

/// A report's values of `names`, per group and bucket.
fn values(g: &Gathered, names: &[&str]) -> BTreeMap<GroupKey, BTreeMap<String, MeasureValue>> {
    let set = &g.aggregation.set;
    g.aggregation
        .groups
        .iter()
        .map(|(k, v)| {
            let mut named = v.named(set);
            named.retain(|m, _| names.contains(&m.as_str()));
            assert_eq!(named.len(), names.len(), "every measure asked is in the report");
            (k.clone(), named)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn measures_added_to_projections_count_from_the_cut_and_reports_before_it_leave_them_out_or_refuse() {
    let _ = tracing_subscriber::fmt().with_env_filter("warn").with_test_writer().try_init();
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.db"), dir.path().join("b.db"));
    let (v1, v2) = (v1(), measuring(&measures_gained()));
    // Six hours, then eight more from an hour before the end of the first
    // (those land in buckets before the cut, under version 2).
    let first = generator(1, T0 + 10 * HOUR, 6 * HOUR, 0.0);
    let second = generator(2, T0 + 15 * HOUR, 8 * HOUR, 0.0);

    ingest(&v1, &first, &a, "first").await;
    let table = SqliteTable::open(&a).unwrap();
    let Diffed { priced, old: old_ps, new: new_ps, layout: new_layout } = diffed(&table, &v1, &v2).await;
    let costs = priced.iter().find(|p| p.change.what == "projection cc: add measure(s) cost_min, clickers");
    let costs = costs.and_then(|p| p.ongoing.clone()).expect("priced");
    assert!(costs.contains("1 sketch item(s) (clickers) beside each cc item: cc holds ~"), "{costs}");
    assert!(costs.contains("cost_min add their bytes to cc's items, no write"), "{costs}");
    let changes = version_changes(&priced, &old_ps, &new_ps).expect("applicable");
    let gained = |p: &str| NewMeasures { projection: p.into(), measures: NEW.map(String::from).to_vec() };
    assert_eq!(changes.measures, [gained("base"), gained("cc")], "{changes:?}");
    assert!(changes.fills.is_empty() && changes.counted.is_empty(), "{changes:?}");
    let written_to = zigzag_gather::written_to(&table, &old_ps).await.unwrap();
    let cut_ms = cut(&changes, &new_ps, T0 + 16 * HOUR - 60_000, written_to);
    assert_eq!(cut_ms, T0 + 16 * HOUR, "the first hour edge past the data: hour is both projections' coarsest");
    versions::record(&table, 1, &new_layout, cut_ms, changes, T0, true).await.unwrap();
    let last_hour = items_of(&table, &v2, "cc", Rollup::Minute, cut_ms - HOUR, cut_ms).await;
    ingest(&v2, &second, &a, "second").await;
    let again = items_of(&table, &v2, "cc", Rollup::Minute, cut_ms - HOUR, cut_ms).await;
    assert!(again != last_hour, "version 2 wrote buckets before the cut");

    ingest(&v2, &first, &b, "first").await;
    ingest(&v2, &second, &b, "second").await;
    let reference = SqliteTable::open(&b).unwrap();

    // From the cut on, item for item the reference's; before it, no item
    // holds a new measure though version 2 wrote some of its buckets.
    for projection in ["base", "cc"] {
        for rollup in [Rollup::Minute, Rollup::Hour] {
            let (mut mine, mut theirs) = (
                items_of(&table, &v2, projection, rollup, T0, T0 + 2 * DAY).await,
                items_of(&reference, &v2, projection, rollup, T0, T0 + 2 * DAY).await,
            );
            let before: Items =
                mine.iter().filter(|(_, i)| bucket(i) < cut_ms).map(|(k, i)| (k.clone(), i.clone())).collect();
            mine.retain(|_, i| bucket(i) >= cut_ms);
            theirs.retain(|_, i| bucket(i) >= cut_ms);
            assert!(!theirs.is_empty());
            let differ = differing(&mine, &theirs);
            assert!(differ.is_empty(), "{projection} {rollup}: {differ:#?}");
            for item in before.values() {
                assert!(
                    NEW.iter().all(|m| !item.attrs.contains_key(*m)),
                    "{projection} {rollup} before the cut: {item:?}"
                );
            }
            assert!(!before.is_empty());
        }
    }

    // Asked by name over a window from before the cut: refused, naming it.
    let (from, to) = (T0 + 10 * HOUR, T0 + 23 * HOUR);
    let e = match report(&table, &v2, from, to, Some(&["clickers"])).await {
        Err(e) => e.to_string(),
        Ok(g) => panic!("read {}", g.plan),
    };
    assert!(
        e.contains("measure clickers") && e.contains(&format!("counted from {} on only", format_instant(cut_ms))),
        "{e}"
    );
    // Every measure: the new ones left out, said; the others as the
    // reference's (the distinct and quantile sketches too, whose items
    // moved to other sort keys in buckets both versions wrote).
    let g = report(&table, &v2, from, to, None).await.unwrap();
    let hidden: Vec<&str> = g.plan.hidden.iter().map(|(m, _)| m.as_str()).collect();
    assert_eq!(hidden, NEW);
    assert!(g.plan.hidden[1].1.contains("layout version 2"), "{:?}", g.plan.hidden);
    assert!(NEW.iter().all(|m| g.aggregation.set.position(m).is_none()), "not shown as zeros");
    assert!(g.plan.to_string().contains("measure:  clickers not shown: added by layout version 2"), "{}", g.plan);
    let old: Vec<&str> = v1.measures.iter().map(|m| m.name.as_str()).collect();
    let whole = report(&reference, &v2, from, to, None).await.unwrap();
    assert!(whole.plan.hidden.is_empty());
    assert_eq!(values(&g, &old), values(&whole, &old));
    // From the cut on, every measure, the new ones as the reference's.
    let mut all = old.clone();
    all.extend(NEW);
    let mine = report(&table, &v2, cut_ms, to, Some(&all)).await.unwrap();
    let theirs = report(&reference, &v2, cut_ms, to, Some(&all)).await.unwrap();
    assert!(mine.plan.hidden.is_empty());
    let (mine, theirs) = (values(&mine, &all), values(&theirs, &all));
    assert!(!theirs.is_empty());
    assert_eq!(mine, theirs);

    // `gather check` against a truth of every event: the measures counted
    // from the cut are said and left out, every other one matches.
    let truth_of = |gen: &zigzag_loadgen::Generator| zigzag_loadgen::truth::compute_for(gen, &v2).unwrap();
    let mut truth = truth_of(&first);
    truth.merge(&truth_of(&second));
    let report =
        zigzag_gather::check::check(&table, &new_ps, &truth, T0 + 3 * DAY, &ExecOptions::default()).await.unwrap();
    assert_eq!(report.mismatches(), 0, "{}", zigzag_gather::check::render(&report));
    let said = zigzag_gather::check::render(&report);
    for p in ["base", "cc"] {
        for m in NEW {
            assert!(said.contains(&format!("not checked, measure {m} of {p}: counted from ")), "{said}");
        }
    }

    // Throttled reads of the layout versions are retried, and counted, as
    // the check's reads of items are (CI once failed a check on one).
    let throttled = ThrottledReads::new(&table, zigzag_model::layout::LAYOUT_PK);
    let again = zigzag_gather::check::check(&throttled, &new_ps, &truth, T0 + 3 * DAY, &ExecOptions::default())
        .await
        .expect("a throttled read of the layout versions is retried");
    let throttles = throttled.throttled();
    assert!(throttles > 0, "the check reads the layout versions");
    assert_eq!(again.actual.retries, throttles, "one retry per throttled read");
    assert_eq!(zigzag_gather::check::render(&again), said);
}
