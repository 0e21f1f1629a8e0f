//! `ingest`: consume shards of click/impression records (JSONL files or a
//! Kinesis stream) into Z-indexed aggregates (SQLite or DynamoDB), exactly
//! once, until the input ends or SIGINT/SIGTERM (then flush and checkpoint
//! before exit).

use anyhow::{Context, Result};
use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use zigzag_app::config::{self, overrides::PipelineArgs, Base};
use zigzag_app::logging::{self, say, LogArgs};
use zigzag_app::settings::Parsed;
use zigzag_app::store::{CreateArgs, StoreArgs};
use zigzag_app::telemetry::{self, EmfArgs};
use zigzag_app::worker::WorkerArgs;
use zigzag_app::{signals, summary};
use zigzag_ingest::source::{JsonlSource, Source};
use zigzag_ingest::{run_adopting, Pipeline, PipelineOptions};
#[cfg(feature = "aws")]
use zigzag_kinesis::{FanOutSource, KinesisSource, StartingPosition};

mod probes;
mod startup;

#[derive(Parser)]
#[command(
    name = "ingest",
    version = zigzag_app::VERSION,
    about = "Consume click/impression events into Z-indexed aggregates, exactly once",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// JSONL input files, one per shard (the file stem is the shard id; the
    /// line number is the sequence number).
    #[cfg_attr(
        feature = "aws",
        arg(long = "input", num_args = 1.., required_unless_present = "kinesis", conflicts_with = "kinesis")
    )]
    #[cfg_attr(not(feature = "aws"), arg(long = "input", num_args = 1.., required = true))]
    inputs: Vec<PathBuf>,
    /// Read this Kinesis stream instead of files (AWS default chain;
    /// AWS_ENDPOINT_URL or AWS_ENDPOINT_URL_KINESIS points it at an emulator).
    #[cfg(feature = "aws")]
    #[arg(long, value_name = "STREAM")]
    kinesis: Option<String>,
    /// Where shards without a checkpoint start: trim-horizon, latest, or an
    /// RFC 3339 time (AT_TIMESTAMP)
    #[cfg(feature = "aws")]
    #[arg(long, default_value = "trim-horizon", value_parser = parse_start)]
    start: StartingPosition,
    /// Read with enhanced fan-out as this stream consumer (registered if
    /// needed, never deregistered): records pushed over HTTP/2 with a
    /// 2 MB/s per shard of its own, instead of polling GetRecords
    #[cfg(feature = "aws")]
    #[arg(long, value_name = "NAME", requires = "kinesis", value_parser = parse_consumer)]
    consumer: Option<String>,
    /// Renew each fan-out subscription after this long (Kinesis ends them
    /// at 5 minutes; tests force short ones)
    #[cfg(feature = "aws")]
    #[arg(long, default_value = "290s", value_parser = zigzag_app::duration::positive, hide = true)]
    renew_subscriptions: Duration,
    /// Keep reading appended lines instead of stopping at the end of the files.
    #[arg(long)]
    follow: bool,
    /// Pipeline configuration (TOML; it starts from the full layout: every
    /// dimension and rollup, written every flush). Without one (and no
    /// layout flag), the table's layout, its newest version (`gather layout
    /// show`), with the default cadences; on a new table, the shipped
    /// layout: three projections on cadences of 10 s and 5 minutes
    /// (model/src/shipped.rs, SHIPPED_TOML)
    #[arg(long)]
    config: Option<PathBuf>,
    /// Name of the stream in checkpoints [default: the Kinesis stream name, or "default"]
    #[arg(long)]
    stream: Option<String>,
    /// Where records that fail to decode go, one JSON line each.
    #[arg(long, default_value = "dead-letters.jsonl")]
    dead_letters: PathBuf,
    /// Records per read.
    #[arg(long, default_value_t = 1000)]
    batch: usize,
    /// Serve Prometheus metrics (records, dead letters by reason, flushes,
    /// write requests, retries, lag) at http://ADDR/metrics, e.g. 127.0.0.1:9898,
    /// with /health (alive) and /ready (joined, lease renewed, flushes not
    /// paused; 503 with the reason otherwise). Give a loopback address unless
    /// something else must scrape it.
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<std::net::SocketAddr>,
    #[command(flatten)]
    log: LogArgs,
    #[command(flatten)]
    emf: EmfArgs,
    #[command(flatten)]
    worker: WorkerArgs,
    #[command(flatten)]
    pipeline: PipelineArgs,
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    create: CreateArgs,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Print the lease table of a stream: each shard's parents, owner,
    /// checkpoint, lag and state, and every lane (writer) of the table.
    Leases {
        /// The stream's name in the lease table (the Kinesis stream name;
        /// "default" for JSONL files)
        #[arg(long, default_value = "default")]
        stream: String,
    },
    /// Last resort when a dead worker's flush cannot be recovered because
    /// the stream no longer holds its records (the error "a dead worker's
    /// flush cannot be recovered"): commit it as it stands, losing the
    /// records its items were not yet written with, so its shards are read
    /// again. Prints what was lost. The lane must be dead: it is watched for
    /// the failover time first.
    AbandonFlush {
        /// The stream's name in the lease table.
        #[arg(long)]
        stream: String,
        /// The dead worker's lane (from the error, or `ingest leases`).
        #[arg(long)]
        lane: u32,
        /// How long without a heartbeat makes the lane dead (the workers'
        /// --failover).
        #[arg(long, default_value = "10s", value_parser = zigzag_app::duration::positive)]
        failover: Duration,
    },
    /// Ask a running ingest's listener (--metrics-addr) for /health or
    /// /ready: exit 0 on 200, 1 otherwise (a container health check; the
    /// image has no shell and no curl).
    Probe {
        /// The listener's address
        #[arg(long, default_value = "127.0.0.1:9898")]
        addr: std::net::SocketAddr,
        /// /health (the process runs) or /ready (it does its job)
        #[arg(long, default_value = "/health")]
        path: String,
        /// How long to wait for the answer
        #[arg(long, default_value = "3s", value_parser = zigzag_app::duration::positive)]
        timeout: Duration,
    },
}

