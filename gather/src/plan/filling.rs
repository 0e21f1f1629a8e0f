//! Parts of the table a layout version added that do not hold every
//! bucket yet (`crate::relayout`): a projection's rollup readable only
//! from an instant on. The planner reads such a part only where it holds
//! the whole range, so a report reads the parts it read before the change
//! until the fill is done, and its answer never changes because a fill
//! runs. Likewise a measure a projection gained: read from its cut on
//! only.

use std::collections::BTreeMap;
use zigzag_model::retention::Retention;
use zigzag_model::Rollup;

/// Per projection and rollup: readable from this instant (ms) on, and
/// what to say of it. And the retentions items written before a version
/// that lengthened it still carry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filling {
    from: BTreeMap<(String, Rollup), (i64, String)>,
    /// Per (projection, measure) it gained: readable from this instant on.
    measures: BTreeMap<(String, String), (i64, String)>,
    /// (a version's cut, the retention before it, the version): items of
    /// buckets before the cut were written with that retention's expiry.
    kept_before: Vec<(i64, Retention, u32)>,
}

impl Filling {
    /// `projection`'s `rollup` holds every bucket from `from_ms` on only;
    /// `note` says why ("filling: 63 %, …").
    pub fn insert(&mut self, projection: &str, rollup: Rollup, from_ms: i64, note: String) {
        self.from.insert((projection.to_string(), rollup), (from_ms, note));
    }

    /// `projection` holds `measure` in buckets from `from_ms` on only;
    /// `note` says why ("counted from … on only").
    pub fn insert_measure(&mut self, projection: &str, measure: &str, from_ms: i64, note: String) {
        self.measures.insert((projection.to_string(), measure.to_string()), (from_ms, note));
    }

    /// Whether `projection` holds `measure` in every bucket from
    /// `start_ms` on; else why not.
    pub fn measure_readable(&self, projection: &str, measure: &str, start_ms: i64) -> Result<(), String> {
        match self.measures.get(&(projection.to_string(), measure.to_string())) {
            Some((from, note)) if start_ms < *from => Err(note.clone()),
            _ => Ok(()),
        }
    }

    /// Layout version `version` changed the retention at its cut: items of
    /// earlier buckets keep `before`'s expiry (each item's expiry is set
    /// when it is written).
    pub fn kept_before(&mut self, cut_ms: i64, before: Retention, version: u32) {
        self.kept_before.push((cut_ms, before, version));
    }

    pub fn is_empty(&self) -> bool {
        self.from.is_empty() && self.measures.is_empty() && self.kept_before.is_empty()
    }

    /// Whether `rollup`'s buckets from `start_ms` on are still kept at
    /// `now_ms` by the retention they were written with: a version that
    /// lengthened the retention does not bring back what the shorter one
    /// lets expire.
    pub fn kept(&self, rollup: Rollup, start_ms: i64, now_ms: i64) -> Result<(), String> {
        for (cut, before, version) in &self.kept_before {
            if start_ms < *cut {
                before.readable(rollup, start_ms, now_ms).map_err(|why| {
                    format!("{why} (items written before layout version {version}'s cut keep their first retention)")
                })?;
            }
        }
        Ok(())
    }

    /// Whether a read of `projection`'s `rollup` from `start_ms` on holds
    /// every bucket; else why not.
    pub fn readable(&self, projection: &str, rollup: Rollup, start_ms: i64) -> Result<(), String> {
        match self.from.get(&(projection.to_string(), rollup)) {
            Some((from, note)) if start_ms < *from => Err(note.clone()),
            _ => Ok(()),
        }
    }

    /// Every instant from which a part or measure not held for every
    /// bucket is held, earliest first (a reader refused over a window may
    /// answer from one of them on).
    pub fn holds_from(&self) -> impl Iterator<Item = i64> {
        let mut at: Vec<i64> = self.from.values().chain(self.measures.values()).map(|(t, _)| *t).collect();
        at.retain(|t| *t < i64::MAX);
        at.sort_unstable();
        at.dedup();
        at.into_iter()
    }

    /// What a retention change leaves, in words: one line per version.
    pub fn retention_notes(&self) -> impl Iterator<Item = String> + '_ {
        self.kept_before.iter().map(|(cut, before, version)| {
            format!(
                "items of buckets before layout version {version}'s cut ({}) keep the retention they were written \
                 with ({})",
                zigzag_core::schema::format_instant(*cut),
                before.describe()
            )
        })
    }

    /// What to tell a reader: each part and measure not held for every
    /// bucket, in words, named.
    pub fn notes(&self) -> impl Iterator<Item = String> + '_ {
        let parts = self.from.iter().map(|((p, r), (_, note))| format!("{p} {r}: {note}"));
        parts.chain(self.measures.iter().map(|((p, m), (_, note))| format!("measure {m} of {p}: {note}")))
    }
}
