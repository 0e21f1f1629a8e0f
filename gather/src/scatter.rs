//! `gather scatter`: the scatter rule (`zigzag_model::scatter::
//! scatter_prefixes`, the GSI write-scaling article's write-rate formula) applied to the items
//! per bucket each projection and rollup holds, as the table's statistics
//! measured them, for a number of writers and a flush interval: how many
//! prefixes each needs, against how many it has.

use crate::error::{GatherError, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use zigzag_core::table::{QueryRequest, SortKeyCondition, SortedTable};
use zigzag_model::scatter::{one_key_exceeds_a_partition, scatter_prefixes};
use zigzag_model::stats::{StoredStats, STATS_PK};
use zigzag_model::{Projections, Rollup, ScatterMode};

/// One projection and rollup: what it holds and what the rule asks of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Advice {
    pub projection: String,
    pub rollup: Rollup,
    /// Partition bins with statistics.
    pub bins: usize,
    /// The most items any bin held per bucket (None: no statistics).
    pub peak_items: Option<f64>,
    pub mode: ScatterMode,
    pub configured: u32,
    pub recommended: Option<u32>,
    pub note: String,
}

/// The advice for every projection and rollup of `projections`, at
/// `writers` workers flushing every `interval_s` seconds.
pub async fn advise<T: SortedTable + ?Sized>(
    table: &T,
    projections: &Projections,
    writers: u32,
    interval_s: f64,
) -> Result<Vec<Advice>> {
    let mut out = Vec::new();
    for km in projections.iter() {
        for rollup in km.rollups() {
            let prefix = format!("{}#{rollup}#", km.name()).into_bytes();
            let mut req = QueryRequest::new(STATS_PK, SortKeyCondition::BeginsWith(prefix));
            let mut peak: Option<f64> = None;
            let mut bins = 0;
            loop {
                let page = table.query(&req).await.map_err(|e| GatherError::Query {
                    pk: STATS_PK.into(),
                    source: zigzag_core::query::QueryError::Table(e),
                })?;
                for item in &page.items {
                    let s = StoredStats::from_item(item)
                        .map_err(|why| GatherError::Item { pk: item.pk.clone(), why: format!("statistics: {why}") })?;
                    bins += 1;
                    // Items per bucket in the bin's busiest time slice. In hash mode an
                    // item is a key in a bucket; in random mode every write of a key
                    // lands in a prefix of its own, so it bounds the keys from above.
                    let n = s.peak_items_per_bucket(rollup);
                    peak = Some(peak.map_or(n, |p: f64| p.max(n)));
                }
                match page.last_evaluated {
                    Some(k) => req.exclusive_start = Some(k),
                    None => break,
                }
            }
            let configured = km.prefixes();
            // Keyed by a dimension's value (`partition_by`): the items of a
            // bucket are spread over the values' partitions, which the
            // statistics do not count apart.
            let keyed = km.partition_dim().map(|d| d.name.clone());
            let recommended =
                peak.filter(|_| keyed.is_none()).map(|items| scatter_prefixes(items, writers, interval_s));
            let note = match (recommended, km.mode()) {
                (None, _) if keyed.is_some() => format!(
                    "keyed by {}: each value has partitions of its own; apply the rule to one value's items",
                    keyed.unwrap_or_default()
                ),
                (None, _) => "no statistics (nothing written yet, or a table from before them)".to_string(),
                (Some(_), ScatterMode::Hash) if one_key_exceeds_a_partition(writers, interval_s) => {
                    "one key alone exceeds a partition: only random mode spreads it".to_string()
                }
                (Some(r), _) if r > configured => format!("raise to {r}"),
                (Some(r), _) if r < configured => {
                    format!("{r} would do (each report reads all {configured}: fewer read less)")
                }
                (Some(_), _) => "as the rule says".to_string(),
            };
            out.push(Advice {
                projection: km.name().to_string(),
                rollup,
                bins,
                peak_items: peak,
                mode: km.mode(),
                configured,
                recommended,
                note,
            });
        }
    }
    Ok(out)
}

pub fn render(advice: &[Advice], writers: u32, interval_s: f64) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header([
        "projection",
        "rollup",
        "bins",
        "items / bucket (peak)",
        "mode",
        "prefixes",
        "rule",
        "",
    ]);
    for a in advice {
        t.add_row([
            a.projection.clone(),
            a.rollup.to_string(),
            a.bins.to_string(),
            a.peak_items.map_or("-".into(), |n| format!("{n:.0}")),
            a.mode.name().to_string(),
            a.configured.to_string(),
            a.recommended.map_or("-".into(), |r| r.to_string()),
            a.note.clone(),
        ]);
    }
    format!(
        "{t}\nrule: the least prefixes P with items × writers / (interval × P) ≤ 500 writes/s a partition, \
         at {writers} writer(s) writing each item every {interval_s} s (pass an item set's own cadence, \
         flush.every_ms, as --interval; model/src/projection.rs)\n"
    )
}
