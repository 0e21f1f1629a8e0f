//! Which projection a report reads, and how its window is cut into
//! rollups: the cheapest pair that answers it exactly.
//!
//! A projection is **exact** for a report when it keeps every dimension the
//! report groups or filters by, every measure it needs, and rollups that
//! divide the step and cover the window (`plan::plan_alternatives`: one
//! decomposition per coarsest rollup allowed, each a candidate): its
//! items are then sums of the base's over the dimensions it leaves out, so
//! the report is the base's to the unit. Each exact one is estimated two
//! ways (`cost.rs`: `auto`'s ranges and the naive whole Z-ranges, each with
//! its requests, sequential round trips and RCU), and the planner takes the
//! fastest reading within the RCU allowance (`--rcu-allowance`; by default
//! the cheapest reading's units: faster only where no dearer), then the fewest units, then the
//! fewest queries, then the fewest dimensions, then the order of the layout
//! (base first).
//!
//! The estimate (`Estimate`) counts the items the plan's time range holds:
//! from the **statistics** ingest keeps (`zigzag_model::stats`: a sketch of
//! the items of each projection, rollup and partition bin, and the buckets
//! it spans; a bin partly in the window counts its share of that span),
//! read with one query per exact candidate; for a table written before
//! statistics, from the **declared schema**: items per bucket are the
//! product of the projection's dimensions' cardinalities (an enum's
//! values, an integer's range, else [`UNKNOWN_CARDINALITY`]) times the
//! window's buckets, which ranks a projection below any with more
//! dimensions over the same ones and is a guess between unrelated ones.
//! A projection keyed by a dimension's value (`partition_by`) reads the
//! share of the fixed values: out of the values its statistics counted in
//! each bin, else out of the dimension's declared cardinality.
//! Items cost their size (from the key and measures) in 4 KB read units,
//! and each query at least half a unit. `--projection NAME` forces one
//! (refused, with why, when it is not exact).

use crate::error::{GatherError, Result};
use crate::execute::ExecOptions;
use crate::filter::FilterSet;
use crate::plan::{
    item_bytes, plan_alternatives, Candidate, Choice, Draft, Estimate, Plan, PlanRequest, Read, Reading, Way,
};
use crate::route;
use crate::statistics::Statistics;
use std::fmt::Write;
use zigzag_core::table::SortedTable;
use zigzag_model::config::DimensionType;
use zigzag_model::schema::FieldType;
use zigzag_model::{Config, KeyModel, Projections};

/// Distinct values assumed of a dimension whose declaration bounds none.
pub const UNKNOWN_CARDINALITY: f64 = 1_000.0;
/// Items per bucket are assumed at most this (a partition's time bin).
const MAX_ITEMS_PER_BUCKET: f64 = 1e7;
/// A finer decomposition of a projection's window is read instead of a
/// coarser one only when its estimate is below the coarser's by more than
/// this share (statistics are sketches; coarser reads fewer buckets).
const DECOMPOSITION_MARGIN: f64 = 0.1;
/// A read unit: 4 KB, half a unit eventually consistent.
const READ_UNIT_BYTES: f64 = 4096.0;

/// The distinct values a dimension can take, from its declaration.
fn cardinality(config: &Config, dim: &str) -> f64 {
    let Some(spec) = config.dimensions.iter().find(|d| d.field == dim) else { return UNKNOWN_CARDINALITY };
    match (spec.kind, config.field(dim).map(|f| &f.kind)) {
        (_, Some(FieldType::String { values, .. })) if !values.is_empty() => values.len() as f64,
        (DimensionType::Integer, Some(FieldType::Integer { min: Some(lo), max: Some(hi) })) => {
            ((*hi as f64) - (*lo as f64) + 1.0).max(1.0)
        }
        _ => UNKNOWN_CARDINALITY,
    }
}

/// Items of `read`'s span by the declared schema.
fn declared_items(config: &Config, km: &KeyModel, read: &Read) -> f64 {
    let per_bucket = km.dims().iter().map(|d| cardinality(config, &d.name)).product::<f64>().min(MAX_ITEMS_PER_BUCKET);
    let buckets = (read.window.len_ms() / read.rollup.unit_ms()).max(1) as f64;
    per_bucket * buckets
}

