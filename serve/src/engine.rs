//! One PromQL query end to end: parse, compile against the layout, read
//! the leaves, evaluate. The HTTP layer ([`crate::api`]) only turns
//! parameters into instants and answers into JSON.

use crate::catalog::Catalog;
use crate::compile::{compile, parse};
use crate::error::{Result, ServeError};
use crate::eval::{evaluate, Order};
use crate::read::{read_leaves, too_many_series, Inflight, Limits, ReadReport};
use crate::series::Value;
use std::sync::{Arc, RwLock};
use zigzag_core::table::SortedTable;
use zigzag_gather::execute::ExecOptions;
use zigzag_model::layout;
use zigzag_model::Config;

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
    /// What a layout the table records is applied to (the configuration
    /// given, else the defaults).
    base: Config,
    pub opts: ExecOptions,
    pub limits: Limits,
    /// Reads in flight, shared by the queries that need them.
    pub inflight: Inflight,
}

impl Engine {
    pub fn new(table: Arc<dyn SortedTable>, catalog: Catalog, opts: ExecOptions, limits: Limits) -> Engine {
        let base = catalog.config.clone();
        Engine { table, catalog: RwLock::new(Arc::new(catalog)), base, opts, limits, inflight: Inflight::default() }
    }

    /// What a layout recorded later in the table is applied to (default:
    /// the catalog's configuration).
    pub fn with_base(mut self, base: Config) -> Engine {
        self.base = base;
        self
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
    /// (retention decides what is still kept). The table's layout is read
    /// beside the query (one small item, no added wait): an answer planned
    /// on a layout the table no longer has is dropped, and the query runs
    /// again on the table's.
    pub async fn query(&self, text: &str, ts: Vec<i64>, now: i64) -> Result<Answer> {
        let catalog = self.catalog();
        let (stored, answer) = futures::join!(layout::load(self.table.as_ref()), self.answer(&catalog, text, &ts, now));
        let stored = stored.map_err(|e| ServeError::Layout(format!("reading the table's layout: {e}")))?;
        if stored.is_none() || stored == catalog.layout {
            return answer;
        }
        tracing::warn!("the table's layout changed: queries now read with the new one");
        let config = stored.as_ref().map_or_else(|| self.base.clone(), |l| l.apply(&self.base));
        self.set_catalog(Catalog::recorded(config, stored)?);
        self.answer(&self.catalog(), text, &ts, now).await
    }

    async fn answer(&self, catalog: &Catalog, text: &str, ts: &[i64], now: i64) -> Result<Answer> {
        let ts = ts.to_vec();
        let expr = parse(text)?;
        let query = compile(&expr, catalog)?;
        let (leaves, report) =
            read_leaves(&self.table, &self.inflight, catalog, &query, &ts, now, &self.opts, &self.limits).await?;
        let (value, order) = evaluate(&query.root, &leaves, &ts)?;
        if let Value::Vector(v) = &value {
            if v.series.len() > self.limits.max_series {
                return Err(too_many_series(v.series.len(), &self.limits));
            }
        }
        Ok(Answer { value, order, ts, report })
    }
}
