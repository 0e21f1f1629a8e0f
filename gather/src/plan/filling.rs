//! Parts of the table a layout version added that do not hold every
//! bucket yet (`crate::relayout`): a projection's rollup readable only
//! from an instant on. The planner reads such a part only where it holds
//! the whole range, so a report reads the parts it read before the change
//! until the fill is done, and its answer never changes because a fill
//! runs.

use std::collections::BTreeMap;
use zigzag_model::Rollup;

/// Per projection and rollup: readable from this instant (ms) on, and
/// what to say of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filling {
    from: BTreeMap<(String, Rollup), (i64, String)>,
}

impl Filling {
    /// `projection`'s `rollup` holds every bucket from `from_ms` on only;
    /// `note` says why ("filling: 63 %, …").
    pub fn insert(&mut self, projection: &str, rollup: Rollup, from_ms: i64, note: String) {
        self.from.insert((projection.to_string(), rollup), (from_ms, note));
    }

    pub fn is_empty(&self) -> bool {
        self.from.is_empty()
    }

    /// Whether a read of `projection`'s `rollup` from `start_ms` on holds
    /// every bucket; else why not.
    pub fn readable(&self, projection: &str, rollup: Rollup, start_ms: i64) -> Result<(), String> {
        match self.from.get(&(projection.to_string(), rollup)) {
            Some((from, note)) if start_ms < *from => Err(note.clone()),
            _ => Ok(()),
        }
    }

    /// What to tell a reader: each part not filled, in words.
    pub fn notes(&self) -> impl Iterator<Item = &str> {
        self.from.values().map(|(_, note)| note.as_str())
    }
}
