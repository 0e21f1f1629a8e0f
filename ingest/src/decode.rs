//! Decode: one record's bytes → a validated [`Event`], or a typed reason why
//! not (which the pipeline dead-letters with the shard and sequence number).
//!
//! A record is one JSON object: `type` (`click` | `impression`), `ts`
//! (RFC 3339 text or integer epoch milliseconds), `referrer`, `campaign`,
//! `country`, `url`, optional `cost` (a non-negative number), optional
//! `user_id`; other fields are ignored. Strings borrow from the record when
//! they hold no escapes.

use chrono::DateTime;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use thiserror::Error;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    Click,
    Impression,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Event<'a> {
    pub kind: EventType,
    /// Milliseconds since the Unix epoch, UTC.
    pub ts_ms: i64,
    pub referrer: Cow<'a, str>,
    pub campaign: Cow<'a, str>,
    pub country: Cow<'a, str>,
    pub url: Cow<'a, str>,
    pub cost: Option<f64>,
    pub user_id: Option<Cow<'a, str>>,
}

/// Limits on what a record may be.
#[derive(Debug, Clone, Copy)]
pub struct DecodeLimits {
    /// Larger records are rejected unread (Kinesis allows 1 MiB).
    pub max_bytes: usize,
    /// Accepted event times, `[min, max)` in ms since the epoch.
    pub min_ts_ms: i64,
    pub max_ts_ms: i64,
    /// Longest text field, in bytes: a longer value would make an item
    /// DynamoDB refuses (400 KB) or bills by the kilobyte.
    pub max_field_bytes: usize,
}

impl Default for DecodeLimits {
    fn default() -> Self {
        DecodeLimits {
            max_bytes: 1 << 20,
            min_ts_ms: 946_684_800_000,   // 2000-01-01T00:00:00Z
            max_ts_ms: 4_102_444_800_000, // 2100-01-01T00:00:00Z
            max_field_bytes: 256,
        }
    }
}

