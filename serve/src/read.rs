//! Reading a query's leaves: each becomes a `gather` time series (the same
//! [`PlanRequest`] the CLI builds, planned by the same planner), then the
//! buckets of each step's range are folded into one sample.
//!
//! A leaf at step `t` with range `r` and offset `o` holds the buckets that
//! end in `(t - o - r, t - o]`, any `r`: the time span
//! `[floor(t - o - r), floor(t - o))` to the sample bucket (`spans`). It
//! is read at the coarsest rollup unit both ends of every span lie on (so
//! each span is whole buckets of it), when the leaf's function is the measure's own merge (`sum` of
//! counts, `min` of minima, ...); other functions (`count_over_time`,
//! `avg_over_time`, `last_over_time`) need the sample buckets themselves.
//! Leaves with the same filters, grouping and span share one read.
//!
//! A read goes through the [`Reader`] (`reader.rs`): identical reads in
//! flight are one, the slices that did not change since they were read
//! come from the cache, and the small reads every query makes (layout,
//! statistics, change marks) are shared.

use crate::reader::Reader;

use crate::cache::CachedRead;
use crate::catalog::Catalog;
use crate::error::{Limit, Limits, Result, ServeError};
use crate::query::{merges, spans, Leaf, Metric, Query};
use crate::series::Vector;
use futures::future::FutureExt;
use std::sync::Arc;
use zigzag_gather::execute::ExecOptions;
use zigzag_gather::plan::SourceRequest;
use zigzag_gather::plan::{Mixing, PlanRequest};
use zigzag_gather::window::{format_duration, WindowSpec};

use zigzag_model::measure::MeasureKind;

/// What reading cost, and what a user should know about it.
#[derive(Debug, Clone, Default)]
pub struct ReadReport {
    pub infos: Vec<String>,
    pub requests: u64,
    pub rcu: f64,
    /// The plans, as `gather --explain` prints them.
    pub explain: Vec<String>,
}

/// One read shared by leaves.
struct Read {
    leaves: Vec<usize>,
    unit: i64,
    from: i64,
    to: i64,
    /// Every leaf folds its range by the measure's merge: coarser items
    /// than `unit` may stand for its buckets where whole (`gather`'s mixed
    /// plans), never across `cuts`.
    mixed: bool,
    /// The ends of every leaf's span at every step.
    cuts: Vec<i64>,
}

/// The kind of the measure a leaf reads (None: a ratio).
fn catalog_kind(leaf: &Leaf, catalog: &Catalog) -> Option<MeasureKind> {
    match &leaf.metric {
        Metric::Measure(m) => catalog.kind(m),
        Metric::Ratio(_) => None,
    }
}

/// The coarsest unit a leaf can be read at.
fn unit_of(leaf: &Leaf, spans: &[(i64, i64)], catalog: &Catalog) -> i64 {
    let coarse = merges(leaf.func, catalog_kind(leaf, catalog));
    catalog
        .units_ms
        .iter()
        .copied()
        .find(|&u| {
            (u == leaf.sample_ms || (coarse && u > leaf.sample_ms))
                && spans.iter().all(|(a, b)| a.rem_euclid(u) == 0 && b.rem_euclid(u) == 0)
        })
        .unwrap_or(leaf.sample_ms)
}

/// Every leaf's series: per read, the leaves it serves and their series
/// in that order (shared: the same `Arc` while the read is unchanged).
pub struct Leaves {
    pub reads: Vec<(Vec<usize>, Arc<Vec<Vector>>)>,
    count: usize,
}

impl Leaves {
    /// What the series were computed from, for [`crate::samples::Memo`].
    pub fn sources(&self) -> Vec<&Arc<Vec<Vector>>> {
        self.reads.iter().map(|(_, v)| v).collect()
    }

    /// The series of each leaf, by the leaf's index (none: a leaf not read).
    pub fn vectors(&self) -> Vec<Vector> {
        let mut out = vec![Vector::default(); self.count];
        for (leaves, vectors) in &self.reads {
            for (&i, v) in leaves.iter().zip(vectors.iter()) {
                out[i] = v.clone();
            }
        }
        out
    }
}

