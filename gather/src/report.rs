//! Reports: an [`Aggregation`] shaped into rows of typed cells, which the
//! renderers turn into a table, CSV, JSON or a chart.
//!
//! - `timeseries`: one row per bucket (and group); without a group-by,
//!   every bucket of the window is listed, zeros included;
//! - `top`: the N groups with the largest measure (ties by group values);
//! - `ctr`: clicks, impressions and click-through rate per group;
//! - `totals`: every measure per group (one row without a group-by).

use crate::error::{GatherError, Result};
use crate::merge::Aggregation;
use crate::window::Window;
use std::cmp::Ordering;
use zigzag_model::Measures;

/// One value of a report.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Text(String),
    /// An instant, ms since the epoch.
    Time(i64),
    Count(u64),
    /// An amount in micro-units (None: no event had one).
    Micros(Option<i128>),
    /// A ratio (None: undefined, e.g. CTR without impressions).
    Ratio(Option<f64>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// `timeseries`, `top`, `ctr` or `totals`.
    pub kind: &'static str,
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Cell>>,
}

impl Report {
    pub fn column(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c == name)
    }
}

/// What `top` ranks by (and what a chart draws).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankBy {
    Clicks,
    Impressions,
    Cost,
    Ctr,
}

impl RankBy {
    pub fn parse(text: &str) -> Option<RankBy> {
        match text {
            "clicks" => Some(RankBy::Clicks),
            "impressions" => Some(RankBy::Impressions),
            "cost" => Some(RankBy::Cost),
            "ctr" => Some(RankBy::Ctr),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            RankBy::Clicks => "clicks",
            RankBy::Impressions => "impressions",
            RankBy::Cost => "cost",
            RankBy::Ctr => "ctr",
        }
    }

    /// The measure as a number (for ranking and charts).
    pub fn value(self, m: &Measures) -> Option<f64> {
        match self {
            RankBy::Clicks => Some(m.clicks as f64),
            RankBy::Impressions => Some(m.impressions as f64),
            RankBy::Cost => Some(m.cost_sum as f64 / 1e6),
            RankBy::Ctr => m.ctr(),
        }
    }

    /// Exact comparison: integers as integers, CTR as a cross product.
    fn compare(self, a: &Measures, b: &Measures) -> Ordering {
        match self {
            RankBy::Clicks => a.clicks.cmp(&b.clicks),
            RankBy::Impressions => a.impressions.cmp(&b.impressions),
            RankBy::Cost => a.cost_sum.cmp(&b.cost_sum),
            RankBy::Ctr => match (a.impressions, b.impressions) {
                (0, 0) => Ordering::Equal,
                (0, _) => Ordering::Less,
                (_, 0) => Ordering::Greater,
                (ia, ib) => (a.clicks as u128 * ib as u128).cmp(&(b.clicks as u128 * ia as u128)),
            },
        }
    }
}

const ALL_MEASURES: [&str; 6] = ["clicks", "impressions", "ctr", "cost", "cost_min", "cost_max"];

fn all_cells(m: &Measures) -> Vec<Cell> {
    vec![
        Cell::Count(m.clicks),
        Cell::Count(m.impressions),
        Cell::Ratio(m.ctr()),
        Cell::Micros(Some(m.cost_sum)),
        Cell::Micros(m.cost_min.map(i128::from)),
        Cell::Micros(m.cost_max.map(i128::from)),
    ]
}

fn columns(agg: &Aggregation, first: &[&str], measures: &[&str]) -> Vec<String> {
    let mut c: Vec<String> = first.iter().map(|s| s.to_string()).collect();
    c.extend(agg.group_by.iter().map(|f| f.name().to_string()));
    c.extend(measures.iter().map(|s| s.to_string()));
    c
}

fn texts(values: &[String]) -> impl Iterator<Item = Cell> + '_ {
    values.iter().map(|v| Cell::Text(v.clone()))
}

