//! Reports: an [`Aggregation`] shaped into rows of typed cells, which the
//! renderers turn into a table, CSV, JSON or a chart. Columns are the
//! layout's measures, then its ratios, by their declared names.
//!
//! - `timeseries`: one row per bucket (and group); without a group-by,
//!   every bucket of the window is listed, zeros included;
//! - `top`: the N groups with the largest measure or ratio (ties by group
//!   values);
//! - `ratios` (`ctr` for the shipped layout): each ratio with its two
//!   measures, per group;
//! - `totals`: every measure per group (one row without a group-by).

use crate::error::{GatherError, Result};
use crate::merge::Aggregation;
use crate::window::Window;
use std::cmp::Ordering;
use zigzag_model::measure::{ShowOptions, Shown};
use zigzag_model::{MeasureSet, MeasureValues};

/// One value of a report.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Text(String),
    /// An instant, ms since the epoch.
    Time(i64),
    Count(u64),
    /// An exact amount in units of 10^-scale (None: no event had one).
    Decimal {
        units: Option<i128>,
        scale: u32,
    },
    /// A ratio (None: undefined, e.g. CTR without impressions).
    Ratio(Option<f64>),
    /// An estimate in units of 10^-scale, not necessarily whole (a
    /// quantile; None: no value).
    Estimate {
        value: Option<f64>,
        scale: u32,
    },
}

impl Cell {
    /// The value as a number (charts).
    pub fn number(&self) -> Option<f64> {
        match self {
            Cell::Count(n) => Some(*n as f64),
            Cell::Decimal { units, scale } => units.map(|u| u as f64 / 10f64.powi(*scale as i32)),
            Cell::Ratio(r) => *r,
            Cell::Estimate { value, scale } => value.map(|v| v / 10f64.powi(*scale as i32)),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// `timeseries`, `top`, `ratios` or `totals`.
    pub kind: &'static str,
    pub columns: Vec<String>,
    /// Leading columns that name a row (time, rank, group values).
    pub keys: usize,
    pub rows: Vec<Vec<Cell>>,
}

impl Report {
    pub fn column(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c == name)
    }
}

/// What `top` ranks by (and what a chart draws): a measure, one column of
/// a measure that shows several (a quantile measure's `latency_p99`), or a
/// ratio.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankBy {
    Measure(usize),
    /// Column `column` of what measure `measure` shows.
    Column {
        measure: usize,
        column: usize,
    },
    Ratio(usize),
}

impl RankBy {
    /// `text` among the measures, their columns as `ask` shows them, and
    /// the ratios.
    pub fn parse(text: &str, set: &MeasureSet, ask: &ShowOptions) -> Result<RankBy> {
        for (i, m) in set.measures().iter().enumerate() {
            match m.kind.sketch_columns(&m.name, ask) {
                Some(columns) if columns.len() != 1 || columns[0] != m.name => {
                    if let Some(column) = columns.iter().position(|c| c == text) {
                        return Ok(RankBy::Column { measure: i, column });
                    }
                }
                _ if m.name == text => return Ok(RankBy::Measure(i)),
                _ => {}
            }
        }
        if let Some(i) = set.ratios().iter().position(|r| r.name == text) {
            return Ok(RankBy::Ratio(i));
        }
        let names: Vec<String> =
            set.measure_columns(ask).into_iter().chain(set.ratios().iter().map(|r| r.name.clone())).collect();
        Err(GatherError::Report(format!("{text:?} is not a measure or ratio of the layout ({})", names.join(", "))))
    }

    pub fn name(self, set: &MeasureSet, ask: &ShowOptions) -> String {
        match self {
            RankBy::Measure(i) => set.measures()[i].name.clone(),
            RankBy::Column { measure, column } => {
                let m = &set.measures()[measure];
                m.kind.sketch_columns(&m.name, ask).and_then(|c| c.get(column).cloned()).unwrap_or_default()
            }
            RankBy::Ratio(i) => set.ratios()[i].name.clone(),
        }
    }

    /// The measure it reads (None: a ratio, which reads two).
    pub fn measure(self) -> Option<usize> {
        match self {
            RankBy::Measure(i) | RankBy::Column { measure: i, .. } => Some(i),
            RankBy::Ratio(_) => None,
        }
    }

    /// Ratios are undefined where a group has no row; measures are zero.
    pub fn is_ratio(self) -> bool {
        matches!(self, RankBy::Ratio(_))
    }

