//! `loadgen`: deterministic synthetic click/impression traffic with a
//! ground truth. Sinks: JSONL files (one per shard) or stdout, the ingest
//! pipeline in-process (straight into the embedded store), or a Kinesis
//! stream.

use anyhow::{bail, Context, Result};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use zigzag_core::schema::{parse_instant, TimeUnit};
use zigzag_ingest::{Pipeline, PipelineOptions};
use zigzag_kinesis::Producer;
use zigzag_loadgen::kinesis_sink::{produce, PartitionKey, SinkOptions};
use zigzag_loadgen::{truth, GenConfig, Generator, SyntheticSource};
use zigzag_model::Config;
use zigzag_sqlite::SqliteTable;

#[derive(Parser)]
#[command(name = "loadgen", version, about = "Deterministic synthetic click/impression traffic with a ground truth")]
struct Cli {
    /// Where the records go: `ingest` (in-process into the embedded store),
    /// `jsonl:DIR` (DIR/shard-NNN.jsonl, one file per shard), `jsonl:-`
    /// (stdout) or `kinesis:STREAM` (PutRecords; AWS default chain,
    /// AWS_ENDPOINT_URL[_KINESIS] for an emulator).
    #[arg(long, default_value = "ingest")]
    sink: String,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Records to generate (all shards together).
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    /// Generate for this long instead (needs --rate), e.g. 30s, 5m.
    #[arg(long)]
    duration: Option<String>,
    /// Target records per second; as fast as possible without.
    #[arg(long)]
    rate: Option<f64>,
    #[arg(long, default_value_t = 4)]
    shards: u32,
    /// Distinct referrers (Zipf-distributed popularity).
    #[arg(long, default_value_t = 10_000)]
    referrers: u32,
    #[arg(long, default_value_t = 1.1)]
    zipf: f64,
    #[arg(long, default_value_t = 40)]
    campaigns: u32,
    /// Clicks per impression.
    #[arg(long, default_value_t = 0.05)]
    ctr: f64,
    /// First event time (RFC 3339 or epoch ms).
    #[arg(long, default_value = "2026-11-20T00:00:00Z")]
    start: String,
    /// Event-time span the records cover, e.g. 1d, 6h.
    #[arg(long, default_value = "1d")]
    span: String,
    /// Event-time jitter, e.g. 2s.
    #[arg(long, default_value = "2s")]
    jitter: String,
    /// Fraction of events that arrive late.
    #[arg(long, default_value_t = 0.01)]
    late: f64,
    /// How late a late event can be, e.g. 1h.
    #[arg(long, default_value = "1h")]
    late_max: String,
    /// Fraction of malformed records.
    #[arg(long, default_value_t = 0.001)]
    malformed: f64,
    /// Ground-truth summary file (JSON).
    #[arg(long, default_value = "truth.json")]
    truth: PathBuf,
    /// In-process sink: SQLite file.
    #[arg(long, default_value = zigzag_sqlite::DEFAULT_PATH)]
    db: PathBuf,
    /// In-process sink: pipeline configuration (TOML).
    #[arg(long)]
    config: Option<PathBuf>,
    /// In-process sink: dead-letter file.
    #[arg(long, default_value = "dead-letters.jsonl")]
    dead_letters: PathBuf,
    /// Kinesis sink: the partition key of each record: referrer, campaign or random
    #[arg(long, default_value = "referrer")]
    partition_key: String,
    /// Kinesis sink: pack records into KPL aggregates of at most this many bytes (e.g. 51200)
    #[arg(long, value_name = "BYTES")]
    kpl: Option<usize>,
    /// Kinesis sink: create the stream with this many shards if it does not exist
    #[arg(long, value_name = "SHARDS")]
    create_stream: Option<i32>,
    /// Kinesis sink: AWS region [default: from the environment or profile]
    #[arg(long)]
    region: Option<String>,
    /// Kinesis sink: endpoint URL (overrides AWS_ENDPOINT_URL*)
    #[arg(long, value_name = "URL")]
    endpoint_url: Option<String>,
    /// In-process sink: stream name of the checkpoints.
    #[arg(long, default_value = "loadgen")]
    stream: String,
    #[command(flatten)]
    worker: zigzag_ingest::cli::WorkerArgs,
}

/// `30s`, `5m`, `2h`, `1d`, `250ms` → milliseconds.
fn parse_duration(text: &str) -> Result<i64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: i64 = num.parse().with_context(|| format!("duration {text:?}: expected a number then ms|s|m|h|d"))?;
    let ms = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => bail!("duration {text:?}: unit must be ms, s, m, h or d"),
    };
    n.checked_mul(ms).with_context(|| format!("duration {text:?} is too long"))
}