/// One row per bucket (and group). Buckets are `step` wide, epoch-aligned.
pub fn timeseries(agg: &Aggregation, window: &Window) -> Result<Report> {
    let step = agg.step.ok_or_else(|| GatherError::Report("a time series needs a step".into()))?;
    let mut rows = Vec::new();
    if agg.group_by.is_empty() {
        let mut b = window.start.div_euclid(step) * step;
        let zero = Measures::default();
        while b < window.end {
            let key = crate::merge::GroupKey { bucket: Some(b), values: Vec::new() };
            let m = agg.groups.get(&key).unwrap_or(&zero);
            rows.push([vec![Cell::Time(b)], all_cells(m)].concat());
            b += step;
        }
    } else {
        for (k, m) in &agg.groups {
            let mut row = vec![Cell::Time(k.bucket.unwrap_or_default())];
            row.extend(texts(&k.values));
            row.extend(all_cells(m));
            rows.push(row);
        }
    }
    Ok(Report { kind: "timeseries", columns: columns(agg, &["time"], &ALL_MEASURES), rows })
}

/// The `n` groups with the largest `by`.
pub fn top(agg: &Aggregation, n: usize, by: RankBy) -> Result<Report> {
    if agg.group_by.is_empty() {
        return Err(GatherError::Report("top needs --group-by: the groups to rank".into()));
    }
    let mut groups: Vec<(Vec<String>, Measures)> = agg.by_values().into_iter().collect();
    groups.sort_by(|a, b| by.compare(&b.1, &a.1).then_with(|| a.0.cmp(&b.0)));
    let rows = groups
        .iter()
        .take(n)
        .enumerate()
        .map(|(i, (values, m))| {
            let mut row = vec![Cell::Count(i as u64 + 1)];
            row.extend(texts(values));
            row.extend(all_cells(m));
            row
        })
        .collect();
    Ok(Report { kind: "top", columns: columns(agg, &["rank"], &ALL_MEASURES), rows })
}

fn per_group(agg: &Aggregation, cells: impl Fn(&Measures) -> Vec<Cell>) -> Vec<Vec<Cell>> {
    let groups = agg.by_values();
    if agg.group_by.is_empty() {
        return vec![cells(&agg.total())];
    }
    groups.iter().map(|(values, m)| texts(values).chain(cells(m)).collect()).collect()
}

/// Clicks, impressions and CTR per group.
pub fn ctr(agg: &Aggregation) -> Report {
    let rows = per_group(agg, |m| vec![Cell::Count(m.clicks), Cell::Count(m.impressions), Cell::Ratio(m.ctr())]);
    Report { kind: "ctr", columns: columns(agg, &[], &["clicks", "impressions", "ctr"]), rows }
}

/// Every measure per group.
pub fn totals(agg: &Aggregation) -> Report {
    Report { kind: "totals", columns: columns(agg, &[], &ALL_MEASURES), rows: per_group(agg, all_cells) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zigzag_model::Field;

    fn m(clicks: u64, impressions: u64) -> Measures {
        Measures { clicks, impressions, ..Measures::default() }
    }

    #[test]
    fn shapes() {
        let mut a = Aggregation::new(Some(60_000), vec![]);
        a.add(120_000, vec![], &m(1, 4));
        let r = timeseries(&a, &Window { start: 60_000, end: 240_000 }).unwrap();
        assert_eq!(r.rows.len(), 3, "zeros included");
        assert_eq!(r.rows[1][1], Cell::Count(1));
        assert_eq!(r.rows[0][3], Cell::Ratio(None));
        let mut g = Aggregation::new(None, vec![Field::Country]);
        g.add(0, vec!["DE".into()], &m(1, 2));
        g.add(0, vec!["FR".into()], &m(3, 100));
        g.add(0, vec!["US".into()], &m(0, 0));
        let t = top(&g, 2, RankBy::Ctr).unwrap();
        assert_eq!(t.rows.len(), 2);
        assert_eq!(t.rows[0][1], Cell::Text("DE".into()));
        let t = top(&g, 5, RankBy::Clicks).unwrap();
        assert_eq!(t.rows[0][1], Cell::Text("FR".into()));
        assert_eq!(t.rows[2][1], Cell::Text("US".into()));
        assert!(top(&Aggregation::new(None, vec![]), 3, RankBy::Clicks).is_err());
        assert_eq!(ctr(&g).rows.len(), 3);
        assert_eq!(totals(&Aggregation::new(None, vec![])).rows.len(), 1);
    }
}
