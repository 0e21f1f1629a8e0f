//! The measures of one aggregate (clicks, impressions, cost sum/min/max),
//! their item attributes, and the exactly-once update that applies one
//! flush's partial aggregate to a stored item.
//!
//! Costs are integers of micro-units (1e-6), so sums are exact in every
//! store (DynamoDB numbers are decimal; floats would not be).
//!
//! DynamoDB has no MIN/MAX update action. The update is written as the
//! common case, "this partial does not beat the stored min/max":
//! `SET cost_min = if_not_exists(cost_min, :min)` guarded by
//! `cost_min <= :min`. When the guard fails, the store returns the old item
//! and [`plan_update`] builds the one update that is right for it. So an
//! item costs one write, plus one when its min or max moves.

use crate::config::Field;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use zigzag_core::table::{AttrValue, CmpOp, Item, UpdateRequest};

/// Attribute of the bucket start (ms since the epoch).
pub const TIME_ATTR: &str = "t";
pub const CLICKS_ATTR: &str = "clicks";
pub const IMPRESSIONS_ATTR: &str = "impressions";
pub const COST_ATTR: &str = "cost";
pub const COST_MIN_ATTR: &str = "cost_min";
pub const COST_MAX_ATTR: &str = "cost_max";

const MICROS: u32 = 6;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    Clicks,
    Impressions,
    CostSum,
    CostMin,
    CostMax,
}

impl Measure {
    pub const ALL: [Measure; 5] =
        [Measure::Clicks, Measure::Impressions, Measure::CostSum, Measure::CostMin, Measure::CostMax];

    pub fn name(self) -> &'static str {
        match self {
            Measure::Clicks => "clicks",
            Measure::Impressions => "impressions",
            Measure::CostSum => "cost_sum",
            Measure::CostMin => "cost_min",
            Measure::CostMax => "cost_max",
        }
    }

    pub fn parse(text: &str) -> Option<Measure> {
        Measure::ALL.into_iter().find(|m| m.name() == text)
    }
}

/// A cost in micro-units from an event's number; None if it does not fit.
pub fn cost_to_micros(cost: f64) -> Option<i64> {
    let m = (cost * 1e6).round();
    (0.0..9.0e18).contains(&m).then_some(m as i64)
}

/// Text of a micro-unit amount, e.g. `12.5` for 12_500_000.
pub fn format_micros(v: i128) -> String {
    Decimal::from_i128_with_scale(v, MICROS).normalize().to_string()
}

/// Aggregated measures of one key and bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Measures {
    pub clicks: u64,
    pub impressions: u64,
    /// Sum of costs, micro-units.
    pub cost_sum: i128,
    /// Min/max cost (micro-units) over events that had one; `None` if none did.
    pub cost_min: Option<i64>,
    pub cost_max: Option<i64>,
}

impl Measures {
    #[inline]
    pub fn add_event(&mut self, click: bool, cost_micros: Option<i64>) {
        if click {
            self.clicks += 1;
        } else {
            self.impressions += 1;
        }
        if let Some(c) = cost_micros {
            self.cost_sum += c as i128;
            self.cost_min = Some(self.cost_min.map_or(c, |m| m.min(c)));
            self.cost_max = Some(self.cost_max.map_or(c, |m| m.max(c)));
        }
    }

    pub fn merge(&mut self, other: &Measures) {
        self.clicks += other.clicks;
        self.impressions += other.impressions;
        self.cost_sum += other.cost_sum;
        self.cost_min = min_opt(self.cost_min, other.cost_min);
        self.cost_max = max_opt(self.cost_max, other.cost_max);
    }

    /// Click-through rate: clicks per impression (None without impressions).
    pub fn ctr(&self) -> Option<f64> {
        (self.impressions > 0).then(|| self.clicks as f64 / self.impressions as f64)
    }

