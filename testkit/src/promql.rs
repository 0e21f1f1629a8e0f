//! PromQL queries over the fixture's events, for `gather serve`'s tests:
//! a generator of varied queries (matchers, groupings, aggregations, range
//! functions, ranges, offsets, steps and alignments), their text, and a
//! brute-force evaluation written from PromQL's definition over the
//! events' minute samples (not from the server's code): a series is one
//! (referrer, campaign, country); its sample at a minute's end is that
//! minute's measure; `f(x[r])` at `t` folds the samples ending in
//! `(t - o - r, t - o]`; a bare `x` is its sample ending at `floor(t - o)`
//! to the minute.

use crate::fixture::{self, Event, Field, Measures, COUNTRIES, DAY, HOUR, MINUTE, REFERRERS, SPAN, T0};
use proptest::prelude::*;
use std::collections::BTreeMap;

/// A series' labels.
pub type Labels = BTreeMap<String, String>;

/// The dimensions of a full series, in layout order.
pub const FIELDS: [Field; 3] = [Field::Referrer, Field::Campaign, Field::Country];
/// Digits after the point of `cost` in the default layout.
pub const COST_SCALE: i32 = 6;

/// Per series (referrer, campaign, country), per minute end: its measures.
pub type Samples = BTreeMap<Vec<&'static str>, BTreeMap<i64, Measures>>;

/// The minute samples of `events`.
pub fn samples(events: &[Event]) -> Samples {
    let mut samples = Samples::new();
    for e in events {
        let key = FIELDS.iter().map(|f| e.value(*f)).collect();
        let end = e.t.div_euclid(MINUTE) * MINUTE + MINUTE;
        samples.entry(key).or_default().entry(end).or_default().add_event(e.click, e.cost);
    }
    samples
}