/// Estimated items of `read` from `km`: from the statistics when the table
/// has them, else from the declared schema; and whether measured.
fn read_items(config: &Config, km: &KeyModel, filters: &FilterSet, read: &Read, stats: &Statistics) -> (f64, bool) {
    let (mut items, measured) = match stats.is_empty() {
        false => (stats.items(read), true),
        true => (declared_items(config, km, read), false),
    };
    // Keyed by a dimension's value: only the fixed values' partitions are
    // read, their share of the items (of the values the statistics
    // counted, else of the declared cardinality).
    if let Some(d) = km.partition_dim() {
        let fixed = filters.bound_values(&d.name).map_or(1, |v| v.len()) as f64;
        items = match measured.then(|| stats.items_of_values(read, fixed)).flatten() {
            Some(of_values) => of_values,
            None => items * (fixed / cardinality(config, &d.name)).min(1.0),
        };
    }
    (items, measured)
}

/// Estimated cost of `plan` read from `km`, summed over its reads.
fn estimate(config: &Config, km: &KeyModel, plan: &Draft, stats: &Statistics, concurrency: usize) -> Estimate {
    let per_read: Vec<(f64, bool)> =
        plan.reads.iter().map(|r| read_items(config, km, &plan.filters, r, stats)).collect();
    let items: f64 = per_read.iter().map(|(n, _)| n).sum();
    let measured = per_read.iter().all(|(_, m)| *m);
    let item_bytes = item_bytes(km);
    let queries = plan.queries();
    // A query reads its share of the items in 1 MB pages, at least one.
    let pages = (items * item_bytes / 1e6).ceil().max(queries as f64);
    let rcu = ((items * item_bytes / READ_UNIT_BYTES) * 0.5).max(queries as f64 * 0.5);
    let reads: Vec<crate::cost::ReadHeld> = plan
        .reads
        .iter()
        .zip(&per_read)
        .map(|(r, (n, _))| crate::cost::ReadHeld {
            read: r,
            items: *n,
            bin_items: r
                .boxes
                .iter()
                .map(|b| b.bin_start.and_then(|bin| stats.bin_items(km.name(), r.rollup, bin)))
                .collect(),
        })
        .collect();
    let readings = crate::cost::readings(&reads, item_bytes, concurrency);
    Estimate { rollups: plan.rollups(), queries, items, requests: pages, rcu, measured, readings, way: Way::Auto }
}

/// Why `km` cannot answer exactly, if it cannot.
fn not_exact(km: &KeyModel, dims: &[String], measures: &[String]) -> Option<String> {
    let missing_dims: Vec<&str> = dims.iter().filter(|d| km.dim(d).is_none()).map(String::as_str).collect();
    if !missing_dims.is_empty() {
        return Some(format!("does not keep {}", missing_dims.join(", ")));
    }
    let missing: Vec<&str> =
        measures.iter().filter(|m| km.measures().position(m).is_none()).map(String::as_str).collect();
    (!missing.is_empty()).then(|| format!("does not keep the measure(s) {}", missing.join(", ")))
}

/// The finest rollup of the projections that answer exactly a report
/// grouping or filtering by `dims` and reading `measures`, and the first
/// of them (in layout order) that keeps it; None: no projection does.
pub fn finest_answering<'p>(
    projections: &'p Projections,
    dims: &[String],
    measures: &[String],
) -> Option<(&'p KeyModel, zigzag_model::Rollup)> {
    projections
        .iter()
        .filter(|km| not_exact(km, dims, measures).is_none())
        .filter_map(|km| km.rollups().min_by_key(|r| r.unit_ms()).map(|r| (km, r)))
        .min_by_key(|(_, r)| r.unit_ms())
}

