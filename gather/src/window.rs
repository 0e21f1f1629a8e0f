//! The time window of a report: `[start, end)` in ms since the epoch, UTC.
//!
//! - absolute: `--from` and `--to`, each RFC 3339 (`2026-11-21T10:00:00Z`),
//!   a UTC date (`2026-11-21`, its midnight), integer epoch milliseconds, or
//!   relative to now as Grafana writes it: `now`, `now-6h`, `now-1d/d`
//!   (`/UNIT` rounds down to the unit for `--from`, up for `--to`, so
//!   `--from now/d --to now/d` is today), `today` (`now/d`) and
//!   `yesterday` (`now-1d/d`). Both must lie on a boundary of the finest
//!   configured rollup (a minute by default): reports are exact, and a
//!   bucket cannot be split.
//! - relative: `--last 15m|1h|7d` ends at *now* rounded **up** to the grain
//!   (the `--step` when given, else the finest rollup's unit), so the bucket
//!   being written now is included, and starts that long before.
//!
//! Durations are an integer and a unit: `s`, `m`, `h`, `d`, `w`.

use crate::error::{GatherError, Result};
use chrono::NaiveDate;
use zigzag_core::schema::{format_instant, parse_instant, TimeUnit};

/// A half-open interval of instants, `[start, end)`, in ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub start: i64,
    pub end: i64,
}

impl Window {
    pub fn len_ms(&self) -> i64 {
        self.end - self.start
    }

    pub fn contains(&self, t: i64) -> bool {
        self.start <= t && t < self.end
    }
}

impl std::fmt::Display for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{}, {})", format_instant(self.start), format_instant(self.end))
    }
}

/// The window as the user gave it, before it is resolved against now and a grain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WindowSpec {
    Absolute { from: String, to: String },
    Last { text: String, ms: i64 },
}

impl WindowSpec {
    /// From the command-line options; exactly one of the two forms.
    pub fn from_args(from: Option<&str>, to: Option<&str>, last: Option<&str>) -> Result<WindowSpec> {
        match (from, to, last) {
            (None, None, Some(l)) => Ok(WindowSpec::Last { text: l.to_string(), ms: parse_duration("--last", l)? }),
            (Some(f), Some(t), None) => Ok(WindowSpec::Absolute { from: f.to_string(), to: t.to_string() }),
            (_, _, Some(l)) => Err(window_err("--last", l, "give either --last or --from/--to, not both")),
            (Some(f), None, None) => Err(window_err("--from", f, "needs --to as well")),
            (None, Some(t), None) => Err(window_err("--to", t, "needs --from as well")),
            (None, None, None) => Err(GatherError::NoWindow),
        }
    }

    /// The window's length at `now` (for defaults).
    pub fn len_ms(&self, now: i64) -> Result<i64> {
        match self {
            WindowSpec::Last { ms, .. } => Ok(*ms),
            WindowSpec::Absolute { .. } => {
                let (start, end) = self.ends(now)?;
                Ok(end - start)
            }
        }
    }

    /// The ends of an absolute window at `now`, parsed and in order (one
    /// error for the request, before any projection is planned).
    fn ends(&self, now: i64) -> Result<(i64, i64)> {
        let WindowSpec::Absolute { from, to } = self else { return Ok((0, 0)) };
        let start = parse_time_at("--from", from, now, Round::Down)?;
        let end = parse_time_at("--to", to, now, Round::Up)?;
        if end <= start {
            return Err(window_err("--to", to, &format!("is not after --from {from:?}")));
        }
        Ok((start, end))
    }

    /// Checks what can be checked without a rollup: the ends parse and are
    /// in order.
    pub fn validate(&self, now: i64) -> Result<()> {
        self.ends(now).map(|_| ())
    }

