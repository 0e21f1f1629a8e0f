//! `ingest`: consume shards of click/impression records into Z-indexed
//! aggregates in the embedded store, exactly once, until the input ends or
//! SIGINT/SIGTERM (then flush and checkpoint before exit).

use anyhow::{Context, Result};
use clap::Parser;
use std::path::PathBuf;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use zigzag_ingest::decode::DecodeLimits;
use zigzag_ingest::source::JsonlSource;
use zigzag_ingest::{Pipeline, PipelineOptions};
use zigzag_model::Config;
use zigzag_sqlite::SqliteTable;

#[derive(Parser)]
#[command(name = "ingest", version, about = "Consume click/impression events into Z-indexed aggregates, exactly once")]
struct Cli {
    /// JSONL input files, one per shard (the file stem is the shard id; the
    /// line number is the sequence number).
    #[arg(long = "input", required = true, num_args = 1..)]
    inputs: Vec<PathBuf>,
    /// Keep reading appended lines instead of stopping at the end of the files.
    #[arg(long)]
    follow: bool,
    /// SQLite database file (aggregates and checkpoints).
    #[arg(long, default_value = zigzag_sqlite::DEFAULT_PATH)]
    db: PathBuf,
    /// Pipeline configuration (TOML); defaults apply without one.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Name of the stream (partition key of its checkpoints).
    #[arg(long, default_value = "default")]
    stream: String,
    /// Where records that fail to decode go, one JSON line each.
    #[arg(long, default_value = "dead-letters.jsonl")]
    dead_letters: PathBuf,
    /// Records per read.
    #[arg(long, default_value_t = 1000)]
    batch: usize,
    /// Serve Prometheus metrics (records, dead letters by reason, flushes,
    /// write requests, retries, lag) at http://ADDR/metrics, e.g. 127.0.0.1:9898.
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<std::net::SocketAddr>,
}

pub fn load_config(path: Option<&PathBuf>) -> Result<Config> {
    match path {
        None => Ok(Config::default()),
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            Config::from_toml(&text).with_context(|| format!("in {}", p.display()))
        }
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    if let Some(addr) = cli.metrics_addr {
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .with_http_listener(addr)
            .install()
            .with_context(|| format!("serving metrics on {addr}"))?;
    }
    let config = load_config(cli.config.as_ref())?;
    let source = Arc::new(JsonlSource::new(cli.inputs.clone(), cli.follow)?);
    let aggregates = Arc::new(SqliteTable::open(&cli.db).with_context(|| format!("opening {}", cli.db.display()))?);
    let checkpoints = Arc::new(SqliteTable::open_table(&cli.db, "checkpoints")?);
    let owner = format!("ingest-{}-{}", std::process::id(), chrono::Utc::now().timestamp_millis());
    let opts = PipelineOptions {
        config,
        stream: cli.stream.clone(),
        owner,
        limits: DecodeLimits::default(),
        batch_size: cli.batch.max(1),
        dead_letters: cli.dead_letters.clone(),
    };
    let pipeline = Arc::new(Pipeline::new(source, aggregates, checkpoints, opts)?);
    let stop = CancellationToken::new();
    tokio::spawn(stop_on_signal(stop.clone()));
    let started = std::time::Instant::now();
    let s = pipeline.run(stop).await?;
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "ingest: {} records ({} valid, {} dead-lettered to {}) from {} shards in {:.1}s ({:.0}/s); \
         {} flushes ({} recovered), {} items, {} write requests, {} replayed writes skipped, {} retries",
        s.records,
        s.valid,
        s.rejected,
        cli.dead_letters.display(),
        s.shards,
        secs,
        s.records as f64 / secs.max(1e-9),
        s.flushes,
        s.recovered,
        s.items,
        s.write_requests,
        s.skipped,
        s.retries
    );
    Ok(())
}

async fn stop_on_signal(stop: CancellationToken) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) else {
            return;
        };
        tokio::select! {
            _ = int.recv() => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
    tracing::info!("stopping: flushing and checkpointing");
    stop.cancel();
}