/// Reads every leaf of `query` at the instants `ts`; `identity` names the
/// table's incarnation (its layout item), for the cache. The steps: leaves
/// grouped into shared reads, every read planned (refused by the limits
/// before anything is read), read through the cache, and each one's infos,
/// explanation and series.
#[allow(clippy::too_many_arguments)]
pub async fn read_leaves(
    reader: &Arc<Reader>,
    identity: &str,
    catalog: &Catalog,
    query: &Query,
    ts: &[i64],
    now: i64,
    opts: &ExecOptions,
    limits: &Limits,
) -> Result<(Leaves, ReadReport)> {
    let mut report = ReadReport::default();
    let reads = group_reads(catalog, query, ts, limits, &mut report)?;
    let (planned, filling) = plan_reads(reader, catalog, query, &reads, now, opts, limits).await?;
    report.infos.extend(filling.notes().map(|n| format!("layout change: {n}")));
    let gathered = read_planned(reader, identity, catalog, planned, opts).await?;
    let mut out = Vec::with_capacity(reads.len());
    for (r, read) in reads.iter().zip(gathered) {
        report_read(r, &read, query, opts, &mut report);
        let leaves: Vec<&Leaf> = r.leaves.iter().map(|&i| &query.leaves[i]).collect();
        let mut vectors = reader.samples.vectors(&read.aggregation, &leaves, ts, limits)?;
        // A read planned from a layout change's cut on (`plan_reads`): a
        // sample whose range begins before it would sum part of its range
        // as the whole, so it has none.
        if read.plan.window.start > r.from {
            vectors = Arc::new(from_cut(&vectors, &leaves, ts, read.plan.window.start));
        }
        out.push((r.leaves.clone(), vectors));
    }
    Ok((Leaves { reads: out, count: query.leaves.len() }, report))
}

/// `vectors` without the samples whose range begins before `cut` (series
/// left with none are gone).
fn from_cut(vectors: &[Vector], leaves: &[&Leaf], ts: &[i64], cut: i64) -> Vec<Vector> {
    vectors
        .iter()
        .zip(leaves)
        .map(|(v, leaf)| {
            let early: Vec<bool> = spans(leaf, ts).iter().map(|&(start, _)| start < cut).collect();
            let series = v
                .series
                .iter()
                .map(|(labels, samples)| {
                    let kept = samples.iter().zip(&early).map(|(x, &e)| if e { None } else { *x }).collect();
                    (labels.clone(), kept)
                })
                .filter(|(_, samples): &(_, Vec<Option<f64>>)| samples.iter().any(Option::is_some))
                .collect();
            Vector { series }
        })
        .collect()
}

/// The leaves as reads: leaves with the same unit, window, filters and
/// grouping share one. A leaf whose range holds no whole sample bucket is
/// read by none (said in `report`).
fn group_reads(
    catalog: &Catalog,
    query: &Query,
    ts: &[i64],
    limits: &Limits,
    report: &mut ReadReport,
) -> Result<Vec<Read>> {
    let mut reads: Vec<Read> = Vec::new();
    for (i, leaf) in query.leaves.iter().enumerate() {
        if leaf.empty || ts.is_empty() {
            continue;
        }
        let spans = spans(leaf, ts);
        let unit = unit_of(leaf, &spans, catalog);
        let from = spans.iter().map(|s| s.0).min().unwrap_or_default();
        let to = spans.iter().map(|s| s.1).max().unwrap_or_default();
        if from >= to {
            // No sample bucket ends in any step's range (a 5m range over
            // hour samples): no series, nothing read.
            if let Some(why) = &leaf.coarse {
                report.infos.push(format!("{}: no whole bucket ends in its range: {why}", leaf.text));
            }
            continue;
        }
        let mixed = merges(leaf.func, catalog_kind(leaf, catalog));
        let buckets = (to - from) / unit;
        // A mixed read's buckets are counted once planned (whole days are one each).
        if buckets > limits.max_buckets && !mixed {
            return Err(ServeError::Limit(
                Limit::Buckets,
                format!(
                "{} reads {buckets} buckets of {} (the server's limit is {}): narrow the time range, shorten [..], or \
                 raise --max-buckets",
                leaf.text,
                format_duration(unit),
                limits.max_buckets
            ),
            ));
        }
        let shared = reads.iter_mut().find(|r| {
            let first = &query.leaves[r.leaves[0]];
            r.unit == unit
                && r.from == from
                && r.to == to
                && r.mixed == mixed
                && first.filters == leaf.filters
                && first.group == leaf.group
        });
        let cuts = spans.iter().flat_map(|&(a, b)| [a, b]);
        match shared {
            Some(r) => {
                r.leaves.push(i);
                r.cuts.extend(cuts);
            }
            None => reads.push(Read { leaves: vec![i], unit, from, to, mixed, cuts: cuts.collect() }),
        }
    }
    for r in &mut reads {
        r.cuts.sort_unstable();
        r.cuts.dedup();
    }
    Ok(reads)
}

