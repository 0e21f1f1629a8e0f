//! A table recreated with another layout under a running server: the next
//! query reads with the table's new layout (scatter prefixes, here), never
//! with the old one, whose plan would miss half the new table's items.

use std::sync::{Arc, RwLock};
use zigzag_core::table::*;
use zigzag_gather::execute::ExecOptions;
use zigzag_model::layout::Layout;
use zigzag_model::{Config, ScatterMode};
use zigzag_serve::series::Value;
use zigzag_serve::{Catalog, Engine, Limits};
use zigzag_testkit::fixture::{self, DAY, T0};

/// The table behind one name, which an operator may recreate.
struct Recreatable(RwLock<Arc<MemoryTable>>);

impl Recreatable {
    fn current(&self) -> Arc<MemoryTable> {
        self.0.read().unwrap().clone()
    }
}

#[async_trait::async_trait]
impl SortedTable for Recreatable {
    async fn put(&self, item: Item) -> Result<(), TableError> {
        self.current().put(item).await
    }
    async fn query(&self, req: &QueryRequest) -> Result<QueryPage, TableError> {
        self.current().query(req).await
    }
    async fn update(&self, req: &UpdateRequest) -> Result<UpdateOutcome, TableError> {
        self.current().update(req).await
    }
    async fn delete(&self, req: &DeleteRequest) -> Result<DeleteOutcome, TableError> {
        self.current().delete(req).await
    }
}

async fn written(config: &Config, seed: u64) -> Arc<MemoryTable> {
    let table = MemoryTable::new();
    fixture::write_recorded(&table, config, &fixture::events(seed, 2_000)).await;
    Arc::new(table)
}

fn total(v: &Value) -> f64 {
    match v {
        Value::Vector(v) => v.series.values().next().and_then(|xs| xs[0]).unwrap_or(0.0),
        Value::Scalar(s) => s[0],
    }
}

/// The layout item is read beside every query: a read of it throttled is
/// retried, as the query's reads of items are, not answered with an error.
#[tokio::test]
async fn a_throttled_read_of_the_layout_is_retried_and_answers_the_same() {
    let config = fixture::config(4, ScatterMode::Random);
    let table = written(&config, 3).await;
    let throttled =
        Arc::new(zigzag_testkit::throttled::ThrottledReads::new(table.clone(), zigzag_model::layout::LAYOUT_PK));
    let engine = |t: Arc<dyn SortedTable>| {
        let catalog = Catalog::recorded(config.clone(), Some(Layout::of(&config))).unwrap();
        Engine::new(t, catalog, ExecOptions::default(), Limits::default()).with_base(Config::default())
    };
    let q = "sum by (country) (sum_over_time(clicks[2d]))";
    let t = vec![T0 + 2 * DAY];
    let want = engine(table).query(q, t.clone(), T0 + 10 * DAY).await.unwrap();
    let got = engine(throttled.clone()).query(q, t, T0 + 10 * DAY).await.expect("retried, answered");
    assert!(throttled.throttled() > 0, "the layout was read, and throttled");
    assert_eq!(got.value, want.value);
    let clicks = fixture::events(3, 2_000).iter().filter(|e| e.click).count() as f64;
    let Value::Vector(v) = &got.value else { panic!("a vector") };
    let sum: f64 = v.series.values().map(|xs| xs[0].unwrap_or(0.0)).sum();
    assert_eq!(sum, clicks, "every click, by country");
}

