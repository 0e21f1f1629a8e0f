//! What a candidate read is estimated to cost (data only: `crate::cost`
//! computes the readings, `crate::choice` weighs them), carried by a plan
//! for `--explain` and for budgets.

/// One Query round trip, the unit latency is estimated in: DynamoDB's
/// in-region p50 (a few ms) plus the client's share; latency estimates
/// compare plans, they do not predict a wall clock.
pub const ROUND_TRIP_MS: f64 = 8.0;
/// A way to read a plan's queries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// The strategy asked for (`auto` by default), estimated as the
    /// fewest-units ranges.
    Auto,
    /// Each box's whole Z-range.
    Naive,
}

impl Way {
    pub fn name(self) -> &'static str {
        match self {
            Way::Auto => "auto",
            Way::Naive => "naive",
        }
    }
}

/// A way's estimate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    pub way: Way,
    pub requests: f64,
    /// Round trips waited for in sequence.
    pub rounds: f64,
    /// Eventually consistent read units.
    pub rcu: f64,
}

impl Reading {
    pub fn latency_ms(&self) -> f64 {
        self.rounds * ROUND_TRIP_MS
    }
}

/// One projection and decomposition considered for a report.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub projection: String,
    /// Its plan and estimate when it is exact; else why not.
    pub verdict: std::result::Result<Estimate, String>,
    pub chosen: bool,
}

/// A projection's estimated cost for a plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    /// The rollups it reads, coarsest first (`day+hour+minute`).
    pub rollups: String,
    pub queries: usize,
    /// Items the plan's time range holds (before filters).
    pub items: f64,
    pub requests: f64,
    pub rcu: f64,
    /// Counted from ingest's statistics (else from the declared schema).
    pub measured: bool,
    /// Reading it `auto`'s way and naively: requests, round trips, units
    /// (`crate::cost`).
    pub readings: [Reading; 2],
    /// The way the planner would read it.
    pub way: Way,
}

impl Estimate {
    /// The reading of the way the planner would read it.
    pub fn chosen_reading(&self) -> Reading {
        self.readings.iter().find(|r| r.way == self.way).copied().unwrap_or(self.readings[0])
    }

    /// What the read should cost, for a budget: every item of its time
    /// range, or the way chosen's estimate if lower (the ways' estimates
    /// run high on sparse boxes: a refusal should not rest on them alone).
    pub fn budget_rcu(&self) -> f64 {
        self.chosen_reading().rcu.min(self.rcu)
    }
}
