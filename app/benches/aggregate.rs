//! Ingest hot path, in-process: decode + downsample + aggregate of
//! synthetic ~150-byte JSON events (BRIEF target: >= 3 M events/s/core),
//! and its parts, to show where the time goes.
//!
//! `cargo bench -p zigzag-app --bench aggregate`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use zigzag_ingest::aggregate::{Aggregator, Generation};
use zigzag_ingest::decode::{DecodeLimits, Decoder};
use zigzag_ingest::source::RecordBatch;
use zigzag_loadgen::{GenConfig, Generator};
use zigzag_model::{Config, KeyModel, Position};

mod support {
    pub mod steady;
}
use support::steady;

const N: u64 = 20_000;

fn batch() -> RecordBatch {
    batch_from(GenConfig { records: N, shards: 1, malformed_fraction: 0.0, ..Default::default() })
}

fn batch_from(cfg: GenConfig) -> RecordBatch {
    let gen = Generator::new(cfg);
    let mut b = RecordBatch::default();
    let mut buf = Vec::new();
    for seq in 1..=N {
        gen.record(0, seq, &mut buf);
        b.push(Position::at(seq), &buf);
    }
    b
}

fn bench(c: &mut Criterion) {
    let b = batch();
    let bytes: usize = b.records.iter().map(|r| r.len as usize).sum();
    eprintln!("mean record: {} bytes", bytes / b.records.len());
    let limits = DecodeLimits::default();
    let keys = KeyModel::new(&Config::default()).unwrap();
    let aggregator = |keys: &KeyModel, cfg: &Config| {
        Aggregator::new(
            &zigzag_model::Projections::from(keys.clone()),
            Decoder::new(cfg, limits).unwrap(),
            cfg.measure_set().unwrap(),
        )
    };
    let agg = aggregator(&keys, &Config::default());
    let decoder = Decoder::shipped();
    let mut g = c.benchmark_group("ingest");
    g.throughput(Throughput::Elements(N));
    g.bench_function("decode", |bn| {
        bn.iter(|| {
            let mut ok = 0u32;
            for (_, r) in b.iter() {
                ok += decoder.decode(r).is_ok() as u32;
            }
            ok
        })
    });
    let events: Vec<_> = b.iter().map(|(_, r)| decoder.decode(r).unwrap()).collect();
    for rollups in [1usize, 3] {
        let mut cfg = Config::default();
        cfg.rollups.truncate(rollups);
        let agg_n = aggregator(&KeyModel::new(&cfg).unwrap(), &cfg);
        g.bench_with_input(BenchmarkId::new("aggregate_decoded", format!("{rollups}_rollups")), &events, |bn, evs| {
            bn.iter_batched_ref(
                Generation::default,
                |gen| agg_n.add_events(gen, 0, evs).unwrap(),
                criterion::BatchSize::LargeInput,
            )
        });
    }
    g.bench_function("decode_downsample_aggregate", |bn| {
        bn.iter_batched_ref(
            Generation::default,
            |gen| {
                let mut rejected = Vec::new();
                agg.add_batch(gen, 0, &b, &mut rejected).unwrap()
            },
            criterion::BatchSize::LargeInput,
        )
    });
    // The steady state: the pipeline sizes each generation like the last,
    // so its maps do not rehash as they fill.
    g.bench_function("decode_downsample_aggregate_sized", |bn| {
        bn.iter_batched_ref(
            || Generation::with_capacity([(0, (N as usize, N as usize))].into_iter().collect()),
            |gen| {
                let mut rejected = Vec::new();
                agg.add_batch(gen, 0, &b, &mut rejected).unwrap()
            },
            criterion::BatchSize::LargeInput,
        )
    });
    // The same in the maps of generations flushed before, as the pipeline
    // fills them: the next generation is made at the swap, then the
    // swapped one is merged (the flush's work, not timed here).
    g.bench_function("decode_downsample_aggregate_recycled", |bn| {
        bn.iter_custom(|iters| steady::rounds(&agg, &keys, &b, iters, 1).iter().sum())
    });
    // Two threads into one generation, as two shard tasks do: how close to
    // linear the shared DashMap lets the hot path scale on 2 cores.
    g.throughput(Throughput::Elements(2 * N));
    let b2 = batch_from(GenConfig { seed: 2, records: N, shards: 1, malformed_fraction: 0.0, ..Default::default() });
    for (name, keys) in
        [("decode_downsample_aggregate_2_threads", 0), ("decode_downsample_aggregate_2_threads_sized", 2 * N)]
    {
        g.bench_function(name, |bn| {
            bn.iter_batched_ref(
                || Generation::with_capacity((0..2).map(|s| (s, (keys as usize, keys as usize))).collect()),
                |gen| {
                    std::thread::scope(|s| {
                        for (shard, batch) in [(0u32, &b), (1, &b2)] {
                            let (agg, gen) = (&agg, &*gen);
                            s.spawn(move || agg.add_batch(gen, shard, batch, &mut Vec::new()).unwrap());
                        }
                    });
                },
                criterion::BatchSize::LargeInput,
            )
        });
    }
    // Two shards, a thread each, the same records, in their own maps of
    // generations flushed before: the pipeline's steady state on 2 cores
    // (each thread merges its own generations, untimed; both start each
    // round together).
    g.bench_function("decode_downsample_aggregate_2_threads_recycled", |bn| {
        bn.iter_custom(|iters| steady::rounds(&agg, &keys, &b, iters, 2).iter().sum())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
