//! `gather timeseries | top | ratios | totals`: the report's arguments,
//! the report planned on the table's layout (with the cached one while the
//! table's is read again: [`plan_on_layout`]), read, ranked and rendered,
//! and `--explain`.

use super::{reader_config, stored_layout};
use anyhow::{bail, Context, Result};
use clap::ValueEnum;
use std::path::{Path, PathBuf};
use zigzag_app::store::StoreArgs;
use zigzag_core::query::Strategy;
use zigzag_core::table::SortedTable;
use zigzag_gather::execute::{ExecOptions, DEFAULT_CONCURRENCY};
use zigzag_gather::filter::FilterSet;
use zigzag_gather::plan::SourceRequest;
use zigzag_gather::plan::{Filling, Mixing, PlanRequest};
use zigzag_gather::render::{render, write_chart, ChartMeasure, Format};
use zigzag_gather::report::{self, RankBy};
use zigzag_gather::window::{parse_duration, parse_time, Snap, WindowSpec};
use zigzag_gather::{explain, merge, Completeness, Planned};
use zigzag_model::measure::sketch::DEFAULT_QUANTILES;
use zigzag_model::measure::ShowOptions;
use zigzag_model::{layout, Config, MeasureSet, Rollup};

const WHERE_HELP: &str = "Filter, repeatable (AND): FIELD=V, FIELD!=V, 'FIELD in V1,V2', FIELD>=V, FIELD>V, \
FIELD<=V, FIELD<V. FIELD is a dimension of the table's layout; text compares as UTF-8 bytes, integers as \
numbers. A value may be quoted (\\\" and \\\\ escape): 'path in \"/a, b\", /c', 'campaign=\"\"'. Filters on \
indexed dimensions narrow the Z-ranges; all are applied exactly after reading";

#[derive(Clone, Copy, ValueEnum)]
enum RollupArg {
    Auto,
    Minute,
    Hour,
    Day,
}

/// `--snap`: how a window off the buckets of every projection that keeps
/// what the report needs is read.
#[derive(Clone, Copy, ValueEnum)]
enum SnapArg {
    /// Over the buckets the window touches (wider)
    Out,
    /// Over the buckets inside it (narrower)
    In,
}

#[derive(Clone, Copy, ValueEnum)]
enum FormatArg {
    Table,
    Csv,
    Json,
}

#[derive(clap::Args)]
pub(crate) struct Common {
    /// Window start (inclusive): RFC 3339, YYYY-MM-DD (UTC) or epoch ms
    #[arg(long, allow_hyphen_values = true)]
    from: Option<String>,
    /// Window end (exclusive)
    #[arg(long, allow_hyphen_values = true)]
    to: Option<String>,
    /// Window ending now: 15m, 1h, 7d, 2w ...
    #[arg(long)]
    last: Option<String>,
    /// When no projection keeping what the report needs has buckets on the
    /// window's ends (referrers are kept by the hour): read the buckets the
    /// window touches (out) or those inside it (in); the window read is
    /// printed. Unset: such a window is refused
    #[arg(long, value_enum)]
    snap: Option<SnapArg>,
    /// Rollup to read; auto = the coarsest that gives the step and fits the window
    #[arg(long, value_enum, default_value = "auto")]
    rollup: RollupArg,
    /// Resolution: time-series bucket width, and what --last rounds to (5m, 1h, 1d ...)
    #[arg(long)]
    step: Option<String>,
    #[arg(long = "where", short = 'w', value_name = "EXPR", help = WHERE_HELP)]
    filters: Vec<String>,
    /// Group by dimensions: FIELD, or several as FIELD,FIELD
    #[arg(long, value_name = "FIELDS")]
    group_by: Vec<String>,
    #[arg(long, value_enum, default_value = "table")]
    format: FormatArg,
    /// Print the plan, the estimate and the actual cost (stdout for tables, stderr otherwise)
    #[arg(long)]
    explain: bool,
    /// --explain, and also read the report from every other projection that
    /// answers it exactly, to show each one's actual cost (costs those reads)
    #[arg(long)]
    explain_all: bool,
    /// Queries in flight at once
    #[arg(long, default_value_t = DEFAULT_CONCURRENCY)]
    concurrency: usize,
    /// Read budget in RCU per second (paces requests)
    #[arg(long)]
    rcu_per_sec: Option<f64>,
    /// RCU the report may cost to answer sooner: the planner takes the
    /// fastest way of reading it within this (fewer round trips, some
    /// garbage read) [default: the cheapest way's units: faster only where no dearer]
    #[arg(long, value_name = "RCU")]
    rcu_allowance: Option<f64>,
    /// Strongly consistent reads (twice the RCU)
    #[arg(long)]
    consistent: bool,
    /// Z-query strategy: auto (a box of a few exact Z-runs range by range, else page-jump in
    /// 4 KB read units), naive (one key range), precise (exact sub-ranges, budget 64),
    /// page-jump (Limit 40), adaptive, elastic [default: auto, or naive where the
    /// planner finds it faster within --rcu-allowance]
    #[arg(long, value_parser = Strategy::NAMES)]
    strategy: Option<String>,
    /// Read this projection (a name from the layout, `base` for the base);
    /// default: the cheapest that answers the report exactly (--explain lists them)
    #[arg(long, value_name = "NAME")]
    projection: Option<String>,
    /// Measures the report needs, comma-separated (a source must keep them);
    /// default: every measure for totals and time series, the ranked one for top,
    /// the ratios' for ratios
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    measures: Vec<String>,
    /// Quantiles a quantile measure shows, comma-separated, each in 0..=1
    /// (columns NAME_p50, NAME_p99, ...; `top --by NAME_p99` ranks by one)
    #[arg(long, value_name = "Q", value_delimiter = ',', default_values_t = DEFAULT_QUANTILES)]
    quantiles: Vec<f64>,
    /// Pretend now is this instant (reproducible --last)
    #[arg(long, hide = true)]
    now: Option<String>,
}

