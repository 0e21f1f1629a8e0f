//! Projections end to end: generator events go through the real pipeline
//! (two shards, many flushes) into SQLite under a layout with the base and
//! five projections (every scatter mode, subsets of the dimensions, the
//! rollups and the measures, one with no dimension at all, one keyed by
//! referrer: `partition_by`), once with one
//! cadence and twice with random cadences per item set. Then:
//! - `gather check` matches the ground truth in every rollup of every
//!   projection;
//! - for random reports (windows aligned to minutes, hours or days, steps,
//!   group-bys, filters, measures asked), every projection the planner calls
//!   exact answers exactly what brute force over the events gives, the
//!   planner's own choice too, and every projection it calls not exact
//!   indeed lacks a dimension, a measure or a rollup that fits (or, keyed
//!   by a dimension, the report does not fix its value), and is refused
//!   when forced with `--projection`; a report fixing one referrer reads
//!   from the projection keyed by referrer no more than twice the items it
//!   returns;
//! - the planner's estimates, from the statistics ingest keeps, are within
//!   30 % of the items the queries return, and rank nested projections.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use zigzag_core::table::SortedTable;
use zigzag_gather::check;
use zigzag_gather::choose;
use zigzag_gather::execute::ExecOptions;
use zigzag_gather::filter::FilterSet;
use zigzag_gather::merge::GroupKey;
use zigzag_gather::plan::PlanRequest;
use zigzag_gather::plan::SourceRequest;
use zigzag_gather::window::WindowSpec;
use zigzag_ingest::{Pipeline, PipelineOptions};
use zigzag_loadgen::{truth, GenConfig, Generated, Generator, SyntheticSource};
use zigzag_model::truth::event_values;
use zigzag_model::{Config, KeyModel, MeasureValues, Projections, Rollup};
use zigzag_sqlite::SqliteTable;

const LAYOUT: &str = r#"
[scatter]
prefixes = 4
[[projection]]
name = "cc"
dimensions = ["country", "campaign"]
[projection.scatter]
prefixes = 3
mode = "random"
[[projection]]
name = "ref_country"
dimensions = ["referrer", "country"]
rollups = ["hour", "day"]
measures = ["clicks", "impressions", "cost"]
[[projection]]
name = "total"
rollups = ["minute", "hour"]
measures = ["clicks", "impressions"]
[projection.scatter]
prefixes = 2
mode = "random"
[[projection]]
name = "campaign"
dimensions = ["campaign"]
rollups = ["day"]
[projection.scatter]
prefixes = 1
[[projection]]
name = "by_referrer"
dimensions = ["referrer", "campaign"]
rollups = ["hour", "day"]
partition_by = "referrer"
[projection.scatter]
prefixes = 2
[flush]
interval_ms = 40
max_keys = 1500
"#;

const DAY: i64 = 86_400_000;
const HOUR: i64 = 3_600_000;
const MINUTE: i64 = 60_000;
/// 2026-10-31T00:00:00Z: two days cross a month (the hour and day rollups'
/// partition bin) and a day (the minute rollup's).
const START: i64 = 1_793_404_800_000;

/// One valid event: its time and typed values in field order.
struct Event {
    ts: i64,
    values: Vec<zigzag_model::schema::FieldValue<'static>>,
}

fn events(gen: &Generator) -> Vec<Event> {
    let mut out = Vec::new();
    let mut buf = Vec::new();
    for shard in 0..gen.config().shards {
        for seq in 1..=gen.shard_len(shard) {
            if let Generated::Valid(ev) = gen.record(shard, seq, &mut buf) {
                out.push(Event { ts: ev.ts_ms, values: ev.values() });
            }
        }
    }
    out
}

