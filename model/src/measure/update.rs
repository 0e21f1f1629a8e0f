//! The exactly-once update of one item by one flush's partial.
//!
//! Counts and sums are `ADD`s. DynamoDB has no MIN/MAX action, so a min is
//! written as the common case, "this partial does not beat the stored
//! min": `SET m = if_not_exists(m, :v)` guarded by `m <= :v`. When the
//! guard fails, the store returns the old item and [`plan_update`] builds
//! the one update that is right for it. So an item costs one write, plus
//! one when a min or max moves (none when the writer remembers the stored
//! extremes: [`remembered_extremes`]).
//!
//! Every write is guarded by the writer's mark (`w@lane < k`, then
//! `SET w@lane = k`): a replayed flush finds its mark and is skipped.
//!
//! A sketch measure's item ([`plan_sketch_update`]) is written under the
//! same mark when its kind's merge is not idempotent (a quantile sketch's
//! merge adds counts), so a replayed or zombie flush that finds its mark is
//! skipped, never merged twice; an idempotent kind (a distinct count's
//! register max) needs none, and a flush adding nothing new to it is not
//! written. Its writes are ordered by a
//! version: the first attempt assumes a new item (version absent) or the
//! one the writer remembers; a refused one returns the stored item, whose
//! sketch is merged with ours and written guarded by its version (so the
//! mark read with it is the mark written over).

use super::values::{attr_sketch_named, MAX_STORED_UNITS};
use super::{Measure, MeasureKind, MeasureSet, MeasureValue, MeasureValues, Sketch};
use crate::retention::TTL_ATTR;
use crate::rollup::TIME_ATTR;
use crate::schema::decimal::format_units;
use rust_decimal::Decimal;
use zigzag_core::table::{AttrValue, CmpOp, Item, UpdateRequest};

/// One partial aggregate to apply under a lane's flush mark.
#[derive(Debug, Clone)]
pub struct ItemWrite<'a> {
    pub pk: String,
    pub sk: Vec<u8>,
    pub bucket_start: i64,
    /// The item's [`TTL_ATTR`] (None: its rollup is kept forever).
    pub expires: Option<i64>,
    /// Dimension attributes (name, value).
    pub dims: &'a [(&'a str, AttrValue)],
    pub values: &'a MeasureValues,
    pub set: &'a MeasureSet,
    /// The writer's mark attribute (`w@<lane>`) and this flush's number.
    pub mark_attr: &'a str,
    pub flush: u64,
}

