use super::*;
use crate::query::{Grouping, Matching, Node};

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// A series' labels and its values per step.
type Row<'a> = (&'a [(&'a str, &'a str)], &'a [Option<f64>]);

fn vector(rows: &[Row]) -> Vector {
    Vector { series: rows.iter().map(|(l, xs)| (labels(l), xs.to_vec())).collect() }
}

fn run(node: Node, leaves: &[Vector], steps: usize) -> Value {
    let ts: Vec<i64> = (0..steps as i64).map(|i| i * 60_000).collect();
    evaluate(&node, leaves, &ts).unwrap().0
}

fn leaf(i: usize) -> Box<Node> {
    Box::new(Node::Leaf(i))
}

#[test]
fn sum_by_keeps_only_its_labels_and_drops_the_name() {
    let v = vector(&[
        (&[("__name__", "clicks"), ("campaign", "a"), ("country", "DE")], &[Some(1.0), None]),
        (&[("__name__", "clicks"), ("campaign", "a"), ("country", "FR")], &[Some(2.0), Some(5.0)]),
        (&[("__name__", "clicks"), ("campaign", "b"), ("country", "FR")], &[None, Some(7.0)]),
    ]);
    let by = Node::Aggregate {
        op: AggOp::Sum,
        grouping: Grouping::By(vec!["campaign".into()]),
        param: None,
        child: leaf(0),
    };
    assert_eq!(
        run(by, std::slice::from_ref(&v), 2),
        Value::Vector(vector(&[
            (&[("campaign", "a")], &[Some(3.0), Some(5.0)]),
            (&[("campaign", "b")], &[None, Some(7.0)])
        ]))
    );
    let without = Node::Aggregate {
        op: AggOp::Count,
        grouping: Grouping::Without(vec!["country".into()]),
        param: None,
        child: leaf(0),
    };
    assert_eq!(
        run(without, std::slice::from_ref(&v), 2),
        Value::Vector(vector(&[
            (&[("campaign", "a")], &[Some(2.0), Some(1.0)]),
            (&[("campaign", "b")], &[None, Some(1.0)])
        ]))
    );
    let avg = Node::Aggregate { op: AggOp::Avg, grouping: Grouping::By(vec![]), param: None, child: leaf(0) };
    assert_eq!(run(avg, &[v], 2), Value::Vector(vector(&[(&[], &[Some(1.5), Some(6.0)])])));
}

#[test]
fn topk_keeps_whole_series_per_step() {
    let v = vector(&[
        (&[("c", "a")], &[Some(1.0), Some(9.0)]),
        (&[("c", "b")], &[Some(5.0), Some(2.0)]),
        (&[("c", "z")], &[Some(3.0), None]),
    ]);
    let top = Node::Aggregate { op: AggOp::Topk, grouping: Grouping::By(vec![]), param: Some(1.0), child: leaf(0) };
    let (value, order) = evaluate(&top, std::slice::from_ref(&v), &[0, 60_000]).unwrap();
    assert_eq!(order, Order::Descending);
    assert_eq!(
        value,
        Value::Vector(vector(&[(&[("c", "a")], &[None, Some(9.0)]), (&[("c", "b")], &[Some(5.0), None])]))
    );
    let bottom =
        Node::Aggregate { op: AggOp::Bottomk, grouping: Grouping::By(vec![]), param: Some(2.0), child: leaf(0) };
    assert_eq!(
        run(bottom, &[v], 2),
        Value::Vector(vector(&[
            (&[("c", "a")], &[Some(1.0), Some(9.0)]),
            (&[("c", "b")], &[None, Some(2.0)]),
            (&[("c", "z")], &[Some(3.0), None])
        ])),
        "the two smallest at each step: a and z, then b and a"
    );
}

#[test]
fn one_to_one_division_matches_on_the_labels_but_the_name() {
    let clicks = vector(&[(&[("c", "a")], &[Some(1.0)]), (&[("c", "b")], &[Some(0.0)]), (&[("c", "x")], &[Some(4.0)])]);
    let imps = vector(&[(&[("c", "a")], &[Some(4.0)]), (&[("c", "b")], &[Some(0.0)]), (&[("c", "y")], &[Some(4.0)])]);
    let div =
        Node::Binary { op: BinOp::Div, lhs: leaf(0), rhs: leaf(1), matching: Matching::default(), return_bool: false };
    let Value::Vector(v) = run(div, &[clicks, imps], 1) else { panic!() };
    assert_eq!(v.series.len(), 2, "only matched pairs: {v:?}");
    assert_eq!(v.series[&labels(&[("c", "a")])], [Some(0.25)]);
    assert!(v.series[&labels(&[("c", "b")])][0].unwrap().is_nan(), "0/0 is NaN, as in Prometheus");
}

