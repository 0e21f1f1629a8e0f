//! The ingest hot path, run a fixed number of times on the benchmark's
//! events, for counting instructions rather than timing (this machine's
//! speed drifts; an instruction count does not):
//!
//! `cargo build --release -p zigzag-ingest --example hot_path`
//! `valgrind --tool=cachegrind --cache-sim=no target/release/examples/hot_path decode 5`
//!
//! Stages: `decode` (decode only) or `whole` (decode + downsample +
//! aggregate into a generation sized like the last). Prints the events
//! processed (divide cachegrind's `I refs` by it) and the best round's
//! events per second: on a machine whose neighbours slow it down by turns,
//! the fastest of many rounds is the steadiest measure of the code.

use zigzag_ingest::aggregate::{Aggregator, Generation};
use zigzag_ingest::decode::Decoder;
use zigzag_ingest::source::RecordBatch;
use zigzag_loadgen::{GenConfig, Generator};
use zigzag_model::{Config, KeyModel, Position};

const N: u64 = 20_000;

fn main() {
    let mut args = std::env::args().skip(1);
    let stage = args.next().unwrap_or_else(|| "whole".into());
    let rounds: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let gen = Generator::new(GenConfig { records: N, shards: 1, malformed_fraction: 0.0, ..Default::default() });
    let mut batch = RecordBatch::default();
    let mut buf = Vec::new();
    for seq in 1..=N {
        gen.record(0, seq, &mut buf);
        batch.push(Position::at(seq), &buf);
    }
    let config = Config::default();
    let keys = KeyModel::new(&config).expect("the shipped config");
    let agg = Aggregator::new(&keys, Decoder::shipped(), config.measure_set().expect("the shipped measures"));
    let mut events = 0u64;
    let mut best = std::time::Duration::MAX;
    for _ in 0..rounds {
        let started = std::time::Instant::now();
        match stage.as_str() {
            "decode" => {
                for (_, r) in batch.iter() {
                    events += agg.decoder().decode(r).is_ok() as u64;
                }
            }
            "whole" => {
                let g = Generation::with_capacity([(0, (N as usize, N as usize))].into_iter().collect());
                let counts = agg.add_batch(&g, 0, &batch, &mut Vec::new()).expect("no identity collisions");
                events += counts.valid;
            }
            other => {
                eprintln!("unknown stage {other}: decode or whole");
                std::process::exit(2);
            }
        }
        best = best.min(started.elapsed());
    }
    println!("{events} events; best round {:.2} M events/s", N as f64 / best.as_secs_f64() / 1e6);
}
