//! Reading the statistics ingest keeps (`zigzag_model::stats`) for the
//! planner's estimates: one query per candidate plan, over the statistics
//! items of its projection, rollup and the plan's partition bins, the
//! candidates' at once.

use crate::error::{GatherError, Result};
use crate::plan::Read;
use std::collections::{BTreeMap, HashMap};
use zigzag_core::table::{QueryRequest, SortKeyCondition, SortedTable};
use zigzag_model::stats::{stats_range, stats_sk, StoredStats, STATS_PK};

/// Statistics items read, by their sort key; and what reading them cost.
#[derive(Debug, Clone, Default)]
pub struct Statistics {
    by_sk: HashMap<Vec<u8>, StoredStats>,
    pub requests: u64,
    pub rcu: f64,
}

impl Statistics {
    /// No statistics at all (a table written before ingest kept them).
    pub fn is_empty(&self) -> bool {
        self.by_sk.is_empty()
    }

    /// Each bin read: its estimated items and the buckets it spans.
    pub fn bins(&self) -> impl Iterator<Item = &StoredStats> {
        self.by_sk.values()
    }

    /// The items of every bin read (each bin's estimate, summed).
    pub fn total_items(&self) -> f64 {
        self.by_sk.values().map(|s| s.items as f64).sum()
    }

    /// The items of the bins read whose statistics' sort key begins with
    /// `prefix` (`{projection}#`: one projection's).
    pub fn items_under(&self, prefix: &[u8]) -> f64 {
        self.by_sk.iter().filter(|(sk, _)| sk.starts_with(prefix)).map(|(_, s)| s.items as f64).sum()
    }

    /// When `read`'s items were last written (the latest flush into any
    /// of its bins), if the statistics say.
    pub fn written_at(&self, read: &Read) -> Option<i64> {
        read.boxes
            .iter()
            .filter_map(|b| b.bin_start)
            .filter_map(|bin| self.by_sk.get(&stats_sk(&read.projection, read.rollup, bin)))
            .filter_map(|s| s.at_ms)
            .max()
    }

    /// The items one bin of `projection`'s `rollup` holds (every prefix),
    /// if its statistics were read.
    pub fn bin_items(&self, projection: &str, rollup: zigzag_model::Rollup, bin_start: i64) -> Option<f64> {
        self.by_sk.get(&stats_sk(projection, rollup, bin_start)).map(|s| s.items as f64)
    }

    /// Estimated items of `read`'s span: per bin,
    /// [`StoredStats::items_between`] (none when the bin has no statistics:
    /// nothing was written).
    pub fn items(&self, read: &Read) -> f64 {
        read.boxes
            .iter()
            .filter_map(|b| b.bin_start)
            .filter_map(|bin| Some((bin, self.by_sk.get(&stats_sk(&read.projection, read.rollup, bin))?)))
            .map(|(bin, s)| s.items_between(read.rollup, bin, read.window.start, read.window.end))
            .sum()
    }

    /// Estimated items of `read`'s span that `fixed` values of the
    /// dimension keying its partitions hold: per bin, the items' share of
    /// that many of the values its statistics counted (each value taken as
    /// holding the mean). None when a bin read has statistics without a
    /// count of values (written before they were kept, or not keyed by a
    /// value).
    pub fn items_of_values(&self, read: &Read, fixed: f64) -> Option<f64> {
        let mut sum = 0.0;
        for bin in read.boxes.iter().filter_map(|b| b.bin_start) {
            let Some(s) = self.by_sk.get(&stats_sk(&read.projection, read.rollup, bin)) else { continue };
            let share = (fixed / s.values? as f64).min(1.0);
            sum += s.items_between(read.rollup, bin, read.window.start, read.window.end) * share;
        }
        Some(sum)
    }

    /// The share of the items of `bin` of `read`'s rollup that its span
    /// covers; None without statistics for it.
    pub fn window_share(&self, read: &Read, bin: i64) -> Option<f64> {
        let s = self.by_sk.get(&stats_sk(&read.projection, read.rollup, bin))?;
        let covered = s.items_between(read.rollup, bin, read.window.start, read.window.end);
        Some(if s.items == 0 { 0.0 } else { covered / s.items as f64 })
    }
}

/// The buckets the table's items span, `[first bucket's start, last
/// bucket's end)`, by the statistics of each projection's coarsest rollup
/// (a few items a year each), and what reading them cost; None when there
/// are none (nothing written, or a table from before statistics).
pub async fn kept_span<T: SortedTable + ?Sized>(
    table: &T,
    projections: &zigzag_model::Projections,
) -> Result<(Option<crate::window::Window>, u64, f64)> {
    let (mut span, mut requests, mut rcu): (Option<crate::window::Window>, u64, f64) = (None, 0, 0.0);
    for km in projections.iter() {
        let Some(rollup) = km.rollups().max_by_key(|r| r.unit_ms()) else { continue };
        let prefix = format!("{}#{rollup}#", km.name()).into_bytes();
        let stats = read(table, SortKeyCondition::BeginsWith(prefix)).await?;
        (requests, rcu) = (requests + stats.requests, rcu + stats.rcu);
        for s in stats.by_sk.values() {
            let (lo, hi) = (s.lo, s.hi + rollup.unit_ms());
            span = Some(match span {
                None => crate::window::Window { start: lo, end: hi },
                Some(w) => crate::window::Window { start: w.start.min(lo), end: w.end.max(hi) },
            });
        }
    }
    Ok((span, requests, rcu))
}

