//! The key correctness property: gather over any window, filters and
//! group-by equals a brute-force aggregation of the raw events, whatever
//! the rollup chosen, the scatter mode (items of one key spread over
//! prefixes, or merged in one), the store, the strategy and the concurrency.

use proptest::prelude::*;
use std::sync::OnceLock;
use zigzag_core::query::{AdaptiveConfig, AutoConfig, Strategy as ZStrategy};
use zigzag_core::table::{MemoryTable, SortedTable};
use zigzag_gather::execute::ExecOptions;
use zigzag_gather::filter::FilterSet;
use zigzag_gather::plan::PlanRequest;
use zigzag_gather::report;
use zigzag_gather::window::WindowSpec;
use zigzag_model::{Config, Rollup, ScatterMode};
use zigzag_sqlite::SqliteTable;
use zigzag_testkit::fixture::Field;
use zigzag_testkit::fixture::*;

struct Store {
    table: Box<dyn SortedTable>,
    config: Config,
}

struct World {
    rt: tokio::runtime::Runtime,
    events: Vec<Event>,
    /// Hash scatter in SQLite (P = 4); random scatter in memory (P = 8).
    stores: [Store; 2],
}

fn world() -> &'static World {
    static W: OnceLock<World> = OnceLock::new();
    W.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let events = events(7, 2_500);
        let hash = Store { table: Box::new(SqliteTable::in_memory().unwrap()), config: config(4, ScatterMode::Hash) };
        let random = Store { table: Box::new(MemoryTable::new()), config: config(8, ScatterMode::Random) };
        for s in [&hash, &random] {
            rt.block_on(write_store(s.table.as_ref(), &s.config, &events));
        }
        World { rt, events, stores: [hash, random] }
    })
}

#[derive(Debug, Clone)]
enum Pred {
    Eq(String),
    Ne(String),
    In(Vec<String>),
    Ge(String),
    Gt(String),
    Le(String),
    Lt(String),
}

impl Pred {
    /// The `--where` text, values bare or quoted (both must mean the value).
    fn expr(&self, f: Field) -> String {
        let q = |v: &str| format!("\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\""));
        match self {
            Pred::Eq(v) => format!("{f}={v}"),
            Pred::Ne(v) => format!("{f} != {}", q(v)),
            Pred::In(vs) => {
                let list: Vec<String> =
                    vs.iter().enumerate().map(|(i, v)| if i % 2 == 1 { q(v) } else { v.clone() }).collect();
                format!("{f} in {}", list.join(" , "))
            }
            Pred::Ge(v) => format!("{f}>={}", q(v)),
            Pred::Gt(v) => format!("{f}>{v}"),
            Pred::Le(v) => format!("{f}<= {}", q(v)),
            Pred::Lt(v) => format!("{f}<{v}"),
        }
    }

    fn keeps(&self, x: &str) -> bool {
        let x = x.as_bytes();
        match self {
            Pred::Eq(v) => x == v.as_bytes(),
            Pred::Ne(v) => x != v.as_bytes(),
            Pred::In(vs) => vs.iter().any(|v| x == v.as_bytes()),
            Pred::Ge(v) => x >= v.as_bytes(),
            Pred::Gt(v) => x > v.as_bytes(),
            Pred::Le(v) => x <= v.as_bytes(),
            Pred::Lt(v) => x < v.as_bytes(),
        }
    }
}

/// Stored values, plus values that share their fixed-width Z prefix or
/// fall between them (to catch a box taken for the exact answer).
fn values(f: Field) -> Vec<&'static str> {
    match f {
        Field::Referrer => {
            vec!["news.example", "news.example.org", "news.exa", "search.example", "a", "zz.social", "m"]
        }
        Field::Campaign => vec!["spring", "spring-sale", "spring-", "c-42", "x", "d"],
        _ => vec!["DE", "FR", "US", "GB", "D", "ZZ"],
    }
}

fn pred(f: Field) -> impl Strategy<Value = Pred> {
    let v = prop::sample::select(values(f)).prop_map(str::to_string);
    prop_oneof![
        v.clone().prop_map(Pred::Eq),
        v.clone().prop_map(Pred::Ne),
        prop::sample::subsequence(values(f), 1..4)
            .prop_map(|vs| Pred::In(vs.into_iter().map(str::to_string).collect())),
        v.clone().prop_map(Pred::Ge),
        v.clone().prop_map(Pred::Gt),
        v.clone().prop_map(Pred::Le),
        v.prop_map(Pred::Lt),
    ]
}