/// `ingest abandon-flush`: a dead worker's flush whose records the stream
/// no longer holds, committed as it stands (its loss reported).
async fn abandon_flush(stream: &str, lane: u32, failover: Duration, store: &StoreArgs) -> Result<()> {
    let failover = failover.clamp(Duration::from_secs(1), Duration::from_secs(3600));
    let opts = zigzag_lease::LeaseOptions { failover, ..zigzag_lease::LeaseOptions::new(stream, "operator") };
    let coord = zigzag_lease::Coordinator::new(store.open(None).await?.leases, opts);
    // Expiry is observed: watch the lane for the failover time first.
    let first = coord.view(None).await.context("reading the lease table")?;
    let Some(seen) = first.lanes.iter().find(|l| l.lane == lane) else { anyhow::bail!("lane {lane} does not exist") };
    let Some(intent) = seen.in_flight().filter(|i| i.state == zigzag_lease::IntentState::Valid) else {
        anyhow::bail!("lane {lane} has no proven flush in flight: nothing to abandon")
    };
    eprintln!("watching lane {lane} (flush {}) for {:.0} s: it must be dead", intent.k, failover.as_secs_f64());
    tokio::time::sleep(failover + Duration::from_millis(200)).await;
    let view = coord.view(None).await.context("reading the lease table")?;
    if !view.expired.contains(&lane) {
        anyhow::bail!(
            "lane {lane} is alive (its owner beats): stop that worker first, or let a live worker recover it"
        );
    }
    match coord.abandon_flush(lane).await.context("abandoning the flush")? {
        None => println!("lane {lane}: nothing abandoned (another worker took it over first)"),
        Some(r) => {
            println!("lane {lane}: flush {} abandoned. Records its items had not been written with are lost:", r.k);
            for range in &r.ranges {
                println!("  shard {}: records after {} up to {}", range.shard, range.from, range.to);
            }
        }
    }
    Ok(())
}

/// `ingest leases`: the lease table, read once.
async fn print_leases(stream: &str, store: &StoreArgs) -> Result<()> {
    let table = store.open(None).await?.leases;
    let coord = zigzag_lease::Coordinator::new(table, zigzag_lease::LeaseOptions::new(stream, "ingest-leases"));
    let leases = coord.read_leases().await.context("reading the shard leases")?;
    let lanes = coord.read_lanes().await.context("reading the lanes")?;
    print!("{}", zigzag_lease::report::render(stream, &leases, &lanes));
    Ok(())
}

/// Kinesis's rule for consumer names.
#[cfg(feature = "aws")]
fn parse_consumer(s: &str) -> Result<String, String> {
    let ok = (1..=128).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
    if ok {
        Ok(s.to_string())
    } else {
        Err("a consumer name is 1 to 128 of a-z, A-Z, 0-9, '_', '.' and '-'".into())
    }
}

#[cfg(feature = "aws")]
fn parse_start(s: &str) -> Result<StartingPosition, String> {
    match s {
        "trim-horizon" => Ok(StartingPosition::TrimHorizon),
        "latest" => Ok(StartingPosition::Latest),
        t => chrono::DateTime::parse_from_rfc3339(t)
            .map(|d| StartingPosition::AtTimestamp(d.timestamp_millis()))
            .map_err(|e| format!("expected trim-horizon, latest or an RFC 3339 time: {e}")),
    }
}

