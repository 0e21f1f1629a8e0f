//! `gather serve`: the Prometheus HTTP API (`zigzag_serve`) on a listener,
//! over the store options every command takes. The table's layout is read
//! at start, and again beside every query (`Engine::query`): a change (the
//! table recreated with another layout; writers with another are refused)
//! is read with at once, never with the old one.

use super::{reader_config, stored_layout};
use anyhow::{bail, Context, Result};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use zigzag_app::store::StoreArgs;
use zigzag_core::query::Strategy;
use zigzag_gather::execute::{ExecOptions, DEFAULT_CONCURRENCY};
use zigzag_serve::{Catalog, Engine, Limits, Server, ServerOptions};

#[derive(clap::Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on; loopback unless told otherwise (set
    /// --token-file before listening beyond this machine)
    #[arg(long, default_value = "127.0.0.1:9090")]
    listen: SocketAddr,
    /// A file holding the bearer token every request must carry
    /// (`Authorization: Bearer <token>`); without it, the token in
    /// ZIGZAG_SERVE_TOKEN (an ECS secret), else none
    #[arg(long, value_name = "PATH")]
    token_file: Option<PathBuf>,
    /// Queries evaluated at once; more are answered 429
    #[arg(long, default_value_t = 16)]
    max_queries: usize,
    /// A query's time limit (503 `timeout` past it)
    #[arg(long, default_value = "30s", value_parser = zigzag_app::duration::positive)]
    query_timeout: Duration,
    /// Buckets one read of a query may span (its window over its rollup)
    #[arg(long, default_value_t = Limits::default().max_buckets)]
    max_buckets: i64,
    /// Series a query may return
    #[arg(long, default_value_t = Limits::default().max_series)]
    max_series: usize,
    /// RCU a query may cost by the planner's estimate, refused beyond
    #[arg(long, default_value_t = Limits::default().max_rcu)]
    rcu_budget: f64,
    /// RCU a read may cost to answer sooner: the planner takes the fastest
    /// way of reading it within this [default: the cheapest way's units:
    /// faster only where no dearer]
    #[arg(long, value_name = "RCU")]
    rcu_allowance: Option<f64>,
    /// Z-range queries in flight at once, per query
    #[arg(long, default_value_t = DEFAULT_CONCURRENCY)]
    concurrency: usize,
    /// Z-query strategy (as the reports' --strategy) [default: auto, or
    /// naive where the planner finds it faster within --rcu-allowance]
    #[arg(long, value_parser = Strategy::NAMES)]
    strategy: Option<String>,
    /// Log each query's plan and cost (the reports' --explain)
    #[arg(long)]
    explain: bool,
    /// Memory for results of time slices no flush changed since they were
    /// read (0: no cache; every query reads its whole window)
    #[arg(long, default_value = "256MiB", value_parser = parse_bytes, value_name = "BYTES")]
    cache_bytes: usize,
    /// How old the small reads every query makes (the layout, the
    /// planner's statistics, the change marks) may be when queries share
    /// them: an answer may miss a flush done within it (0s: every query
    /// reads them)
    #[arg(long, default_value = "1s", value_parser = zigzag_app::duration::any, value_name = "DURATION")]
    recheck: Duration,
    /// How long a time slice read while a flush was part way through
    /// writing it answers, as long as that flush is still in progress (a
    /// catch-up backlog's long flush); answers say how old in their infos
    /// (0s: only for --recheck)
    #[arg(long, default_value = "30s", value_parser = zigzag_app::duration::any, value_name = "DURATION")]
    unsettled_for: Duration,
    #[command(flatten)]
    log: zigzag_app::logging::LogArgs,
}

/// `256MiB`, `64MB`, `1GiB`, `0`: bytes.
fn parse_bytes(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: usize = digits.parse().map_err(|_| format!("{text:?}: a number of bytes, e.g. 256MiB"))?;
    let scale: usize = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        other => return Err(format!("{text:?}: unknown unit {other:?} (B, KiB, MiB, GiB, KB, MB, GB)")),
    };
    n.checked_mul(scale).ok_or_else(|| format!("{text:?}: too large"))
}

/// The token itself, for a platform that gives secrets as variables.
const TOKEN_ENV: &str = "ZIGZAG_SERVE_TOKEN";