    /// Exact comparison: measures as integers, ratios as cross products;
    /// a sketch's column (an estimate) as numbers, no value first.
    fn compare(self, set: &MeasureSet, ask: &ShowOptions, a: &MeasureValues, b: &MeasureValues) -> Ordering {
        match self {
            RankBy::Measure(i) => a.0[i].compare(&b.0[i]),
            RankBy::Column { measure, column } => {
                let scale = set.measures()[measure].scale;
                let value = |v: &MeasureValues| v.0[measure].shown(ask).get(column).and_then(|s| s.as_f64(scale));
                match (value(a), value(b)) {
                    (Some(x), Some(y)) => x.total_cmp(&y),
                    (x, y) => x.is_some().cmp(&y.is_some()),
                }
            }
            RankBy::Ratio(i) => {
                let r = &set.ratios()[i];
                let parts = |v: &MeasureValues| {
                    (v.0[r.numerator].units().unwrap_or(0), v.0[r.denominator].units().unwrap_or(0))
                };
                let ((na, da), (nb, db)) = (parts(a), parts(b));
                match (da, db) {
                    (0, 0) => Ordering::Equal,
                    (0, _) => Ordering::Less,
                    (_, 0) => Ordering::Greater,
                    _ => match (na.checked_mul(db), nb.checked_mul(da)) {
                        // Same sign of denominators assumed positive (counts, sums of positives).
                        (Some(x), Some(y)) => x.cmp(&y),
                        _ => (na as f64 / da as f64).total_cmp(&(nb as f64 / db as f64)),
                    },
                }
            }
        }
    }
}

fn measure_columns(set: &MeasureSet, ask: &ShowOptions) -> Vec<String> {
    set.measure_columns(ask).into_iter().chain(set.ratios().iter().map(|r| r.name.clone())).collect()
}

/// Every column's cell: what each measure's kind shows of it, then ratios.
fn all_cells(set: &MeasureSet, ask: &ShowOptions, v: &MeasureValues) -> Vec<Cell> {
    let measures = set.measures().iter().zip(&v.0).flat_map(|(m, x)| {
        x.shown(ask).into_iter().map(|shown| match shown {
            Shown::Count(n) => Cell::Count(n),
            Shown::Units(units) => Cell::Decimal { units, scale: m.scale },
            Shown::Estimate(value) => Cell::Estimate { value, scale: m.scale },
        })
    });
    let ratios = set.ratios().iter().map(|r| Cell::Ratio(set.ratio(r, v)));
    measures.chain(ratios).collect()
}

fn columns(agg: &Aggregation, first: &[&str], measures: Vec<String>) -> (Vec<String>, usize) {
    let mut c: Vec<String> = first.iter().map(|s| s.to_string()).collect();
    c.extend(agg.group_by.iter().cloned());
    let keys = c.len();
    c.extend(measures);
    (c, keys)
}

fn texts(values: &[String]) -> impl Iterator<Item = Cell> + '_ {
    values.iter().map(|v| Cell::Text(v.clone()))
}

/// One row per bucket (and group). Buckets are `step` wide, epoch-aligned.
pub fn timeseries(agg: &Aggregation, window: &Window) -> Result<Report> {
    let step = agg.step.ok_or_else(|| GatherError::Report("a time series needs a step".into()))?;
    let set = &agg.set;
    let mut rows = Vec::new();
    if agg.group_by.is_empty() {
        let mut b = window.start.div_euclid(step) * step;
        let zero = set.zero();
        while b < window.end {
            let key = crate::merge::GroupKey { bucket: Some(b), values: Vec::new() };
            let m = agg.groups.get(&key).unwrap_or(&zero);
            rows.push([vec![Cell::Time(b)], all_cells(set, &agg.show, m)].concat());
            b += step;
        }
    } else {
        for (k, m) in &agg.groups {
            let mut row = vec![Cell::Time(k.bucket.unwrap_or_default())];
            row.extend(texts(&k.values));
            row.extend(all_cells(set, &agg.show, m));
            rows.push(row);
        }
    }
    let (columns, keys) = columns(agg, &["time"], measure_columns(set, &agg.show));
    Ok(Report { kind: "timeseries", columns, keys, rows })
}

