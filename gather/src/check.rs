//! `gather check`: the store against a generator's ground truth
//! ([`Truth`], written by `loadgen`), exactly: every measure in totals, per
//! UTC day and per value of every dimension the truth and the projection
//! share, in every rollup of every projection (a flush writes each one
//! separately, so each can be wrong on its own). Each is read once over the
//! whole UTC days from the first event to the last.

use crate::error::{GatherError, Result};
use crate::execute::{execute_fresh, Actual, ExecOptions};
use crate::filter::FilterSet;
use crate::merge::Aggregation;
use crate::plan::{plan_source, Plan, PlanRequest};
use crate::window::WindowSpec;
use chrono::{TimeZone, Utc};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use std::collections::{BTreeMap, BTreeSet};
use zigzag_core::table::SortedTable;
use zigzag_model::truth::{raw_group, Named};
use zigzag_model::{KeyModel, MeasureSet, MeasureValue, MeasureValues, Projections, Rollup, Truth};

const DAY_MS: i64 = 86_400_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    Match,
    Mismatch,
    /// The values match, but a sketch's answer is farther from the exact
    /// one than its kind allows (`Sketch::check_values`).
    Inaccurate(String),
    /// Not checked, and why.
    Skipped(String),
}

/// One compared group.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckRow {
    /// The projection read.
    pub projection: String,
    pub rollup: Rollup,
    /// `total`, `day`, or a dimension's name.
    pub check: String,
    pub key: String,
    /// In the projection's measures (`CheckReport::sets`).
    pub store: MeasureValues,
    pub truth: MeasureValues,
    pub status: Status,
}

#[derive(Debug, Clone)]
pub struct CheckReport {
    /// The layout's measures (the base's rows' values, in order).
    pub set: MeasureSet,
    /// Each projection's measures (its rows' values, in order).
    pub sets: Vec<(String, MeasureSet)>,
    pub rows: Vec<CheckRow>,
    /// The plan of each rollup read, finest first.
    pub plans: Vec<Plan>,
    /// What reading every rollup cost, summed.
    pub actual: Actual,
    /// Rollups not checked because the truth's first day is past their
    /// retention (their items may be deleted): `projection.rollup: why`.
    pub past_retention: Vec<String>,
    /// What a layout change counts from its cut on only (a part, a measure
    /// a projection gained), so not compared with a truth of every event.
    pub counted_from_cut: Vec<String>,
}

impl CheckReport {
    pub fn mismatches(&self) -> usize {
        self.rows.iter().filter(|r| matches!(r.status, Status::Mismatch | Status::Inaccurate(_))).count()
    }
}

fn compare(
    set: &MeasureSet,
    projection: &str,
    rollup: Rollup,
    check: &str,
    store: BTreeMap<String, MeasureValues>,
    truth: &BTreeMap<String, Named>,
    raw: &BTreeMap<String, BTreeMap<String, Option<Vec<i64>>>>,
) -> Vec<CheckRow> {
    let keys: BTreeSet<&String> = store.keys().chain(truth.keys()).collect();
    keys.into_iter()
        .map(|k| {
            let s = store.get(k).cloned().unwrap_or_else(|| set.zero());
            let t = truth.get(k).map_or_else(|| set.zero(), |t| MeasureValues::from_named(set, t));
            let status = match s == t {
                true => accuracy(set, &s, raw, &raw_group(check, k)),
                false => Status::Mismatch,
            };
            CheckRow {
                projection: projection.to_string(),
                rollup,
                check: check.to_string(),
                key: k.clone(),
                store: s,
                truth: t,
                status,
            }
        })
        .collect()
}

/// Each sketch's answers against the group's exact values, where the
/// truth kept them.
fn accuracy(
    set: &MeasureSet,
    store: &MeasureValues,
    raw: &BTreeMap<String, BTreeMap<String, Option<Vec<i64>>>>,
    group: &str,
) -> Status {
    for (m, v) in set.measures().iter().zip(&store.0) {
        let MeasureValue::Sketch(sketch) = v else { continue };
        let Some(Some(values)) = raw.get(&m.name).and_then(|groups| groups.get(group)) else { continue };
        if let Err(why) = sketch.check_values(&mut values.clone()) {
            return Status::Inaccurate(format!("{}: {why}", m.name));
        }
    }
    Status::Match
}

fn day_label(t: i64) -> String {
    Utc.timestamp_millis_opt(t).single().map_or_else(|| t.to_string(), |d| d.format("%Y-%m-%d").to_string())
}

