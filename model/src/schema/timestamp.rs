//! Event times: text in a field's declared format → milliseconds since the
//! Unix epoch, UTC (floored: finer units never round up into the next
//! millisecond).
//!
//! RFC 3339 in the form nearly every producer writes
//! (`2026-11-21T10:15:30.250Z`, `…+01:00`) is read by a direct parser;
//! every other form RFC 3339 allows (`t` or a space for `T`, a leap
//! second, more than nine fraction digits…) goes to chrono's. The direct
//! parser accepts a subset of what chrono does and gives the same instant
//! (tested against it): chrono's general parser was a tenth of decoding.

use super::decimal::decimal_units;
use super::{TimeFormat, ValueError};
use chrono::format::{Item, Parsed, StrftimeItems};
use chrono::DateTime;

/// `text` in `format` (`pattern`: a pattern format's items, parsed once).
pub(super) fn timestamp(
    format: &TimeFormat,
    pattern: Option<&[Item<'static>]>,
    text: &str,
    quoted: bool,
) -> Result<i64, ValueError> {
    let bad = || ValueError::BadTimestamp { value: text.to_string(), format: format_name(format) };
    let epoch = |scale: u32, per_ms: i64| -> Result<i64, ValueError> {
        // Seconds may carry a fraction (to the millisecond); finer units
        // are whole numbers, floored to the millisecond.
        let units = decimal_units(text, scale).map_err(|_| bad())?;
        Ok(units.div_euclid(per_ms))
    };
    match format {
        TimeFormat::Auto if quoted && !text.bytes().all(|b| b.is_ascii_digit()) => rfc3339(text).ok_or_else(bad),
        TimeFormat::Auto => text.parse::<i64>().map_err(|_| bad()),
        TimeFormat::Rfc3339 => rfc3339(text).ok_or_else(bad),
        TimeFormat::EpochS => epoch(3, 1),
        TimeFormat::EpochMs => epoch(0, 1),
        TimeFormat::EpochUs => epoch(0, 1_000),
        TimeFormat::EpochNs => epoch(0, 1_000_000),
        TimeFormat::Pattern(p) => {
            // One parse; then the instant it names with its zone, or, when
            // the pattern has none, as UTC.
            let mut parsed = Parsed::new();
            match pattern {
                Some(items) => chrono::format::parse(&mut parsed, text, items.iter()),
                None => chrono::format::parse(&mut parsed, text, StrftimeItems::new(p)),
            }
            .map_err(|_| bad())?;
            match parsed.to_datetime() {
                Ok(t) => Ok(t.timestamp_millis()),
                Err(_) => {
                    parsed.to_naive_datetime_with_offset(0).map(|t| t.and_utc().timestamp_millis()).map_err(|_| bad())
                }
            }
        }
    }
}

/// RFC 3339 text as epoch milliseconds.
pub fn rfc3339(text: &str) -> Option<i64> {
    common_rfc3339(text.as_bytes()).or_else(|| DateTime::parse_from_rfc3339(text).ok().map(|t| t.timestamp_millis()))
}

/// `YYYY-MM-DDTHH:MM:SS[.F{1,9}](Z|±HH:MM)`, or None for anything else
/// (which may still be RFC 3339: chrono decides).
fn common_rfc3339(t: &[u8]) -> Option<i64> {
    let two = |i: usize| -> Option<i64> {
        let (a, b) = (t.get(i)?.wrapping_sub(b'0'), t.get(i + 1)?.wrapping_sub(b'0'));
        (a < 10 && b < 10).then_some(i64::from(a) * 10 + i64::from(b))
    };
    let punctuated = t.len() >= 20 && t[4] == b'-' && t[7] == b'-' && t[10] == b'T' && t[13] == b':' && t[16] == b':';
    if !punctuated {
        return None;
    }
    let (year, month, day) = (two(0)? * 100 + two(2)?, two(5)?, two(8)?);
    let (hour, minute, second) = (two(11)?, two(14)?, two(17)?);
    let valid = (1..=12).contains(&month)
        && (1..=days_in_month(year, month)).contains(&day)
        && hour < 24
        && minute < 60
        && second < 60;
    if !valid {
        return None;
    }
    let mut i = 19;
    let mut millis = 0;
    if t[i] == b'.' {
        let start = i + 1;
        i = start;
        while t.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if !(1..=9).contains(&(i - start)) {
            return None;
        }
        // The first three digits, zero-padded: the rest is below a millisecond.
        millis = t[start..i].iter().chain(b"000").take(3).fold(0, |ms, d| ms * 10 + i64::from(d - b'0'));
    }
    let offset_minutes = match &t[i..] {
        [b'Z'] => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let (h, m) = (two(i + 1)?, two(i + 4)?);
            if h > 23 || m > 59 {
                return None;
            }
            if *sign == b'-' {
                -(h * 60 + m)
            } else {
                h * 60 + m
            }
        }
        _ => return None,
    };
    let seconds = days_from_civil(year, month, day) * 86_400 + hour * 3_600 + minute * 60 + second;
    Some((seconds - offset_minutes * 60) * 1_000 + millis)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        _ => 31,
    }
}

