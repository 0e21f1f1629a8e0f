//! Z-order hot paths: encode + interleave, BIGMIN/LITMAX, decomposition.
//!
//!     cargo bench -p zigzag-core --bench zorder
//!
//! Results and targets are recorded in BENCHMARKS.md.

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use zigzag_core::schema::{Schema, Value};
use zigzag_core::zorder::{decompose, Layout, ZBox};

/// Four dimensions, 90 bits: time, two scaled coordinates and a signed int.
const SCHEMA_90: &str = r#"
[[dimension]]
name = "ts"
type = "timestamp"
unit = "millisecond"
origin = "2016-01-01T00:00:00Z"
bits = 34
[[dimension]]
name = "lat"
type = "scaled"
min = 24.0
max = 50.0
bits = 24
[[dimension]]
name = "lon"
type = "scaled"
min = -125.0
max = -66.0
bits = 24
[[dimension]]
name = "celsius"
type = "int"
bits = 8
"#;

fn points(n: usize) -> Vec<[Value<'static>; 4]> {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    (0..n)
        .map(|_| {
            [
                Value::Time(1_451_606_400_000 + rng.gen_range(0..7_862_400_000i64)),
                Value::Float(rng.gen_range(24.5..49.5)),
                Value::Float(rng.gen_range(-124.8..-66.9)),
                Value::Int(rng.gen_range(-20..=40)),
            ]
        })
        .collect()
}

fn encode_interleave(c: &mut Criterion) {
    let schema = Schema::from_toml(SCHEMA_90).expect("schema");
    assert_eq!(schema.layout().total_bits(), 90);
    let pts = points(4096);
    let mut g = c.benchmark_group("encode+interleave/90-bit");
    g.throughput(Throughput::Elements(pts.len() as u64));
    g.bench_function("schema.encode_point", |b| {
        b.iter(|| {
            for p in &pts {
                black_box(schema.encode_point(black_box(p)).expect("in range"));
            }
        })
    });
    let layout = schema.layout().clone();
    let encoded: Vec<[u128; 4]> = pts
        .iter()
        .map(|p| {
            let mut e = [0u128; 4];
            for (d, v) in p.iter().enumerate() {
                e[d] = schema.dims()[d].encode(v).expect("in range");
            }
            e
        })
        .collect();
    g.bench_function("schema.encode_point_into (reused buffer)", |b| {
        let mut buf = vec![0u64; schema.layout().nwords()];
        b.iter(|| {
            for p in &pts {
                schema.encode_point_into(black_box(p), &mut buf).expect("in range");
                black_box(&buf);
            }
        })
    });
    g.bench_function("encode only (4 values)", |b| {
        b.iter(|| {
            for p in &pts {
                for (d, v) in schema.dims().iter().zip(black_box(p)) {
                    black_box(d.encode(v).expect("in range"));
                }
            }
        })
    });
    g.bench_function("layout.interleave_tables (pre-encoded)", |b| {
        let mut buf = vec![0u64; layout.nwords()];
        b.iter(|| {
            for e in &encoded {
                layout.interleave_tables(black_box(e), &mut buf);
                black_box(&buf);
            }
        })
    });
    g.bench_function("layout.interleave_into (pre-encoded)", |b| {
        let mut buf = vec![0u64; layout.nwords()];
        b.iter(|| {
            for e in &encoded {
                layout.interleave_into(black_box(e), &mut buf);
                black_box(&buf);
            }
        })
    });
    g.finish();
}

fn bigmin(c: &mut Criterion) {
    let layout = Arc::new(Layout::new(&[34, 24, 24, 8]).expect("layout"));
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let zbox = ZBox::new(
        layout.clone(),
        vec![1 << 30, 3 << 20, 5 << 20, 100],
        vec![(1 << 30) + (1 << 26), (3 << 20) + 40_000, (5 << 20) + 90_000, 140],
    )
    .expect("box");
    let probes: Vec<_> = (0..4096)
        .map(|_| {
            let mut v = [0u128; 4];
            for (d, &w) in layout.widths().iter().enumerate() {
                v[d] = rng.gen_range(0..1u128 << w);
            }
            // Half the probes near the box, half anywhere.
            if rng.gen_bool(0.5) {
                v[0] = zbox.lo()[0] + rng.gen_range(0..1u128 << 26);
            }
            layout.interleave(&v)
        })
        .collect();
    let mut g = c.benchmark_group("box/90-bit");
    g.throughput(Throughput::Elements(probes.len() as u64));
    g.bench_function("next_jump_in (BIGMIN)", |b| {
        b.iter(|| {
            for p in &probes {
                black_box(zbox.next_jump_in(black_box(p)));
            }
        })
    });
    g.bench_function("litmax", |b| {
        b.iter(|| {
            for p in &probes {
                black_box(zbox.litmax(black_box(p)));
            }
        })
    });
    g.bench_function("is_relevant", |b| {
        b.iter(|| {
            for p in &probes {
                black_box(zbox.is_relevant(black_box(p)));
            }
        })
    });
    g.finish();
}

fn decomposition(c: &mut Criterion) {
    // Z-order part 1's Q1 on the weather schema of BENCHMARKS.md: Atlanta, one week.
    let layout = Arc::new(Layout::new(&[23, 16, 16, 7]).expect("layout"));
    let cell = |v: f64, min: f64, max: f64| ((v - min) / (max - min) * 65536.0) as u128;
    let zbox = ZBox::new(
        layout,
        vec![7_257_600, cell(33.7, 24.0, 50.0), cell(-84.5, -125.0, -66.0), 44],
        vec![7_862_400, cell(33.9, 24.0, 50.0), cell(-84.3, -125.0, -66.0), 104],
    )
    .expect("box");
    let mut g = c.benchmark_group("decompose/weather-Q1");
    for budget in [16usize, 256, 4096] {
        g.bench_function(format!("budget {budget}"), |b| {
            b.iter_batched(|| zbox.clone(), |zb| black_box(decompose(&zb, budget)), BatchSize::SmallInput)
        });
    }
    g.finish();
}

criterion_group!(benches, encode_interleave, bigmin, decomposition);
criterion_main!(benches);
