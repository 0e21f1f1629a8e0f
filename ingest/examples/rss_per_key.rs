//! Memory of the in-memory aggregate: fills one generation with N distinct
//! live keys (default 1,000,000: distinct referrers, one minute bucket each
//! for every configured rollup) and prints the resident-set growth per
//! million keys (BRIEF target: <= 200 MB). Linux only (reads /proc).
//!
//! `cargo run --release -p zigzag-ingest --example rss_per_key [-- N]`

use zigzag_ingest::aggregate::{Aggregator, Generation};
use zigzag_ingest::decode::{Decoder, Event, FieldValue};
use zigzag_model::{Config, KeyModel};

fn rss_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let keys = KeyModel::new(&Config::default()).expect("default config");
    let agg = Aggregator::new(
        &zigzag_model::Projections::from(keys.clone()),
        Decoder::shipped(),
        Config::default().measure_set().expect("shipped"),
    );
    let gen = Generation::default();
    let before = rss_kb();
    // ~20-byte referrers, like the generator's.
    for i in 0..n {
        let referrer = format!("ref{i:07}.example.com");
        let ts_ms = 1_795_132_800_000 + (i as i64 % 1440) * 60_000;
        let s = |x: &str| FieldValue::Str(x.to_string().into());
        let e = Event {
            ts_ms,
            values: [
                s(if i % 20 == 0 { "click" } else { "impression" }),
                FieldValue::Time(ts_ms),
                s(&referrer),
                s("camp-001"),
                s("DE"),
                s("/p/1"),
                if i % 20 == 0 { FieldValue::Dec(250_000) } else { FieldValue::Absent },
                FieldValue::Absent,
            ]
            .into_iter()
            .collect(),
        };
        agg.add_events(&gen, 0, std::slice::from_ref(&e)).expect("no identity collisions");
    }
    let after = rss_kb();
    let keys_live = gen.len() as f64;
    let mb = (after.saturating_sub(before)) as f64 / 1024.0;
    println!(
        "{} events, {} distinct keys ({} live aggregate entries over {} rollups): RSS +{:.0} MB = {:.1} MB per million entries, {:.1} MB per million keys",
        n,
        gen.identities(),
        keys_live,
        keys.rollups().count(),
        mb,
        mb / (keys_live / 1e6),
        mb / (gen.identities() as f64 / 1e6)
    );
}
