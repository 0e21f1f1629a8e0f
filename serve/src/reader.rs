//! What every query's reads share: identical reads in flight are one
//! ([`Inflight`]), unchanged slices come from the cache ([`SliceCache`]),
//! small reads (layout, statistics, change marks) are shared ([`Recent`]),
//! and the lease table's word on which coarse buckets are complete is
//! read at most once per recheck.

use crate::cache::{CachedRead, SliceCache};
use crate::error::{Result, ServeError};
use crate::recent::Recent;
use crate::samples::Samples;
use futures::future::{BoxFuture, FutureExt, Shared};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use zigzag_gather::{Completeness, GatherError};

/// Reads in flight, shared: a read asked again while the same read (same
/// projection, rollup, window, filters, grouping and measures) is under
/// way waits for it instead of reading again, so a hundred dashboards
/// refreshing at once read once. A finished read is forgotten at once: it
/// is never served to a request that starts after it ended.
#[derive(Default)]
pub struct Inflight {
    reads: Mutex<HashMap<String, SharedRead>>,
    /// Reads started (for tests and the benchmark).
    pub started: std::sync::atomic::AtomicU64,
    /// Reads that waited for one in flight.
    pub joined: std::sync::atomic::AtomicU64,
}

type SharedRead = Shared<BoxFuture<'static, std::result::Result<Arc<CachedRead>, Arc<GatherError>>>>;

impl Inflight {
    pub(crate) async fn read(
        &self,
        key: String,
        make: impl FnOnce() -> BoxFuture<'static, zigzag_gather::error::Result<CachedRead>>,
    ) -> Result<Arc<CachedRead>> {
        use std::sync::atomic::Ordering::Relaxed;
        let shared = {
            let mut reads = self.reads.lock().unwrap_or_else(|p| p.into_inner());
            match reads.get(&key) {
                Some(r) => {
                    self.joined.fetch_add(1, Relaxed);
                    r.clone()
                }
                None => {
                    self.started.fetch_add(1, Relaxed);
                    let r = make().map(|r| r.map(Arc::new).map_err(Arc::new)).boxed().shared();
                    reads.insert(key.clone(), r.clone());
                    r
                }
            }
        };
        let out = shared.clone().await;
        let mut reads = self.reads.lock().unwrap_or_else(|p| p.into_inner());
        if reads.get(&key).is_some_and(|r| r.ptr_eq(&shared)) {
            reads.remove(&key);
        }
        out.map_err(ServeError::Read)
    }
}

/// How leaves are read: the table (its small reads shared), reads in
/// flight, and the cache of unchanged slices.
pub struct Reader {
    pub recent: Arc<Recent>,
    pub inflight: Inflight,
    pub cache: SliceCache,
    pub samples: Samples,
    /// The lease table: which hour and day items hold all their minutes
    /// (None: every coarse bucket is taken as complete, as for a table
    /// written without one).
    leases: Option<Arc<dyn zigzag_core::table::SortedTable>>,
    /// Its last reading and when it began, shared for `recheck`.
    complete: tokio::sync::Mutex<Option<(std::time::Instant, Completeness)>>,
}

impl Reader {
    pub fn new(recent: Arc<Recent>, cache: SliceCache) -> Reader {
        Reader {
            recent,
            inflight: Inflight::default(),
            cache,
            samples: Samples::default(),
            leases: None,
            complete: Default::default(),
        }
    }

    /// Reads which coarse buckets are complete from `leases`.
    pub fn with_leases(mut self, leases: Option<Arc<dyn zigzag_core::table::SortedTable>>) -> Reader {
        self.leases = leases;
        self
    }

    /// What the parts a layout change added hold of `[from, to)`, read
    /// through the shared reads.
    pub async fn filling(&self, from: i64, to: i64) -> Result<zigzag_gather::plan::Filling> {
        zigzag_gather::relayout::filling_of(self.recent.as_ref(), from, to)
            .await
            .map_err(|e| ServeError::Layout(format!("reading the table's layout versions: {e}")))
    }

    /// Which coarse buckets hold all their finer items: the lease table's
    /// reading begun at most `recheck` before this call (each call reads
    /// it when `recheck` is 0; concurrent calls then wait for one another).
    pub async fn completeness(&self, config: &zigzag_model::Config) -> Result<Completeness> {
        let Some(leases) = &self.leases else { return Ok(Completeness::unchecked()) };
        let asked = std::time::Instant::now();
        let mut slot = self.complete.lock().await;
        if let Some((at, c)) = slot.as_ref() {
            if asked.saturating_duration_since(*at) <= self.recent.recheck() {
                return Ok(c.clone());
            }
        }
        let began = std::time::Instant::now();
        let c = Completeness::read(config, leases.as_ref()).await.map_err(|e| {
            ServeError::Layout(format!("reading the lease table (which coarse items are complete): {e}"))
        })?;
        *slot = Some((began, c.clone()));
        Ok(c)
    }
}
