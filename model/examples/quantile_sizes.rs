//! Stored sizes of a quantile measure's sketch (BENCHMARKS.md, "Quantile
//! items"): `cargo run --release -p zigzag-model --example quantile_sizes`.
//! Values in units of 1e-3 (a decimal field of scale 3): log-uniform over
//! 1e-3..1e6, lognormal (median 1, sigma 2), and a narrow normal; N values
//! per sketch, at 1 % and 2 % accuracy.

use zigzag_model::measure::quantile::{QuantileParams, Quantiles};

struct Rng(u64);

impl Rng {
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.unit().max(1e-300), self.unit());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

fn main() {
    type Shape = fn(&mut Rng) -> i64;
    let shapes: [(&str, Shape); 3] = [
        ("log-uniform 1e-3..1e6", |r| 10f64.powf(9.0 * r.unit()).round() as i64),
        ("lognormal median 1, sigma 2", |r| (1000.0 * (2.0 * r.normal()).exp()).round().max(1.0) as i64),
        ("normal 250 +- 25", |r| (250_000.0 + 25_000.0 * r.normal()).round() as i64),
    ];
    println!("| values | accuracy | N | buckets | bytes |");
    println!("|---|---:|---:|---:|---:|");
    for (name, draw) in shapes {
        for a in [0.01, 0.02] {
            let p = QuantileParams::for_accuracy(a, 0).expect("valid");
            for n in [1u64, 10, 100, 1_000, 10_000, 100_000, 1_000_000] {
                let mut r = Rng(0x2545_F491_4F6C_DD1D);
                let mut q = Quantiles::new(p);
                for _ in 0..n {
                    q.add(draw(&mut r));
                }
                println!("| {name} | {:.0} % | {n} | {} | {} |", a * 100.0, q.buckets(), q.to_bytes().len());
            }
        }
    }
}
