//! PromQL (parsed by `promql-parser`) → [`Query`]: the subset checked, each
//! selector turned into a [`Leaf`] (a read), everything else into pure
//! nodes. What the subset refuses is refused here, before any read, with
//! what to write instead.
//!
//! Aggregations that are a measure's own merge (`sum` of counts and sums,
//! `min` of minima, `max` of maxima) over a selector, or over its
//! `sum_over_time`/`min_over_time`/`max_over_time`, are pushed into the
//! read: it groups by the labels the aggregation keeps, so the planner can
//! pick a projection that has only those (the shipped layout writes no
//! item with every dimension). The answer is the same: these merges are
//! associative.

use crate::catalog::Catalog;
use crate::error::{unsupported, Result, ServeError};
use crate::query::*;
use promql_parser::label::{MatchOp, Matcher};
use promql_parser::parser::{self as pp, Expr, LabelModifier, Offset, VectorMatchCardinality, VectorSelector};
use zigzag_gather::filter::{FilterSet, Op, Pattern, Predicate};
use zigzag_gather::window::format_duration;

/// Parses PromQL text (a 400 when it is not PromQL).
pub fn parse(text: &str) -> Result<Expr> {
    if text.trim().is_empty() {
        return Err(ServeError::BadData("parameter 'query': empty".into()));
    }
    pp::parse(text).map_err(|e| ServeError::BadData(format!("invalid parameter 'query': {e}")))
}

/// Compiles a parsed query against the layout's catalog.
pub fn compile(expr: &Expr, catalog: &Catalog) -> Result<Query> {
    let mut c = Compiler { catalog, leaves: Vec::new() };
    let root = c.node(expr)?;
    Ok(Query { root, leaves: c.leaves })
}

const COUNTER_FUNCS: [&str; 10] =
    ["rate", "irate", "increase", "delta", "idelta", "deriv", "predict_linear", "resets", "changes", "holt_winters"];

const INSTANT_FUNCS: [(&str, Func); 16] = [
    ("abs", Func::Abs),
    ("ceil", Func::Ceil),
    ("floor", Func::Floor),
    ("round", Func::Round),
    ("sqrt", Func::Sqrt),
    ("exp", Func::Exp),
    ("ln", Func::Ln),
    ("log2", Func::Log2),
    ("log10", Func::Log10),
    ("sgn", Func::Sgn),
    ("clamp", Func::Clamp),
    ("clamp_min", Func::ClampMin),
    ("clamp_max", Func::ClampMax),
    ("scalar", Func::Scalar),
    ("sort", Func::Sort),
    ("sort_desc", Func::SortDesc),
];

fn supported_functions() -> String {
    let mut names: Vec<&str> = OverTime::NAMES.iter().map(|(n, _)| *n).collect();
    names.extend(INSTANT_FUNCS.iter().map(|(n, _)| *n));
    names.extend([QUANTILE_OVER_TIME, quantile::HISTOGRAM_QUANTILE, "time", "vector"]);
    names.join(", ")
}

fn strip_parens(mut e: &Expr) -> &Expr {
    while let Expr::Paren(p) = e {
        e = &p.expr;
    }
    e
}

fn agg_op(name: &str) -> Result<AggOp> {
    Ok(match name {
        "sum" => AggOp::Sum,
        "min" => AggOp::Min,
        "max" => AggOp::Max,
        "count" => AggOp::Count,
        "avg" => AggOp::Avg,
        "group" => AggOp::Group,
        "stddev" => AggOp::Stddev,
        "stdvar" => AggOp::Stdvar,
        "topk" => AggOp::Topk,
        "bottomk" => AggOp::Bottomk,
        "quantile" => AggOp::Quantile,
        other => {
            return Err(unsupported(format!(
                "{other} is not in gather serve's PromQL subset (aggregations: sum, min, max, count, avg, group, \
                 stddev, stdvar, topk, bottomk, quantile)"
            )))
        }
    })
}

