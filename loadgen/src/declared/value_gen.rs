//! One field's values: drawn by its type (and its field traffic table), and
//! for each draw both the typed value a correct decoder must produce and
//! how the record writes it. The typed value comes from the draw itself
//! (a rank, a number of units, an instant), never from reading the text.
//!
//! Defaults by type:
//! - string with declared `values`: uniform over them;
//! - other strings: 1000 generated names (fewer if `max_bytes` cannot hold
//!   them), Zipf 1.0; some names carry characters that need quoting or
//!   escaping (`,` `"` `\` non-ASCII, spaces);
//! - integer and decimal: uniform over the declared bounds, or from the
//!   lower bound (else 0) up 1000 whole units; written in several exact
//!   forms (plain, zero-padded fraction, exponent, quoted);
//! - boolean: p = 0.5, written as true/false (CSV also 1/0);
//! - timestamp: the event time (the time field) or up to an hour before
//!   it, in the field's format; RFC 3339 and zoned patterns with random UTC
//!   offsets; epoch µs/ns with sub-millisecond digits (floored by readers);
//! - optional or defaulted fields absent 10 % of the time (JSON: key left
//!   out or `null`; CSV: empty cell).

use super::numbers::NumberGen;
use super::traffic_file::{FieldTraffic, TrafficError};
use chrono::{DateTime, FixedOffset};
use rand::distributions::WeightedIndex;
use rand::rngs::SmallRng;
use rand::Rng;
use rand_distr::{Distribution, Zipf};
use zigzag_model::measure::condition::Condition;
use zigzag_model::schema::decimal::format_units;
use zigzag_model::schema::{scalar_text, FieldSpec, FieldType, FieldValue, TimeFormat, TypedField};

/// How a record writes one field.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Written {
    /// Not in the record (CSV: an empty cell).
    Omit,
    /// JSON `null` (CSV: an empty cell).
    Null,
    /// Text: a JSON string, a CSV cell.
    Str(String),
    /// A bare JSON token (number, boolean); a CSV cell.
    Bare(String),
}

/// Characters some generated names end with, to exercise quoting.
const DECORATIONS: [&str; 8] = ["", "", ",c", "\"q\"", "é", "\\b", " s", ""];
/// UTC offsets (seconds) of instants written with a zone.
const OFFSETS: [i32; 3] = [0, 19_800, -28_800];
const DEFAULT_ABSENT: f64 = 0.1;

#[derive(Debug, Clone)]
pub(super) enum Pick {
    Uniform(u64),
    Zipf(Zipf<f64>),
    Weighted(WeightedIndex<f64>),
}

impl Pick {
    /// A rank from 0.
    pub(super) fn rank(&self, rng: &mut SmallRng, n: u64) -> u64 {
        match self {
            Pick::Uniform(n) => rng.gen_range(0..*n),
            Pick::Zipf(z) => (z.sample(rng) as u64).clamp(1, n) - 1,
            Pick::Weighted(w) => w.sample(rng) as u64,
        }
    }
}

#[derive(Debug, Clone)]
enum Words {
    Listed(Vec<String>),
    /// `stem` + rank (or the rank in base 36 when no stem fits), sometimes
    /// decorated, at most `max_bytes`.
    Generated {
        stem: String,
        n: u64,
        max_bytes: usize,
    },
}

impl Words {
    fn len(&self) -> u64 {
        match self {
            Words::Listed(w) => w.len() as u64,
            Words::Generated { n, .. } => *n,
        }
    }

    fn word(&self, rank: u64) -> String {
        match self {
            Words::Listed(w) => w[rank as usize].clone(),
            Words::Generated { stem, max_bytes, .. } => {
                let mut s = if stem.is_empty() { base36(rank) } else { format!("{stem}{rank}") };
                let deco = DECORATIONS[(rank % DECORATIONS.len() as u64) as usize];
                if s.len() + deco.len() <= *max_bytes {
                    s.push_str(deco);
                }
                s
            }
        }
    }
}