fn now_ms(arg: Option<&str>) -> Result<i64> {
    match arg {
        Some(t) => Ok(parse_time("--now", t, chrono::Utc::now().timestamp_millis())?),
        None => Ok(chrono::Utc::now().timestamp_millis()),
    }
}

/// The strategy asked for (None: auto).
pub(crate) fn strategy_of(name: Option<&str>) -> Result<Strategy> {
    let name = name.unwrap_or("auto");
    Strategy::named(name).with_context(|| format!("--strategy {name}: one of {}", Strategy::NAMES.join(", ")))
}

/// What reports show of measures with several columns.
fn show_options(c: &Common) -> Result<ShowOptions> {
    for &q in &c.quantiles {
        if !(0.0..=1.0).contains(&q) {
            bail!("--quantiles {q}: a quantile is in 0..=1 (0.5 is the median, 0.99 the 99th percentile)");
        }
    }
    let mut quantiles = c.quantiles.clone();
    quantiles.dedup();
    Ok(ShowOptions { quantiles })
}

fn exec_options(c: &Common) -> Result<ExecOptions> {
    if let Some(r) = c.rcu_per_sec {
        if !(r.is_finite() && r > 0.0) {
            bail!("--rcu-per-sec {r}: must be a positive number");
        }
    }
    if let Some(r) = c.rcu_allowance {
        if !(r.is_finite() && r > 0.0) {
            bail!("--rcu-allowance {r}: must be a positive number of RCU");
        }
    }
    Ok(ExecOptions {
        concurrency: c.concurrency.max(1),
        rcu_per_sec: c.rcu_per_sec,
        consistent: c.consistent,
        rcu_allowance: c.rcu_allowance,
        strategy: strategy_of(c.strategy.as_deref())?,
        choose_way: c.strategy.is_none(),
    })
}

pub(crate) enum Kind {
    Timeseries { chart: Option<PathBuf>, measure: String },
    Top { n: usize, by: String },
    Ratios,
    Totals,
}

/// A report's request, planned on one configuration.
struct Prepared {
    req: PlanRequest,
    group_by: Vec<String>,
    opts: ExecOptions,
    planned: Planned,
}

/// What the parts a layout change added hold of `window`.
async fn filling(table: &dyn SortedTable, window: &WindowSpec, now: i64) -> Result<Filling> {
    let (from, to) = match window.resolve(now, 60_000, 60_000, Some(Snap::Out)) {
        Ok(w) => (w.start, w.end),
        Err(_) => (i64::MIN, i64::MAX),
    };
    Ok(zigzag_gather::relayout::filling_of(table, from, to).await?)
}

