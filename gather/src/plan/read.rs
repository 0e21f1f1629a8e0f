//! One read of a plan: a span of the window in one rollup of one
//! projection, as the Z-range queries of its bins' boxes in every scatter
//! prefix.

use super::{PlanRequest, Span};
use crate::error::{GatherError, Result};
use crate::window::Window;
use zigzag_core::schema::{BinnedBox, Constraint, Value};
use zigzag_core::zorder::{dim_max, ZBox};
use zigzag_model::{KeyModel, Rollup};

/// One Z-range query: a box of one time bin in one scatter prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedQuery {
    pub pk: String,
    pub prefix: u32,
    /// Index into [`Read::boxes`].
    pub box_index: usize,
    /// It reads the bin's compacted partition (`crate::route`), which
    /// holds the whole bin, not one prefix's share.
    pub compacted: bool,
    /// Read strongly consistent whatever the options say (a bin compacted
    /// moments ago: its folded items may not be on every replica yet).
    pub consistent: bool,
}

/// One read of a plan: one rollup of one projection over one span of the
/// window, as Z-range queries.
#[derive(Debug, Clone)]
pub struct Read {
    pub projection: String,
    pub rollup: Rollup,
    /// The span read, on `rollup`'s edges.
    pub window: Window,
    pub boxes: Vec<BinnedBox>,
    pub prefixes: u32,
    pub queries: Vec<PlannedQuery>,
    /// Per box, the items its whole bin holds over every prefix, by the
    /// statistics ingest keeps (None: unknown).
    pub bin_items: Vec<Option<f64>>,
    /// Per box, whether it spans every dimension but time whole (no filter
    /// narrows it): then its share of a partition is its time's share.
    pub spans_all_but_time: Vec<bool>,
    /// Per box, the estimated share of its partition's items inside it: the
    /// span's share of the bin's items by the statistics
    /// (`StoredStats::items_between`), for a box that [spans every other
    /// dimension](Read::spans_all_but_time) (None: unknown).
    pub box_share: Vec<Option<f64>>,
    /// Estimated items of the span (statistics or declared schema; None
    /// before the planner estimated it).
    pub items: Option<f64>,
    /// Estimated bytes of one item of the projection
    /// ([`item_bytes`]).
    pub item_bytes: f64,
    /// Whether `gather compact` ever folds this projection's bins
    /// ([`crate::compact::folds`]); if not, a report reads no marker,
    /// before or after its items.
    pub compactable: bool,
    /// The compaction markers of its bins, read beside the statistics (in
    /// the same round trip) when the planner chose among candidates; None:
    /// `crate::route` reads them.
    pub markers: Option<crate::compact::marker::Prefetched>,
}

impl Read {
    /// Labels of the partition time bins, in order.
    pub fn bin_labels(&self) -> Vec<String> {
        self.boxes.iter().filter_map(|b| b.bin_start.map(|s| self.rollup.bin().label(s))).collect()
    }
}

/// Estimated bytes of one of `km`'s items: its key (~20 B pk, Z-address +
/// 16 B identity), `t`, a mark or two, ~12 B a dimension value and ~10 B a
/// measure.
pub fn item_bytes(km: &KeyModel) -> f64 {
    80.0 + 12.0 * km.dims().len() as f64 + 10.0 * km.measures().measures().len() as f64
}

/// One span's read: its bins' boxes in every scatter prefix.
pub(super) fn read_of(km: &KeyModel, req: &PlanRequest, span: &Span) -> Result<Read> {
    let rollup = span.rollup;
    let schema = km.schema(rollup).ok_or_else(|| GatherError::Config(format!("no schema for rollup {rollup}")))?;
    let time = schema.index_of("time").ok_or_else(|| GatherError::Config("the schema has no time dimension".into()))?;
    let mut constraints =
        vec![(time, Constraint::Range(Some(Value::Time(span.start)), Some(Value::Time(span.end - 1))))];
    constraints.extend(req.filters.constraints(schema));
    let boxes = schema.plan_boxes(&constraints).map_err(|e| GatherError::Filter {
        expr: e.dim.clone(),
        why: format!("cannot narrow the index: {}", e.error),
    })?;
    // A projection keyed by a dimension's value reads the values the
    // filters fix, one partition each (`partition_by`).
    let values: Option<Vec<String>> = match km.partition_dim() {
        None => None,
        Some(d) => Some(req.filters.bound_values(&d.name).ok_or_else(|| {
            GatherError::Projection(format!(
                "projection {} is partitioned by {}: a report on it must fix {} (--where {} = VALUE, or in (...))",
                km.name(),
                d.name,
                d.name,
                d.name
            ))
        })?),
    };
    let mut queries = Vec::with_capacity(boxes.len() * km.prefixes() as usize);
    for (i, b) in boxes.iter().enumerate() {
        let bin_start = b.bin_start.ok_or_else(|| GatherError::Config("rollup schemas are binned by time".into()))?;
        for prefix in 0..km.prefixes() {
            let query = |pk: String| PlannedQuery { pk, prefix, box_index: i, compacted: false, consistent: false };
            match &values {
                None => queries.push(query(km.partition_key(prefix, rollup, bin_start))),
                Some(values) => {
                    queries.extend(values.iter().map(|v| query(km.value_partition_key(prefix, rollup, bin_start, v))))
                }
            }
        }
    }
    Ok(Read {
        projection: km.name().to_string(),
        rollup,
        window: Window { start: span.start, end: span.end },
        bin_items: vec![None; boxes.len()],
        spans_all_but_time: boxes.iter().map(|b| spans_all_but(&b.zbox, time)).collect(),
        box_share: vec![None; boxes.len()],
        items: None,
        item_bytes: item_bytes(km),
        compactable: crate::compact::folds(km),
        markers: None,
        boxes,
        prefixes: km.prefixes(),
        queries,
    })
}

/// Whether `zbox` spans every dimension but `except` whole.
fn spans_all_but(zbox: &ZBox, except: usize) -> bool {
    let widths = zbox.layout().widths();
    (0..widths.len()).filter(|&d| d != except).all(|d| zbox.lo()[d] == 0 && zbox.hi()[d] == dim_max(widths[d]))
}
