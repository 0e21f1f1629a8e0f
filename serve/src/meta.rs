//! What Grafana's query editor asks before a query: label names, a label's
//! values, the series a selector names. Values and series are read as a
//! `gather totals` grouped by the labels, over the window asked (aligned
//! out to whole buckets of a rollup that answers it). Without `start` they
//! are looked up over all the data the table keeps, as Prometheus does: a
//! label's values from the value catalog ingest writes
//! (`zigzag_model::value_catalog`: one small item per value), else (a
//! selector with matchers, series, a catalog not whole) from the coarsest
//! complete buckets of the span the statistics say the items cover.

use crate::compile::{compile, parse};
use crate::engine::Engine;
use crate::error::{Result, ServeError};
use crate::query::Metric;
use crate::series::{Labels, NAME};
use std::collections::BTreeSet;
use zigzag_gather::filter::FilterSet;
use zigzag_gather::plan::SourceRequest;
use zigzag_gather::plan::{Mixing, PlanRequest};
use zigzag_gather::window::{Snap, WindowSpec};
use zigzag_gather::GatherError;
use zigzag_model::value_catalog;

/// Where label values and series are looked up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// `[start, end)`, as asked.
    Range { start: i64, end: i64 },
    /// All the data the table keeps, up to `end` if given (no `start`).
    All { end: Option<i64> },
}

