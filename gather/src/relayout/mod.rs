//! What changing a table's layout costs, before anything is written
//! (`gather layout diff`): each change of `zigzag_model::layout_diff`
//! with how it is made exact, and for one summed from the table's items,
//! the cheapest source by the statistics ingest keeps: the items and read
//! units read, the items and write units written, dollars at on-demand
//! prices, and the time at a read and write budget. What is written is
//! bounded twice: by the fewest items of any source (each holds one or
//! more per target item), and, where the table's value catalog holds every
//! value written, by the target's keys per bucket (the product of its
//! dimensions' distinct values) over the buckets each source bin spans.

pub mod adoption;
pub mod apply;
pub mod coverage;
pub mod dropped;
pub mod fill;

pub use coverage::{filling, filling_of};

use crate::error::Result;
use crate::plan::item_bytes;
use crate::statistics::Statistics;
use std::collections::BTreeMap;
use std::fmt::Write;
use zigzag_core::table::{SortKeyCondition, SortedTable};
use zigzag_model::layout::Layout;
use zigzag_model::layout_diff::{changes, Change, Fill, Source};
use zigzag_model::versions;
use zigzag_model::{Projections, Rollup};

/// USD per million write request units, on demand (us-east-1, since
/// November 2024); a unit writes 1 KB.
pub const USD_PER_MILLION_WRU: f64 = 0.625;

/// What filling one change from its source costs.
#[derive(Debug, Clone, PartialEq)]
pub struct Price {
    pub source: Source,
    pub items_read: f64,
    pub rcu: f64,
    /// At most: summing merges items, never adds any.
    pub items_written: f64,
    pub wcu: f64,
}

impl Price {
    pub fn usd(&self) -> f64 {
        crate::explain::cost_usd(self.rcu) + self.wcu * USD_PER_MILLION_WRU / 1e6
    }

    /// Seconds at `rcu_per_sec` and `wcu_per_sec`, the slower of the two.
    pub fn seconds(&self, rcu_per_sec: f64, wcu_per_sec: f64) -> f64 {
        (self.rcu / rcu_per_sec.max(f64::MIN_POSITIVE)).max(self.wcu / wcu_per_sec.max(f64::MIN_POSITIVE))
    }
}

/// A change, priced when the table fills it.
#[derive(Debug, Clone, PartialEq)]
pub struct Priced {
    pub change: Change,
    pub price: Option<Price>,
    /// What the fill cannot cover, if anything: history its source no
    /// longer keeps.
    pub short: Option<String>,
    /// What the change costs every later flush, if anything (a measure a
    /// projection gains).
    pub ongoing: Option<String>,
}

/// The price of reading `items` items of `source_bytes` bytes each and
/// writing as many of `target_bytes`: strongly consistent pages, as the
/// fill reads them (a unit per 4 KB), one write unit per started KB of an
/// item.
pub fn price(source: Source, items: f64, source_bytes: f64, target_bytes: f64) -> Price {
    let rcu = items * source_bytes / 4096.0;
    let wcu = items * (target_bytes / 1024.0).ceil().max(1.0);
    Price { source, items_read: items, rcu, items_written: items, wcu }
}

/// Why a fill from `source` holds less history than the target keeps: the
/// source's rollup is deleted sooner than the target's rollup is kept.
fn shorter_history(old: &Layout, new: &Layout, source: &Source, rollup: zigzag_model::Rollup) -> Option<String> {
    let from = old.retention.of(source.rollup)?;
    let kept = new.retention.of(rollup);
    let days = |d: std::time::Duration| format!("{} days", d.as_secs() / 86_400);
    kept.is_none_or(|k| k > from).then(|| {
        let wanted = kept.map_or("forever".to_string(), days);
        format!(
            "{} {} items are kept {}, so the fill covers that much history; the target keeps {wanted}",
            source.projection,
            source.rollup,
            days(from)
        )
    })
}

/// `p` writing at most `items` items of `target_bytes`.
fn bounded(p: Price, items: f64, target_bytes: f64) -> Price {
    let written = p.items_written.min(items);
    Price { items_written: written, wcu: written * (target_bytes / 1024.0).ceil().max(1.0), ..p }
}