fn read_token(path: &Path) -> Result<String> {
    let text = zigzag_app::config::read(path, "token file")?;
    let token = text.trim().to_string();
    if token.is_empty() {
        bail!("the token file {} is empty: write the token in it, or leave --token-file out", path.display());
    }
    Ok(token)
}

/// The layout as queries see it (the table's, read now), and what a later
/// layout of the table applies to.
async fn catalog(
    store: &StoreArgs,
    table: &dyn zigzag_core::table::SortedTable,
    path: Option<&Path>,
) -> Result<(Catalog, zigzag_model::Config)> {
    let given = zigzag_app::config::load(path, zigzag_app::config::Base::Full, &[])?;
    let stored = stored_layout(store, table).await?;
    let config = reader_config(&given, stored.as_ref(), path)?;
    Ok((Catalog::recorded(config, stored).context("the table's layout")?, given))
}

pub(crate) async fn serve_cmd(store: &StoreArgs, config: Option<&Path>, args: ServeArgs) -> Result<()> {
    zigzag_app::logging::init(&args.log);
    let emf = zigzag_app::telemetry::EmfArgs {
        cloudwatch_emf: false,
        emf_interval: Duration::from_secs(60),
        emf_namespace: String::new(),
    };
    let telemetry = zigzag_app::telemetry::install(true, &emf, "")?;
    telemetry.start();
    if args.max_queries == 0 || args.max_buckets <= 0 || args.max_series == 0 {
        bail!("--max-queries, --max-buckets and --max-series must be at least 1");
    }
    if !(args.rcu_budget.is_finite() && args.rcu_budget > 0.0) {
        bail!("--rcu-budget {}: must be a positive number", args.rcu_budget);
    }
    let token = match args.token_file.as_deref() {
        Some(path) => Some(read_token(path)?),
        None => std::env::var(TOKEN_ENV).ok().map(|t| t.trim().to_string()).filter(|t| !t.is_empty()),
    };
    if !args.listen.ip().is_loopback() && token.is_none() {
        tracing::warn!(listen = %args.listen, "listening beyond loopback without --token-file: anyone who reaches it can query");
    }
    let table = store.open_aggregates().await?;
    let (catalog, given) = catalog(store, table.as_ref(), config).await?;
    let strategy = super::report_cmd::strategy_of(args.strategy.as_deref())?;
    if let Some(r) = args.rcu_allowance {
        if !(r.is_finite() && r > 0.0) {
            bail!("--rcu-allowance {r}: must be a positive number of RCU");
        }
    }
    let opts = ExecOptions {
        concurrency: args.concurrency.max(1),
        strategy,
        choose_way: args.strategy.is_none(),
        rcu_allowance: args.rcu_allowance,
        ..ExecOptions::default()
    };
    let limits = Limits { max_buckets: args.max_buckets, max_series: args.max_series, max_rcu: args.rcu_budget };
    let leases = store.open_leases().await?;
    let engine = Arc::new(
        Engine::new(table, catalog, opts, limits)
            .with_base(given)
            .with_cache(args.cache_bytes, args.recheck)
            .with_unsettled_for(args.unsettled_for)
            .with_leases(leases),
    );
    let options =
        ServerOptions { token, max_queries: args.max_queries, timeout: args.query_timeout, explain: args.explain };
    let metrics = telemetry.prometheus.clone().context("the Prometheus recorder")?;
    let app = zigzag_serve::router(Server::new(engine, options))
        .route("/metrics", axum::routing::get(move || std::future::ready(metrics.render())));
    let listener =
        tokio::net::TcpListener::bind(args.listen).await.with_context(|| format!("listening on {}", args.listen))?;
    let bound = listener.local_addr()?;
    eprintln!("gather serve: the Prometheus HTTP API on http://{bound}/api/v1/ (Grafana: a Prometheus data source at http://{bound})");
    let stop = zigzag_app::signals::stop_on_signal("closing the listener after the queries in flight");
    let shutdown = {
        let stop = stop.clone();
        async move { stop.cancelled().await }
    };
    // Queries in flight get their time limit to finish, then the process exits.
    let deadline = async move {
        stop.cancelled().await;
        tokio::time::sleep(args.query_timeout + Duration::from_secs(1)).await;
    };
    tokio::select! {
        served = axum::serve(listener, app).with_graceful_shutdown(shutdown) => served.context("serving")?,
        () = deadline => tracing::warn!("queries still running at the deadline: stopping anyway"),
    }
    Ok(())
}
