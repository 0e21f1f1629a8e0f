//! Quantiles of a quantile measure in PromQL: its sketches merged in the
//! read, then asked for q (`quantile_over_time` is a reading: `reading`).

use super::{labels, strip_parens, Compiler, Reading};
use crate::error::{unsupported, Result};
use crate::query::*;
use promql_parser::parser::{self as pp, Expr, LabelModifier};

/// `histogram_quantile(q, sum by (labels) (sum_over_time(m[r])))` over a
/// quantile measure `m`: its sketches merged per group over the range (in
/// the read, as any sum of it), then asked for q. Prometheus's idiom for a
/// distribution aggregated before its quantile is read (a native
/// histogram's); a bare `m` or `sum_over_time(m[r])` inside is one bucket
/// or the range, per series.
pub(super) const HISTOGRAM_QUANTILE: &str = "histogram_quantile";

impl Compiler<'_> {
    pub(super) fn histogram_quantile(&mut self, c: &pp::Call) -> Result<Node> {
        let usage = |why: &str| {
            unsupported(format!(
                "{HISTOGRAM_QUANTILE}: {why}; write {HISTOGRAM_QUANTILE}(0.99, sum by (country) \
                 (sum_over_time(latency[1h]))) over a quantile measure (its sketches are merged per group), or \
                 quantile_over_time(0.99, latency[1h]) per series"
            ))
        };
        let q = match c.args.args.first().map(|a| strip_parens(a)) {
            Some(Expr::NumberLiteral(n)) => Phi::new(n.val).ok_or_else(|| usage("q must be in 0..=1"))?,
            _ => return Err(usage("the first argument is a number")),
        };
        let (grouping, inner) = match c.args.args.get(1).map(|a| strip_parens(a)) {
            Some(Expr::Aggregate(a)) if a.op.to_string() == "sum" => {
                let grouping = match &a.modifier {
                    None => Grouping::By(Vec::new()),
                    Some(LabelModifier::Include(l)) => Grouping::By(labels(l)),
                    Some(LabelModifier::Exclude(l)) => Grouping::Without(labels(l)),
                };
                (Some(grouping), strip_parens(&a.expr))
            }
            Some(other) => (None, other),
            None => return Err(usage("the second argument is the measure")),
        };
        let Some(reading) = self.reading(inner)? else { return Err(usage("the measure must be read directly")) };
        let Metric::Measure(m) = self.metric_of(reading.vs)? else { return Err(usage("a ratio has no quantiles")) };
        if !self.catalog.kind(&m).is_some_and(|k| k.answers_quantiles()) {
            return Err(usage(&format!("{m} is not a quantile measure")));
        }
        if !matches!(reading.func, OverTime::Sum | OverTime::Last) {
            return Err(usage("inside, the measure is read bare or by sum_over_time (its sketches merged)"));
        }
        let func = OverTime::Quantile(q);
        let reading = Reading { func, keeps_name: false, range: reading.range, vs: reading.vs };
        match grouping {
            Some(grouping) => {
                let group = self.kept_dims(&grouping);
                let leaf = self.leaf(reading, Some(group))?;
                // One series per group already: the sum is each one's value.
                Ok(Node::Aggregate { op: AggOp::Sum, grouping, param: None, child: Box::new(leaf) })
            }
            None => self.leaf(reading, None),
        }
    }
}
