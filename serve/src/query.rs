//! The query as the server evaluates it: PromQL compiled ([`crate::compile`])
//! into a tree whose leaves are reads of the table ([`Leaf`]) and whose
//! inner nodes are pure arithmetic on series ([`crate::eval`]).

use zigzag_gather::filter::FilterSet;
use zigzag_model::measure::MeasureKind;

/// A compiled query: the tree and the reads it needs.
#[derive(Debug, Clone)]
pub struct Query {
    pub root: Node,
    pub leaves: Vec<Leaf>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Number(f64),
    /// `time()`: each step's instant, in seconds.
    Time,
    /// The series read by `leaves[i]`.
    Leaf(usize),
    Neg(Box<Node>),
    Aggregate {
        op: AggOp,
        grouping: Grouping,
        param: Option<f64>,
        child: Box<Node>,
    },
    Binary {
        op: BinOp,
        lhs: Box<Node>,
        rhs: Box<Node>,
        matching: Matching,
        return_bool: bool,
    },
    Call {
        func: Func,
        args: Vec<Node>,
    },
    /// `vector(s)`: a scalar as a series without labels.
    VectorOf(Box<Node>),
}

/// `by (...)` or `without (...)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grouping {
    By(Vec<String>),
    Without(Vec<String>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggOp {
    Sum,
    Min,
    Max,
    Count,
    Avg,
    Group,
    Stddev,
    Stdvar,
    Topk,
    Bottomk,
    Quantile,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Pow,
    Atan2,
    Eq,
    Ne,
    Gt,
    Lt,
    Ge,
    Le,
    And,
    Or,
    Unless,
}

impl AggOp {
    /// The fold over time that is the same operation across series.
    pub fn over_time(self) -> Option<OverTime> {
        match self {
            AggOp::Sum => Some(OverTime::Sum),
            AggOp::Min => Some(OverTime::Min),
            AggOp::Max => Some(OverTime::Max),
            _ => None,
        }
    }
}

impl BinOp {
    pub fn is_comparison(self) -> bool {
        matches!(self, BinOp::Eq | BinOp::Ne | BinOp::Gt | BinOp::Lt | BinOp::Ge | BinOp::Le)
    }

    pub fn is_set(self) -> bool {
        matches!(self, BinOp::And | BinOp::Or | BinOp::Unless)
    }
}

/// How two vectors' series pair up (`on`/`ignoring`, `group_left/right`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Matching {
    /// `on (labels)`: match on these only; else `ignoring (labels)`.
    pub on: bool,
    pub labels: Vec<String>,
    pub card: Card,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Card {
    #[default]
    OneToOne,
    /// `group_left (include)`: many on the left.
    ManyToOne(Vec<String>),
    /// `group_right (include)`: many on the right.
    OneToMany(Vec<String>),
}

/// Instant-vector functions of the subset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Func {
    Abs,
    Ceil,
    Floor,
    Round,
    Sqrt,
    Exp,
    Ln,
    Log2,
    Log10,
    Sgn,
    Clamp,
    ClampMin,
    ClampMax,
    /// A one-series vector as a scalar (NaN otherwise).
    Scalar,
    Sort,
    SortDesc,
}

/// What a read does with the buckets of a range: `x[r]` at `t` holds the
/// buckets that end in `(t - r, t]`; a bare `x` is `last_over_time(x[s])`
/// with `s` the sample bucket (the layout's finest rollup).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverTime {
    Last,
    Sum,
    Min,
    Max,
    Avg,
    Count,
    Present,
    /// `quantile_over_time(q, x[r])`: of a quantile measure, its sketches
    /// merged and asked for q (the q-quantile of the field's values in the
    /// range); of any other metric, Prometheus's: the q-quantile of the
    /// samples, interpolated.
    Quantile(Phi),
}

/// A quantile's q in millionths (0 to 1,000,000), so readings compare
/// exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Phi(u32);

impl Phi {
    /// None outside 0..=1.
    pub fn new(q: f64) -> Option<Phi> {
        (0.0..=1.0).contains(&q).then(|| Phi((q * 1e6).round() as u32))
    }

