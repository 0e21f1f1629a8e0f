//! Request parameters as Prometheus reads them: from the URL's query and a
//! form body alike (the body's win), repeated names kept (`match[]`);
//! instants as RFC 3339 or float seconds; durations as float seconds or
//! PromQL durations (`60`, `1m`, `1h30m`).

use crate::error::{Result, ServeError};

/// Every `name=value` of a request, in order.
#[derive(Debug, Clone, Default)]
pub struct Params(Vec<(String, String)>);

impl Params {
    /// From the URL's query string and an `application/x-www-form-urlencoded` body.
    pub fn new(query: Option<&str>, body: &[u8]) -> Params {
        let mut pairs: Vec<(String, String)> = form_urlencoded::parse(body).into_owned().collect();
        pairs.extend(form_urlencoded::parse(query.unwrap_or("").as_bytes()).into_owned());
        Params(pairs)
    }

    /// The first value of `name` (the body's, when both have one).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    pub fn all(&self, name: &str) -> Vec<&str> {
        self.0.iter().filter(|(k, _)| k == name).map(|(_, v)| v.as_str()).collect()
    }

    pub fn required(&self, name: &str) -> Result<&str> {
        self.get(name).ok_or_else(|| ServeError::BadData(format!("missing parameter '{name}'")))
    }

    /// An instant parameter in ms (None when absent).
    pub fn time(&self, name: &str) -> Result<Option<i64>> {
        self.get(name).map(|v| parse_time(v).map_err(|why| bad(name, v, &why))).transpose()
    }

    /// A duration parameter in ms (None when absent).
    pub fn duration(&self, name: &str) -> Result<Option<i64>> {
        self.get(name).map(|v| parse_duration(v).map_err(|why| bad(name, v, &why))).transpose()
    }
}

fn bad(name: &str, value: &str, why: &str) -> ServeError {
    ServeError::BadData(format!("invalid parameter '{name}': cannot parse {value:?} {why}"))
}

/// The range Prometheus allows an instant in (its `minTime`/`maxTime`,
/// rounded to what fits in ms here).
const MIN_MS: i64 = -9_223_372_036_854_775 + 1;
const MAX_MS: i64 = 9_223_372_036_854_775 - 1;

/// RFC 3339, or seconds since the epoch with an optional fraction.
pub fn parse_time(v: &str) -> std::result::Result<i64, String> {
    let v = v.trim();
    if let Ok(s) = v.parse::<f64>() {
        if !s.is_finite() {
            return Err("to a valid timestamp".into());
        }
        let ms = (s * 1000.0).round();
        if ms < MIN_MS as f64 || ms > MAX_MS as f64 {
            return Err("to a valid timestamp: out of range".into());
        }
        return Ok(ms as i64);
    }
    chrono::DateTime::parse_from_rfc3339(v)
        .map(|t| t.timestamp_millis())
        .map_err(|_| "to a valid timestamp (RFC 3339 or seconds since the epoch)".into())
}

/// Float seconds, or a PromQL duration (`5m`, `1h30m`, `500ms`).
pub fn parse_duration(v: &str) -> std::result::Result<i64, String> {
    let v = v.trim();
    if let Ok(s) = v.parse::<f64>() {
        if !s.is_finite() || s * 1000.0 > i64::MAX as f64 || s * 1000.0 < i64::MIN as f64 {
            return Err("to a valid duration: out of range".into());
        }
        return Ok((s * 1000.0).round() as i64);
    }
    promql_parser::util::parse_duration(v)
        .ok()
        .and_then(|d| i64::try_from(d.as_millis()).ok())
        .ok_or_else(|| "to a valid duration (seconds, or 30s, 1m, 1h30m)".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_and_durations_as_prometheus_takes_them() {
        assert_eq!(parse_time("1700000000"), Ok(1_700_000_000_000));
        assert_eq!(parse_time("1700000000.123"), Ok(1_700_000_000_123));
        assert_eq!(parse_time("2023-11-14T22:13:20Z"), Ok(1_700_000_000_000));
        assert_eq!(parse_time("2023-11-14T22:13:20.5+00:00"), Ok(1_700_000_000_500));
        assert!(parse_time("yesterday").is_err() && parse_time("NaN").is_err() && parse_time("1e300").is_err());
        assert_eq!(parse_duration("60"), Ok(60_000));
        assert_eq!(parse_duration("1m"), Ok(60_000));
        assert_eq!(parse_duration("1h30m"), Ok(5_400_000));
        assert_eq!(parse_duration("0.5"), Ok(500));
        assert!(parse_duration("soon").is_err() && parse_duration("inf").is_err());
    }

    #[test]
    fn the_body_wins_and_repeats_are_kept() {
        let p = Params::new(Some("query=up&match[]=a&match[]=b"), b"query=1%2B1");
        assert_eq!(p.get("query"), Some("1+1"));
        assert_eq!(p.all("match[]"), ["a", "b"]);
        assert!(p.required("step").unwrap_err().to_string().contains("'step'"));
        assert!(p.time("query").is_err());
    }
}
