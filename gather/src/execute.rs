//! Runs a plan's queries in parallel (`futures`' `buffer_unordered` under a
//! concurrency limit), reading every page of every query, through the
//! [`Paced`] table (optional RCU/s budget, retries when throttled). Items
//! are handed to a sink as each query completes, after the exact filters,
//! so memory holds at most `concurrency` queries' items.

use crate::error::{GatherError, Result};
use crate::plan::Plan;
use crate::throttle::Paced;
use futures::stream::{self, StreamExt};
use std::time::{Duration, Instant};
use zigzag_core::query::{run_query, AdaptiveConfig, ElasticConfig, QueryStats, Strategy, ZQuery};
use zigzag_core::table::{Item, SortedTable};

pub const DEFAULT_CONCURRENCY: usize = 32;

#[derive(Debug, Clone)]
pub struct ExecOptions {
    /// Queries in flight at once (at least 1).
    pub concurrency: usize,
    pub strategy: StrategyChoice,
    /// Read budget, RCU per second.
    pub rcu_per_sec: Option<f64>,
    /// Strongly consistent reads (twice the price); gather reads eventually
    /// consistently by default.
    pub consistent: bool,
}

/// How each query's Z-range is read.
///
/// `Auto` (the default) reads a box that covers its whole time bin with
/// **naive** (one key range: the box is most of the partition anyway) and
/// any other box with **elastic** page-jump (Limit 32, doubling on pages
/// that are mostly inside the box up to 1,024, halving on mostly-garbage
/// pages down to 16, about one 4 KB read unit). Measured on the 1 M-record
/// demo store (BENCHMARKS.md, "gather: Z-query strategy"): against a fixed
/// page-jump(40), elastic cuts requests 58-96 % on wide windows at equal or
/// lower RCU (a dense day: 16,267 → 704 requests, 16,260 → 11,690 RCU), and
/// costs up to 14 % more RCU on narrow or very selective boxes.
///
/// The adaptive rule guesses uniform density; aggregates cluster on few
/// distinct dimension values and the time offsets past a bin's end
/// (minutes 1,440..2,047 of an 11-bit dimension) are empty, so it splits
/// reads at every gap, paying half a unit per nearly empty request.
#[derive(Debug, Clone, PartialEq)]
pub enum StrategyChoice {
    Auto,
    Fixed(Strategy),
}

impl StrategyChoice {
    /// A strategy by name: `auto`, `naive`, `precise`, `page-jump`, `adaptive`.
    pub fn parse(name: &str) -> Option<StrategyChoice> {
        Some(StrategyChoice::Fixed(match name {
            "auto" => return Some(StrategyChoice::Auto),
            "naive" => Strategy::Naive,
            "precise" => Strategy::Precise { budget: 64 },
            "page-jump" => PAGE_JUMP,
            "adaptive" => Strategy::Adaptive(AdaptiveConfig::default()),
            "elastic" => ELASTIC,
            _ => return None,
        }))
    }

    pub fn name(&self) -> String {
        match self {
            StrategyChoice::Auto => format!("auto (naive for whole bins, else {})", ELASTIC.name()),
            StrategyChoice::Fixed(s) => s.name(),
        }
    }

    /// The strategy for a box; `whole_bin`: it covers its time bin entirely.
    pub fn for_box(&self, whole_bin: bool) -> Strategy {
        match self {
            StrategyChoice::Fixed(s) => s.clone(),
            StrategyChoice::Auto if whole_bin => Strategy::Naive,
            StrategyChoice::Auto => ELASTIC,
        }
    }
}

const PAGE_JUMP: Strategy = Strategy::PageJump { limit: 40 };
const ELASTIC: Strategy = Strategy::Elastic(ElasticConfig { start_limit: 32, min_limit: 16, max_limit: 1024 });

impl Default for ExecOptions {
    fn default() -> Self {
        ExecOptions {
            concurrency: DEFAULT_CONCURRENCY,
            strategy: StrategyChoice::Auto,
            rcu_per_sec: None,
            consistent: false,
        }
    }
}

/// What running a plan cost.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Actual {
    pub queries: usize,
    pub stats: QueryStats,
    /// Items that passed the exact filters (what the report is made of).
    pub kept: u64,
    /// Requests retried after throttling, a timeout or a 5xx.
    pub retries: u64,
    pub wall: Duration,
}

/// Runs every query of `plan`; `sink` receives the items that pass the
/// plan's exact filters.
pub async fn execute<T, F>(table: &T, plan: &Plan, opts: &ExecOptions, mut sink: F) -> Result<Actual>
where
    T: SortedTable + ?Sized,
    F: FnMut(&Item) -> Result<()>,
{
    let t0 = Instant::now();
    let paced = Paced::new(table, opts.rcu_per_sec);
    let paced = &paced;
    let runs = stream::iter(plan.queries.iter())
        .map(|q| async move {
            let zq = ZQuery {
                pk: q.pk.clone(),
                zbox: &plan.boxes[q.box_index].zbox,
                filter: plan.server_filter.clone(),
                suffixed: true,
                consistent: opts.consistent,
            };
            let strategy = opts.strategy.for_box(plan.whole_bin[q.box_index]);
            run_query(paced, &zq, &strategy).await.map_err(|source| GatherError::Query { pk: q.pk.clone(), source })
        })
        .buffer_unordered(opts.concurrency.max(1));
    futures::pin_mut!(runs);
    let mut actual = Actual { queries: plan.queries.len(), ..Actual::default() };
    while let Some(outcome) = runs.next().await {
        let outcome = outcome?;
        actual.stats.add(&outcome.stats);
        for item in outcome.items.iter().filter(|i| plan.filters.matches(i)) {
            actual.kept += 1;
            sink(item)?;
        }
    }
    actual.retries = paced.retries();
    actual.wall = t0.elapsed();
    Ok(actual)
}
