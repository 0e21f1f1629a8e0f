//! The ground truth of a generator: every record generated once, valid
//! events summed overall, by UTC day, by country and by campaign.

use crate::generator::{Generated, Generator};
use std::collections::BTreeMap;
use zigzag_core::schema::TimeBin;
use zigzag_model::{Measures, Rollup, Truth, TruthMeasures};

pub fn compute(gen: &Generator) -> Truth {
    let mut t = Truth { seed: gen.config().seed, ..Default::default() };
    let mut totals = Measures::default();
    let mut by_day: BTreeMap<String, Measures> = BTreeMap::new();
    let mut by_country: BTreeMap<String, Measures> = BTreeMap::new();
    let mut by_campaign: BTreeMap<String, Measures> = BTreeMap::new();
    let mut buf = Vec::with_capacity(256);
    for shard in 0..gen.config().shards {
        for seq in 1..=gen.shard_len(shard) {
            t.records += 1;
            let ev = match gen.record(shard, seq, &mut buf) {
                Generated::Valid(ev) => ev,
                Generated::Malformed(_) => {
                    t.malformed += 1;
                    continue;
                }
            };
            t.valid += 1;
            t.late += u64::from(ev.late);
            t.first_ms = Some(t.first_ms.map_or(ev.ts_ms, |f| f.min(ev.ts_ms)));
            t.last_ms = Some(t.last_ms.map_or(ev.ts_ms, |l| l.max(ev.ts_ms)));
            let mut m = Measures::default();
            m.add_event(ev.click, ev.cost_micros);
            totals.merge(&m);
            let day = TimeBin::Day.label(Rollup::Day.floor(ev.ts_ms));
            by_day.entry(day).or_default().merge(&m);
            by_country.entry(ev.country.to_string()).or_default().merge(&m);
            by_campaign.entry(ev.campaign_name()).or_default().merge(&m);
        }
    }
    let conv = |m: BTreeMap<String, Measures>| -> BTreeMap<String, TruthMeasures> {
        m.into_iter().map(|(k, v)| (k, v.into())).collect()
    };
    t.totals = totals.into();
    t.by_day = conv(by_day);
    t.by_country = conv(by_country);
    t.by_campaign = conv(by_campaign);
    t
}
