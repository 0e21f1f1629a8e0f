//! Decode: one record's bytes → a typed [`Event`] by the declared schema,
//! or a typed reason why not (which the pipeline dead-letters with the
//! shard and sequence number).
//!
//! The schema is compiled once ([`Decoder::new`]): JSON paths into one
//! trie walked in a single pass over the record (`json/`; unwanted
//! subtrees are skipped, never built), CSV columns to field slots
//! (`csv.rs`). Each captured value is then typed by the field's rules
//! (`zigzag_model::schema::value`), defaults applied, and the event time
//! checked against the accepted range. Strings borrow from the record when
//! they hold no escapes.

mod csv;
mod json;
/// The previous JSON walk (serde_json's visitor): the oracle the scanner
/// is tested against.
#[cfg(test)]
mod serde_walk;

use smallvec::SmallVec;
use thiserror::Error;
use zigzag_model::schema::{Format, TypedField, ValueError};
use zigzag_model::Config;

pub use zigzag_model::schema::FieldValue;

/// A decoded event: its time and every field's value, in schema order.
#[derive(Debug, Clone, PartialEq)]
pub struct Event<'a> {
    /// Milliseconds since the Unix epoch, UTC.
    pub ts_ms: i64,
    pub values: Values<'a>,
}

/// Every field's value of one event, in schema order.
pub type Values<'a> = SmallVec<[FieldValue<'a>; 8]>;

/// Limits on what a record may be (beyond each field's own).
#[derive(Debug, Clone, Copy)]
pub struct DecodeLimits {
    /// Larger records are rejected unread (Kinesis allows 1 MiB).
    pub max_bytes: usize,
    /// Accepted event times, `[min, max)` in ms since the epoch.
    pub min_ts_ms: i64,
    pub max_ts_ms: i64,
}

impl Default for DecodeLimits {
    fn default() -> Self {
        DecodeLimits {
            max_bytes: 1 << 20,
            min_ts_ms: 946_684_800_000,   // 2000-01-01T00:00:00Z
            max_ts_ms: 4_102_444_800_000, // 2100-01-01T00:00:00Z
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
    #[error("malformed CSV: {0}")]
    Csv(String),
    #[error("CSV record of {got} columns; the schema declares {expected}")]
    Columns { got: usize, expected: usize },
    /// A CSV header row (the declared column names): skipped, not an event.
    #[error("a CSV header row")]
    Header,
    #[error("missing field `{0}`")]
    Missing(String),
    #[error("field `{0}` appears twice")]
    Duplicate(String),
    #[error("field `{0}` is empty")]
    Empty(String),
    #[error("field `{field}`: {error}")]
    Field { field: String, error: ValueError },
    #[error("event time {ts_ms} ms is outside the accepted range {min}..{max}")]
    TimestampOutOfRange { ts_ms: i64, min: i64, max: i64 },
    /// Decoded, but before the seal (`zigzag_lease::seal`): its buckets are
    /// closed (compacted, or about to be), so it is kept here, not counted.
    #[error("event time {ts_ms} ms is before the seal at {seal} ms: its buckets are closed (gather compact)")]
    Sealed { ts_ms: i64, seal: i64 },
}

impl DecodeError {
    /// A short stable label for metrics (`decode_errors{reason=...}`).
    pub fn reason(&self) -> &'static str {
        match self {
            DecodeError::Oversize { .. } => "oversize",
            DecodeError::NotUtf8 { .. } => "not_utf8",
            DecodeError::Json { .. } => "malformed_json",
            DecodeError::Csv(_) => "malformed_csv",
            DecodeError::Columns { .. } => "wrong_column_count",
            DecodeError::Header => "header",
            DecodeError::Missing(_) => "missing_field",
            DecodeError::Duplicate(_) => "duplicate_field",
            DecodeError::Empty(_) => "empty_field",
            DecodeError::TimestampOutOfRange { .. } => "timestamp_out_of_range",
            DecodeError::Sealed { .. } => "sealed",
            DecodeError::Field { error, .. } => match error {
                ValueError::WrongType { .. } => "wrong_type",
                ValueError::TooLong { .. } => "field_too_long",
                ValueError::NotAllowed { .. } => "not_allowed",
                ValueError::BadNumber { .. } => "bad_number",
                ValueError::OutOfRange { .. } => "out_of_range",
                ValueError::TooPrecise { .. } => "too_precise",
                ValueError::BadTimestamp { .. } => "bad_timestamp",
                ValueError::BadString { .. } => "malformed_json",
            },
        }
    }
}

/// A field as decoding needs it.
#[derive(Debug, Clone)]
struct Slot {
    typed: TypedField,
    /// The value when absent (a declared default, typed once).
    default: Option<FieldValue<'static>>,
    /// Absent without a default is an error.
    required: bool,
}

/// The compiled schema: decodes records of one layout.
#[derive(Debug, Clone)]
pub struct Decoder {
    slots: Vec<Slot>,
    time: usize,
    limits: DecodeLimits,
    format: Framing,
}

#[derive(Debug, Clone)]
enum Framing {
    Json(json::PathTrie),
    Csv(csv::Columns),
}

impl Decoder {
    pub fn new(config: &Config, limits: DecodeLimits) -> Result<Decoder, zigzag_model::ConfigError> {
        let typed = config.typed_fields()?;
        let slots = typed
            .into_iter()
            .map(|typed| {
                let default = typed.spec.default.as_deref().map(|d| {
                    typed.parse_text(d).map(FieldValue::into_owned).expect("validated: the default is a value")
                });
                let required = default.is_none() && !typed.spec.optional;
                Slot { typed, default, required }
            })
            .collect::<Vec<_>>();
        let time = config.fields.iter().position(|f| f.name == config.input.time).expect("validated: time field");
        let format = match config.input.format {
            Format::Json => Framing::Json(json::PathTrie::new(&config.fields)?),
            Format::Csv => Framing::Csv(csv::Columns::new(&config.input.columns, &config.fields)),
        };
        Ok(Decoder { slots, time, limits, format })
    }