fn bin_op(name: &str) -> Result<BinOp> {
    Ok(match name {
        "+" => BinOp::Add,
        "-" => BinOp::Sub,
        "*" => BinOp::Mul,
        "/" => BinOp::Div,
        "%" => BinOp::Mod,
        "^" => BinOp::Pow,
        "atan2" => BinOp::Atan2,
        "==" => BinOp::Eq,
        "!=" => BinOp::Ne,
        ">" => BinOp::Gt,
        "<" => BinOp::Lt,
        ">=" => BinOp::Ge,
        "<=" => BinOp::Le,
        "and" => BinOp::And,
        "or" => BinOp::Or,
        "unless" => BinOp::Unless,
        other => return Err(unsupported(format!("operator {other} is not in gather serve's PromQL subset"))),
    })
}

fn labels(l: &promql_parser::label::Labels) -> Vec<String> {
    l.labels.to_vec()
}

/// The largest offset or range taken (~100 years): instants stay far
/// from i64's ends whatever the query asks.
const MAX_DURATION_MS: i64 = 100 * 366 * 86_400_000;

fn duration_ms(d: &std::time::Duration, what: &str) -> Result<i64> {
    i64::try_from(d.as_millis())
        .ok()
        .filter(|ms| *ms <= MAX_DURATION_MS)
        .ok_or_else(|| ServeError::BadData(format!("{what} of {} is too long (at most 100 years)", d.as_secs())))
}

fn offset_ms(o: &Option<Offset>) -> Result<i64> {
    match o {
        None => Ok(0),
        Some(Offset::Pos(d)) => duration_ms(d, "an offset"),
        Some(Offset::Neg(d)) => Ok(-duration_ms(d, "an offset")?),
    }
}

/// A range, over-time function and name rule for a leaf.
struct Reading<'e> {
    vs: &'e VectorSelector,
    range: Option<std::time::Duration>,
    func: OverTime,
    keeps_name: bool,
}

/// What a matcher lets through.
enum Pass {
    Always,
    Never,
    Test(Predicate),
}

struct Compiler<'a> {
    catalog: &'a Catalog,
    leaves: Vec<Leaf>,
}

