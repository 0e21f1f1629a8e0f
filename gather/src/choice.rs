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

use crate::compact::route;
use crate::error::{GatherError, Result};
use crate::plan::{plan_alternatives, Plan, PlanRequest, Read};
use crate::statistics::Statistics;
use std::fmt::Write;
use zigzag_core::table::SortedTable;
use zigzag_model::config::DimensionType;
use zigzag_model::schema::FieldType;
use zigzag_model::{Config, KeyModel, Projections};

/// What a report needs of its source beyond the window and filters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceRequest {
    /// `--projection NAME`: read this one (it must be exact).
    pub projection: Option<String>,
    /// Measures the report shows or ranks by; None: every measure.
    pub measures: Option<Vec<String>>,
}

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

/// One projection and decomposition considered for a report.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub projection: String,
    /// Its plan and estimate when it is exact; else why not.
    pub verdict: std::result::Result<Estimate, String>,
    pub chosen: bool,
}

/// A projection's estimated cost for a plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    /// The rollups it reads, coarsest first (`day+hour+minute`).
    pub rollups: String,
    pub queries: usize,
    /// Items the plan's time range holds (before filters).
    pub items: f64,
    pub requests: f64,
    pub rcu: f64,
    /// Counted from ingest's statistics (else from the declared schema).
    pub measured: bool,
    /// Reading it `auto`'s way and naively: requests, round trips, units
    /// (`cost.rs`).
    pub readings: [crate::cost::Reading; 2],
    /// The way the planner would read it.
    pub way: crate::cost::Way,
}

impl Estimate {
    /// The reading of the way the planner would read it.
    pub fn chosen_reading(&self) -> crate::cost::Reading {
        self.readings.iter().find(|r| r.way == self.way).copied().unwrap_or(self.readings[0])
    }

    /// What the read should cost, for a budget: every item of its time
    /// range, or the way chosen's estimate if lower (the ways' estimates
    /// run high on sparse boxes: a refusal should not rest on them alone).
    pub fn budget_rcu(&self) -> f64 {
        self.chosen_reading().rcu.min(self.rcu)
    }
}

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
fn read_items(config: &Config, km: &KeyModel, plan: &Plan, read: &Read, stats: &Statistics) -> (f64, bool) {
    let (mut items, measured) = match stats.is_empty() {
        false => (stats.items(read), true),
        true => (declared_items(config, km, read), false),
    };
    // Keyed by a dimension's value: only the fixed values' partitions are
    // read, their share of the items (of the values the statistics
    // counted, else of the declared cardinality).
    if let Some(d) = km.partition_dim() {
        let fixed = plan.filters.bound_values(&d.name).map_or(1, |v| v.len()) as f64;
        items = match measured.then(|| stats.items_of_values(read, fixed)).flatten() {
            Some(of_values) => of_values,
            None => items * (fixed / cardinality(config, &d.name)).min(1.0),
        };
    }
    (items, measured)
}

/// Estimated cost of `plan` read from `km`, summed over its reads.
fn estimate(config: &Config, km: &KeyModel, plan: &Plan, stats: &Statistics, concurrency: usize) -> Estimate {
    let per_read: Vec<(f64, bool)> = plan.reads.iter().map(|r| read_items(config, km, plan, r, stats)).collect();
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
    Estimate {
        rollups: plan.rollups(),
        queries,
        items,
        requests: pages,
        rcu,
        measured,
        readings,
        way: crate::cost::Way::Auto,
    }
}

