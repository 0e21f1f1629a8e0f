//! The generator. Each record comes from a small PRNG seeded by a hash of
//! (seed, shard, sequence number), so generation is random-access and
//! identical on every run and machine.
//!
//! Events: event time advances evenly over `span_ms` from `start_ms` with
//! the shards interleaved, plus uniform jitter; a fraction are late (up to
//! `late_max_ms` older). Referrers are Zipf-distributed over `referrers`
//! names (rank 1 is the most frequent); campaigns and countries uniform;
//! clicks happen at the given click-through rate and carry a cost.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::io::Write;
use zigzag_model::schema::value::format_units;

pub const COUNTRIES: [&str; 12] = ["US", "DE", "FR", "GB", "JP", "BR", "IN", "CA", "AU", "ES", "IT", "NL"];

#[derive(Debug, Clone)]
pub struct GenConfig {
    pub seed: u64,
    pub shards: u32,
    /// Records in all shards together.
    pub records: u64,
    pub start_ms: i64,
    pub span_ms: i64,
    pub referrers: u32,
    /// Zipf exponent of the referrer popularity.
    pub zipf: f64,
    pub campaigns: u32,
    /// Clicks per impression.
    pub ctr: f64,
    pub jitter_ms: i64,
    pub late_fraction: f64,
    pub late_max_ms: i64,
    pub malformed_fraction: f64,
}

impl Default for GenConfig {
    fn default() -> Self {
        GenConfig {
            seed: 1,
            shards: 4,
            records: 1_000_000,
            start_ms: 1_795_132_800_000, // 2026-11-20T00:00:00Z
            span_ms: 86_400_000,
            referrers: 10_000,
            zipf: 1.1,
            campaigns: 40,
            ctr: 0.05,
            jitter_ms: 2_000,
            late_fraction: 0.01,
            late_max_ms: 3_600_000,
            malformed_fraction: 0.001,
        }
    }
}

/// One generated event (valid records only).
#[derive(Debug, Clone, PartialEq)]
pub struct GenEvent {
    pub click: bool,
    pub ts_ms: i64,
    pub referrer: u32,
    pub campaign: u32,
    pub country: &'static str,
    pub cost_micros: Option<i64>,
    pub late: bool,
    /// The `url` is `/p/<page>`, the `user_id` `u<user:06>`.
    pub page: u32,
    pub user: u32,
}

impl GenEvent {
    /// Its values in the shipped schema's field order (what decoding the
    /// record gives), for the ground truth.
    pub fn values(&self) -> Vec<zigzag_model::schema::FieldValue<'static>> {
        use std::borrow::Cow::Owned;
        use zigzag_model::schema::FieldValue::*;
        vec![
            Str(Owned(if self.click { "click" } else { "impression" }.into())),
            Time(self.ts_ms),
            Str(Owned(self.referrer_name())),
            Str(Owned(self.campaign_name())),
            Str(Owned(self.country.into())),
            Str(Owned(format!("/p/{}", self.page))),
            self.cost_micros.map_or(Absent, Dec),
            Str(Owned(format!("u{:06}", self.user))),
        ]
    }

    pub fn referrer_name(&self) -> String {
        referrer_name(self.referrer)
    }

    pub fn campaign_name(&self) -> String {
        campaign_name(self.campaign)
    }
}

pub fn referrer_name(rank: u32) -> String {
    format!("ref{rank:05}.example.com")
}

pub fn campaign_name(i: u32) -> String {
    format!("camp-{i:03}")
}

/// What one record is.
#[derive(Debug, Clone, PartialEq)]
pub enum Generated {
    Valid(GenEvent),
    /// A defective record and the defect's name.
    Malformed(&'static str),
}

#[derive(Debug, Clone)]
pub struct Generator {
    cfg: GenConfig,
    /// Cumulative Zipf weights over referrer ranks, normalized to 1.
    zipf_cdf: Vec<f64>,
}

impl Generator {
    pub fn new(cfg: GenConfig) -> Self {
        let mut cdf = Vec::with_capacity(cfg.referrers as usize);
        let mut acc = 0.0;
        for rank in 1..=cfg.referrers.max(1) {
            acc += 1.0 / (rank as f64).powf(cfg.zipf);
            cdf.push(acc);
        }
        for w in &mut cdf {
            *w /= acc;
        }
        Generator { cfg, zipf_cdf: cdf }
    }

