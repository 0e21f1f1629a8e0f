//! BENCHMARKS.md "Time ranges": every Grafana time-picker option and report
//! kind on a table of the shipped layout, read three ways:
//! - **before**: from one rollup, the coarsest aligned with both ends of
//!   the window (how `gather` read until mixed plans);
//! - **after**: as the planner now chooses (projection and decomposition,
//!   coarse buckets only where the lease table says they are complete);
//! - **ideal**: the decomposition with every bucket complete (whole days
//!   from day items, whole hours from hour items, the rest from minutes),
//!   on the projection `after` chose.
//!
//! Usage (`bench/ranges.sh` makes the table and runs it):
//! `ranges_bench DB NOW_MS` prints one markdown row per (option, report):
//! items, RCU and wall time of each way, and whether `after` answered
//! exactly what `before` did.

use std::time::Instant;
use zigzag_gather::execute::{execute_fresh, ExecOptions};
use zigzag_gather::filter::FilterSet;
use zigzag_gather::merge::Aggregation;
use zigzag_gather::plan::SourceRequest;
use zigzag_gather::plan::{plan_source, Mixing, PlanRequest};
use zigzag_gather::window::{Snap, WindowSpec};
use zigzag_gather::Completeness;
use zigzag_model::{Config, Projections};
use zigzag_sqlite::SqliteTable;

const M: i64 = 60_000;
const H: i64 = 60 * M;
const D: i64 = 24 * H;

/// A report kind as the CLI asks it: group-by, measures, time series.
struct Kind {
    name: &'static str,
    group_by: &'static [&'static str],
    measures: Option<&'static [&'static str]>,
    timeseries: bool,
}

const KINDS: [Kind; 4] = [
    Kind { name: "totals by campaign", group_by: &["campaign"], measures: None, timeseries: false },
    Kind {
        name: "top 20 referrers by clicks",
        group_by: &["referrer"],
        measures: Some(&["clicks"]),
        timeseries: false,
    },
    Kind {
        name: "ctr by country",
        group_by: &["country"],
        measures: Some(&["clicks", "impressions"]),
        timeseries: false,
    },
    Kind { name: "clicks time series", group_by: &[], measures: None, timeseries: true },
];

/// Grafana's time picker at `now`: (option, from, to), `to` being now
/// rounded up to the minute (Grafana sends `now` to the millisecond; the
/// finest bucket holding it is the last one read).
fn options(now: i64) -> Vec<(&'static str, i64, i64)> {
    let end = (now + M - 1).div_euclid(M) * M;
    let today = now.div_euclid(D) * D;
    // Weeks start on Monday (ISO, Grafana's default for most locales); the
    // epoch was a Thursday.
    let week = today - (today.div_euclid(D) + 3).rem_euclid(7) * D;
    let last = |ms: i64| (end - ms, end);
    vec![
        ("Last 5 minutes", last(5 * M).0, end),
        ("Last 15 minutes", last(15 * M).0, end),
        ("Last 30 minutes", last(30 * M).0, end),
        ("Last 1 hour", last(H).0, end),
        ("Last 3 hours", last(3 * H).0, end),
        ("Last 6 hours", last(6 * H).0, end),
        ("Last 12 hours", last(12 * H).0, end),
        ("Last 24 hours", last(D).0, end),
        ("Last 2 days", last(2 * D).0, end),
        ("Last 7 days", last(7 * D).0, end),
        ("Last 30 days", last(30 * D).0, end),
        ("Today so far", today, end),
        ("This week so far", week, end),
        ("Yesterday", today - D, today),
    ]
}

fn request(from: i64, to: i64, now: i64, kind: &Kind, mixed: bool, complete: Completeness) -> PlanRequest {
    PlanRequest {
        window: WindowSpec::Absolute { from: from.to_string(), to: to.to_string() },
        rollup: None,
        step: None,
        timeseries: kind.timeseries,
        filters: FilterSet::default(),
        now,
        source: SourceRequest {
            projection: None,
            measures: kind.measures.map(|m| m.iter().map(|s| s.to_string()).collect()),
        },
        mixing: mixed.then(|| Mixing::complete(complete)),
        snap: None,
        filling: Default::default(),
    }
}

struct Measured {
    items: u64,
    rcu: f64,
    ms: f64,
    rollups: String,
    projection: String,
    /// The window read, and why it is not the one asked (`--snap`).
    window: String,
    groups: Aggregation,
}

impl Measured {
    /// One way's table cell: rollups, items, RCU, ms.
    fn cells(&self) -> String {
        format!("{}, {}, {:.1}, {:.0}", self.rollups, self.items, self.rcu, self.ms)
    }
}

