//! Z-query strategies over a [`SortedTable`]: how to read every item of a
//! partition whose Z-address lies in a box, paying for as few requests and
//! as few scanned items as possible.
//!
//! - **naive**: one key range `[zmin, zmax]`, paginated; garbage filtered.
//! - **precise**: the box's exact sub-ranges (under a range budget), one
//!   paginated query each.
//! - **page-jump** (Z-order part 1): small `Limit N`; after every page, continue
//!   from `LastEvaluatedKey` if it is inside the box, else jump with BIGMIN.
//! - **adaptive**: see `adaptive.rs`; sizes each request from the density
//!   observed so far, so it behaves like precise on dense data and like naive
//!   on sparse data.
//! - **elastic**: see `elastic.rs`; page-jump whose Limit follows how much
//!   of each page was inside the box.
//! - **auto**: see `auto/`; a box of a few exact runs range by range,
//!   else page-jump with pages sized in read units from the items seen.
//! - **costed**: `auto` that first reads the ranges a cost model over the
//!   partition's expected items picks (`zorder::costed_ranges`), while
//!   the data agrees with it.
//!
//! Sort keys are the Z-address bytes, optionally followed by a suffix that
//! makes them unique (`suffixed`); then a range's upper key bound is the
//! successor of its last Z-address, as a bare prefix.

mod adaptive;
mod auto;
mod elastic;
mod reader;

pub use adaptive::{AdaptiveConfig, Density};
pub use auto::{Auto, AutoConfig};
pub use elastic::{Elastic, ElasticConfig};

use crate::table::{Filter, Item, QueryRequest, SortKeyCondition, SortedTable, TableError};
use crate::zorder::{decompose, ZAddress, ZBox};
use reader::Reader;

/// The range budget of `precise` as `gather --strategy precise` runs it;
/// `auto`'s crossing pages stop at the ends of the same cover.
pub const PRECISE_RANGES: usize = 64;
use std::fmt;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum QueryError {
    #[error(transparent)]
    Table(#[from] TableError),
    #[error("sort key {sk:02x?} is not a Z-address of {bits} bits followed by a suffix")]
    CorruptKey { sk: Vec<u8>, bits: u32 },
}

/// What to read: the partition, the box, and the server-side filter that
/// mirrors the box on item attributes (it saves bandwidth, not capacity;
/// the box test on each returned key is applied client-side regardless).
#[derive(Debug, Clone)]
pub struct ZQuery<'a> {
    pub pk: String,
    pub zbox: &'a ZBox,
    pub filter: Filter,
    /// Sort keys carry bytes after the Z-address.
    pub suffixed: bool,
    pub consistent: bool,
    /// What the partition is expected to hold (the statistics'), which
    /// lets `auto` cost its ranges before reading (None: it learns as it
    /// reads).
    pub expected: Option<Expected>,
}

/// What a partition is expected to hold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Expected {
    pub items: f64,
    /// Mean bytes of an item.
    pub item_bytes: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Strategy {
    Naive,
    Precise { budget: usize },
    PageJump { limit: u32 },
    Adaptive(AdaptiveConfig),
    Elastic(ElasticConfig),
    Auto(AutoConfig),
}

impl Strategy {
    pub fn name(&self) -> String {
        match self {
            Strategy::Naive => "naive".into(),
            Strategy::Precise { budget } => format!("precise(R={budget})"),
            Strategy::PageJump { limit } => format!("page-jump(N={limit})"),
            Strategy::Adaptive(_) => "adaptive".into(),
            Strategy::Elastic(c) => format!("elastic(N={}..{})", c.min_limit, c.max_limit),
            Strategy::Auto(c) if c.costed => "costed".into(),
            Strategy::Auto(_) => "auto".into(),
        }
    }

    /// The strategies by name, with the parameters `gather --strategy`
    /// and the benchmarks use.
    pub fn named(name: &str) -> Option<Strategy> {
        Some(match name {
            "naive" => Strategy::Naive,
            "precise" => Strategy::Precise { budget: PRECISE_RANGES },
            "page-jump" => Strategy::PageJump { limit: 40 },
            "adaptive" => Strategy::Adaptive(AdaptiveConfig::default()),
            "elastic" => Strategy::Elastic(ElasticConfig { start_limit: 32, min_limit: 16, max_limit: 1024 }),
            "auto" => Strategy::Auto(AutoConfig::default()),
            "costed" => Strategy::Auto(AutoConfig::costed()),
            _ => return None,
        })
    }