    /// Resolves to `[start, end)`. `finest` is the finest rollup unit (both
    /// ends must lie on its boundaries, unless `snap` moves them there);
    /// `grain` (a multiple of it) is what `--last` rounds now up to.
    pub fn resolve(&self, now: i64, finest: i64, grain: i64, snap: Option<Snap>) -> Result<Window> {
        let unit = format_duration(finest);
        match self {
            WindowSpec::Absolute { from, to } => {
                let (start, end) = self.ends(now)?;
                let window = match snap {
                    None => Window { start, end },
                    Some(s) => s.apply(start, end, finest),
                };
                if window.end <= window.start {
                    return Err(window_err(
                        "--snap",
                        "in",
                        &format!(
                            "no whole {unit} bucket lies inside [{}, {})",
                            format_instant(start),
                            format_instant(end)
                        ),
                    ));
                }
                for (arg, text, t) in [("--from", from, window.start), ("--to", to, window.end)] {
                    if t.rem_euclid(finest) != 0 {
                        let down = format_instant(t.div_euclid(finest) * finest);
                        let up = format_instant(t.div_euclid(finest) * finest + finest);
                        return Err(window_err(
                            arg,
                            text,
                            &format!(
                                "{} is not on a boundary of the finest rollup ({unit}); try {down} or {up}, or --snap \
                                 out (the {unit} buckets the window touches) or --snap in (those inside it)",
                                format_instant(t),
                            ),
                        ));
                    }
                }
                Ok(window)
            }
            WindowSpec::Last { text, ms } => {
                let ms = match snap {
                    _ if ms % finest == 0 => *ms,
                    None => {
                        return Err(window_err(
                            "--last",
                            text,
                            &format!(
                                "is not a whole number of {unit} (the finest rollup); give one, or --snap out (round \
                                 it up) or --snap in (down)"
                            ),
                        ))
                    }
                    Some(Snap::Out) => (ms.div_euclid(finest) + 1) * finest,
                    Some(Snap::In) if *ms >= finest => ms.div_euclid(finest) * finest,
                    Some(Snap::In) => {
                        return Err(window_err("--last", text, &format!("is shorter than one {unit} bucket")))
                    }
                };
                let end = now.div_euclid(grain) * grain + if now.rem_euclid(grain) == 0 { 0 } else { grain };
                Ok(Window { start: end - ms, end })
            }
        }
    }
}

/// How a window whose ends are off a projection's buckets may be read:
/// over the buckets it touches (`Out`, wider) or those inside it (`In`,
/// narrower). Only when the request says so: never silently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Snap {
    Out,
    In,
}

impl Snap {
    pub fn name(self) -> &'static str {
        match self {
            Snap::Out => "out",
            Snap::In => "in",
        }
    }

    /// `[start, end)` moved to `unit`'s edges.
    pub fn apply(self, start: i64, end: i64, unit: i64) -> Window {
        let down = |t: i64| t.div_euclid(unit) * unit;
        let up = |t: i64| down(t) + if t.rem_euclid(unit) == 0 { 0 } else { unit };
        match self {
            Snap::Out => Window { start: down(start), end: up(end) },
            Snap::In => Window { start: up(start), end: down(end) },
        }
    }
}

fn window_err(arg: &'static str, text: &str, why: &str) -> GatherError {
    GatherError::Window { arg, text: text.to_string(), why: why.to_string() }
}

/// Which way a relative instant's `/UNIT` rounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Round {
    Down,
    Up,
}

/// An instant: RFC 3339, a UTC date `YYYY-MM-DD`, integer epoch ms, or
/// relative to `now` (rounded down).
pub fn parse_time(arg: &'static str, text: &str, now: i64) -> Result<i64> {
    parse_time_at(arg, text, now, Round::Down)
}

/// [`parse_time`], a relative instant's `/UNIT` rounded as `round` says.
pub fn parse_time_at(arg: &'static str, text: &str, now: i64, round: Round) -> Result<i64> {
    if let Some(relative) = relative(text.trim(), now, round) {
        return relative.map_err(|why| window_err(arg, text, &why));
    }
    if let Some(t) = parse_instant(text, TimeUnit::Millisecond) {
        return Ok(t);
    }
    if let Ok(d) = NaiveDate::parse_from_str(text.trim(), "%Y-%m-%d") {
        if let Some(dt) = d.and_hms_opt(0, 0, 0) {
            return Ok(dt.and_utc().timestamp_millis());
        }
    }
    Err(window_err(
        arg,
        text,
        "expected RFC 3339 (2026-11-21T10:00:00Z), a date (2026-11-21), epoch milliseconds, or now-6h, now/d, today, \
         yesterday",
    ))
}