    /// Reads the measures of a stored item (absent attributes are zero).
    pub fn from_item(item: &Item) -> Result<Measures, String> {
        let num = |name: &str| -> Result<Option<Decimal>, String> {
            match item.attrs.get(name) {
                None => Ok(None),
                Some(AttrValue::N(n)) => Ok(Some(*n)),
                Some(other) => Err(format!("attribute {name:?} is {other:?}, not a number")),
            }
        };
        let count = |name: &str| -> Result<u64, String> {
            num(name)?
                .map_or(Ok(0), |d| u64::try_from(d).map_err(|_| format!("attribute {name:?} = {d} is not a count")))
        };
        let micros = |name: &str| -> Result<Option<i128>, String> {
            num(name)?
                .map(|d| {
                    let scaled = d * Decimal::from(1_000_000);
                    i128::try_from(scaled.trunc()).map_err(|_| format!("attribute {name:?} = {d} is out of range"))
                })
                .transpose()
        };
        let narrow = |v: Option<i128>| v.and_then(|v| i64::try_from(v).ok());
        Ok(Measures {
            clicks: count(CLICKS_ATTR)?,
            impressions: count(IMPRESSIONS_ATTR)?,
            cost_sum: micros(COST_ATTR)?.unwrap_or(0),
            cost_min: narrow(micros(COST_MIN_ATTR)?),
            cost_max: narrow(micros(COST_MAX_ATTR)?),
        })
    }
}

fn min_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

fn max_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

fn micros_value(v: i128) -> AttrValue {
    AttrValue::N(Decimal::from_i128_with_scale(v, MICROS).normalize())
}

/// One partial aggregate to apply under a shard's flush mark.
#[derive(Debug, Clone)]
pub struct ItemWrite<'a> {
    pub pk: String,
    pub sk: Vec<u8>,
    pub bucket_start: i64,
    pub dims: &'a [(Field, &'a str)],
    pub measures: Measures,
    /// Which measures the configuration stores.
    pub stored: &'a [Measure],
    /// The writer's mark attribute (`w@<lane>`) and this flush's number.
    pub mark_attr: &'a str,
    pub flush: u64,
}

/// The update that applies `w` exactly once, given what is known of the
/// stored item: nothing (first attempt: assume min/max do not move), or
/// the item a failed attempt returned. None when that item shows the flush
/// was already applied (its mark is at or past this flush).
pub fn plan_update(w: &ItemWrite, known: Option<&Item>) -> Option<UpdateRequest> {
    let flush = Decimal::from(w.flush);
    if let Some(old) = known {
        if let Some(AttrValue::N(mark)) = old.attrs.get(w.mark_attr) {
            if *mark >= flush {
                return None;
            }
        }
    }
    let mut req = UpdateRequest::new(w.pk.clone(), w.sk.clone())
        .set(w.mark_attr, AttrValue::N(flush))
        .guard(w.mark_attr, CmpOp::Lt, AttrValue::N(flush), true)
        .set_if_absent(TIME_ATTR, w.bucket_start);
    for (field, value) in w.dims {
        req = req.set_if_absent(field.name(), *value);
    }
    let m = &w.measures;
    let has = |x: Measure| w.stored.contains(&x);
    if has(Measure::Clicks) && m.clicks > 0 {
        req = req.add(CLICKS_ATTR, Decimal::from(m.clicks));
    }
    if has(Measure::Impressions) && m.impressions > 0 {
        req = req.add(IMPRESSIONS_ATTR, Decimal::from(m.impressions));
    }
    if has(Measure::CostSum) && m.cost_min.is_some() {
        let AttrValue::N(sum) = micros_value(m.cost_sum) else { unreachable!() };
        req = req.add(COST_ATTR, sum);
    }
    let known_micros = |attr: &str| stored_micros(known, attr);
    if let (true, Some(min)) = (has(Measure::CostMin), m.cost_min) {
        let v = micros_value(min as i128);
        // Lower the stored min only when known to be higher; else keep it
        // and require it to still be <= ours (it can only go down).
        req = match known_micros(COST_MIN_ATTR) {
            Some(old) if old > min as i128 => {
                req.set(COST_MIN_ATTR, v.clone()).guard(COST_MIN_ATTR, CmpOp::Gt, v, true)
            }
            _ => req.set_if_absent(COST_MIN_ATTR, v.clone()).guard(COST_MIN_ATTR, CmpOp::Le, v, true),
        };
    }
    if let (true, Some(max)) = (has(Measure::CostMax), m.cost_max) {
        let v = micros_value(max as i128);
        req = match known_micros(COST_MAX_ATTR) {
            Some(old) if old < max as i128 => {
                req.set(COST_MAX_ATTR, v.clone()).guard(COST_MAX_ATTR, CmpOp::Lt, v, true)
            }
            _ => req.set_if_absent(COST_MAX_ATTR, v.clone()).guard(COST_MAX_ATTR, CmpOp::Ge, v, true),
        };
    }
    Some(req)
}