    /// Every name [`Strategy::named`] knows.
    pub const NAMES: [&'static str; 7] = ["auto", "naive", "precise", "page-jump", "adaptive", "elastic", "costed"];
}

/// Cost of one query run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct QueryStats {
    pub requests: u64,
    /// Items evaluated by the store (sum of ScannedCount).
    pub scanned: u64,
    /// Items inside the box that passed the filter.
    pub returned: u64,
    pub rcu: f64,
}

impl QueryStats {
    pub fn add(&mut self, other: &QueryStats) {
        self.requests += other.requests;
        self.scanned += other.scanned;
        self.returned += other.returned;
        self.rcu += other.rcu;
    }
}

impl fmt::Display for QueryStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} returned, {} scanned, {} requests, {} RCU", self.returned, self.scanned, self.requests, self.rcu)
    }
}

#[derive(Debug, Clone, Default)]
pub struct QueryOutcome {
    pub items: Vec<Item>,
    pub stats: QueryStats,
}

/// Reads every item of the box with the given strategy.
pub async fn run_query<T: SortedTable + ?Sized>(
    table: &T,
    query: &ZQuery<'_>,
    strategy: &Strategy,
) -> Result<QueryOutcome, QueryError> {
    run_query_with(table, query, strategy, &mut Observed::default()).await
}

/// What the learning strategies carry from box to box of one query.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Observed {
    pub density: Density,
    pub elastic: Elastic,
    pub auto: Auto,
}

/// [`run_query`] for one box of several (e.g. one per time bin): `seen`
/// carries the adaptive strategy's density estimate from box to box.
pub async fn run_query_with<T: SortedTable + ?Sized>(
    table: &T,
    query: &ZQuery<'_>,
    strategy: &Strategy,
    seen: &mut Observed,
) -> Result<QueryOutcome, QueryError> {
    let mut reader = Reader::new(table, query);
    let zbox = query.zbox;
    match strategy {
        Strategy::Naive => reader.read_range(zbox.min(), zbox.max(), None).await?,
        Strategy::Precise { budget } => {
            for r in decompose(zbox, *budget).ranges {
                reader.read_range(&r.lo, &r.hi, None).await?;
            }
        }
        Strategy::PageJump { limit } => {
            // Page-jump is elastic page-jump with the limit pinned.
            let fixed = ElasticConfig { start_limit: *limit, min_limit: *limit, max_limit: *limit };
            elastic::run(&mut reader, &fixed, &mut Elastic::default()).await?
        }
        Strategy::Adaptive(cfg) => adaptive::run(&mut reader, cfg, &mut seen.density).await?,
        Strategy::Elastic(cfg) => elastic::run(&mut reader, cfg, &mut seen.elastic).await?,
        Strategy::Auto(cfg) => auto::run(&mut reader, cfg, &mut seen.auto).await?,
    }
    Ok(reader.finish())
}

/// The key condition covering Z-addresses (or any fixed-width key
/// prefixes) `[lo, hi]` of `bits` bits. With `suffixed` keys (prefix ++
/// more bytes), the upper bound is the bare successor of `hi`: every key
/// whose prefix is `<= hi` sorts below it.
pub fn key_condition(bits: u32, lo: &ZAddress, hi: &ZAddress, suffixed: bool) -> SortKeyCondition {
    let lo_key = lo.to_bytes(bits);
    if !suffixed {
        return SortKeyCondition::Between(lo_key, hi.to_bytes(bits));
    }
    match hi.checked_next(bits) {
        Some(next) => SortKeyCondition::Between(lo_key, next.to_bytes(bits)),
        None => SortKeyCondition::Ge(lo_key),
    }
}

/// Reads every page of a plain key-condition query (no Z-box): the
/// single-attribute-index baseline. `returned` counts what passed the filter.
pub async fn run_key_range<T: SortedTable + ?Sized>(
    table: &T,
    mut req: QueryRequest,
) -> Result<QueryOutcome, QueryError> {
    let mut out = QueryOutcome::default();
    loop {
        let page = table.query(&req).await?;
        out.stats.requests += 1;
        out.stats.scanned += page.scanned_count as u64;
        out.stats.returned += page.count as u64;
        out.stats.rcu += page.consumed_rcu;
        out.items.extend(page.items);
        match page.last_evaluated {
            Some(k) => req.exclusive_start = Some(k),
            None => return Ok(out),
        }
    }
}

#[cfg(test)]
mod tests;
