//! The `gather` binary: argument parsing and error context only; the work
//! is in the library (`zigzag_gather`).

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use zigzag_app::config::read;
use zigzag_app::store::StoreArgs;
use zigzag_core::query::Strategy;
use zigzag_core::table::SortedTable;
use zigzag_gather::execute::{ExecOptions, DEFAULT_CONCURRENCY};
use zigzag_gather::filter::FilterSet;
use zigzag_gather::plan::PlanRequest;
use zigzag_gather::render::{render, write_chart, ChartMeasure, Format};
use zigzag_gather::report::{self, RankBy};
use zigzag_gather::source::SourceRequest;
use zigzag_gather::window::{parse_duration, parse_time, WindowSpec};
use zigzag_gather::{check, explain, merge, Planned};
use zigzag_model::layout::{self, Layout};
use zigzag_model::{Config, MeasureSet, Projections, Rollup, Truth};

mod compact_cmd;
mod zbench_cmd;
use compact_cmd::compact_cmd;
use zbench_cmd::{zbench_cmd, ZbenchArgs};

const WHERE_HELP: &str = "Filter, repeatable (AND): FIELD=V, FIELD!=V, 'FIELD in V1,V2', FIELD>=V, FIELD>V, \
FIELD<=V, FIELD<V. FIELD is a dimension of the table's layout; text compares as UTF-8 bytes, integers as \
numbers. A value may be quoted (\\\" and \\\\ escape): 'path in \"/a, b\", /c', 'campaign=\"\"'. Filters on \
indexed dimensions narrow the Z-ranges; all are applied exactly after reading";

