//! The query plan: which rollups, which spans of the window, which
//! Z-range queries.
//!
//! 1. **Step** (the resolution): `--step` if given (a multiple of the
//!    finest rollup's unit); for a time series without one, the finest
//!    configured unit giving at most [`MAX_DEFAULT_POINTS`] points, else
//!    the coarsest. Other reports need no step.
//! 2. **Window**: resolved by [`WindowSpec::resolve`]; `--last` rounds now
//!    up to the step (or the finest unit).
//! 3. **Reads**: the window as spans of rollups whose units divide the step
//!    ([`decompose`]): whole days from day items, the whole hours at its
//!    edges from hour items, the minutes left over from minute items. A
//!    coarse bucket is read only where its items may stand for it: no shard
//!    owes it a record its finest items hold ([`Completeness`]), and the
//!    table's retention surely still keeps it (`Retention::readable`); else
//!    it is read finer. The finest spans must be kept (a window partly
//!    deleted is refused, never answered short). Each coarsest rollup
//!    allowed gives one decomposition; the planner weighs them as it weighs
//!    projections (`choice.rs`). `--rollup` reads the window from one
//!    rollup, aligned with it, as does a request without `mixing`.
//! 4. **Queries**: `Schema::plan_boxes` gives one Z-box per partition time
//!    bin (a day of minutes, a month of hours or days) from a read's span
//!    and the filters; each box is read in each of the P scatter prefixes.

mod decompose;
mod draft;
mod estimate;
mod filling;
mod read;

pub use decompose::{decompose, Span};
pub use draft::{rollups_label, Choice, Draft, Least, Plan};
pub use estimate::{Candidate, Estimate, Reading, Way, ROUND_TRIP_MS};
pub use filling::Filling;
pub use read::{item_bytes, PlannedQuery, Read};

use crate::complete::Completeness;
use crate::error::{GatherError, Result};
use crate::filter::FilterSet;
use crate::window::{format_duration, Snap, Window, WindowSpec};
use zigzag_model::{KeyModel, Rollup};

/// A time series without `--step` gets at most this many points, if a
/// configured rollup allows.
pub const MAX_DEFAULT_POINTS: i64 = 1500;

/// What a report needs of its source beyond the window and filters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceRequest {
    /// `--projection NAME`: read this one (it must be exact).
    pub projection: Option<String>,
    /// Measures the report shows or ranks by; None: every measure.
    pub measures: Option<Vec<String>>,
}

/// What the user asked, before planning.
#[derive(Debug, Clone)]
pub struct PlanRequest {
    pub window: WindowSpec,
    /// None: automatic.
    pub rollup: Option<Rollup>,
    pub step: Option<i64>,
    /// A time series wants a step even when none is given.
    pub timeseries: bool,
    pub filters: FilterSet,
    /// Now, ms since the epoch (for `--last`).
    pub now: i64,
    /// The projection asked for, and the measures needed.
    pub source: SourceRequest,
    /// How the window may be read from several rollups (None: from one,
    /// the coarsest aligned with it).
    pub mixing: Option<Mixing>,
    /// Whether a projection whose buckets the window's ends are not on may
    /// read it over its buckets touched or inside (None: refused).
    pub snap: Option<Snap>,
    /// Parts a layout change added that hold their buckets from some
    /// instant on only (empty: none).
    pub filling: Filling,
}

/// Whether `km`'s `rollup` still holds every bucket from `start` on: kept
/// by the table's retention, and filled if a layout change added it.
fn holds(km: &KeyModel, req: &PlanRequest, rollup: Rollup, start: i64) -> std::result::Result<(), String> {
    km.retention().readable(rollup, start, req.now)?;
    req.filling.kept(rollup, start, req.now)?;
    req.filling.readable(km.name(), rollup, start).map_err(|note| format!("{} {rollup}: {note}", km.name()))
}

/// What lets a window be read from several rollups.
#[derive(Debug, Clone, Default)]
pub struct Mixing {
    /// Which coarse buckets may stand for their finer items.
    pub complete: Completeness,
    /// The ends of the spans a caller folds the buckets into, one value
    /// each (`gather serve`'s ranges). No coarse bucket read straddles one,
    /// and, since only the spans' sums are shown, a bucket may then be
    /// coarser than the step. Empty: the buckets are the step's, and only
    /// rollups dividing it are read.
    pub cuts: Vec<i64>,
}

impl Mixing {
    /// Mixed reads where `complete` says coarse buckets are complete.
    pub fn complete(complete: Completeness) -> Mixing {
        Mixing { complete, cuts: Vec::new() }
    }
}

fn units(km: &KeyModel) -> Result<(i64, Vec<Rollup>)> {
    let mut rollups: Vec<Rollup> = km.rollups().collect();
    rollups.sort_by_key(|r| r.unit_ms());
    let finest = rollups.first().ok_or_else(|| GatherError::Config("no rollups configured".into()))?.unit_ms();
    Ok((finest, rollups))
}

