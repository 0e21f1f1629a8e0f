//! The declared event schema: what a record is (JSON object or CSV line),
//! its fields (where each one is, its type, required or defaulted, its
//! bounds) and which field is the event time. `[input]` and `[[field]]` in
//! the configuration; without them, the shipped click/impression shape.
//!
//! A field's value is typed once, at decode ([`value::FieldValue`]), by the
//! rules in [`value`]; measures and dimensions only ever see typed values.

pub mod decimal;
pub mod pointer;
pub mod timestamp;
pub mod value;

use crate::error::ConfigError;
use pointer::Pointer;
use serde::{Deserialize, Serialize};
pub use value::{FieldValue, TypedField};

/// Why a value does not fit its field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    #[error("expected {expected}, got {got}")]
    WrongType { expected: &'static str, got: &'static str },
    #[error("{bytes} bytes exceeds the {max}-byte limit")]
    TooLong { bytes: usize, max: u32 },
    #[error("{value:?} is not one of {allowed:?}")]
    NotAllowed { value: String, allowed: Vec<String> },
    #[error("{value} is not a number")]
    BadNumber { value: String },
    #[error("{value} is outside {min}..={max}")]
    OutOfRange { value: String, min: String, max: String },
    #[error("{value} has more than {scale} digits after the point")]
    TooPrecise { value: String, scale: u32 },
    #[error("{value:?} is not a timestamp ({format})")]
    BadTimestamp { value: String, format: String },
    /// A JSON string the record's syntax allows but whose escapes name no
    /// text (a lone surrogate such as `\ud800`).
    #[error("{value} is not a valid JSON string")]
    BadString { value: String },
}

/// How records are framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// One JSON object per record.
    #[default]
    Json,
    /// One CSV line per record (RFC 4180 quoting), columns as declared.
    Csv,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct InputSpec {
    pub format: Format,
    /// CSV: the column names, in order. A record equal to this header row
    /// (a file's first line, or a producer that sends one) is skipped.
    pub columns: Vec<String>,
    /// The field holding the event time (a `timestamp` field).
    pub time: String,
}

impl Default for InputSpec {
    fn default() -> Self {
        InputSpec { format: Format::Json, columns: Vec::new(), time: "ts".into() }
    }
}

/// A field's type and its type's options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldType {
    /// UTF-8 text of at most `max_bytes` bytes, optionally one of `values`.
    String {
        max_bytes: u32,
        values: Vec<String>,
    },
    /// A 64-bit signed integer, optionally bounded (inclusive).
    Integer {
        min: Option<i64>,
        max: Option<i64>,
    },
    /// A decimal kept exactly with `scale` digits after the point (as an
    /// integer of 10^-scale units); more digits are refused, not rounded.
    /// Bounds are text in the field's own units (e.g. "0", "1000.5").
    Decimal {
        scale: u32,
        min: Option<String>,
        max: Option<String>,
    },
    Boolean,
    Timestamp {
        format: TimeFormat,
    },
}

fn default_max_bytes() -> u32 {
    256
}

/// How a timestamp is written.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeFormat {
    /// RFC 3339 text or integer epoch milliseconds (the shipped default).
    #[default]
    Auto,
    Rfc3339,
    EpochS,
    EpochMs,
    EpochUs,
    EpochNs,
    /// A chrono strftime pattern; without a zone (`%z`) the text is UTC.
    #[serde(untagged)]
    Pattern(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(try_from = "FieldFile", into = "FieldFile")]
pub struct FieldSpec {
    pub name: String,
    /// JSON: a JSON pointer (RFC 6901), default `/<name>`.
    pub path: Option<String>,
    /// CSV: the column name, default the field name.
    pub column: Option<String>,
    pub kind: FieldType,
    /// A record without the field (or with `null`, or an empty CSV cell)
    /// takes this value (text, typed like the field); without a default
    /// the field is required.
    pub default: Option<String>,
    /// An absent field without a default is allowed (dimensions need a
    /// value; measures skip the event).
    pub optional: bool,
}

/// A `[[field]]` table as written: every type's options, flat; each type
/// accepts only its own.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct FieldFile {
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    column: Option<String>,
    #[serde(rename = "type")]
    kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_bytes: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    values: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    scale: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    min: Option<toml::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max: Option<toml::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    format: Option<TimeFormat>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    default: Option<toml::Value>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    optional: bool,
}

