//! Which coarse buckets may stand for their finer items.
//!
//! Item sets flush on cadences of their own: a projection's hour and day
//! items lag its minute items by up to their cadence (5 minutes in the
//! shipped layout). A coarse bucket holds what its minutes hold only once
//! no shard owes it a record (`zigzag_lease::owed`): every shard's
//! coarse set is at its finest set's position, or the records between the
//! two have no event time in the bucket. The planner reads a coarse item
//! only where that holds, so a report equals the all-finest answer bucket
//! for bucket, at the finest items' freshness.

use std::sync::Arc;
use zigzag_lease::owed::Apart;
use zigzag_model::{Config, Rollup};

/// What the lease table says of the item sets' positions, for the planner.
#[derive(Debug, Clone, Default)]
pub struct Completeness {
    known: Option<Known>,
}

#[derive(Debug, Clone)]
struct Known {
    /// The layout's item sets, in their numbering: (projection, rollup).
    sets: Arc<Vec<(String, Rollup)>>,
    apart: Arc<Vec<Apart>>,
    /// Reading the lease table: requests and RCU.
    cost: (u64, f64),
}

impl Completeness {
    /// Every coarse bucket taken as complete: for a table written without
    /// a lease table (fixtures written by a flusher alone), where no set
    /// ever lags another.
    pub fn unchecked() -> Completeness {
        Completeness::default()
    }

    /// From the shards whose sets are apart ([`zigzag_lease::owed::read`]),
    /// numbered as `config` numbers its item sets.
    pub fn from_apart(config: &Config, apart: Vec<Apart>) -> Completeness {
        let sets = config.item_sets().into_iter().map(|s| (s.projection, s.rollup)).collect();
        Completeness { known: Some(Known { sets: Arc::new(sets), apart: Arc::new(apart), cost: (0, 0.0) }) }
    }

    /// Reads the lease table.
    pub async fn read(
        config: &Config,
        leases: &dyn zigzag_core::table::SortedTable,
    ) -> Result<Completeness, zigzag_lease::LeaseError> {
        let (apart, cost) = zigzag_lease::owed::read(leases).await?;
        let mut c = Completeness::from_apart(config, apart);
        if let Some(k) = &mut c.known {
            k.cost = cost;
        }
        Ok(c)
    }

    /// What reading the lease table cost: (requests, RCU).
    pub fn cost(&self) -> (u64, f64) {
        self.known.as_ref().map_or((0, 0.0), |k| k.cost)
    }

    /// Whether `projection`'s `coarse` items over `[lo, hi)` hold exactly
    /// what its `finest` items there hold.
    pub fn complete(&self, projection: &str, coarse: Rollup, finest: Rollup, lo: i64, hi: i64) -> bool {
        let Some(k) = &self.known else { return true };
        let index = |r: Rollup| k.sets.iter().position(|(p, s)| p == projection && *s == r);
        let (Some(c), Some(f)) = (index(coarse), index(finest)) else { return false };
        let (c, f) = (c as zigzag_lease::ItemSet, f as zigzag_lease::ItemSet);
        !k.apart.iter().any(|a| a.differs(c, f, lo, hi))
    }

    /// Shards whose sets are apart (for `--explain`); None: unchecked.
    pub fn apart_shards(&self) -> Option<usize> {
        self.known.as_ref().map(|k| k.apart.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zigzag_lease::owed::Owed;
    use zigzag_lease::Checkpoint;
    use zigzag_model::Position;

    #[test]
    fn a_coarse_bucket_is_complete_unless_a_shard_owes_it() {
        let config = Config::default();
        // Sets: base minute 0, hour 1, day 2 (then the shipped projections').
        let hour = Checkpoint::uniform(Some(Position::at(10))).advance(Some(&[0]), Position::at(20), 9);
        let h = 3_600_000;
        let owes = |spans: Option<Owed>| Apart { shard: "s".into(), checkpoint: Some(hour.clone()), owed: spans };
        let c = Completeness::from_apart(&config, vec![owes(Some(Owed::of_buckets([5 * h + 60_000], 60_000)))]);
        assert!(!c.complete("base", Rollup::Hour, Rollup::Minute, 5 * h, 6 * h), "a record at 05:01 is owed");
        assert!(c.complete("base", Rollup::Hour, Rollup::Minute, 4 * h, 5 * h), "nothing owed before 05:00");
        assert!(!c.complete("base", Rollup::Day, Rollup::Minute, 0, 24 * h), "the day holding 05:01");
        let unknown = Completeness::from_apart(&config, vec![owes(None)]);
        assert!(!unknown.complete("base", Rollup::Hour, Rollup::Minute, 0, h), "unknown: owed everywhere");
        assert!(Completeness::unchecked().complete("base", Rollup::Day, Rollup::Minute, 0, 24 * h));
        let none = Completeness::from_apart(&config, vec![]);
        assert!(none.complete("base", Rollup::Day, Rollup::Minute, 0, 24 * h), "nothing apart");
        assert!(!none.complete("nope", Rollup::Day, Rollup::Minute, 0, 24 * h), "no such set");
    }
}