/// What a lookup found, and what a user should know about it.
#[derive(Debug, Clone, Default)]
pub struct Found<T> {
    pub found: T,
    pub infos: Vec<String>,
}

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

    /// The values `label` takes where `lookup` says, among the series the
    /// selectors name (all, without one).
    pub async fn label_values(
        &self,
        label: &str,
        selectors: &[&str],
        lookup: Lookup,
        now: i64,
    ) -> Result<Found<Vec<String>>> {
        let catalog = self.catalog();
        let sels = selectors.iter().map(|s| selector(self, s)).collect::<Result<Vec<_>>>()?;
        if label == NAME {
            let names = catalog.metric_names();
            let found = match sels.is_empty() {
                true => names,
                false => names.into_iter().filter(|n| sels.iter().any(|s| s.metric.name() == n)).collect(),
            };
            return Ok(Found { found, infos: Vec::new() });
        }
        if !catalog.is_dim(label) || (!sels.is_empty() && sels.iter().all(|s| s.empty)) {
            return Ok(Found::default());
        }
        // Every metric has every label set (an item holds every measure):
        // without matchers, a label's values are the catalog's.
        let bare = sels.iter().all(|s| s.filters.predicates.is_empty());
        if lookup == (Lookup::All { end: None }) && bare && self.catalog_is_whole().await? {
            let v = value_catalog::read(self.table(), label, now).await.map_err(table)?;
            let info = format!(
                "{label}: every value the table keeps, from its value catalog ({} requests, {:.1} RCU)",
                v.requests, v.rcu
            );
            return Ok(Found { found: v.values, infos: vec![info] });
        }
        let mut values = BTreeSet::new();
        let mut infos = Vec::new();
        let all = [Selector { metric: Metric::Measure(String::new()), filters: FilterSet::default(), empty: false }];
        for s in if sels.is_empty() { &all[..] } else { &sels[..] } {
            if s.empty {
                continue;
            }
            let found = self.groups(s, &[label.to_string()], None, lookup, now).await?;
            values.extend(found.found.into_iter().filter_map(|labels| labels.get(label).cloned()));
            infos.extend(found.infos);
        }
        Ok(Found { found: values.into_iter().collect(), infos })
    }

    /// Whether the table's value catalog holds every value its items ever
    /// had (its layout item says so).
    async fn catalog_is_whole(&self) -> Result<bool> {
        let stored = self.versions().await?;
        Ok(value_catalog::is_whole(stored.map(|s| s.item).as_ref()))
    }

    /// The series the selectors name where `lookup` says: every
    /// dimension's value, or, when no projection keeps them all (the
    /// shipped layout), each projection's series: the label sets a query
    /// can read.
    pub async fn series(&self, selectors: &[&str], lookup: Lookup, now: i64) -> Result<Found<Vec<Labels>>> {
        let catalog = self.catalog();
        let mut out = BTreeSet::new();
        let mut infos = Vec::new();
        for text in selectors {
            let s = selector(self, text)?;
            if s.empty {
                continue;
            }
            let found = match self.groups(&s, &catalog.dims, None, lookup, now).await {
                Ok(found) => found,
                Err(ServeError::Gather(GatherError::Projection(_))) => {
                    let mut found = Found::<Vec<Labels>>::default();
                    for p in catalog.projections.iter() {
                        let dims: Vec<String> = p.dims().iter().map(|d| d.name.clone()).collect();
                        if let Ok(f) = self.groups(&s, &dims, Some(p.name()), lookup, now).await {
                            found.found.extend(f.found);
                            found.infos.extend(f.infos);
                        }
                    }
                    found
                }
                Err(e) => return Err(e),
            };
            infos.extend(found.infos);
            for mut labels in found.found {
                labels.insert(NAME.into(), s.metric.name().to_string());
                out.insert(labels);
            }
        }
        Ok(Found { found: out.into_iter().collect(), infos })
    }

    /// The label sets (by `dims`) of the groups a selector has where
    /// `lookup` says.
    async fn groups(
        &self,
        s: &Selector,
        dims: &[String],
        projection: Option<&str>,
        lookup: Lookup,
        now: i64,
    ) -> Result<Found<Vec<Labels>>> {
        match lookup {
            Lookup::Range { start, end } => {
                Ok(Found { found: self.groups_in(s, dims, projection, start, end, now).await?, infos: Vec::new() })
            }
            Lookup::All { end } => self.groups_kept(s, dims, projection, end, now).await,
        }
    }

    /// The label sets over all the data the table keeps (up to `end`): the
    /// span its statistics say its items cover, read as a mixed plan (whole
    /// days from day items where complete, the rest finer) under the
    /// server's RCU budget.
    async fn groups_kept(
        &self,
        s: &Selector,
        dims: &[String],
        projection: Option<&str>,
        end: Option<i64>,
        now: i64,
    ) -> Result<Found<Vec<Labels>>> {
        let catalog = self.catalog();
        let (span, requests, rcu) = zigzag_gather::kept_span(self.table(), &catalog.projections).await?;
        let Some(span) = span else {
            return Err(ServeError::Execution(
                "the table has no statistics (nothing written yet, or written before ingest kept them): give start \
                 and end"
                    .into(),
            ));
        };
        let unit = catalog.sample_ms;
        let to = end.map_or(span.end, |e| (e.div_euclid(unit) + 1) * unit).min(span.end);
        let from = span.start.div_euclid(unit) * unit;
        if to <= from {
            return Ok(Found::default());
        }
        let req = PlanRequest {
            mixing: Some(Mixing::complete(self.reader().completeness(&catalog.config).await?)),
            // A projection of hours answers over the hours the span touches.
            snap: Some(Snap::Out),
            filling: Default::default(),
            ..groups_request(s, projection, from, to, now)
        };
        let planned = zigzag_gather::plan_report(self.table(), &catalog.config, req, dims.to_vec(), &self.opts).await?;
        let estimated = planned.plan.budget_rcu();
        if estimated > self.limits.max_rcu {
            return Err(ServeError::Limit(
                crate::error::Limit::Rcu,
                format!(
                    "looking up all the data the table keeps would read about {estimated:.0} RCU (the server's budget \
                     is {:.0} per query): give start and end, or raise --rcu-budget",
                    self.limits.max_rcu
                ),
            ));
        }
        let g = planned.read(self.table(), &self.opts).await?;
        let info = format!(
            "all the data the table keeps, {}: read from projection {}, {} buckets ({} requests, {:.1} RCU)",
            g.plan.window,
            g.plan.projection,
            g.plan.rollups(),
            g.actual.stats.requests + requests + g.plan.statistics_cost.0,
            g.actual.stats.rcu + rcu + g.plan.statistics_cost.1
        );
        Ok(Found { found: labels_of(&g.aggregation, dims), infos: vec![info] })
    }

    /// The label sets (by `dims`) of the groups a selector has in the
    /// window, the window aligned out to the finest rollup unit that plans.
    async fn groups_in(
        &self,
        s: &Selector,
        dims: &[String],
        projection: Option<&str>,
        start: i64,
        end: i64,
        now: i64,
    ) -> Result<Vec<Labels>> {
        let catalog = self.catalog();
        let mut last = None;
        for &unit in catalog.units_ms.iter().rev() {
            let from = start.div_euclid(unit) * unit;
            let to = (end.div_euclid(unit) + 1) * unit;
            if (to - from) / unit > self.limits.max_buckets {
                continue;
            }
            let req = groups_request(s, projection, from, to, now);
            match zigzag_gather::gather(self.table(), &catalog.config, req, dims.to_vec(), &self.opts).await {
                Ok(g) => return Ok(labels_of(&g.aggregation, dims)),
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

/// A selector's groups over `[from, to)` as a report asks for them: its
/// filters and measures, one rollup, no step.
fn groups_request(s: &Selector, projection: Option<&str>, from: i64, to: i64, now: i64) -> PlanRequest {
    PlanRequest {
        window: WindowSpec::Absolute { from: from.to_string(), to: to.to_string() },
        rollup: None,
        step: None,
        timeseries: false,
        filters: s.filters.clone(),
        now,
        source: SourceRequest { projection: projection.map(str::to_string), measures: measures_of(s) },
        mixing: None,
        snap: None,
        filling: Default::default(),
    }
}

/// The measures a selector reads (None: any, for a label's values alone).
fn measures_of(s: &Selector) -> Option<Vec<String>> {
    match &s.metric {
        Metric::Measure(m) if m.is_empty() => None,
        Metric::Measure(m) => Some(vec![m.clone()]),
        Metric::Ratio(_) => None,
    }
}

/// The label sets (by `dims`) of a read's groups, empty values left out.
fn labels_of(read: &zigzag_gather::merge::Aggregation, dims: &[String]) -> Vec<Labels> {
    let groups = read.groups.keys().map(|k| {
        dims.iter().zip(&k.values).filter(|(_, v)| !v.is_empty()).map(|(d, v)| (d.clone(), v.clone())).collect()
    });
    groups.collect::<BTreeSet<Labels>>().into_iter().collect()
}

fn table(e: zigzag_core::table::TableError) -> ServeError {
    ServeError::Execution(format!("reading the value catalog: {e}"))
}