/// Estimated bytes of one of `km`'s items: its key (~20 B pk, Z-address +
/// 16 B identity), `t`, a mark or two, ~12 B a dimension value and ~10 B a
/// measure.
pub fn item_bytes(km: &KeyModel) -> f64 {
    80.0 + 12.0 * km.dims().len() as f64 + 10.0 * km.measures().measures().len() as f64
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
/// exact), its reads' statistics and compaction markers filled in.
pub async fn choose<T: SortedTable + ?Sized>(
    table: &T,
    config: &Config,
    projections: &Projections,
    req: &PlanRequest,
    group_by: &[String],
    opts: &crate::execute::ExecOptions,
) -> Result<Plan> {
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
    let forced = req.source.projection.as_deref();
    if let Some(name) = forced {
        if projections.by_name(name).is_none() {
            let names: Vec<&str> = projections.iter().map(KeyModel::name).collect();
            return Err(GatherError::Projection(format!(
                "--projection {name}: the layout has no such projection (it has {})",
                names.join(", ")
            )));
        }
    }
    // Every projection's decompositions, or why it cannot answer exactly.
    let mut window_errors: Vec<(i64, GatherError)> = Vec::new();
    let plans: Vec<std::result::Result<Vec<Plan>, String>> = projections
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
    let exact = plans.iter().zip(projections.iter()).filter(|(_, km)| not_exact(km, &dims, &measures).is_none());
    if exact.clone().count() > 0 && exact.clone().all(|(p, _)| p.is_err()) && window_errors.len() == exact.count() {
        window_errors.sort_by_key(|(finest, _)| *finest);
        if let Some((_, e)) = window_errors.into_iter().next() {
            return Err(e);
        }
    }
    // Statistics of the exact ones only (the forced one alone): to
    // compare them, and to say how fresh the one read is. The compaction
    // markers of every candidate come in the same round trip: the chosen
    // one's are then read before its items with no wait.
    let wanted: Vec<&Read> = plans
        .iter()
        .filter_map(|p| p.as_ref().ok())
        .flatten()
        .filter(|p| forced.is_none_or(|f| f == p.projection))
        .flat_map(|p| &p.reads)
        .collect();
    let (stats, markers) =
        futures::try_join!(crate::statistics::load(table, &wanted), route::prefetch(table, &wanted))?;
    // `--snap` moves a window's ends only where no projection keeps them:
    // a projection that reads the window asked is taken before any that
    // would read another.
    let unmoved = |p: &Plan| p.window_note.is_none() && forced.is_none_or(|f| f == p.projection);
    let some_unmoved = plans.iter().filter_map(|p| p.as_ref().ok()).flatten().any(unmoved);
    let mut candidates = Vec::new();
    let mut exact_plans: Vec<(usize, Plan)> = Vec::new();
    for (km, planned) in projections.iter().zip(plans) {
        let planned = match planned {
            Ok(alternatives) if some_unmoved && alternatives.iter().any(|p| p.window_note.is_some()) => Err(format!(
                "would read {} (--snap): another projection reads the window asked",
                alternatives[0].window
            )),
            other => other,
        };
        let alternatives = match planned {
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
        let estimated: Vec<(Plan, Estimate)> = alternatives
            .into_iter()
            .map(|p| {
                let e = estimate(config, km, &p, &stats, opts.concurrency);
                (p, e)
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
        for (i, (plan, e)) in estimated.into_iter().enumerate() {
            let verdict = match Some(i) == best {
                true => Ok(e),
                false => {
                    Err(format!("{}: ~{:.0} items, more than {best_rollups} (~{best_items:.0})", e.rollups, e.items))
                }
            };
            if verdict.is_ok() && forced.is_none_or(|f| f == km.name()) {
                exact_plans.push((candidates.len(), plan));
            }
            candidates.push(Candidate { projection: km.name().to_string(), verdict, chosen: false });
        }
    }
    // Every candidate's two ways, in the order ties go: fewer queries,
    // then fewer dimensions. A strategy asked for by name is read as
    // asked: only its way is weighed.
    let weigh_naive = opts.choose_way && matches!(opts.strategy, zigzag_core::query::Strategy::Auto(_));
    let mut options: Vec<(usize, crate::cost::Reading)> = Vec::new();
    for (i, _) in &exact_plans {
        let Ok(e) = &candidates[*i].verdict else { continue };
        for r in e.readings {
            if r.way == crate::cost::Way::Auto || weigh_naive {
                options.push((*i, r));
            }
        }
    }
    let dims_of = |i: usize| projections.by_name(&candidates[i].projection).map_or(0, |km| km.dims().len());
    options.sort_by_key(|(i, _)| (candidates[*i].verdict.as_ref().map_or(0, |e| e.queries), dims_of(*i)));
    let readings: Vec<crate::cost::Reading> = options.iter().map(|(_, r)| *r).collect();
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
    let mut plan = exact_plans.into_iter().find(|(j, _)| *j == i).map(|(_, p)| p).expect("an exact candidate");
    candidates[i].chosen = true;
    if let Ok(e) = &mut candidates[i].verdict {
        e.way = reading.way;
    }
    let cheapest = readings.iter().map(|r| r.rcu).fold(f64::INFINITY, f64::min);
    let allowance = match opts.rcu_allowance {
        Some(a) => format!("--rcu-allowance {a}"),
        None => format!(
            "{}x the cheapest, {:.1} RCU",
            crate::cost::DEFAULT_ALLOWANCE,
            cheapest * crate::cost::DEFAULT_ALLOWANCE
        ),
    };
    plan.source_reason = match forced {
        Some(_) => format!("--projection; read {}: the fastest within {allowance}", reading.way.name()),
        None => format!("the fastest read within {allowance}: {}", reading.way.name()),
    };
    plan.way = reading.way;
    let (lease_requests, lease_rcu) = req.mixing.as_ref().map_or((0, 0.0), |m| m.complete.cost());
    plan.statistics_cost = (stats.requests + lease_requests, stats.rcu + lease_rcu);
    route::prefetched_into(markers, &mut plan.reads);
    for read in &mut plan.reads {
        read.bin_items = read
            .boxes
            .iter()
            .map(|b| b.bin_start.and_then(|bin| stats.bin_items(&read.projection, read.rollup, bin)))
            .collect();
        read.box_share = read
            .boxes
            .iter()
            .zip(&read.spans_all_but_time)
            .map(|(b, &spans)| match (spans, b.bin_start) {
                (true, Some(bin)) => stats.window_share(read, bin),
                _ => None,
            })
            .collect();
    }
    let km = projections.by_name(&plan.projection).expect("planned on one of them");
    let items: Vec<f64> = plan.reads.iter().map(|r| read_items(config, km, &plan, r, &stats).0).collect();
    for (read, n) in plan.reads.iter_mut().zip(items) {
        read.items = Some(n);
    }
    plan.written_at = plan.reads.iter().filter_map(|r| stats.written_at(r)).max();
    plan.candidates = candidates;
    Ok(plan)
}

/// The candidates as `--explain` lists them.
pub fn describe(candidates: &[Candidate], reason: &str) -> String {
    let mut s = String::new();
    for c in candidates {
        let mark = if c.chosen { "*" } else { " " };
        let _ = match &c.verdict {
            Ok(e) => {
                let way = |r: &crate::cost::Reading| {
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
