//! Measure values as a flush writes them and a reader sums them: the wide
//! form of a [`Partial`](super::Partial), with its item codec.

use super::sketch::{ShowOptions, Shown};
use super::{Measure, MeasureKind, MeasureSet, Sketch, SketchParams};
use crate::schema::decimal::format_units;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::collections::BTreeMap;
use zigzag_core::table::{AttrValue, Item};

/// One measure's value. Sums, minima and maxima are in units of
/// 10^-scale of their field; a sketch measure is its sketch (what a report
/// shows of it: [`Sketch::shown`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MeasureValue {
    Count(u64),
    Sum(i128),
    /// None: no event had the field.
    Min(Option<i64>),
    Max(Option<i64>),
    Sketch(Box<Sketch>),
}

impl MeasureValue {
    pub fn zero(m: &Measure) -> MeasureValue {
        match m.kind {
            MeasureKind::Count => MeasureValue::Count(0),
            MeasureKind::Sum => MeasureValue::Sum(0),
            MeasureKind::Min => MeasureValue::Min(None),
            MeasureKind::Max => MeasureValue::Max(None),
            _ => match m.sketch {
                Some(params) => MeasureValue::Sketch(Box::new(Sketch::empty(params))),
                None => MeasureValue::Count(0), // every sketch kind has parameters
            },
        }
    }

    /// Adds `other` (of the same measure): counts and sums add, min and max
    /// take the extreme, sketches take the union. Order-free and exact.
    pub fn merge(&mut self, other: &MeasureValue) {
        use MeasureValue::*;
        match (self, other) {
            (Count(a), Count(b)) => *a += b,
            (Sum(a), Sum(b)) => *a += b,
            (Min(a), Min(b)) => *a = extreme(*a, *b, i64::min),
            (Max(a), Max(b)) => *a = extreme(*a, *b, i64::max),
            // One measure's sketches share their parameters: cannot fail.
            (Sketch(a), Sketch(b)) => {
                let _ = a.merge(b);
            }
            // Values of one measure are always of one kind.
            _ => {}
        }
    }

    /// The exact value in units (None: no value); a sketch's first column
    /// (a distinct count's estimate, a quantile measure's median), rounded.
    pub fn units(&self) -> Option<i128> {
        match self {
            MeasureValue::Count(n) => Some(*n as i128),
            MeasureValue::Sum(s) => Some(*s),
            MeasureValue::Min(v) | MeasureValue::Max(v) => v.map(i128::from),
            MeasureValue::Sketch(s) => match s.shown(&ShowOptions::default()).first() {
                Some(Shown::Count(n)) => Some(*n as i128),
                Some(Shown::Units(u)) => *u,
                Some(Shown::Estimate(e)) => e.map(|e| e.round() as i128),
                None => None,
            },
        }
    }

    /// What a report shows of it: one value per column
    /// ([`MeasureSet::measure_columns`]).
    pub fn shown(&self, ask: &ShowOptions) -> Vec<Shown> {
        match self {
            MeasureValue::Count(n) => vec![Shown::Count(*n)],
            MeasureValue::Sketch(s) => s.shown(ask),
            other => vec![Shown::Units(other.units())],
        }
    }

    /// The value as a number (charts, ratios).
    pub fn as_f64(&self, scale: u32) -> Option<f64> {
        self.units().map(|u| u as f64 / 10f64.powi(scale as i32))
    }

    /// Its text: counts as integers, the rest as exact decimals; empty
    /// when there is no value.
    pub fn text(&self, scale: u32) -> String {
        self.units().map_or_else(String::new, |u| format_units(u, scale))
    }

    /// Exact order (no value sorts first).
    pub fn compare(&self, other: &MeasureValue) -> Ordering {
        self.units().cmp(&other.units())
    }

    /// The item attribute holding `units` (an i64: always representable).
    pub fn attr(units: i64, scale: u32) -> AttrValue {
        AttrValue::N(Self::decimal(units as i128, scale).unwrap_or(Decimal::MAX))
    }

    /// `units` as a stored number, exactly, or None beyond what the store
    /// keeps exactly (±[`MAX_STORED_UNITS`]).
    pub fn decimal(units: i128, scale: u32) -> Option<Decimal> {
        if units.abs() > MAX_STORED_UNITS {
            return None;
        }
        Decimal::try_from_i128_with_scale(units, scale).ok().map(|d| d.normalize())
    }
}