/// What a writer remembers of an item's stored cost min and max (from the
/// item its last write returned), as the `known` item of [`plan_update`]:
/// a first attempt that moves them is then one write instead of two. A
/// stale memory only costs the second write (the guards check the store).
pub fn remembered_extremes(pk: &str, sk: &[u8], min: Option<i64>, max: Option<i64>) -> Item {
    let mut item = Item::new(pk, sk.to_vec());
    if let Some(v) = min {
        item.attrs.insert(COST_MIN_ATTR.into(), micros_value(v as i128));
    }
    if let Some(v) = max {
        item.attrs.insert(COST_MAX_ATTR.into(), micros_value(v as i128));
    }
    item
}

fn stored_micros(item: Option<&Item>, attr: &str) -> Option<i128> {
    match item?.attrs.get(attr)? {
        AttrValue::N(d) => i128::try_from((*d * Decimal::from(1_000_000)).trunc()).ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zigzag_core::table::{apply_update, UpdateOutcome};

    fn write(flush: u64, m: Measures) -> ItemWrite<'static> {
        ItemWrite {
            pk: "p".into(),
            sk: vec![1],
            bucket_start: 60_000,
            dims: &[(Field::Country, "DE")],
            measures: m,
            stored: &Measure::ALL,
            mark_attr: "w@1",
            flush,
        }
    }

    fn costs(cs: &[i64]) -> Measures {
        let mut m = Measures::default();
        for &c in cs {
            m.add_event(true, Some(c));
        }
        m
    }

    /// Applies like a flusher does: first attempt, then plan from the old item.
    fn apply(item: Option<Item>, w: &ItemWrite) -> (Option<Item>, u32) {
        let mut known: Option<Item> = None;
        let mut current = item;
        for attempt in 1..=4 {
            let Some(req) = plan_update(w, known.as_ref()) else { return (current, attempt - 1) };
            match apply_update(current.clone(), &req).unwrap() {
                UpdateOutcome::Applied(new) => return (Some(new), attempt),
                UpdateOutcome::ConditionFailed(old) => {
                    known = old.clone();
                    current = old;
                }
            }
        }
        panic!("no convergence");
    }

    #[test]
    fn min_max_and_sums_are_exact_and_replays_are_skipped() {
        let (item, n) = apply(None, &write(1, costs(&[5, 9])));
        assert_eq!(n, 1, "a new item takes one write");
        let (item, n) = apply(item, &write(2, costs(&[6, 7])));
        assert_eq!(n, 1, "min/max unchanged: one write");
        let (item, n) = apply(item, &write(3, costs(&[2, 12])));
        assert_eq!(n, 2, "min and max move: one more write");
        let (item, n) = apply(item.clone(), &write(3, costs(&[2, 12])));
        assert_eq!(n, 1, "replay: one failed attempt, then skipped");
        let m = Measures::from_item(item.as_ref().unwrap()).unwrap();
        assert_eq!(m.clicks, 6);
        assert_eq!(m.cost_sum, 41);
        assert_eq!((m.cost_min, m.cost_max), (Some(2), Some(12)));
        assert_eq!(item.unwrap().attrs[TIME_ATTR], AttrValue::from(60_000));
    }

    #[test]
    fn remembered_extremes_make_a_moving_min_or_max_one_write() {
        let (item, _) = apply(None, &write(1, costs(&[5, 9])));
        let m = Measures::from_item(item.as_ref().unwrap()).unwrap();
        let memory = remembered_extremes("p", &[1], m.cost_min, m.cost_max);
        let w = write(2, costs(&[2, 12]));
        let req = plan_update(&w, Some(&memory)).unwrap();
        let UpdateOutcome::Applied(after) = apply_update(item.clone(), &req).unwrap() else {
            panic!("min and max move in the first write")
        };
        let m = Measures::from_item(&after).unwrap();
        assert_eq!((m.cost_min, m.cost_max, m.clicks), (Some(2), Some(12), 4));
        // A stale memory (the store moved on) fails the guard: nothing applied.
        let stale = remembered_extremes("p", &[1], Some(9), Some(9));
        let req = plan_update(&write(3, costs(&[7])), Some(&stale)).unwrap();
        assert!(
            !apply_update(Some(after), &req).unwrap().applied(),
            "min 2 < 7: the guess 'min moves to 7' is refused"
        );
    }

    #[test]
    fn micros_round_trip() {
        assert_eq!(cost_to_micros(0.123456), Some(123_456));
        assert_eq!(cost_to_micros(-1.0), None);
        assert_eq!(format_micros(12_500_000), "12.5");
    }
}