/// The report `c` and `kind` ask for, planned on `config` (the planner's
/// statistics read, none of its items).
async fn prepare(
    table: &dyn SortedTable,
    leases: &dyn SortedTable,
    config: &Config,
    c: &Common,
    kind: &Kind,
) -> Result<Prepared> {
    let set = config.measure_set()?;
    let needed = match (kind, c.measures.is_empty()) {
        (_, false) => {
            for m in &c.measures {
                if set.position(m).is_none() {
                    bail!("--measures {m}: not a measure of the layout");
                }
            }
            Some(c.measures.clone())
        }
        (Kind::Top { by: name, .. }, true) => Some(measures_of(name, &set, &show_options(c)?)?),
        (Kind::Ratios, true) => Some(
            set.ratios()
                .iter()
                .flat_map(|r| [r.numerator, r.denominator])
                .map(|i| set.measures()[i].name.clone())
                .collect(),
        ),
        _ => None,
    };
    let window = WindowSpec::from_args(c.from.as_deref(), c.to.as_deref(), c.last.as_deref())?;
    let now = now_ms(c.now.as_deref())?;
    // Which hour and day items hold all their minutes (the lease table says
    // what the slower cadences have not written yet), and what a layout
    // change added holds (the table's versions): read at once.
    let (complete, filling) = tokio::join!(Completeness::read(config, leases), filling(table, &window, now));
    let req = PlanRequest {
        window,
        rollup: match c.rollup {
            RollupArg::Auto => None,
            RollupArg::Minute => Some(Rollup::Minute),
            RollupArg::Hour => Some(Rollup::Hour),
            RollupArg::Day => Some(Rollup::Day),
        },
        step: c.step.as_deref().map(|s| parse_duration("--step", s)).transpose()?,
        timeseries: matches!(kind, Kind::Timeseries { .. }),
        filters: FilterSet::parse(&c.filters, config)?,
        now,
        source: SourceRequest { projection: c.projection.clone(), measures: needed },
        mixing: Some(Mixing::complete(
            complete.context("reading the lease table (which hour and day items hold all their minutes)")?,
        )),
        snap: c.snap.map(|s| match s {
            SnapArg::Out => Snap::Out,
            SnapArg::In => Snap::In,
        }),
        filling: filling.context("reading the table's layout versions")?,
    };
    let group_by = merge::parse_group_by(&c.group_by, config)?;
    if matches!(kind, Kind::Top { .. }) && group_by.is_empty() {
        bail!("top ranks groups: give --group-by FIELD");
    }
    let opts = exec_options(c)?;
    if let Kind::Timeseries { measure: name, .. } | Kind::Top { by: name, .. } = kind {
        RankBy::parse(name, &set, &show_options(c)?)?;
    }
    let planned = zigzag_gather::plan_report(table, config, req.clone(), group_by.clone(), &opts).await?;
    Ok(Prepared { req, group_by, opts, planned })
}

/// The table's configuration and the report planned on it. With the
/// layout this table had last time ([`zigzag_app::layout_cache`]), the report is
/// planned while the table's layout is read again, one round trip instead
/// of two, and the plan is kept only if the two layouts are equal;
/// otherwise it is planned again on the table's.
async fn plan_on_layout(
    store: &StoreArgs,
    table: &dyn SortedTable,
    leases: &dyn SortedTable,
    path: Option<&Path>,
    c: &Common,
    kind: &Kind,
) -> Result<(Config, Prepared)> {
    let given = zigzag_app::config::load(path, zigzag_app::config::Base::Full, &[])?;
    let cached = store.layout_cache().and_then(|cache| cache.read());
    let speculative = cached.as_ref().and_then(|l| reader_config(&given, Some(l), path).ok());
    let stored = match speculative {
        Some(guess) => {
            let work = prepare(table, leases, &guess, c, kind);
            let (stored, kept) = layout::speculate(&cached, stored_layout(store, table), |s| s, work).await?;
            if let (Some(_), Some(prepared)) = (&stored, kept) {
                return Ok((guess, prepared?));
            }
            tracing::debug!("the table's layout is not the cached one: planning again");
            stored
        }
        None => stored_layout(store, table).await?,
    };
    let config = reader_config(&given, stored.as_ref(), path)?;
    let prepared = prepare(table, leases, &config, c, kind).await?;
    Ok((config, prepared))
}

