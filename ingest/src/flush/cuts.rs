//! What a flush does not write of the item sets layout versions added:
//! their buckets before the version's cut, which the fill owns (or, for
//! a target counted from the cut, which nothing holds), and the measures a
//! version gave a projection, in its buckets before the cut (no item
//! before it holds them: a late event does not start one). See
//! `zigzag_model::versions` and `zigzag_gather::relayout::fill`.

use crate::aggregate::AggKey;
use zigzag_model::measure::{MeasureSet, MeasureValue, MeasureValues};
use zigzag_model::versions::Adopted;
use zigzag_model::{Projections, Rollup};

/// Per (projection index, rollup): the first bucket start a flush writes;
/// per (projection index, measure position in it): the first bucket start
/// it writes the measure in.
#[derive(Debug, Clone, Default)]
pub struct Cuts {
    parts: Vec<((u8, Rollup), i64)>,
    measures: Vec<((u8, usize), i64)>,
}

impl Cuts {
    /// The cuts of what `adopted` says, by `projections`' indices.
    pub fn of(projections: &Projections, adopted: &Adopted) -> Cuts {
        let index = |name: &str| projections.iter().position(|km| km.name() == name);
        let parts =
            adopted.written_from.iter().filter_map(|(name, r, cut)| Some(((index(name)? as u8, *r), *cut))).collect();
        let measures = adopted
            .measured_from
            .iter()
            .filter_map(|(name, measure, cut)| {
                let i = index(name)?;
                let at = projections.get(i)?.measures().position(measure)?;
                Some(((i as u8, at), *cut))
            })
            .collect();
        Cuts { parts, measures }
    }

    /// Whether a partial of `key` is written: not one of a bucket before
    /// its item set's cut.
    pub fn writes(&self, key: &AggKey) -> bool {
        !self.parts.iter().any(|&((p, r), cut)| p == key.projection && r == key.rollup && key.bucket < cut)
    }

    /// `values` (in `key`'s projection's measures) as written: a measure
    /// gained at a cut after `key`'s bucket counts nothing.
    pub fn measured(&self, key: &AggKey, mut values: MeasureValues, set: &MeasureSet) -> MeasureValues {
        for &((p, at), cut) in &self.measures {
            if p == key.projection && key.bucket < cut {
                if let (Some(v), Some(m)) = (values.0.get_mut(at), set.measures().get(at)) {
                    *v = MeasureValue::zero(m);
                }
            }
        }
        values
    }
}
