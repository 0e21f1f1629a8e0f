//! What a flush does not write of the item sets layout versions added:
//! their buckets before the version's cut, which the fill owns (or, for
//! a target counted from the cut, which nothing holds). See
//! `zigzag_model::versions` and `zigzag_gather::relayout::fill`.

use crate::aggregate::AggKey;
use zigzag_model::versions::Adopted;
use zigzag_model::{Projections, Rollup};

/// Per (projection index, rollup): the first bucket start a flush writes.
#[derive(Debug, Clone, Default)]
pub struct Cuts(Vec<((u8, Rollup), i64)>);

impl Cuts {
    /// The cuts of what `adopted` says, by `projections`' indices.
    pub fn of(projections: &Projections, adopted: &Adopted) -> Cuts {
        Cuts(
            adopted
                .written_from
                .iter()
                .filter_map(|(name, r, cut)| {
                    let i = projections.iter().position(|km| km.name() == name)?;
                    Some(((i as u8, *r), *cut))
                })
                .collect(),
        )
    }

    /// Whether a partial of `key` is written: not one of a bucket before
    /// its item set's cut.
    pub fn writes(&self, key: &AggKey) -> bool {
        !self.0.iter().any(|&((p, r), cut)| p == key.projection && r == key.rollup && key.bucket < cut)
    }
}
