//! `gather zbench`: the schema workbench's command line (the work is the
//! library's `zbench` module).

use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use zigzag_core::query::{AdaptiveConfig, AutoConfig, ElasticConfig, Strategy};
use zigzag_core::schema::{Encoding, Schema};
use zigzag_gather::zbench;

use zigzag_app::config::read;

#[derive(clap::Args)]
pub struct ZbenchArgs {
    /// Points to index: CSV with a header row of field names
    #[arg(long)]
    csv: PathBuf,
    /// Index schema (TOML: one `dimension` table per field)
    #[arg(long)]
    schema: PathBuf,
    /// Box queries (TOML: one `query` table per box)
    #[arg(long)]
    queries: PathBuf,
    /// Field of the single-attribute index to compare with [default: the
    /// first timestamp dimension, else the first dimension]
    #[arg(long)]
    order_by: Option<String>,
    /// Range budget of the precise strategy
    #[arg(long, default_value_t = 256)]
    budget: usize,
    /// Page size (Limit) of the page-jump strategy
    #[arg(long, default_value_t = 16)]
    page_limit: u32,
    /// Expected garbage items per request of the adaptive strategy
    #[arg(long, default_value_t = AdaptiveConfig::default().garbage_per_request)]
    garbage: f64,
    /// Print JSON instead of tables
    #[arg(long)]
    json: bool,
}

pub async fn zbench_cmd(args: ZbenchArgs) -> Result<()> {
    let schema = Schema::from_toml(&read(&args.schema, "schema")?)
        .with_context(|| format!("in the schema {}", args.schema.display()))?;
    let queries = zbench::parse_queries(&read(&args.queries, "query file")?)
        .with_context(|| format!("in {}", args.queries.display()))?;
    let order_by = match &args.order_by {
        Some(name) => match schema.index_of(name) {
            Some(d) => d,
            None => bail!("--order-by {name:?} is not a schema dimension"),
        },
        None => schema.dims().iter().position(|d| matches!(d.encoding, Encoding::Timestamp(_))).unwrap_or(0),
    };
    let file = std::fs::File::open(&args.csv).with_context(|| format!("opening {}", args.csv.display()))?;
    let data = zbench::load(&schema, order_by, std::io::BufReader::new(file))
        .await
        .with_context(|| format!("in {}", args.csv.display()))?;
    let strategies = vec![
        Strategy::Naive,
        Strategy::Precise { budget: args.budget },
        Strategy::PageJump { limit: args.page_limit },
        Strategy::Adaptive(AdaptiveConfig { garbage_per_request: args.garbage, ..Default::default() }),
        Strategy::Elastic(ElasticConfig::default()),
        Strategy::Auto(AutoConfig::default()),
        Strategy::Auto(AutoConfig::costed()),
    ];
    let report = zbench::run(&schema, &data, order_by, &queries, &strategies)
        .await
        .with_context(|| format!("in {}", args.queries.display()))?;
    if args.json {
        println!("{}", zbench::render_json(&report));
    } else {
        print!("{}", zbench::render_table(&report));
    }
    Ok(())
}