/// The samples as an OpenMetrics text (`promtool tsdb create-blocks-from
/// openmetrics` loads it): one gauge family per measure, a sample per
/// series and minute with a value, stamped at the minute's end.
pub fn openmetrics(samples: &Samples) -> String {
    let mut out = String::new();
    for metric in [Metric::Clicks, Metric::Impressions, Metric::Cost, Metric::CostMin, Metric::CostMax] {
        out.push_str(&format!("# TYPE {} gauge\n", metric.name()));
        for (key, buckets) in samples {
            let labels: Vec<String> = FIELDS.iter().zip(key).map(|(f, v)| format!("{}=\"{v}\"", f.name())).collect();
            for (end, m) in buckets {
                if let Some(x) = metric.text_value(m) {
                    out.push_str(&format!("{}{{{}}} {x} {}\n", metric.name(), labels.join(","), end / 1000));
                }
            }
        }
    }
    out.push_str("# EOF\n");
    out
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Metric {
    Clicks,
    Impressions,
    Cost,
    CostMin,
    CostMax,
}

impl Metric {
    pub fn name(self) -> &'static str {
        match self {
            Metric::Clicks => "clicks",
            Metric::Impressions => "impressions",
            Metric::Cost => "cost",
            Metric::CostMin => "cost_min",
            Metric::CostMax => "cost_max",
        }
    }

    /// A sample's value as exact text (OpenMetrics).
    pub fn text_value(self, m: &Measures) -> Option<String> {
        let cost = |u: i128| {
            let s = 10i128.pow(COST_SCALE as u32);
            format!("{}.{:0w$}", u / s, u % s, w = COST_SCALE as usize)
        };
        match self {
            Metric::Clicks => Some(m.clicks.to_string()),
            Metric::Impressions => Some(m.impressions.to_string()),
            Metric::Cost => Some(cost(m.cost_sum)),
            Metric::CostMin => m.cost_min.map(|c| cost(c as i128)),
            Metric::CostMax => m.cost_max.map(|c| cost(c as i128)),
        }
    }

    pub fn value(self, m: &Measures) -> Option<f64> {
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
pub enum Match {
    Eq(&'static str),
    Ne(&'static str),
    Re(Vec<&'static str>),
    /// A regex no literal list can say (`D.|F.`-style).
    RePrefix(char),
    NotRe(Vec<&'static str>),
}

impl Match {
    pub fn text(&self, f: Field) -> String {
        match self {
            Match::Eq(v) => format!("{f}=\"{v}\""),
            Match::Ne(v) => format!("{f}!=\"{v}\""),
            Match::Re(vs) => format!("{f}=~\"{}\"", vs.join("|")),
            Match::RePrefix(c) => format!("{f}=~\"{c}.*\""),
            Match::NotRe(vs) => format!("{f}!~\"{}\"", vs.join("|")),
        }
    }

    pub fn passes(&self, v: &str) -> bool {
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
pub enum Func {
    Bare,
    Sum,
    Min,
    Max,
    Count,
    Avg,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Agg {
    Sum,
    Min,
    Max,
    Count,
    Avg,
}

#[derive(Debug, Clone)]
pub struct Selector {
    pub metric: Metric,
    pub matchers: Vec<(Field, Match)>,
    pub func: Func,
    pub range: i64,
    pub offset: i64,
}

#[derive(Debug, Clone)]
pub enum Shape {
    Plain(Selector),
    Aggregated {
        agg: Agg,
        by: Vec<Field>,
        without: bool,
        sel: Selector,
    },
    /// `sum by (G) (a) / sum by (G) (b)`: a ratio from summed parts.
    Ratio {
        by: Vec<Field>,
        num: Selector,
        den: Selector,
    },
}

fn minutes(ms: i64) -> String {
    format!("{}m", ms / MINUTE)
}

/// A range as PromQL writes it: whole minutes as `Nm`, any other as
/// whole seconds (`[75577s]`, as Grafana writes `$__range`).
fn range_text(ms: i64) -> String {
    match ms % MINUTE {
        0 => minutes(ms),
        _ => format!("{}s", ms / 1000),
    }
}

impl Selector {
    /// The query text.
    pub fn text(&self) -> String {
        self.render(false)
    }

    /// The text for Prometheus 2.x, whose ranges are closed, `[t - r, t]`:
    /// each range 1 ms shorter, so that it holds the buckets `(t - r, t]`
    /// holds (samples lie on whole seconds).
    pub fn prometheus2_text(&self) -> String {
        self.render(true)
    }

    fn render(&self, closed: bool) -> String {
        let m: Vec<String> = self.matchers.iter().map(|(f, m)| m.text(*f)).collect();
        let sel = format!("{}{{{}}}", self.metric.name(), m.join(", "));
        let off = if self.offset != 0 { format!(" offset {}", minutes(self.offset)) } else { String::new() };
        let range = if closed { format!("{}ms", self.range - 1) } else { range_text(self.range) };
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
                format!("{name}({sel}[{range}]{off})")
            }
        }
    }

    /// Per series, the sample at `t` (the oracle).
    pub fn at(&self, w: &Samples, t: i64) -> BTreeMap<Labels, f64> {
        let mut out = BTreeMap::new();
        // The buckets (stamped at their end) ending in (t - o - r, t - o].
        let b = (t - self.offset).div_euclid(MINUTE) * MINUTE;
        let range = if self.func == Func::Bare { MINUTE } else { self.range };
        let first = t - self.offset - range + 1;
        for (key, buckets) in w {
            let passes = self.matchers.iter().all(|(f, m)| {
                let i = FIELDS.iter().position(|x| x == f).unwrap();
                m.passes(key[i])
            });
            if !passes {
                continue;
            }
            let xs: Vec<f64> = buckets.range(first..=b).filter_map(|(_, m)| self.metric.value(m)).collect();
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
    pub fn text(&self) -> String {
        self.render(&|s: &Selector| s.text())
    }

    /// The text for Prometheus 2.x ([`Selector::prometheus2_text`]).
    pub fn prometheus2_text(&self) -> String {
        self.render(&|s: &Selector| s.prometheus2_text())
    }

    fn render(&self, sel: &dyn Fn(&Selector) -> String) -> String {
        match self {
            Shape::Plain(s) => sel(s),
            Shape::Aggregated { agg, by, without, sel: s } => {
                let op = format!("{agg:?}").to_lowercase();
                let kw = if *without { "without" } else { "by" };
                format!("{op} {kw} ({}) ({})", names(by), sel(s))
            }
            Shape::Ratio { by, num, den } => {
                format!("sum by ({}) ({}) / sum by ({}) ({})", names(by), sel(num), names(by), sel(den))
            }
        }
    }

    /// The oracle's answer at `t`: per series, its value.
    pub fn at(&self, w: &Samples, t: i64) -> BTreeMap<Labels, f64> {
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
        // Whole minutes and hours, and ranges that are not (90 s; Grafana's
        // `$__range` in whole seconds, 20 h 59 m 37 s under "Today so far").
        prop::sample::select(vec![MINUTE, 5 * MINUTE, HOUR, 2 * HOUR, DAY, 90_000, 75_577_000]),
        prop::sample::select(vec![0, 0, 0, 10 * MINUTE, HOUR]),
    )
        .prop_map(|(metric, matchers, func, range, offset)| Selector { metric, matchers, func, range, offset })
}

fn any_metric() -> impl Strategy<Value = Metric> {
    prop::sample::select(vec![Metric::Clicks, Metric::Impressions, Metric::Cost, Metric::CostMin, Metric::CostMax])
}

pub fn shape() -> impl Strategy<Value = Shape> {
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
        (by(), selector(Just(Metric::Clicks)), selector(Just(Metric::Impressions))).prop_map(
            |(by, mut num, mut den)| {
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
            }
        ),
    ]
}

/// Evaluation instants: a start anywhere in the data (on a minute, an
/// hour, or neither), a step, a few steps.
pub fn instants() -> impl Strategy<Value = Vec<i64>> {
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
