//! The `gather` binary: argument parsing and error context only; the work
//! is in the library (`zigzag_gather`).

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use zigzag_app::config::read;
use zigzag_app::store::StoreArgs;
use zigzag_core::table::SortedTable;
use zigzag_gather::execute::{ExecOptions, DEFAULT_CONCURRENCY};
use zigzag_gather::{check, explain};
use zigzag_model::layout::Layout;
use zigzag_model::{Config, Projections, Truth};

mod compact_cmd;
mod layout_cmd;
mod relayout_cmd;
mod report_cmd;
mod serve_cmd;
mod zbench_cmd;
use compact_cmd::compact_cmd;
use layout_cmd::{layout_cmd, LayoutCmd};
use report_cmd::{report_cmd, Common, Kind};
use serve_cmd::{serve_cmd, ServeArgs};
use zbench_cmd::{zbench_cmd, ZbenchArgs};

#[derive(Parser)]
#[command(
    name = "gather",
    version = zigzag_app::VERSION,
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
    /// Serve the Prometheus HTTP API (a PromQL subset over the layout's
    /// measures and dimensions) for Grafana's Prometheus data source,
    /// promtool and other clients
    Serve(ServeArgs),
    /// Compare query strategies (and a single-attribute index) on your data
    Zbench(ZbenchArgs),
    /// The layout the table records (what ingest writes: projections,
    /// rollups, measures, scatter, retention)
    #[command(subcommand)]
    Layout(LayoutCmd),
    /// Fold the scatter partials of closed buckets into one item per key
    /// (a bucket no flush adds to any more is read with one query, not one
    /// per scatter prefix): seal the table at --before
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
    /// The scatter prefixes each projection and rollup needs (enough that
    /// every partition takes at most half of a partition's 1,000 writes/s:
    /// items per bucket x workers / flush interval / 500), from the items
    /// per bucket the table's statistics measured, against those it has
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

/// The table's layout, if a writer recorded one. This is the table's
/// first read: if it fails on DynamoDB, a DescribeTable says why when it
/// can (missing table, other key schema). What it read is cached for the
/// next report ([`zigzag_app::layout_cache`]).
pub(crate) async fn stored_layout(store: &StoreArgs, table: &dyn SortedTable) -> Result<Option<Layout>> {
    match zigzag_model::versions::load_layout(table).await.context("reading the table's layout") {
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
pub(crate) fn reader_config(given: &Config, stored: Option<&Layout>, path: Option<&Path>) -> Result<Config> {
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
async fn main() -> std::process::ExitCode {
    zigzag_app::logging::exit(run().await)
}

async fn run() -> Result<()> {
    let parsed = zigzag_app::settings::parse::<Cli>("gather");
    let cli = parsed.cli;
    if parsed.print {
        return zigzag_app::config::print_with(&parsed.settings, cli.config.as_deref(), None, &[]);
    }
    let config = cli.config.as_deref();
    let store = &cli.store;
    match cli.command {
        Command::Zbench(args) => zbench_cmd(args).await,
        Command::Serve(args) => serve_cmd(store, config, args).await,
        Command::Layout(cmd) => layout_cmd(store, config, cmd).await,
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
