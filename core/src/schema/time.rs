//! Timestamps for the Z-index: a unit, and either an origin (absolute
//! offsets) or a partition time bin (offsets from the start of the value's
//! bin; the bin itself goes into the partition key).
//!
//! Instants are `i64` milliseconds since the Unix epoch, UTC.

use chrono::{DateTime, Datelike, NaiveDate, TimeZone, Utc};
use serde::Deserialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeUnit {
    Millisecond,
    Second,
    Minute,
    Hour,
    Day,
}

impl TimeUnit {
    pub fn millis(self) -> i64 {
        match self {
            TimeUnit::Millisecond => 1,
            TimeUnit::Second => 1_000,
            TimeUnit::Minute => 60_000,
            TimeUnit::Hour => 3_600_000,
            TimeUnit::Day => 86_400_000,
        }
    }
}

/// A partition time bin. Weeks start on Monday 00:00 UTC; months are
/// calendar months.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeBin {
    Hour,
    Day,
    Week,
    Month,
}

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;
/// 1970-01-05 was a Monday.
const FIRST_MONDAY_MS: i64 = 4 * DAY_MS;

impl TimeBin {
    /// Start of the bin holding `t` (ms since epoch).
    pub fn start_of(self, t: i64) -> i64 {
        match self {
            TimeBin::Hour => t.div_euclid(HOUR_MS) * HOUR_MS,
            TimeBin::Day => t.div_euclid(DAY_MS) * DAY_MS,
            TimeBin::Week => (t - FIRST_MONDAY_MS).div_euclid(7 * DAY_MS) * 7 * DAY_MS + FIRST_MONDAY_MS,
            TimeBin::Month => {
                let dt = Utc.timestamp_millis_opt(t).single().unwrap_or_default();
                month_start(dt.year(), dt.month())
            }
        }
    }

    /// Start of the bin after the one starting at `start`.
    pub fn next_start(self, start: i64) -> i64 {
        match self {
            TimeBin::Hour => start + HOUR_MS,
            TimeBin::Day => start + DAY_MS,
            TimeBin::Week => start + 7 * DAY_MS,
            TimeBin::Month => {
                let dt = Utc.timestamp_millis_opt(start).single().unwrap_or_default();
                let (y, m) = if dt.month() == 12 { (dt.year() + 1, 1) } else { (dt.year(), dt.month() + 1) };
                month_start(y, m)
            }
        }
    }

    /// Longest bin, in milliseconds.
    pub fn max_len_ms(self) -> i64 {
        match self {
            TimeBin::Hour => HOUR_MS,
            TimeBin::Day => DAY_MS,
            TimeBin::Week => 7 * DAY_MS,
            TimeBin::Month => 31 * DAY_MS,
        }
    }

    /// A readable, sortable label of the bin starting at `start`.
    pub fn label(self, start: i64) -> String {
        let dt = Utc.timestamp_millis_opt(start).single().unwrap_or_default();
        match self {
            TimeBin::Hour => dt.format("%Y-%m-%dT%H").to_string(),
            TimeBin::Day | TimeBin::Week => dt.format("%Y-%m-%d").to_string(),
            TimeBin::Month => dt.format("%Y-%m").to_string(),
        }
    }
}

fn month_start(year: i32, month: u32) -> i64 {
    NaiveDate::from_ymd_opt(year, month, 1)
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|d| d.and_utc().timestamp_millis())
        .unwrap_or_default()
}

/// Parses an RFC 3339 instant or an integer epoch in `epoch_unit`.
pub fn parse_instant(text: &str, epoch_unit: TimeUnit) -> Option<i64> {
    let text = text.trim();
    if let Ok(n) = text.parse::<i64>() {
        return n.checked_mul(epoch_unit.millis());
    }
    DateTime::parse_from_rfc3339(text).ok().map(|d| d.timestamp_millis())
}

/// RFC 3339 text of an instant (for messages and reports).
pub fn format_instant(t: i64) -> String {
    Utc.timestamp_millis_opt(t)
        .single()
        .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
        .unwrap_or_else(|| format!("{t} ms"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins() {
        let t = parse_instant("2016-02-17T12:34:56Z", TimeUnit::Second).unwrap();
        assert_eq!(format_instant(TimeBin::Hour.start_of(t)), "2016-02-17T12:00:00Z");
        assert_eq!(format_instant(TimeBin::Day.start_of(t)), "2016-02-17T00:00:00Z");
        assert_eq!(format_instant(TimeBin::Week.start_of(t)), "2016-02-15T00:00:00Z"); // Monday
        assert_eq!(format_instant(TimeBin::Month.start_of(t)), "2016-02-01T00:00:00Z");
        let m = TimeBin::Month.start_of(t);
        assert_eq!(format_instant(TimeBin::Month.next_start(m)), "2016-03-01T00:00:00Z");
        let dec = parse_instant("2015-12-31T23:00:00Z", TimeUnit::Second).unwrap();
        assert_eq!(format_instant(TimeBin::Month.next_start(TimeBin::Month.start_of(dec))), "2016-01-01T00:00:00Z");
        assert_eq!(TimeBin::Week.label(TimeBin::Week.start_of(t)), "2016-02-15");
        // Before the epoch rounds down, not toward zero.
        assert_eq!(TimeBin::Day.start_of(-1), -DAY_MS);
    }

    #[test]
    fn parse() {
        assert_eq!(parse_instant("1455710400", TimeUnit::Second), Some(1_455_710_400_000));
        assert_eq!(parse_instant("1455710400000", TimeUnit::Millisecond), Some(1_455_710_400_000));
        assert_eq!(parse_instant("2016-02-17T12:00:00+01:00", TimeUnit::Second), Some(1_455_706_800_000));
        assert_eq!(parse_instant("yesterday", TimeUnit::Second), None);
    }
}