impl Compiler<'_> {
    fn node(&mut self, e: &Expr) -> Result<Node> {
        match e {
            Expr::NumberLiteral(n) => Ok(Node::Number(n.val)),
            Expr::StringLiteral(_) => Err(unsupported("a string is not a result gather serve gives")),
            Expr::Paren(p) => self.node(&p.expr),
            Expr::Unary(u) => Ok(Node::Neg(Box::new(self.node(&u.expr)?))),
            Expr::VectorSelector(vs) => {
                self.leaf(Reading { vs, range: None, func: OverTime::Last, keeps_name: true }, None)
            }
            Expr::MatrixSelector(m) => Err(unsupported(format!(
                "a range selector alone ({m}) is not a result gather serve gives; wrap it in a function, e.g. \
                 sum_over_time({m})"
            ))),
            Expr::Subquery(s) => Err(unsupported(format!(
                "subqueries ({s}) are not in gather serve's PromQL subset; use a range selector on a metric, e.g. \
                 max_over_time(clicks[1h])"
            ))),
            Expr::Extension(_) => Err(unsupported("extension expressions are not supported")),
            Expr::Aggregate(a) => self.aggregate(a),
            Expr::Binary(b) => self.binary(b),
            Expr::Call(c) => self.call(c),
        }
    }

    fn aggregate(&mut self, a: &pp::AggregateExpr) -> Result<Node> {
        let op = agg_op(&a.op.to_string())?;
        let grouping = match &a.modifier {
            None => Grouping::By(Vec::new()),
            Some(LabelModifier::Include(l)) => Grouping::By(labels(l)),
            Some(LabelModifier::Exclude(l)) => Grouping::Without(labels(l)),
        };
        let param = match (&a.param, op) {
            (Some(p), AggOp::Topk | AggOp::Bottomk | AggOp::Quantile) => match strip_parens(p) {
                Expr::NumberLiteral(n) => Some(n.val),
                other => {
                    return Err(unsupported(format!("the parameter of {} must be a number here, not {other}", a.op)))
                }
            },
            _ => None,
        };
        let inner = strip_parens(&a.expr);
        if let Some(reading) = self.reading(inner)? {
            let metric = self.metric_of(reading.vs)?;
            if let Metric::Ratio(r) = &metric {
                if matches!(op, AggOp::Sum | AggOp::Avg | AggOp::Stddev | AggOp::Stdvar | AggOp::Quantile) {
                    let (n, d) = self.catalog.ratio_parts(r).unwrap_or_default();
                    return Err(unsupported(format!(
                        "{}({r}) would combine ratios; a ratio is its numerator over its denominator, each summed \
                         first: write sum by (...) ({n}) / sum by (...) ({d})",
                        a.op
                    )));
                }
            }
            if let Metric::Measure(m) = &metric {
                if self.merges_in_read(op, m, &reading) {
                    let group = self.kept_dims(&grouping);
                    let leaf = self.leaf(reading, Some(group))?;
                    return Ok(Node::Aggregate { op, grouping, param, child: Box::new(leaf) });
                }
            }
        }
        let child = self.node(&a.expr)?;
        Ok(Node::Aggregate { op, grouping, param, child: Box::new(child) })
    }

    /// Whether aggregation `op` over `reading` of measure `m` is the
    /// measure's own merge (over time too, unless a bare sample), so the
    /// read can do it.
    fn merges_in_read(&self, op: AggOp, m: &str, reading: &Reading) -> bool {
        let Some(merge) = self.catalog.kind(m).map(OverTime::merge_of) else { return false };
        op.over_time() == Some(merge) && (reading.range.is_none() || reading.func == merge)
    }

    /// The dimensions an aggregation's output keeps, in layout order.
    fn kept_dims(&self, g: &Grouping) -> Vec<String> {
        let dims = self.catalog.dims.iter();
        match g {
            Grouping::By(by) => dims.filter(|d| by.contains(d)).cloned().collect(),
            Grouping::Without(w) => dims.filter(|d| !w.contains(d)).cloned().collect(),
        }
    }

    /// A selector, or an over-time function of a range selector: what a
    /// leaf reads.
    fn reading<'e>(&self, e: &'e Expr) -> Result<Option<Reading<'e>>> {
        match e {
            Expr::VectorSelector(vs) => Ok(Some(Reading { vs, range: None, func: OverTime::Last, keeps_name: true })),
            Expr::Call(c) if c.func.name == QUANTILE_OVER_TIME => {
                let bad = || {
                    ServeError::BadData(
                        "quantile_over_time expects a quantile in 0..=1 and a range selector, e.g. \
                         quantile_over_time(0.99, latency[5m])"
                            .into(),
                    )
                };
                let q = match c.args.args.first().map(|a| strip_parens(a)) {
                    Some(Expr::NumberLiteral(n)) => Phi::new(n.val).ok_or_else(bad)?,
                    _ => return Err(bad()),
                };
                match c.args.args.get(1).map(|a| strip_parens(a)) {
                    Some(Expr::MatrixSelector(m)) => Ok(Some(Reading {
                        vs: &m.vs,
                        range: Some(m.range),
                        func: OverTime::Quantile(q),
                        keeps_name: false,
                    })),
                    _ => Err(bad()),
                }
            }
            Expr::Call(c) => {
                let Some(func) = OverTime::NAMES.iter().find(|(n, _)| *n == c.func.name).map(|(_, f)| *f) else {
                    return Ok(None);
                };
                match c.args.args.first().map(|a| strip_parens(a)) {
                    Some(Expr::MatrixSelector(m)) => {
                        Ok(Some(Reading { vs: &m.vs, range: Some(m.range), func, keeps_name: func == OverTime::Last }))
                    }
                    Some(Expr::Subquery(s)) => Err(unsupported(format!(
                        "subqueries ({s}) are not in gather serve's PromQL subset; apply {} to a metric's range, e.g. \
                         {}(clicks[1h])",
                        c.func.name, c.func.name
                    ))),
                    _ => Err(ServeError::BadData(format!("{} expects a range selector, e.g. clicks[5m]", c.func.name))),
                }
            }
            _ => Ok(None),
        }
    }

    /// The one metric a selector names (by name or `__name__` matchers).
    fn metric_of(&self, vs: &VectorSelector) -> Result<Metric> {
        if !vs.matchers.or_matchers.is_empty() {
            return Err(unsupported(format!("'or' inside a selector ({vs}) is not supported; write two selectors")));
        }
        let name_matchers: Vec<&Matcher> = vs.matchers.matchers.iter().filter(|m| m.name == "__name__").collect();
        let names = self.catalog.metric_names();
        let chosen: Vec<&String> = names
            .iter()
            .filter(|n| vs.name.as_deref().is_none_or(|x| x == n.as_str()))
            .filter(|n| name_matchers.iter().all(|m| m.is_match(n)))
            .collect();
        match chosen.as_slice() {
            [one] => Ok(self.catalog.metric(one).expect("a name of the catalog")),
            [] => Err(unsupported(format!(
                "{vs} selects no metric of the layout; the metrics are {} and the labels {}",
                names.join(", "),
                self.catalog.dims.join(", ")
            ))),
            many => Err(unsupported(format!(
                "{vs} selects {} metrics ({}); select one by name",
                many.len(),
                many.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
            ))),
        }
    }

    fn leaf(&mut self, r: Reading, group: Option<Vec<String>>) -> Result<Node> {
        let vs = r.vs;
        if vs.at.is_some() {
            return Err(unsupported(format!(
                "the @ modifier ({vs}) is not in gather serve's PromQL subset; use offset, or the query's time"
            )));
        }
        let metric = self.metric_of(vs)?;
        // Any positive range: the buckets ending in it (`query::spans`).
        let range = match r.range {
            None => None,
            Some(d) => {
                let ms = duration_ms(&d, "a range")?;
                if ms <= 0 {
                    return Err(ServeError::BadData(format!("{vs}: a range must be positive")));
                }
                Some(ms)
            }
        };
        if let Metric::Ratio(ratio) = &metric {
            if r.range.is_some() {
                let (n, d) = self.catalog.ratio_parts(ratio).unwrap_or_default();
                return Err(unsupported(format!(
                    "{ratio} is a ratio, computed from its summed parts: over a range write sum_over_time({n}[..]) / \
                     sum_over_time({d}[..])"
                )));
            }
        }
        let mut empty = false;
        let mut predicates = Vec::new();
        for m in vs.matchers.matchers.iter().filter(|m| m.name != "__name__") {
            if !self.catalog.is_dim(&m.name) {
                // A label no series has is empty on all of them.
                empty |= !m.is_match("");
                continue;
            }
            match self.predicate(m)? {
                Pass::Test(p) => predicates.push(p),
                Pass::Never => empty = true,
                Pass::Always => {}
            }
        }
        let group = group.unwrap_or_else(|| self.catalog.dims.clone());
        // The samples are the finest buckets a projection keeps them in: a
        // bare selector is one of them, and a range holds those ending in it.
        let mut dims = group.clone();
        dims.extend(predicates.iter().map(|p| p.field.clone()).filter(|f| !group.contains(f)));
        let (sample_ms, coarse) = self.catalog.sample_of(&dims, &metric);
        let text = match range {
            None => vs.to_string(),
            Some(ms) => format!("{}({vs}[{}])", name_of(r.func), format_duration(ms)),
        };
        self.leaves.push(Leaf {
            metric,
            filters: FilterSet { predicates },
            empty,
            range_ms: range.unwrap_or(sample_ms),
            sample_ms,
            coarse,
            offset_ms: offset_ms(&vs.offset)?,
            func: r.func,
            keeps_name: r.keeps_name,
            group,
            text,
        });
        Ok(Node::Leaf(self.leaves.len() - 1))
    }

    /// A matcher on a dimension as a filter (an integer dimension never
    /// equals text: `=` passes nothing, `!=` everything).
    fn predicate(&self, m: &Matcher) -> Result<Pass> {
        let numeric = self.catalog.numeric.contains(&m.name);
        let expr = m.to_string();
        let integer = m.value.parse::<i64>().is_ok();
        let op = match &m.op {
            MatchOp::Equal if numeric && !integer => return Ok(Pass::Never),
            MatchOp::NotEqual if numeric && !integer => return Ok(Pass::Always),
            MatchOp::Equal => Op::Eq(m.value.clone()),
            MatchOp::NotEqual => Op::Ne(m.value.clone()),
            MatchOp::Re(_) => match literal_alternatives(&m.value) {
                // `a|b|c`: a list the Z-box can narrow to.
                Some(values) if !numeric || values.iter().all(|v| v.parse::<i64>().is_ok()) => Op::In(values),
                _ => Op::Matches(pattern(&m.value)?),
            },
            MatchOp::NotRe(_) => Op::NotMatches(pattern(&m.value)?),
        };
        Ok(Pass::Test(Predicate { field: m.name.clone(), numeric, op, expr }))
    }

    fn binary(&mut self, b: &pp::BinaryExpr) -> Result<Node> {
        let op = bin_op(&b.op.to_string())?;
        let mut matching = Matching::default();
        let mut return_bool = false;
        if let Some(m) = &b.modifier {
            if m.fill_values.lhs.is_some() || m.fill_values.rhs.is_some() {
                return Err(unsupported("fill modifiers are not in gather serve's PromQL subset"));
            }
            return_bool = m.return_bool;
            if let Some(lm) = &m.matching {
                matching.on = lm.is_include();
                matching.labels = labels(lm.labels());
            }
            matching.card = match &m.card {
                VectorMatchCardinality::ManyToOne(l) => Card::ManyToOne(labels(l)),
                VectorMatchCardinality::OneToMany(l) => Card::OneToMany(labels(l)),
                VectorMatchCardinality::OneToOne | VectorMatchCardinality::ManyToMany => Card::OneToOne,
            };
        }
        let lhs = Box::new(self.node(&b.lhs)?);
        let rhs = Box::new(self.node(&b.rhs)?);
        Ok(Node::Binary { op, lhs, rhs, matching, return_bool })
    }

    fn call(&mut self, c: &pp::Call) -> Result<Node> {
        let name = c.func.name;
        if COUNTER_FUNCS.contains(&name) {
            return Err(unsupported(format!(
                "{name}() is for cumulative counters; a sample here is one bucket's count, not a running total, so \
                 {name}() would be wrong. For the count in a window write sum_over_time(clicks[5m]); per second, \
                 sum_over_time(clicks[5m]) / 300"
            )));
        }
        if name == "time" {
            return Ok(Node::Time);
        }
        if name == quantile::HISTOGRAM_QUANTILE {
            return self.histogram_quantile(c);
        }
        if name == "vector" {
            let arg = c.args.args.first().ok_or_else(|| ServeError::BadData("vector() needs an argument".into()))?;
            return Ok(Node::VectorOf(Box::new(self.node(arg)?)));
        }
        if name == QUANTILE_OVER_TIME || OverTime::NAMES.iter().any(|(n, _)| *n == name) {
            let e = Expr::Call(c.clone());
            let reading = self.reading(&e)?.expect("an over-time function");
            return self.leaf(reading, None);
        }
        let Some(func) = INSTANT_FUNCS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f) else {
            return Err(unsupported(format!(
                "{name}() is not in gather serve's PromQL subset (functions: {})",
                supported_functions()
            )));
        };
        let args = c.args.args.iter().map(|a| self.node(a)).collect::<Result<Vec<_>>>()?;
        Ok(Node::Call { func, args })
    }
}

fn name_of(f: OverTime) -> &'static str {
    match f {
        OverTime::Quantile(_) => QUANTILE_OVER_TIME,
        f => OverTime::NAMES.iter().find(|(_, g)| *g == f).map_or("", |(n, _)| n),
    }
}

fn pattern(text: &str) -> Result<Pattern> {
    Pattern::new(text).map_err(ServeError::BadData)
}

/// `a|b|c` of plain text (no regex syntax) as its alternatives.
fn literal_alternatives(re: &str) -> Option<Vec<String>> {
    const META: &[char] = &['\\', '.', '+', '*', '?', '(', ')', '[', ']', '{', '}', '^', '$'];
    if re.contains(META) {
        return None;
    }
    let mut values: Vec<String> = re.split('|').map(str::to_string).collect();
    values.sort();
    values.dedup();
    Some(values)
}

mod quantile;
#[cfg(test)]
mod tests;