pub(crate) async fn report_cmd(store: &StoreArgs, config: Option<&Path>, c: Common, kind: Kind) -> Result<()> {
    // The window is the request's: refused before the store is opened.
    WindowSpec::from_args(c.from.as_deref(), c.to.as_deref(), c.last.as_deref())?
        .validate(now_ms(c.now.as_deref())?)?;
    let table = store.open_aggregates().await?;
    let leases = store.open_leases().await?;
    let (config, Prepared { req, group_by, opts, planned }) =
        plan_on_layout(store, table.as_ref(), leases.as_ref(), config, &c, &kind).await?;
    let config = &config;
    let show = show_options(&c)?;
    let mut g = planned.read(table.as_ref(), &opts).await?;
    g.aggregation.show = show.clone();
    // Measures by position in the projection read (it may keep fewer).
    let set = g.aggregation.set.clone();
    let rank = match &kind {
        Kind::Timeseries { measure: name, chart: Some(_) } => {
            Some(RankBy::parse(name, &set, &show).with_context(|| {
                match g.plan.hidden.iter().find(|(m, _)| name.starts_with(m.as_str())) {
                    Some((m, why)) => {
                        format!("the chart's --measure {name}: measure {m} of {}: {why}", g.plan.projection)
                    }
                    None => format!("the chart's --measure {name} is not kept by projection {}", g.plan.projection),
                }
            })?)
        }
        Kind::Timeseries { measure: name, .. } => RankBy::parse(name, &set, &show).ok(),
        Kind::Top { by: name, .. } => Some(RankBy::parse(name, &set, &show)?),
        _ => None,
    };
    let report = match (&kind, rank) {
        (Kind::Top { n, .. }, Some(by)) => report::top(&g.aggregation, *n, by)?,
        (Kind::Ratios, _) => report::ratios(&g.aggregation)?,
        (Kind::Totals, _) => report::totals(&g.aggregation),
        _ => report::timeseries(&g.aggregation, &g.plan.window)?,
    };
    let format = match c.format {
        FormatArg::Table => Format::Table,
        FormatArg::Csv => Format::Csv,
        FormatArg::Json => Format::Json,
    };
    print!("{}", render(&report, format)?);
    if let Some(note) = &g.plan.window_note {
        eprintln!("note: {note}");
    }
    for (m, why) in &g.plan.hidden {
        eprintln!(
            "note: measure {m} (and any ratio of it) not shown: {why}; it is read for windows from then on, or with \
             --measures {m} from a projection holding it"
        );
    }
    if let (Kind::Timeseries { chart: Some(path), .. }, Some(m)) = (&kind, rank) {
        write_chart(&report, &ChartMeasure { name: m.name(&set, &show), ratio: m.is_ratio() }, path)?;
    }
    if c.explain || c.explain_all {
        let mut text = explain::explain(&g.plan, &opts, Some(&g.actual));
        if c.explain_all {
            let mut others = Vec::new();
            for cand in g.plan.candidates.iter().filter(|c| c.verdict.is_ok() && !c.chosen) {
                let mut forced = req.clone();
                forced.source.projection = Some(cand.projection.clone());
                let other = zigzag_gather::gather(table.as_ref(), config, forced, group_by.clone(), &opts).await?;
                others.push((cand.projection.clone(), other.actual));
            }
            text.push_str(&explain::compare(&g.plan, &g.actual, &others));
        }
        if format == Format::Table {
            print!("\n{text}");
        } else {
            eprint!("{text}");
        }
    }
    Ok(())
}

/// The measures a measure, a measure's column or a ratio name is made of.
fn measures_of(name: &str, set: &MeasureSet, ask: &ShowOptions) -> Result<Vec<String>> {
    let by = RankBy::parse(name, set, ask)?;
    Ok(match (by.measure(), by) {
        (Some(i), _) => vec![set.measures()[i].name.clone()],
        (None, RankBy::Ratio(r)) => {
            let r = &set.ratios()[r];
            [r.numerator, r.denominator].iter().map(|&i| set.measures()[i].name.clone()).collect()
        }
        (None, _) => bail!("{name} is not a measure or ratio of the layout"),
    })
}