/// The default step of a time series over `len` ms.
fn default_step(len: i64, rollups: &[Rollup]) -> i64 {
    rollups
        .iter()
        .map(|r| r.unit_ms())
        .find(|u| len / u <= MAX_DEFAULT_POINTS)
        .unwrap_or_else(|| rollups.last().map_or(60_000, |r| r.unit_ms()))
}

fn aligned(w: &Window, r: Rollup) -> bool {
    r.floor(w.start) == w.start && r.floor(w.end) == w.end
}

/// One rollup for the whole window: `--rollup`, checked, or (a request
/// without `mixing`) the coarsest aligned with it.
fn choose_rollup(km: &KeyModel, req: &PlanRequest, w: &Window, step: Option<i64>) -> Result<(Rollup, String)> {
    let (_, rollups) = units(km)?;
    // Folded into spans by the caller (`Mixing::cuts`): a bucket need not
    // divide the step.
    let folded = req.mixing.as_ref().is_some_and(|m| !m.cuts.is_empty());
    let divides = |r: Rollup| folded || step.is_none_or(|s| s % r.unit_ms() == 0);
    let kept = |r: Rollup| holds(km, req, r, w.start);
    if let Some(r) = req.rollup {
        let names: Vec<&str> = rollups.iter().map(|r| r.name()).collect();
        if !rollups.contains(&r) {
            return Err(GatherError::Rollup(format!(
                "--rollup {r} is not configured (configured: {})",
                names.join(", ")
            )));
        }
        if !divides(r) {
            let s = format_duration(step.unwrap_or_default());
            return Err(GatherError::Rollup(format!("--rollup {r} cannot give a step of {s}: its buckets are longer")));
        }
        if !aligned(w, r) {
            return Err(GatherError::Rollup(format!(
                "--rollup {r} cannot answer the window {w}: its buckets are whole {r}s; use a finer rollup"
            )));
        }
        if let Err(why) = kept(r) {
            return Err(GatherError::Rollup(format!(
                "--rollup {r} cannot answer the window {w}: {why}; use a coarser rollup or a later window"
            )));
        }
        return Ok((r, format!("--rollup {r}")));
    }
    let fits = |r: Rollup| divides(r) && aligned(w, r);
    let best = rollups.iter().rev().copied().find(|&r| fits(r) && kept(r).is_ok());
    let Some(r) = best else {
        return Err(not_kept(w, rollups.iter().filter(|&&r| fits(r)).filter_map(|&r| kept(r).err()).collect()));
    };
    let step_part = step.map_or(String::new(), |s| format!("divide the step ({}) and ", format_duration(s)));
    Ok((r, format!("auto: the coarsest configured rollup whose buckets ({}) {step_part}align with the window", r)))
}

fn not_kept(w: &Window, mut deleted: Vec<String>) -> GatherError {
    deleted.dedup();
    GatherError::Rollup(match deleted.is_empty() {
        true => format!("no configured rollup answers the window {w}"),
        false => format!("no configured rollup answers the window {w} from items still kept: {}", deleted.join("; ")),
    })
}

/// What `req` asks of one projection: its step, its window, a note when
/// `--snap` moved the window's ends to the projection's buckets, and its
/// rollups, finest first.
struct Resolved {
    step: Option<i64>,
    window: Window,
    note: Option<String>,
    rollups: Vec<Rollup>,
}

/// The step and window `req` asks of `km`.
fn step_and_window(km: &KeyModel, req: &PlanRequest) -> Result<Resolved> {
    let (finest, rollups) = units(km)?;
    let step = match req.step {
        Some(s) if s % finest != 0 => {
            return Err(GatherError::Window {
                arg: "--step",
                text: format_duration(s),
                why: format!(
                    "is not a multiple of {}, the finest rollup of projection {}",
                    format_duration(finest),
                    km.name()
                ),
            })
        }
        Some(s) => Some(s),
        None if req.timeseries => Some(default_step(req.window.len_ms(req.now)?, &rollups)),
        None => None,
    };
    let grain = step.unwrap_or(finest);
    let window = req.window.resolve(req.now, finest, grain, req.snap)?;
    let moved = req.snap.is_some() && req.window.resolve(req.now, finest, grain, None).is_err();
    let note = moved.then(|| {
        let (snap, unit) = (req.snap.map_or("", Snap::name), rollups[0]);
        format!("read {window} (--snap {snap}): projection {} keeps {unit}s", km.name())
    });
    Ok(Resolved { step, window, note, rollups })
}

/// Plans a request on one projection: its cheapest decomposition by the
/// declared schema (the first of [`plan_alternatives`]).
pub fn plan_source(km: &KeyModel, req: PlanRequest) -> Result<Plan> {
    let draft =
        plan_alternatives(km, req)?.into_iter().next().ok_or_else(|| GatherError::Config("no decomposition".into()))?;
    Ok(Plan::new(draft, Choice::alone()))
}

