//! One report request end to end: plan, execute, merge.

use crate::error::Result;
use crate::execute::{execute_fresh, Actual, ExecOptions};
use crate::merge::Aggregation;
use crate::plan::{plan, Plan, PlanRequest};
use zigzag_core::table::SortedTable;
use zigzag_model::{Config, Projections};

/// A plan, what it read (merged), and what reading cost.
#[derive(Debug, Clone)]
pub struct Gathered {
    pub plan: Plan,
    pub aggregation: Aggregation,
    pub actual: Actual,
}

/// Plans `req` on the cheapest exact projection, reads every item of every
/// query, and merges them per (bucket of the plan's step, `group_by`
/// values), in the measures of the projection read.
pub async fn gather<T: SortedTable + ?Sized>(
    table: &T,
    config: &Config,
    req: PlanRequest,
    group_by: Vec<String>,
    opts: &ExecOptions,
) -> Result<Gathered> {
    let projections = Projections::new(config).map_err(|e| crate::GatherError::Config(e.to_string()))?;
    let paced = crate::throttle::Paced::new(table, opts.rcu_per_sec);
    let plan = plan(&paced, config, &projections, req, &group_by).await?;
    let km = projections.by_name(&plan.projection).expect("planned on one of them");
    let fresh = || Aggregation::new(plan.step, group_by.clone(), km.measures().clone());
    let (aggregation, actual) = execute_fresh(table, &plan, opts, fresh, |a, item| a.add_item(item)).await?;
    Ok(Gathered { plan, aggregation, actual })
}