#[derive(Debug, Clone)]
struct Case {
    start: i64,
    end: i64,
    step: Option<i64>,
    minute_rollup: bool,
    filters: Vec<(Field, Pred)>,
    group_by: Vec<Field>,
    store: usize,
    strategy: u8,
    concurrency: usize,
}

fn case() -> impl Strategy<Value = Case> {
    let fields = [Field::Referrer, Field::Campaign, Field::Country];
    let filters =
        (prop::option::of(pred(fields[0])), prop::option::of(pred(fields[1])), prop::option::of(pred(fields[2])))
            .prop_map(move |(a, b, c)| {
                let mut v = Vec::new();
                for (f, p) in fields.into_iter().zip([a, b, c]) {
                    if let Some(p) = p {
                        v.push((f, p));
                    }
                }
                v
            });
    let window = (prop::sample::select(vec![MINUTE, HOUR, DAY]), 0i64..(SPAN + 4 * HOUR), 1i64..3_000).prop_map(
        |(grain, off, len)| {
            let start = (T0 - 2 * HOUR + off).div_euclid(grain) * grain;
            let k = (len % (3 * DAY / grain)).max(1);
            (start, start + k * grain)
        },
    );
    let step = prop::option::of(prop::sample::select(vec![MINUTE, 5 * MINUTE, HOUR, 6 * HOUR, DAY]));
    let group_by = prop::sample::subsequence(fields.to_vec(), 0..=3).prop_shuffle();
    (window, step, any::<bool>(), filters, group_by, 0usize..2, 0u8..4, 1usize..9).prop_map(
        |((start, end), step, minute_rollup, filters, group_by, store, strategy, concurrency)| Case {
            start,
            end,
            step,
            minute_rollup,
            filters,
            group_by,
            store,
            strategy,
            concurrency,
        },
    )
}

fn run(c: &Case) -> (Groups, zigzag_gather::Gathered) {
    let w = world();
    let store = &w.stores[c.store];
    let exprs: Vec<String> = c.filters.iter().map(|(f, p)| p.expr(*f)).collect();
    let req = PlanRequest {
        window: WindowSpec::Absolute { from: c.start.to_string(), to: c.end.to_string() },
        rollup: c.minute_rollup.then_some(Rollup::Minute),
        step: c.step,
        timeseries: c.step.is_some(),
        filters: FilterSet::parse(&exprs, &store.config).unwrap(),
        now: 0,

        source: Default::default(),
        mixing: None,
        snap: None,
        filling: Default::default(),
    };
    let strategy = match c.strategy {
        0 => ZStrategy::Auto(AutoConfig::default()),
        1 => ZStrategy::Adaptive(AdaptiveConfig::default()),
        2 => ZStrategy::PageJump { limit: 3 },
        _ => ZStrategy::Naive,
    };
    let opts = ExecOptions { concurrency: c.concurrency, strategy, ..ExecOptions::default() };
    let g =
        w.rt.block_on(zigzag_gather::gather(
            store.table.as_ref(),
            &store.config,
            req,
            zigzag_testkit::fixture::names(&c.group_by),
            &opts,
        ))
        .unwrap();
    let got = g
        .aggregation
        .groups
        .iter()
        .map(|(k, m)| ((k.bucket, k.values.clone()), zigzag_testkit::fixture::Measures::of(m)))
        .collect();
    (got, g)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, ..ProptestConfig::default() })]

    #[test]
    fn gather_equals_brute_force(c in case()) {
        let w = world();
        let (got, g) = run(&c);
        let keep = |e: &Event| c.filters.iter().all(|(f, p)| p.keeps(e.value(*f)));
        let want = brute(&w.events, c.start, c.end, c.step, &c.group_by, keep);
        prop_assert_eq!(&got, &want, "rollups {}", g.plan.rollups());
        // Every query read to the end and nothing outside the window came back.
        prop_assert_eq!(g.actual.queries, g.plan.queries());
        prop_assert!(g.actual.kept <= g.actual.stats.returned);
        if c.step.is_some() && c.group_by.is_empty() {
            let r = report::timeseries(&g.aggregation, &g.plan.window).unwrap();
            let step = c.step.unwrap();
            let first = c.start.div_euclid(step) * step;
            prop_assert_eq!(r.rows.len() as i64, (c.end - first + step - 1) / step);
        }
    }
}

