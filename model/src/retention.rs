//! Retention: how long each rollup's items are kept after their bucket
//! ends (minutes for 14 days, hours for 13 months, days forever). Part of
//! the layout, so readers know it from the table and a writer declaring
//! another is refused: every item of a table expires by the same rule.
//!
//! Every item of a rollup with a retention carries [`TTL_ATTR`], the epoch
//! second after which it may be deleted (the bucket's end plus the
//! retention): DynamoDB's TTL deletes it (the table's TTL attribute), the
//! SQLite store's purge does ([`SortedTable::purge_expired`]). Deletion
//! happens some time after that second, never before, so a report reads a
//! bucket only while it is surely whole: [`Retention::readable`] refuses a
//! window whose first bucket expires within [`REPORT_MARGIN_MS`].
//!
//! [`SortedTable::purge_expired`]: zigzag_core::table::SortedTable::purge_expired

use crate::rollup::Rollup;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

pub use zigzag_core::table::TTL_ATTR;

/// A report does not read a bucket that expires within this long: what a
/// report may take, with room to spare, while a purge runs beside it.
pub const REPORT_MARGIN_MS: i64 = 3_600_000;

/// Seconds each rollup is kept after its bucket ends; a rollup not listed
/// is kept forever. Serialized as `{"minute": 1209600, ...}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Retention(BTreeMap<Rollup, u64>);

impl Retention {
    /// From the configuration's `[retention]` table: rollup name → a
    /// duration (`14d`, `400d`, `2w`) or `forever`.
    pub fn parse(table: &BTreeMap<String, String>) -> Result<Retention, String> {
        let mut kept = BTreeMap::new();
        for (name, text) in table {
            let rollup =
                Rollup::parse(name).ok_or_else(|| format!("retention: {name:?} is no rollup (minute, hour or day)"))?;
            if text.trim() == "forever" {
                continue;
            }
            let d = zigzag_core::duration::parse(text).map_err(|e| format!("retention.{name}: {e}"))?;
            if d < Duration::from_millis(rollup.unit_ms() as u64) {
                return Err(format!("retention.{name} = {text:?} is shorter than one {name}: nothing would be kept"));
            }
            kept.insert(rollup, d.as_secs());
        }
        Ok(Retention(kept))
    }

    pub fn is_forever(&self) -> bool {
        self.0.is_empty()
    }

    /// How long `rollup`'s items are kept after their bucket ends (None:
    /// forever).
    pub fn of(&self, rollup: Rollup) -> Option<Duration> {
        self.0.get(&rollup).map(|s| Duration::from_secs(*s))
    }

    /// The value of [`TTL_ATTR`] on an item of `rollup` whose bucket starts
    /// at `bucket_start_ms`: the epoch second its bucket ends plus the
    /// retention (None: kept forever, no attribute).
    pub fn expires_at(&self, rollup: Rollup, bucket_start_ms: i64) -> Option<i64> {
        let kept = *self.0.get(&rollup)? as i64;
        let end_s = (bucket_start_ms + rollup.unit_ms()).div_euclid(1000);
        Some(end_s.saturating_add(kept))
    }

    /// Whether a report at `now_ms` may read `rollup`'s buckets from
    /// `window_start_ms` on: Ok, or why not, naming the retention.
    pub fn readable(&self, rollup: Rollup, window_start_ms: i64, now_ms: i64) -> Result<(), String> {
        let Some(expires) = self.expires_at(rollup, rollup.floor(window_start_ms)) else { return Ok(()) };
        if expires.saturating_mul(1000) > now_ms.saturating_add(REPORT_MARGIN_MS) {
            return Ok(());
        }
        let kept = days(self.of(rollup).unwrap_or_default());
        Err(format!(
            "{rollup} items are kept {kept} after their bucket ends (the table's retention), and the window's first \
             {rollup} may already be deleted"
        ))
    }

    /// The configuration's `[retention]` table that [`Retention::parse`]
    /// reads back as this (a rollup kept forever is left out).
    pub fn to_table(&self) -> BTreeMap<String, String> {
        self.0.iter().map(|(r, s)| (r.name().to_string(), days(Duration::from_secs(*s)))).collect()
    }

    /// Per rollup as the configuration writes it (`minute = 14d`), for
    /// messages and `--explain`.
    pub fn describe(&self) -> String {
        if self.is_forever() {
            return "every rollup kept forever".into();
        }
        Rollup::ALL
            .iter()
            .map(|r| format!("{r} {}", self.of(*r).map_or("forever".into(), days)))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A retention in the unit a person would write it.
fn days(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        _ if s.is_multiple_of(86_400) => format!("{}d", s / 86_400),
        _ if s.is_multiple_of(3_600) => format!("{}h", s / 3_600),
        _ => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    const DAY_MS: i64 = 86_400_000;

    #[test]
    fn a_retention_is_declared_per_rollup_and_forever_is_no_expiry() {
        let r = Retention::parse(&table(&[("minute", "14d"), ("hour", "400d"), ("day", "forever")])).unwrap();
        assert_eq!(r.of(Rollup::Minute), Some(Duration::from_secs(14 * 86_400)));
        assert_eq!(r.of(Rollup::Day), None);
        assert_eq!(r.describe(), "minute 14d, hour 400d, day forever");
        assert!(Retention::parse(&table(&[("week", "1d")])).unwrap_err().contains("no rollup"));
        assert!(Retention::parse(&table(&[("minute", "14 days")])).unwrap_err().contains("retention.minute"));
        assert!(Retention::parse(&table(&[("day", "12h")])).unwrap_err().contains("shorter than one day"));
        assert!(Retention::parse(&table(&[("day", "forever")])).unwrap().is_forever());
    }

    #[test]
    fn an_item_expires_its_retention_after_its_bucket_ends() {
        let r = Retention::parse(&table(&[("minute", "1d"), ("hour", "2d")])).unwrap();
        let t = 1_795_132_800_000; // 2026-11-20T00:00:00Z
        assert_eq!(r.expires_at(Rollup::Minute, t), Some((t + 60_000 + DAY_MS) / 1000));
        assert_eq!(r.expires_at(Rollup::Hour, t), Some((t + 3_600_000 + 2 * DAY_MS) / 1000));
        assert_eq!(r.expires_at(Rollup::Day, t), None, "kept forever: no attribute");
    }

    #[test]
    fn a_report_refuses_a_window_whose_first_bucket_may_be_gone() {
        let r = Retention::parse(&table(&[("minute", "1d")])).unwrap();
        let start = 1_795_132_800_000;
        let expires_ms = start + 60_000 + DAY_MS;
        // Surely whole: more than the margin before the first bucket expires.
        assert!(r.readable(Rollup::Minute, start, expires_ms - REPORT_MARGIN_MS - 1).is_ok());
        // Within the margin, or past it: refused, naming the retention.
        let why = r.readable(Rollup::Minute, start, expires_ms - REPORT_MARGIN_MS).unwrap_err();
        assert!(why.contains("minute items are kept 1d"), "{why}");
        assert!(r.readable(Rollup::Minute, start, expires_ms + DAY_MS).is_err());
        // A rollup kept forever reads any window.
        assert!(r.readable(Rollup::Hour, 0, i64::MAX / 2).is_ok());
        // A window starting inside a bucket is judged by that bucket.
        assert!(r.readable(Rollup::Minute, start + 59_999, expires_ms - REPORT_MARGIN_MS).is_err());
    }
}
