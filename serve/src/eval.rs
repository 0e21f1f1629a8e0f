//! Evaluating a compiled query once its leaves are read: pure arithmetic
//! on series, step by step, with Prometheus's rules for labels (what an
//! aggregation keeps, when the metric name goes), vector matching and
//! set operators.

use crate::error::{Result, ServeError};
use crate::query::{AggOp, BinOp, Card, Func, Grouping, Matching, Node};
use crate::series::{without_name, Labels, Value, Vector, NAME};
use std::collections::BTreeMap;

/// How an instant query's series are listed: by labels, or by value
/// (`sort`, `topk`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    Labels,
    Ascending,
    Descending,
}

/// `node` at the instants `ts` (ms), given what each leaf read.
pub fn evaluate(node: &Node, leaves: &[Vector], ts: &[i64]) -> Result<(Value, Order)> {
    let order = match node {
        Node::Call { func: Func::Sort, .. } | Node::Aggregate { op: AggOp::Bottomk, .. } => Order::Ascending,
        Node::Call { func: Func::SortDesc, .. } | Node::Aggregate { op: AggOp::Topk, .. } => Order::Descending,
        _ => Order::Labels,
    };
    let value = Eval { leaves, ts }.node(node)?;
    let value = match value {
        Value::Vector(v) => Value::Vector(v.prune()),
        s => s,
    };
    Ok((value, order))
}

struct Eval<'a> {
    leaves: &'a [Vector],
    ts: &'a [i64],
}

fn type_err(what: &str) -> ServeError {
    ServeError::BadData(format!("{what}: expected an instant vector, got a scalar"))
}

impl Eval<'_> {
    fn steps(&self) -> usize {
        self.ts.len()
    }

    fn node(&self, n: &Node) -> Result<Value> {
        match n {
            Node::Number(x) => Ok(Value::Scalar(vec![*x; self.steps()])),
            Node::Time => Ok(Value::Scalar(self.ts.iter().map(|t| *t as f64 / 1000.0).collect())),
            Node::Leaf(i) => Ok(Value::Vector(self.leaves[*i].clone())),
            Node::Neg(inner) => Ok(match self.node(inner)? {
                Value::Scalar(s) => Value::Scalar(s.into_iter().map(|x| -x).collect()),
                Value::Vector(v) => Value::Vector(map_values(v, |x| -x)),
            }),
            Node::Aggregate { op, grouping, param, child } => match self.node(child)? {
                Value::Vector(v) => Ok(Value::Vector(aggregate(*op, grouping, *param, &v, self.steps()))),
                Value::Scalar(_) => Err(type_err("an aggregation")),
            },
            Node::Binary { op, lhs, rhs, matching, return_bool } => {
                binary(*op, self.node(lhs)?, self.node(rhs)?, matching, *return_bool, self.steps())
            }
            Node::VectorOf(s) => match self.node(s)? {
                Value::Scalar(s) => {
                    let mut v = Vector::default();
                    v.series.insert(Labels::new(), s.into_iter().map(Some).collect());
                    Ok(Value::Vector(v))
                }
                Value::Vector(_) => Err(ServeError::BadData("vector(): expected a scalar argument".into())),
            },
            Node::Call { func, args } => {
                let args = args.iter().map(|a| self.node(a)).collect::<Result<Vec<_>>>()?;
                call(*func, args, self.steps())
            }
        }
    }
}

/// Each value through `f`; the metric name goes (the value is no longer
/// the metric's).
fn map_values(v: Vector, f: impl Fn(f64) -> f64) -> Vector {
    let mut out = Vector::default();
    for (l, xs) in v.series {
        let mapped: Vec<Option<f64>> = xs.into_iter().map(|x| x.map(&f)).collect();
        merge_into(&mut out, without_name(&l), mapped);
    }
    out
}

/// Adds a series' samples (two series that lose the labels that told them
/// apart share one; the later sample wins, as no two have one at a step
/// in the cases this is used for).
fn merge_into(out: &mut Vector, labels: Labels, xs: Vec<Option<f64>>) {
    match out.series.get_mut(&labels) {
        None => {
            out.series.insert(labels, xs);
        }
        Some(old) => {
            for (o, x) in old.iter_mut().zip(xs) {
                if x.is_some() {
                    *o = x;
                }
            }
        }
    }
}