/// Plans `req` on the cheapest exact projection and decomposition,
/// listing every one considered (with its estimate, or why it is not
/// exact): the drafts, then the statistics and compaction markers of the
/// exact ones read in one round trip, then `pick`.
pub async fn choose<T: SortedTable + ?Sized>(
    table: &T,
    config: &Config,
    projections: &Projections,
    req: &PlanRequest,
    group_by: &[String],
    opts: &ExecOptions,
) -> Result<Plan> {
    let drafted = drafts(config, projections, req, group_by)?;
    // Statistics of the exact ones only (the forced one alone): to
    // compare them, and to say how fresh the one read is. The compaction
    // markers of every candidate come in the same round trip: the chosen
    // one's are then read before its items with no wait.
    let wanted: Vec<&Read> = drafted.wanted().collect();
    let (stats, markers) =
        futures::try_join!(crate::statistics::load(table, &wanted), route::prefetch(table, &wanted))?;
    pick(config, projections, req, drafted, &stats, markers, opts)
}

/// Every projection's drafts for a report, or why it cannot answer it
/// exactly.
pub struct Drafted {
    /// Per projection of the layout, in order.
    per_projection: Vec<std::result::Result<Vec<Draft>, String>>,
    /// `--projection NAME`.
    forced: Option<String>,
}

impl Drafted {
    /// The reads of the drafts the planner weighs.
    fn wanted(&self) -> impl Iterator<Item = &Read> {
        self.per_projection
            .iter()
            .filter_map(|p| p.as_ref().ok())
            .flatten()
            .filter(|p| self.forced.as_deref().is_none_or(|f| f == p.projection))
            .flat_map(|p| &p.reads)
    }
}

/// The drafts of `req` on every projection of the layout (no reading).
pub fn drafts(config: &Config, projections: &Projections, req: &PlanRequest, group_by: &[String]) -> Result<Drafted> {
    // A window that cannot be read is the request's error, said once (not
    // once per projection).
    req.window.validate(req.now)?;
    let mut dims: Vec<String> = group_by.to_vec();
    for p in &req.filters.predicates {
        if !dims.contains(&p.field) {
            dims.push(p.field.clone());
        }
    }
    let measures: Vec<String> = match &req.source.measures {
        Some(m) => m.clone(),
        None => config.measures.iter().map(|m| m.name.clone()).collect(),
    };
    let forced = req.source.projection.clone();
    if let Some(name) = &forced {
        if projections.by_name(name).is_none() {
            let names: Vec<&str> = projections.iter().map(KeyModel::name).collect();
            return Err(GatherError::Projection(format!(
                "--projection {name}: the layout has no such projection (it has {})",
                names.join(", ")
            )));
        }
    }
    let mut window_errors: Vec<(i64, GatherError)> = Vec::new();
    let per_projection: Vec<std::result::Result<Vec<Draft>, String>> = projections
        .iter()
        .map(|km| match not_exact(km, &dims, &measures) {
            Some(why) => Err(why),
            None => plan_alternatives(km, req.clone()).map_err(|e| {
                let why = e.to_string();
                if matches!(e, GatherError::Window { .. }) {
                    let finest = km.rollups().map(|r| r.unit_ms()).min().unwrap_or(i64::MAX);
                    window_errors.push((finest, e));
                }
                why
            }),
        })
        .collect();
    // When every projection that keeps what the report needs refuses its
    // window (a bound off the finest rollup), that is one error: the one
    // of the finest of them, whose fix every other needs too.
    let exact =
        per_projection.iter().zip(projections.iter()).filter(|(_, km)| not_exact(km, &dims, &measures).is_none());
    if exact.clone().count() > 0 && exact.clone().all(|(p, _)| p.is_err()) && window_errors.len() == exact.count() {
        window_errors.sort_by_key(|(finest, _)| *finest);
        if let Some((_, e)) = window_errors.into_iter().next() {
            return Err(e);
        }
    }
    Ok(Drafted { per_projection, forced })
}