#[tokio::test]
async fn a_recreated_table_is_read_with_its_own_layout() {
    let (four, eight) = (fixture::config(4, ScatterMode::Random), fixture::config(8, ScatterMode::Random));
    let first = written(&four, 1).await;
    let table = Arc::new(Recreatable(RwLock::new(first)));
    let catalog = Catalog::recorded(four.clone(), Some(Layout::of(&four))).unwrap();
    let engine =
        Engine::new(table.clone(), catalog, ExecOptions::default(), Limits::default()).with_base(Config::default());
    let q = "sum(sum_over_time(clicks[2d]))";
    let t = vec![T0 + 2 * DAY];
    let before = engine.query(q, t.clone(), T0 + 10 * DAY).await.unwrap();

    // Recreated: other events, eight prefixes.
    let second = written(&eight, 2).await;
    *table.0.write().unwrap() = second.clone();
    let after = engine.query(q, t.clone(), T0 + 10 * DAY).await.unwrap();
    let fresh = Engine::new(
        second,
        Catalog::recorded(eight.clone(), Some(Layout::of(&eight))).unwrap(),
        ExecOptions::default(),
        Limits::default(),
    );
    let want = fresh.query(q, t, T0 + 10 * DAY).await.unwrap();
    assert_eq!(total(&after.value), total(&want.value), "read with the new layout");
    assert_ne!(total(&after.value), total(&before.value), "the data did change");
    assert_eq!(engine.catalog().layout, Some(Layout::of(&eight)), "the server now reads with it");
    let clicks = fixture::events(2, 2_000).iter().filter(|e| e.click).count() as f64;
    assert_eq!(total(&after.value), clicks, "every click of the new table, all eight prefixes read");
}

/// Two servers over `seed`'s events: one on a table written under `v1`
/// before `cut` and under `v2` (recorded with `changes`, cut at `cut`)
/// from it on; one on a table written under `v2` from the start.
async fn changed_at(
    v1: &Config,
    v2: &Config,
    changes: zigzag_model::versions::Changes,
    cut: i64,
    seed: u64,
) -> (Engine, Engine) {
    let events = fixture::events(seed, 2_000);
    let (before, after): (Vec<_>, Vec<_>) = events.iter().partition(|e| e.t < cut);
    let table = Arc::new(MemoryTable::new());
    fixture::write_recorded(table.as_ref(), v1, &before).await;
    zigzag_model::versions::record(table.as_ref(), 1, &Layout::of(v2), cut, changes, T0, true).await.unwrap();
    fixture::write_store(table.as_ref(), v2, &after).await;
    let reference = Arc::new(MemoryTable::new());
    fixture::write_recorded(reference.as_ref(), v2, &events).await;
    let engine = |t: Arc<MemoryTable>| {
        let catalog = Catalog::recorded(v2.clone(), Some(Layout::of(v2))).unwrap();
        Engine::new(t, catalog, ExecOptions::default(), Limits::default()).with_base(Config::default())
    };
    (engine(table), engine(reference))
}

/// The samples of the one series `v` holds (none: every instant absent).
fn samples(v: &Value) -> Vec<Option<f64>> {
    match v {
        Value::Vector(v) => v.series.values().next().cloned().unwrap_or_default(),
        Value::Scalar(s) => s.iter().map(|x| Some(*x)).collect(),
    }
}

