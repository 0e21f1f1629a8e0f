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