/// The `n` groups with the largest `by`.
pub fn top(agg: &Aggregation, n: usize, by: RankBy) -> Result<Report> {
    if agg.group_by.is_empty() {
        return Err(GatherError::Report("top needs --group-by: the groups to rank".into()));
    }
    let set = &agg.set;
    let mut groups: Vec<(Vec<String>, MeasureValues)> = agg.by_values().into_iter().collect();
    groups.sort_by(|a, b| by.compare(set, &agg.show, &b.1, &a.1).then_with(|| a.0.cmp(&b.0)));
    let rows = groups
        .iter()
        .take(n)
        .enumerate()
        .map(|(i, (values, m))| {
            let mut row = vec![Cell::Count(i as u64 + 1)];
            row.extend(texts(values));
            row.extend(all_cells(set, &agg.show, m));
            row
        })
        .collect();
    let (columns, keys) = columns(agg, &["rank"], measure_columns(set, &agg.show));
    Ok(Report { kind: "top", columns, keys, rows })
}

fn per_group(agg: &Aggregation, cells: impl Fn(&MeasureValues) -> Vec<Cell>) -> Vec<Vec<Cell>> {
    if agg.group_by.is_empty() {
        return vec![cells(&agg.total())];
    }
    agg.by_values().iter().map(|(values, m)| texts(values).chain(cells(m)).collect()).collect()
}

/// Each ratio with its numerator and denominator, per group.
pub fn ratios(agg: &Aggregation) -> Result<Report> {
    let set = &agg.set;
    if set.ratios().is_empty() {
        return Err(GatherError::Report("the layout declares no [[ratio]]".into()));
    }
    let mut names = Vec::new();
    for r in set.ratios() {
        for i in [r.numerator, r.denominator] {
            let name = &set.measures()[i].name;
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
        names.push(r.name.clone());
    }
    let cells = |v: &MeasureValues| {
        let all = all_cells(set, &agg.show, v);
        let everything = measure_columns(set, &agg.show);
        names.iter().map(|n| all[everything.iter().position(|c| c == n).unwrap_or(0)].clone()).collect()
    };
    let rows = per_group(agg, cells);
    let (columns, keys) = columns(agg, &[], names.clone());
    Ok(Report { kind: "ratios", columns, keys, rows })
}

/// Every measure per group.
pub fn totals(agg: &Aggregation) -> Report {
    let (columns, keys) = columns(agg, &[], measure_columns(&agg.set, &agg.show));
    Report { kind: "totals", columns, keys, rows: per_group(agg, |v| all_cells(&agg.set, &agg.show, v)) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zigzag_model::{Config, MeasureValue};

    fn m(clicks: u64, impressions: u64) -> MeasureValues {
        let mut v = Config::default().measure_set().unwrap().zero();
        v.0[0] = MeasureValue::Count(clicks);
        v.0[1] = MeasureValue::Count(impressions);
        v
    }

    #[test]
    fn shapes() {
        let set = Config::default().measure_set().unwrap();
        let mut a = Aggregation::new(Some(60_000), vec![], set.clone());
        a.add(120_000, vec![], &m(1, 4));
        let r = timeseries(&a, &Window { start: 60_000, end: 240_000 }).unwrap();
        assert_eq!(r.rows.len(), 3, "zeros included");
        assert_eq!(r.rows[1][r.column("clicks").unwrap()], Cell::Count(1));
        assert_eq!(r.rows[0][r.column("ctr").unwrap()], Cell::Ratio(None));
        assert_eq!(r.keys, 1);
        let mut g = Aggregation::new(None, vec!["country".into()], set.clone());
        g.add(0, vec!["DE".into()], &m(1, 2));
        g.add(0, vec!["FR".into()], &m(3, 100));
        g.add(0, vec!["US".into()], &m(0, 0));
        let ctr = RankBy::parse("ctr", &set, &ShowOptions::default()).unwrap();
        let t = top(&g, 2, ctr).unwrap();
        assert_eq!(t.rows.len(), 2);
        assert_eq!(t.rows[0][1], Cell::Text("DE".into()));
        let t = top(&g, 5, RankBy::parse("clicks", &set, &ShowOptions::default()).unwrap()).unwrap();
        assert_eq!(t.rows[0][1], Cell::Text("FR".into()));
        assert_eq!(t.rows[2][1], Cell::Text("US".into()));
        assert!(RankBy::parse("revenue", &set, &ShowOptions::default()).unwrap_err().to_string().contains("cost_max"));
        assert!(top(&Aggregation::new(None, vec![], set.clone()), 3, ctr).is_err());
        let r = ratios(&g).unwrap();
        assert_eq!(r.columns, ["country", "clicks", "impressions", "ctr"]);
        assert_eq!(r.rows.len(), 3);
        assert_eq!(totals(&Aggregation::new(None, vec![], set)).rows.len(), 1);
    }
}