/// A read planned: its plan, the request it was planned from, its grouping.
type PlannedRead = (zigzag_gather::Planned, PlanRequest, Vec<String>);

/// Every read planned (with what a layout change added holds of them),
/// before anything is read: the bucket and RCU limits
/// refuse the query here.
async fn plan_reads(
    reader: &Reader,
    catalog: &Catalog,
    query: &Query,
    reads: &[Read],
    now: i64,
    opts: &ExecOptions,
    limits: &Limits,
) -> Result<(Vec<PlannedRead>, zigzag_gather::plan::Filling)> {
    // What a layout change added holds of the reads' span.
    let filling = match (reads.iter().map(|r| r.from).min(), reads.iter().map(|r| r.to).max()) {
        (Some(from), Some(to)) => reader.filling(from, to).await?,
        _ => Default::default(),
    };
    // Which coarse buckets hold all their minutes, when a read may use them.
    let complete = match reads.iter().any(|r| r.mixed) {
        true => reader.completeness(&catalog.config).await?,
        false => Default::default(),
    };
    let mut planned = Vec::with_capacity(reads.len());
    let mut estimated = 0.0;
    for r in reads {
        let first = &query.leaves[r.leaves[0]];
        let mut names: Vec<String> = Vec::new();
        for &i in &r.leaves {
            for m in catalog.measures_of(&query.leaves[i].metric) {
                if !names.contains(&m) {
                    names.push(m);
                }
            }
        }
        let req = PlanRequest {
            window: WindowSpec::Absolute { from: r.from.to_string(), to: r.to.to_string() },
            rollup: None,
            step: Some(r.unit),
            timeseries: true,
            filters: first.filters.clone(),
            now,
            source: SourceRequest { projection: None, measures: Some(names) },
            mixing: r.mixed.then(|| Mixing { complete: complete.clone(), cuts: r.cuts.clone() }),
            snap: None,
            filling: filling.clone(),
        };
        let plan = |req: PlanRequest| {
            zigzag_gather::plan_report(reader.recent.as_ref(), &catalog.config, req, first.group.clone(), opts)
        };
        let (req, p) = match plan(req.clone()).await {
            Ok(p) => (req, p),
            // Nothing answers the whole range exactly, but a part or measure
            // a layout change added holds it from an instant on: the samples
            // from the first such instant (on the query's grid) on, none
            // before (the infos say from when it counts, never zeros).
            Err(e) => {
                let starts = filling
                    .holds_from()
                    .map(|t| r.from + (t - r.from + r.unit - 1).div_euclid(r.unit) * r.unit)
                    .filter(|&from| r.from < from && from < r.to);
                let mut planned = None;
                for from in starts {
                    let req = PlanRequest {
                        window: WindowSpec::Absolute { from: from.to_string(), to: r.to.to_string() },
                        ..req.clone()
                    };
                    if let Ok(p) = plan(req.clone()).await {
                        planned = Some((req, p));
                        break;
                    }
                }
                planned.ok_or_else(|| crate::error::refusal(e, &first.text))?
            }
        };
        let buckets: i64 = p.plan.reads.iter().map(|r| r.window.len_ms() / r.rollup.unit_ms()).sum();
        if buckets > limits.max_buckets {
            return Err(ServeError::Limit(
                Limit::Buckets,
                format!(
                    "{} reads {buckets} buckets (the server's limit is {}): narrow the time range, shorten [..], or \
                     raise --max-buckets",
                    first.text, limits.max_buckets
                ),
            ));
        }
        estimated += p.plan.budget_rcu();
        planned.push((p, req, first.group.clone()));
    }
    if estimated > limits.max_rcu {
        return Err(ServeError::Limit(
            Limit::Rcu,
            format!(
            "the query would read about {estimated:.0} RCU (the server's budget is {:.0} per query): narrow the time \
             range or the matchers, or raise --rcu-budget",
            limits.max_rcu
        ),
        ));
    }
    Ok((planned, filling))
}