/// Every change from the table's layout (`old`, read with `projections`)
/// to `new` (`new_projections`), each fill priced from the statistics:
/// the source holding the fewest items.
pub async fn diff(
    table: &dyn SortedTable,
    old: &Layout,
    projections: &Projections,
    new: &Layout,
    new_projections: &Projections,
    now: i64,
) -> Result<Vec<Priced>> {
    let whole = {
        let stored = versions::load(table).await.map_err(|e| crate::GatherError::Config(e.to_string()))?;
        zigzag_model::value_catalog::is_whole(stored.as_ref().map(|s| &s.item))
    };
    // Read once each, however many changes ask.
    let mut values: BTreeMap<String, f64> = BTreeMap::new();
    let mut statistics: BTreeMap<(String, Rollup), Statistics> = BTreeMap::new();
    let mut whole_items = None;
    let mut out = Vec::new();
    for change in changes(old, new) {
        let mut short = None;
        let price =
            match (&change.fill, &change.target, &change.target.as_ref().and_then(|(t, _)| new_projections.by_name(t)))
            {
                (Fill::From(sources), Some((_, rollup)), Some(km)) => {
                    let target_bytes = item_bytes(km);
                    // The target's keys per bucket, when the catalog says.
                    let mut keys = whole.then_some(1.0);
                    for d in km.dims().iter().take_while(|_| whole) {
                        if !values.contains_key(&d.name) {
                            let read = zigzag_model::value_catalog::read(table, &d.name, now)
                                .await
                                .map_err(|e| crate::GatherError::Config(format!("the value catalog: {e}")))?;
                            values.insert(d.name.clone(), read.values.len() as f64);
                        }
                        keys = keys.map(|k| k * values[&d.name]);
                    }
                    let mut best: Option<Price> = None;
                    let mut fewest = f64::INFINITY;
                    for s in sources {
                        let Some(source) = projections.by_name(&s.projection) else { continue };
                        let key = (s.projection.clone(), s.rollup);
                        if !statistics.contains_key(&key) {
                            let prefix = format!("{}#{}#", s.projection, s.rollup).into_bytes();
                            let read = crate::statistics::read(table, SortKeyCondition::BeginsWith(prefix)).await?;
                            statistics.insert(key.clone(), read);
                        }
                        let stats = &statistics[&key];
                        fewest = fewest.min(written_bound(stats, s.rollup, *rollup, keys));
                        let p = price(s.clone(), stats.total_items(), item_bytes(source), target_bytes);
                        if best.as_ref().is_none_or(|b| p.rcu < b.rcu) {
                            best = Some(p);
                        }
                    }
                    if let Some(p) = &best {
                        short = shorter_history(old, new, &p.source, *rollup);
                    }
                    best.map(|p| bounded(p, fewest, target_bytes))
                }
                _ => None,
            };
        let ongoing = match &change.gained {
            Some((projection, measures)) => {
                Some(gained_cost(table, new, projection, measures, &mut whole_items).await?)
            }
            None => None,
        };
        out.push(Priced { change, price, short, ongoing });
    }
    Ok(out)
}

/// What measures `projection` gains cost every later flush, in words: a
/// sketch kind is an item of its own beside each of the projection's items
/// (as many more item writes as the projection makes: its share of the
/// table's items, by the statistics); a counter adds its bytes to them,
/// no write. `whole` keeps the table's statistics once read.
async fn gained_cost(
    table: &dyn SortedTable,
    new: &Layout,
    projection: &str,
    measures: &[String],
    whole: &mut Option<Statistics>,
) -> Result<String> {
    let is_sketch = |m: &&String| new.measures.iter().any(|spec| &spec.name == *m && spec.kind.is_sketch());
    let (sketches, counters): (Vec<&String>, Vec<&String>) = measures.iter().partition(is_sketch);
    let mut said = Vec::new();
    if !sketches.is_empty() {
        // The table's statistics, read once for every gaining projection.
        let stats = match whole {
            Some(stats) => stats,
            None => whole.insert(crate::statistics::read(table, SortKeyCondition::Any).await?),
        };
        let (all, mine) = (stats.total_items(), stats.items_under(format!("{projection}#").as_bytes()));
        let share = match all > 0.0 {
            true => format!(
                "{projection} holds ~{:.0} % of the table's items (statistics), so about +{:.0} % item writes",
                100.0 * mine / all,
                100.0 * mine / all * sketches.len() as f64
            ),
            false => "no statistics say how many".into(),
        };
        let names: Vec<&str> = sketches.iter().map(|m| m.as_str()).collect();
        said.push(format!(
            "each later flush writes {} sketch item(s) ({}) beside each {projection} item: {share}",
            sketches.len(),
            names.join(", ")
        ));
    }
    if !counters.is_empty() {
        let names: Vec<&str> = counters.iter().map(|m| m.as_str()).collect();
        said.push(format!("{} add their bytes to {projection}'s items, no write", names.join(", ")));
    }
    Ok(said.join("; "))
}

/// What a target at `rollup` summed from a source at `from` (read as
/// `stats`) writes at most: per source bin, its items, and, when the
/// target's `keys` per bucket are known, that many in each of the target's
/// buckets the bin spans.
fn written_bound(stats: &Statistics, from: Rollup, rollup: Rollup, keys: Option<f64>) -> f64 {
    stats
        .bins()
        .map(|b| {
            let span = (b.hi - b.lo + from.unit_ms()) as f64;
            let buckets = (span / rollup.unit_ms() as f64).ceil() + 1.0;
            keys.map_or(b.items as f64, |k| (k * buckets).min(b.items as f64))
        })
        .sum()
}