/// The plan of the cheapest exact draft, by `stats`: one function of the
/// request, the layout and what the table holds (no reading).
pub fn pick(
    config: &Config,
    projections: &Projections,
    req: &PlanRequest,
    drafted: Drafted,
    stats: &Statistics,
    markers: route::PrefetchedAll,
    opts: &ExecOptions,
) -> Result<Plan> {
    let Drafted { per_projection, forced } = drafted;
    let forced = forced.as_deref();
    // `--snap` moves a window's ends only where no projection keeps them:
    // a projection that reads the window asked is taken before any that
    // would read another.
    let unmoved = |p: &Draft| p.window_note.is_none() && forced.is_none_or(|f| f == p.projection);
    let some_unmoved = per_projection.iter().filter_map(|p| p.as_ref().ok()).flatten().any(unmoved);
    let mut candidates = Vec::new();
    let mut exact_drafts: Vec<(usize, Draft)> = Vec::new();
    for (km, drafted) in projections.iter().zip(per_projection) {
        let drafted = match drafted {
            Ok(alternatives) if some_unmoved && alternatives.iter().any(|p| p.window_note.is_some()) => Err(format!(
                "would read {} (--snap): another projection reads the window asked",
                alternatives[0].window
            )),
            other => other,
        };
        let alternatives = match drafted {
            Err(why) => {
                let verdict = Err(format!("not exact: {why}"));
                candidates.push(Candidate { projection: km.name().to_string(), verdict, chosen: false });
                continue;
            }
            Ok(alternatives) => alternatives,
        };
        // A projection's decompositions are weighed by the items they read
        // (the statistics count them well), then by their queries: a
        // Z-range estimate of a time slab of a coarse rollup's month-long
        // partition runs several times what it reads (BENCHMARKS.md, "Time
        // ranges"), and would rank an hour's 480 items below its 3,874
        // minutes. The fewest is then weighed against other projections.
        let estimated: Vec<(Draft, Estimate)> = alternatives
            .into_iter()
            .map(|d| {
                let e = estimate(config, km, &d, stats, opts.concurrency);
                (d, e)
            })
            .collect();
        // Coarsest first: a finer one is taken only when clearly cheaper
        // (the statistics' counts are sketches: a few percent apart is
        // the same, and then fewer, coarser buckets are read).
        let mut best = (!estimated.is_empty()).then_some(0);
        for i in 1..estimated.len() {
            let (e, b) = (&estimated[i].1, &estimated[best.unwrap_or(0)].1);
            if e.rcu < b.rcu * (1.0 - DECOMPOSITION_MARGIN) || (e.rcu <= b.rcu && e.queries < b.queries) {
                best = Some(i);
            }
        }
        let (best_rollups, best_items) =
            best.map_or((String::new(), 0.0), |i| (estimated[i].1.rollups.clone(), estimated[i].1.items));
        for (i, (draft, e)) in estimated.into_iter().enumerate() {
            let verdict = match Some(i) == best {
                true => Ok(e),
                false => {
                    Err(format!("{}: ~{:.0} items, more than {best_rollups} (~{best_items:.0})", e.rollups, e.items))
                }
            };
            if verdict.is_ok() && forced.is_none_or(|f| f == km.name()) {
                exact_drafts.push((candidates.len(), draft));
            }
            candidates.push(Candidate { projection: km.name().to_string(), verdict, chosen: false });
        }
    }
    // Every candidate's two ways, in the order ties go: fewer queries,
    // then fewer dimensions. A strategy asked for by name is read as
    // asked: only its way is weighed.
    let weigh_naive = opts.choose_way && matches!(opts.strategy, zigzag_core::query::Strategy::Auto(_));
    let mut options: Vec<(usize, Reading)> = Vec::new();
    for (i, _) in &exact_drafts {
        let Ok(e) = &candidates[*i].verdict else { continue };
        for r in e.readings {
            if r.way == Way::Auto || weigh_naive {
                options.push((*i, r));
            }
        }
    }
    let dims_of = |i: usize| projections.by_name(&candidates[i].projection).map_or(0, |km| km.dims().len());
    options.sort_by_key(|(i, _)| (candidates[*i].verdict.as_ref().map_or(0, |e| e.queries), dims_of(*i)));
    let readings: Vec<Reading> = options.iter().map(|(_, r)| *r).collect();
    let Some((i, reading)) = crate::cost::fastest_within(&readings, opts.rcu_allowance).map(|k| options[k]) else {
        let why: Vec<String> = candidates
            .iter()
            .filter(|c| forced.is_none_or(|f| f == c.projection))
            .map(|c| format!("{}: {}", c.projection, c.verdict.as_ref().err().cloned().unwrap_or_default()))
            .collect();
        return Err(GatherError::Projection(format!(
            "no projection answers this report exactly (and none is approximated): {}",
            why.join("; ")
        )));
    };
    let draft = exact_drafts.into_iter().find(|(j, _)| *j == i).map(|(_, d)| d).expect("an exact candidate");
    let candidates: Vec<Candidate> = candidates
        .into_iter()
        .enumerate()
        .map(|(j, c)| match j == i {
            true => Candidate { chosen: true, verdict: c.verdict.map(|e| Estimate { way: reading.way, ..e }), ..c },
            false => c,
        })
        .collect();
    let cheapest = readings.iter().map(|r| r.rcu).fold(f64::INFINITY, f64::min);
    let allowance = match opts.rcu_allowance {
        Some(a) => format!("--rcu-allowance {a}"),
        None => format!(
            "{}x the cheapest, {:.1} RCU",
            crate::cost::DEFAULT_ALLOWANCE,
            cheapest * crate::cost::DEFAULT_ALLOWANCE
        ),
    };
    let source_reason = match forced {
        Some(_) => format!("--projection; read {}: the fastest within {allowance}", reading.way.name()),
        None => format!("the fastest read within {allowance}: {}", reading.way.name()),
    };
    let (lease_requests, lease_rcu) = req.mixing.as_ref().map_or((0, 0.0), |m| m.complete.cost());
    let km = projections.by_name(&draft.projection).expect("drafted on one of them");
    let reads = with_statistics(config, km, &draft, stats, markers);
    let written_at = reads.iter().filter_map(|r| stats.written_at(r)).max();
    let choice = Choice {
        candidates,
        source_reason,
        statistics_cost: (stats.requests + lease_requests, stats.rcu + lease_rcu),
        written_at,
        way: reading.way,
    };
    Ok(Plan::new(Draft { reads, ..draft }, choice))
}