/// The update that applies `w` exactly once, given what is known of the
/// stored item: nothing (first attempt: assume min/max do not move), or
/// the item a failed attempt returned. None when that item shows the flush
/// was already applied (its mark is at or past this flush). An error when
/// a sum would leave the range the store keeps exactly: the write is
/// refused, never clamped.
pub fn plan_update(w: &ItemWrite, known: Option<&Item>) -> Result<Option<UpdateRequest>, String> {
    let flush = Decimal::from(w.flush);
    if let Some(AttrValue::N(mark)) = known.and_then(|old| old.attrs.get(w.mark_attr)) {
        if *mark >= flush {
            return Ok(None);
        }
    }
    let mut req = UpdateRequest::new(w.pk.clone(), w.sk.clone())
        .set(w.mark_attr, AttrValue::N(flush))
        .guard(w.mark_attr, CmpOp::Lt, AttrValue::N(flush), true)
        .set_if_absent(TIME_ATTR, w.bucket_start);
    if let Some(at) = w.expires {
        req = req.set_if_absent(TTL_ATTR, at);
    }
    for (name, value) in w.dims {
        req = req.set_if_absent(name, value.clone());
    }
    for (m, v) in w.set.measures().iter().zip(&w.values.0) {
        let name = m.name.as_str();
        let stored = || known.and_then(|k| super::values::attr_units(k, name, m.scale).ok().flatten());
        req = match *v {
            MeasureValue::Count(0) | MeasureValue::Sum(0) | MeasureValue::Min(None) | MeasureValue::Max(None) => req,
            // In its own item (`plan_sketch_update`).
            MeasureValue::Sketch(_) => req,
            MeasureValue::Count(n) => req.add(name, Decimal::from(n)),
            MeasureValue::Sum(s) => {
                let overflow = |total: i128| {
                    format!(
                        "measure {name}: a sum of {} would exceed the ±{} the store keeps exactly; \
                         declare its field with a smaller scale",
                        format_units(total, m.scale),
                        format_units(MAX_STORED_UNITS, m.scale)
                    )
                };
                if let Some(old) = stored() {
                    if (old + s).abs() > MAX_STORED_UNITS {
                        return Err(overflow(old + s));
                    }
                }
                let d = MeasureValue::decimal(s, m.scale).ok_or_else(|| overflow(s))?;
                // The stored total must stay in range after the ADD: a
                // refused guard brings the item back, and the check above.
                let (op, bound) =
                    if s > 0 { (CmpOp::Le, MAX_STORED_UNITS - s) } else { (CmpOp::Ge, -MAX_STORED_UNITS - s) };
                let bound = MeasureValue::decimal(bound, m.scale).ok_or_else(|| overflow(s))?;
                req.add(name, d).guard(name, op, AttrValue::N(bound), true)
            }
            MeasureValue::Min(Some(x)) => {
                let v = MeasureValue::attr(x, m.scale);
                // Lower the stored min only when known to be higher; else
                // keep it and require it to still be <= ours (it only goes down).
                match stored() {
                    Some(old) if old > x as i128 => req.set(name, v.clone()).guard(name, CmpOp::Gt, v, true),
                    _ => req.set_if_absent(name, v.clone()).guard(name, CmpOp::Le, v, true),
                }
            }
            MeasureValue::Max(Some(x)) => {
                let v = MeasureValue::attr(x, m.scale);
                match stored() {
                    Some(old) if old < x as i128 => req.set(name, v.clone()).guard(name, CmpOp::Lt, v, true),
                    _ => req.set_if_absent(name, v.clone()).guard(name, CmpOp::Ge, v, true),
                }
            }
        };
    }
    Ok(Some(req))
}

/// The stored minima and maxima of an item (in the set's order of its
/// min/max measures), to remember after a write.
pub fn extremes_of(set: &MeasureSet, item: &Item) -> Vec<Option<i64>> {
    set.measures()
        .iter()
        .filter(|m| matches!(m.kind, MeasureKind::Min | MeasureKind::Max))
        .map(|m| super::values::attr_units(item, &m.name, m.scale).ok().flatten().and_then(|u| i64::try_from(u).ok()))
        .collect()
}

/// What a writer remembers of an item's stored extremes (from the item its
/// last write returned, [`extremes_of`]), as the `known` item of
/// [`plan_update`]: a first attempt that moves them is then one write
/// instead of two. A stale memory only costs the second write (the guards
/// check the store).
pub fn remembered_extremes(set: &MeasureSet, pk: &str, sk: &[u8], extremes: &[Option<i64>]) -> Item {
    let mut item = Item::new(pk, sk.to_vec());
    let min_max = set.measures().iter().filter(|m| matches!(m.kind, MeasureKind::Min | MeasureKind::Max));
    for (m, v) in min_max.zip(extremes) {
        if let Some(v) = v {
            item.attrs.insert(m.name.clone(), MeasureValue::attr(*v, m.scale));
        }
    }
    item
}

/// The version attribute of a sketch item.
pub const VERSION_ATTR: &str = "v";

/// The sort key of a key's sketch for measure `index`: the key's item's
/// sort key, then `#` and the index (the same Z-address prefix, so every
/// query that reads the item reads its sketches).
pub fn sketch_key(sk: &[u8], index: usize) -> Vec<u8> {
    let mut key = Vec::with_capacity(sk.len() + 2);
    key.extend_from_slice(sk);
    key.push(b'#');
    key.push(index as u8);
    key
}

