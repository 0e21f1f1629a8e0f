//! One PromQL query end to end: parse, compile against the layout, read
//! the leaves, evaluate. The HTTP layer ([`crate::api`]) only turns
//! parameters into instants and answers into JSON.

use crate::catalog::Catalog;
use crate::compile::{compile, parse};
use crate::error::Result;
use crate::eval::{evaluate, Order};
use crate::read::{read_leaves, too_many_series, Inflight, Limits, ReadReport};
use crate::series::Value;
use std::sync::{Arc, RwLock};
use zigzag_core::table::SortedTable;
use zigzag_gather::execute::ExecOptions;

/// The most evaluation steps one range query may have (Prometheus's own
/// limit).
pub const MAX_STEPS: i64 = 11_000;

/// What a query answered, and what reading it cost.
#[derive(Debug, Clone)]
pub struct Answer {
    pub value: Value,
    pub order: Order,
    /// The evaluation instants (ms).
    pub ts: Vec<i64>,
    pub report: ReadReport,
}

/// The table, its layout, and how queries read it.
pub struct Engine {
    table: Arc<dyn SortedTable>,
    catalog: RwLock<Arc<Catalog>>,
    pub opts: ExecOptions,
    pub limits: Limits,
    /// Reads in flight, shared by the queries that need them.
    pub inflight: Inflight,
}

impl Engine {
    pub fn new(table: Arc<dyn SortedTable>, catalog: Catalog, opts: ExecOptions, limits: Limits) -> Engine {
        Engine { table, catalog: RwLock::new(Arc::new(catalog)), opts, limits, inflight: Inflight::default() }
    }

    /// The layout queries compile against now.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Swaps the layout (the table's changed); queries already running
    /// finish on the one they started with.
    pub fn set_catalog(&self, catalog: Catalog) {
        *self.catalog.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(catalog);
    }

    pub fn table(&self) -> &dyn SortedTable {
        self.table.as_ref()
    }

    /// Evaluates `text` at the instants `ts` (ms); `now` is the wall clock
    /// (retention decides what is still kept).
    pub async fn query(&self, text: &str, ts: Vec<i64>, now: i64) -> Result<Answer> {
        let expr = parse(text)?;
        let catalog = self.catalog();
        let query = compile(&expr, &catalog)?;
        let (leaves, report) =
            read_leaves(&self.table, &self.inflight, &catalog, &query, &ts, now, &self.opts, &self.limits).await?;
        let (value, order) = evaluate(&query.root, &leaves, &ts)?;
        if let Value::Vector(v) = &value {
            if v.series.len() > self.limits.max_series {
                return Err(too_many_series(v.series.len(), &self.limits));
            }
        }
        Ok(Answer { value, order, ts, report })
    }
}
