//! A draft (one way to read a request from one projection) and the plan
//! made of the one the planner chose ([`Plan::new`]), as `--explain`
//! prints it.

use super::{Candidate, Read, Way};
use crate::filter::FilterSet;
use crate::window::{format_duration, Window};
use zigzag_core::table::Filter;
use zigzag_model::Rollup;

/// Eventually consistent reads: a request costs at least half a unit.
const MIN_RCU_PER_REQUEST: f64 = 0.5;

/// One way to read a request from one projection, before the planner
/// chose among them: the window cut into reads.
#[derive(Debug, Clone)]
pub struct Draft {
    pub projection: String,
    pub window: Window,
    /// The window read is not the one asked (`--snap`).
    pub window_note: Option<String>,
    pub step: Option<i64>,
    pub rollup_reason: String,
    /// The spans of the window and how each is read, in time order.
    pub reads: Vec<Read>,
    pub server_filter: Filter,
    pub filters: FilterSet,
    pub filter_notes: Vec<String>,
    /// Measures of the projection the report leaves out, and why.
    pub hidden: Vec<(String, String)>,
}

impl Draft {
    /// Queries over every read.
    pub fn queries(&self) -> usize {
        queries_of(&self.reads)
    }

    /// The rollups read, coarsest first (`day+hour+minute`).
    pub fn rollups(&self) -> String {
        rollups_label(self.reads.iter().map(|r| r.rollup))
    }
}

fn queries_of(reads: &[Read]) -> usize {
    reads.iter().map(|r| r.queries.len()).sum()
}

/// What the planner chose a draft for, and what it read to choose.
#[derive(Debug, Clone)]
pub struct Choice {
    pub candidates: Vec<Candidate>,
    pub source_reason: String,
    pub statistics_cost: (u64, f64),
    pub written_at: Option<i64>,
    pub way: Way,
}

impl Choice {
    /// A draft planned on its projection alone: nothing weighed, nothing read.
    pub fn alone() -> Choice {
        Choice {
            candidates: Vec::new(),
            source_reason: "planned on it alone".into(),
            statistics_cost: (0, 0.0),
            written_at: None,
            way: Way::Auto,
        }
    }
}

/// A plan: built once, from a draft and the planner's choice
/// ([`Plan::new`]), and read as it is.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The projection read.
    pub projection: String,
    /// Every (projection, decomposition) considered (empty when planned
    /// on one source).
    pub candidates: Vec<Candidate>,
    pub source_reason: String,
    /// Reading the planner's statistics and the lease table: requests and
    /// RCU.
    pub statistics_cost: (u64, f64),
    /// When a flush last wrote to the items read (the statistics'; ms).
    pub written_at: Option<i64>,
    pub window: Window,
    /// The window read is not the one asked: `--snap` moved its ends to
    /// the projection's buckets (said to the user, never silent).
    pub window_note: Option<String>,
    pub step: Option<i64>,
    pub rollup_reason: String,
    /// The spans of the window and how each is read, in time order.
    pub reads: Vec<Read>,
    /// How its queries are read when the strategy is `auto`: as `auto`
    /// reads, or each box's whole Z-range when that is faster within the
    /// RCU allowance (`cost.rs`).
    pub way: Way,
    /// Store-side filter mirroring the `--where` predicates.
    pub server_filter: Filter,
    pub filters: FilterSet,
    /// How each filter is applied (for `--explain`).
    pub filter_notes: Vec<String>,
    /// Measures of the projection a report of every measure leaves out,
    /// and why: one a layout version gave it holds events from the
    /// version's cut on only, and the window starts before (said to the
    /// user, never shown as zeros).
    pub hidden: Vec<(String, String)>,
}

/// The least a plan costs before it runs: a request per query.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Least {
    pub queries: usize,
    /// Every query makes at least one request.
    pub min_requests: usize,
    pub min_rcu: f64,
}

impl Plan {
    pub fn new(draft: Draft, choice: Choice) -> Plan {
        let Draft {
            projection,
            window,
            window_note,
            step,
            rollup_reason,
            reads,
            server_filter,
            filters,
            filter_notes,
            hidden,
        } = draft;
        let Choice { candidates, source_reason, statistics_cost, written_at, way } = choice;
        Plan {
            projection,
            candidates,
            source_reason,
            statistics_cost,
            written_at,
            window,
            window_note,
            step,
            rollup_reason,
            reads,
            way,
            server_filter,
            filters,
            filter_notes,
            hidden,
        }
    }

    pub fn least(&self) -> Least {
        let n = self.queries();
        Least { queries: n, min_requests: n, min_rcu: n as f64 * MIN_RCU_PER_REQUEST }
    }

    /// What reading it should cost, for a budget: the chosen candidate's
    /// estimate counted from ingest's statistics (a bin without any was
    /// never written), else (a table from before statistics: the declared
    /// schema's guess is a bound far above what an empty bin costs) a page
    /// per query.
    pub fn budget_rcu(&self) -> f64 {
        let chosen = self.candidates.iter().find(|c| c.chosen).and_then(|c| c.verdict.as_ref().ok());
        chosen.filter(|e| e.measured).map_or(self.least().min_rcu, |e| e.budget_rcu())
    }

    /// Queries over every read.
    pub fn queries(&self) -> usize {
        queries_of(&self.reads)
    }

    /// The rollups read, coarsest first (`day+hour+minute`).
    pub fn rollups(&self) -> String {
        rollups_label(self.reads.iter().map(|r| r.rollup))
    }

    /// Its one rollup, when it reads from one.
    pub fn single_rollup(&self) -> Option<Rollup> {
        let first = self.reads.first()?.rollup;
        self.reads.iter().all(|r| r.rollup == first).then_some(first)
    }
}

/// Rollups named coarsest first, each once.
pub fn rollups_label(rollups: impl Iterator<Item = Rollup>) -> String {
    let mut all: Vec<Rollup> = rollups.collect();
    all.sort_by_key(|r| std::cmp::Reverse(r.unit_ms()));
    all.dedup();
    all.iter().map(|r| r.name()).collect::<Vec<_>>().join("+")
}

impl std::fmt::Display for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "source:   projection {} ({})", self.projection, self.source_reason)?;
        writeln!(f, "window:   {} ({})", self.window, format_duration(self.window.len_ms()))?;
        if let Some(note) = &self.window_note {
            writeln!(f, "          {note}")?;
        }
        for (m, why) in &self.hidden {
            writeln!(f, "measure:  {m} not shown: {why}")?;
        }
        if let Some(s) = self.step {
            writeln!(f, "step:     {}", format_duration(s))?;
        }
        writeln!(f, "rollups:  {} ({})", self.rollups(), self.rollup_reason)?;
        for r in &self.reads {
            let bins = r.bin_labels();
            let (first, last) = (bins.first().cloned().unwrap_or_default(), bins.last().cloned().unwrap_or_default());
            let kind = format!("{:?}", r.rollup.bin()).to_lowercase();
            let items = r.items.map_or(String::new(), |n| format!(", ~{n:.0} items"));
            writeln!(
                f,
                "read:     {} {} {} ({}): {} {kind} bin(s) {first} .. {last} x {} prefixes = {} queries{items}",
                r.projection,
                r.rollup,
                r.window,
                format_duration(r.window.len_ms()),
                bins.len(),
                r.prefixes,
                r.queries.len()
            )?;
        }
        writeln!(f, "queries:  {} (bins x prefixes, every read)", self.queries())
    }
}
