//! Test support for the integration tests in `tests/`.
//!
//! - [`fault_proxy`]: a proxy in front of the AWS emulators that injects real-shaped throttling
//!   and failure responses, since the emulators themselves never throttle.
//! - [`freeze`]: a table that hangs while frozen, and a source that
//!   freezes it when a stopping worker closes its last reader.
//! - [`gated`]: a source whose shards end only once a gate opens, and
//!   which records the shards it opened.
//! - [`order`]: a source wrapper that records every child shard opened
//!   before its parents were finished.
//! - [`vec_source`]: records held in memory as a bounded source.

pub mod fault_proxy;
pub mod freeze;
pub mod gated;
pub mod joins;
pub mod order;
pub mod vec_source;

pub use vec_source::VecSource;

/// A name no other test run uses (streams and tables outlive a test in a
/// shared emulator): `name-<pid>-<nanos>`.
pub fn unique_name(name: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{name}-{}-{}", std::process::id(), nanos % 1_000_000_000_000)
}

/// Every record of `gen` in the order a producer sends them (round-robin
/// over the generator's shards), each with its own partition key.
pub fn interleaved_records(gen: &zigzag_loadgen::Generator) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let longest = (0..gen.config().shards).map(|s| gen.shard_len(s)).max().unwrap_or(0);
    for seq in 1..=longest {
        for shard in 0..gen.config().shards {
            if seq <= gen.shard_len(shard) {
                let mut buf = Vec::new();
                gen.record(shard, seq, &mut buf);
                out.push((format!("k{shard}-{seq}"), buf));
            }
        }
    }
    out
}
