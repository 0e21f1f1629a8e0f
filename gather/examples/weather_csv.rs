//! Writes Z-order part 1's experiment data set to stdout: weather reports over
//! three months (2016-01-01 .. 2016-04-01) from the continental US.
//!
//!     cargo run --release -p zigzag-gather --example weather_csv -- [ROWS] [SEED] > weather.csv
//!
//! Deterministic from the seed. Positions are uniform over the continental
//! US bounding box (to 1e-6 degrees), times uniform to the second, and the
//! temperature (whole degrees C, -20..=40) falls with latitude, rises with
//! the season and carries noise, so cold readings cluster in the north in
//! January as they would.
//!
//! Each row also carries the blog's sort key, `timestamp_lat_long`
//! (`1454770903_26.509593_-90.259166`): the blog's items hold it, and an
//! item's size is what a read is billed by. Without it the rows are half
//! the blog's size (79 bytes against the ~159 its timestamp index's reads
//! imply), and every strategy whose pages fill read units would look
//! cheaper than it is beside the blog's figures.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::io::{BufWriter, Write};

const START: i64 = 1_451_606_400; // 2016-01-01T00:00:00Z
const END: i64 = 1_459_468_800; // 2016-04-01T00:00:00Z

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let rows: usize = args.next().map(|a| a.parse().expect("ROWS is a number")).unwrap_or(300_000);
    let seed: u64 = args.next().map(|a| a.parse().expect("SEED is a number")).unwrap_or(1);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out = BufWriter::new(std::io::stdout().lock());
    writeln!(out, "sourceId,timestamp,latitude,longitude,celsius,timestamp_lat_long")?;
    for _ in 0..rows {
        let ts = rng.gen_range(START..END);
        let lat: f64 = rng.gen_range(24.5..49.5);
        let lon: f64 = rng.gen_range(-124.8..-66.9);
        let season = (ts - START) as f64 / (END - START) as f64; // 0 in January, 1 at April
        let mean = 28.0 - 0.8 * (lat - 24.5) - 12.0 * (1.0 - season);
        let noise: f64 = (0..4).map(|_| rng.gen_range(-4.0..4.0)).sum();
        let celsius = (mean + noise).round().clamp(-20.0, 40.0) as i64;
        writeln!(out, "1,{ts},{lat:.6},{lon:.6},{celsius},{ts}_{lat:.6}_{lon:.6}")?;
    }
    out.flush()
}
