//! Typed field values and the one set of rules that makes them, from a JSON
//! value's text (`parse_json`) or from plain text (a CSV cell, a default, a
//! literal in a condition: `parse_text`).
//!
//! Numbers are exact: an integer is an i64, a decimal an i64 count of
//! 10^-scale units, parsed from the literal's digits (never through a
//! float), and a decimal with more digits than its scale is refused, not
//! rounded. A number may also come as a JSON string (`"7"`): producers
//! often quote ids.

use super::decimal::{decimal_units, format_units};
use super::timestamp::timestamp;
use super::{FieldSpec, FieldType, TimeFormat, ValueError};
use std::borrow::Cow;

/// One decoded field.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FieldValue<'a> {
    Absent,
    Str(Cow<'a, str>),
    Int(i64),
    /// A decimal in units of 10^-scale (the field's scale).
    Dec(i64),
    Bool(bool),
    /// Milliseconds since the Unix epoch, UTC.
    Time(i64),
}

impl FieldValue<'_> {
    /// The value as a number of the field's units (integers and decimals).
    #[inline]
    pub fn units(&self) -> Option<i64> {
        match self {
            FieldValue::Int(v) | FieldValue::Dec(v) => Some(*v),
            _ => None,
        }
    }

    pub fn into_owned(self) -> FieldValue<'static> {
        match self {
            FieldValue::Absent => FieldValue::Absent,
            FieldValue::Str(s) => FieldValue::Str(Cow::Owned(s.into_owned())),
            FieldValue::Int(v) => FieldValue::Int(v),
            FieldValue::Dec(v) => FieldValue::Dec(v),
            FieldValue::Bool(v) => FieldValue::Bool(v),
            FieldValue::Time(v) => FieldValue::Time(v),
        }
    }
}

/// What a JSON value's text is, for messages.
pub fn json_kind(raw: &str) -> &'static str {
    match raw.as_bytes().first() {
        Some(b'"') => "a string",
        Some(b'{') => "an object",
        Some(b'[') => "an array",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        _ => "a number",
    }
}

/// A field's numeric bounds, in its units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub min: i64,
    pub max: i64,
}

impl Bounds {
    pub fn of(f: &FieldSpec) -> Result<Bounds, ValueError> {
        match &f.kind {
            FieldType::Integer { min, max } => {
                Ok(Bounds { min: min.unwrap_or(i64::MIN), max: max.unwrap_or(i64::MAX) })
            }
            FieldType::Decimal { scale, min, max } => {
                let bound = |text: &Option<String>, dflt: i64| match text {
                    None => Ok(dflt),
                    Some(t) => decimal_units(t, *scale),
                };
                Ok(Bounds { min: bound(min, i64::MIN)?, max: bound(max, i64::MAX)? })
            }
            _ => Ok(Bounds { min: i64::MIN, max: i64::MAX }),
        }
    }
}

/// A field with its bounds resolved: what decoding needs per value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypedField {
    pub spec: FieldSpec,
    pub bounds: Bounds,
    /// A timestamp pattern, parsed once (parsing it for every value was
    /// a third of decoding a CSV access log).
    pub pattern: Option<Vec<chrono::format::Item<'static>>>,
}

impl TypedField {
    pub fn new(spec: &FieldSpec) -> Result<TypedField, ValueError> {
        let pattern = match &spec.kind {
            FieldType::Timestamp { format: TimeFormat::Pattern(p) } => {
                chrono::format::StrftimeItems::new(p).parse_to_owned().ok()
            }
            _ => None,
        };
        Ok(TypedField { bounds: Bounds::of(spec)?, spec: spec.clone(), pattern })
    }

    /// A JSON value (its text as it stands in the record); `null` is absent.
    pub fn parse_json<'a>(&self, raw: &'a str) -> Result<FieldValue<'a>, ValueError> {
        parse_json(self, raw, raw.contains('\\'))
    }

    /// A JSON value as a scanner found it: `escaped` says whether a string
    /// holds escapes (a scanner knows, so the text is not searched again).
    #[inline]
    pub fn parse_json_scanned<'a>(&self, raw: &'a str, escaped: bool) -> Result<FieldValue<'a>, ValueError> {
        // Most values of most records: a plain string that fits its field,
        // accepted here, inline. Everything else, and every error, goes
        // through the general rules below.
        if let (FieldType::String { max_bytes, values }, false) = (&self.spec.kind, escaped) {
            if let Some(text) = raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
                if text.len() <= *max_bytes as usize && (values.is_empty() || values.iter().any(|v| v == text)) {
                    return Ok(FieldValue::Str(Cow::Borrowed(text)));
                }
            }
        }
        parse_json(self, raw, escaped)
    }

    /// Plain text (a CSV cell, a default, a literal). Empty text is absent,
    /// except for strings, where it is empty text.
    pub fn parse_text<'a>(&self, text: &'a str) -> Result<FieldValue<'a>, ValueError> {
        parse_cow(self, Cow::Borrowed(text), true)
    }
}