/// The chosen draft's reads with what the statistics and markers say of
/// them: each box's bin items and share, each read's items, its markers.
fn with_statistics(
    config: &Config,
    km: &KeyModel,
    draft: &Draft,
    stats: &Statistics,
    markers: route::PrefetchedAll,
) -> Vec<Read> {
    let markers = route::prefetched_for(markers, &draft.reads);
    draft
        .reads
        .iter()
        .zip(markers)
        .map(|(read, markers)| Read {
            bin_items: read
                .boxes
                .iter()
                .map(|b| b.bin_start.and_then(|bin| stats.bin_items(&read.projection, read.rollup, bin)))
                .collect(),
            box_share: read
                .boxes
                .iter()
                .zip(&read.spans_all_but_time)
                .map(|(b, &spans)| match (spans, b.bin_start) {
                    (true, Some(bin)) => stats.window_share(read, bin),
                    _ => None,
                })
                .collect(),
            items: Some(read_items(config, km, &draft.filters, read, stats).0),
            markers,
            ..read.clone()
        })
        .collect()
}

/// The candidates as `--explain` lists them.
pub fn describe(candidates: &[Candidate], reason: &str) -> String {
    let mut s = String::new();
    for c in candidates {
        let mark = if c.chosen { "*" } else { " " };
        let _ = match &c.verdict {
            Ok(e) => {
                let way = |r: &Reading| {
                    format!(
                        "{} ~{:.0} requests, ~{:.0} round trips (~{:.0} ms), ~{:.1} RCU",
                        r.way.name(),
                        r.requests,
                        r.rounds,
                        r.latency_ms(),
                        r.rcu
                    )
                };
                writeln!(
                    s,
                    "  {mark} {:<16} {:<15} {:>5} queries, ~{:.0} items ({}): {}; {}",
                    c.projection,
                    e.rollups,
                    e.queries,
                    e.items,
                    if e.measured { "statistics" } else { "declared schema" },
                    way(&e.readings[0]),
                    way(&e.readings[1]),
                )
            }
            Err(why) => writeln!(s, "    {:<16} {why}", c.projection),
        };
    }
    let _ = writeln!(s, "  chosen (*): {reason}");
    s
}