#[derive(Parser)]
#[command(
    name = "gather",
    version,
    about = "Reports over Zigzag aggregates (time series, top N, CTR, totals); benchmark Z-index schemas",
    after_help = "Windows: --last 15m|1h|7d (ends at now rounded up to the step, or to the finest rollup), \
or --from/--to as RFC 3339, a UTC date or epoch ms, on boundaries of the finest rollup. \
The window is [from, to)."
)]
struct Cli {
    /// Pipeline configuration (TOML). Not needed: the table records the
    /// layout ingest wrote it with; one given must match it (tables from
    /// before layouts were recorded: this, or the built-in defaults)
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    #[command(flatten)]
    store: StoreArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Measures per time bucket (optionally per group); --chart draws them
    Timeseries {
        #[command(flatten)]
        common: Common,
        /// Also draw a chart: PATH.svg or PATH.png
        #[arg(long, value_name = "PATH")]
        chart: Option<PathBuf>,
        /// Measure or ratio the chart draws (a name from the layout)
        #[arg(long, default_value = "clicks")]
        measure: String,
    },
    /// The N groups with the largest measure (needs --group-by)
    Top {
        #[command(flatten)]
        common: Common,
        #[arg(short = 'n', default_value_t = 10)]
        n: usize,
        /// Measure or ratio to rank by (a name from the layout)
        #[arg(long, default_value = "clicks")]
        by: String,
    },
    /// Each declared ratio with its two measures, e.g. clicks, impressions and CTR (per group)
    #[command(alias = "ctr")]
    Ratios {
        #[command(flatten)]
        common: Common,
    },
    /// Every measure (per group)
    Totals {
        #[command(flatten)]
        common: Common,
    },
    /// Compare the store with a loadgen ground-truth file; exit 1 on any mismatch
    Check {
        /// Ground truth JSON written by loadgen
        #[arg(long)]
        truth: PathBuf,
        #[arg(long, default_value_t = DEFAULT_CONCURRENCY)]
        concurrency: usize,
        /// Print the plan and its cost as well
        #[arg(long)]
        explain: bool,
    },
    /// Compare query strategies (and a single-attribute index) on your data
    Zbench(ZbenchArgs),
    /// Fold the scatter partials of closed buckets into one item per key
    /// (seed 003's asynchronous re-gather): seal the table at --before
    /// (from then on every worker dead-letters events before it, reason
    /// `sealed`), wait until every worker acknowledged, fold each bin that
    /// ended by then into a partition of its own (reports switch to it),
    /// and delete the partials after --grace. Safe to stop and run again
    Compact {
        /// Buckets ending at or before this instant are folded: RFC 3339,
        /// YYYY-MM-DD (UTC) or epoch ms; not in the future
        #[arg(long, allow_hyphen_values = true)]
        before: String,
        /// Between folding a bin and deleting its partials: reports that
        /// planned before finish without reading again
        #[arg(long, default_value = "10m", value_parser = zigzag_app::duration::positive)]
        grace: Duration,
        /// How long to wait for every worker to acknowledge the seal
        #[arg(long, default_value = "5m", value_parser = zigzag_app::duration::positive)]
        wait: Duration,
        /// Requests in flight at once
        #[arg(long, default_value_t = 16)]
        concurrency: usize,
    },
    /// The scatter prefixes each projection and rollup needs by seed 003's
    /// write-rate formula, from the items per bucket the table's statistics
    /// measured, against those it has
    Scatter {
        /// Workers writing at once (each writes an item once per flush)
        #[arg(long, default_value_t = 1)]
        writers: u32,
        /// Between a worker's writes of an item: the item set's cadence
        /// (flush.every_ms, else flush.interval_ms)
        #[arg(long, default_value = "10s", value_parser = zigzag_app::duration::positive)]
        interval: Duration,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum RollupArg {
    Auto,
    Minute,
    Hour,
    Day,
}

#[derive(Clone, Copy, ValueEnum)]
enum FormatArg {
    Table,
    Csv,
    Json,
}

#[derive(clap::Args)]
struct Common {
    /// Window start (inclusive): RFC 3339, YYYY-MM-DD (UTC) or epoch ms
    #[arg(long, allow_hyphen_values = true)]
    from: Option<String>,
    /// Window end (exclusive)
    #[arg(long, allow_hyphen_values = true)]
    to: Option<String>,
    /// Window ending now: 15m, 1h, 7d, 2w ...
    #[arg(long)]
    last: Option<String>,
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
    /// Strongly consistent reads (twice the RCU)
    #[arg(long)]
    consistent: bool,
    /// Z-query strategy: auto (a box of a few exact Z-runs range by range, else page-jump in
    /// 4 KB read units), naive (one key range), precise (exact sub-ranges, budget 64),
    /// page-jump (Limit 40), adaptive, elastic
    #[arg(long, default_value = "auto", value_parser = Strategy::NAMES)]
    strategy: String,
    /// Read this projection (a name from the layout, `base` for the base);
    /// default: the cheapest that answers the report exactly (--explain lists them)
    #[arg(long, value_name = "NAME")]
    projection: Option<String>,
    /// Measures the report needs, comma-separated (a source must keep them);
    /// default: every measure for totals and time series, the ranked one for top,
    /// the ratios' for ratios
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    measures: Vec<String>,
    /// Pretend now is this instant (reproducible --last)
    #[arg(long, hide = true)]
    now: Option<String>,
}

/// The table's layout, if a writer recorded one. This is the table's
/// first read: if it fails on DynamoDB, a DescribeTable says why when it
/// can (missing table, other key schema). What it read is cached for the
/// next report ([`zigzag_app::layout_cache`]).
async fn stored_layout(store: &StoreArgs, table: &dyn SortedTable) -> Result<Option<Layout>> {
    match layout::load(table).await.context("reading the table's layout") {
        Ok(stored) => {
            if let Some(cache) = store.layout_cache() {
                cache.write(stored.as_ref());
            }
            Ok(stored)
        }
        Err(e) => Err(store.explain(e).await),
    }
}

/// The configuration to read with: the layout recorded in the table (a
/// `--config` given must agree with it), or, for a table written before
/// layouts were recorded, `--config` or the defaults (`given`).
fn reader_config(given: &Config, stored: Option<&Layout>, path: Option<&Path>) -> Result<Config> {
    match stored {
        None => Ok(given.clone()),
        Some(stored) => {
            if path.is_some() {
                let differences = Layout::of(given).differences(stored);
                if !differences.is_empty() {
                    bail!(
                        "--config does not match the layout recorded in the table: {}. Leave --config out to read \
                         with the table's layout",
                        differences.join("; ")
                    );
                }
            }
            Ok(stored.apply(given))
        }
    }
}

/// The configuration to read `table` with ([`reader_config`] of the
/// table's layout).
async fn layout(store: &StoreArgs, table: &dyn SortedTable, path: Option<&Path>) -> Result<Config> {
    let given = zigzag_app::config::load(path, zigzag_app::config::Base::Full, &[])?;
    let stored = stored_layout(store, table).await?;
    reader_config(&given, stored.as_ref(), path)
}

/// The aggregate table and its configuration, for a reader.
async fn open(store: &StoreArgs, config: Option<&Path>) -> Result<(Arc<dyn SortedTable>, Config)> {
    let table = store.open_aggregates().await?;
    let config = layout(store, table.as_ref(), config).await?;
    Ok((table, config))
}

fn now_ms(arg: Option<&str>) -> Result<i64> {
    match arg {
        Some(t) => Ok(parse_time("--now", t)?),
        None => Ok(chrono::Utc::now().timestamp_millis()),
    }
}

fn exec_options(c: &Common) -> Result<ExecOptions> {
    if let Some(r) = c.rcu_per_sec {
        if !(r.is_finite() && r > 0.0) {
            bail!("--rcu-per-sec {r}: must be a positive number");
        }
    }
    Ok(ExecOptions {
        concurrency: c.concurrency.max(1),
        rcu_per_sec: c.rcu_per_sec,
        consistent: c.consistent,
        strategy: Strategy::named(&c.strategy)
            .with_context(|| format!("--strategy {}: one of {}", c.strategy, Strategy::NAMES.join(", ")))?,
    })
}

enum Kind {
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

/// The report `c` and `kind` ask for, planned on `config` (the planner's
/// statistics read, none of its items).
async fn prepare(table: &dyn SortedTable, config: &Config, c: &Common, kind: &Kind) -> Result<Prepared> {
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
        (Kind::Top { by: name, .. }, true) => Some(measures_of(name, &set)?),
        (Kind::Ratios, true) => Some(
            set.ratios()
                .iter()
                .flat_map(|r| [r.numerator, r.denominator])
                .map(|i| set.measures()[i].name.clone())
                .collect(),
        ),
        _ => None,
    };
    let req = PlanRequest {
        window: WindowSpec::from_args(c.from.as_deref(), c.to.as_deref(), c.last.as_deref())?,
        rollup: match c.rollup {
            RollupArg::Auto => None,
            RollupArg::Minute => Some(Rollup::Minute),
            RollupArg::Hour => Some(Rollup::Hour),
            RollupArg::Day => Some(Rollup::Day),
        },
        step: c.step.as_deref().map(|s| parse_duration("--step", s)).transpose()?,
        timeseries: matches!(kind, Kind::Timeseries { .. }),
        filters: FilterSet::parse(&c.filters, config)?,
        now: now_ms(c.now.as_deref())?,
        source: SourceRequest { projection: c.projection.clone(), measures: needed },
    };
    let group_by = merge::parse_group_by(&c.group_by, config)?;
    if matches!(kind, Kind::Top { .. }) && group_by.is_empty() {
        bail!("top ranks groups: give --group-by FIELD");
    }
    let opts = exec_options(c)?;
    if let Kind::Timeseries { measure: name, .. } | Kind::Top { by: name, .. } = kind {
        RankBy::parse(name, &set)?;
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
    path: Option<&Path>,
    c: &Common,
    kind: &Kind,
) -> Result<(Config, Prepared)> {
    let given = zigzag_app::config::load(path, zigzag_app::config::Base::Full, &[])?;
    let cached = store.layout_cache().and_then(|cache| cache.read());
    let speculative = cached.as_ref().and_then(|l| reader_config(&given, Some(l), path).ok());
    let stored = match speculative {
        Some(guess) => {
            let (stored, prepared) = tokio::join!(stored_layout(store, table), prepare(table, &guess, c, kind));
            let stored = stored?;
            if stored.is_some() && stored == cached {
                return Ok((guess, prepared?));
            }
            tracing::debug!("the table's layout is not the cached one: planning again");
            stored
        }
        None => stored_layout(store, table).await?,
    };
    let config = reader_config(&given, stored.as_ref(), path)?;
    let prepared = prepare(table, &config, c, kind).await?;
    Ok((config, prepared))
}

async fn report_cmd(store: &StoreArgs, config: Option<&Path>, c: Common, kind: Kind) -> Result<()> {
    let table = store.open_aggregates().await?;
    let (config, Prepared { req, group_by, opts, planned }) =
        plan_on_layout(store, table.as_ref(), config, &c, &kind).await?;
    let config = &config;
    let g = planned.read(table.as_ref(), &opts).await?;
    // Measures by position in the projection read (it may keep fewer).
    let set = g.aggregation.set.clone();
    let rank = match &kind {
        Kind::Timeseries { measure: name, chart: Some(_) } => Some(RankBy::parse(name, &set).with_context(|| {
            format!("the chart's --measure {name} is not kept by projection {}", g.plan.projection)
        })?),
        Kind::Timeseries { measure: name, .. } => RankBy::parse(name, &set).ok(),
        Kind::Top { by: name, .. } => Some(RankBy::parse(name, &set)?),
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
    if let (Kind::Timeseries { chart: Some(path), .. }, Some(m)) = (&kind, rank) {
        write_chart(&report, &ChartMeasure { name: m.name(&set).to_string(), ratio: m.is_ratio() }, path)?;
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

/// The measures a measure or ratio name is made of.
fn measures_of(name: &str, set: &MeasureSet) -> Result<Vec<String>> {
    if set.position(name).is_some() {
        return Ok(vec![name.to_string()]);
    }
    match set.ratios().iter().find(|r| r.name == name) {
        Some(r) => Ok([r.numerator, r.denominator].iter().map(|&i| set.measures()[i].name.clone()).collect()),
        None => {
            RankBy::parse(name, set)?;
            bail!("{name} is not a measure or ratio of the layout")
        }
    }
}

async fn check_cmd(
    store: &StoreArgs,
    config: Option<&Path>,
    truth: &Path,
    concurrency: usize,
    show: bool,
) -> Result<bool> {
    let truth: Truth = serde_json::from_str(&read(truth, "truth file")?)
        .with_context(|| format!("in the truth file {}", truth.display()))?;
    let (table, config) = open(store, config).await?;
    let projections = Projections::new(&config)?;
    let opts = ExecOptions { concurrency: concurrency.max(1), ..ExecOptions::default() };
    let now = chrono::Utc::now().timestamp_millis();
    let report = check::check(table.as_ref(), &projections, &truth, now, &opts).await?;
    print!("{}", check::render(&report));
    if show {
        for plan in &report.plans {
            print!("\n{}", explain::explain(plan, &opts, None));
        }
        println!(
            "\nall rollups: {} queries, {} requests, {:.1} RCU",
            report.actual.queries, report.actual.stats.requests, report.actual.stats.rcu
        );
    }
    Ok(report.mismatches() == 0)
}

#[tokio::main]
async fn main() -> Result<()> {
    let parsed = zigzag_app::settings::parse::<Cli>("gather");
    let cli = parsed.cli;
    if parsed.print {
        return zigzag_app::config::print_with(&parsed.settings, cli.config.as_deref(), None, &[]);
    }
    let config = cli.config.as_deref();
    let store = &cli.store;
    match cli.command {
        Command::Zbench(args) => zbench_cmd(args).await,
        Command::Timeseries { common, chart, measure } => {
            report_cmd(store, config, common, Kind::Timeseries { chart, measure }).await
        }
        Command::Top { common, n, by } => report_cmd(store, config, common, Kind::Top { n, by }).await,
        Command::Ratios { common } => report_cmd(store, config, common, Kind::Ratios).await,
        Command::Totals { common } => report_cmd(store, config, common, Kind::Totals).await,
        Command::Check { truth, concurrency, explain } => {
            if !check_cmd(store, config, &truth, concurrency, explain).await? {
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Compact { before, grace, wait, concurrency } => {
            compact_cmd(store, config, &before, grace, wait, concurrency).await
        }
        Command::Scatter { writers, interval } => {
            if writers == 0 {
                bail!("--writers must be at least 1");
            }
            let interval = interval.as_secs_f64();
            let (table, config) = open(store, config).await?;
            let projections = Projections::new(&config)?;
            let advice = zigzag_gather::scatter::advise(table.as_ref(), &projections, writers, interval).await?;
            print!("{}", zigzag_gather::scatter::render(&advice, writers, interval));
            Ok(())
        }
    }
}