fn base36(mut n: u64) -> String {
    let mut digits = Vec::new();
    loop {
        digits.push(b"0123456789abcdefghijklmnopqrstuvwxyz"[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    digits.reverse();
    String::from_utf8(digits).unwrap_or_default()
}

#[derive(Debug, Clone)]
enum ValueGen {
    Words {
        words: Words,
        pick: Pick,
    },
    Number(NumberGen),
    Bool {
        p_true: f64,
    },
    /// An instant `before_ms` or less before the event time, floored to
    /// `resolution_ms` (what the format can say).
    Time {
        format: TimeFormat,
        resolution_ms: i64,
        zoned: bool,
        before_ms: i64,
    },
}

#[derive(Debug, Clone)]
pub(crate) struct FieldGen {
    absent: f64,
    /// Only records matching it have the field.
    when: Option<Condition>,
    /// What an absent field reads as: its default, or absent.
    when_absent: FieldValue<'static>,
    gen: ValueGen,
}

impl FieldGen {
    /// `csv`: records are CSV lines (no value may hold a line break).
    /// Field `index` of `fields`.
    pub(crate) fn new(
        fields: &[TypedField],
        index: usize,
        traffic: Option<&FieldTraffic>,
        is_time: bool,
        csv: bool,
    ) -> Result<FieldGen, TrafficError> {
        let spec = &fields[index].spec;
        let none = FieldTraffic::default();
        let t = traffic.unwrap_or(&none);
        let err = |m: String| TrafficError::field(&spec.name, m);
        let allowed: &[&str] = match spec.kind {
            FieldType::String { .. } => &["values", "weights", "cardinality", "zipf"],
            FieldType::Integer { .. } | FieldType::Decimal { .. } => &[
                "distribution",
                "min",
                "max",
                "mean",
                "sd",
                "zipf",
                "cardinality",
                "values",
                "weights",
                "sigma",
                "alpha",
                "modes",
                "zeros",
                "negative",
            ],
            FieldType::Boolean => &["p_true"],
            FieldType::Timestamp { .. } => &[],
        };
        if let Some(k) = t.keys_set().into_iter().find(|k| !allowed.contains(k)) {
            return Err(err(format!("`{k}` does not apply to a {} field", spec.type_name())));
        }
        let typed = &fields[index];
        let defaulted = spec.default.is_some() || spec.optional;
        let absent = match t.absent {
            Some(a) if !(0.0..=1.0).contains(&a) => return Err(err(format!("absent = {a} is not a fraction"))),
            Some(a) if a > 0.0 && (!defaulted || is_time) => {
                return Err(err("absent > 0 on a required field would make malformed records".into()))
            }
            Some(a) => a,
            None if defaulted && !is_time => DEFAULT_ABSENT,
            None => 0.0,
        };
        let when_absent = match &spec.default {
            Some(d) => typed.parse_text(d).map(FieldValue::into_owned).map_err(|e| err(e.to_string()))?,
            None => FieldValue::Absent,
        };
        let gen = match &spec.kind {
            FieldType::String { max_bytes, values } => words(spec, t, *max_bytes as usize, values, csv).map_err(err)?,
            FieldType::Integer { .. } | FieldType::Decimal { .. } => {
                ValueGen::Number(NumberGen::new(spec, t, typed.bounds).map_err(err)?)
            }
            FieldType::Boolean => match t.p_true.unwrap_or(0.5) {
                p if (0.0..=1.0).contains(&p) => ValueGen::Bool { p_true: p },
                p => return Err(err(format!("p_true = {p} is not a probability"))),
            },
            FieldType::Timestamp { format } => time(format, typed, is_time).map_err(err)?,
        };
        let when = match &t.when {
            None => None,
            Some(_) if !defaulted || is_time => {
                return Err(err("`when` on a required field would make malformed records".into()))
            }
            Some(text) => {
                let c = Condition::parse(text, fields).map_err(|e| err(e.to_string()))?;
                if c.fields().any(|f| f >= index) {
                    return Err(err(format!(
                        "when {text:?} reads a field declared after this one (fields are drawn in order)"
                    )));
                }
                Some(c)
            }
        };
        Ok(FieldGen { absent, when, when_absent, gen })
    }

    /// One draw: the typed value and how the record writes it. `drawn`:
    /// the record's values so far (the fields before this one).
    pub(crate) fn draw(
        &self,
        rng: &mut SmallRng,
        event_ms: i64,
        csv: bool,
        drawn: &[FieldValue<'static>],
    ) -> (FieldValue<'static>, Written) {
        let excluded = self.when.as_ref().is_some_and(|c| !c.matches(drawn));
        if excluded || (self.absent > 0.0 && rng.gen_bool(self.absent)) {
            let written = if !csv && rng.gen_bool(0.3) { Written::Null } else { Written::Omit };
            return (self.when_absent.clone(), written);
        }
        match &self.gen {
            ValueGen::Words { words, pick } => {
                let w = words.word(pick.rank(rng, words.len()));
                (FieldValue::Str(w.clone().into()), Written::Str(w))
            }
            ValueGen::Number(n) => n.draw(rng),
            ValueGen::Bool { p_true } => {
                let b = rng.gen_bool(*p_true);
                let text = match (csv && rng.gen_bool(0.3), b) {
                    (true, true) => "1",
                    (true, false) => "0",
                    (false, b) => {
                        if b {
                            "true"
                        } else {
                            "false"
                        }
                    }
                };
                (FieldValue::Bool(b), Written::Bare(text.into()))
            }
            ValueGen::Time { format, resolution_ms, zoned, before_ms } => {
                let ms = event_ms - if *before_ms > 0 { rng.gen_range(0..=*before_ms) } else { 0 };
                let offset = if *zoned { OFFSETS[rng.gen_range(0..OFFSETS.len())] } else { 0 };
                let sub = rng.gen_range(0..1_000_000i64);
                (FieldValue::Time(ms - ms.rem_euclid(*resolution_ms)), time_written(format, ms, offset, sub, rng))
            }
        }
    }
}

fn words(
    spec: &FieldSpec,
    t: &FieldTraffic,
    max_bytes: usize,
    declared: &[String],
    csv: bool,
) -> Result<ValueGen, String> {
    let words = match (declared.is_empty(), &t.values, t.cardinality) {
        (false, Some(_), _) => return Err("the schema declares this field's values; give `weights` instead".into()),
        (false, None, Some(_)) => return Err("the schema declares this field's values; no `cardinality`".into()),
        (false, None, None) if csv && declared.iter().any(|w| w.contains(['\n', '\r'])) => {
            return Err("a declared value holds a line break: CSV records are lines".into())
        }
        (false, None, None) => Words::Listed(declared.to_vec()),
        (true, Some(_), Some(_)) => return Err("give `values` or `cardinality`, not both".into()),
        (true, Some(list), None) => {
            let list =
                list.iter().map(|v| scalar_text(v).ok_or("`values` must be text")).collect::<Result<Vec<_>, _>>()?;
            let unframed = |w: &String| csv && w.contains(['\n', '\r']);
            if let Some(bad) = list.iter().find(|w| w.is_empty() || w.len() > max_bytes || unframed(w)) {
                return Err(format!("value {bad:?} is empty, over {max_bytes} bytes, or holds a line break in CSV"));
            }
            Words::Listed(list)
        }
        (true, None, n) => {
            let stem: String = spec.name.chars().filter(char::is_ascii_alphanumeric).take(8).collect::<String>() + "-";
            let fits = |n: u64, stem: &str| {
                let last = n.saturating_sub(1);
                let len = if stem.is_empty() { base36(last).len() } else { stem.len() + last.to_string().len() };
                len <= max_bytes
            };
            let capacity =
                |stem: &str| (1..=20u32).map(|d| 10u64.saturating_pow(d)).take_while(|&n| fits(n, stem)).last();
            let n = match n {
                Some(0) => return Err("cardinality must be at least 1".into()),
                Some(n) => n,
                None => 1000u64.min(capacity("").unwrap_or(36).max(1)),
            };
            let stem = if fits(n, &stem) {
                stem
            } else if fits(n, "") {
                String::new()
            } else {
                return Err(format!("{n} distinct values do not fit in max_bytes = {max_bytes}"));
            };
            Words::Generated { stem, n, max_bytes }
        }
    };
    let default_zipf = matches!(words, Words::Generated { .. }).then_some(1.0);
    let pick = pick(words.len(), t.weights.as_deref(), t.zipf.or(default_zipf))?;
    Ok(ValueGen::Words { words, pick })
}

/// How one of `n` values is chosen: by weight, Zipf-skewed or uniformly.
pub(super) fn pick(n: u64, weights: Option<&[f64]>, zipf: Option<f64>) -> Result<Pick, String> {
    if n == 0 {
        return Err("no values to draw from".into());
    }
    Ok(match (weights, zipf) {
        (Some(_), Some(_)) => return Err("give `weights` or `zipf`, not both".into()),
        (Some(w), None) => {
            if w.len() as u64 != n {
                return Err(format!("{} weights for {n} values", w.len()));
            }
            Pick::Weighted(WeightedIndex::new(w).map_err(|e| format!("weights: {e}"))?)
        }
        (None, Some(s)) => Pick::Zipf(Zipf::new(n, s).map_err(|e| format!("zipf = {s}: {e}"))?),
        (None, None) => Pick::Uniform(n),
    })
}

fn time(format: &TimeFormat, typed: &TypedField, is_time: bool) -> Result<ValueGen, String> {
    let before_ms = if is_time { 0 } else { 3_600_000 };
    let (resolution_ms, zoned) = match format {
        TimeFormat::Pattern(p) => {
            // What the pattern can say: the coarsest unit that loses nothing
            // of a probe instant with every unit set.
            let probe = 1_795_268_849_123; // 2026-11-21T13:47:29.123Z
            let text = |ms: i64| DateTime::from_timestamp_millis(ms).map(|t| t.format(p).to_string());
            let resolution = [86_400_000, 3_600_000, 60_000, 1_000, 1]
                .into_iter()
                .find(|u| text(probe - probe % u) == text(probe))
                .unwrap_or(1);
            let written = text(probe).ok_or("the probe instant cannot be written")?;
            match typed.parse_text(&written) {
                Ok(FieldValue::Time(t)) if t == probe - probe % resolution => {}
                _ => return Err(format!("pattern {p:?} writes {written:?}, which does not read back as that instant")),
            }
            (resolution, p.contains("%z") || p.contains("%:z"))
        }
        TimeFormat::Auto | TimeFormat::Rfc3339 => (1, true),
        _ => (1, false),
    };
    Ok(ValueGen::Time { format: format.clone(), resolution_ms, zoned, before_ms })
}

fn time_written(format: &TimeFormat, ms: i64, offset_s: i32, sub: i64, rng: &mut SmallRng) -> Written {
    let at = |ms: i64| {
        let utc = DateTime::from_timestamp_millis(ms).unwrap_or_default();
        utc.with_timezone(&FixedOffset::east_opt(offset_s).unwrap_or(FixedOffset::east_opt(0).expect("UTC")))
    };
    match format {
        TimeFormat::Auto if rng.gen_bool(0.5) => Written::Bare(ms.to_string()),
        TimeFormat::Auto | TimeFormat::Rfc3339 => {
            Written::Str(at(ms).to_rfc3339_opts(chrono::SecondsFormat::Millis, offset_s == 0))
        }
        TimeFormat::EpochS => Written::Bare(format_units(ms as i128, 3)),
        TimeFormat::EpochMs => Written::Bare(ms.to_string()),
        TimeFormat::EpochUs => Written::Bare((ms as i128 * 1_000 + (sub % 1_000) as i128).to_string()),
        TimeFormat::EpochNs => Written::Bare((ms as i128 * 1_000_000 + sub as i128).to_string()),
        TimeFormat::Pattern(p) => Written::Str(at(ms).format(p).to_string()),
    }
}
