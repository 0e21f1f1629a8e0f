//! Ground truth: what a generator produced, summed the way reports sum it,
//! so a report can be checked against it exactly. Written by `loadgen`
//! (JSON), read by `gather check`.

use crate::measures::Measures;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Measures as plain JSON numbers (costs in micro-units).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TruthMeasures {
    pub clicks: u64,
    pub impressions: u64,
    pub cost_sum_micros: i128,
    pub cost_min_micros: Option<i64>,
    pub cost_max_micros: Option<i64>,
}

impl From<Measures> for TruthMeasures {
    fn from(m: Measures) -> Self {
        TruthMeasures {
            clicks: m.clicks,
            impressions: m.impressions,
            cost_sum_micros: m.cost_sum,
            cost_min_micros: m.cost_min,
            cost_max_micros: m.cost_max,
        }
    }
}

impl From<TruthMeasures> for Measures {
    fn from(t: TruthMeasures) -> Self {
        Measures {
            clicks: t.clicks,
            impressions: t.impressions,
            cost_sum: t.cost_sum_micros,
            cost_min: t.cost_min_micros,
            cost_max: t.cost_max_micros,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Truth {
    pub seed: u64,
    /// Records generated, valid or not.
    pub records: u64,
    pub valid: u64,
    pub malformed: u64,
    /// Valid events whose time lies before an earlier record's time in the
    /// same shard by more than the jitter (late arrivals).
    pub late: u64,
    /// Smallest and largest valid event time, ms since the epoch.
    pub first_ms: Option<i64>,
    pub last_ms: Option<i64>,
    pub totals: TruthMeasures,
    /// Keyed by UTC day `YYYY-MM-DD`.
    pub by_day: BTreeMap<String, TruthMeasures>,
    pub by_country: BTreeMap<String, TruthMeasures>,
    pub by_campaign: BTreeMap<String, TruthMeasures>,
}

impl TruthMeasures {
    /// Adds `other` (sums add; min and max take the extreme).
    pub fn merge(&mut self, other: &TruthMeasures) {
        let mut m = Measures::from(*self);
        m.merge(&Measures::from(*other));
        *self = m.into();
    }
}

impl Truth {
    /// The truth of two generators' records written to one table (e.g. two
    /// streams ingested side by side).
    pub fn merge(&mut self, other: &Truth) {
        self.records += other.records;
        self.valid += other.valid;
        self.malformed += other.malformed;
        self.late += other.late;
        self.first_ms = [self.first_ms, other.first_ms].into_iter().flatten().min();
        self.last_ms = [self.last_ms, other.last_ms].into_iter().flatten().max();
        self.totals.merge(&other.totals);
        for (mine, theirs) in [
            (&mut self.by_day, &other.by_day),
            (&mut self.by_country, &other.by_country),
            (&mut self.by_campaign, &other.by_campaign),
        ] {
            for (k, v) in theirs {
                mine.entry(k.clone()).or_default().merge(v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_truths_add_counts_and_keep_extremes() {
        let m = |clicks, min, max| TruthMeasures {
            clicks,
            impressions: 1,
            cost_sum_micros: 10,
            cost_min_micros: min,
            cost_max_micros: max,
        };
        let mut a = Truth {
            records: 2,
            first_ms: Some(5),
            last_ms: Some(9),
            totals: m(1, Some(3), Some(4)),
            ..Default::default()
        };
        a.by_country.insert("DE".into(), m(1, Some(3), Some(4)));
        let mut b =
            Truth { records: 3, first_ms: Some(1), last_ms: Some(7), totals: m(2, None, None), ..Default::default() };
        b.by_country.insert("DE".into(), m(2, Some(1), Some(2)));
        b.by_country.insert("FR".into(), m(5, None, None));
        a.merge(&b);
        assert_eq!((a.records, a.first_ms, a.last_ms), (5, Some(1), Some(9)));
        assert_eq!(a.totals, m(3, Some(3), Some(4)).with_sum(20).with_impressions(2));
        assert_eq!(a.by_country["DE"], m(3, Some(1), Some(4)).with_sum(20).with_impressions(2));
        assert_eq!(a.by_country["FR"], m(5, None, None));
    }

    impl TruthMeasures {
        fn with_sum(self, cost_sum_micros: i128) -> Self {
            TruthMeasures { cost_sum_micros, ..self }
        }
        fn with_impressions(self, impressions: u64) -> Self {
            TruthMeasures { impressions, ..self }
        }
    }
}