/// Why a record is not an event. Every variant names what was wrong.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum DecodeError {
    #[error("record of {bytes} bytes exceeds the {max}-byte limit")]
    Oversize { bytes: usize, max: usize },
    #[error("not UTF-8 (invalid byte at offset {offset})")]
    NotUtf8 { offset: usize },
    #[error("malformed JSON at line {line}, column {column}: {message}")]
    Json { line: usize, column: usize, message: String },
    #[error("missing field `{0}`")]
    Missing(&'static str),
    #[error("field `{field}`: expected {expected}, got {got}")]
    WrongType { field: &'static str, expected: &'static str, got: &'static str },
    #[error("field `type`: {0:?} is neither \"click\" nor \"impression\"")]
    UnknownType(String),
    #[error("field `ts`: {0:?} is neither RFC 3339 nor integer epoch milliseconds")]
    BadTimestamp(String),
    #[error("field `ts`: {ts_ms} ms is outside the accepted range {min}..{max}")]
    TimestampOutOfRange { ts_ms: i64, min: i64, max: i64 },
    #[error("field `{field}` is empty")]
    Empty { field: &'static str },
    #[error("field `cost`: {0} is not a finite, non-negative number")]
    BadCost(String),
    #[error("field `cost`: {0} is too large to sum exactly (micro-units above 9e18)")]
    CostOutOfRange(String),
    #[error("field `{field}`: {bytes} bytes exceeds the {max}-byte limit")]
    FieldTooLong { field: &'static str, bytes: usize, max: usize },
}

impl DecodeError {
    /// A short stable label for metrics (`decode_errors{reason=...}`).
    pub fn reason(&self) -> &'static str {
        match self {
            DecodeError::Oversize { .. } => "oversize",
            DecodeError::NotUtf8 { .. } => "not_utf8",
            DecodeError::Json { .. } => "malformed_json",
            DecodeError::Missing(_) => "missing_field",
            DecodeError::WrongType { .. } => "wrong_type",
            DecodeError::UnknownType(_) => "unknown_type",
            DecodeError::BadTimestamp(_) => "bad_timestamp",
            DecodeError::TimestampOutOfRange { .. } => "timestamp_out_of_range",
            DecodeError::Empty { .. } => "empty_field",
            DecodeError::BadCost(_) => "bad_cost",
            DecodeError::CostOutOfRange(_) => "cost_out_of_range",
            DecodeError::FieldTooLong { .. } => "field_too_long",
        }
    }
}

/// The record in one pass: text fields are parsed where they stand
/// (borrowed unless escaped); `ts` and `cost` stay raw so their errors can
/// quote the literal (e.g. `1e999`, which no float holds).
#[derive(Deserialize)]
struct Raw<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Text<'a>,
    #[serde(borrow)]
    ts: Option<&'a RawValue>,
    #[serde(borrow, default)]
    referrer: Text<'a>,
    #[serde(borrow, default)]
    campaign: Text<'a>,
    #[serde(borrow, default)]
    country: Text<'a>,
    #[serde(borrow, default)]
    url: Text<'a>,
    #[serde(borrow)]
    cost: Option<&'a RawValue>,
    #[serde(borrow, default)]
    user_id: Text<'a>,
}

/// A field expected to hold text: the text, or what it held instead.
#[derive(Debug, Default)]
enum Text<'a> {
    #[default]
    Absent,
    Str(Cow<'a, str>),
    /// Another JSON type (its description, e.g. "a number").
    Other(&'static str),
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Text<'a>, E> {
                Ok(Text::Str(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Text<'a>, E> {
                Ok(Text::Str(Cow::Owned(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<Text<'a>, E> {
                Ok(Text::Str(Cow::Owned(v)))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Text<'a>, E> {
                Ok(Text::Other("a boolean"))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Text<'a>, E> {
                Ok(Text::Other("a number"))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Text<'a>, E> {
                Ok(Text::Other("a number"))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Text<'a>, E> {
                Ok(Text::Other("a number"))
            }
            fn visit_unit<E>(self) -> Result<Text<'a>, E> {
                Ok(Text::Other("null"))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Text<'a>, A::Error> {
                while m.next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?.is_some() {}
                Ok(Text::Other("an object"))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut s: A) -> Result<Text<'a>, A::Error> {
                while s.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(Text::Other("an array"))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

fn kind_of(raw: &RawValue) -> &'static str {
    match raw.get().as_bytes().first() {
        Some(b'"') => "a string",
        Some(b'{') => "an object",
        Some(b'[') => "an array",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        _ => "a number",
    }
}

/// A JSON string, borrowed when it has no escapes.
fn string<'a>(field: &'static str, raw: &'a RawValue) -> Result<Cow<'a, str>, DecodeError> {
    let text = raw.get();
    let wrong = || DecodeError::WrongType { field, expected: "a string", got: kind_of(raw) };
    if !text.starts_with('"') {
        return Err(wrong());
    }
    let inner = &text[1..text.len() - 1];
    if !inner.contains('\\') {
        return Ok(Cow::Borrowed(inner));
    }
    serde_json::from_str::<String>(text).map(Cow::Owned).map_err(|_| wrong())
}

fn required<'a>(field: &'static str, text: Text<'a>) -> Result<Cow<'a, str>, DecodeError> {
    match text {
        Text::Absent => Err(DecodeError::Missing(field)),
        Text::Other(got) => Err(DecodeError::WrongType { field, expected: "a string", got }),
        Text::Str(s) if s.is_empty() => Err(DecodeError::Empty { field }),
        Text::Str(s) => Ok(s),
    }
}

fn optional<'a>(field: &'static str, text: Text<'a>) -> Result<Option<Cow<'a, str>>, DecodeError> {
    match text {
        Text::Absent | Text::Other("null") => Ok(None),
        Text::Other(got) => Err(DecodeError::WrongType { field, expected: "a string", got }),
        Text::Str(s) => Ok(Some(s)),
    }
}

fn present(raw: Option<&RawValue>) -> Option<&RawValue> {
    raw.filter(|r| r.get() != "null")
}

fn timestamp(raw: &RawValue, limits: &DecodeLimits) -> Result<i64, DecodeError> {
    let text = raw.get();
    let ts_ms = if text.starts_with('"') {
        let s = string("ts", raw)?;
        DateTime::parse_from_rfc3339(&s).map_err(|_| DecodeError::BadTimestamp(s.to_string()))?.timestamp_millis()
    } else {
        text.parse::<i64>().map_err(|_| match kind_of(raw) {
            "a number" => DecodeError::BadTimestamp(text.to_string()),
            got => DecodeError::WrongType { field: "ts", expected: "RFC 3339 text or epoch milliseconds", got },
        })?
    };
    if ts_ms < limits.min_ts_ms || ts_ms >= limits.max_ts_ms {
        return Err(DecodeError::TimestampOutOfRange { ts_ms, min: limits.min_ts_ms, max: limits.max_ts_ms });
    }
    Ok(ts_ms)
}

/// Decodes and validates one record.
pub fn decode<'a>(bytes: &'a [u8], limits: &DecodeLimits) -> Result<Event<'a>, DecodeError> {
    if bytes.len() > limits.max_bytes {
        return Err(DecodeError::Oversize { bytes: bytes.len(), max: limits.max_bytes });
    }
    let text = std::str::from_utf8(bytes).map_err(|e| DecodeError::NotUtf8 { offset: e.valid_up_to() })?;
    let raw: Raw<'a> = serde_json::from_str(text).map_err(|e| DecodeError::Json {
        line: e.line(),
        column: e.column(),
        message: e.to_string().split(" at line").next().unwrap_or_default().to_string(),
    })?;
    let kind = match &*required("type", raw.kind)? {
        "click" => EventType::Click,
        "impression" => EventType::Impression,
        other => return Err(DecodeError::UnknownType(other.to_string())),
    };
    let ts_ms = timestamp(raw.ts.ok_or(DecodeError::Missing("ts"))?, limits)?;
    let cost = match present(raw.cost) {
        None => None,
        Some(r) => {
            if kind_of(r) != "a number" {
                return Err(DecodeError::WrongType { field: "cost", expected: "a number", got: kind_of(r) });
            }
            // Out-of-range literals (1e999) fail to parse: also a bad cost.
            match serde_json::from_str::<f64>(r.get()) {
                Ok(c) if c.is_finite() && c >= 0.0 => {
                    // Counted only if it also sums: never an event whose cost vanishes.
                    if zigzag_model::measures::cost_to_micros(c).is_none() {
                        return Err(DecodeError::CostOutOfRange(r.get().to_string()));
                    }
                    Some(c)
                }
                _ => return Err(DecodeError::BadCost(r.get().to_string())),
            }
        }
    };
    let bounded = |field: &'static str, s: Cow<'a, str>| {
        if s.len() > limits.max_field_bytes {
            return Err(DecodeError::FieldTooLong { field, bytes: s.len(), max: limits.max_field_bytes });
        }
        Ok(s)
    };
    Ok(Event {
        kind,
        ts_ms,
        referrer: bounded("referrer", required("referrer", raw.referrer)?)?,
        campaign: bounded("campaign", required("campaign", raw.campaign)?)?,
        country: bounded("country", required("country", raw.country)?)?,
        url: bounded("url", required("url", raw.url)?)?,
        cost,
        user_id: optional("user_id", raw.user_id)?.map(|u| bounded("user_id", u)).transpose()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const OK: &str = r#"{"type":"click","ts":"2026-11-21T10:15:30.250Z","referrer":"news.example","campaign":"c-42","country":"DE","url":"/a","cost":0.25,"user_id":"u1","extra":[1,2]}"#;

    fn err(s: &str) -> DecodeError {
        decode(s.as_bytes(), &DecodeLimits::default()).unwrap_err()
    }

    #[test]
    fn decodes_a_valid_event_borrowing_strings() {
        let e = decode(OK.as_bytes(), &DecodeLimits::default()).unwrap();
        assert_eq!(e.kind, EventType::Click);
        assert_eq!(e.ts_ms, 1_795_256_130_250);
        assert!(matches!(e.referrer, Cow::Borrowed("news.example")));
        assert_eq!(e.cost, Some(0.25));
        assert_eq!(e.user_id.as_deref(), Some("u1"));
        let e = decode(br#"{"type":"impression","ts":1795256130250,"referrer":"a\u00e9","campaign":"c","country":"FR","url":"/","cost":null}"#, &DecodeLimits::default()).unwrap();
        assert_eq!(e.ts_ms, 1_795_256_130_250);
        assert_eq!(e.referrer, "aé");
        assert_eq!((e.cost, e.user_id), (None, None));
    }

    #[test]
    fn every_defect_has_its_own_reason() {
        let base = |patch: &str| OK.replacen(r#""type":"click""#, patch, 1);
        assert_eq!(err(&base(r#""type":"view""#)), DecodeError::UnknownType("view".into()));
        assert_eq!(err(&OK.replace(r#""referrer":"news.example","#, "")), DecodeError::Missing("referrer"));
        assert_eq!(
            err(&OK.replace(r#""country":"DE""#, r#""country":7"#)),
            DecodeError::WrongType { field: "country", expected: "a string", got: "a number" }
        );
        assert_eq!(err(&OK.replace(r#""country":"DE""#, r#""country":"""#)), DecodeError::Empty { field: "country" });
        assert_eq!(
            err(&OK.replace("2026-11-21T10:15:30.250Z", "yesterday")),
            DecodeError::BadTimestamp("yesterday".into())
        );
        assert_eq!(err(&OK.replace(r#""2026-11-21T10:15:30.250Z""#, "1.5")), DecodeError::BadTimestamp("1.5".into()));
        assert!(matches!(err(&OK.replace("2026-11-21", "1970-01-01")), DecodeError::TimestampOutOfRange { .. }));
        assert_eq!(err(&OK.replace(r#""cost":0.25"#, r#""cost":-1"#)), DecodeError::BadCost("-1".into()));
        assert_eq!(
            err(&OK.replace(r#""cost":0.25"#, r#""cost":"free""#)),
            DecodeError::WrongType { field: "cost", expected: "a number", got: "a string" }
        );
        assert!(matches!(err("[1,2]"), DecodeError::Json { .. }));
        assert!(matches!(err("{\"type\":"), DecodeError::Json { line: 1, .. }));
        assert_eq!(
            decode(b"{\"a\":\"\xff\"}", &DecodeLimits::default()).unwrap_err(),
            DecodeError::NotUtf8 { offset: 6 }
        );
        let small = DecodeLimits { max_bytes: 10, ..Default::default() };
        assert_eq!(decode(OK.as_bytes(), &small).unwrap_err(), DecodeError::Oversize { bytes: OK.len(), max: 10 });
        assert_eq!(err(&OK.replace(r#""cost":0.25"#, r#""cost":1e999"#)), DecodeError::BadCost("1e999".into()));
        assert_eq!(
            err(&OK.replace(r#""cost":0.25"#, r#""cost":1e13"#)),
            DecodeError::CostOutOfRange("1e13".into()),
            "a cost that cannot be summed exactly is refused, not dropped from the sums"
        );
        let long = "r".repeat(257);
        assert_eq!(
            err(&OK.replace("news.example", &long)),
            DecodeError::FieldTooLong { field: "referrer", bytes: 257, max: 256 }
        );
        assert!(decode(OK.replace("news.example", &"r".repeat(256)).as_bytes(), &DecodeLimits::default()).is_ok());
    }

    proptest! {
        /// Arbitrary bytes never panic the decoder.
        #[test]
        fn never_panics_on_garbage(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode(&bytes, &DecodeLimits::default());
        }

        /// Corrupting a valid record anywhere is an error or a valid event, never a panic.
        #[test]
        fn never_panics_on_mutations(pos in 0..OK.len(), byte in any::<u8>(), cut in 0..=OK.len()) {
            let mut b = OK.as_bytes().to_vec();
            b[pos] = byte;
            let _ = decode(&b, &DecodeLimits::default());
            let _ = decode(&OK.as_bytes()[..cut], &DecodeLimits::default());
        }
    }
}
