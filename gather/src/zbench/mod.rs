//! `gather zbench`: try a Z-index schema on your own data before you deploy it.
//!
//! Loads points from CSV under a schema, builds the Z-index and a
//! single-attribute index (Z-order part 1's timestamp index) in memory, runs each
//! box query of a query file with every strategy, and reports per query and
//! strategy the items returned and scanned, requests, RCU, and Z-order part 2's
//! search-space estimate. Every run of a query must return the same items;
//! a difference is reported as an error, not a number.

mod dataset;
mod queryfile;
mod report;

pub use dataset::{attribute, load, partition_key, Dataset};
pub use queryfile::{parse as parse_queries, BenchQuery, Bound};
pub use report::{render_json, render_table};

use std::collections::BTreeSet;
use thiserror::Error;
use zigzag_core::query::{key_condition, run_key_range, run_query_with, Observed, QueryStats, Strategy, ZQuery};
use zigzag_core::schema::Schema;
use zigzag_core::table::{Item, QueryRequest};
use zigzag_core::zorder::ZAddress;

#[derive(Debug, Error)]
pub enum ZbenchError {
    #[error("CSV line {line}: {why}")]
    Csv { line: u64, why: String },
    #[error("query file, line {line}: {why}")]
    Queries { line: usize, why: String },
    #[error("{0}")]
    Usage(String),
    #[error("internal error: {0}")]
    Internal(String),
}

/// One index/strategy run of one query.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Run {
    pub index: String,
    pub strategy: String,
    pub returned: u64,
    pub scanned: u64,
    pub requests: u64,
    pub rcu: f64,
}

impl Run {
    fn new(index: &str, strategy: String, s: &QueryStats) -> Self {
        Run {
            index: index.into(),
            strategy,
            returned: s.returned,
            scanned: s.scanned,
            requests: s.requests,
            rcu: s.rcu,
        }
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct QueryReport {
    pub name: String,
    /// Z-boxes planned (one per time bin for binned schemas; 0 if empty).
    pub boxes: usize,
    /// Z-order part 2: Z-addresses to visit, n^((a-b)/a), summed over boxes.
    pub seed_001_estimate: f64,
    /// Exact number of Z-addresses inside the box(es).
    pub box_volume: f64,
    /// Addresses between the box corners (what a naive query spans).
    pub naive_span: f64,
    pub runs: Vec<Run>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    pub rows: usize,
    pub z_bits: u32,
    pub order_by: String,
    pub queries: Vec<QueryReport>,
}

fn row_ids(items: &[Item]) -> BTreeSet<Vec<u8>> {
    // The last 4 bytes of every sort key are the row number.
    items.iter().map(|i| i.sk[i.sk.len().saturating_sub(4)..].to_vec()).collect()
}

/// Runs every query with every strategy over a loaded dataset.
pub async fn run(
    schema: &Schema,
    data: &Dataset,
    order_by: usize,
    queries: &[BenchQuery],
    strategies: &[Strategy],
) -> Result<Report, ZbenchError> {
    let order_dim = &schema.dims()[order_by];
    let order_index = format!("{} index", order_dim.name);
    let mut reports = Vec::new();
    for q in queries {
        let constraints = q.constraints(schema)?;
        let boxes = schema.plan_boxes(&constraints).map_err(|e| {
            let fb = q.bound_on(&e.dim);
            match fb {
                Some(fb) => q.field_error(fb, e.error),
                None => ZbenchError::Queries { line: q.line, why: format!("query {:?}: {e}", q.name) },
            }
        })?;
        let filter = q.filter(schema);
        let mut single = QueryStats::default();
        let mut single_items = Vec::new();
        let mut per_strategy = vec![(QueryStats::default(), Vec::new(), Observed::default()); strategies.len()];
        let (mut estimate, mut volume, mut span) = (0.0, 0.0, 0.0);
        for b in &boxes {
            let pk = partition_key(schema, b.bin_start);
            estimate += b.zbox.seed_001_estimate();
            volume += b.zbox.volume();
            span += b.zbox.max().span_f64(b.zbox.min()) + 1.0;

            let (lo, hi) = (b.zbox.lo()[order_by], b.zbox.hi()[order_by]);
            let cond = key_condition(
                order_dim.bits,
                &ZAddress::from_u128(lo, order_dim.bits),
                &ZAddress::from_u128(hi, order_dim.bits),
                true,
            );
            let mut req = QueryRequest::new(pk.clone(), cond);
            req.filter = filter.clone();
            let out = run_key_range(&data.single_index, req).await.map_err(|e| ZbenchError::Internal(e.to_string()))?;
            single.add(&out.stats);
            single_items.extend(out.items);

            let expected = data.partitions.get(&pk).copied();
            let zq = ZQuery { pk, zbox: &b.zbox, filter: filter.clone(), suffixed: true, consistent: false, expected };
            for (s, acc) in strategies.iter().zip(per_strategy.iter_mut()) {
                let out = run_query_with(&data.z_index, &zq, s, &mut acc.2)
                    .await
                    .map_err(|e| ZbenchError::Internal(e.to_string()))?;
                acc.0.add(&out.stats);
                acc.1.extend(out.items);
            }
        }
        let expected = row_ids(&single_items);
        let mut runs = vec![Run::new(&order_index, "key range + filter".into(), &single)];
        for (s, (stats, items, _)) in strategies.iter().zip(&per_strategy) {
            let got = row_ids(items);
            if got != expected || items.len() != got.len() {
                return Err(ZbenchError::Internal(format!(
                    "query {:?}: {} returned {} items, the {} returned {}",
                    q.name,
                    s.name(),
                    items.len(),
                    order_index,
                    expected.len()
                )));
            }
            runs.push(Run::new("z-index", s.name(), stats));
        }
        reports.push(QueryReport {
            name: q.name.clone(),
            boxes: boxes.len(),
            seed_001_estimate: estimate,
            box_volume: volume,
            naive_span: span,
            runs,
        });
    }
    Ok(Report {
        rows: data.rows,
        z_bits: schema.layout().total_bits(),
        order_by: order_dim.name.clone(),
        queries: reports,
    })
}
