//! A key's items written whole: a put of what the flush's first merge into
//! an empty item would leave, without a writer's mark. What a layout fill
//! writes (`gather layout apply`): putting the same items again changes
//! nothing, so a fill killed anywhere runs again and converges.
//!
//! Built by applying the flush's own updates ([`plan_update`],
//! [`plan_sketch_update`]) to no item, so a filled item holds each
//! measure's attribute exactly as an item ingest wrote would.

use super::update::{plan_sketch_update, plan_update, sketch_key, ItemWrite, SketchWrite};
use super::{MeasureSet, MeasureValue, MeasureValues};
use zigzag_core::table::{apply_update, AttrValue, Item, UpdateOutcome, UpdateRequest};

/// Where one key's items go, and what they say besides their measures.
#[derive(Debug, Clone)]
pub struct WholeKey<'a> {
    pub pk: String,
    pub sk: Vec<u8>,
    pub bucket_start: i64,
    /// The items' expiry (None: kept forever).
    pub expires: Option<i64>,
    pub dims: &'a [(&'a str, AttrValue)],
}

/// A throwaway writer's mark, removed from the items built.
const MARK: &str = "w@0";

/// The key's item and one item per non-empty sketch, whole.
pub fn whole_items(key: &WholeKey, set: &MeasureSet, values: &MeasureValues) -> Result<Vec<Item>, String> {
    let mut out = Vec::new();
    let item = ItemWrite {
        pk: key.pk.clone(),
        sk: key.sk.clone(),
        bucket_start: key.bucket_start,
        expires: key.expires,
        dims: key.dims,
        values,
        set,
        mark_attr: MARK,
        flush: 1,
    };
    out.extend(on_nothing(plan_update(&item, None)?)?);
    for (i, (m, v)) in set.measures().iter().zip(&values.0).enumerate() {
        let MeasureValue::Sketch(sketch) = v else { continue };
        if sketch.is_empty() {
            continue;
        }
        let w = SketchWrite {
            pk: key.pk.clone(),
            sk: sketch_key(&key.sk, i),
            bucket_start: key.bucket_start,
            expires: key.expires,
            dims: key.dims,
            measure: m,
            sketch,
            mark_attr: MARK,
            flush: 1,
        };
        out.extend(on_nothing(plan_sketch_update(&w, None)?)?);
    }
    Ok(out)
}

fn on_nothing(req: Option<UpdateRequest>) -> Result<Option<Item>, String> {
    let Some(req) = req else { return Ok(None) };
    match apply_update(None, &req).map_err(|e| e.to_string())? {
        UpdateOutcome::Applied(mut item) => {
            item.attrs.remove(MARK);
            Ok(Some(item))
        }
        other => Err(format!("an update of no item did not apply: {other:?}")),
    }
}