/// A scalar option as text (`min = 0`, `min = "0.5"`, `default = true`).
/// A TOML scalar (text, number, boolean) as text, for options typed later
/// by a field's own rules.
pub fn scalar_text(v: &toml::Value) -> Option<String> {
    match v {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

impl TryFrom<FieldFile> for FieldSpec {
    type Error = String;

    fn try_from(f: FieldFile) -> Result<Self, String> {
        let name = f.name.clone();
        let not_for = |option: &str, ty: &str| Err(format!("field {name}: `{option}` does not apply to a {ty}"));
        let text = |option: &str, v: &Option<toml::Value>| -> Result<Option<String>, String> {
            v.as_ref()
                .map(|v| scalar_text(v).ok_or_else(|| format!("field {name}: `{option}` must be a number or text")))
                .transpose()
        };
        let int = |option: &str, v: &Option<toml::Value>| -> Result<Option<i64>, String> {
            v.as_ref()
                .map(|v| v.as_integer().ok_or_else(|| format!("field {name}: `{option}` must be an integer")))
                .transpose()
        };
        let ty = f.kind.as_str();
        let given = |o: &str| match o {
            "max_bytes" => f.max_bytes.is_some(),
            "values" => !f.values.is_empty(),
            "scale" => f.scale.is_some(),
            "min" => f.min.is_some(),
            "max" => f.max.is_some(),
            "format" => f.format.is_some(),
            _ => false,
        };
        let allowed: &[&str] = match ty {
            "string" => &["max_bytes", "values"],
            "integer" => &["min", "max"],
            "decimal" => &["scale", "min", "max"],
            "boolean" => &[],
            "timestamp" => &["format"],
            other => {
                return Err(format!(
                    "field {name}: type {other:?} is not one of string, integer, decimal, boolean, timestamp"
                ))
            }
        };
        for option in ["max_bytes", "values", "scale", "min", "max", "format"] {
            if given(option) && !allowed.contains(&option) {
                return not_for(option, ty);
            }
        }
        let kind = match ty {
            "string" => {
                FieldType::String { max_bytes: f.max_bytes.unwrap_or_else(default_max_bytes), values: f.values }
            }
            "integer" => FieldType::Integer { min: int("min", &f.min)?, max: int("max", &f.max)? },
            "decimal" => FieldType::Decimal {
                scale: f.scale.ok_or_else(|| format!("field {name}: a decimal needs `scale`"))?,
                min: text("min", &f.min)?,
                max: text("max", &f.max)?,
            },
            "boolean" => FieldType::Boolean,
            _ => FieldType::Timestamp { format: f.format.unwrap_or_default() },
        };
        Ok(FieldSpec {
            default: text("default", &f.default)?,
            name: f.name,
            path: f.path,
            column: f.column,
            kind,
            optional: f.optional,
        })
    }
}

impl From<FieldSpec> for FieldFile {
    fn from(f: FieldSpec) -> FieldFile {
        let kind = f.type_name().to_string();
        let mut file = FieldFile {
            name: f.name,
            path: f.path,
            column: f.column,
            kind,
            max_bytes: None,
            values: Vec::new(),
            scale: None,
            min: None,
            max: None,
            format: None,
            default: f.default.map(toml::Value::String),
            optional: f.optional,
        };
        match f.kind {
            FieldType::String { max_bytes, values } => {
                file.max_bytes = Some(max_bytes);
                file.values = values;
            }
            FieldType::Integer { min, max } => {
                file.min = min.map(toml::Value::Integer);
                file.max = max.map(toml::Value::Integer);
            }
            FieldType::Decimal { scale, min, max } => {
                file.scale = Some(scale);
                file.min = min.map(toml::Value::String);
                file.max = max.map(toml::Value::String);
            }
            FieldType::Boolean => {}
            FieldType::Timestamp { format } => file.format = Some(format),
        }
        file
    }
}

impl FieldSpec {
    pub fn string(name: &str) -> Self {
        FieldSpec {
            name: name.into(),
            path: None,
            column: None,
            kind: FieldType::String { max_bytes: default_max_bytes(), values: Vec::new() },
            default: None,
            optional: false,
        }
    }

    pub fn with(mut self, kind: FieldType) -> Self {
        self.kind = kind;
        self
    }

    pub fn at(mut self, path: &str) -> Self {
        self.path = Some(path.into());
        self
    }

    pub fn optional(mut self) -> Self {
        self.optional = true;
        self
    }

    /// Where a JSON record holds it.
    pub fn pointer(&self) -> Result<Pointer, ConfigError> {
        let text = self.path.clone().unwrap_or_else(|| format!("/{}", pointer::escape(&self.name)));
        Pointer::parse(&text).map_err(|e| ConfigError::Invalid(format!("field {}: path {text:?}: {e}", self.name)))
    }

    pub fn column_name(&self) -> &str {
        self.column.as_deref().unwrap_or(&self.name)
    }

    pub fn type_name(&self) -> &'static str {
        match self.kind {
            FieldType::String { .. } => "string",
            FieldType::Integer { .. } => "integer",
            FieldType::Decimal { .. } => "decimal",
            FieldType::Boolean => "boolean",
            FieldType::Timestamp { .. } => "timestamp",
        }
    }

    /// Digits after the point of a numeric field (0 for integers).
    pub fn scale(&self) -> Option<u32> {
        match self.kind {
            FieldType::Integer { .. } => Some(0),
            FieldType::Decimal { scale, .. } => Some(scale),
            _ => None,
        }
    }
}

/// The shipped click/impression fields.
pub fn default_fields() -> Vec<FieldSpec> {
    let kind = FieldType::String { max_bytes: 16, values: vec!["click".into(), "impression".into()] };
    vec![
        FieldSpec::string("type").with(kind),
        FieldSpec::string("ts").with(FieldType::Timestamp { format: TimeFormat::Auto }),
        FieldSpec::string("referrer"),
        FieldSpec::string("campaign"),
        FieldSpec::string("country"),
        FieldSpec::string("url"),
        FieldSpec::string("cost").with(FieldType::Decimal { scale: 6, min: Some("0".into()), max: None }).optional(),
        FieldSpec::string("user_id").optional(),
    ]
}

/// Checks the fields and the input together.
pub fn validate(input: &InputSpec, fields: &[FieldSpec]) -> Result<(), ConfigError> {
    let bad = |m: String| Err(ConfigError::Invalid(m));
    if fields.is_empty() {
        return bad("no [[field]] is declared".into());
    }
    if fields.len() > MAX_FIELDS {
        return bad(format!("{} fields declared; at most {MAX_FIELDS}", fields.len()));
    }
    for (i, f) in fields.iter().enumerate() {
        if f.name.is_empty() || !f.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return bad(format!("field name {:?}: use letters, digits and _", f.name));
        }
        if crate::mark::is_mark(&f.name) || ["t", "pk", "sk"].contains(&f.name.as_str()) {
            return bad(format!("field name {:?} is reserved", f.name));
        }
        if fields[..i].iter().any(|g| g.name == f.name) {
            return bad(format!("field {} is declared twice", f.name));
        }
        match input.format {
            Format::Json if f.column.is_some() => {
                return bad(format!("field {}: `column` is for CSV input; JSON fields take a `path`", f.name))
            }
            Format::Csv if f.path.is_some() => {
                return bad(format!("field {}: `path` is for JSON input; CSV fields take a `column`", f.name))
            }
            Format::Csv if !input.columns.iter().any(|c| c == f.column_name()) => {
                return bad(format!(
                    "field {}: column {:?} is not in input.columns {:?}",
                    f.name,
                    f.column_name(),
                    input.columns
                ))
            }
            Format::Json => {
                f.pointer()?;
            }
            Format::Csv => {}
        }
        match &f.kind {
            FieldType::String { max_bytes, .. } if *max_bytes == 0 || *max_bytes > MAX_STRING_BYTES => {
                return bad(format!("field {}: max_bytes = {max_bytes} must be in 1..={MAX_STRING_BYTES}", f.name))
            }
            // A listed value no record could hold is a mistake in the schema.
            FieldType::String { max_bytes, values } => {
                if let Some(v) = values.iter().find(|v| v.is_empty() || v.len() > *max_bytes as usize) {
                    return bad(format!("field {}: value {v:?} is empty or over max_bytes = {max_bytes}", f.name));
                }
            }
            FieldType::Integer { min: Some(lo), max: Some(hi) } if lo > hi => {
                return bad(format!("field {}: min {lo} is above max {hi}", f.name))
            }
            FieldType::Decimal { scale, .. } if *scale > 18 => {
                return bad(format!("field {}: scale = {scale} must be at most 18", f.name))
            }
            FieldType::Timestamp { format: TimeFormat::Pattern(p) } if !p.contains('%') => {
                return bad(format!("field {}: timestamp format {p:?} is neither a known name nor a pattern", f.name))
            }
            _ => {}
        }
        let typed = TypedField::new(f).map_err(|e| ConfigError::Invalid(format!("field {}: {e}", f.name)))?;
        if let Some(d) = &f.default {
            typed.parse_text(d).map_err(|e| ConfigError::Invalid(format!("field {}: default {d:?}: {e}", f.name)))?;
        }
    }
    if input.format == Format::Csv {
        if input.columns.is_empty() {
            return bad("input.format = \"csv\" needs input.columns, the column names in order".into());
        }
        for (i, c) in input.columns.iter().enumerate() {
            if input.columns[..i].contains(c) {
                return bad(format!("input.columns lists {c:?} twice"));
            }
        }
    } else if !input.columns.is_empty() {
        return bad("input.columns is for CSV input".into());
    }
    match fields.iter().find(|f| f.name == input.time) {
        None => bad(format!("input.time = {:?} is not a declared field", input.time)),
        Some(f) if !matches!(f.kind, FieldType::Timestamp { .. }) => {
            bad(format!("input.time = {:?} is a {} field, not a timestamp", input.time, f.type_name()))
        }
        Some(f) if f.optional || f.default.is_some() => {
            bad(format!("input.time = {:?}: the event time must be required (no default, not optional)", f.name))
        }
        Some(_) => Ok(()),
    }
}

/// Fields per schema: the decoded event keeps them inline.
pub const MAX_FIELDS: usize = 64;
/// Longest declared string: DynamoDB items are 400 KB at most, and every
/// byte of a stored dimension is billed on every write of its item.
pub const MAX_STRING_BYTES: u32 = 4096;

#[cfg(test)]
mod tests;