#[test]
fn comparisons_filter_unless_bool_and_keep_the_name() {
    let v = vector(&[
        (&[("__name__", "clicks"), ("c", "a")], &[Some(1.0)]),
        (&[("__name__", "clicks"), ("c", "b")], &[Some(5.0)]),
    ]);
    let gt = |b| Node::Binary {
        op: BinOp::Gt,
        lhs: leaf(0),
        rhs: Box::new(Node::Number(2.0)),
        matching: Matching::default(),
        return_bool: b,
    };
    assert_eq!(
        run(gt(false), std::slice::from_ref(&v), 1),
        Value::Vector(vector(&[(&[("__name__", "clicks"), ("c", "b")], &[Some(5.0)])]))
    );
    assert_eq!(
        run(gt(true), &[v], 1),
        Value::Vector(vector(&[(&[("c", "a")], &[Some(0.0)]), (&[("c", "b")], &[Some(1.0)])]))
    );
}

#[test]
fn set_operators() {
    let a = vector(&[(&[("c", "a")], &[Some(1.0)]), (&[("c", "b")], &[Some(2.0)])]);
    let b = vector(&[(&[("c", "b")], &[Some(20.0)]), (&[("c", "z")], &[Some(30.0)])]);
    let op = |op| Node::Binary { op, lhs: leaf(0), rhs: leaf(1), matching: Matching::default(), return_bool: false };
    let leaves = [a, b];
    assert_eq!(run(op(BinOp::And), &leaves, 1), Value::Vector(vector(&[(&[("c", "b")], &[Some(2.0)])])));
    assert_eq!(run(op(BinOp::Unless), &leaves, 1), Value::Vector(vector(&[(&[("c", "a")], &[Some(1.0)])])));
    assert_eq!(
        run(op(BinOp::Or), &leaves, 1),
        Value::Vector(vector(&[
            (&[("c", "a")], &[Some(1.0)]),
            (&[("c", "b")], &[Some(2.0)]),
            (&[("c", "z")], &[Some(30.0)])
        ]))
    );
}

#[test]
fn a_one_to_one_match_with_duplicates_is_an_error_not_a_guess() {
    let many = vector(&[(&[("c", "a"), ("k", "1")], &[Some(1.0)]), (&[("c", "a"), ("k", "2")], &[Some(2.0)])]);
    let one = vector(&[(&[("c", "a")], &[Some(10.0)])]);
    let on_c = Matching { on: true, labels: vec!["c".into()], card: Card::OneToOne };
    let div = Node::Binary { op: BinOp::Div, lhs: leaf(0), rhs: leaf(1), matching: on_c, return_bool: false };
    let e = evaluate(&div, &[many.clone(), one.clone()], &[0]).unwrap_err();
    assert!(matches!(e, ServeError::Execution(_)) && e.to_string().contains("group_left"), "{e}");
    let left = Matching { on: true, labels: vec!["c".into()], card: Card::ManyToOne(vec![]) };
    let div = Node::Binary { op: BinOp::Div, lhs: leaf(0), rhs: leaf(1), matching: left, return_bool: false };
    assert_eq!(
        run(div, &[many, one], 1),
        Value::Vector(vector(&[(&[("c", "a"), ("k", "1")], &[Some(0.1)]), (&[("c", "a"), ("k", "2")], &[Some(0.2)])]))
    );
}

#[test]
fn quantile_interpolates_like_prometheus() {
    assert_eq!(quantile(0.5, vec![1.0, 2.0, 3.0, 4.0]), 2.5);
    assert_eq!(quantile(0.0, vec![3.0, 1.0]), 1.0);
    assert_eq!(quantile(1.5, vec![3.0]), f64::INFINITY);
    assert!(quantile(0.5, vec![]).is_nan());
}

#[test]
fn scalar_functions_and_time() {
    let v = vector(&[(&[("__name__", "cost")], &[Some(-2.4), Some(3.6)])]);
    let abs = Node::Call { func: Func::Abs, args: vec![Node::Leaf(0)] };
    assert_eq!(run(abs, std::slice::from_ref(&v), 2), Value::Vector(vector(&[(&[], &[Some(2.4), Some(3.6)])])));
    let round = Node::Call { func: Func::Round, args: vec![Node::Leaf(0)] };
    assert_eq!(run(round, std::slice::from_ref(&v), 2), Value::Vector(vector(&[(&[], &[Some(-2.0), Some(4.0)])])));
    let sc = Node::Call { func: Func::Scalar, args: vec![Node::Leaf(0)] };
    assert_eq!(run(sc, &[v], 2), Value::Scalar(vec![-2.4, 3.6]));
    assert_eq!(run(Node::Time, &[], 2), Value::Scalar(vec![0.0, 60.0]));
}