/// The largest magnitude a stored number holds exactly, in units: a
/// 96-bit mantissa (the store's number type here; DynamoDB keeps 38
/// digits). Only sums can reach it: ~8.6e9 events at i64::MAX in one key.
pub const MAX_STORED_UNITS: i128 = (1 << 96) - 1;

fn extreme(a: Option<i64>, b: Option<i64>, pick: fn(i64, i64) -> i64) -> Option<i64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(pick(x, y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// A measure's stored sketch (an empty one when absent).
pub(super) fn attr_sketch(item: &Item, m: &Measure) -> Result<Sketch, String> {
    let params = m.sketch.ok_or_else(|| format!("measure {} keeps no sketch", m.name))?;
    attr_sketch_named(item, &m.name, params)
}

/// The sketch in attribute `name` (empty when absent), of `params`.
pub(crate) fn attr_sketch_named(item: &Item, name: &str, params: SketchParams) -> Result<Sketch, String> {
    match item.attrs.get(name) {
        None => Ok(Sketch::empty(params)),
        Some(AttrValue::B(bytes)) => Sketch::from_bytes(bytes, params).map_err(|e| format!("attribute {name:?}: {e}")),
        Some(other) => Err(format!("attribute {name:?} is {other:?}, not a sketch")),
    }
}

/// A stored number in units of 10^-scale, exactly.
pub(super) fn attr_units(item: &Item, name: &str, scale: u32) -> Result<Option<i128>, String> {
    match item.attrs.get(name) {
        None => Ok(None),
        Some(AttrValue::N(d)) => {
            let scaled = d.checked_mul(Decimal::from(10i64.pow(scale.min(18)))).ok_or("overflow");
            match scaled {
                Ok(s) if s.fract().is_zero() => {
                    i128::try_from(s).map(Some).map_err(|_| format!("attribute {name:?} = {d} is out of range"))
                }
                _ => Err(format!("attribute {name:?} = {d} has more than {scale} digits after the point")),
            }
        }
        Some(other) => Err(format!("attribute {name:?} is {other:?}, not a number")),
    }
}

/// Every measure's value of one key, in the set's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeasureValues(pub Vec<MeasureValue>);

impl MeasureValues {
    pub fn merge(&mut self, other: &MeasureValues) {
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            a.merge(b);
        }
    }

    /// Reads an item's measures (absent attributes: nothing counted).
    pub fn from_item(set: &MeasureSet, item: &Item) -> Result<MeasureValues, String> {
        let mut out = Vec::with_capacity(set.measures.len());
        for m in &set.measures {
            let narrow = |u: Option<i128>| {
                u.map(|u| i64::try_from(u).map_err(|_| format!("attribute {:?} = {u} is out of range", m.name)))
                    .transpose()
            };
            let units = || attr_units(item, &m.name, m.scale);
            out.push(match m.kind {
                MeasureKind::Count => MeasureValue::Count(
                    u64::try_from(units()?.unwrap_or(0))
                        .map_err(|_| format!("attribute {:?} is not a count", m.name))?,
                ),
                MeasureKind::Sum => MeasureValue::Sum(units()?.unwrap_or(0)),
                MeasureKind::Min => MeasureValue::Min(narrow(units()?)?),
                MeasureKind::Max => MeasureValue::Max(narrow(units()?)?),
                _ => MeasureValue::Sketch(Box::new(attr_sketch(item, m)?)),
            });
        }
        Ok(MeasureValues(out))
    }

    /// By measure name (ground truths are written this way).
    pub fn named(&self, set: &MeasureSet) -> BTreeMap<String, MeasureValue> {
        set.measures.iter().zip(&self.0).map(|(m, v)| (m.name.clone(), v.clone())).collect()
    }

    /// From values by name; a measure not named is zero.
    pub fn from_named(set: &MeasureSet, named: &BTreeMap<String, MeasureValue>) -> MeasureValues {
        MeasureValues(
            set.measures.iter().map(|m| named.get(&m.name).cloned().unwrap_or_else(|| MeasureValue::zero(m))).collect(),
        )
    }
}
