//! One PromQL query end to end: parse, compile against the layout, read
//! the leaves, evaluate. The HTTP layer ([`crate::api`]) only turns
//! parameters into instants and answers into JSON.

use crate::cache::SliceCache;
use crate::catalog::Catalog;
use crate::compile::{compile, parse};
use crate::error::{too_many_series, Limits, Result, ServeError};
use crate::eval::{evaluate, Order};
use crate::read::{read_leaves, ReadReport};
use crate::reader::Reader;
use crate::recent::Recent;
use crate::samples::Memo;
use crate::series::Value;
use crate::series::Vector;
use std::sync::{Arc, RwLock};
use std::time::Duration;
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

/// Answers kept for queries asked again (a dashboard's panels, a few
/// dashboards).
const ANSWERS_KEPT: usize = 128;

/// Memory for unchanged slices unless told otherwise.
pub const DEFAULT_CACHE_BYTES: usize = 256 << 20;

/// How long a slice read part way through a flush answers while that
/// flush is still in progress, unless told otherwise: a dashboard under a
/// catch-up backlog reads each busy slice about once per this, not at
/// every refresh.
pub const DEFAULT_UNSETTLED_FOR: Duration = Duration::from_secs(30);

/// The table, its layout, and how queries read it.
pub struct Engine {
    table: Arc<dyn SortedTable>,
    catalog: RwLock<Arc<Catalog>>,
    /// The layout item the catalog was read from, hashed whole (its
    /// layout and the lease epoch the table is bound to): what the cache's
    /// entries belong to. None: not read yet.
    identity: RwLock<Option<String>>,
    /// What a layout the table records is applied to (the configuration
    /// given, else the defaults).
    base: Config,
    pub opts: ExecOptions,
    pub limits: Limits,
    /// Reads in flight, the cache, the shared small reads.
    reader: Arc<Reader>,
    /// The lease table, when given (`with_leases`).
    leases: Option<Arc<dyn SortedTable>>,
    /// Answers evaluated from series still current.
    answers: Memo<Vec<Vector>, (Value, Order)>,
    /// A layout change's progress on `/metrics`.
    fills: crate::fills::FillGauges,
}

impl Engine {
    pub fn new(table: Arc<dyn SortedTable>, catalog: Catalog, opts: ExecOptions, limits: Limits) -> Engine {
        let base = catalog.config.clone();
        let reader = Arc::new(Reader::new(
            Arc::new(Recent::new(table.clone(), Duration::ZERO)),
            SliceCache::new(DEFAULT_CACHE_BYTES, DEFAULT_UNSETTLED_FOR),
        ));
        Engine {
            table,
            catalog: RwLock::new(Arc::new(catalog)),
            identity: RwLock::new(None),
            base,
            opts,
            limits,
            reader,
            leases: None,
            answers: Memo::new(ANSWERS_KEPT),
            fills: Default::default(),
        }
    }

    /// A cache of `bytes` (0: none), and the small reads (layout,
    /// statistics, change marks) shared for `recheck` (0: each query reads
    /// them, concurrent ones once).
    pub fn with_cache(mut self, bytes: usize, recheck: Duration) -> Engine {
        self.reader = self.new_reader(bytes, recheck, self.reader.cache.unsettled_for());
        self
    }

    /// How long a slice read part way through a flush answers while that
    /// flush is in progress (0: only for the recheck).
    pub fn with_unsettled_for(mut self, unsettled_for: Duration) -> Engine {
        self.reader = self.new_reader(self.reader.cache.capacity(), self.reader.recent.recheck(), unsettled_for);
        self
    }

    /// Reads which hour and day items hold all their minutes from this
    /// lease table, so that a long range is read from them (without one,
    /// every coarse bucket is taken as complete).
    pub fn with_leases(mut self, leases: Arc<dyn SortedTable>) -> Engine {
        self.leases = Some(leases);
        let cache = &self.reader.cache;
        self.reader = self.new_reader(cache.capacity(), self.reader.recent.recheck(), cache.unsettled_for());
        self
    }

    /// A reader of the table with a cache of `bytes`, its small reads
    /// shared for `recheck`, and the lease table if given.
    fn new_reader(&self, bytes: usize, recheck: Duration, unsettled_for: Duration) -> Arc<Reader> {
        let recent = Arc::new(Recent::new(self.table.clone(), recheck));
        Arc::new(Reader::new(recent, SliceCache::new(bytes, unsettled_for)).with_leases(self.leases.clone()))
    }