/// The coarsest rollup is chosen when the window allows, and it reads far
/// fewer items than the minute rollup for the same answer.
#[test]
fn coarse_rollups_answer_the_same_for_less() {
    let base = Case {
        start: T0,
        end: T0 + 2 * DAY,
        step: None,
        minute_rollup: false,
        filters: vec![(Field::Country, Pred::In(vec!["DE".into(), "FR".into()]))],
        group_by: vec![Field::Campaign],
        store: 0,
        strategy: 0,
        concurrency: 4,
    };
    let (day_answer, day) = run(&base);
    assert_eq!(day.plan.single_rollup().unwrap(), Rollup::Day);
    let (minute_answer, minute) = run(&Case { minute_rollup: true, ..base });
    assert_eq!(minute.plan.single_rollup().unwrap(), Rollup::Minute);
    assert_eq!(day_answer, minute_answer);
    assert!(day.actual.stats.scanned * 10 < minute.actual.stats.scanned, "{:?} vs {:?}", day.actual, minute.actual);
}

/// An RCU/s budget slows reading down to about that rate.
#[test]
fn rcu_budget_paces_reads() {
    let base = Case {
        start: T0,
        end: T0 + 2 * DAY,
        step: None,
        minute_rollup: true,
        filters: vec![],
        group_by: vec![],
        store: 0,
        strategy: 2,
        concurrency: 1,
    };
    let (free, g) = run(&base);
    let rcu = g.actual.stats.rcu;
    let rate = rcu / 3.0;
    let w = world();
    let store = &w.stores[0];
    let req = PlanRequest {
        window: WindowSpec::Absolute { from: T0.to_string(), to: (T0 + 2 * DAY).to_string() },
        rollup: Some(Rollup::Minute),
        step: None,
        timeseries: false,
        filters: FilterSet::default(),
        now: 0,

        source: Default::default(),
        mixing: None,
        snap: None,
        filling: Default::default(),
    };
    let strategy = ZStrategy::PageJump { limit: 3 };
    let opts = ExecOptions { concurrency: 1, strategy, rcu_per_sec: Some(rate), ..ExecOptions::default() };
    let paced = w.rt.block_on(zigzag_gather::gather(store.table.as_ref(), &store.config, req, vec![], &opts)).unwrap();
    assert_eq!(
        paced.aggregation.groups.values().next().map(zigzag_testkit::fixture::Measures::of).as_ref(),
        free.values().next()
    );
    assert!(rcu > 20.0, "enough reading to pace: {rcu}");
    // One second of burst, then `rate`: at least (rcu - rate - one page of
    // 3 items, 0.5 RCU) / rate seconds, about 2 s.
    let floor = (rcu - rate - 0.5) / rate;
    assert!(paced.actual.wall.as_secs_f64() >= floor * 0.9, "{rcu} RCU at {rate}/s took {:?}", paced.actual.wall);
}

/// `auto` reads whole a box the statistics' time slices say holds almost
/// all of its partition (a day's hours in the bin of October, which holds
/// only that day), and probes one that holds a twelfth of its partition's
/// (two hours of November's one day); both exact.
#[test]
fn auto_reads_whole_a_box_holding_almost_all_of_its_partition() {
    let base = Case {
        start: T0,
        end: T0 + DAY,
        step: Some(HOUR),
        minute_rollup: false,
        filters: vec![],
        group_by: vec![Field::Referrer],
        store: 0,
        strategy: 0,
        concurrency: 4,
    };
    let w = world();
    for (case, whole) in [(base.clone(), true), (Case { start: T0 + DAY, end: T0 + DAY + 2 * HOUR, ..base }, false)] {
        let (got, g) = run(&case);
        let want = brute(&w.events, case.start, case.end, case.step, &case.group_by, |_| true);
        assert_eq!(got, want);
        assert_eq!(g.plan.single_rollup(), Some(Rollup::Hour));
        let share = g.plan.reads[0].box_share[0].expect("statistics with time slices");
        let partition_bytes = g.plan.reads[0].bin_items[0].unwrap() / 4.0 * g.plan.reads[0].item_bytes;
        assert!(partition_bytes > zigzag_gather::execute::WHOLE_PARTITION_BYTES, "not small: {partition_bytes}");
        if whole {
            assert!((share - 1.0).abs() < 1e-9, "October's bin holds that day alone: {share}");
            assert_eq!(g.actual.whole, g.actual.queries, "{:?}", g.actual);
        } else {
            assert!((0.04..0.15).contains(&share), "two of 24 hours: {share}");
            assert_eq!(g.actual.whole, 0, "{:?}", g.actual);
        }
    }
}