/// The end of the newest bucket of each projection's finest rollup (by the
/// statistics): past every event the table holds, to the finest unit.
/// None when nothing was written (or a table from before statistics).
pub async fn written_to<T: SortedTable + ?Sized>(
    table: &T,
    projections: &zigzag_model::Projections,
) -> Result<Option<i64>> {
    let mut end: Option<i64> = None;
    for km in projections.iter() {
        let Some(rollup) = km.rollups().min_by_key(|r| r.unit_ms()) else { continue };
        let prefix = format!("{}#{rollup}#", km.name()).into_bytes();
        let stats = read(table, SortKeyCondition::BeginsWith(prefix)).await?;
        for s in stats.by_sk.values() {
            end = end.max(Some(s.hi + rollup.unit_ms()));
        }
    }
    Ok(end)
}

/// The statistics of every read's projection, rollup and bins: one query
/// per (projection, rollup) over the bins of all its reads, all at once (a
/// report waits for one round trip, not one per candidate).
pub async fn load<T: SortedTable + ?Sized>(table: &T, reads: &[&Read]) -> Result<Statistics> {
    let mut ranges: BTreeMap<(&str, zigzag_model::Rollup), (i64, i64)> = BTreeMap::new();
    for read in reads {
        for bin in read.boxes.iter().filter_map(|b| b.bin_start) {
            let e = ranges.entry((read.projection.as_str(), read.rollup)).or_insert((bin, bin));
            *e = (e.0.min(bin), e.1.max(bin));
        }
    }
    let reads = ranges.into_iter().map(|((projection, rollup), (first, last))| {
        let (lo, hi) = stats_range(projection, rollup, first, last);
        read(table, SortKeyCondition::Between(lo, hi))
    });
    let mut stats = Statistics::default();
    for read in futures::future::try_join_all(reads).await? {
        stats.requests += read.requests;
        stats.rcu += read.rcu;
        stats.by_sk.extend(read.by_sk);
    }
    Ok(stats)
}

/// Every statistics item whose sort key `sk` admits, page after page.
pub(crate) async fn read<T: SortedTable + ?Sized>(table: &T, sk: SortKeyCondition) -> Result<Statistics> {
    let mut stats = Statistics::default();
    let mut req = QueryRequest::new(STATS_PK, sk);
    loop {
        let page = table.query(&req).await.map_err(|e| GatherError::Query {
            pk: STATS_PK.into(),
            source: zigzag_core::query::QueryError::Table(e),
        })?;
        stats.requests += 1;
        stats.rcu += page.consumed_rcu;
        for item in &page.items {
            let s = StoredStats::from_item(item)
                .map_err(|why| GatherError::Item { pk: item.pk.clone(), why: format!("statistics: {why}") })?;
            stats.by_sk.insert(item.sk.clone(), s);
        }
        match page.last_evaluated {
            Some(k) => req.exclusive_start = Some(k),
            None => return Ok(stats),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{plan_source, PlanRequest};
    use crate::window::WindowSpec;
    use zigzag_model::{Config, KeyModel, Rollup};

    const DAY: i64 = 86_400_000;
    const T: i64 = 1_795_132_800_000; // 2026-11-20

    /// A projection keyed by country: a report fixing one country (or
    /// two) reads that share of the values the statistics counted; a bin
    /// whose statistics did not count values gives no estimate (the
    /// planner then falls back on the declared cardinality).
    #[test]
    fn a_fixed_value_reads_its_share_of_the_values_counted() {
        let config = Config::from_toml(
            "[[projection]]\nname = \"by_country\"\ndimensions = [\"country\"]\nrollups = [\"day\"]\n\
             partition_by = \"country\"\n",
        )
        .unwrap();
        let km = KeyModel::projection(&config, &config.projections[0]).unwrap();
        let plan_for = |countries: &[&str]| {
            let filter = format!("country in {}", countries.join(","));
            let req = PlanRequest {
                window: WindowSpec::Absolute { from: T.to_string(), to: (T + DAY).to_string() },
                rollup: Some(Rollup::Day),
                step: None,
                timeseries: false,
                filters: crate::filter::FilterSet::parse(&[filter], &config).unwrap(),
                now: T + 2 * DAY,
                source: Default::default(),
                mixing: None,
                snap: None,
                filling: Default::default(),
            };
            plan_source(&km, req).unwrap().reads.remove(0)
        };
        let bin = Rollup::Day.bin().start_of(T);
        let stored = |values| StoredStats { items: 1_200, lo: T, hi: T, at_ms: None, slices: vec![], values };
        let mut stats = Statistics::default();
        stats.by_sk.insert(stats_sk("by_country", Rollup::Day, bin), stored(Some(12)));
        let (one, two) = (plan_for(&["DE"]), plan_for(&["DE", "FR"]));
        assert_eq!(stats.items(&one), 1_200.0, "every value's items");
        assert_eq!(stats.items_of_values(&one, 1.0), Some(100.0));
        assert_eq!(stats.items_of_values(&two, 2.0), Some(200.0));
        assert_eq!(stats.items_of_values(&one, 40.0), Some(1_200.0), "at most all of them");
        stats.by_sk.insert(stats_sk("by_country", Rollup::Day, bin), stored(None));
        assert_eq!(stats.items_of_values(&one, 1.0), None, "values not counted");
    }
}
