//! The value catalog (`zigzag_model::value_catalog`): every dimension value
//! a flush writes an item with, recorded before its items, once a day per
//! worker (the flusher remembers what it recorded; the store refuses a day
//! it has already, so forgetting costs a refused write, never a wrong one).

use super::*;
use std::collections::HashMap;
use zigzag_model::value_catalog;

/// (dimension, value) pairs a flusher remembers recording (~40 bytes each,
/// ~10 MB): past it, it starts over.
const VALUES_REMEMBERED: usize = 1 << 18;

/// What a flusher recorded: per (dimension, value) hash, the day.
pub(super) type Recorded = DashMap<u64, i64, FxBuildHasher>;

fn pair_hash(dimension: &str, value: &str) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(dimension.as_bytes());
    h.update(&[0]);
    h.update(value.as_bytes());
    h.digest()
}

impl Flusher {
    /// Records the values of `located`'s keys on the days of their buckets,
    /// those this flusher has not recorded for that day or a later one.
    pub(super) async fn write_values(&self, located: &[Located<'_>]) -> Result<(), FlushError> {
        if self.recorded.len() >= VALUES_REMEMBERED {
            self.recorded.clear();
        }
        let mut latest: HashMap<(&str, &str), i64> = HashMap::new();
        for (_, key, (_, names)) in located {
            let day = value_catalog::day_of(key.bucket);
            for (dim, value) in self.projection(*key).dims().iter().zip(names.iter()) {
                if value.is_empty() {
                    continue;
                }
                let d = latest.entry((dim.name.as_str(), value)).or_insert(day);
                *d = (*d).max(day);
            }
        }
        let Some(retention) = self.projections.iter().next().map(|km| km.retention()) else { return Ok(()) };
        let rollups: Vec<zigzag_model::Rollup> = self.sets.iter().map(|s| s.rollup).collect();
        let mut todo = Vec::new();
        let mut done = Vec::new();
        for ((dim, value), day) in latest {
            let h = pair_hash(dim, value);
            if self.recorded.get(&h).is_some_and(|d| *d >= day) {
                continue;
            }
            todo.push(value_catalog::record(dim, value, day, value_catalog::expires(retention, &rollups, day)));
            done.push((h, day));
        }
        self.write_upward(todo, Upward::Values).await?;
        for (h, day) in done {
            self.recorded.insert(h, day);
        }
        Ok(())
    }
}
