use super::codec::QuantilesError;
use super::*;
use proptest::prelude::*;

fn params(a: f64) -> QuantileParams {
    QuantileParams::for_accuracy(a, 0).expect("valid accuracy")
}

fn sketch_of(p: QuantileParams, values: &[i64]) -> Quantiles {
    let mut q = Quantiles::new(p);
    for &v in values {
        q.add(v);
    }
    q
}

/// The brute-force oracle: the value at rank floor(q (n - 1)).
fn exact(sorted: &[i64], q: f64) -> i64 {
    sorted[(q * (sorted.len() - 1) as f64).floor() as usize]
}

const QS: [f64; 8] = [0.0, 0.01, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0];

fn assert_within(values: &[i64], a: f64, what: &str) {
    let p = params(a);
    assert!(p.accuracy() <= a, "{a}: the bound {} is within the declared", p.accuracy());
    let q = sketch_of(p, values);
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    for (&qq, est) in QS.iter().zip(q.quantiles(&QS)) {
        let want = exact(&sorted, qq) as f64;
        let est = est.expect("a value");
        assert!((est - want).abs() <= p.accuracy() * want.abs() + 1e-9, "{what} at {a}: q {qq}: {est} vs exact {want}");
    }
    assert_eq!((q.count(), q.sum()), (values.len() as u64, values.iter().map(|&v| i128::from(v)).sum()));
    assert_eq!((q.min(), q.max()), (sorted.first().copied(), sorted.last().copied()));
}

/// A small deterministic generator (xorshift), so the shapes are the same
/// on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.unit().max(1e-300), self.unit());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

fn shapes() -> Vec<(&'static str, Vec<i64>)> {
    let mut r = Rng(0x9E37_79B9_7F4A_7C15);
    let n = 20_000;
    let lognormal: Vec<i64> = (0..n).map(|_| (1000.0 * (1.5 * r.normal()).exp()).round() as i64).collect();
    let bimodal: Vec<i64> = (0..n)
        .map(|i| if i % 4 == 0 { 50_000.0 + 500.0 * r.normal() } else { 120.0 + 10.0 * r.normal() } as i64)
        .collect();
    let pareto: Vec<i64> = (0..n).map(|_| (10.0 / (1.0 - r.unit()).powf(1.0 / 1.1)).min(9e15) as i64).collect();
    let constant = vec![4_242; 1000];
    let with_zeros: Vec<i64> = (0..n).map(|i| if i % 5 == 0 { 0 } else { (r.next() % 10_000) as i64 + 1 }).collect();
    let mixed: Vec<i64> = (0..n).map(|_| (1e4 * r.normal()) as i64).collect();
    let negatives: Vec<i64> = lognormal.iter().map(|v| -v).collect();
    let span: Vec<i64> = (0..n).map(|_| 10f64.powf(9.0 * r.unit()).round() as i64).collect();
    let extremes = vec![i64::MIN, i64::MAX, -1, 0, 1, i64::MAX - 1, i64::MIN + 1];
    vec![
        ("lognormal", lognormal),
        ("bimodal", bimodal),
        ("pareto", pareto),
        ("constant", constant),
        ("with zeros", with_zeros),
        ("mixed signs", mixed),
        ("negatives", negatives),
        ("1..1e9", span),
        ("extremes", extremes),
    ]
}

#[test]
fn quantiles_are_within_the_declared_accuracy_of_the_exact_ones_on_every_shape() {
    for (what, values) in shapes() {
        for a in [0.01, 0.02, 0.05] {
            assert_within(&values, a, what);
        }
    }
}

#[test]
fn accuracy_sets_the_slices() {
    assert_eq!(params(0.01).slices, 35);
    assert_eq!(params(0.02).slices, 18);
    assert!(params(0.01).accuracy() <= 0.01 && params(0.02).accuracy() <= 0.02);
    assert!(QuantileParams::for_accuracy(0.5, 0).is_err());
    assert!(QuantileParams::for_accuracy(0.01, 3).is_err(), "a cap below MIN_BINS");
    assert_eq!(quantile_label(0.5), "p50");
    assert_eq!(quantile_label(0.999), "p99.9");
    assert_eq!(quantile_label(1.0), "p100");
    assert_eq!(quantile_label(0.0), "p0");
}

#[test]
fn merging_different_accuracies_is_refused() {
    let mut a = sketch_of(params(0.01), &[1, 2]);
    assert!(a.merge(&sketch_of(params(0.02), &[3])).is_err());
    assert_eq!(a.count(), 2, "unchanged");
}