/// The changes as `gather layout diff` prints them.
pub fn render(priced: &[Priced], rcu_per_sec: f64, wcu_per_sec: f64) -> String {
    let mut s = String::new();
    if priced.is_empty() {
        s.push_str("no change: the layout is the table's\n");
        return s;
    }
    for p in priced {
        let _ = writeln!(s, "- {}", p.change.what);
        let _ = match (&p.change.fill, &p.price) {
            (Fill::From(_), Some(price)) => {
                writeln!(
                    s,
                    "  summed from {} {} items: ~{:.0} items and ~{:.1} RCU read, at most ~{:.0} items and ~{:.0} WCU \
                     written, ${:.4}, ~{:.0} s at {rcu_per_sec} RCU/s and {wcu_per_sec} WCU/s; meanwhile reports read \
                     what they read today",
                    price.source.projection,
                    price.source.rollup,
                    price.items_read,
                    price.rcu,
                    price.items_written,
                    price.wcu,
                    price.usd(),
                    price.seconds(rcu_per_sec, wcu_per_sec)
                )
            }
            (Fill::From(sources), None) => {
                let names: Vec<String> = sources.iter().map(|s| format!("{} {}", s.projection, s.rollup)).collect();
                writeln!(s, "  summed from {} (not priced: no statistics)", names.join(" or "))
            }
            (Fill::Nothing(why), _) => writeln!(s, "  nothing to write: {why}"),
            (Fill::FromAdoption(why), _) => {
                writeln!(s, "  counted from each worker's adoption on, not before: {why}")
            }
            (Fill::Refused(why), _) => writeln!(s, "  refused: {why}"),
        };
        if let Some(short) = &p.short {
            let _ = writeln!(s, "  note: {short}");
        }
        if let Some(ongoing) = &p.ongoing {
            let _ = writeln!(s, "  costs: {ongoing}");
        }
    }
    let mut prices = priced.iter().filter_map(|p| p.price.as_ref());
    if let Some(first) = prices.next() {
        let t = prices.fold(first.clone(), |t, p| Price {
            items_read: t.items_read + p.items_read,
            rcu: t.rcu + p.rcu,
            items_written: t.items_written + p.items_written,
            wcu: t.wcu + p.wcu,
            ..t
        });
        let _ = writeln!(
            s,
            "\nall fills: ~{:.0} items and ~{:.1} RCU read, at most ~{:.0} items and ~{:.0} WCU written, ${:.4}, ~{:.0} s",
            t.items_read,
            t.rcu,
            t.items_written,
            t.wcu,
            t.usd(),
            t.seconds(rcu_per_sec, wcu_per_sec)
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use zigzag_model::Rollup;

    /// A source deleted sooner than the target is kept fills less history,
    /// and says so; one kept as long, or longer, says nothing.
    #[test]
    fn a_fill_from_a_source_kept_less_long_than_its_target_says_how_much_history_it_covers() {
        let layout = |retention: &str| {
            let toml = format!("{}\n[retention]\n{retention}\n", zigzag_model::config::SHIPPED_TOML);
            Layout::of(&zigzag_model::Config::from_toml(&toml).unwrap())
        };
        let source = Source { projection: "cc".into(), rollup: Rollup::Minute };
        let (short, long) = (layout("minute = \"14d\""), layout("minute = \"14d\"\nhour = \"400d\""));
        let said = shorter_history(&short, &short, &source, Rollup::Hour).expect("hours kept forever");
        assert_eq!(
            said,
            "cc minute items are kept 14 days, so the fill covers that much history; the target keeps forever"
        );
        let said = shorter_history(&short, &long, &source, Rollup::Hour).expect("hours kept 400 days");
        assert!(said.ends_with("the target keeps 400 days"), "{said}");
        assert_eq!(shorter_history(&short, &short, &source, Rollup::Minute), None, "minutes from minutes");
        let forever = Source { projection: "cc".into(), rollup: Rollup::Hour };
        assert_eq!(shorter_history(&short, &long, &forever, Rollup::Day), None, "a source kept forever");
    }

    #[test]
    fn a_fill_costs_its_source_s_pages_read_and_a_write_unit_per_started_kilobyte_of_each_item() {
        let source = Source { projection: "cc".into(), rollup: Rollup::Minute };
        let p = price(source, 8192.0, 100.0, 1500.0);
        assert_eq!(p.rcu, 8192.0 * 100.0 / 4096.0, "strongly consistent, as the fill reads: a unit per 4 KB");
        assert_eq!(p.wcu, 8192.0 * 2.0, "1.5 KB items: two units each");
        assert_eq!(p.items_written, p.items_read, "summing never adds an item");
        assert!((p.usd() - (p.rcu * 0.125 + p.wcu * 0.625) / 1e6).abs() < 1e-12);
        assert_eq!(p.seconds(100.0, 1000.0), 16.384, "the slower budget: 16,384 WCU at 1,000 a second");
        assert_eq!(p.seconds(10.0, 1e6), 20.0, "200 RCU at 10 a second");
    }
}
