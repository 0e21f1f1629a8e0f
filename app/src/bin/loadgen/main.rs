//! `loadgen`: deterministic synthetic traffic with a ground truth: the
//! shipped click/impression events, or any declared schema's (`--config`,
//! with `--fields` for how each field is drawn). Sinks: files (one per
//! shard) or stdout, the ingest pipeline in-process (straight into the
//! embedded store), or a Kinesis stream.

use anyhow::{bail, Context, Result};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use zigzag_app::config::{self, overrides::PipelineArgs, read, Base};
use zigzag_app::duration::{any, millis, positive};
use zigzag_app::store::StoreArgs;
use zigzag_app::worker::WorkerArgs;
use zigzag_app::{signals, summary};
use zigzag_core::schema::{parse_instant, TimeUnit};
use zigzag_ingest::{run_adopting, PipelineOptions};
#[cfg(feature = "aws")]
use zigzag_kinesis::Producer;
use zigzag_loadgen::declared::traffic_file::TrafficFile;
#[cfg(feature = "aws")]
use zigzag_loadgen::kinesis_sink::{produce, PartitionKey, SinkOptions};
use zigzag_loadgen::{truth, write_shard_files, GenConfig, Generator, SchemaGenerator, SyntheticSource, Traffic};
use zigzag_model::Config;

#[derive(Parser)]
#[command(
    name = "loadgen",
    version = zigzag_app::VERSION,
    about = "Deterministic synthetic traffic for any declared schema, with a ground truth"
)]
struct Cli {
    /// Where the records go: `ingest` (in-process into the embedded store),
    /// `files:DIR` (DIR/shard-NNN.jsonl or .csv, one file per shard; also
    /// `jsonl:DIR`), `files:-` (stdout) or `kinesis:STREAM` (PutRecords; AWS
    /// default chain, AWS_ENDPOINT_URL or AWS_ENDPOINT_URL_KINESIS for an emulator).
    #[arg(long, default_value = "ingest")]
    sink: String,
    /// The pipeline configuration (TOML). Its declared schema is what the
    /// records follow; without one, the shipped click/impression events,
    /// written (--sink ingest) in the shipped layout (model/src/config.rs)
    #[arg(long)]
    config: Option<PathBuf>,
    /// How each declared field's values are drawn (TOML, `[field.NAME]`
    /// tables: cardinality, zipf, weights, distribution, min, max, mean, sd,
    /// p_true, absent). Every field has defaults by its type.
    #[arg(long, value_name = "FILE")]
    fields: Option<PathBuf>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Records to generate (all shards together).
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    /// Generate for this long instead (needs --rate), e.g. 30s, 5m.
    #[arg(long, value_parser = positive)]
    duration: Option<Duration>,
    /// Target records per second; as fast as possible without.
    #[arg(long)]
    rate: Option<f64>,
    #[arg(long, default_value_t = 4)]
    shards: u32,
    /// Shipped events: distinct referrers (Zipf-distributed popularity).
    #[arg(long, default_value_t = 10_000)]
    referrers: u32,
    /// Shipped events: the referrers' Zipf exponent.
    #[arg(long, default_value_t = 1.1)]
    zipf: f64,
    /// Shipped events: distinct campaigns.
    #[arg(long, default_value_t = 40)]
    campaigns: u32,
    /// Shipped events: clicks per impression.
    #[arg(long, default_value_t = 0.05)]
    ctr: f64,
    /// First event time (RFC 3339 or epoch ms).
    #[arg(long, default_value = "2026-11-20T00:00:00Z")]
    start: String,
    /// Event-time span the records cover, e.g. 1d, 6h.
    #[arg(long, default_value = "1d", value_parser = positive)]
    span: Duration,
    /// Event-time jitter, e.g. 2s.
    #[arg(long, default_value = "2s", value_parser = any)]
    jitter: Duration,
    /// Fraction of events that arrive late.
    #[arg(long, default_value_t = 0.01)]
    late: f64,
    /// How late a late event can be, e.g. 1h.
    #[arg(long, default_value = "1h", value_parser = any)]
    late_max: Duration,
    /// Fraction of malformed records.
    #[arg(long, default_value_t = 0.001)]
    malformed: f64,
    /// Ground-truth summary file (JSON).
    #[arg(long, default_value = "truth.json")]
    truth: PathBuf,
    /// In-process sink: dead-letter file.
    #[arg(long, default_value = "dead-letters.jsonl")]
    dead_letters: PathBuf,
    #[cfg(feature = "aws")]
    /// Kinesis sink: the partition key of each record: a field's value (by
    /// its name) or random [default: referrer if the schema has it, else random]
    #[arg(long)]
    partition_key: Option<String>,
    #[cfg(feature = "aws")]
    /// Kinesis sink: pack records into KPL aggregates of at most this many bytes (e.g. 51200)
    #[arg(long, value_name = "BYTES")]
    kpl: Option<usize>,
    #[cfg(feature = "aws")]
    /// Kinesis sink: create the stream with this many shards if it does not exist
    #[arg(long, value_name = "SHARDS")]
    create_stream: Option<i32>,
    /// In-process sink: stream name of the checkpoints.
    #[arg(long, default_value = "loadgen")]
    stream: String,
    /// In-process sink: the store written (--db, or --dynamodb), and the
    /// AWS options of the Kinesis sink
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    worker: WorkerArgs,
    #[command(flatten)]
    pipeline: PipelineArgs,
}