#[test]
fn an_empty_sketch_answers_nothing_and_round_trips() {
    let q = Quantiles::new(params(0.01));
    assert_eq!(q.quantiles(&QS), vec![None; QS.len()]);
    assert_eq!(Quantiles::from_bytes(&q.to_bytes()).unwrap(), q);
    assert_eq!(q.to_bytes().len(), 8, "version, slices, cap, count, zeros, sum, two empty stores");
}

#[test]
fn hostile_bytes_are_refused() {
    let q = sketch_of(params(0.01), &[5, 5, 70, -3, 0]);
    let bytes = q.to_bytes();
    assert_eq!(Quantiles::from_bytes(&bytes).unwrap(), q);
    assert_eq!(Quantiles::from_bytes(&[]), Err(QuantilesError::Truncated));
    assert_eq!(Quantiles::from_bytes(&[2]), Err(QuantilesError::Version(2)));
    let mut longer = bytes.clone();
    longer.push(0);
    assert_eq!(Quantiles::from_bytes(&longer), Err(QuantilesError::Trailing(1)));
    for cut in 0..bytes.len() {
        assert!(Quantiles::from_bytes(&bytes[..cut]).is_err(), "cut at {cut}");
    }
    // A store claiming 2^60 buckets allocates nothing.
    let mut huge = vec![1, 50, 0, 1, 0, 2, 2, 2];
    huge.extend([0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x10]);
    assert!(Quantiles::from_bytes(&huge).is_err());
}

fn values() -> impl Strategy<Value = Vec<i64>> {
    prop::collection::vec(
        prop_oneof![-1_000_000i64..1_000_000, any::<i64>(), Just(0i64), (0u32..60).prop_map(|e| 1i64 << e),],
        0..300,
    )
}

proptest! {
    #[test]
    fn merges_are_order_free_and_equal_the_sketch_of_the_union_byte_for_byte(
        a in values(), b in values(), c in values(), cap in prop_oneof![Just(0u32), 16u32..40],
    ) {
        let p = QuantileParams::for_accuracy(0.02, cap).unwrap();
        let (sa, sb, sc) = (sketch_of(p, &a), sketch_of(p, &b), sketch_of(p, &c));
        let mut ab_c = sa.clone();
        ab_c.merge(&sb).unwrap();
        ab_c.merge(&sc).unwrap();
        let mut bc = sb.clone();
        bc.merge(&sc).unwrap();
        let mut a_bc = sa.clone();
        a_bc.merge(&bc).unwrap();
        let mut c_a_b = sc.clone();
        c_a_b.merge(&sa).unwrap();
        c_a_b.merge(&sb).unwrap();
        let union = sketch_of(p, &[a.clone(), b.clone(), c.clone()].concat());
        prop_assert_eq!(ab_c.to_bytes(), union.to_bytes());
        prop_assert_eq!(a_bc.to_bytes(), union.to_bytes());
        prop_assert_eq!(c_a_b.to_bytes(), union.to_bytes());
        prop_assert_eq!(&Quantiles::from_bytes(&union.to_bytes()).unwrap(), &union);
        if cap > 0 {
            prop_assert!(union.positive.len() <= cap as usize && union.negative.len() <= cap as usize);
            // The kept buckets are the union's highest, counts conserved.
            let uncapped = sketch_of(QuantileParams::for_accuracy(0.02, 0).unwrap(), &[a, b, c].concat());
            let kept = &uncapped.positive[uncapped.positive.len().saturating_sub(cap as usize)..];
            prop_assert_eq!(&union.positive[1.min(kept.len())..], &kept[1.min(kept.len())..]);
            prop_assert_eq!(union.count(), uncapped.count());
        }
    }

    #[test]
    fn any_bytes_decode_to_an_error_or_a_sketch_that_encodes_to_them(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        if let Ok(q) = Quantiles::from_bytes(&bytes) {
            prop_assert_eq!(q.to_bytes(), bytes);
        }
    }

    #[test]
    fn mutated_encodings_are_refused_or_canonical(vals in values(), at in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let mut bytes = sketch_of(params(0.01), &vals).to_bytes();
        let i = at.index(bytes.len());
        bytes[i] = byte;
        if let Ok(q) = Quantiles::from_bytes(&bytes) {
            prop_assert_eq!(q.to_bytes(), bytes);
        }
    }

    #[test]
    fn quantiles_are_within_accuracy_of_the_oracle(vals in prop::collection::vec(-1_000_000_000i64..1_000_000_000, 1..400)) {
        let p = params(0.01);
        let q = sketch_of(p, &vals);
        let mut sorted = vals.clone();
        sorted.sort_unstable();
        for (&qq, est) in QS.iter().zip(q.quantiles(&QS)) {
            let want = exact(&sorted, qq) as f64;
            prop_assert!((est.unwrap() - want).abs() <= p.accuracy() * want.abs() + 1e-9, "q {} {:?} vs {}", qq, est, want);
        }
    }
}
