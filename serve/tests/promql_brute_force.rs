//! `gather serve`'s PromQL answers equal a brute-force evaluation of the
//! same query over the raw events' minute samples
//! (`zigzag_testkit::promql`), whatever the matchers, grouping,
//! aggregation, range function, range, step, offset and alignment: the
//! pushdown into reads, the choice of a coarser rollup and the shared
//! reads must not change an answer.

use proptest::prelude::*;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use zigzag_gather::execute::ExecOptions;
use zigzag_model::ScatterMode;
use zigzag_serve::series::{Value, Vector};
use zigzag_serve::{Catalog, Engine, Limits};
use zigzag_sqlite::SqliteTable;
use zigzag_testkit::fixture::{self, Field, DAY, HOUR, T0};
use zigzag_testkit::promql::{instants, samples, shape, Agg, Func, Match, Metric, Samples, Selector, Shape};

struct World {
    rt: tokio::runtime::Runtime,
    engine: Engine,
    samples: Samples,
}

fn world() -> &'static World {
    static W: OnceLock<World> = OnceLock::new();
    W.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let events = fixture::events(11, 3_000);
        let config = fixture::config(4, ScatterMode::Random);
        let table = SqliteTable::in_memory().unwrap();
        rt.block_on(fixture::write_store(&table, &config, &events));
        let catalog = Catalog::new(config).unwrap();
        let engine = Engine::new(Arc::new(table), catalog, ExecOptions::default(), Limits::default());
        World { rt, engine, samples: samples(&events) }
    })
}

fn close(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

/// Each query is asked twice: the second answer is the cache's (every
/// slice the first read is unchanged), and must equal the brute force too.
fn check(shape: &Shape, ts: &[i64]) -> Result<(), TestCaseError> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let w = world();
    let cache = &w.engine.reader().cache;
    let misses = cache.misses.load(Ordering::SeqCst);
    check_once(shape, ts)?;
    let (read, hits) = (cache.misses.load(Ordering::SeqCst) - misses, cache.hits.load(Ordering::SeqCst));
    check_once(shape, ts)?;
    let (again, hits) = (cache.misses.load(Ordering::SeqCst) - misses - read, cache.hits.load(Ordering::SeqCst) - hits);
    prop_assert_eq!(again, 0, "{}: every slice read the first time is served from the cache", shape.text());
    prop_assert!(read == 0 || hits >= read, "{}: {} slices read, {} hits after", shape.text(), read, hits);
    Ok(())
}

fn check_once(shape: &Shape, ts: &[i64]) -> Result<(), TestCaseError> {
    let w = world();
    let text = shape.text();
    let now = T0 + 30 * DAY;
    let answer = w.rt.block_on(w.engine.query(&text, ts.to_vec(), now));
    let answer = answer.map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
    let Value::Vector(got) = answer.value else { return Err(TestCaseError::fail(format!("{text}: not a vector"))) };
    let mut want = Vector::default();
    for (i, t) in ts.iter().enumerate() {
        for (l, x) in shape.at(&w.samples, *t) {
            want.set(l, ts.len(), i, x);
        }
    }
    prop_assert_eq!(
        got.series.keys().collect::<Vec<_>>(),
        want.series.keys().collect::<Vec<_>>(),
        "series of {} at {:?}",
        text,
        ts
    );
    for (l, xs) in &want.series {
        let ys = &got.series[l];
        for (i, (x, y)) in xs.iter().zip(ys).enumerate() {
            let same = match (x, y) {
                (Some(x), Some(y)) => close(*x, *y),
                (None, None) => true,
                _ => false,
            };
            prop_assert!(same, "{} at {} ({:?}): want {:?}, got {:?}", text, ts[i], l, x, y);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn promql_answers_equal_a_brute_force_evaluation(shape in shape(), ts in instants()) {
        check(&shape, &ts)?;
    }
}

#[test]
fn the_readme_shapes() {
    let h = |k: i64| T0 + k * HOUR;
    let cases: Vec<(Shape, Vec<i64>)> = vec![
        (
            Shape::Aggregated {
                agg: Agg::Sum,
                by: vec![Field::Campaign],
                without: false,
                sel: Selector { metric: Metric::Clicks, matchers: vec![], func: Func::Sum, range: HOUR, offset: 0 },
            },
            (1..48).map(h).collect(),
        ),
        (
            Shape::Ratio {
                by: vec![Field::Referrer],
                num: Selector {
                    metric: Metric::Clicks,
                    matchers: vec![(Field::Country, Match::Eq("DE"))],
                    func: Func::Sum,
                    range: DAY,
                    offset: 0,
                },
                den: Selector {
                    metric: Metric::Impressions,
                    matchers: vec![(Field::Country, Match::Eq("DE"))],
                    func: Func::Sum,
                    range: DAY,
                    offset: 0,
                },
            },
            vec![T0 + DAY, T0 + 2 * DAY],
        ),
    ];
    for (shape, ts) in cases {
        check(&shape, &ts).unwrap();
    }
}
