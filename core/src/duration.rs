//! Durations: one grammar for every flag, setting and window of the three
//! binaries. A number, integer or decimal, and a unit: `ms`, `s`, `m`, `h`,
//! `d` (24 h) or `w` (7 d): `250ms`, `1.5s`, `10s`, `5m`, `2h`, `7d`, `2w`.
//! A number alone is seconds (`10`), as the flags of seconds always were.
//! Exact to the nanosecond (decimals are not floats); whether zero is
//! allowed is the caller's rule ([`parse_positive`]).

use std::time::Duration;
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("duration {text:?}: {why}")]
pub struct DurationError {
    pub text: String,
    pub why: &'static str,
}

const UNITS: [(&str, u128); 6] = [
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
    ("d", 86_400_000_000_000),
    ("w", 604_800_000_000_000),
];

/// Parses a duration (zero allowed).
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    let err = |why| DurationError { text: text.to_string(), why };
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let unit_ns =
        match unit.trim() {
            "" => 1_000_000_000,
            u => UNITS.iter().find(|(name, _)| *name == u).map(|(_, ns)| *ns).ok_or_else(|| {
                err("expected a number and a unit (ms, s, m, h, d, w), like 250ms, 10s, 5m, 1h or 7d")
            })?,
        };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() && fraction.is_empty() || !digits(whole) || !digits(fraction) {
        return Err(err("expected a number and a unit (ms, s, m, h, d, w), like 250ms, 10s, 5m, 1h or 7d"));
    }
    let too_long = || err("is too long");
    let whole: u128 = if whole.is_empty() { 0 } else { whole.parse().map_err(|_| too_long())? };
    let mut ns = whole.checked_mul(unit_ns).ok_or_else(too_long)?;
    // Each decimal digit is a tenth of the one before it; digits below a
    // nanosecond are refused rather than rounded.
    let mut scale = unit_ns;
    for b in fraction.bytes() {
        if scale % 10 != 0 {
            return Err(err("is finer than a nanosecond"));
        }
        scale /= 10;
        ns += u128::from(b - b'0') * scale;
    }
    let secs = u64::try_from(ns / 1_000_000_000).map_err(|_| too_long())?;
    if secs > 100 * 366 * 86_400 {
        return Err(too_long());
    }
    Ok(Duration::new(secs, (ns % 1_000_000_000) as u32))
}

/// Parses a duration that must be longer than zero.
pub fn parse_positive(text: &str) -> Result<Duration, DurationError> {
    match parse(text)? {
        d if d.is_zero() => Err(DurationError { text: text.to_string(), why: "must be longer than zero" }),
        d => Ok(d),
    }
}

/// The shortest text [`parse`] reads back as `d`: `5m`, `1h`, `36h`, `7d`,
/// `1500ms`, `1.5ms`, `0s`.
pub fn format(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".into();
    }
    for (name, unit) in UNITS.iter().rev() {
        if ns.is_multiple_of(*unit) {
            return format!("{}{name}", ns / unit);
        }
    }
    let (ms, rest) = (ns / 1_000_000, ns % 1_000_000);
    format!("{ms}.{}ms", format!("{rest:06}").trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn every_unit_and_a_bare_number() {
        let ms = Duration::from_millis;
        for (text, want) in [
            ("250ms", ms(250)),
            ("10", ms(10_000)),
            ("10s", ms(10_000)),
            (" 1.5s ", ms(1_500)),
            ("0.25", ms(250)),
            (".5m", ms(30_000)),
            ("5m", ms(300_000)),
            ("2h", ms(7_200_000)),
            ("7d", ms(604_800_000)),
            ("2w", ms(1_209_600_000)),
            ("0s", ms(0)),
            ("1.000001ms", Duration::from_nanos(1_000_001)),
        ] {
            assert_eq!(parse(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn bad_input_is_named_in_the_error() {
        for text in ["", "s", "5x", "-5s", "1e3s", "1.2.3s", "5 m s", "1.0000000001s", "99999999999999999999999999w"] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.text, text);
            assert!(e.to_string().starts_with(&format!("duration {text:?}: ")), "{e}");
        }
        assert_eq!(parse_positive("0m").unwrap_err().why, "must be longer than zero");
        assert_eq!(parse_positive("1ms"), Ok(Duration::from_millis(1)));
    }

    proptest! {
        #[test]
        fn format_reads_back(ns in 0u64..(200 * 86_400_000_000_000)) {
            let d = Duration::from_nanos(ns);
            prop_assert_eq!(parse(&format(d)), Ok(d));
        }
    }

    #[test]
    fn format_is_the_shortest_unit() {
        let ms = Duration::from_millis;
        assert_eq!(format(ms(300_000)), "5m");
        assert_eq!(format(ms(129_600_000)), "36h");
        assert_eq!(format(ms(604_800_000)), "1w");
        assert_eq!(format(ms(1_500)), "1500ms");
        assert_eq!(format(Duration::from_nanos(1_500_000)), "1.5ms");
    }
}
