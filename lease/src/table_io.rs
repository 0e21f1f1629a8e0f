//! The coordinator's reads and writes of the lease table, each retried
//! (bounded) by its `RetryPolicy` and counted: one update, a partition read
//! whole, some leases by key (when that reads fewer units), the beat items,
//! the lanes with their beats, the lease generation; a lease write that
//! keeps the pass's cached leases current and tells other workers' passes;
//! a finished lease retired.

use crate::coordinator::{lock, with_beats, Coordinator};
use crate::items::{self, Beat, Lane, ShardLease, BEATS_PK, LANES_PK};
use crate::LeaseError;
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use zigzag_core::query::run_key_range;
use zigzag_core::table::{Item, QueryRequest, SortKeyCondition, SortedTable, TableError, UpdateOutcome, UpdateRequest};

impl Coordinator {
    /// One request to the lease table, retried (bounded) and counted.
    async fn call<'a, T, Fut>(&'a self, request: impl Fn(&'a dyn SortedTable) -> Fut) -> Result<T, LeaseError>
    where
        Fut: std::future::Future<Output = Result<T, TableError>> + 'a,
    {
        let out = self
            .opts
            .retry
            .run(&self.stats.retries, || {
                self.stats.requests.fetch_add(1, Ordering::Relaxed);
                request(self.table.as_ref())
            })
            .await?;
        Ok(out)
    }

    /// The seal item's time (0: none).
    pub(crate) async fn read_seal_item(&self, consistent: bool) -> Result<i64, LeaseError> {
        let mut req = QueryRequest::new(crate::seal::SEAL_PK, SortKeyCondition::Eq(crate::seal::SEAL_SK.to_vec()));
        req.consistent = consistent;
        let page = self.call(|t| t.query(&req)).await?;
        crate::seal::seal_of(page.items.first())
    }

    pub(crate) async fn update(&self, req: &UpdateRequest) -> Result<UpdateOutcome, LeaseError> {
        self.call(|t| t.update(req)).await
    }

    /// Every item of a partition, every page (a page that fails retryably
    /// reads the partition again: lease partitions are a page or two).
    pub(crate) async fn read_all(&self, pk: &str, consistent: bool) -> Result<Vec<Item>, LeaseError> {
        let mut req = QueryRequest::new(pk, SortKeyCondition::Any);
        req.consistent = consistent;
        let out = self
            .opts
            .retry
            .run(&self.stats.retries, || async {
                let out = run_key_range(self.table.as_ref(), req.clone()).await.map_err(crate::table_error);
                let requests = out.as_ref().map_or(1, |o| o.stats.requests);
                self.stats.requests.fetch_add(requests, Ordering::Relaxed);
                out
            })
            .await?;
        Ok(out.items)
    }

    /// A write of one of this stream's leases: an applied one updates the
    /// cached leases, and one that other workers' passes must see
    /// (`tell_others`: an owner, a handoff, a new lease, a finished shard)
    /// moves the generation on. A failed bump is only logged: the others
    /// see the change at their next whole read (every `LEASES_EVERY` passes).
    pub(crate) async fn write_lease(
        &self,
        req: &UpdateRequest,
        tell_others: bool,
    ) -> Result<UpdateOutcome, LeaseError> {
        let out = self.update(req).await?;
        if let UpdateOutcome::Applied(item) = &out {
            if item.pk == items::shards_pk(self.stream()) {
                let lease = ShardLease::from_item(item)?;
                if let Some(cache) = lock(&self.state).leases.as_mut() {
                    match cache.leases.iter_mut().find(|l| l.shard == lease.shard) {
                        Some(l) => *l = lease,
                        None => cache.leases.push(lease),
                    }
                }
            }
            // Of the item's stream (a dead worker's lane may be of another).
            if let Some(stream) = item.pk.strip_prefix(&items::shards_pk("")).filter(|_| tell_others) {
                self.tell_others(stream).await;
            }
        }
        Ok(out)
    }

    /// Moves `stream`'s lease generation on (a failure is logged: the other
    /// workers see the change at their next whole read).
    pub(crate) async fn tell_others(&self, stream: &str) {
        if let Err(e) = self.update(&items::bump_generation(stream)).await {
            tracing::warn!(error = %e, "the lease generation could not be moved on");
        }
    }

    /// The stream's lease generation (eventually consistent: a stale one
    /// only delays a whole read by a pass).
    pub(crate) async fn read_generation(&self) -> Result<u64, LeaseError> {
        let mut req =
            QueryRequest::new(items::generation_pk(self.stream()), SortKeyCondition::Eq(items::GENERATION_SK.to_vec()));
        req.consistent = false;
        let page = self.call(|t| t.query(&req)).await?;
        Ok(items::generation_of(page.items.first())?)
    }

    /// Every lease of the stream, strongly consistent.
    pub async fn read_leases(&self) -> Result<Vec<ShardLease>, LeaseError> {
        self.read_leases_with(true).await
    }

    pub(crate) async fn read_leases_with(&self, consistent: bool) -> Result<Vec<ShardLease>, LeaseError> {
        let items = self.read_all(&items::shards_pk(self.stream()), consistent).await?;
        lock(&self.state).lease_bytes = (items.iter().map(Item::size).sum(), items.len());
        Ok(items.iter().map(ShardLease::from_item).collect::<Result<_, _>>()?)
    }

    /// Strongly consistent reads of some leases: one by one when that reads
    /// fewer units than the whole partition (as last measured), else the
    /// partition. Leases that do not exist are left out.
    pub(crate) async fn read_some_leases(&self, shards: &[&str]) -> Result<Vec<ShardLease>, LeaseError> {
        let (bytes, count) = lock(&self.state).lease_bytes;
        let whole = bytes.div_ceil(zigzag_core::table::RCU_BYTES).max(1);
        // Each GetItem of a lease under 4 KB is one unit; unknown size: the partition.
        if count == 0 || shards.len() >= whole {
            let wanted: HashSet<&str> = shards.iter().copied().collect();
            return Ok(self.read_leases().await?.into_iter().filter(|l| wanted.contains(l.shard.as_str())).collect());
        }
        let pk = items::shards_pk(self.stream());
        let gets = futures::future::join_all(shards.iter().map(|s| self.call(|t| t.get(&pk, s.as_bytes())))).await;
        let mut leases = Vec::with_capacity(shards.len());
        for got in gets {
            if let Some(item) = got? {
                leases.push(ShardLease::from_item(&item)?);
            }
        }
        Ok(leases)
    }

    /// Deletes a lease nothing needs any more (finished, at counter `seen`).
    pub(crate) async fn retire_lease(&self, shard: &str, seen: u64) -> Result<bool, LeaseError> {
        let req = items::retire_lease(self.stream(), shard, seen);
        let out = self.call(|t| t.delete(&req)).await?;
        if out.deleted() {
            if let Some(cache) = lock(&self.state).leases.as_mut() {
                cache.leases.retain(|l| l.shard != shard);
            }
        }
        Ok(out.deleted())
    }

    /// Every beat item (a few bytes a lane).
    pub(crate) async fn read_beats(&self, consistent: bool) -> Result<Vec<Beat>, LeaseError> {
        let items = self.read_all(BEATS_PK, consistent).await?;
        Ok(items.iter().map(Beat::from_item).collect::<Result<_, _>>()?)
    }

    /// Every lane (lane items with their beat items), strongly consistent.
    pub async fn read_lanes(&self) -> Result<Vec<Lane>, LeaseError> {
        let items = self.read_all(LANES_PK, true).await?;
        let lanes: Vec<Lane> = items.iter().map(Lane::from_item).collect::<Result<_, _>>()?;
        let beats = self.read_beats(true).await?;
        Ok(with_beats(lanes, &beats))
    }
}
