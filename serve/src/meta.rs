//! What Grafana's query editor asks before a query: label names, a label's
//! values, the series a selector names. Values and series are read as a
//! `gather totals` grouped by the labels, over the window asked (aligned
//! out to whole buckets of a rollup that answers it).

use crate::compile::{compile, parse};
use crate::engine::Engine;
use crate::error::{Result, ServeError};
use crate::query::Metric;
use crate::series::{Labels, NAME};
use std::collections::BTreeSet;
use zigzag_gather::choice::SourceRequest;
use zigzag_gather::filter::FilterSet;
use zigzag_gather::plan::PlanRequest;
use zigzag_gather::window::WindowSpec;
use zigzag_gather::GatherError;

/// A `match[]` selector: its metric and filters.
struct Selector {
    metric: Metric,
    filters: FilterSet,
    empty: bool,
}

fn selector(engine: &Engine, text: &str) -> Result<Selector> {
    let expr = parse(text)?;
    if !matches!(expr, promql_parser::parser::Expr::VectorSelector(_)) {
        return Err(ServeError::BadData(format!("invalid parameter 'match[]': {text} is not a series selector")));
    }
    let mut q = compile(&expr, &engine.catalog())?;
    let leaf = q.leaves.remove(0);
    Ok(Selector { metric: leaf.metric, filters: leaf.filters, empty: leaf.empty })
}

impl Engine {
    /// Label names: `__name__` and the layout's dimensions.
    pub fn label_names(&self) -> Vec<String> {
        let mut names: Vec<String> = std::iter::once(NAME.to_string()).chain(self.catalog().dims.clone()).collect();
        names.sort();
        names
    }

    /// The values `label` takes in `[start, end)` among the series the
    /// selectors name (all, without one).
    pub async fn label_values(
        &self,
        label: &str,
        selectors: &[&str],
        start: i64,
        end: i64,
        now: i64,
    ) -> Result<Vec<String>> {
        let catalog = self.catalog();
        let sels = selectors.iter().map(|s| selector(self, s)).collect::<Result<Vec<_>>>()?;
        if label == NAME {
            let names = catalog.metric_names();
            return Ok(match sels.is_empty() {
                true => names,
                false => names.into_iter().filter(|n| sels.iter().any(|s| s.metric.name() == n)).collect(),
            });
        }
        if !catalog.is_dim(label) {
            return Ok(Vec::new());
        }
        let mut values = BTreeSet::new();
        let all = [Selector { metric: Metric::Measure(String::new()), filters: FilterSet::default(), empty: false }];
        for s in if sels.is_empty() { &all[..] } else { &sels[..] } {
            if s.empty {
                continue;
            }
            for labels in self.groups(s, &[label.to_string()], None, start, end, now).await? {
                values.extend(labels.get(label).cloned());
            }
        }
        Ok(values.into_iter().collect())
    }

    /// The series the selectors name in `[start, end)`: every dimension's
    /// value, or, when no projection keeps them all (the shipped layout),
    /// each projection's series: the label sets a query can read.
    pub async fn series(&self, selectors: &[&str], start: i64, end: i64, now: i64) -> Result<Vec<Labels>> {
        let catalog = self.catalog();
        let mut out = BTreeSet::new();
        for text in selectors {
            let s = selector(self, text)?;
            if s.empty {
                continue;
            }
            let found = match self.groups(&s, &catalog.dims, None, start, end, now).await {
                Ok(found) => found,
                Err(ServeError::Gather(GatherError::Projection(_))) => {
                    let mut found = Vec::new();
                    for p in catalog.projections.iter() {
                        let dims: Vec<String> = p.dims().iter().map(|d| d.name.clone()).collect();
                        if let Ok(f) = self.groups(&s, &dims, Some(p.name()), start, end, now).await {
                            found.extend(f);
                        }
                    }
                    found
                }
                Err(e) => return Err(e),
            };
            for mut labels in found {
                labels.insert(NAME.into(), s.metric.name().to_string());
                out.insert(labels);
            }
        }
        Ok(out.into_iter().collect())
    }

    /// The label sets (by `dims`) of the groups a selector has in the
    /// window, the window aligned out to the finest rollup unit that plans.
    async fn groups(
        &self,
        s: &Selector,
        dims: &[String],
        projection: Option<&str>,
        start: i64,
        end: i64,
        now: i64,
    ) -> Result<Vec<Labels>> {
        let catalog = self.catalog();
        let measures = match &s.metric {
            Metric::Measure(m) if m.is_empty() => None,
            Metric::Measure(m) => Some(vec![m.clone()]),
            Metric::Ratio(_) => None,
        };
        let mut last = None;
        for &unit in catalog.units_ms.iter().rev() {
            let from = start.div_euclid(unit) * unit;
            let to = (end.div_euclid(unit) + 1) * unit;
            if (to - from) / unit > self.limits.max_buckets {
                continue;
            }
            let req = PlanRequest {
                window: WindowSpec::Absolute { from: from.to_string(), to: to.to_string() },
                rollup: None,
                step: None,
                timeseries: false,
                filters: s.filters.clone(),
                now,
                source: SourceRequest { projection: projection.map(str::to_string), measures: measures.clone() },
                mixing: None,
                snap: None,
            };
            match zigzag_gather::gather(self.table(), &catalog.config, req, dims.to_vec(), &self.opts).await {
                Ok(g) => {
                    let groups = g.aggregation.groups.keys().map(|k| {
                        dims.iter()
                            .zip(&k.values)
                            .filter(|(_, v)| !v.is_empty())
                            .map(|(d, v)| (d.clone(), v.clone()))
                            .collect::<Labels>()
                    });
                    return Ok(groups.collect());
                }
                Err(e @ (GatherError::Rollup(_) | GatherError::Window { .. })) => last = Some(e),
                Err(e) => return Err(e.into()),
            }
        }
        Err(last.map_or_else(
            || {
                ServeError::Limit(
                    crate::error::Limit::Buckets,
                    format!("the window spans more than {} buckets", self.limits.max_buckets),
                )
            },
            |e| crate::error::refusal(e, "the series' time range"),
        ))
    }
}