/// Stopped (SIGINT, SIGTERM) while start-up waited out an outage: nothing
/// was read, nothing to hand back.
fn stopped(cli: &Cli) -> Result<()> {
    say(cli.log.log_format, "ingest: stopped before it started (it was waiting for the store)");
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let parsed = zigzag_app::settings::parse::<Cli>("ingest");
    let format = parsed.cli.log.log_format;
    logging::init(&parsed.cli.log);
    match run(parsed).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            logging::fatal(format, &e);
            ExitCode::FAILURE
        }
    }
}

async fn run(parsed: Parsed<Cli>) -> Result<()> {
    let cli = parsed.cli;
    let overrides = cli.pipeline.overrides(&parsed.settings);
    if parsed.print {
        return config::print_with(&parsed.settings, cli.config.as_deref(), Some(Base::Shipped), &overrides);
    }
    match &cli.command {
        Some(Command::Leases { stream }) => return print_leases(stream, &cli.store).await,
        Some(Command::AbandonFlush { stream, lane, failover }) => {
            return abandon_flush(stream, *lane, *failover, &cli.store).await
        }
        Some(Command::Probe { addr, path, timeout }) => {
            let answer = probes::probe(*addr, path, *timeout).await?;
            println!("{answer}");
            return Ok(());
        }
        None => {}
    }
    #[cfg(feature = "aws")]
    let kinesis = cli.kinesis.clone();
    #[cfg(not(feature = "aws"))]
    let kinesis: Option<String> = None;
    let stream = cli.stream.clone().or(kinesis.clone()).unwrap_or_else(|| "default".into());
    let telemetry = telemetry::install(cli.metrics_addr.is_some(), &cli.emf, &stream)?;
    telemetry.start();
    let watched = probes::Status::new();
    if let (Some(addr), Some(handle)) = (cli.metrics_addr, telemetry.prometheus.clone()) {
        let bound =
            probes::serve(addr, handle, watched.clone()).await.with_context(|| format!("serving metrics on {addr}"))?;
        say(cli.log.log_format, &format!("ingest: serving /metrics, /health and /ready on http://{bound}"));
    }
    let config = config::load(cli.config.as_deref(), Base::Shipped, &overrides)?;
    // Without a layout given, a writer writes the table's.
    let layout_given = cli.config.is_some() || overrides.iter().any(|o| o.is_layout());
    let take = if layout_given { config::Recorded::Scatter } else { config::Recorded::Layout };
    let source: Arc<dyn Source> = match &kinesis {
        #[cfg(feature = "aws")]
        Some(stream) => {
            let client = zigzag_kinesis::client(&cli.store.aws.options()).await;
            let polling = KinesisSource::new(client, stream, cli.start).with_retry(cli.worker.retry());
            match &cli.consumer {
                Some(name) => Arc::new(FanOutSource::new(polling, name).with_renew_after(cli.renew_subscriptions)),
                None => Arc::new(polling),
            }
        }
        _ => Arc::new(JsonlSource::new(cli.inputs.clone(), cli.follow)?),
    };
    // Stopping while start-up waits out an outage ends the wait.
    let stop = signals::stop_on_signal("flushing and checkpointing");
    let outage = zigzag_core::retry::Outage { max_pause: cli.worker.max_pause };
    let stores =
        startup::wait_out("opening the tables", outage, &stop, &watched, || cli.store.open(Some(&cli.create))).await;
    let stores = match stores {
        Err(_) if stop.is_cancelled() => return stopped(&cli),
        other => other?,
    };
    let config = startup::wait_out("reading the table's layout", outage, &stop, &watched, || {
        config::adopt_recorded(config.clone(), take, stores.aggregates.as_ref())
    })
    .await;
    let config = match config {
        Err(_) if stop.is_cancelled() => return stopped(&cli),
        other => other?,
    };
    let _purge = zigzag_app::purge::start(stores.aggregates.clone(), &config.retention).await;
    let opts = PipelineOptions {
        batch_size: cli.batch.max(1),
        ..PipelineOptions::new(config, stream, "", cli.dead_letters.clone())
    };
    let opts = cli.worker.apply(opts);
    tracing::info!(worker = %opts.worker, "starting");
    let started = std::time::Instant::now();
    let s = run_adopting(
        source,
        stores.aggregates.clone(),
        stores.leases.clone(),
        opts,
        stop,
        CancellationToken::new(),
        |p: &Arc<Pipeline>| watched.running(p.clone()),
    )
    .await;
    telemetry.flush();
    let s = s?;
    say(cli.log.log_format, &summary::pipeline("ingest", &s, started.elapsed(), &cli.dead_letters));
    for line in summary::capacity("ingest", &stores) {
        say(cli.log.log_format, &line);
    }
    Ok(())
}
