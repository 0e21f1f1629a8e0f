//! A flush's partials, merged across shards, rollups and the records that
//! waited for a slower cadence: one entry per item the flush writes.

use crate::aggregate::{IdentityCollision, KeyValues, MergedPartials};
use zigzag_model::MeasureSet;

/// One flush's partials, merged across shards and rollups.
#[derive(Default)]
pub struct Merged {
    pub(super) partials: MergedPartials,
}

impl From<MergedPartials> for Merged {
    fn from(partials: MergedPartials) -> Merged {
        Merged { partials }
    }
}

impl Merged {
    /// Adds another merge's partials (a key in both is merged; names must
    /// agree, else two keys share an identity).
    pub fn absorb(&mut self, set: &MeasureSet, other: Merged) -> Result<(), IdentityCollision> {
        for (key, (partial, names)) in other.partials {
            match self.partials.entry(key) {
                std::collections::hash_map::Entry::Occupied(mut e) => {
                    let (mine, known) = e.get_mut();
                    if *known != names {
                        let values = |n: &KeyValues| n.iter().map(str::to_string).collect();
                        return Err(IdentityCollision { id: key.id(), a: values(known), b: values(&names) });
                    }
                    mine.merge(set, &partial);
                }
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert((partial, names));
                }
            }
        }
        Ok(())
    }

    /// Distinct items the flush writes.
    pub fn len(&self) -> usize {
        self.partials.len()
    }

    pub fn is_empty(&self) -> bool {
        self.partials.is_empty()
    }
}