/// The planned reads, in parallel, each shared with the same read in
/// flight and through the cache of unchanged slices.
async fn read_planned(
    reader: &Arc<Reader>,
    identity: &str,
    catalog: &Catalog,
    planned: Vec<PlannedRead>,
    opts: &ExecOptions,
) -> Result<Vec<Arc<CachedRead>>> {
    let config = Arc::new(catalog.config.clone());
    futures::future::try_join_all(planned.into_iter().map(|(p, req, group)| {
        // Every measure of the projection is read whatever the leaves need.
        let key = format!(
            "{}|{}|{}|{}|{}|{:?}|{:?}",
            p.plan.projection,
            p.plan.rollups(),
            p.plan.window.start,
            p.plan.window.end,
            p.plan.step.unwrap_or(0),
            p.plan.filters,
            p.group_by()
        );
        let identity = format!("{identity}|{:?}|{:?}", p.plan.filters, p.group_by());
        let (reader2, opts, config) = (reader.clone(), opts.clone(), config.clone());
        reader.inflight.read(key, move || {
            async move {
                let projection = p.plan.projection.clone();
                // The slices not cached, planned again over their span on
                // the same projection and rollup.
                let replan = |from: i64, to: i64, rollup: zigzag_model::Rollup| {
                    let req = PlanRequest {
                        window: WindowSpec::Absolute { from: from.to_string(), to: to.to_string() },
                        source: SourceRequest { projection: Some(projection.clone()), ..req.source.clone() },
                        // Its cuts still say the buckets are folded into spans.
                        rollup: Some(rollup),
                        ..req.clone()
                    };
                    let (recent, opts, config, group) =
                        (reader2.recent.clone(), opts.clone(), config.clone(), group.clone());
                    async move { zigzag_gather::plan_report(recent.as_ref(), &config, req, group, &opts).await }
                };
                reader2.cache.read(p, &reader2.recent, &identity, &opts, replan).await
            }
            .boxed()
        })
    }))
    .await
}

/// What one read cost, where it read from, what the cache gave it, and
/// its plan explained, into `report`.
fn report_read(r: &Read, read: &CachedRead, query: &Query, opts: &ExecOptions, report: &mut ReadReport) {
    let used = &read.used;
    let plan = &read.plan;
    report.requests += read.actual.stats.requests + plan.statistics_cost.0;
    report.rcu += read.actual.stats.rcu + plan.statistics_cost.1;
    let texts: Vec<&str> = r.leaves.iter().map(|&i| query.leaves[i].text.as_str()).collect();
    let mut info =
        format!("{}: read from projection {}, {} buckets", texts.join(", "), plan.projection, plan.rollups());
    if let Some(at) = plan.written_at.and_then(chrono::DateTime::from_timestamp_millis) {
        info.push_str(&format!(", last written {}", at.format("%Y-%m-%dT%H:%M:%SZ")));
    }
    report.infos.push(info);
    // Samples coarser than the table's finest: say which window was read.
    for &i in &r.leaves {
        if let Some(why) = &query.leaves[i].coarse {
            let read = zigzag_gather::window::Window { start: r.from, end: r.to };
            report.infos.push(format!("{}: read {read} as whole buckets: {why}", query.leaves[i].text));
        }
    }
    if used.before_flush > 0 {
        report.infos.push(format!(
            "{}: {} of {} time slices shown as they were before a flush now in progress (its events appear once it \
             is done)",
            texts.join(", "),
            used.before_flush,
            used.hits + used.read
        ));
    }
    if used.while_flushing > 0 {
        report.infos.push(format!(
            "{}: {} of {} time slices shown as read up to {} s ago, part way through a flush still in progress (the \
             rest of its events appear once it is done)",
            texts.join(", "),
            used.while_flushing,
            used.hits + used.read,
            used.oldest_while_flushing.as_secs()
        ));
    }
    let mut explain = zigzag_gather::explain::explain(plan, opts, Some(&read.actual));
    if used.hits + used.read > 0 {
        explain.push_str(&format!(
            "\ncache: {} of {} time slices unchanged since read (from memory; {} as before a flush in progress, {} \
             part way through one), {} read, {} kept",
            used.hits,
            used.hits + used.read,
            used.before_flush,
            used.while_flushing,
            used.read,
            used.kept
        ));
    }
    report.explain.push(explain);
}