    /// How it reads: reads in flight, the cache, the shared small reads.
    pub fn reader(&self) -> &Reader {
        &self.reader
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

    /// The table, its small reads shared.
    pub fn table(&self) -> &dyn SortedTable {
        self.reader.recent.as_ref()
    }

    /// Evaluates `text` at the instants `ts` (ms); `now` is the wall clock
    /// (retention decides what is still kept). The table's layout item is
    /// read beside the query (one small item, no added wait): an answer
    /// planned on a layout the table no longer has, or read from a table
    /// since recreated, is dropped, and the query runs again on the
    /// table's.
    pub async fn query(&self, text: &str, ts: Vec<i64>, now: i64) -> Result<Answer> {
        let catalog = self.catalog();
        let known = self.identity.read().unwrap_or_else(|p| p.into_inner()).clone();
        let Some(identity) = known else {
            self.reload().await?;
            return self.answer(&self.catalog(), &self.identity(), text, &ts, now).await;
        };
        let work = self.answer(&catalog, &identity, text, &ts, now);
        let ((stored, stored_identity), kept) =
            layout::speculate(identity.as_str(), self.load(), |(_, id)| id.as_str(), work).await?;
        if let Some(answer) = kept {
            return answer;
        }
        if stored.is_some() && stored != catalog.layout {
            tracing::warn!("the table's layout changed: queries now read with the new one");
        }
        self.adopt(stored, stored_identity)?;
        self.answer(&self.catalog(), &self.identity(), text, &ts, now).await
    }

    /// The table's layout versions, through the shared reads; a throttled
    /// read retried, as the query's reads of items are.
    pub(crate) async fn versions(&self) -> Result<Option<zigzag_model::versions::Stored>> {
        zigzag_model::versions::load(&zigzag_gather::Retried::new(self.table()))
            .await
            .map_err(|e| ServeError::Layout(format!("reading the table's layout: {e}")))
    }

    /// The table's layout and the identity of its layout item.
    async fn load(&self) -> Result<(Option<zigzag_model::layout::Layout>, String)> {
        let stored = self.versions().await?;
        let identity = stored.as_ref().map_or_else(|| "no layout".to_string(), |s| s.identity());
        if let Some(s) = &stored {
            self.fills.refresh(self.table.clone(), s);
        }
        Ok((stored.map(|s| s.newest.layout), identity))
    }

    async fn reload(&self) -> Result<()> {
        let (stored, identity) = self.load().await?;
        self.adopt(stored, identity)
    }

    /// Reads with `stored` from now on (None: the table records no
    /// layout; the catalog stays).
    fn adopt(&self, stored: Option<zigzag_model::layout::Layout>, identity: String) -> Result<()> {
        if stored.is_some() && stored != self.catalog().layout {
            let config = stored.as_ref().map_or_else(|| self.base.clone(), |l| l.apply(&self.base));
            self.set_catalog(Catalog::recorded(config, stored)?);
        }
        *self.identity.write().unwrap_or_else(|p| p.into_inner()) = Some(identity);
        Ok(())
    }

    fn identity(&self) -> String {
        self.identity.read().unwrap_or_else(|p| p.into_inner()).clone().unwrap_or_default()
    }

    async fn answer(&self, catalog: &Catalog, identity: &str, text: &str, ts: &[i64], now: i64) -> Result<Answer> {
        let ts = ts.to_vec();
        let expr = parse(text)?;
        let query = compile(&expr, catalog)?;
        let (leaves, report) =
            read_leaves(&self.reader, identity, catalog, &query, &ts, now, &self.opts, &self.limits).await?;
        // The same series as last time: the same answer, not evaluated again.
        let key = format!("{identity}|{text}|{ts:?}");
        if let Some((value, order)) = self.answers.get(&key, &leaves.sources()) {
            return Ok(Answer { value, order, ts, report });
        }
        let (value, order) = evaluate(&query.root, &leaves.vectors(), &ts)?;
        if let Value::Vector(v) = &value {
            if v.series.len() > self.limits.max_series {
                return Err(too_many_series(v.series.len(), &self.limits));
            }
        }
        let sources = leaves.sources().into_iter().cloned().collect();
        self.answers.put(key, sources, (value.clone(), order));
        Ok(Answer { value, order, ts, report })
    }
}
