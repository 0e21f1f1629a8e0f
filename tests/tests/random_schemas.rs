//! Random declared schemas, end to end: for each seed, a schema (JSON with
//! nested paths and array indexes, or CSV; every field type and time
//! format; defaults and optional fields; string, hash, integer and enum
//! dimensions, some only stored; count with and without `where`, sum, min,
//! max, distinct) and random field traffic for it; loadgen's declared-schema
//! generator draws the events and the malformed mix. Every record must
//! decode to the values it was drawn with (or be refused when malformed);
//! the records go through the real pipeline into SQLite, and `gather check`
//! must match the brute-force truth built from the drawn values
//! (`Truth::add_event`), never from decoding, in every rollup, day and
//! dimension group; every broken record must be dead-lettered.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use zigzag_core::table::SortedTable;
use zigzag_gather::check;
use zigzag_gather::execute::ExecOptions;
use zigzag_ingest::decode::{DecodeLimits, Decoder};
use zigzag_ingest::{Pipeline, PipelineOptions};
use zigzag_loadgen::declared::traffic_file::TrafficFile;
use zigzag_loadgen::{truth, Drawn, GenConfig, SchemaGenerator, SyntheticSource, Traffic};
use zigzag_model::{Config, KeyModel};
use zigzag_sqlite::SqliteTable;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Str,
    Enum,
    Int,
    Dec(u32),
    Bool,
}

#[derive(Debug, Clone)]
struct Field {
    name: String,
    kind: Kind,
    /// JSON path tokens (CSV: unused).
    path: Vec<String>,
    /// Absent in some events (not a dimension).
    optional: bool,
    /// A declared default (strings only), taken when absent.
    default: Option<&'static str>,
}

const ENUM: [&str; 3] = ["view", "click", "buy"];
const TIME_FORMATS: [&str; 8] =
    ["epoch_ms", "epoch_s", "epoch_us", "epoch_ns", "rfc3339", "auto", "%Y-%m-%d %H:%M:%S%.3f %z", "%d/%m/%Y %H:%M"];

struct Schema {
    toml: String,
    /// The field traffic file: random skew, weights and absence.
    traffic: String,
}