#[tokio::test]
async fn a_measure_a_layout_version_added_is_answered_from_its_cut_on_and_the_infos_say_from_when() {
    use zigzag_model::measure::{MeasureKind, MeasureSpec};
    use zigzag_model::versions::{Changes, NewMeasures};
    let v1 = Config::default();
    let mut v2 = v1.clone();
    v2.measures.push(MeasureSpec::new("spend", MeasureKind::Sum, Some("cost"), None));
    let cut = T0 + DAY;
    // What `gather layout apply` records: the projections gaining it (the
    // base projection, here).
    let gained: Vec<NewMeasures> = zigzag_model::layout_diff::changes(&Layout::of(&v1), &Layout::of(&v2))
        .into_iter()
        .filter_map(|c| c.gained)
        .map(|(projection, measures)| NewMeasures { projection, measures })
        .collect();
    assert_eq!(gained.len(), 1, "{gained:?}");
    let changes = Changes { measures: gained, ..Changes::default() };
    let (mine, theirs) = changed_at(&v1, &v2, changes, cut, 3).await;
    let ts: Vec<i64> = (1..=48).map(|h| T0 + h * fixture::HOUR).collect();
    // A sample whose range begins before the cut has none (it would sum
    // part of its range as the whole); from the cut on, every one is what
    // a table with the measure from the start answers.
    let mut got = None;
    for hours in [1, 3] {
        let q = format!("sum(sum_over_time(spend[{hours}h]))");
        let answer = mine.query(&q, ts.clone(), T0 + 10 * DAY).await.expect("answered from the cut on, not refused");
        let want = theirs.query(&q, ts.clone(), T0 + 10 * DAY).await.unwrap();
        let (got_samples, want_samples) = (samples(&answer.value), samples(&want.value));
        assert_eq!(got_samples.len(), ts.len());
        for ((t, g), w) in ts.iter().zip(&got_samples).zip(&want_samples) {
            if t - hours * fixture::HOUR < cut {
                assert_eq!(*g, None, "{q} at {t}: its range begins before the cut, never a part of it");
            } else {
                assert!(w.is_some());
                assert_eq!(g, w, "{q} at {t}: from the cut on, what a table with it from the start answers");
            }
        }
        got = Some(answer);
    }
    let got = got.expect("asked");
    let said = got.report.infos.join("\n");
    assert!(
        said.contains("measure spend of base") && said.contains("counted from 2026-11-01T00:00:00Z on only"),
        "{said}"
    );
    // A measure held for the whole range is answered as before.
    let clicks = mine.query("sum(sum_over_time(clicks[1h]))", ts.clone(), T0 + 10 * DAY).await.unwrap();
    assert!(samples(&clicks.value).iter().all(Option::is_some));
}

#[tokio::test]
async fn a_projection_a_layout_version_counts_from_its_cut_answers_the_labels_only_it_keeps_from_then_on() {
    use zigzag_model::versions::{Changes, NewTarget};
    let v1 = Config::from_toml(
        "rollups = []\n[[projection]]\nname = \"cc\"\ndimensions = [\"campaign\", \"country\"]\nrollups = [\"hour\"]\n",
    )
    .unwrap();
    let v2 = Config::from_toml(
        "rollups = []\n[[projection]]\nname = \"cc\"\ndimensions = [\"campaign\", \"country\"]\nrollups = [\"hour\"]\n\
         [[projection]]\nname = \"by_referrer\"\ndimensions = [\"referrer\"]\nrollups = [\"hour\"]\n",
    )
    .unwrap();
    let cut = T0 + DAY;
    let counted = vec![NewTarget { projection: "by_referrer".into(), rollup: zigzag_model::Rollup::Hour }];
    let changes = Changes { counted, ..Changes::default() };
    let (mine, theirs) = changed_at(&v1, &v2, changes, cut, 4).await;
    let ts: Vec<i64> = (1..=48).map(|h| T0 + h * fixture::HOUR).collect();
    let q = r#"sum(sum_over_time(clicks{referrer="a"}[1h]))"#;
    let got = mine.query(q, ts.clone(), T0 + 10 * DAY).await.expect("answered from the cut on, not refused");
    let want = theirs.query(q, ts.clone(), T0 + 10 * DAY).await.unwrap();
    let (got_samples, want_samples) = (samples(&got.value), samples(&want.value));
    assert_eq!(got_samples.len(), ts.len());
    for ((t, g), w) in ts.iter().zip(&got_samples).zip(&want_samples) {
        match *t - fixture::HOUR < cut {
            true => assert_eq!(*g, None, "at {t}: by_referrer counts from the cut only"),
            false => assert_eq!(g, w, "at {t}: from the cut on, what a table with it from the start answers"),
        }
    }
    assert!(want_samples[25..].iter().any(Option::is_some), "the reference counts referrer a after the cut");
    let said = got.report.infos.join("\n");
    assert!(said.contains("by_referrer hour: added by layout version 2 and counted from"), "{said}");
}