#[inline(never)]
fn parse_json<'a>(t: &TypedField, raw: &'a str, escaped: bool) -> Result<FieldValue<'a>, ValueError> {
    let f = &t.spec;
    match raw.as_bytes().first() {
        Some(b'"') => {
            let bad = || ValueError::BadString { value: raw.chars().take(64).collect() };
            let text = json_string(raw, escaped).ok_or_else(bad)?;
            parse_cow(t, text, true)
        }
        Some(b'n') => Ok(FieldValue::Absent),
        Some(b't' | b'f') => match f.kind {
            FieldType::Boolean => Ok(FieldValue::Bool(raw == "true")),
            _ => Err(wrong(f, "a boolean")),
        },
        Some(b'{' | b'[') => Err(wrong(f, json_kind(raw))),
        _ => match f.kind {
            FieldType::String { .. } => Err(wrong(f, "a number")),
            FieldType::Boolean => Err(wrong(f, "a number")),
            _ => parse_cow(t, Cow::Borrowed(raw), false),
        },
    }
}

fn wrong(f: &FieldSpec, got: &'static str) -> ValueError {
    let expected = match f.kind {
        FieldType::String { .. } => "a string",
        FieldType::Integer { .. } => "an integer",
        FieldType::Decimal { .. } => "a decimal number",
        FieldType::Boolean => "a boolean",
        FieldType::Timestamp { format: TimeFormat::Auto } => "RFC 3339 text or epoch milliseconds",
        FieldType::Timestamp { .. } => "a timestamp",
    };
    ValueError::WrongType { expected, got }
}

/// `text` is a string's content (`quoted`) or a bare JSON number.
fn parse_cow<'a>(t: &TypedField, text: Cow<'a, str>, quoted: bool) -> Result<FieldValue<'a>, ValueError> {
    let f = &t.spec;
    match &f.kind {
        FieldType::String { max_bytes, values } => {
            if text.len() > *max_bytes as usize {
                return Err(ValueError::TooLong { bytes: text.len(), max: *max_bytes });
            }
            if !values.is_empty() && !values.iter().any(|v| *v == *text) {
                return Err(ValueError::NotAllowed { value: text.into_owned(), allowed: values.clone() });
            }
            Ok(FieldValue::Str(text))
        }
        _ if quoted && text.is_empty() => Ok(FieldValue::Absent),
        FieldType::Integer { .. } => {
            let v = decimal_units(&text, 0)?;
            check_bounds(t, v, &text)?;
            Ok(FieldValue::Int(v))
        }
        FieldType::Decimal { scale, .. } => {
            let v = decimal_units(&text, *scale)?;
            check_bounds(t, v, &text)?;
            Ok(FieldValue::Dec(v))
        }
        FieldType::Boolean => match &*text {
            "true" | "1" => Ok(FieldValue::Bool(true)),
            "false" | "0" => Ok(FieldValue::Bool(false)),
            _ => Err(wrong(f, "text")),
        },
        FieldType::Timestamp { format } => timestamp(format, t.pattern.as_deref(), &text, quoted).map(FieldValue::Time),
    }
}

fn check_bounds(t: &TypedField, v: i64, text: &str) -> Result<(), ValueError> {
    let (f, b) = (&t.spec, t.bounds);
    if v < b.min || v > b.max {
        let show = |x: i64, dflt: &str| match &f.kind {
            FieldType::Integer { .. } if x != i64::MIN && x != i64::MAX => x.to_string(),
            FieldType::Decimal { scale, .. } if x != i64::MIN && x != i64::MAX => format_units(x as i128, *scale),
            _ => dflt.to_string(),
        };
        return Err(ValueError::OutOfRange {
            value: text.to_string(),
            min: show(b.min, "-inf"),
            max: show(b.max, "inf"),
        });
    }
    Ok(())
}

/// The content of a JSON string literal, borrowed when it has no escapes.
fn json_string(raw: &str, escaped: bool) -> Option<Cow<'_, str>> {
    let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
    if !escaped {
        return Some(Cow::Borrowed(inner));
    }
    serde_json::from_str::<String>(raw).ok().map(Cow::Owned)
}

/// A value's text as a dimension value or a group key (strings as they
/// are, numbers in their shortest exact form, instants as epoch ms).
pub fn display(f: &FieldSpec, v: &FieldValue<'_>) -> String {
    match v {
        FieldValue::Absent => String::new(),
        FieldValue::Str(s) => s.to_string(),
        FieldValue::Int(i) => i.to_string(),
        FieldValue::Dec(d) => format_units(*d as i128, f.scale().unwrap_or(0)),
        FieldValue::Bool(b) => b.to_string(),
        FieldValue::Time(t) => t.to_string(),
    }
}