/// One flush's sketch of one key and bucket, to merge into its item.
#[derive(Debug, Clone)]
pub struct SketchWrite<'a> {
    pub pk: String,
    /// The sketch item's sort key ([`sketch_key`]).
    pub sk: Vec<u8>,
    pub bucket_start: i64,
    /// As [`ItemWrite::expires`].
    pub expires: Option<i64>,
    pub dims: &'a [(&'a str, AttrValue)],
    pub measure: &'a Measure,
    pub sketch: &'a Sketch,
    /// As [`ItemWrite::mark_attr`] and [`ItemWrite::flush`].
    pub mark_attr: &'a str,
    pub flush: u64,
}

/// The update that merges `w` into the stored sketch exactly once, given
/// what is known of the item: nothing (first attempt: assume there is
/// none), or an item read or returned by a refused attempt. None when that
/// item holds this flush already (its mark is at or past it). An unreadable
/// stored sketch is an error.
pub fn plan_sketch_update(w: &SketchWrite, known: Option<&Item>) -> Result<Option<UpdateRequest>, String> {
    // An idempotent merge (a distinct count's register max) needs no mark:
    // merging twice is merging once, and a flush adding nothing new is
    // not written at all.
    let mark = (!w.sketch.idempotent()).then_some((w.mark_attr, w.flush));
    let Some(mut req) =
        plan_sketches_merge(w.pk.clone(), w.sk.clone(), &[(&w.measure.name, w.sketch)], mark, known, false)?
    else {
        return Ok(None);
    };
    req = req.set_if_absent(TIME_ATTR, w.bucket_start);
    if let Some(at) = w.expires {
        req = req.set_if_absent(TTL_ATTR, at);
    }
    for (dim, value) in w.dims {
        req = req.set_if_absent(dim, value.clone());
    }
    Ok(Some(req))
}

/// The versioned merge of several sketches into attributes of one item,
/// written together under one version (`(attribute, sketch)`), and under
/// `mark` (a writer's mark attribute and flush) when given. None when the
/// known item holds the mark's flush already; without a mark, None when
/// the stored sketches already hold all of ours, unless `other_changes`
/// (the caller sets more attributes: the planner's statistics,
/// `crate::stats`, the other caller).
pub(crate) fn plan_sketches_merge(
    pk: String,
    sk: Vec<u8>,
    sketches: &[(&str, &Sketch)],
    mark: Option<(&str, u64)>,
    known: Option<&Item>,
    other_changes: bool,
) -> Result<Option<UpdateRequest>, String> {
    if let Some((attr, flush)) = mark {
        if let Some(AttrValue::N(at)) = known.and_then(|k| k.attrs.get(attr)) {
            if *at >= Decimal::from(flush) {
                return Ok(None);
            }
        }
    }
    let version = match known.and_then(|k| k.attrs.get(VERSION_ATTR)) {
        None => 0,
        Some(AttrValue::N(v)) => u64::try_from(*v).map_err(|_| format!("sketch version {v} is not a count"))?,
        Some(other) => return Err(format!("sketch version is {other:?}, not a number")),
    };
    let mut changed = other_changes || mark.is_some() || version == 0;
    let mut req = UpdateRequest::new(pk, sk);
    for &(name, sketch) in sketches {
        let merged = match known {
            Some(item) if version > 0 => {
                let stored = attr_sketch_named(item, name, sketch.params())?;
                let mut merged = stored.clone();
                merged.merge(sketch)?;
                changed |= merged != stored;
                merged
            }
            _ => sketch.clone(),
        };
        req = req.set(name, AttrValue::B(merged.to_bytes()));
    }
    if !changed {
        return Ok(None);
    }
    if let Some((attr, flush)) = mark {
        req = req.set(attr, AttrValue::N(Decimal::from(flush)));
    }
    let req = req.set(VERSION_ATTR, AttrValue::N(Decimal::from(version + 1)));
    // Versions start at 1: "below 1 or absent" is "absent".
    Ok(Some(match version {
        0 => req.guard(VERSION_ATTR, CmpOp::Lt, AttrValue::N(Decimal::ONE), true),
        v => req.guard(VERSION_ATTR, CmpOp::Eq, AttrValue::N(Decimal::from(v)), false),
    }))
}