fn gen_config(cli: &Cli) -> Result<GenConfig> {
    let records = match (&cli.duration, cli.rate) {
        (None, _) => cli.records,
        (Some(d), Some(rate)) => (d.as_secs_f64() * rate) as u64,
        (Some(_), None) => bail!("--duration needs --rate (records per second)"),
    };
    if cli.shards == 0 || records == 0 {
        bail!("--shards and the record count must be positive");
    }
    for (name, f) in [("--late", cli.late), ("--malformed", cli.malformed)] {
        if !(0.0..=1.0).contains(&f) {
            bail!("{name} = {f} must be a fraction in 0..=1");
        }
    }
    if !(cli.ctr.is_finite() && cli.ctr >= 0.0) {
        bail!("--ctr = {} must be a non-negative number (clicks per impression)", cli.ctr);
    }
    Ok(GenConfig {
        seed: cli.seed,
        shards: cli.shards,
        records,
        start_ms: parse_instant(&cli.start, TimeUnit::Millisecond)
            .with_context(|| format!("--start {:?} is neither RFC 3339 nor epoch ms", cli.start))?,
        span_ms: millis(cli.span).max(1),
        referrers: cli.referrers.max(1),
        zipf: cli.zipf,
        campaigns: cli.campaigns.max(1),
        ctr: cli.ctr,
        jitter_ms: millis(cli.jitter),
        late_fraction: cli.late,
        late_max_ms: millis(cli.late_max),
        malformed_fraction: cli.malformed,
    })
}

