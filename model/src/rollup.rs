//! Rollup granularities. Each rollup has its own partition time bin (so a
//! partition holds a bounded number of buckets) and a time dimension of just
//! enough bits for the bucket's offset within that bin.

use serde::{Deserialize, Serialize};
use std::fmt;
use zigzag_core::schema::{TimeBin, TimeUnit};

/// The item attribute of a bucket's start (ms since the epoch): every
/// aggregate item of every rollup carries it.
pub const TIME_ATTR: &str = "t";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rollup {
    Minute,
    Hour,
    Day,
}

impl Rollup {
    pub const ALL: [Rollup; 3] = [Rollup::Minute, Rollup::Hour, Rollup::Day];

    pub fn name(self) -> &'static str {
        match self {
            Rollup::Minute => "minute",
            Rollup::Hour => "hour",
            Rollup::Day => "day",
        }
    }

    pub fn parse(text: &str) -> Option<Rollup> {
        Rollup::ALL.into_iter().find(|r| r.name() == text)
    }

    pub fn unit(self) -> TimeUnit {
        match self {
            Rollup::Minute => TimeUnit::Minute,
            Rollup::Hour => TimeUnit::Hour,
            Rollup::Day => TimeUnit::Day,
        }
    }

    pub fn unit_ms(self) -> i64 {
        self.unit().millis()
    }

    /// The partition time bin: a day of minutes (1,440), a month of hours
    /// (≤ 744), a month of days (≤ 31).
    pub fn bin(self) -> TimeBin {
        match self {
            Rollup::Minute => TimeBin::Day,
            Rollup::Hour | Rollup::Day => TimeBin::Month,
        }
    }

    /// Bits of the time-within-bin dimension.
    pub fn time_bits(self) -> u32 {
        let buckets = (self.bin().max_len_ms() / self.unit_ms()) as u64;
        64 - (buckets - 1).leading_zeros()
    }

    /// Start of the bucket holding `ts_ms` (UTC; Unix time has no leap
    /// seconds, so flooring milliseconds is exact).
    #[inline]
    pub fn floor(self, ts_ms: i64) -> i64 {
        ts_ms.div_euclid(self.unit_ms()) * self.unit_ms()
    }
}

impl fmt::Display for Rollup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_fit_the_bins() {
        assert_eq!(Rollup::Minute.time_bits(), 11); // 1440 minutes
        assert_eq!(Rollup::Hour.time_bits(), 10); // 744 hours
        assert_eq!(Rollup::Day.time_bits(), 5); // 31 days
    }

    #[test]
    fn floors_in_utc() {
        let t = 1_700_000_123_456; // 2023-11-14T22:15:23.456Z
        assert_eq!(Rollup::Minute.floor(t), 1_700_000_100_000);
        assert_eq!(Rollup::Hour.floor(t), 1_699_999_200_000);
        assert_eq!(Rollup::Day.floor(t), 1_699_920_000_000);
        assert_eq!(Rollup::Minute.floor(-1), -60_000, "before the epoch floors down");
    }
}
