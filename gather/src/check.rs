//! `gather check`: the store against a generator's ground truth
//! ([`Truth`], written by `loadgen`), exactly: totals, per UTC day, per
//! country and per campaign, in every configured rollup (a flush writes
//! each rollup separately, so each can be wrong on its own). Each rollup is
//! read once over the whole UTC days from the first event to the last and
//! summed four ways.

use crate::error::{GatherError, Result};
use crate::execute::{execute, Actual, ExecOptions};
use crate::filter::FilterSet;
use crate::merge::Aggregation;
use crate::plan::{plan, Plan, PlanRequest};
use crate::window::WindowSpec;
use chrono::{TimeZone, Utc};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use std::collections::{BTreeMap, BTreeSet};
use zigzag_core::table::SortedTable;
use zigzag_model::measures::format_micros;
use zigzag_model::{Field, KeyModel, Measures, Rollup, Truth, TruthMeasures};

const DAY_MS: i64 = 86_400_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    Match,
    Mismatch,
    /// Not checked, and why.
    Skipped(String),
}

/// One compared group.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckRow {
    pub rollup: Rollup,
    /// `total`, `day`, `country` or `campaign`.
    pub check: &'static str,
    pub key: String,
    pub store: Measures,
    pub truth: Measures,
    pub status: Status,
}

#[derive(Debug, Clone)]
pub struct CheckReport {
    pub rows: Vec<CheckRow>,
    /// The plan of each rollup read, finest first.
    pub plans: Vec<Plan>,
    /// What reading every rollup cost, summed.
    pub actual: Actual,
}

impl CheckReport {
    pub fn mismatches(&self) -> usize {
        self.rows.iter().filter(|r| r.status == Status::Mismatch).count()
    }
}

fn compare(
    rollup: Rollup,
    check: &'static str,
    store: BTreeMap<String, Measures>,
    truth: &BTreeMap<String, TruthMeasures>,
) -> Vec<CheckRow> {
    let keys: BTreeSet<&String> = store.keys().chain(truth.keys()).collect();
    keys.into_iter()
        .map(|k| {
            let s = store.get(k).copied().unwrap_or_default();
            let t = truth.get(k).map(|t| Measures::from(*t)).unwrap_or_default();
            let status = if s == t { Status::Match } else { Status::Mismatch };
            CheckRow { rollup, check, key: k.clone(), store: s, truth: t, status }
        })
        .collect()
}

fn day_label(t: i64) -> String {
    Utc.timestamp_millis_opt(t).single().map_or_else(|| t.to_string(), |d| d.format("%Y-%m-%d").to_string())
}

/// Reads the store over the truth's days and compares.
pub async fn check<T: SortedTable + ?Sized>(
    table: &T,
    km: &KeyModel,
    truth: &Truth,
    now: i64,
    opts: &ExecOptions,
) -> Result<CheckReport> {
    let (Some(first), Some(last)) = (truth.first_ms, truth.last_ms) else {
        return Err(GatherError::Truth("it records no event (first_ms/last_ms are missing)".into()));
    };
    let start = first.div_euclid(DAY_MS) * DAY_MS;
    let end = last.div_euclid(DAY_MS) * DAY_MS + DAY_MS;
    let mut rollups: Vec<Rollup> = km.rollups().collect();
    rollups.sort_by_key(|r| r.unit_ms());
    if rollups.is_empty() {
        return Err(GatherError::Config("no rollups".into()));
    }
    let mut report = CheckReport { rows: Vec::new(), plans: Vec::new(), actual: Actual::default() };
    for rollup in rollups {
        let (rows, plan, actual) = check_rollup(table, km, truth, rollup, (start, end), now, opts).await?;
        report.rows.extend(rows);
        report.plans.push(plan);
        report.actual.queries += actual.queries;
        report.actual.stats.add(&actual.stats);
        report.actual.kept += actual.kept;
        report.actual.retries += actual.retries;
        report.actual.wall += actual.wall;
    }
    Ok(report)
}