fn gen_config(cli: &Cli) -> Result<GenConfig> {
    let records = match (&cli.duration, cli.rate) {
        (None, _) => cli.records,
        (Some(d), Some(rate)) => ((parse_duration(d)? as f64 / 1000.0) * rate) as u64,
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
        span_ms: parse_duration(&cli.span)?.max(1),
        referrers: cli.referrers.max(1),
        zipf: cli.zipf,
        campaigns: cli.campaigns.max(1),
        ctr: cli.ctr,
        jitter_ms: parse_duration(&cli.jitter)?,
        late_fraction: cli.late,
        late_max_ms: parse_duration(&cli.late_max)?,
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

fn write_jsonl(gen: &Generator, target: &str) -> Result<()> {
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
                    gen.record(shard, seq, &mut buf);
                    out.write_all(&buf)?;
                    out.write_all(b"\n")?;
                    bar.inc(1);
                }
            }
        }
        out.flush()?;
    } else {
        let dir = PathBuf::from(target);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        for shard in 0..gen.config().shards {
            let path = dir.join(format!("{}.jsonl", Generator::shard_id(shard)));
            let file = std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
            let mut out = std::io::BufWriter::new(file);
            for seq in 1..=gen.shard_len(shard) {
                gen.record(shard, seq, &mut buf);
                out.write_all(&buf)?;
                out.write_all(b"\n")?;
                bar.inc(1);
            }
            out.flush()?;
        }
    }
    bar.finish_and_clear();
    Ok(())
}

async fn run_in_process(cli: &Cli, gen: Generator) -> Result<()> {
    let config = match &cli.config {
        None => Config::default(),
        Some(p) => Config::from_toml(&std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?)
            .with_context(|| format!("in {}", p.display()))?,
    };
    let total = gen.config().records;
    let source = Arc::new(SyntheticSource::new(gen, cli.rate));
    let produced = source.produced.clone();
    let aggregates = Arc::new(SqliteTable::open(&cli.db).with_context(|| format!("opening {}", cli.db.display()))?);
    let checkpoints = Arc::new(SqliteTable::open_table(&cli.db, "checkpoints")?);
    let opts = cli
        .worker
        .apply(PipelineOptions::new(config, cli.stream.clone(), "", cli.dead_letters.clone()))
        .map_err(anyhow::Error::msg)?;
    let pipeline = Arc::new(Pipeline::new(source, aggregates, checkpoints, opts)?);
    let stop = CancellationToken::new();
    let on_signal = stop.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            on_signal.cancel();
        }
    });
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
    let s = pipeline.run(stop).await?;
    ticker.abort();
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    let max_share = s.per_prefix.iter().max().copied().unwrap_or(0) as f64 / s.write_requests.max(1) as f64;
    eprintln!(
        "loadgen → ingest: {} records ({} valid, {} dead-lettered) in {:.1}s ({:.0}/s); {} flushes, {} items, \
         {} write requests ({:.3} per item), largest prefix share {:.3} (1/P = {:.3})",
        s.records,
        s.valid,
        s.rejected,
        secs,
        s.records as f64 / secs.max(1e-9),
        s.flushes,
        s.items,
        s.write_requests,
        s.write_requests as f64 / s.items.max(1) as f64,
        max_share,
        1.0 / s.per_prefix.len().max(1) as f64
    );
    Ok(())
}

async fn run_kinesis(cli: &Cli, gen: &Generator, stream: &str) -> Result<()> {
    if stream.is_empty() {
        bail!("--sink kinesis:STREAM needs a stream name");
    }
    let partition_key = PartitionKey::parse(&cli.partition_key)
        .with_context(|| format!("--partition-key {:?}: expected referrer, campaign or random", cli.partition_key))?;
    if let Some(r) = cli.rate {
        if !(r.is_finite() && r > 0.0) {
            bail!("--rate {r}: must be a positive number of records per second");
        }
    }
    let aws = zigzag_aws::AwsOptions {
        region: cli.region.clone(),
        endpoint_url: cli.endpoint_url.clone(),
        ..Default::default()
    };
    let client = zigzag_kinesis::client(&aws).await;
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
        "loadgen → kinesis:{stream}: {sent} records in {:.1}s ({:.0}/s) as {} Kinesis records, {} PutRecords calls;          {} records retried after failing (FailedRecordCount), {} calls retried (throttled/timeout/5xx)",
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
async fn main() -> Result<()> {
    let cli = Cli::parse();
    let gen = Generator::new(gen_config(&cli)?);
    let config = match &cli.config {
        Some(p) => Config::from_toml(&std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?)
            .with_context(|| format!("in {}", p.display()))?,
        None => Config::default(),
    };
    let truth = truth::compute_for(&gen, &config)?;
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
    match cli.sink.as_str() {
        "ingest" => run_in_process(&cli, gen).await,
        s if s.starts_with("jsonl:") => write_jsonl(&gen, &s["jsonl:".len()..]),
        s if s.starts_with("kinesis:") => run_kinesis(&cli, &gen, &s["kinesis:".len()..]).await,
        other => bail!("--sink {other:?}: expected ingest, jsonl:DIR, jsonl:- or kinesis:STREAM"),
    }
}