/// Every way to read `req` from `km`: one read of one rollup (`--rollup`,
/// or a request without `mixing`); else one decomposition per coarsest
/// rollup allowed, coarsest first, those that differ.
pub fn plan_alternatives(km: &KeyModel, req: PlanRequest) -> Result<Vec<Draft>> {
    let Resolved { step, window, note, rollups } = step_and_window(km, &req)?;
    let hidden = unshown(km, &req, window.start)?;
    let Some(mixing) = req.mixing.as_ref().filter(|_| req.rollup.is_none()) else {
        let (rollup, reason) = choose_rollup(km, &req, &window, step)?;
        let spans = [Span { rollup, start: window.start, end: window.end }];
        return Ok(vec![assemble(km, &req, (step, window, note), &spans, reason, hidden)?]);
    };
    let folded = !mixing.cuts.is_empty();
    let usable: Vec<Rollup> =
        rollups.iter().copied().filter(|r| folded || step.is_none_or(|s| s % r.unit_ms() == 0)).collect();
    // The finest rollup divides every step `step_and_window` accepts.
    let Some(&finest) = usable.first() else { return Err(GatherError::Config("no rollup divides the step".into())) };
    let projection = km.name();
    let mut alternatives: Vec<Draft> = Vec::new();
    let mut first_error = None;
    for cap in (0..usable.len()).rev() {
        let mut may_stand = |r: Rollup, lo: i64, hi: i64| {
            !mixing.cuts.iter().any(|&c| lo < c && c < hi)
                && holds(km, &req, r, lo).is_ok()
                && mixing.complete.complete(projection, r, finest, lo, hi)
        };
        let spans = decompose(window.start, window.end, &usable[..=cap], &mut may_stand);
        if alternatives.iter().any(|p| same_spans(p, &spans)) {
            continue;
        }
        // The finest spans are read whatever their retention: refused if
        // their items may be gone.
        let gone: Vec<String> = spans.iter().filter_map(|s| holds(km, &req, s.rollup, s.start).err()).collect();
        if !gone.is_empty() {
            first_error.get_or_insert_with(|| not_kept(&window, gone));
            continue;
        }
        let reason = match spans.len() {
            1 => format!("auto: the coarsest configured rollup whose whole buckets ({}) cover the window", spans[0].rollup),
            _ => format!(
                "auto: whole buckets of the coarsest rollups ({}) whose items hold all their finer items do, the rest finer",
                rollups_label(spans.iter().map(|s| s.rollup))
            ),
        };
        alternatives.push(assemble(km, &req, (step, window, note.clone()), &spans, reason, hidden.clone())?);
    }
    match (alternatives.is_empty(), first_error) {
        (true, Some(e)) => Err(e),
        _ => Ok(alternatives),
    }
}

fn same_spans(p: &Draft, spans: &[Span]) -> bool {
    p.reads.len() == spans.len()
        && p.reads
            .iter()
            .zip(spans)
            .all(|(r, s)| r.rollup == s.rollup && (r.window.start, r.window.end) == (s.start, s.end))
}

/// The measures of `km` a read from `start` on leaves out, and why: a
/// measure a layout version gave it holds events from the version's cut on
/// only. Asked by name, such a measure is refused (naming the cut; another
/// projection may hold it); in a report of every measure it is left out,
/// and said.
fn unshown(km: &KeyModel, req: &PlanRequest, start: i64) -> Result<Vec<(String, String)>> {
    let name = km.name();
    match &req.source.measures {
        Some(asked) => {
            for m in asked.iter().filter(|m| km.measures().position(m).is_some()) {
                req.filling
                    .measure_readable(name, m, start)
                    .map_err(|note| GatherError::Projection(format!("measure {m} of {name}: {note}")))?;
            }
            Ok(Vec::new())
        }
        None => Ok(km
            .measures()
            .measures()
            .iter()
            .filter_map(|m| req.filling.measure_readable(name, &m.name, start).err().map(|note| (m.name.clone(), note)))
            .collect()),
    }
}

/// A draft of `spans` on `km`.
fn assemble(
    km: &KeyModel,
    req: &PlanRequest,
    (step, window, window_note): (Option<i64>, Window, Option<String>),
    spans: &[Span],
    reason: String,
    hidden: Vec<(String, String)>,
) -> Result<Draft> {
    let reads = spans.iter().map(|s| read::read_of(km, req, s)).collect::<Result<Vec<_>>>()?;
    let schema = km.schema(spans[0].rollup).ok_or_else(|| GatherError::Config("no schema for the rollup".into()))?;
    Ok(Draft {
        projection: km.name().to_string(),
        window,
        window_note,
        step,
        rollup_reason: reason,
        reads,
        server_filter: req.filters.server_filter(),
        filters: req.filters.clone(),
        filter_notes: req.filters.describe(schema),
        hidden,
    })
}

#[cfg(test)]
mod tests;