    pub fn config(&self) -> &GenConfig {
        &self.cfg
    }

    /// Records in one shard (records are dealt round-robin).
    pub fn shard_len(&self, shard: u32) -> u64 {
        let s = self.cfg.shards as u64;
        self.cfg.records / s + u64::from((shard as u64) < self.cfg.records % s)
    }

    pub fn shard_id(shard: u32) -> String {
        format!("shard-{shard:03}")
    }

    fn rng(&self, shard: u32, seq: u64) -> SmallRng {
        let mut key = [0u8; 20];
        key[..8].copy_from_slice(&self.cfg.seed.to_le_bytes());
        key[8..12].copy_from_slice(&shard.to_le_bytes());
        key[12..].copy_from_slice(&seq.to_le_bytes());
        SmallRng::seed_from_u64(xxhash_rust::xxh3::xxh3_64(&key))
    }

    /// Record `seq` (from 1) of `shard`: what it is, and its bytes into `out`.
    pub fn record(&self, shard: u32, seq: u64, out: &mut Vec<u8>) -> Generated {
        let mut rng = self.rng(shard, seq);
        let c = &self.cfg;
        let global = (seq - 1) * c.shards as u64 + shard as u64;
        let base = c.start_ms + (global as i128 * c.span_ms as i128 / c.records.max(1) as i128) as i64;
        let mut ts = base + rng.gen_range(-c.jitter_ms..=c.jitter_ms);
        let late = rng.gen_bool(c.late_fraction.clamp(0.0, 1.0));
        if late {
            ts -= rng.gen_range(c.jitter_ms + 1..=c.late_max_ms.max(c.jitter_ms + 1));
        }
        let u: f64 = rng.gen();
        let referrer = self.zipf_cdf.partition_point(|&w| w < u).min(self.zipf_cdf.len() - 1) as u32 + 1;
        let campaign = rng.gen_range(0..c.campaigns.max(1));
        let country = COUNTRIES[rng.gen_range(0..COUNTRIES.len())];
        let click = rng.gen_bool((c.ctr / (1.0 + c.ctr)).clamp(0.0, 1.0));
        let cost_micros = click.then(|| rng.gen_range(10_000..=2_000_000i64));
        let user = rng.gen_range(0..1_000_000u32);
        let page = rng.gen_range(0..5_000u32);
        let rfc3339 = rng.gen_bool(0.5);
        let ev = GenEvent { click, ts_ms: ts, referrer, campaign, country, cost_micros, late, page, user };
        let malformed = rng.gen_bool(c.malformed_fraction.clamp(0.0, 1.0));
        out.clear();
        if malformed {
            let defect = rng.gen_range(0..8u32);
            return Generated::Malformed(write_malformed(&ev, defect, out));
        }
        write_event(&ev, rfc3339, out);
        Generated::Valid(ev)
    }
}

fn ts_text(ts: i64, rfc3339: bool) -> String {
    if rfc3339 {
        format!("\"{}\"", zigzag_core::schema::format_instant(ts))
    } else {
        ts.to_string()
    }
}

fn write_event(ev: &GenEvent, rfc3339: bool, out: &mut Vec<u8>) {
    let (user, page) = (ev.user, ev.page);
    let kind = if ev.click { "click" } else { "impression" };
    // Writing into a Vec cannot fail.
    let _ = write!(
        out,
        r#"{{"type":"{kind}","ts":{},"referrer":"{}","campaign":"{}","country":"{}","url":"/p/{page}","#,
        ts_text(ev.ts_ms, rfc3339),
        ev.referrer_name(),
        ev.campaign_name(),
        ev.country
    );
    if let Some(c) = ev.cost_micros {
        let _ = write!(out, r#""cost":{},"#, format_units(c as i128, 6));
    }
    let _ = write!(out, r#""user_id":"u{user:06}"}}"#);
}

/// Writes one of the defects the brief lists; returns its name.
fn write_malformed(ev: &GenEvent, defect: u32, out: &mut Vec<u8>) -> &'static str {
    let mut good = Vec::new();
    write_event(ev, false, &mut good);
    match defect {
        0 => {
            out.extend_from_slice(&good[..good.len() / 2]);
            "truncated"
        }
        1 => {
            let _ = write!(out, r#"{{"type":"click","ts":{},"campaign":"c","country":"DE","url":"/"}}"#, ev.ts_ms);
            "missing_referrer"
        }
        2 => {
            let _ = write!(
                out,
                r#"{{"type":"click","ts":"yesterday","referrer":"r","campaign":"c","country":"DE","url":"/"}}"#
            );
            "bad_timestamp"
        }
        3 => {
            let _ = write!(
                out,
                r#"{{"type":"click","ts":{},"referrer":7,"campaign":"c","country":"DE","url":"/"}}"#,
                ev.ts_ms
            );
            "wrong_type"
        }
        4 => {
            out.extend_from_slice(b"{\"type\":\"click\",\"referrer\":\"\xff\xfe\"}");
            "not_utf8"
        }
        5 => {
            let _ = write!(
                out,
                r#"{{"type":"view","ts":{},"referrer":"r","campaign":"c","country":"DE","url":"/"}}"#,
                ev.ts_ms
            );
            "unknown_type"
        }
        6 => {
            let _ = write!(
                out,
                r#"{{"type":"click","ts":{},"referrer":"r","campaign":"c","country":"DE","url":"/","cost":-1}}"#,
                ev.ts_ms
            );
            "negative_cost"
        }
        _ => {
            let _ = write!(
                out,
                r#"{{"type":"click","ts":"2300-01-01T00:00:00Z","referrer":"r","campaign":"c","country":"DE","url":"/"}}"#
            );
            "absurd_timestamp"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zigzag_ingest::decode::{Decoder, FieldValue};

    #[test]
    fn deterministic_and_decodable_exactly_when_valid() {
        let g = Generator::new(GenConfig { records: 4_000, malformed_fraction: 0.05, ..Default::default() });
        let mut buf = Vec::new();
        let mut again = Vec::new();
        let (mut valid, mut bad) = (0, 0);
        for shard in 0..4 {
            for seq in 1..=g.shard_len(shard) {
                let what = g.record(shard, seq, &mut buf);
                assert_eq!(g.record(shard, seq, &mut again), what);
                assert_eq!(buf, again);
                match (what, Decoder::shipped().decode(&buf)) {
                    (Generated::Valid(ev), Ok(d)) => {
                        valid += 1;
                        assert_eq!(d.ts_ms, ev.ts_ms);
                        assert_eq!(d.values.to_vec(), ev.values(), "the truth's values are the decoder's");
                        assert_eq!(d.values[6], ev.cost_micros.map_or(FieldValue::Absent, FieldValue::Dec));
                    }
                    (Generated::Malformed(_), Err(_)) => bad += 1,
                    (w, d) => panic!("generator says {w:?}, decoder says {d:?}: {}", String::from_utf8_lossy(&buf)),
                }
            }
        }
        assert_eq!(valid + bad, 4_000);
        assert!((100..400).contains(&bad), "{bad} malformed of 4000 at 5%");
    }

    #[test]
    fn referrers_are_skewed() {
        let g = Generator::new(GenConfig { records: 20_000, referrers: 1_000, ..Default::default() });
        let mut buf = Vec::new();
        let mut top = 0;
        for seq in 1..=5_000 {
            if let Generated::Valid(ev) = g.record(0, seq, &mut buf) {
                top += u32::from(ev.referrer == 1);
            }
        }
        // Zipf(1.1) over 1000 ranks: rank 1 holds ~17% of the mass.
        assert!((600..1100).contains(&top), "rank 1 drew {top} of 5000");
    }
}