fn progress_bar(total: u64) -> ProgressBar {
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {human_pos}/{human_len} records {per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

fn write_files(gen: &dyn Traffic, target: &str) -> Result<()> {
    match write_records(gen, target) {
        // A reader that stops early (`| head`) is not an error.
        Err(e) if e.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) => {
            Ok(())
        }
        other => other,
    }
}

fn write_records(gen: &dyn Traffic, target: &str) -> Result<()> {
    let total = gen.config().records;
    let bar = progress_bar(total);
    let mut buf = Vec::with_capacity(256);
    if target == "-" {
        let stdout = std::io::stdout();
        let mut out = std::io::BufWriter::new(stdout.lock());
        let longest = (0..gen.config().shards).map(|s| gen.shard_len(s)).max().unwrap_or(0);
        for seq in 1..=longest {
            for shard in 0..gen.config().shards {
                if seq <= gen.shard_len(shard) {
                    gen.write(shard, seq, &mut buf);
                    out.write_all(&buf)?;
                    out.write_all(b"\n")?;
                    bar.inc(1);
                }
            }
        }
        out.flush()?;
    } else {
        let dir = PathBuf::from(target);
        write_shard_files(gen, &dir, || bar.inc(1))
            .with_context(|| format!("writing shard files to {}", dir.display()))?;
    }
    bar.finish_and_clear();
    Ok(())
}

async fn run_in_process(cli: &Cli, config: Config, gen: Arc<dyn Traffic>) -> Result<()> {
    let total = gen.config().records;
    let source = Arc::new(SyntheticSource::shared(gen, cli.rate));
    let produced = source.produced.clone();
    let stores = cli.store.open(Some(&Default::default())).await?;
    let config =
        zigzag_app::config::adopt_recorded(config, zigzag_app::config::Recorded::Scatter, stores.aggregates.as_ref())
            .await?;
    let opts = cli.worker.apply(PipelineOptions::new(config, cli.stream.clone(), "", cli.dead_letters.clone()));
    let stop = signals::stop_on_signal("flushing and checkpointing");
    let bar = progress_bar(total);
    let ticker = {
        let bar = bar.clone();
        tokio::spawn(async move {
            loop {
                bar.set_position(produced.load(Ordering::Relaxed));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let started = Instant::now();
    let (aggregates, leases) = (stores.aggregates.clone(), stores.leases.clone());
    let s = run_adopting(source, aggregates, leases, opts, stop, CancellationToken::new(), |_| {}).await?;
    ticker.abort();
    bar.finish_and_clear();
    eprintln!("{}", summary::pipeline("loadgen → ingest", &s, started.elapsed(), &cli.dead_letters));
    for line in summary::capacity("loadgen → ingest", &stores) {
        eprintln!("{line}");
    }
    Ok(())
}

#[cfg(feature = "aws")]
async fn run_kinesis(cli: &Cli, gen: &dyn Traffic, stream: &str) -> Result<()> {
    if stream.is_empty() {
        bail!("--sink kinesis:STREAM needs a stream name");
    }
    let has_referrer = gen.fields().iter().any(|f| f.name == "referrer");
    let key = cli.partition_key.as_deref().unwrap_or(if has_referrer { "referrer" } else { "random" });
    let partition_key = PartitionKey::parse(key, gen.fields()).with_context(|| {
        let names: Vec<&str> = gen.fields().iter().map(|f| f.name.as_str()).collect();
        format!("--partition-key {key:?}: expected random or a field ({})", names.join(", "))
    })?;
    if let Some(r) = cli.rate {
        if !(r.is_finite() && r > 0.0) {
            bail!("--rate {r}: must be a positive number of records per second");
        }
    }
    let client = zigzag_kinesis::client(&cli.store.aws.options()).await;
    if let Some(shards) = cli.create_stream {
        zigzag_kinesis::stream::ensure_stream(&client, stream, shards.max(1)).await?;
    }
    let mut producer = Producer::new(client, stream);
    let opts = SinkOptions { partition_key, rate: cli.rate, kpl_max_bytes: cli.kpl };
    let bar = progress_bar(gen.config().records);
    let started = Instant::now();
    let sent = produce(gen, &mut producer, &opts, |n| bar.set_position(n))
        .await
        .with_context(|| format!("putting records into the Kinesis stream {stream}"))?;
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    let st = &producer.stats;
    eprintln!(
        "loadgen → kinesis:{stream}: {sent} records in {:.1}s ({:.0}/s) as {} Kinesis records, {} PutRecords calls; {} records retried after failing (FailedRecordCount), {} calls retried (throttled/timeout/5xx)",
        secs,
        sent as f64 / secs.max(1e-9),
        st.records.load(Ordering::Relaxed),
        st.calls.load(Ordering::Relaxed),
        st.failed_records.load(Ordering::Relaxed),
        st.failed_calls.load(Ordering::Relaxed),
    );
    Ok(())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    zigzag_app::logging::exit(run().await)
}

async fn run() -> Result<()> {
    let parsed = zigzag_app::settings::parse::<Cli>("loadgen");
    let cli = parsed.cli;
    let overrides = cli.pipeline.overrides(&parsed.settings);
    if parsed.print {
        return config::print_with(&parsed.settings, cli.config.as_deref(), Some(Base::Shipped), &overrides);
    }
    let gen_config = gen_config(&cli)?;
    let config = config::load(cli.config.as_deref(), Base::Shipped, &overrides)?;
    // The shipped generator writes the shipped fields; any other schema,
    // or a field traffic file, takes the declared schema's generator.
    let gen: Arc<dyn Traffic> = if cli.fields.is_none() && config.fields == Config::default().fields {
        Arc::new(Generator::new(gen_config))
    } else {
        let traffic = match &cli.fields {
            Some(p) => TrafficFile::from_toml(&read(p, "field traffic file")?)
                .with_context(|| format!("in {}", p.display()))?,
            None => TrafficFile::default(),
        };
        Arc::new(SchemaGenerator::new(gen_config, &config, &traffic)?)
    };
    let truth = truth::compute_for(&*gen, &config)?;
    let text = serde_json::to_string_pretty(&truth)?;
    std::fs::write(&cli.truth, text).with_context(|| format!("writing {}", cli.truth.display()))?;
    eprintln!(
        "loadgen: seed {} → {} records ({} valid, {} malformed, {} late) in {} shards; ground truth in {}",
        truth.seed,
        truth.records,
        truth.valid,
        truth.malformed,
        truth.late,
        gen.config().shards,
        cli.truth.display()
    );
    let sink = cli.sink.clone();
    match sink.as_str() {
        "ingest" => run_in_process(&cli, config, gen).await,
        s if s.starts_with("files:") => write_files(&*gen, &s["files:".len()..]),
        s if s.starts_with("jsonl:") => write_files(&*gen, &s["jsonl:".len()..]),
        #[cfg(feature = "aws")]
        s if s.starts_with("kinesis:") => run_kinesis(&cli, &*gen, &s["kinesis:".len()..]).await,
        #[cfg(not(feature = "aws"))]
        s if s.starts_with("kinesis:") => bail!("--sink {s}: this loadgen was built without AWS (feature aws)"),
        other => bail!("--sink {other:?}: expected ingest, files:DIR, files:-, or kinesis:STREAM"),
    }
}