/// A `--where` on a dimension, with its oracle.
#[derive(Debug, Clone)]
enum Pred {
    Eq(&'static str, String),
    Ne(&'static str, String),
    In(&'static str, Vec<String>),
}

impl Pred {
    fn field(&self) -> &'static str {
        match self {
            Pred::Eq(f, _) | Pred::Ne(f, _) | Pred::In(f, _) => f,
        }
    }

    fn expr(&self) -> String {
        match self {
            Pred::Eq(f, v) => format!("{f}={v}"),
            Pred::Ne(f, v) => format!("{f}!={v}"),
            Pred::In(f, vs) => format!("{f} in {}", vs.join(", ")),
        }
    }

    fn keeps(&self, v: &str) -> bool {
        match self {
            Pred::Eq(_, x) => v == x,
            Pred::Ne(_, x) => v != x,
            Pred::In(_, xs) => xs.iter().any(|x| x == v),
        }
    }
}

#[derive(Debug, Clone)]
struct Report {
    window: (i64, i64),
    step: Option<i64>,
    group_by: Vec<String>,
    preds: Vec<Pred>,
    measures: Option<Vec<String>>,
}

const DIMS: [&str; 3] = ["referrer", "campaign", "country"];

fn value_of(config: &Config, e: &Event, dim: &str) -> String {
    let f = config.fields.iter().position(|f| f.name == dim).expect("a field");
    zigzag_model::schema::value::display(&config.fields[f], &e.values[f])
}

fn random_report(rng: &mut ChaCha8Rng, config: &Config, sample: &[Event]) -> Report {
    let unit = [MINUTE, HOUR, DAY][rng.gen_range(0..3)];
    let (from, to) = match unit {
        DAY => {
            let d = rng.gen_range(0..2);
            (START + d * DAY, START + (d + rng.gen_range(1..=2 - d)) * DAY)
        }
        HOUR => {
            let h = rng.gen_range(0..40);
            (START + h * HOUR, START + (h + rng.gen_range(1..9)) * HOUR)
        }
        _ => {
            let m = rng.gen_range(0..2_800);
            (START + m * MINUTE, START + (m + rng.gen_range(1..90)) * MINUTE)
        }
    };
    let step = match rng.gen_range(0..4) {
        0 => Some(unit),
        1 if unit == MINUTE => Some(5 * MINUTE),
        _ => None,
    };
    let group_by: Vec<String> = DIMS.iter().filter(|_| rng.gen_bool(0.3)).map(|d| d.to_string()).collect();
    let mut preds = Vec::new();
    for _ in 0..rng.gen_range(0..3) {
        let field = DIMS[rng.gen_range(0..3)];
        let pick = |rng: &mut ChaCha8Rng| value_of(config, &sample[rng.gen_range(0..sample.len())], field);
        preds.push(match rng.gen_range(0..3) {
            0 => Pred::Eq(field, pick(rng)),
            1 => Pred::Ne(field, pick(rng)),
            _ => Pred::In(field, (0..rng.gen_range(1..4)).map(|_| pick(rng)).collect()),
        });
    }
    let names: Vec<String> = config.measures.iter().map(|m| m.name.clone()).collect();
    let measures = rng.gen_bool(0.6).then(|| names.iter().filter(|_| rng.gen_bool(0.4)).cloned().collect::<Vec<_>>());
    let measures = measures.filter(|m| !m.is_empty());
    Report { window: (from, to), step, group_by, preds, measures }
}

/// The report by brute force over the events, in a projection's measures.
fn brute_force(config: &Config, km: &KeyModel, events: &[Event], r: &Report) -> BTreeMap<GroupKey, MeasureValues> {
    let set = km.measures();
    let mut out: BTreeMap<GroupKey, MeasureValues> = BTreeMap::new();
    for e in events.iter().filter(|e| r.window.0 <= e.ts && e.ts < r.window.1) {
        if !r.preds.iter().all(|p| p.keeps(&value_of(config, e, p.field()))) {
            continue;
        }
        let key = GroupKey {
            bucket: r.step.map(|s| e.ts.div_euclid(s) * s),
            values: r.group_by.iter().map(|d| value_of(config, e, d)).collect(),
        };
        out.entry(key).or_insert_with(|| set.zero()).merge(&event_values(set, &e.values));
    }
    out
}

/// Whether a projection can answer `r` exactly, decided apart from the planner.
fn exact(km: &KeyModel, r: &Report, config: &Config) -> bool {
    let dims_ok = r
        .group_by
        .iter()
        .map(String::as_str)
        .chain(r.preds.iter().map(|p| -> &str { p.field() }))
        .all(|d| km.dim(d).is_some());
    let all: Vec<String> = config.measures.iter().map(|m| m.name.clone()).collect();
    let measures_ok = r.measures.as_ref().unwrap_or(&all).iter().all(|m| km.measures().position(m).is_some());
    let rollups: Vec<Rollup> = km.rollups().collect();
    let rollup_ok = rollups.iter().any(|ro| {
        let u = ro.unit_ms();
        r.step.is_none_or(|s| s % u == 0) && r.window.0 % u == 0 && r.window.1 % u == 0
    });
    // Keyed by a dimension's value: the report must fix it (= or in).
    let fixed = |d: &str| r.preds.iter().any(|p| matches!(p, Pred::Eq(f, _) | Pred::In(f, _) if *f == d));
    let partition_ok = km.partition_dim().is_none_or(|d| fixed(&d.name));
    dims_ok && measures_ok && rollup_ok && partition_ok
}

fn request(r: &Report, config: &Config, projection: Option<&str>) -> PlanRequest {
    let exprs: Vec<String> = r.preds.iter().map(Pred::expr).collect();
    PlanRequest {
        window: WindowSpec::Absolute { from: r.window.0.to_string(), to: r.window.1.to_string() },
        rollup: None,
        step: r.step,
        timeseries: false,
        filters: FilterSet::parse(&exprs, config).expect("filters on dimensions"),
        now: 0,
        source: SourceRequest { projection: projection.map(String::from), measures: r.measures.clone() },
        mixing: None,
        snap: None,
        filling: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_exact_projection_answers_random_reports_as_brute_force_does() {
    answers_random_reports_as_brute_force_does(LAYOUT.to_string()).await;
}

/// The same with random cadences: each item set written every flush or
/// every 2, 4 or 10 flushes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_random_cadences_every_exact_projection_still_answers_as_brute_force_does() {
    const SETS: [&str; 13] = [
        "base.minute",
        "base.hour",
        "base.day",
        "cc.minute",
        "cc.hour",
        "cc.day",
        "ref_country.hour",
        "ref_country.day",
        "total.minute",
        "total.hour",
        "campaign.day",
        "by_referrer.hour",
        "by_referrer.day",
    ];
    for seed in 0..2u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(100 + seed);
        let mut every: Vec<String> = Vec::new();
        for set in SETS {
            if rng.gen_bool(0.6) {
                every.push(format!("\"{set}\" = {}", 40 * [2, 4, 10][rng.gen_range(0..3)]));
            }
        }
        eprintln!("cadences: {every:?}");
        answers_random_reports_as_brute_force_does(format!("{LAYOUT}every_ms = {{ {} }}\n", every.join(", "))).await;
    }
}

async fn answers_random_reports_as_brute_force_does(layout: String) {
    let config = Config::from_toml(&layout).expect("layout");
    let projections = Projections::new(&config).expect("projections");
    assert_eq!(projections.len(), 6, "the base and five projections");
    let gen = Generator::new(GenConfig {
        seed: 19,
        shards: 2,
        records: 8_000,
        start_ms: START,
        span_ms: 2 * DAY - 10_000,
        referrers: 40,
        campaigns: 6,
        malformed_fraction: 0.01,
        late_max_ms: 2 * HOUR,
        ..GenConfig::default()
    });
    let truth = truth::compute_for(&gen, &config).expect("truth");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("z.db");
    let aggregates: Arc<dyn SortedTable> = Arc::new(SqliteTable::open(&db).unwrap());
    let leases: Arc<dyn SortedTable> = Arc::new(SqliteTable::open_table(&db, "checkpoints").unwrap());
    let opts = PipelineOptions {
        batch_size: 100,
        ..PipelineOptions::new(config.clone(), "s", "w", dir.path().join("dead.jsonl"))
    };
    let pipeline = Arc::new(
        Pipeline::new(Arc::new(SyntheticSource::new(gen.clone(), Some(10_000.0))), aggregates.clone(), leases, opts)
            .unwrap(),
    );
    let summary = pipeline.run(CancellationToken::new()).await.unwrap();
    assert!(summary.flushes >= 5, "several flushes, so items are updated many times: {}", summary.flushes);

    let report = check::check(&*aggregates, &projections, &truth, 0, &ExecOptions::default()).await.unwrap();
    assert_eq!(report.mismatches(), 0, "{}", check::render(&report));
    for km in projections.iter() {
        for r in km.rollups() {
            let rows = report.rows.iter().filter(|row| row.projection == km.name() && row.rollup == r);
            assert!(rows.count() >= 3, "{} {r}: total, days and groups checked", km.name());
        }
    }

    // Ingest's statistics count the values keying `by_referrer`'s
    // partitions (40 referrers, in every bin), and only there.
    let all = zigzag_core::query::run_key_range(
        &*aggregates,
        zigzag_core::table::QueryRequest::new(zigzag_model::stats::STATS_PK, zigzag_core::table::SortKeyCondition::Any),
    )
    .await
    .unwrap();
    let mut keyed = 0;
    for item in &all.items {
        let s = zigzag_model::stats::StoredStats::from_item(item).unwrap();
        if item.sk.starts_with(b"by_referrer#") {
            let values = s.values.expect("values counted");
            assert!((28..=52).contains(&values), "40 referrers, p=6 sketch: {values}");
            keyed += 1;
        } else {
            assert_eq!(s.values, None, "{}: not keyed by a value", String::from_utf8_lossy(&item.sk));
        }
    }
    assert!(keyed >= 2, "by_referrer's hour and day bins");

    let events = events(&gen);
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let (mut answered, mut refused, mut estimated) = (0, 0, 0);
    let mut answered_by: BTreeMap<String, usize> = BTreeMap::new();
    for case in 0..120 {
        let r = random_report(&mut rng, &config, &events);
        let want_any = projections.iter().any(|km| exact(km, &r, &config));
        let planned = choose(
            &*aggregates,
            &config,
            &projections,
            &request(&r, &config, None),
            &r.group_by,
            &ExecOptions::default(),
        )
        .await;
        let Ok(chosen) = planned else {
            assert!(!want_any, "case {case}: {r:?}: refused, yet a projection is exact: {:?}", planned.err());
            refused += 1;
            continue;
        };
        for c in &chosen.candidates {
            let km = projections.by_name(&c.projection).expect("a projection");
            assert_eq!(c.verdict.is_ok(), exact(km, &r, &config), "case {case}: {} for {r:?}: {c:?}", c.projection);
        }
        // Forced onto one that is not exact: refused, never approximated.
        for c in chosen.candidates.iter().filter(|c| c.verdict.is_err()) {
            let req = request(&r, &config, Some(&c.projection));
            match zigzag_gather::gather(&*aggregates, &config, req, r.group_by.clone(), &ExecOptions::default()).await {
                Err(zigzag_gather::GatherError::Projection(why)) => assert!(why.contains(&c.projection), "{why}"),
                other => panic!("case {case}: --projection {} for {r:?}: {:?}", c.projection, other.map(|g| g.plan)),
            }
            refused += 1;
        }
        let mut names: Vec<Option<String>> = vec![None];
        names.extend(chosen.candidates.iter().filter(|c| c.verdict.is_ok()).map(|c| Some(c.projection.clone())));
        for name in names {
            let req = request(&r, &config, name.as_deref());
            let g = zigzag_gather::gather(&*aggregates, &config, req, r.group_by.clone(), &ExecOptions::default())
                .await
                .unwrap_or_else(|e| panic!("case {case}: {name:?}: {e}"));
            let km = projections.by_name(&g.plan.projection).expect("read from a projection");
            if let Some(n) = &name {
                assert_eq!(&g.plan.projection, n, "--projection is obeyed");
            } else {
                assert_eq!(g.plan.projection, chosen.projection, "the same choice twice");
            }
            let want = brute_force(&config, km, &events, &r);
            assert_eq!(g.aggregation.groups, want, "case {case}: projection {}: {r:?}", km.name());
            answered += 1;
            *answered_by.entry(km.name().to_string()).or_default() += 1;
            // The planner's estimate of the items read, from ingest's
            // statistics, against the items the queries returned.
            let estimate =
                chosen.candidates.iter().find(|c| c.projection == km.name()).and_then(|c| c.verdict.clone().ok());
            let returned = g.actual.stats.returned as f64;
            // (With one exact candidate there is nothing to compare: no statistics are read.)
            let compared = chosen.candidates.iter().filter(|c| c.verdict.is_ok()).count() >= 2;
            // In random scatter mode a key's items are one per flush that
            // wrote it, which depends on the flushes' timing and is not
            // spread evenly over a bin's buckets: estimates of a part of a
            // bin are checked in hash mode (one item per key and bucket).
            let hash = km.mode() == zigzag_model::ScatterMode::Hash;
            if let Some(e) = estimate.filter(|_| hash && compared && r.preds.is_empty() && returned >= 200.0) {
                assert!(e.measured, "case {case}: estimated from the statistics");
                assert!(
                    (e.items - returned).abs() <= 0.3 * returned,
                    "case {case}: {} estimated {} items, read {returned}",
                    km.name(),
                    e.items
                );
                estimated += 1;
            }
        }
    }
    assert!(answered > 150 && refused > 100, "{answered} answers, {refused} refusals");
    assert!(answered_by.get("by_referrer").is_some_and(|n| *n >= 5), "keyed by referrer: {answered_by:?}");
    assert!(estimated > 20, "{estimated} estimates compared with what was read");

    // Nested projections rank by their items: countries by campaign come
    // from `cc` (6 x 12 keys), not `ref_country` (40 x 12) nor the base.
    let r = Report {
        window: (START, START + DAY),
        step: None,
        group_by: vec!["country".into()],
        preds: vec![],
        measures: Some(vec!["clicks".into(), "impressions".into()]),
    };
    let p =
        choose(&*aggregates, &config, &projections, &request(&r, &config, None), &r.group_by, &ExecOptions::default())
            .await
            .unwrap();
    let items = |name: &str| p.candidates.iter().find(|c| c.projection == name).unwrap().verdict.clone().unwrap().items;
    assert_eq!(p.projection, "cc", "{:?}", p.candidates);
    assert!(items("cc") < items("ref_country") && items("ref_country") < items("base"), "{:?}", p.candidates);
    assert!(p.statistics_cost.0 >= 3, "one statistics query per exact candidate: {:?}", p.statistics_cost);

    // Equality reads: each of a few referrers' hourly series over a day is
    // read from the projection keyed by referrer, exactly, scanning at most
    // twice the items it returns (the base scans the Z-box's other
    // referrers too).
    let mut referrers: Vec<String> = truth.by["referrer"].keys().cloned().collect();
    referrers.truncate(5);
    for referrer in referrers {
        let r = Report {
            window: (START, START + DAY),
            step: Some(HOUR),
            group_by: vec!["campaign".into()],
            preds: vec![Pred::Eq("referrer", referrer.clone())],
            measures: None,
        };
        let g = zigzag_gather::gather(
            &*aggregates,
            &config,
            request(&r, &config, None),
            r.group_by.clone(),
            &ExecOptions::default(),
        )
        .await
        .unwrap();
        assert_eq!(g.plan.projection, "by_referrer", "referrer {referrer}: {:?}", g.plan.candidates);
        let km = projections.by_name("by_referrer").unwrap();
        assert_eq!(g.aggregation.groups, brute_force(&config, km, &events, &r), "referrer {referrer}");
        let s = &g.actual.stats;
        assert!(s.returned > 0 && s.scanned <= 2 * s.returned, "referrer {referrer}: {s}");
    }
}