/// `now[±DURATION...][/UNIT]`, `today`, `yesterday` (Grafana's relative
/// times); None when `text` is not one.
fn relative(text: &str, now: i64, round: Round) -> Option<std::result::Result<i64, String>> {
    let text = match text {
        "today" => "now/d",
        "yesterday" => "now-1d/d",
        t => t,
    };
    let rest = text.strip_prefix("now")?;
    Some((|| {
        let (shifts, unit) = match rest.split_once('/') {
            Some((s, u)) => (s, Some(u)),
            None => (rest, None),
        };
        let mut t = now;
        let mut shifts = shifts.trim();
        while !shifts.is_empty() {
            let sign = match shifts.as_bytes()[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return Err(format!("expected + or - after now, at {shifts:?}")),
            };
            let body = &shifts[1..];
            if body.is_empty() {
                return Err("a duration must follow + or -".into());
            }
            let end = body[1..].find(['+', '-']).map_or(body.len(), |i| i + 1);
            let ms = parse_duration_ms(body[..end].trim())?;
            t = t.checked_add(sign * ms).ok_or("out of range")?;
            shifts = body[end..].trim();
        }
        if let Some(unit) = unit {
            let u = match unit.trim() {
                "s" => 1_000,
                "m" => 60_000,
                "h" => 3_600_000,
                "d" => 86_400_000,
                "w" => 7 * 86_400_000,
                other => return Err(format!("/{other}: round to s, m, h, d or w")),
            };
            // Weeks start on Monday (the epoch was a Thursday).
            let origin = if u == 7 * 86_400_000 { -3 * 86_400_000 } else { 0 };
            let down = (t - origin).div_euclid(u) * u + origin;
            t = match round {
                Round::Down => down,
                Round::Up if down == t => t,
                Round::Up => down + u,
            };
        }
        Ok(t)
    })())
}

fn parse_duration_ms(text: &str) -> std::result::Result<i64, String> {
    zigzag_core::duration::parse_positive(text)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .map_err(|e| format!("{text:?}: {}", e.why))
}

