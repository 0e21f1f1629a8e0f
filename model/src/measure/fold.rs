//! Folding stored partials of one key and bucket into one item, as
//! `gather compact` does once their buckets are closed (the seal): counts
//! and sums added, mins and maxes kept, sketches merged; the writers' marks
//! and sketch versions dropped (nothing writes a folded item again); every
//! other attribute (dimension values, the bucket start) is the same on
//! every partial and kept. Equal to what a reader's merge of the partials
//! gives, by construction: the same measure kinds, the same arithmetic.

use super::update::VERSION_ATTR;
use super::values::attr_sketch_named;
use super::{MeasureKind, MeasureSet};
use crate::mark::is_mark;
use zigzag_core::table::{AttrValue, Item};

/// `item` without what only writers need (marks, sketch versions).
pub fn settled(mut item: Item) -> Item {
    item.attrs.retain(|name, _| !is_mark(name) && name != VERSION_ATTR);
    item
}

/// Folds `other` (a partial with the same sort key) into `into` (settled).
pub fn fold_into(set: &MeasureSet, into: &mut Item, other: &Item) -> Result<(), String> {
    for (name, value) in &other.attrs {
        if is_mark(name) || name == VERSION_ATTR {
            continue;
        }
        let Some(m) = set.measures().iter().find(|m| &m.name == name) else {
            // A dimension value or the bucket start: equal on every partial.
            match into.attrs.get(name) {
                None => {
                    into.attrs.insert(name.clone(), value.clone());
                }
                Some(mine) if mine == value => {}
                Some(mine) => {
                    return Err(format!("partials of one key differ in {name:?}: {mine:?} and {value:?}"));
                }
            }
            continue;
        };
        let merged = match (into.attrs.get(name), value) {
            (None, v) => v.clone(),
            (Some(AttrValue::N(a)), AttrValue::N(b)) => AttrValue::N(match m.kind {
                MeasureKind::Count | MeasureKind::Sum => {
                    a.checked_add(*b).ok_or_else(|| format!("{name}: {a} + {b} overflows"))?
                }
                MeasureKind::Min => *a.min(b),
                MeasureKind::Max => *a.max(b),
                _ => return Err(format!("{name}: a {} stored as a number", m.kind.name())),
            }),
            (Some(AttrValue::B(_)), AttrValue::B(_)) if m.sketch.is_some() => {
                let params = m.sketch.expect("a sketch measure");
                let mut sketch = attr_sketch_named(into, name, params)?;
                sketch.merge(&attr_sketch_named(other, name, params)?)?;
                AttrValue::B(sketch.to_bytes())
            }
            (Some(a), b) => return Err(format!("{name}: cannot fold {a:?} with {b:?}")),
        };
        into.attrs.insert(name.clone(), merged);
    }
    Ok(())
}

/// Partials (any order, any partition) folded per sort key, settled, under
/// `pk`; sorted by sort key.
pub fn fold_partials(set: &MeasureSet, pk: &str, partials: Vec<Item>) -> Result<Vec<Item>, String> {
    let mut by_sk: std::collections::BTreeMap<Vec<u8>, Item> = std::collections::BTreeMap::new();
    for p in partials {
        match by_sk.get_mut(&p.sk) {
            Some(into) => fold_into(set, into, &p)?,
            None => {
                let mut first = settled(p);
                first.pk = pk.to_string();
                by_sk.insert(first.sk.clone(), first);
            }
        }
    }
    Ok(by_sk.into_values().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::MeasureValues;
    use crate::Config;
    use rust_decimal::Decimal;

    fn item(pk: &str, sk: u8, attrs: &[(&str, AttrValue)]) -> Item {
        let mut i = Item::new(pk, vec![sk]);
        for (k, v) in attrs {
            i.attrs.insert(k.to_string(), v.clone());
        }
        i
    }

    fn n(v: i64) -> AttrValue {
        AttrValue::N(Decimal::from(v))
    }

    #[test]
    fn partials_fold_to_what_a_reader_merges_and_lose_their_marks() {
        let config = Config::default();
        let set = config.measure_set().unwrap();
        let a = item(
            "000#minute#x",
            7,
            &[
                ("t", n(60)),
                ("country", AttrValue::S("DE".into())),
                ("clicks", n(2)),
                ("impressions", n(10)),
                ("w@3", n(9)),
            ],
        );
        let b = item(
            "005#minute#x",
            7,
            &[("t", n(60)), ("country", AttrValue::S("DE".into())), ("clicks", n(1)), ("w@1", n(4))],
        );
        let c = item("002#minute#x", 8, &[("t", n(60)), ("country", AttrValue::S("FR".into())), ("impressions", n(5))]);
        let folded = fold_partials(&set, "c#x", vec![a.clone(), b.clone(), c.clone()]).unwrap();
        assert_eq!(folded.len(), 2, "one item per sort key");
        assert!(folded.iter().all(|i| i.pk == "c#x" && !i.attrs.keys().any(|k| is_mark(k))));
        let mut merged = MeasureValues::from_item(&set, &a).unwrap();
        merged.merge(&MeasureValues::from_item(&set, &b).unwrap());
        assert_eq!(MeasureValues::from_item(&set, &folded[0]).unwrap(), merged, "as a reader merges them");
        assert_eq!(folded[0].attrs.get("country"), Some(&AttrValue::S("DE".into())));
        assert_eq!(MeasureValues::from_item(&set, &folded[1]).unwrap(), MeasureValues::from_item(&set, &c).unwrap());
        let other = item("001#minute#x", 7, &[("country", AttrValue::S("FR".into()))]);
        assert!(fold_partials(&set, "c#x", vec![a, other]).is_err(), "differing dimension values are an error");
    }
}
