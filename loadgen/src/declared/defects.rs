//! The malformed mix for a declared schema: each defect that the schema
//! makes possible, chosen uniformly, on a field chosen uniformly among those
//! it applies to. Every defect breaks a rule the decoder must enforce, so
//! every such record must be dead-lettered.

use super::render::Shape;
use super::value_gen::Written;
use rand::rngs::SmallRng;
use rand::Rng;
use zigzag_model::schema::decimal::format_units;
use zigzag_model::schema::value::Bounds;
use zigzag_model::schema::{FieldSpec, FieldType};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// JSON cut in half.
    Truncated,
    /// CSV with one column too many.
    ExtraColumn,
    /// A byte that is not UTF-8.
    NotUtf8,
    /// A JSON array where an object belongs.
    NotAnObject,
    /// A required field left out.
    Missing,
    /// A word in a number, boolean or timestamp; a number in a JSON string.
    WrongType,
    /// One byte over a string's `max_bytes`.
    TooLong,
    /// A string outside the field's declared values.
    NotAllowed,
    /// A number one unit beyond its bounds (or beyond 64 bits).
    OutOfRange,
    /// One digit more than the scale.
    TooPrecise,
    /// Time text no format reads.
    BadTimestamp,
    /// An event time before 2000.
    AncientTime,
    /// A top-level key twice.
    Repeated,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Truncated => "truncated",
            Kind::ExtraColumn => "extra_column",
            Kind::NotUtf8 => "not_utf8",
            Kind::NotAnObject => "not_an_object",
            Kind::Missing => "missing_field",
            Kind::WrongType => "wrong_type",
            Kind::TooLong => "too_long",
            Kind::NotAllowed => "not_allowed",
            Kind::OutOfRange => "out_of_range",
            Kind::TooPrecise => "too_precise",
            Kind::BadTimestamp => "bad_timestamp",
            Kind::AncientTime => "ancient_time",
            Kind::Repeated => "duplicate_field",
        }
    }
}

/// Strings longer than this are not lengthened (the record would be
/// refused for its size, which is another defect).
const LONGEST_TOO_LONG: u32 = 64 * 1024;

/// The defects a schema allows, each with the fields it applies to.
#[derive(Debug, Clone)]
pub(crate) struct Defects {
    kinds: Vec<(Kind, Vec<usize>)>,
    time: usize,
}

/// A record broken by one defect: its parts changed, and what to do with
/// the rendered bytes.
pub(crate) struct Broken {
    pub name: &'static str,
    pub repeat: Option<usize>,
    pub bytes: Option<fn(&mut Vec<u8>)>,
}

impl Defects {
    pub(crate) fn new(fields: &[FieldSpec], time: usize, shape: &Shape) -> Defects {
        let csv = shape.is_csv();
        let which = |p: &dyn Fn(&FieldSpec) -> bool| -> Vec<usize> {
            fields.iter().enumerate().filter(|(_, f)| p(f)).map(|(i, _)| i).collect()
        };
        let bounded = |f: &FieldSpec| Bounds::of(f).is_ok_and(|b| b.min > i64::MIN || b.max < i64::MAX);
        let mut kinds = vec![
            (Kind::NotUtf8, vec![time]),
            (Kind::Missing, which(&|f| f.default.is_none() && !f.optional)),
            (Kind::WrongType, which(&|f| !csv || !matches!(f.kind, FieldType::String { .. }))),
            (
                Kind::TooLong,
                which(&|f| matches!(f.kind, FieldType::String { max_bytes, .. } if max_bytes < LONGEST_TOO_LONG)),
            ),
            (Kind::NotAllowed, which(&|f| matches!(&f.kind, FieldType::String { values, .. } if !values.is_empty()))),
            (Kind::OutOfRange, which(&|f| f.scale().is_some() && bounded(f))),
            (Kind::TooPrecise, which(&|f| f.scale().is_some())),
            (Kind::BadTimestamp, which(&|f| matches!(f.kind, FieldType::Timestamp { .. }))),
            (Kind::AncientTime, vec![time]),
        ];
        if csv {
            kinds.push((Kind::ExtraColumn, vec![time]));
        } else {
            kinds.push((Kind::Truncated, vec![time]));
            kinds.push((Kind::NotAnObject, vec![time]));
            // Required without a default: never left out, so written twice.
            let required = which(&|f| f.default.is_none() && !f.optional);
            kinds.push((Kind::Repeated, shape.top_level().into_iter().filter(|i| required.contains(i)).collect()));
        }
        kinds.retain(|(_, on)| !on.is_empty());
        Defects { kinds, time }
    }

    /// The names of the defects this schema allows, sorted.
    pub(crate) fn names(&self) -> Vec<&'static str> {
        let mut names: Vec<_> = self.kinds.iter().map(|(k, _)| k.name()).collect();
        names.sort_unstable();
        names
    }

    /// Breaks the record whose fields are written as `parts`.
    pub(crate) fn apply(
        &self,
        rng: &mut SmallRng,
        fields: &[FieldSpec],
        parts: &mut [Written],
        ancient: impl Fn(&mut SmallRng) -> Written,
    ) -> Broken {
        let (kind, on) = &self.kinds[rng.gen_range(0..self.kinds.len())];
        let i = on[rng.gen_range(0..on.len())];
        let f = &fields[i];
        let mut broken = Broken { name: kind.name(), repeat: None, bytes: None };
        match kind {
            Kind::Truncated => broken.bytes = Some(|b| b.truncate(b.len() / 2)),
            Kind::ExtraColumn => broken.bytes = Some(|b| b.extend_from_slice(b",extra")),
            Kind::NotUtf8 => broken.bytes = Some(|b| b.splice(0..0, [0xff, 0xfe]).for_each(drop)),
            Kind::NotAnObject => {
                broken.bytes = Some(|b| {
                    b.insert(0, b'[');
                    b.push(b']')
                })
            }
            Kind::Missing => parts[i] = Written::Omit,
            Kind::WrongType => {
                parts[i] = match f.kind {
                    FieldType::String { .. } => Written::Bare("7".into()),
                    _ => Written::Str("oops".into()),
                }
            }
            Kind::TooLong => {
                let FieldType::String { max_bytes, .. } = f.kind else { unreachable!("string fields only") };
                parts[i] = Written::Str("x".repeat(max_bytes as usize + 1));
            }
            Kind::NotAllowed => parts[i] = Written::Str("not-a-declared-value".into()),
            Kind::OutOfRange => {
                let b = Bounds::of(f).unwrap_or(Bounds { min: i64::MIN, max: i64::MAX });
                let beyond = if b.max < i64::MAX { b.max as i128 + 1 } else { b.min as i128 - 1 };
                parts[i] = Written::Bare(format_units(beyond, f.scale().unwrap_or(0)));
            }
            Kind::TooPrecise => parts[i] = Written::Bare(format!("0.{}1", "0".repeat(f.scale().unwrap_or(0) as usize))),
            Kind::BadTimestamp => parts[i] = Written::Str("yesterday".into()),
            Kind::AncientTime => parts[self.time] = ancient(rng),
            Kind::Repeated => broken.repeat = Some(i),
        }
        broken
    }
}