    pub fn q(self) -> f64 {
        f64::from(self.0) / 1e6
    }
}

/// Its name in PromQL.
pub const QUANTILE_OVER_TIME: &str = "quantile_over_time";

impl OverTime {
    /// The fold that is a measure kind's own merge (sums of counts and
    /// sums, a union of sketches, minima of minima, maxima of maxima):
    /// folding coarser buckets, or buckets already grouped, gives the same.
    pub fn merge_of(kind: MeasureKind) -> OverTime {
        match kind {
            MeasureKind::Min => OverTime::Min,
            MeasureKind::Max => OverTime::Max,
            // Counts and sums add; a sketch kind's merge is its own
            // (`MeasureValue::merge`), which summing folds with.
            _ => OverTime::Sum,
        }
    }

    pub const NAMES: [(&'static str, OverTime); 7] = [
        ("last_over_time", OverTime::Last),
        ("sum_over_time", OverTime::Sum),
        ("min_over_time", OverTime::Min),
        ("max_over_time", OverTime::Max),
        ("avg_over_time", OverTime::Avg),
        ("count_over_time", OverTime::Count),
        ("present_over_time", OverTime::Present),
    ];
}

/// What a leaf reads.
#[derive(Debug, Clone, PartialEq)]
pub enum Metric {
    /// A measure of the layout, by name.
    Measure(String),
    /// A declared ratio, by name: its numerator over its denominator, each
    /// summed first.
    Ratio(String),
}

impl Metric {
    pub fn name(&self) -> &str {
        match self {
            Metric::Measure(n) | Metric::Ratio(n) => n,
        }
    }
}

/// One read of the table: a metric over the buckets of a range at every
/// step, per group.
#[derive(Debug, Clone, PartialEq)]
pub struct Leaf {
    pub metric: Metric,
    pub filters: FilterSet,
    /// A matcher no series can pass (a label the layout does not have,
    /// asked to be non-empty): the leaf has no series, nothing is read.
    pub empty: bool,
    /// `[r]` in ms; the sample bucket for a bare selector.
    pub range_ms: i64,
    /// The series' sample bucket: the finest rollup of the projections
    /// that keep the leaf's labels and measures (`Catalog::sample_of`).
    pub sample_ms: i64,
    /// Why the samples are coarser than the table's finest rollup, if
    /// they are (`projection referrer_country keeps hours`).
    pub coarse: Option<String>,
    pub offset_ms: i64,
    pub func: OverTime,
    /// The metric name stays on the series (a bare selector).
    pub keeps_name: bool,
    /// The dimensions the series are told apart by: every dimension, or
    /// only those an enclosing aggregation keeps, when the aggregation is
    /// the measure's own merge (`sum` of counts and sums, `min` of minima,
    /// `max` of maxima) and can be done by the read.
    pub group: Vec<String>,
    /// As written, for `infos` and errors.
    pub text: String,
}

fn floor(t: i64, unit: i64) -> i64 {
    t.div_euclid(unit) * unit
}

/// Whether folding a range's buckets with `func` gives the same from
/// coarser buckets: the measure's own merge, or presence.
pub(crate) fn merges(func: OverTime, kind: Option<MeasureKind>) -> bool {
    kind.is_some_and(|k| {
        func == OverTime::Present
            || func == OverTime::merge_of(k)
            || (matches!(func, OverTime::Quantile(_)) && k.answers_quantiles())
    })
}

/// The buckets a leaf holds at each step, as the span `[start, end)` of
/// their starts: the sample buckets whose end lies in `(t - o - r, t - o]`,
/// whatever `r` is (`[75577s]`, Grafana's `$__range` under "Today so far",
/// holds the buckets ending in its last 75,577 seconds, as Prometheus's
/// range holds the samples stamped in it).
pub(crate) fn spans(leaf: &Leaf, ts: &[i64]) -> Vec<(i64, i64)> {
    let (at, sample) = (|t: i64| t - leaf.offset_ms, leaf.sample_ms);
    ts.iter().map(|&t| (floor(at(t) - leaf.range_ms, sample), floor(at(t), sample))).collect()
}