/// Reads the store over the truth's days and compares, projection by
/// projection.
pub async fn check<T: SortedTable + ?Sized>(
    table: &T,
    projections: &Projections,
    truth: &Truth,
    now: i64,
    opts: &ExecOptions,
) -> Result<CheckReport> {
    let (Some(first), Some(last)) = (truth.first_ms, truth.last_ms) else {
        return Err(GatherError::Truth("it records no event (first_ms/last_ms are missing)".into()));
    };
    let start = first.div_euclid(DAY_MS) * DAY_MS;
    let end = last.div_euclid(DAY_MS) * DAY_MS + DAY_MS;
    let mut report = CheckReport {
        set: projections.all_dims().measures().clone(),
        sets: Vec::new(),
        rows: Vec::new(),
        plans: Vec::new(),
        actual: Actual::default(),
        past_retention: Vec::new(),
        counted_from_cut: Vec::new(),
    };
    // Retried as every other read of the check is (`Paced`), and counted.
    let retried = crate::throttle::Retried::new(table);
    let since = since_cut(&retried).await?;
    report.actual.retries += retried.retries();
    for km in projections.iter() {
        let mut rollups: Vec<Rollup> = km.rollups().collect();
        rollups.sort_by_key(|r| r.unit_ms());
        let gained: Vec<&str> =
            since.measures.iter().filter(|(p, ..)| p == km.name()).map(|(_, m, _)| m.as_str()).collect();
        for (_, m, note) in since.measures.iter().filter(|(p, ..)| p == km.name()) {
            report.counted_from_cut.push(format!("measure {m} of {}: {note}", km.name()));
        }
        let set = &match gained.is_empty() {
            true => km.measures().clone(),
            false => km.measures().without(&gained),
        };
        report.sets.push((km.name().to_string(), set.clone()));
        for rollup in rollups {
            if let Err(why) = km.retention().readable(rollup, start, now) {
                report.past_retention.push(format!("{}.{rollup}: {why}", km.name()));
                continue;
            }
            if let Some((.., note)) = since.parts.iter().find(|(p, r, _)| p == km.name() && *r == rollup) {
                report.counted_from_cut.push(format!("{}.{rollup}: {note}", km.name()));
                continue;
            }
            let (rows, plan, actual) = check_rollup(table, km, set, truth, rollup, (start, end), now, opts).await?;
            report.rows.extend(rows);
            report.plans.push(plan);
            report.actual.queries += actual.queries;
            report.actual.stats.add(&actual.stats);
            report.actual.kept += actual.kept;
            report.actual.retries += actual.retries;
            report.actual.rereads += actual.rereads;
            report.actual.compacted_bins += actual.compacted_bins;
            report.actual.whole += actual.whole;
            report.actual.wall += actual.wall;
        }
    }
    Ok(report)
}

/// What the table's layout versions count from a cut on only: parts
/// (projection, rollup, why) and measures (projection, measure, why).
#[derive(Default)]
struct SinceCut {
    parts: Vec<(String, Rollup, String)>,
    measures: Vec<(String, String, String)>,
}

async fn since_cut<T: SortedTable + ?Sized>(table: &T) -> Result<SinceCut> {
    let stored = zigzag_model::versions::load(table).await.map_err(|e| GatherError::Config(e.to_string()))?;
    let Some(stored) = stored else { return Ok(SinceCut::default()) };
    let note = |version: u32, cut: i64| {
        format!(
            "counted from {} on (layout version {version}); the truth counts every event",
            zigzag_core::schema::format_instant(cut)
        )
    };
    let parts = stored
        .added()
        .into_iter()
        .filter_map(|(v, a)| match a {
            zigzag_model::versions::Added::Counted(t) => {
                Some((t.projection.clone(), t.rollup, note(v.number, v.cut_ms)))
            }
            zigzag_model::versions::Added::Fill(_) => None,
        })
        .collect();
    let measures =
        stored.measured_from().into_iter().map(|f| (f.projection, f.measure, note(f.version, f.cut_ms))).collect();
    Ok(SinceCut { parts, measures })
}

