//! The ingest hot path, run a fixed number of times on generated events,
//! for counting instructions as well as timing (this machine's speed
//! drifts; an instruction count does not):
//!
//! `cargo build --release -p zigzag-app --example hot_path`
//! `target/release/examples/hot_path STAGE ROUNDS DATA [THREADS [EVENTS [SPAN]]]`
//! `valgrind --tool=cachegrind --cache-sim=no target/release/examples/hot_path decode 5`
//!
//! STAGE: `decode` (decode only), `whole` (decode + downsample +
//! aggregate into a generation sized like the last, in fresh memory) or
//! `steady` (the same in the maps of a flushed generation, as the
//! pipeline does, on THREADS shards of a thread each, default 1; times
//! only: the instructions of the untimed merge are counted too).
//! DATA: `shipped` (the click/impression generator, ~150-byte records),
//! `shuffled` (the same records with their keys in a random order per
//! record, and an unknown key added to one in four), `ad_server` (nested
//! JSON) or `access_log` (CSV), the last two from `examples/schemas/`.
//! EVENTS: records per round (and thread), default 20,000: maps of 20,000
//! partials fit a core's L2 cache, of 200,000 do not. SPAN: the seconds
//! they cover (default the generator's day, where nearly every event makes
//! a partial of its own).
//!
//! Prints the events processed (divide cachegrind's `I refs` by it) and
//! the best round's events per second (`steady`: and the median round's):
//! on a machine whose neighbours slow it down by turns, the fastest of many
//! rounds is the steadiest measure of the code.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::path::Path;
use zigzag_ingest::aggregate::{Aggregator, Generation};
use zigzag_ingest::decode::{DecodeLimits, Decoder, Values};
use zigzag_ingest::source::RecordBatch;
use zigzag_loadgen::declared::traffic_file::TrafficFile;
use zigzag_loadgen::{GenConfig, Generator, SchemaGenerator, Traffic};
use zigzag_model::{Config, KeyModel, Position};

#[path = "../benches/support/steady.rs"]
mod steady;

fn main() {
    let mut args = std::env::args().skip(1);
    let stage = args.next().unwrap_or_else(|| "whole".into());
    let rounds: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(5).max(1);
    let data = args.next().unwrap_or_else(|| "shipped".into());
    let threads: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1).max(1);
    let per_round: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(20_000).max(1);
    let span_s: Option<i64> = args.next().and_then(|a| a.parse().ok());
    let (config, batch) = records(&data, per_round, span_s);
    let n = batch.records.len();
    let keys = KeyModel::new(&config).expect("a valid config");
    let decoder = Decoder::new(&config, DecodeLimits::default()).expect("a valid schema");
    let agg = Aggregator::new(
        &zigzag_model::Projections::from(keys.clone()),
        decoder,
        config.measure_set().expect("valid measures"),
    );
    let mut refused = std::collections::BTreeMap::new();
    for (_, r) in batch.iter() {
        if let Err(e) = agg.decoder().decode(r) {
            *refused.entry(e.reason()).or_insert(0) += 1;
        }
    }
    if !refused.is_empty() {
        eprintln!("refused (header rows, or a generator/decoder disagreement): {refused:?}");
    }
    if stage == "steady" {
        let g = Generation::default();
        agg.add_batch(&g, 0, &batch, &mut Vec::new()).expect("no identity collisions");
        eprintln!("{n} records per round and thread make {} partials", g.len());
        // Sorted by duration: the first is the best.
        let rounds = steady::rounds(&agg, &keys, &batch, rounds, threads);
        let valid = n as u64 - refused.values().sum::<u64>();
        let rate = |d: std::time::Duration| (threads as u64 * valid) as f64 / d.as_secs_f64() / 1e6;
        println!(
            "{} events on {threads} thread(s); best round {:.2} M events/s, median {:.2} M",
            threads as u64 * valid * rounds.len() as u64,
            rate(rounds[0]),
            rate(rounds[rounds.len() / 2]),
        );
        return;
    }
    let mut events = 0u64;
    let mut best = std::time::Duration::MAX;
    for _ in 0..rounds {
        let started = std::time::Instant::now();
        match stage.as_str() {
            "decode" => {
                // As a batch decodes: into one reused buffer.
                let mut values = Values::new();
                for (_, r) in batch.iter() {
                    events += agg.decoder().decode_into(r, &mut values).is_ok() as u64;
                }
            }
            "whole" => {
                let g = Generation::with_capacity([(0, (n, n))].into_iter().collect());
                let counts = agg.add_batch(&g, 0, &batch, &mut Vec::new()).expect("no identity collisions");
                events += counts.valid;
            }
            other => {
                eprintln!("unknown stage {other}: decode, whole or steady");
                std::process::exit(2);
            }
        }
        best = best.min(started.elapsed());
    }
    println!("{events} events; best round {:.2} M events/s", n as f64 / best.as_secs_f64() / 1e6);
}

/// The configuration and `n` valid records of one kind of data, spread over
/// `span_s` seconds (the generator's day by default, where nearly every
/// event makes a partial of its own; a few seconds' events share theirs).
fn records(data: &str, n: u64, span_s: Option<i64>) -> (Config, RecordBatch) {
    let mut cfg = GenConfig { records: n, shards: 1, malformed_fraction: 0.0, ..Default::default() };
    if let Some(s) = span_s {
        cfg.span_ms = s * 1000;
    }
    let mut batch = RecordBatch::default();
    let mut buf = Vec::new();
    match data {
        "shipped" | "shuffled" => {
            let gen = Generator::new(cfg);
            let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
            for seq in 1..=n {
                gen.record(0, seq, &mut buf);
                if data == "shuffled" {
                    buf = shuffled(&buf, &mut rng);
                }
                batch.push(Position::at(seq), &buf);
            }
            (Config::default(), batch)
        }
        "ad_server" | "access_log" => {
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/schemas");
            let read = |file: String| std::fs::read_to_string(dir.join(&file)).expect("the shipped example");
            let config = Config::from_toml(&read(format!("{data}.toml"))).expect("a valid example");
            let traffic = TrafficFile::from_toml(&read(format!("{data}.traffic.toml"))).expect("a valid traffic file");
            let gen = SchemaGenerator::new(cfg, &config, &traffic).expect("the example's generator");
            for seq in 1..=n {
                gen.write(0, seq, &mut buf);
                batch.push(Position::at(seq), &buf);
            }
            (config, batch)
        }
        other => {
            eprintln!("unknown data {other}: shipped, shuffled, ad_server or access_log");
            std::process::exit(2);
        }
    }
}

/// The record with its top-level keys in a random order, and one in four
/// with a key no path names.
fn shuffled(record: &[u8], rng: &mut rand::rngs::SmallRng) -> Vec<u8> {
    let object: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(record).expect("the generator writes JSON objects");
    let mut members: Vec<String> =
        object.iter().map(|(k, v)| format!("{}:{}", serde_json::Value::from(k.as_str()), v)).collect();
    if rng.gen_bool(0.25) {
        members.push(r#""session":{"id":"s-1","pages":[1,2,3]}"#.to_string());
    }
    members.shuffle(rng);
    format!("{{{}}}", members.join(",")).into_bytes()
}
