//! `gather serve`'s PromQL answers equal a brute-force evaluation of the
//! same query over the raw events' minute samples, whatever the matchers,
//! grouping, aggregation, range function, range, step, offset and
//! alignment: the pushdown into reads, the choice of a coarser rollup and
//! the shared reads must not change an answer.
//!
//! The oracle is written from PromQL's definition, not from the server's
//! code: a series is one (referrer, campaign, country); its sample at a
//! minute's end is that minute's measure; `f(x[r])` at `t` folds the
//! samples ending in `(t - o - r, t - o]`; a bare `x` is its sample ending
//! at `floor(t - o)` to the minute.

use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use zigzag_gather::execute::ExecOptions;
use zigzag_model::ScatterMode;
use zigzag_serve::series::{Labels, Value, Vector};
use zigzag_serve::{Catalog, Engine, Limits};
use zigzag_sqlite::SqliteTable;
use zigzag_testkit::fixture::{self, Event, Field, Measures, COUNTRIES, DAY, HOUR, MINUTE, REFERRERS, SPAN, T0};

const FIELDS: [Field; 3] = [Field::Referrer, Field::Campaign, Field::Country];
/// Digits after the point of `cost` in the default layout.
const COST_SCALE: i32 = 6;

struct World {
    rt: tokio::runtime::Runtime,
    engine: Engine,
    /// Per series (referrer, campaign, country), per minute end: its measures.
    samples: BTreeMap<Vec<&'static str>, BTreeMap<i64, Measures>>,
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
        let mut samples: BTreeMap<Vec<&'static str>, BTreeMap<i64, Measures>> = BTreeMap::new();
        for e in &events {
            let key = FIELDS.iter().map(|f| e.value(*f)).collect();
            let end = e.t.div_euclid(MINUTE) * MINUTE + MINUTE;
            samples.entry(key).or_default().entry(end).or_default().add_event(e.click, e.cost);
        }
        let _: &[Event] = &events;
        World { rt, engine, samples }
    })
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Metric {
    Clicks,
    Impressions,
    Cost,
    CostMin,
    CostMax,
}

impl Metric {
    fn name(self) -> &'static str {
        match self {
            Metric::Clicks => "clicks",
            Metric::Impressions => "impressions",
            Metric::Cost => "cost",
            Metric::CostMin => "cost_min",
            Metric::CostMax => "cost_max",
        }
    }

    fn value(self, m: &Measures) -> Option<f64> {
        let cost = |u: i128| u as f64 / 10f64.powi(COST_SCALE);
        match self {
            Metric::Clicks => Some(m.clicks as f64),
            Metric::Impressions => Some(m.impressions as f64),
            Metric::Cost => Some(cost(m.cost_sum)),
            Metric::CostMin => m.cost_min.map(|c| cost(c as i128)),
            Metric::CostMax => m.cost_max.map(|c| cost(c as i128)),
        }
    }
}