    /// The shipped schema with default limits.
    pub fn shipped() -> Decoder {
        Decoder::new(&Config::default(), DecodeLimits::default()).expect("the shipped schema is valid")
    }

    pub fn limits(&self) -> &DecodeLimits {
        &self.limits
    }

    pub fn fields(&self) -> impl Iterator<Item = &TypedField> {
        self.slots.iter().map(|s| &s.typed)
    }

    /// Decodes and validates one record.
    pub fn decode<'a>(&self, bytes: &'a [u8]) -> Result<Event<'a>, DecodeError> {
        let mut values = SmallVec::new();
        let ts_ms = self.decode_into(bytes, &mut values)?;
        Ok(Event { ts_ms, values })
    }

    /// Decodes one record into `values` (cleared first; a batch reuses one
    /// buffer, not a new event per record), returning its event time.
    pub fn decode_into<'a>(&self, bytes: &'a [u8], values: &mut Values<'a>) -> Result<i64, DecodeError> {
        if bytes.len() > self.limits.max_bytes {
            return Err(DecodeError::Oversize { bytes: bytes.len(), max: self.limits.max_bytes });
        }
        values.clear();
        match &self.format {
            Framing::Json(trie) => self.json(trie, bytes, values)?,
            Framing::Csv(columns) => self.csv(columns, bytes, values)?,
        }
        let FieldValue::Time(ts_ms) = values[self.time] else {
            // Validated: the time field is a required timestamp.
            return Err(DecodeError::Missing(self.slots[self.time].typed.spec.name.clone()));
        };
        if ts_ms < self.limits.min_ts_ms || ts_ms >= self.limits.max_ts_ms {
            return Err(DecodeError::TimestampOutOfRange {
                ts_ms,
                min: self.limits.min_ts_ms,
                max: self.limits.max_ts_ms,
            });
        }
        Ok(ts_ms)
    }

    /// A JSON record's fields: marked, walked along the schema's paths,
    /// each captured value typed.
    #[inline]
    fn json<'a>(&self, trie: &json::PathTrie, bytes: &'a [u8], values: &mut Values<'a>) -> Result<(), DecodeError> {
        let mut marks = json::Marks::default();
        let marked = marks.set(bytes);
        let text = if marked && marks.ascii { ascii(bytes) } else { utf8(bytes)? };
        let mut inline = [None; 8];
        let mut spilled = Vec::new();
        let raw = match self.slots.len() {
            n if n <= inline.len() => &mut inline[..n],
            n => {
                spilled.resize(n, None);
                &mut spilled[..]
            }
        };
        trie.capture(text, marked.then_some(&marks), raw)?;
        for (slot, raw) in self.slots.iter().zip(raw.iter()) {
            let v = match raw {
                None => FieldValue::Absent,
                Some(r) => slot.typed.parse_json_scanned(r.text, r.escaped).map_err(|e| field_err(slot, e))?,
            };
            values.push(self.finish(slot, v)?);
        }
        Ok(())
    }

    /// A CSV line's fields: split into the declared columns, each cell typed.
    #[inline]
    fn csv<'a>(&self, columns: &csv::Columns, bytes: &'a [u8], values: &mut Values<'a>) -> Result<(), DecodeError> {
        let text = utf8(bytes)?;
        let mut cells: SmallVec<[Option<std::borrow::Cow<'a, str>>; 8]> = SmallVec::from_elem(None, self.slots.len());
        columns.split(text, &mut cells)?;
        for (slot, cell) in self.slots.iter().zip(cells) {
            let v = match cell {
                // An empty cell is an absent field (its default, or missing).
                None => FieldValue::Absent,
                Some(c) if c.is_empty() => FieldValue::Absent,
                Some(std::borrow::Cow::Borrowed(c)) => slot.typed.parse_text(c).map_err(|e| field_err(slot, e))?,
                Some(std::borrow::Cow::Owned(c)) => {
                    slot.typed.parse_text(&c).map(FieldValue::into_owned).map_err(|e| field_err(slot, e))?
                }
            };
            values.push(self.finish(slot, v)?);
        }
        Ok(())
    }

    /// Defaults and requirements.
    #[inline(always)]
    fn finish<'a>(&self, slot: &Slot, v: FieldValue<'a>) -> Result<FieldValue<'a>, DecodeError> {
        match v {
            FieldValue::Absent => Self::absent(slot),
            FieldValue::Str(s) if s.is_empty() && slot.required => {
                Err(DecodeError::Empty(slot.typed.spec.name.clone()))
            }
            v => Ok(v),
        }
    }

    /// An absent field: its default, or missing.
    #[inline(never)]
    fn absent(slot: &Slot) -> Result<FieldValue<'static>, DecodeError> {
        match &slot.default {
            Some(d) => Ok(d.clone()),
            None if slot.required => Err(DecodeError::Missing(slot.typed.spec.name.clone())),
            None => Ok(FieldValue::Absent),
        }
    }
}

/// The record as text. simdutf8 checks it in 64-byte blocks (std's check
/// was a twentieth of decoding); std says where a bad byte is.
#[inline]
fn utf8(bytes: &[u8]) -> Result<&str, DecodeError> {
    match simdutf8::basic::from_utf8(bytes) {
        Ok(text) => Ok(text),
        Err(_) => Err(DecodeError::NotUtf8 {
            offset: std::str::from_utf8(bytes).map_or_else(|e| e.valid_up_to(), |_| bytes.len()),
        }),
    }
}

/// A record its marks found all ASCII, as text.
#[inline]
fn ascii(bytes: &[u8]) -> &str {
    debug_assert!(bytes.is_ascii());
    // SAFETY: every byte is below 0x80 (the marks' `ascii`, tested against
    // a byte-at-a-time pass), and ASCII is UTF-8.
    unsafe { std::str::from_utf8_unchecked(bytes) }
}

fn field_err(slot: &Slot, error: ValueError) -> DecodeError {
    DecodeError::Field { field: slot.typed.spec.name.clone(), error }
}

#[cfg(test)]
mod scan_tests;
#[cfg(test)]
mod tests;