async fn gather(table: &SqliteTable, config: &Config, req: PlanRequest, kind: &Kind) -> Result<Measured, String> {
    let t0 = Instant::now();
    let group_by: Vec<String> = kind.group_by.iter().map(|s| s.to_string()).collect();
    let g = zigzag_gather::gather(table, config, req, group_by, &ExecOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    Ok(Measured {
        items: g.actual.stats.returned,
        rcu: g.actual.stats.rcu + g.plan.statistics_cost.1,
        ms: t0.elapsed().as_secs_f64() * 1e3,
        rollups: g.plan.rollups(),
        projection: g.plan.projection.clone(),
        window: g.plan.window.to_string(),
        groups: g.aggregation,
    })
}

async fn ideal(table: &SqliteTable, config: &Config, projection: &str, req: PlanRequest, kind: &Kind) -> Measured {
    let projections = Projections::new(config).expect("the layout");
    let km = projections.by_name(projection).expect("a projection of the layout");
    let t0 = Instant::now();
    let plan = plan_source(km, req).expect("the greedy decomposition");
    let group_by: Vec<String> = kind.group_by.iter().map(|s| s.to_string()).collect();
    let fresh = || Aggregation::new(plan.step, group_by.clone(), km.measures().clone());
    let (groups, actual) =
        execute_fresh(table, &plan, &ExecOptions::default(), fresh, |a, i| a.add_item(i)).await.expect("read");
    Measured {
        items: actual.stats.returned,
        rcu: actual.stats.rcu,
        ms: t0.elapsed().as_secs_f64() * 1e3,
        rollups: plan.rollups(),
        projection: projection.to_string(),
        window: plan.window.to_string(),
        groups,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(db), Some(now)) = (args.get(1), args.get(2).and_then(|n| n.parse::<i64>().ok())) else {
        eprintln!("usage: ranges_bench DB NOW_MS");
        std::process::exit(2);
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    rt.block_on(async {
        let table = SqliteTable::open(db).expect("the database");
        let leases = SqliteTable::open_table(db, "checkpoints").expect("its lease table");
        let config = Config::shipped();
        let complete = Completeness::read(&config, &leases).await.expect("the lease table");
        println!("| option | report | projection | before: rollup, items, RCU, ms | after: rollups, items, RCU, ms | ideal items | after / ideal | items before / after | same answer |");
        println!("|---|---|---|---|---|---:|---:|---:|---|");
        let mut rows: Vec<(&str, i64, i64, &Kind)> = Vec::new();
        for (option, from, to) in options(now) {
            for kind in &KINDS {
                rows.push((option, from, to, kind));
            }
        }
        let extra = [
            Kind { name: "totals by campaign (--last 30d)", group_by: &["campaign"], measures: None, timeseries: false },
            Kind { name: "totals by referrer (--last 30d)", group_by: &["referrer"], measures: None, timeseries: false },
        ];
        let end = (now + M - 1).div_euclid(M) * M;
        for kind in &extra {
            rows.push(("--last 30d", end - 30 * D, end, kind));
        }
        let (mut worst, mut answered, mut equal, mut snapped_rows) = (0.0f64, 0, 0, 0);
        for (option, from, to, kind) in rows {
            let before = gather(&table, &config, request(from, to, now, kind, false, Completeness::unchecked()), kind).await;
            let after = gather(&table, &config, request(from, to, now, kind, true, complete.clone()), kind).await;
            let (before, after) = match (before, after) {
                (Ok(b), Ok(a)) => (b, a),
                // Off every projection's hours that keeps the report's
                // labels: read over the hours the window touches.
                (Err(b), Err(_)) if kind.group_by == ["referrer"] => {
                    let snapped = PlanRequest { snap: Some(Snap::Out), ..request(from, to, now, kind, true, complete.clone()) };
                    let after = gather(&table, &config, snapped.clone(), kind).await.expect("--snap out answers");
                    let best = ideal(&table, &config, &after.projection, snapped, kind).await;
                    worst = worst.max(after.items as f64 / best.items.max(1) as f64);
                    snapped_rows += 1;
                    println!(
                        "| {option} | {} | {} | refused: {} | --snap out {}: {} | {} ({}) | {:.2} | | (another window) |",
                        kind.name,
                        after.projection,
                        b.chars().take(60).collect::<String>(),
                        after.window,
                        after.cells(),
                        best.items,
                        best.rollups,
                        after.items as f64 / best.items.max(1) as f64,
                    );
                    continue;
                }
                (b, a) => {
                    let said = |r: &Result<Measured, String>| match r {
                        Ok(m) => m.cells(),
                        Err(e) => format!("refused: {}", e.chars().take(90).collect::<String>()),
                    };
                    println!("| {option} | {} | | {} | {} | | | | |", kind.name, said(&b), said(&a));
                    continue;
                }
            };
            let best = ideal(&table, &config, &after.projection, request(from, to, now, kind, true, complete.clone()), kind).await;
            worst = worst.max(after.items as f64 / best.items.max(1) as f64);
            answered += 1;
            equal += usize::from(before.groups.groups == after.groups.groups);
            println!(
                "| {option} | {} | {} | {} | {} | {} ({}) | {:.2} | {:.1}x | {} |",
                kind.name,
                after.projection,
                before.cells(),
                after.cells(),
                best.items,
                best.rollups,
                after.items as f64 / best.items.max(1) as f64,
                before.items as f64 / after.items.max(1) as f64,
                if before.groups.groups == after.groups.groups && before.projection == after.projection {
                    "yes"
                } else if before.projection != after.projection {
                    "other projection"
                } else {
                    "NO"
                },
            );
        }
        println!();
        println!("{answered} answered: the most items read against the ideal decomposition's {worst:.2}x; {equal} of {answered} answers equal to before's; {snapped_rows} refused before answered with --snap out");
    });
}
