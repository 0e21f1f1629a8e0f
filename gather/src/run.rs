//! One report request end to end: plan, execute, merge.
//!
//! Planning and reading are two steps ([`plan_report`], then
//! [`Planned::read`]) so that a caller may plan before it knows its
//! configuration is current: `gather` plans with the layout it read last
//! while it reads the table's again, and reads only once they agree.

use crate::error::Result;
use crate::execute::{execute_fresh, Actual, ExecOptions};
use crate::merge::Aggregation;
use crate::plan::{Plan, PlanRequest};
use zigzag_core::table::SortedTable;
use zigzag_model::{Config, Projections};

/// A plan, what it read (merged), and what reading cost.
#[derive(Debug, Clone)]
pub struct Gathered {
    pub plan: Plan,
    pub aggregation: Aggregation,
    pub actual: Actual,
}

/// A report planned, not read yet.
#[derive(Debug, Clone)]
pub struct Planned {
    pub plan: Plan,
    projections: Projections,
    group_by: Vec<String>,
}

/// Plans `req` on the cheapest exact projection (reading the planner's
/// statistics, nothing of the report's items).
pub async fn plan_report<T: SortedTable + ?Sized>(
    table: &T,
    config: &Config,
    req: PlanRequest,
    group_by: Vec<String>,
    opts: &ExecOptions,
) -> Result<Planned> {
    let projections = Projections::new(config).map_err(|e| crate::GatherError::Config(e.to_string()))?;
    let paced = crate::throttle::Paced::new(table, opts.rcu_per_sec);
    let plan = crate::choice::choose(&paced, config, &projections, &req, &group_by, opts).await?;
    Ok(Planned { plan, projections, group_by })
}

impl Planned {
    /// The group-by dimensions it reads by.
    pub fn group_by(&self) -> &[String] {
        &self.group_by
    }

    /// Its `i`-th read as a plan of its own (the window that read's span):
    /// a reader that keeps time slices of one rollup reads a plan of
    /// several piece by piece.
    pub fn piece(&self, i: usize) -> Option<Planned> {
        let read = self.plan.reads.get(i)?.clone();
        let plan = Plan { window: read.window, reads: vec![read], ..self.plan.clone() };
        Some(Planned { plan, projections: self.projections.clone(), group_by: self.group_by.clone() })
    }

    /// An empty aggregation of what the plan reads (its step, grouping and
    /// the measures of its projection).
    pub fn empty(&self) -> Aggregation {
        Aggregation::new(self.plan.step, self.group_by.clone(), self.shown())
    }

    /// The measures the report shows: its projection's, but those the
    /// plan leaves out ([`Plan::hidden`]).
    pub fn shown(&self) -> zigzag_model::measure::MeasureSet {
        let km = self.projections.by_name(&self.plan.projection).expect("planned on one of them");
        let hidden: Vec<&str> = self.plan.hidden.iter().map(|(m, _)| m.as_str()).collect();
        match hidden.is_empty() {
            true => km.measures().clone(),
            false => km.measures().without(&hidden),
        }
    }

    /// Reads every item of every query of the plan into sinks of the
    /// caller's (`fresh` makes one again when the read starts over).
    pub async fn read_into<T: SortedTable + ?Sized, S>(
        &self,
        table: &T,
        opts: &ExecOptions,
        fresh: impl FnMut() -> S,
        add: impl FnMut(&mut S, &zigzag_core::table::Item) -> Result<()>,
    ) -> Result<(S, Actual)> {
        execute_fresh(table, &self.plan, opts, fresh, add).await
    }

    /// Reads every item of every query of the plan and merges them per
    /// (bucket of the plan's step, `group_by` values), in the measures of
    /// the projection read.
    pub async fn read<T: SortedTable + ?Sized>(self, table: &T, opts: &ExecOptions) -> Result<Gathered> {
        let set = self.shown();
        let Planned { plan, projections: _, group_by } = self;
        let fresh = || Aggregation::new(plan.step, group_by.clone(), set.clone());
        let (aggregation, actual) = execute_fresh(table, &plan, opts, fresh, |a, item| a.add_item(item)).await?;
        Ok(Gathered { plan, aggregation, actual })
    }
}

/// [`plan_report`], then [`Planned::read`].
pub async fn gather<T: SortedTable + ?Sized>(
    table: &T,
    config: &Config,
    req: PlanRequest,
    group_by: Vec<String>,
    opts: &ExecOptions,
) -> Result<Gathered> {
    plan_report(table, config, req, group_by, opts).await?.read(table, opts).await
}