fn group_key(labels: &Labels, g: &Grouping) -> Labels {
    match g {
        Grouping::By(by) => {
            labels.iter().filter(|(k, _)| by.contains(k)).map(|(k, v)| (k.clone(), v.clone())).collect()
        }
        Grouping::Without(w) => labels
            .iter()
            .filter(|(k, _)| k.as_str() != NAME && !w.contains(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    }
}

fn aggregate(op: AggOp, g: &Grouping, param: Option<f64>, v: &Vector, steps: usize) -> Vector {
    let mut out = Vector::default();
    for i in 0..steps {
        let mut groups: BTreeMap<Labels, Vec<(&Labels, f64)>> = BTreeMap::new();
        for (l, x) in v.at(i) {
            groups.entry(group_key(l, g)).or_default().push((l, x));
        }
        for (key, members) in groups {
            let xs = || members.iter().map(|(_, x)| *x);
            let n = members.len() as f64;
            let value = match op {
                AggOp::Sum => xs().sum(),
                AggOp::Min => xs().fold(f64::NAN, |m, x| if m.is_nan() || x < m { x } else { m }),
                AggOp::Max => xs().fold(f64::NAN, |m, x| if m.is_nan() || x > m { x } else { m }),
                AggOp::Count => n,
                AggOp::Group => 1.0,
                AggOp::Avg => xs().sum::<f64>() / n,
                AggOp::Stdvar | AggOp::Stddev => {
                    let mean = xs().sum::<f64>() / n;
                    let var = xs().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
                    if op == AggOp::Stddev {
                        var.sqrt()
                    } else {
                        var
                    }
                }
                AggOp::Quantile => quantile(param.unwrap_or(f64::NAN), xs().collect()),
                AggOp::Topk | AggOp::Bottomk => {
                    let k = param.unwrap_or(0.0);
                    let k = if k.is_nan() || k < 1.0 { 0 } else { k.min(members.len() as f64) as usize };
                    let mut ranked = members.clone();
                    // Largest first for topk, smallest first for bottomk; NaN last either way.
                    ranked.sort_by(|a, b| {
                        let ord = match (a.1.is_nan(), b.1.is_nan()) {
                            (true, true) => std::cmp::Ordering::Equal,
                            (true, false) => std::cmp::Ordering::Greater,
                            (false, true) => std::cmp::Ordering::Less,
                            _ if op == AggOp::Topk => b.1.total_cmp(&a.1),
                            _ => a.1.total_cmp(&b.1),
                        };
                        ord.then_with(|| a.0.cmp(b.0))
                    });
                    for (l, x) in ranked.into_iter().take(k) {
                        out.set(l.clone(), steps, i, x);
                    }
                    continue;
                }
            };
            out.set(key, steps, i, value);
        }
    }
    out
}

/// Prometheus's `quantile`: linear interpolation between the closest
/// ranks; below 0 is -Inf, above 1 +Inf.
fn quantile(q: f64, mut xs: Vec<f64>) -> f64 {
    if xs.is_empty() || q.is_nan() {
        return f64::NAN;
    }
    if q < 0.0 {
        return f64::NEG_INFINITY;
    }
    if q > 1.0 {
        return f64::INFINITY;
    }
    xs.sort_by(f64::total_cmp);
    let rank = q * (xs.len() - 1) as f64;
    let lower = rank.floor() as usize;
    let upper = (lower + 1).min(xs.len() - 1);
    let w = rank - rank.floor();
    xs[lower] * (1.0 - w) + xs[upper] * w
}

/// `x op y`, comparisons as 1 or 0.
fn apply(op: BinOp, x: f64, y: f64) -> f64 {
    let b = |c: bool| if c { 1.0 } else { 0.0 };
    match op {
        BinOp::Add => x + y,
        BinOp::Sub => x - y,
        BinOp::Mul => x * y,
        BinOp::Div => x / y,
        BinOp::Mod => x % y,
        BinOp::Pow => x.powf(y),
        BinOp::Atan2 => x.atan2(y),
        BinOp::Eq => b(x == y),
        BinOp::Ne => b(x != y),
        BinOp::Gt => b(x > y),
        BinOp::Lt => b(x < y),
        BinOp::Ge => b(x >= y),
        BinOp::Le => b(x <= y),
        BinOp::And | BinOp::Or | BinOp::Unless => f64::NAN,
    }
}

/// A comparison's or an arithmetic operation's result for one pair: the
/// sample kept (None: filtered out by a comparison).
fn pair(op: BinOp, x: f64, y: f64, return_bool: bool, keep: f64) -> Option<f64> {
    let r = apply(op, x, y);
    match (op.is_comparison(), return_bool) {
        (false, _) => Some(r),
        (true, true) => Some(r),
        (true, false) => (r == 1.0).then_some(keep),
    }
}

fn drops_name(op: BinOp, return_bool: bool) -> bool {
    !op.is_comparison() || return_bool
}

fn binary(op: BinOp, l: Value, r: Value, m: &Matching, return_bool: bool, steps: usize) -> Result<Value> {
    match (l, r) {
        (Value::Scalar(a), Value::Scalar(b)) => {
            Ok(Value::Scalar(a.iter().zip(&b).map(|(x, y)| apply(op, *x, *y)).collect()))
        }
        (Value::Vector(v), Value::Scalar(s)) => Ok(Value::Vector(with_scalar(op, v, &s, return_bool, false))),
        (Value::Scalar(s), Value::Vector(v)) => Ok(Value::Vector(with_scalar(op, v, &s, return_bool, true))),
        (Value::Vector(a), Value::Vector(b)) if op.is_set() => Ok(Value::Vector(set_op(op, &a, &b, m, steps))),
        (Value::Vector(a), Value::Vector(b)) => Ok(Value::Vector(vector_op(op, &a, &b, m, return_bool, steps)?)),
    }
}

fn with_scalar(op: BinOp, v: Vector, s: &[f64], return_bool: bool, scalar_left: bool) -> Vector {
    let mut out = Vector::default();
    let drop = drops_name(op, return_bool);
    for (l, xs) in v.series {
        let ys: Vec<Option<f64>> = xs
            .iter()
            .zip(s)
            .map(|(x, k)| {
                x.and_then(
                    |x| if scalar_left { pair(op, *k, x, return_bool, x) } else { pair(op, x, *k, return_bool, x) },
                )
            })
            .collect();
        let labels = if drop { without_name(&l) } else { l };
        merge_into(&mut out, labels, ys);
    }
    out
}

fn signature(l: &Labels, m: &Matching) -> Labels {
    l.iter()
        .filter(|(k, _)| if m.on { m.labels.contains(k) } else { k.as_str() != NAME && !m.labels.contains(k) })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn set_op(op: BinOp, a: &Vector, b: &Vector, m: &Matching, steps: usize) -> Vector {
    let mut out = Vector::default();
    for i in 0..steps {
        let right: std::collections::BTreeSet<Labels> = b.at(i).map(|(l, _)| signature(l, m)).collect();
        let left: std::collections::BTreeSet<Labels> = a.at(i).map(|(l, _)| signature(l, m)).collect();
        for (l, x) in a.at(i) {
            let matched = right.contains(&signature(l, m));
            if op == BinOp::Or || (op == BinOp::And) == matched {
                out.set(l.clone(), steps, i, x);
            }
        }
        if op == BinOp::Or {
            for (l, x) in b.at(i) {
                if !left.contains(&signature(l, m)) {
                    out.set(l.clone(), steps, i, x);
                }
            }
        }
    }
    out
}

/// The labels of a matched pair's result, from the "many" side's (or the
/// left's), as Prometheus's `resultMetric` makes them.
fn result_labels(many: &Labels, one: &Labels, m: &Matching, drop: bool) -> Labels {
    let mut l = many.clone();
    if drop {
        l.remove(NAME);
    }
    match &m.card {
        Card::OneToOne if m.on => l.retain(|k, _| m.labels.contains(k)),
        Card::OneToOne => l.retain(|k, _| !m.labels.contains(k)),
        Card::ManyToOne(include) | Card::OneToMany(include) => {
            for name in include {
                match one.get(name) {
                    Some(v) => {
                        l.insert(name.clone(), v.clone());
                    }
                    None => {
                        l.remove(name);
                    }
                }
            }
        }
    }
    l
}

fn vector_op(op: BinOp, a: &Vector, b: &Vector, m: &Matching, return_bool: bool, steps: usize) -> Result<Vector> {
    // The "one" side's series must be unique per signature.
    let (many, one, swapped) = match m.card {
        Card::OneToMany(_) => (a, b, true),
        _ => (a, b, false),
    };
    let (many, one) = if swapped { (one, many) } else { (many, one) };
    let drop = drops_name(op, return_bool);
    let mut out = Vector::default();
    for i in 0..steps {
        let mut ones: BTreeMap<Labels, (&Labels, f64)> = BTreeMap::new();
        for (l, x) in one.at(i) {
            if ones.insert(signature(l, m), (l, x)).is_some() {
                return Err(ServeError::Execution(format!(
                    "found duplicate series for the match group {:?} on the {} side of the operation; matching \
                     labels must be unique on one side (use on(...)/ignoring(...), or aggregate first)",
                    signature(l, m),
                    if swapped { "left" } else { "right" }
                )));
            }
        }
        let mut seen: BTreeMap<Labels, ()> = BTreeMap::new();
        for (ml, mx) in many.at(i) {
            let Some((ol, ox)) = ones.get(&signature(ml, m)) else { continue };
            let (x, y) = if swapped { (*ox, mx) } else { (mx, *ox) };
            let Some(value) = pair(op, x, y, return_bool, x) else { continue };
            let labels = result_labels(ml, ol, m, drop);
            if seen.insert(labels.clone(), ()).is_some() {
                return Err(ServeError::Execution(format!(
                    "multiple matches for labels {labels:?}: many-to-one matching must be explicit (group_left or \
                     group_right)"
                )));
            }
            out.set(labels, steps, i, value);
        }
    }
    Ok(out)
}

fn scalar_arg(args: &[Value], i: usize, what: &str) -> Result<Option<Vec<f64>>> {
    match args.get(i) {
        None => Ok(None),
        Some(Value::Scalar(s)) => Ok(Some(s.clone())),
        Some(Value::Vector(_)) => Err(ServeError::BadData(format!("{what}: expected a scalar argument"))),
    }
}

fn call(func: Func, mut args: Vec<Value>, steps: usize) -> Result<Value> {
    let extra: Vec<Option<Vec<f64>>> =
        (1..args.len()).map(|i| scalar_arg(&args, i, "a function")).collect::<Result<_>>()?;
    let v = match args.drain(..1).next() {
        Some(Value::Vector(v)) => v,
        _ => return Err(type_err("a function")),
    };
    let per_step = |k: usize, i: usize, default: f64| extra.get(k).and_then(|s| s.as_ref()).map_or(default, |s| s[i]);
    let mapped = |f: &dyn Fn(f64, usize) -> Option<f64>| {
        let mut out = Vector::default();
        for (l, xs) in &v.series {
            let ys = xs.iter().enumerate().map(|(i, x)| x.and_then(|x| f(x, i))).collect();
            merge_into(&mut out, without_name(l), ys);
        }
        Value::Vector(out)
    };
    Ok(match func {
        Func::Abs => mapped(&|x, _| Some(x.abs())),
        Func::Ceil => mapped(&|x, _| Some(x.ceil())),
        Func::Floor => mapped(&|x, _| Some(x.floor())),
        Func::Sqrt => mapped(&|x, _| Some(x.sqrt())),
        Func::Exp => mapped(&|x, _| Some(x.exp())),
        Func::Ln => mapped(&|x, _| Some(x.ln())),
        Func::Log2 => mapped(&|x, _| Some(x.log2())),
        Func::Log10 => mapped(&|x, _| Some(x.log10())),
        Func::Sgn => mapped(&|x, _| {
            Some(if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                x
            })
        }),
        Func::Round => mapped(&|x, i| {
            let inv = 1.0 / per_step(0, i, 1.0);
            Some((x * inv + 0.5).floor() / inv)
        }),
        Func::ClampMin => mapped(&|x, i| Some(x.max(per_step(0, i, f64::NAN)))),
        Func::ClampMax => mapped(&|x, i| Some(x.min(per_step(0, i, f64::NAN)))),
        Func::Clamp => mapped(&|x, i| {
            let (lo, hi) = (per_step(0, i, f64::NAN), per_step(1, i, f64::NAN));
            (lo <= hi).then(|| x.max(lo).min(hi))
        }),
        Func::Scalar => Value::Scalar(
            (0..steps)
                .map(|i| {
                    let mut at = v.at(i);
                    match (at.next(), at.next()) {
                        (Some((_, x)), None) => x,
                        _ => f64::NAN,
                    }
                })
                .collect(),
        ),
        Func::Sort | Func::SortDesc => Value::Vector(v),
    })
}

#[cfg(test)]
mod tests;
