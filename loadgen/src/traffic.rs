//! What every generator shares: the record stream's shape in time and
//! shards ([`GenConfig`]), the per-record random source, and the
//! [`Traffic`] contract that sources, sinks and the ground truth are
//! written against, whatever the records look like.
//!
//! Record `seq` (from 1) of shard `s` is a pure function of (seed, s, seq):
//! its random source is seeded by a hash of the three, so any shard can be
//! replayed from any position, exactly, on every run and machine.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use zigzag_model::schema::{FieldSpec, FieldValue};

#[derive(Debug, Clone)]
pub struct GenConfig {
    pub seed: u64,
    pub shards: u32,
    /// Records in all shards together.
    pub records: u64,
    pub start_ms: i64,
    pub span_ms: i64,
    pub jitter_ms: i64,
    pub late_fraction: f64,
    pub late_max_ms: i64,
    pub malformed_fraction: f64,
    // The shipped click/impression shape's knobs ([`crate::Generator`]);
    // a declared schema's fields take theirs from a field traffic file.
    pub referrers: u32,
    /// Zipf exponent of the referrer popularity.
    pub zipf: f64,
    pub campaigns: u32,
    /// Clicks per impression.
    pub ctr: f64,
}

impl Default for GenConfig {
    fn default() -> Self {
        GenConfig {
            seed: 1,
            shards: 4,
            records: 1_000_000,
            start_ms: 1_795_132_800_000, // 2026-11-20T00:00:00Z
            span_ms: 86_400_000,
            jitter_ms: 2_000,
            late_fraction: 0.01,
            late_max_ms: 3_600_000,
            malformed_fraction: 0.001,
            referrers: 10_000,
            zipf: 1.1,
            campaigns: 40,
            ctr: 0.05,
        }
    }
}

impl GenConfig {
    /// Records in one shard (records are dealt round-robin).
    pub fn shard_len(&self, shard: u32) -> u64 {
        let s = self.shards.max(1) as u64;
        self.records / s + u64::from((shard as u64) < self.records % s)
    }

    /// The random source of one record.
    pub fn rng(&self, shard: u32, seq: u64) -> SmallRng {
        let mut key = [0u8; 20];
        key[..8].copy_from_slice(&self.seed.to_le_bytes());
        key[8..12].copy_from_slice(&shard.to_le_bytes());
        key[12..].copy_from_slice(&seq.to_le_bytes());
        SmallRng::seed_from_u64(xxhash_rust::xxh3::xxh3_64(&key))
    }

    /// A record's event time and whether it is late: time advances evenly
    /// over `span_ms` from `start_ms` with the shards interleaved, plus
    /// uniform jitter; a `late_fraction` of events are older by more than
    /// the jitter, up to `late_max_ms`. The first draws of `rng`.
    pub fn event_time(&self, rng: &mut SmallRng, shard: u32, seq: u64) -> (i64, bool) {
        let global = (seq - 1) * self.shards as u64 + shard as u64;
        let base = self.start_ms + (global as i128 * self.span_ms as i128 / self.records.max(1) as i128) as i64;
        let mut ts = base + rng.gen_range(-self.jitter_ms..=self.jitter_ms);
        let late = rng.gen_bool(self.late_fraction.clamp(0.0, 1.0));
        if late {
            ts -= rng.gen_range(self.jitter_ms + 1..=self.late_max_ms.max(self.jitter_ms + 1));
        }
        (ts, late)
    }

    pub fn shard_id(shard: u32) -> String {
        format!("shard-{shard:03}")
    }
}

/// A valid event as its generator drew it (not as decoding reads it).
#[derive(Debug, Clone, PartialEq)]
pub struct DrawnEvent {
    pub ts_ms: i64,
    pub late: bool,
    /// Every field's typed value in schema order, defaults applied: what a
    /// correct decoder must make of the record.
    pub values: Vec<FieldValue<'static>>,
}

/// What one record is.
#[derive(Debug, Clone, PartialEq)]
pub enum Drawn {
    Valid(DrawnEvent),
    /// A defective record and the defect's name.
    Malformed(&'static str),
}

/// A deterministic record stream: the shipped click/impression generator
/// or one for any declared schema.
pub trait Traffic: Send + Sync {
    fn config(&self) -> &GenConfig;

    /// The fields every valid record carries, in schema order.
    fn fields(&self) -> &[FieldSpec];

    /// Record `seq` (from 1) of `shard`: its bytes into `out`, and what it is.
    fn draw(&self, shard: u32, seq: u64, out: &mut Vec<u8>) -> Drawn;

    /// Only the bytes (what sources need; cheaper where the generator can).
    fn write(&self, shard: u32, seq: u64, out: &mut Vec<u8>) {
        self.draw(shard, seq, out);
    }

    fn shard_len(&self, shard: u32) -> u64 {
        self.config().shard_len(shard)
    }

    /// CSV lines or JSON objects.
    fn file_extension(&self) -> &'static str {
        "jsonl"
    }
}

/// Writes every shard of `gen` to `dir` as one file per shard, named by its
/// shard id (`shardId-000000000000.jsonl`: what `ingest --input` reads, the
/// line number being the sequence number); `each` is called once per
/// record (a progress bar). Returns the files in shard order.
pub fn write_shard_files(
    gen: &dyn Traffic,
    dir: &std::path::Path,
    mut each: impl FnMut(),
) -> std::io::Result<Vec<std::path::PathBuf>> {
    use std::io::Write;
    std::fs::create_dir_all(dir)?;
    let mut buf = Vec::with_capacity(256);
    let mut files = Vec::new();
    for shard in 0..gen.config().shards {
        let path = dir.join(format!("{}.{}", GenConfig::shard_id(shard), gen.file_extension()));
        let mut out = std::io::BufWriter::new(std::fs::File::create(&path)?);
        for seq in 1..=gen.shard_len(shard) {
            gen.write(shard, seq, &mut buf);
            out.write_all(&buf)?;
            out.write_all(b"\n")?;
            each();
        }
        out.flush()?;
        files.push(path);
    }
    Ok(files)
}