#[allow(clippy::too_many_arguments)]
async fn check_rollup<T: SortedTable + ?Sized>(
    table: &T,
    km: &KeyModel,
    set: &MeasureSet,
    truth: &Truth,
    rollup: Rollup,
    (start, end): (i64, i64),
    now: i64,
    opts: &ExecOptions,
) -> Result<(Vec<CheckRow>, Plan, Actual)> {
    // A projection keyed by a dimension's value is read value by value:
    // every value the truth knows.
    let filters = match km.partition_dim() {
        None => FilterSet::default(),
        Some(d) => {
            let values = truth.by.get(&d.name).ok_or_else(|| {
                GatherError::Truth(format!(
                    "it has no totals by {}, which projection {} is keyed by",
                    d.name,
                    km.name()
                ))
            })?;
            FilterSet::default().with_values(&d.name, values.keys().cloned().collect())
        }
    };
    let req = PlanRequest {
        window: WindowSpec::Absolute { from: start.to_string(), to: end.to_string() },
        rollup: Some(rollup),
        step: None,
        timeseries: false,
        filters,
        now,
        source: Default::default(),
        mixing: None,
        snap: None,
        filling: Default::default(),
    };
    let plan = plan_source(km, req)?;
    let fresh_total = || Aggregation::new(None, vec![], set.clone());
    let fresh_by_day = || Aggregation::new(Some(DAY_MS), vec![], set.clone());
    // A projection is checked on the dimensions it keeps; the base says
    // which of the truth's are not dimensions at all.
    let fresh_by_dim = || -> Vec<(String, Option<Aggregation>)> {
        truth
            .by
            .keys()
            .filter(|d| km.is_base() || km.dim(d).is_some())
            .map(|d| (d.clone(), km.dim(d).map(|_| Aggregation::new(None, vec![d.clone()], set.clone()))))
            .collect()
    };
    let fresh = || (fresh_total(), fresh_by_day(), fresh_by_dim());
    let ((total, by_day, by_dim), actual) =
        execute_fresh(table, &plan, opts, fresh, |(total, by_day, by_dim), item| {
            total.add_item(item)?;
            by_day.add_item(item)?;
            for a in by_dim.iter_mut().filter_map(|(_, a)| a.as_mut()) {
                a.add_item(item)?;
            }
            Ok(())
        })
        .await?;

    let all = |v: MeasureValues| BTreeMap::from([("all".to_string(), v)]);
    let name = km.name();
    let mut rows = compare(
        set,
        name,
        rollup,
        "total",
        all(total.total()),
        &BTreeMap::from([("all".into(), truth.totals.clone())]),
        &truth.raw,
    );
    let days = by_day.groups.iter().map(|(k, m)| (day_label(k.bucket.unwrap_or_default()), m.clone())).collect();
    rows.extend(compare(set, name, rollup, "day", days, &truth.by_day, &truth.raw));
    for (dim, agg) in &by_dim {
        match agg {
            Some(a) => {
                let store = a.by_values().into_iter().map(|(k, m)| (k.join(","), m)).collect();
                rows.extend(compare(set, name, rollup, dim, store, &truth.by[dim], &truth.raw));
            }
            None => rows.push(CheckRow {
                projection: name.to_string(),
                rollup,
                check: dim.clone(),
                key: "-".into(),
                store: set.zero(),
                truth: set.zero(),
                status: Status::Skipped(format!("{dim} is not a dimension of the layout")),
            }),
        }
    }
    Ok((rows, plan, actual))
}

fn both(s: String, t: String) -> String {
    if s == t {
        s
    } else {
        format!("{s} != {t} (truth)")
    }
}

/// The comparison as tables, one per projection (each has its measures):
/// every total and day row, and of each dimension's groups the ones that
/// do not match (a dimension can have thousands of values), then one line
/// per dimension saying how many matched. Mismatches show store != truth.
pub fn render(report: &CheckReport) -> String {
    let mut out = String::new();
    for (projection, set) in &report.sets {
        let rows: Vec<&CheckRow> = report.rows.iter().filter(|r| &r.projection == projection).collect();
        if report.sets.len() > 1 {
            out.push_str(&format!("projection {projection}\n"));
        }
        out.push_str(&render_projection(set, &rows));
    }
    for skipped in &report.past_retention {
        out.push_str(&format!("not checked, past retention: {skipped}\n"));
    }
    for skipped in &report.counted_from_cut {
        out.push_str(&format!("not checked, {skipped}\n"));
    }
    let n = report.mismatches();
    let verdict = if n == 0 { "all groups MATCH".to_string() } else { format!("{n} group(s) MISMATCH") };
    format!("{out}{verdict}\n")
}

fn render_projection(set: &MeasureSet, rows: &[&CheckRow]) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    let mut header: Vec<String> = vec!["rollup".into(), "check".into(), "key".into()];
    header.extend(set.measures().iter().map(|m| m.name.clone()));
    header.push("status".into());
    t.set_header(header);
    let shown = |r: &&&CheckRow| r.check == "total" || r.check == "day" || r.status != Status::Match;
    for r in rows.iter().filter(shown) {
        let status = match &r.status {
            Status::Match => "MATCH".to_string(),
            Status::Mismatch => "MISMATCH".to_string(),
            Status::Inaccurate(why) => format!("INACCURATE: {why}"),
            Status::Skipped(why) => format!("SKIPPED: {why}"),
        };
        let mut row = vec![r.rollup.to_string(), r.check.clone(), r.key.clone()];
        for ((m, s), u) in set.measures().iter().zip(&r.store.0).zip(&r.truth.0) {
            row.push(both(s.text(m.scale), u.text(m.scale)));
        }
        row.push(status);
        t.add_row(row);
    }
    let mut counts: BTreeMap<(Rollup, &str), (usize, usize)> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.check != "total" && r.check != "day") {
        let c = counts.entry((r.rollup, r.check.as_str())).or_default();
        c.0 += usize::from(r.status == Status::Match);
        c.1 += 1;
    }
    let mut lines = String::new();
    for ((rollup, check), (matched, all)) in counts {
        lines.push_str(&format!("{rollup} by {check}: {matched} of {all} groups MATCH\n"));
    }
    format!("{t}\n{lines}")
}
