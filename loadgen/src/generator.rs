//! The shipped click/impression generator. Event times as
//! [`GenConfig::event_time`] spreads them; referrers are Zipf-distributed
//! over `referrers` names (rank 1 is the most frequent); campaigns and
//! countries uniform; clicks happen at the given click-through rate and
//! carry a cost. Its malformed records are the brief's defects.

use crate::traffic::{Drawn, DrawnEvent, Traffic};
use rand::Rng;
use std::io::Write;
use zigzag_model::schema::decimal::format_units;
use zigzag_model::schema::FieldSpec;

pub use crate::traffic::GenConfig;

pub const COUNTRIES: [&str; 12] = ["US", "DE", "FR", "GB", "JP", "BR", "IN", "CA", "AU", "ES", "IT", "NL"];

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
    fields: Vec<FieldSpec>,
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
        Generator { cfg, zipf_cdf: cdf, fields: zigzag_model::schema::default_fields() }
    }

    pub fn config(&self) -> &GenConfig {
        &self.cfg
    }

    /// Records in one shard (records are dealt round-robin).
    pub fn shard_len(&self, shard: u32) -> u64 {
        self.cfg.shard_len(shard)
    }

    pub fn shard_id(shard: u32) -> String {
        GenConfig::shard_id(shard)
    }

    /// Record `seq` (from 1) of `shard`: what it is, and its bytes into `out`.
    pub fn record(&self, shard: u32, seq: u64, out: &mut Vec<u8>) -> Generated {
        let c = &self.cfg;
        let mut rng = c.rng(shard, seq);
        let (ts, late) = c.event_time(&mut rng, shard, seq);
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

impl Traffic for Generator {
    fn config(&self) -> &GenConfig {
        &self.cfg
    }

    fn fields(&self) -> &[FieldSpec] {
        &self.fields
    }

    fn draw(&self, shard: u32, seq: u64, out: &mut Vec<u8>) -> Drawn {
        match self.record(shard, seq, out) {
            Generated::Valid(ev) => Drawn::Valid(DrawnEvent { ts_ms: ev.ts_ms, late: ev.late, values: ev.values() }),
            Generated::Malformed(defect) => Drawn::Malformed(defect),
        }
    }

    fn write(&self, shard: u32, seq: u64, out: &mut Vec<u8>) {
        self.record(shard, seq, out);
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