/// A positive duration in ms, by the one grammar (`zigzag_core::duration`:
/// `90s`, `15m`, `1h`, `7d`, `2w`; a number alone is seconds).
pub fn parse_duration(arg: &'static str, text: &str) -> Result<i64> {
    match zigzag_core::duration::parse_positive(text) {
        Ok(d) => Ok(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        Err(e) => Err(window_err(arg, text, e.why)),
    }
}

/// The shortest text of a duration: `5m`, `1h`, `36h`, `7d`, `1500ms`.
pub fn format_duration(ms: i64) -> String {
    zigzag_core::duration::format(std::time::Duration::from_millis(ms.max(0) as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: i64 = 60_000;
    const HOUR: i64 = 60 * MINUTE;
    const DAY: i64 = 24 * HOUR;

    const T: i64 = 1_763_719_200_000; // 2025-11-21T10:00:00Z

    #[test]
    fn durations() {
        assert_eq!(parse_duration("--last", "15m").unwrap(), 15 * MINUTE);
        assert_eq!(parse_duration("--last", "7d").unwrap(), 7 * DAY);
        assert_eq!(format_duration(36 * HOUR), "36h");
        assert_eq!(format_duration(14 * DAY), "2w");
        assert_eq!(parse_duration("--step", "90").unwrap(), 90_000, "a number alone is seconds");
        assert_eq!(parse_duration("--last", "1.5h").unwrap(), 90 * MINUTE);
        for bad in ["", "h", "1y", "0m", "-1h"] {
            let e = parse_duration("--last", bad).unwrap_err().to_string();
            assert!(e.contains("--last") && e.contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[test]
    fn absolute_windows_must_be_aligned() {
        let w = WindowSpec::from_args(Some("2025-11-21T10:00:00Z"), Some("2025-11-21"), None).unwrap();
        let e = w.resolve(0, MINUTE, MINUTE, None).unwrap_err().to_string();
        assert!(e.contains("--to") && e.contains("not after"), "{e}");
        let w = WindowSpec::from_args(Some("2025-11-21"), Some(&(T + 30_000).to_string()), None).unwrap();
        let e = w.resolve(0, MINUTE, MINUTE, None).unwrap_err().to_string();
        assert!(e.contains("--to") && e.contains("try 2025-11-21T10:00:00Z"), "{e}");
        let w = WindowSpec::from_args(Some("2025-11-21"), Some(&T.to_string()), None).unwrap();
        assert_eq!(w.resolve(0, MINUTE, HOUR, None).unwrap(), Window { start: T - 10 * HOUR, end: T });
        let e = WindowSpec::from_args(Some("tomorrow"), Some("2025-11-21"), None)
            .unwrap()
            .resolve(0, MINUTE, MINUTE, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--from \"tomorrow\"") && e.contains("now-6h"), "{e}");
    }

    #[test]
    fn relative_times_as_grafana_writes_them() {
        let now = T + 25 * MINUTE + 7_000; // 2025-11-21T10:25:07Z, a Friday
        let day = T - 10 * HOUR;
        let at = |text: &str, round| parse_time_at("--from", text, now, round).unwrap();
        assert_eq!(at("now", Round::Down), now);
        assert_eq!(at("now-6h", Round::Down), now - 6 * HOUR);
        assert_eq!(at("now-1d+2h", Round::Down), now - DAY + 2 * HOUR);
        assert_eq!(at("now/d", Round::Down), day);
        assert_eq!(at("now/d", Round::Up), day + DAY, "--to now/d: the end of today");
        assert_eq!(at("today", Round::Down), day);
        assert_eq!(at("yesterday", Round::Down), day - DAY);
        assert_eq!(at("yesterday", Round::Up), day, "--to yesterday: yesterday's end");
        assert_eq!(at("now/h", Round::Down), T);
        assert_eq!(at("now/w", Round::Down), day - 4 * DAY, "weeks start on Monday, 2025-11-17");
        let w = WindowSpec::from_args(Some("yesterday"), Some("yesterday"), None).unwrap();
        assert_eq!(w.resolve(now, MINUTE, MINUTE, None).unwrap(), Window { start: day - DAY, end: day });
        for bad in ["now*2", "now-", "now/y", "now-5x", "nowish"] {
            let e = parse_time_at("--from", bad, now, Round::Down).unwrap_err().to_string();
            assert!(e.contains("--from") && e.contains(&format!("{bad:?}")), "{bad}: {e}");
        }
    }

    #[test]
    fn last_rounds_now_up_to_the_grain() {
        let w = WindowSpec::from_args(None, None, Some("1h")).unwrap();
        assert_eq!(
            w.resolve(T + 1, MINUTE, MINUTE, None).unwrap(),
            Window { start: T + MINUTE - HOUR, end: T + MINUTE }
        );
        assert_eq!(w.resolve(T, MINUTE, MINUTE, None).unwrap(), Window { start: T - HOUR, end: T });
        assert_eq!(w.resolve(T + 1, MINUTE, DAY, None).unwrap().end, T + 14 * HOUR);
        let e = WindowSpec::from_args(None, None, Some("90s")).unwrap().resolve(T, MINUTE, MINUTE, None).unwrap_err();
        assert!(e.to_string().contains("whole number of 1m"), "{e}");
        assert!(WindowSpec::from_args(Some("a"), None, Some("1h")).is_err());
        let none = WindowSpec::from_args(None, None, None).unwrap_err().to_string();
        assert!(none.starts_with("no time window") && !none.contains("\"\""), "names what is missing: {none}");
    }

    #[test]
    fn snap_moves_the_ends_to_the_buckets_touched_or_inside_only_when_asked() {
        let w = WindowSpec::from_args(
            Some(&(T - DAY + 59 * MINUTE).to_string()),
            Some(&(T + 59 * MINUTE).to_string()),
            None,
        )
        .unwrap();
        let e = w.resolve(0, HOUR, HOUR, None).unwrap_err().to_string();
        assert!(e.contains("--from") && e.contains("--snap out") && e.contains("--snap in"), "{e}");
        assert_eq!(w.resolve(0, HOUR, HOUR, Some(Snap::Out)).unwrap(), Window { start: T - DAY, end: T + HOUR });
        assert_eq!(w.resolve(0, HOUR, HOUR, Some(Snap::In)).unwrap(), Window { start: T - DAY + HOUR, end: T });
        assert_eq!(w.resolve(0, MINUTE, MINUTE, Some(Snap::In)).unwrap(), w.resolve(0, MINUTE, MINUTE, None).unwrap());
        let short =
            WindowSpec::from_args(Some(&(T + MINUTE).to_string()), Some(&(T + 2 * MINUTE).to_string()), None).unwrap();
        let e = short.resolve(0, HOUR, HOUR, Some(Snap::In)).unwrap_err().to_string();
        assert!(e.contains("no whole 1h bucket"), "{e}");
        assert_eq!(short.resolve(0, HOUR, HOUR, Some(Snap::Out)).unwrap(), Window { start: T, end: T + HOUR });
        let last = WindowSpec::from_args(None, None, Some("90m")).unwrap();
        assert!(last.resolve(T + 1, HOUR, HOUR, None).unwrap_err().to_string().contains("--snap out"));
        assert_eq!(
            last.resolve(T + 1, HOUR, HOUR, Some(Snap::Out)).unwrap(),
            Window { start: T - HOUR, end: T + HOUR }
        );
        assert_eq!(last.resolve(T + 1, HOUR, HOUR, Some(Snap::In)).unwrap(), Window { start: T, end: T + HOUR });
    }
}
