//! Clap value parsers over the one duration grammar
//! (`zigzag_core::duration`: `250ms`, `10s`, `5m`, `1h`, `7d`, `2w`; a
//! number alone is seconds).

use std::time::Duration;

/// A duration longer than zero (`--failover`, `--aws-timeout`, ...).
pub fn positive(text: &str) -> Result<Duration, String> {
    zigzag_core::duration::parse_positive(text).map_err(|e| e.to_string())
}

/// A duration, zero allowed (`--jitter 0s`).
pub fn any(text: &str) -> Result<Duration, String> {
    zigzag_core::duration::parse(text).map_err(|e| e.to_string())
}

/// Milliseconds, as the libraries count event time.
pub fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