async fn check_rollup<T: SortedTable + ?Sized>(
    table: &T,
    km: &KeyModel,
    truth: &Truth,
    rollup: Rollup,
    (start, end): (i64, i64),
    now: i64,
    opts: &ExecOptions,
) -> Result<(Vec<CheckRow>, Plan, Actual)> {
    let req = PlanRequest {
        window: WindowSpec::Absolute { from: start.to_string(), to: end.to_string() },
        rollup: Some(rollup),
        step: None,
        timeseries: false,
        filters: FilterSet::default(),
        now,
    };
    let plan = plan(km, req)?;
    let has = |f: Field| km.fields().contains(&f);
    let mut total = Aggregation::new(None, vec![]);
    let mut by_day = Aggregation::new(Some(DAY_MS), vec![]);
    let mut by_country = has(Field::Country).then(|| Aggregation::new(None, vec![Field::Country]));
    let mut by_campaign = has(Field::Campaign).then(|| Aggregation::new(None, vec![Field::Campaign]));
    let actual = execute(table, &plan, opts, |item| {
        total.add_item(item)?;
        by_day.add_item(item)?;
        for a in [&mut by_country, &mut by_campaign].into_iter().flatten() {
            a.add_item(item)?;
        }
        Ok(())
    })
    .await?;

    let mut rows = compare(rollup, "total", BTreeMap::from([("all".to_string(), total.total())]), &{
        BTreeMap::from([("all".to_string(), truth.totals)])
    });
    let days = by_day.groups.iter().map(|(k, m)| (day_label(k.bucket.unwrap_or_default()), *m)).collect();
    rows.extend(compare(rollup, "day", days, &truth.by_day));
    for (check, agg, expected, field) in [
        ("country", &by_country, &truth.by_country, Field::Country),
        ("campaign", &by_campaign, &truth.by_campaign, Field::Campaign),
    ] {
        match agg {
            Some(a) => {
                let store = a.by_values().into_iter().map(|(k, m)| (k.join(","), m)).collect();
                rows.extend(compare(rollup, check, store, expected));
            }
            None => rows.push(CheckRow {
                rollup,
                check,
                key: "-".into(),
                store: Measures::default(),
                truth: Measures::default(),
                status: Status::Skipped(format!("{field} is not a configured dimension")),
            }),
        }
    }
    Ok((rows, plan, actual))
}

fn both<V: PartialEq + ToString>(s: V, t: V) -> String {
    if s == t {
        s.to_string()
    } else {
        format!("{} != {} (truth)", s.to_string(), t.to_string())
    }
}

fn micros(v: Option<i64>) -> String {
    v.map_or_else(String::new, |v| format_micros(v as i128))
}

/// The comparison as a table, mismatches showing store != truth.
pub fn render(report: &CheckReport) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(["rollup", "check", "key", "clicks", "impressions", "cost", "cost_min", "cost_max", "status"]);
    for r in &report.rows {
        let status = match &r.status {
            Status::Match => "MATCH".to_string(),
            Status::Mismatch => "MISMATCH".to_string(),
            Status::Skipped(why) => format!("SKIPPED: {why}"),
        };
        let (s, u) = (&r.store, &r.truth);
        t.add_row([
            r.rollup.to_string(),
            r.check.to_string(),
            r.key.clone(),
            both(s.clicks, u.clicks),
            both(s.impressions, u.impressions),
            both(format_micros(s.cost_sum), format_micros(u.cost_sum)),
            both(micros(s.cost_min), micros(u.cost_min)),
            both(micros(s.cost_max), micros(u.cost_max)),
            status,
        ]);
    }
    let n = report.mismatches();
    let verdict = if n == 0 { "all groups MATCH".to_string() } else { format!("{n} group(s) MISMATCH") };
    format!("{t}\n{verdict}\n")
}