fn schema(rng: &mut ChaCha8Rng) -> Schema {
    let csv = rng.gen_bool(0.3);
    let time_format = TIME_FORMATS[rng.gen_range(0..TIME_FORMATS.len())];
    let n = rng.gen_range(3..=6);
    let mut fields = Vec::new();
    for i in 0..n {
        let kind = match (i, rng.gen_range(0..6)) {
            (0, _) => Kind::Enum, // a field for `where`
            (1, _) => Kind::Int,  // an integer dimension
            (_, 0) => Kind::Str,
            (_, 1) => Kind::Enum,
            (_, 2) => Kind::Int,
            (_, 3) | (_, 4) => Kind::Dec(rng.gen_range(0..=4)),
            _ => Kind::Bool,
        };
        let depth = rng.gen_range(0..3);
        let mut path: Vec<String> = (0..depth).map(|d| format!("g{}", rng.gen_range(0..2) + d * 2)).collect();
        if depth > 0 && rng.gen_bool(0.3) {
            path.push(rng.gen_range(0..3).to_string()); // an array index
        }
        path.push(format!("f{i}"));
        let optional = i >= 2 && rng.gen_bool(0.3);
        let default = (optional && kind == Kind::Str && rng.gen_bool(0.5)).then_some("dflt");
        fields.push(Field { name: format!("f{i}"), kind, path, optional, default });
    }
    let mut t = String::from("rollups = [\"minute\", \"hour\", \"day\"]\n[input]\ntime = \"at\"\n");
    if csv {
        let cols: Vec<String> =
            std::iter::once("at".to_string()).chain(fields.iter().map(|f| f.name.clone())).collect();
        t += &format!("format = \"csv\"\ncolumns = {cols:?}\n");
    }
    t += &format!("[[field]]\nname = \"at\"\ntype = \"timestamp\"\nformat = \"{time_format}\"\n");
    if !csv {
        t += "path = \"/meta/at\"\n";
    }
    for f in &fields {
        t += &format!("[[field]]\nname = \"{}\"\n", f.name);
        if !csv {
            t += &format!("path = \"/{}\"\n", f.path.join("/"));
        }
        t += match f.kind {
            Kind::Str => "type = \"string\"\nmax_bytes = 32\n".to_string(),
            Kind::Enum => format!("type = \"string\"\nvalues = {ENUM:?}\n"),
            Kind::Int => "type = \"integer\"\nmin = -1000\nmax = 1000\n".to_string(),
            Kind::Dec(scale) => format!("type = \"decimal\"\nscale = {scale}\n"),
            Kind::Bool => "type = \"boolean\"\n".to_string(),
        }
        .as_str();
        match (f.optional, f.default) {
            (_, Some(d)) => t += &format!("default = \"{d}\"\n"),
            (true, None) => t += "optional = true\n",
            _ => {}
        }
    }
    // Dimensions: f0 as enum, f1 as integer, and one more if there is a
    // required or defaulted field for it.
    t += "[[dimension]]\nfield = \"f0\"\ntype = \"enum\"\n";
    t += &format!("[[dimension]]\nfield = \"f1\"\ntype = \"integer\"\nindexed = {}\n", rng.gen_bool(0.7));
    if let Some(f) = fields[2..].iter().find(|f| !f.optional || f.default.is_some()) {
        let (ty, width) = match f.kind {
            Kind::Str | Kind::Enum if rng.gen_bool(0.5) => ("string", format!("bytes = {}", rng.gen_range(1..=6))),
            _ => ("hash", format!("bits = {}", rng.gen_range(4..=20))),
        };
        t += &format!(
            "[[dimension]]\nfield = \"{}\"\ntype = \"{ty}\"\n{width}\nindexed = {}\n",
            f.name,
            rng.gen_bool(0.7)
        );
    }
    t += "[[measure]]\nname = \"events\"\ntype = \"count\"\n";
    t += "[[measure]]\nname = \"clicks\"\ntype = \"count\"\nwhere = \"f0 = click\"\n";
    for f in fields.iter().filter(|f| matches!(f.kind, Kind::Int | Kind::Dec(_))) {
        for kind in ["sum", "min", "max"] {
            t += &format!("[[measure]]\nname = \"{kind}_{}\"\ntype = \"{kind}\"\nfield = \"{}\"\n", f.name, f.name);
        }
        // Quantiles: merged sketches must equal the brute-force one byte
        // for byte, at any accuracy, capped or not.
        let accuracy = [0.01, 0.02, 0.05][rng.gen_range(0..3)];
        let bins = if rng.gen_bool(0.3) { format!("bins = {}\n", rng.gen_range(16..=40)) } else { String::new() };
        t += &format!(
            "[[measure]]\nname = \"q_{}\"\ntype = \"quantile\"\nfield = \"{}\"\naccuracy = {accuracy}\n{bins}",
            f.name, f.name
        );
    }
    let distinct = &fields[rng.gen_range(0..fields.len())].name;
    t += &format!(
        "[[measure]]\nname = \"distinct_{distinct}\"\ntype = \"distinct\"\nfield = \"{distinct}\"\nprecision = 8\n"
    );
    t += "[flush]\ninterval_ms = 50\nmax_keys = 300\n";
    let mut traffic = String::new();
    for f in &fields {
        traffic += &format!("[field.{}]\n", f.name);
        if f.optional || f.default.is_some() {
            traffic += &format!("absent = {}\n", rng.gen_range(0..=5) as f64 / 10.0);
        }
        traffic += &match f.kind {
            Kind::Str => {
                format!("cardinality = {}\nzipf = {}\n", rng.gen_range(1..=300), rng.gen_range(0..=15) as f64 / 10.0)
            }
            Kind::Enum => {
                format!("weights = [{}, {}, {}]\n", rng.gen_range(1..9), rng.gen_range(0..9), rng.gen_range(1..9))
            }
            Kind::Int => match rng.gen_range(0..4) {
                0 => "distribution = \"normal\"\nmean = 10\nsd = 300\n".to_string(),
                1 => "distribution = \"bimodal\"\nmodes = [-200, 700]\nsd = 30\nzeros = 0.1\n".to_string(),
                2 => "distribution = \"lognormal\"\nmean = 50\nsigma = 1.5\nmin = 1\nnegative = 0.2\n".to_string(),
                _ => String::new(),
            },
            Kind::Dec(_) => match rng.gen_range(0..3) {
                0 => "distribution = \"exponential\"\nmin = -5\nmean = 40\n".to_string(),
                1 => "distribution = \"pareto\"\nalpha = 1.1\nmin = 1\nmax = 100000\n".to_string(),
                _ => String::new(),
            },
            Kind::Bool => format!("p_true = {}\n", rng.gen_range(0..=10) as f64 / 10.0),
        };
    }
    Schema { toml: t, traffic }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_schemas_and_events_match_brute_force_through_the_pipeline() {
    for seed in 0..24u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let s = schema(&mut rng);
        let config = Config::from_toml(&s.toml).unwrap_or_else(|e| panic!("seed {seed}: {e}\n{}", s.toml));
        let traffic = TrafficFile::from_toml(&s.traffic).unwrap();
        let cfg = GenConfig {
            seed,
            shards: 2,
            records: 600,
            span_ms: 2 * 86_400_000,
            malformed_fraction: 0.05,
            ..Default::default()
        };
        let gen = SchemaGenerator::new(cfg, &config, &traffic)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}\n{}\n{}", s.toml, s.traffic));

        // Every record reads as drawn, or is refused when it was broken.
        let decoder = Decoder::new(&config, DecodeLimits::default()).unwrap();
        let mut buf = Vec::new();
        for shard in 0..2 {
            for seq in 1..=gen.shard_len(shard) {
                match (gen.draw(shard, seq, &mut buf), decoder.decode(&buf)) {
                    (Drawn::Valid(ev), Ok(d)) => assert_eq!(d.values.to_vec(), ev.values, "seed {seed}"),
                    (Drawn::Malformed(_), Err(_)) => {}
                    (drawn, decoded) => {
                        panic!(
                            "seed {seed}: {drawn:?} read as {decoded:?}: {}\n{}",
                            String::from_utf8_lossy(&buf),
                            s.toml
                        )
                    }
                }
            }
        }

        let truth = truth::compute_for(&gen, &config).unwrap();
        assert!(truth.malformed > 0 && truth.valid > 500, "seed {seed}: {} malformed", truth.malformed);
        let keys = KeyModel::new(&config).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("z.db");
        let aggregates: Arc<dyn SortedTable> = Arc::new(SqliteTable::open(&db).unwrap());
        let leases: Arc<dyn SortedTable> = Arc::new(SqliteTable::open_table(&db, "checkpoints").unwrap());
        let source = Arc::new(SyntheticSource::new(gen, None));
        let opts = PipelineOptions {
            batch_size: 50,
            ..PipelineOptions::new(config.clone(), "s", "w", dir.path().join("dead.jsonl"))
        };
        let pipeline = Arc::new(Pipeline::new(source, aggregates.clone(), leases, opts).unwrap());
        let summary = pipeline.run(CancellationToken::new()).await.unwrap();
        assert_eq!(summary.rejected, truth.malformed, "seed {seed}: every broken record dead-lettered\n{}", s.toml);
        let report = check::check(
            &*aggregates,
            &zigzag_model::Projections::from(keys.clone()),
            &truth,
            0,
            &ExecOptions::default(),
        )
        .await
        .unwrap();
        assert_eq!(report.mismatches(), 0, "seed {seed}:\n{}\n{}\n{}", s.toml, s.traffic, check::render(&report));
        let dims = truth.by.len();
        assert!(dims >= 2, "seed {seed}: groups checked for every dimension");
    }
}