#[derive(Debug, Clone)]
enum Match {
    Eq(&'static str),
    Ne(&'static str),
    Re(Vec<&'static str>),
    /// A regex no literal list can say (`D.|F.`-style).
    RePrefix(char),
    NotRe(Vec<&'static str>),
}

impl Match {
    fn text(&self, f: Field) -> String {
        match self {
            Match::Eq(v) => format!("{f}=\"{v}\""),
            Match::Ne(v) => format!("{f}!=\"{v}\""),
            Match::Re(vs) => format!("{f}=~\"{}\"", vs.join("|")),
            Match::RePrefix(c) => format!("{f}=~\"{c}.*\""),
            Match::NotRe(vs) => format!("{f}!~\"{}\"", vs.join("|")),
        }
    }

    fn passes(&self, v: &str) -> bool {
        match self {
            Match::Eq(x) => v == *x,
            Match::Ne(x) => v != *x,
            Match::Re(xs) => xs.contains(&v),
            Match::RePrefix(c) => v.starts_with(*c),
            Match::NotRe(xs) => !xs.contains(&v),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Func {
    Bare,
    Sum,
    Min,
    Max,
    Count,
    Avg,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Agg {
    Sum,
    Min,
    Max,
    Count,
    Avg,
}

#[derive(Debug, Clone)]
struct Selector {
    metric: Metric,
    matchers: Vec<(Field, Match)>,
    func: Func,
    range: i64,
    offset: i64,
}

#[derive(Debug, Clone)]
enum Shape {
    Plain(Selector),
    Aggregated { agg: Agg, by: Vec<Field>, without: bool, sel: Selector },
    /// `sum by (G) (a) / sum by (G) (b)`: a ratio from summed parts.
    Ratio { by: Vec<Field>, num: Selector, den: Selector },
}

fn minutes(ms: i64) -> String {
    format!("{}m", ms / MINUTE)
}

impl Selector {
    fn text(&self) -> String {
        let m: Vec<String> = self.matchers.iter().map(|(f, m)| m.text(*f)).collect();
        let sel = format!("{}{{{}}}", self.metric.name(), m.join(", "));
        let off = if self.offset != 0 { format!(" offset {}", minutes(self.offset)) } else { String::new() };
        match self.func {
            Func::Bare => format!("{sel}{off}"),
            f => {
                let name = match f {
                    Func::Sum => "sum_over_time",
                    Func::Min => "min_over_time",
                    Func::Max => "max_over_time",
                    Func::Count => "count_over_time",
                    _ => "avg_over_time",
                };
                format!("{name}({sel}[{}]{off})", minutes(self.range))
            }
        }
    }

    /// Per series, the sample at `t` (the oracle).
    fn at(&self, w: &World, t: i64) -> BTreeMap<Labels, f64> {
        let mut out = BTreeMap::new();
        let b = (t - self.offset).div_euclid(MINUTE) * MINUTE;
        let range = if self.func == Func::Bare { MINUTE } else { self.range };
        for (key, buckets) in &w.samples {
            let passes = self.matchers.iter().all(|(f, m)| {
                let i = FIELDS.iter().position(|x| x == f).unwrap();
                m.passes(key[i])
            });
            if !passes {
                continue;
            }
            let xs: Vec<f64> = buckets.range(b - range + 1..=b).filter_map(|(_, m)| self.metric.value(m)).collect();
            if xs.is_empty() {
                continue;
            }
            let n = xs.len() as f64;
            let x = match self.func {
                Func::Bare => xs[xs.len() - 1],
                Func::Sum => xs.iter().sum(),
                Func::Min => xs.iter().copied().fold(f64::INFINITY, f64::min),
                Func::Max => xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                Func::Count => n,
                Func::Avg => xs.iter().sum::<f64>() / n,
            };
            let mut labels: Labels =
                FIELDS.iter().zip(key).map(|(f, v)| (f.name().to_string(), v.to_string())).collect();
            if self.func == Func::Bare {
                labels.insert("__name__".into(), self.metric.name().into());
            }
            out.insert(labels, x);
        }
        out
    }
}

fn group(labels: &Labels, by: &[Field], without: bool) -> Labels {
    labels
        .iter()
        .filter(|(k, _)| k.as_str() != "__name__")
        .filter(|(k, _)| by.iter().any(|f| f.name() == k.as_str()) != without)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn aggregate(agg: Agg, series: BTreeMap<Labels, f64>, by: &[Field], without: bool) -> BTreeMap<Labels, f64> {
    let mut groups: BTreeMap<Labels, Vec<f64>> = BTreeMap::new();
    for (l, x) in series {
        groups.entry(group(&l, by, without)).or_default().push(x);
    }
    groups
        .into_iter()
        .map(|(k, xs)| {
            let n = xs.len() as f64;
            let v = match agg {
                Agg::Sum => xs.iter().sum(),
                Agg::Min => xs.iter().copied().fold(f64::INFINITY, f64::min),
                Agg::Max => xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                Agg::Count => n,
                Agg::Avg => xs.iter().sum::<f64>() / n,
            };
            (k, v)
        })
        .collect()
}

fn names(fields: &[Field]) -> String {
    fields.iter().map(|f| f.name()).collect::<Vec<_>>().join(", ")
}

impl Shape {
    fn text(&self) -> String {
        match self {
            Shape::Plain(s) => s.text(),
            Shape::Aggregated { agg, by, without, sel } => {
                let op = format!("{agg:?}").to_lowercase();
                let kw = if *without { "without" } else { "by" };
                format!("{op} {kw} ({}) ({})", names(by), sel.text())
            }
            Shape::Ratio { by, num, den } => {
                format!("sum by ({}) ({}) / sum by ({}) ({})", names(by), num.text(), names(by), den.text())
            }
        }
    }

    fn at(&self, w: &World, t: i64) -> BTreeMap<Labels, f64> {
        match self {
            Shape::Plain(s) => s.at(w, t),
            Shape::Aggregated { agg, by, without, sel } => aggregate(*agg, sel.at(w, t), by, *without),
            Shape::Ratio { by, num, den } => {
                let n = aggregate(Agg::Sum, num.at(w, t), by, false);
                let d = aggregate(Agg::Sum, den.at(w, t), by, false);
                n.into_iter().filter_map(|(l, x)| d.get(&l).map(|y| (l, x / y))).collect()
            }
        }
    }
}

fn field() -> impl Strategy<Value = Field> + Clone {
    prop::sample::select(FIELDS.to_vec())
}

fn value_of(f: Field) -> impl Strategy<Value = &'static str> + Clone {
    let values: Vec<&'static str> = match f {
        Field::Referrer => REFERRERS.to_vec(),
        Field::Campaign => fixture::CAMPAIGNS.to_vec(),
        _ => COUNTRIES.to_vec(),
    };
    prop::sample::select(values)
}

fn matcher() -> impl Strategy<Value = (Field, Match)> {
    field().prop_flat_map(|f| {
        let v = value_of(f);
        let vs = prop::collection::vec(value_of(f), 1..3);
        (
            Just(f),
            prop_oneof![
                v.clone().prop_map(Match::Eq),
                v.prop_map(Match::Ne),
                vs.clone().prop_map(Match::Re),
                prop::sample::select(vec!['s', 'n', 'D', 'x']).prop_map(Match::RePrefix),
                vs.prop_map(Match::NotRe),
            ],
        )
    })
}

fn selector(metric: impl Strategy<Value = Metric>) -> impl Strategy<Value = Selector> {
    (
        metric,
        prop::collection::vec(matcher(), 0..3),
        prop::sample::select(vec![Func::Bare, Func::Sum, Func::Min, Func::Max, Func::Count, Func::Avg]),
        prop::sample::select(vec![MINUTE, 5 * MINUTE, HOUR, 2 * HOUR, DAY]),
        prop::sample::select(vec![0, 0, 0, 10 * MINUTE, HOUR]),
    )
        .prop_map(|(metric, matchers, func, range, offset)| Selector { metric, matchers, func, range, offset })
}

fn any_metric() -> impl Strategy<Value = Metric> {
    prop::sample::select(vec![Metric::Clicks, Metric::Impressions, Metric::Cost, Metric::CostMin, Metric::CostMax])
}

fn shape() -> impl Strategy<Value = Shape> {
    let by = || {
        prop::collection::vec(field(), 0..3).prop_map(|mut v| {
            v.sort_by_key(|f| f.name());
            v.dedup();
            v
        })
    };
    prop_oneof![
        selector(any_metric()).prop_map(Shape::Plain),
        (
            prop::sample::select(vec![Agg::Sum, Agg::Min, Agg::Max, Agg::Count, Agg::Avg]),
            by(),
            any::<bool>(),
            selector(any_metric())
        )
            .prop_map(|(agg, by, without, sel)| Shape::Aggregated { agg, by, without, sel }),
        (by(), selector(Just(Metric::Clicks)), selector(Just(Metric::Impressions))).prop_map(|(by, mut num, mut den)| {
            // The same window on both sides: a ratio of one window's sums.
            den.func = num.func;
            den.range = num.range;
            den.offset = num.offset;
            den.matchers = num.matchers.clone();
            if num.func != Func::Bare {
                num.func = Func::Sum;
                den.func = Func::Sum;
            }
            Shape::Ratio { by, num, den }
        }),
    ]
}

/// Evaluation instants: a start anywhere in the data (on a minute, an
/// hour, or neither), a step, a few steps.
fn instants() -> impl Strategy<Value = Vec<i64>> {
    (
        0..(SPAN + DAY) / MINUTE,
        prop::sample::select(vec![0, 0, 30_000]),
        prop::sample::select(vec![MINUTE, 5 * MINUTE, 90_000, HOUR, 6 * HOUR]),
        1usize..25,
        any::<bool>(),
    )
        .prop_map(|(m, sec, step, n, hour_aligned)| {
            let start = if hour_aligned { T0 + (m * MINUTE).div_euclid(HOUR) * HOUR } else { T0 + m * MINUTE + sec };
            (0..n as i64).map(|k| start + k * step).collect()
        })
}

fn close(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

fn check(shape: &Shape, ts: &[i64]) -> Result<(), TestCaseError> {
    let w = world();
    let text = shape.text();
    let now = T0 + 30 * DAY;
    let answer = w.rt.block_on(w.engine.query(&text, ts.to_vec(), now));
    let answer = answer.map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
    let Value::Vector(got) = answer.value else { return Err(TestCaseError::fail(format!("{text}: not a vector"))) };
    let mut want = Vector::default();
    for (i, t) in ts.iter().enumerate() {
        for (l, x) in shape.at(w, *t) {
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