/// Days from 1970-01-01 to a proleptic Gregorian date (counting years
/// from March, so the leap day is the last of its year).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

pub fn format_name(format: &TimeFormat) -> String {
    match format {
        TimeFormat::Auto => "RFC 3339 or epoch ms".into(),
        TimeFormat::Rfc3339 => "RFC 3339".into(),
        TimeFormat::EpochS => "epoch seconds".into(),
        TimeFormat::EpochMs => "epoch milliseconds".into(),
        TimeFormat::EpochUs => "epoch microseconds".into(),
        TimeFormat::EpochNs => "epoch nanoseconds".into(),
        TimeFormat::Pattern(p) => format!("pattern {p:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn chrono_ms(text: &str) -> Option<i64> {
        DateTime::parse_from_rfc3339(text).ok().map(|t| t.timestamp_millis())
    }

    #[test]
    fn the_common_form_is_read_directly() {
        assert_eq!(common_rfc3339(b"2026-11-21T10:15:30.250Z"), Some(1_795_256_130_250));
        assert_eq!(common_rfc3339(b"2026-11-21T11:15:30.2509+01:00"), Some(1_795_256_130_250));
        assert_eq!(common_rfc3339(b"1969-12-31T23:59:59.999Z"), Some(-1), "before the epoch: floored");
        assert_eq!(common_rfc3339(b"2024-02-29T00:00:00Z"), chrono_ms("2024-02-29T00:00:00Z"));
        for other in
            ["2026-11-21t10:15:30Z", "2026-11-21 10:15:30Z", "2016-12-31T23:59:60Z", "2026-11-21T10:15:30.1234567891Z"]
        {
            assert_eq!(common_rfc3339(other.as_bytes()), None, "{other}: chrono's to read");
            assert_eq!(rfc3339(other), chrono_ms(other), "{other}");
        }
        for bad in [
            "2023-02-29T00:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-11-21T24:00:00Z",
            "2026-11-21T10:15:30.Z",
            "2026-11-21T10:15:30+24:00",
            "2026-11-21T10:15:30",
        ] {
            assert_eq!(rfc3339(bad), None, "{bad}");
        }
    }

    proptest! {
        /// Wherever the direct parser reads a text, chrono reads the same
        /// instant; and whatever the text, the answer is chrono's.
        #[test]
        fn agrees_with_chrono(
            date in (0u32..10_000, 0u32..14, 0u32..33),
            time in (0u32..26, 0u32..62, 0u32..62),
            fraction in proptest::option::of("[0-9]{0,11}"),
            zone in prop_oneof![Just("Z".to_string()), Just("z".to_string()), (prop_oneof![Just('+'), Just('-')], 0u32..26, 0u32..62).prop_map(|(s, h, m)| format!("{s}{h:02}:{m:02}"))],
            sep in prop_oneof![Just('T'), Just('t'), Just(' ')],
        ) {
            let (y, mo, d) = date;
            let (h, mi, s) = time;
            let fraction = fraction.map(|f| format!(".{f}")).unwrap_or_default();
            let text = format!("{y:04}-{mo:02}-{d:02}{sep}{h:02}:{mi:02}:{s:02}{fraction}{zone}");
            if let Some(ms) = common_rfc3339(text.as_bytes()) {
                prop_assert_eq!(Some(ms), chrono_ms(&text), "{}", text);
            }
            prop_assert_eq!(rfc3339(&text), chrono_ms(&text), "{}", text);
        }
    }
}
