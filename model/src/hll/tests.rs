use super::*;
use proptest::prelude::*;
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// The hash of the `i`-th distinct value of a data set.
fn value(seed: u64, i: u64) -> u64 {
    xxh3_64_with_seed(&i.to_le_bytes(), seed)
}

fn sketch(p: u8, hashes: impl IntoIterator<Item = u64>) -> Hll {
    let mut h = Hll::new(p).unwrap();
    hashes.into_iter().for_each(|x| h.add_hash(x));
    h
}

fn distinct(p: u8, seed: u64, n: u64) -> Hll {
    sketch(p, (0..n).map(|i| value(seed, i)))
}

fn rel_error(h: &Hll, n: u64) -> f64 {
    (h.estimate() as f64 - n as f64) / n as f64
}

#[test]
fn precision_is_checked() {
    assert_eq!(Hll::new(3), Err(HllError::Precision(3)));
    assert_eq!(Hll::new(19), Err(HllError::Precision(19)));
    for p in MIN_PRECISION..=MAX_PRECISION {
        assert_eq!(Hll::new(p).unwrap().precision(), p);
    }
    assert_eq!(Hll::default(), Hll::new(DEFAULT_PRECISION).unwrap());
    assert!((relative_error_bound(14) - 0.008125).abs() < 1e-12);
}

#[test]
fn empty_sketch() {
    let h = Hll::default();
    assert!(h.is_empty());
    assert_eq!(h.estimate(), 0);
    assert_eq!(h.to_bytes(), [VERSION, 14, TAG_SPARSE, 0]);
    assert_eq!(Hll::from_bytes(&h.to_bytes()).unwrap(), h);
}

#[test]
fn small_counts_are_exact_or_nearly() {
    for n in [1u64, 10, 100, 1000] {
        let mut h = Hll::default();
        for round in 0..3 {
            (0..n).for_each(|i| h.add_bytes(format!("user-{i}").as_bytes()));
            assert!(!h.is_empty(), "round {round}");
        }
        let tolerance = (n as f64 * 0.02).max(1.0);
        assert!((h.estimate() as f64 - n as f64).abs() <= tolerance, "{n} distinct: estimate {}", h.estimate());
    }
}

#[test]
fn add_bytes_is_add_hash_of_xxh3() {
    let (mut a, mut b) = (Hll::default(), Hll::default());
    a.add_bytes(b"campaign-7");
    b.add_hash(xxh3_64(b"campaign-7"));
    assert_eq!(a, b);
}

#[test]
fn rho_uses_the_remaining_bits_and_is_capped() {
    // Index 0, all remaining bits zero: rho = 64 - p + 1; the top remaining bit set: rho = 1.
    let h = sketch(4, [0u64, 1 << 59 | 1 << 63]);
    assert_eq!(h.canonical().repr.entries(), [61, 8 << 6 | 1]);
}

/// The product's claim. 2 % is about 2.5 standard errors at p = 14, so it
/// holds for about 99 % of data sets, not all: these three pass (measured
/// +1.544 %, -0.931 %, +0.020 %).
#[test]
fn a_million_distinct_within_two_percent() {
    for seed in [1, 2, 3] {
        let h = distinct(DEFAULT_PRECISION, seed, 1_000_000);
        let e = rel_error(&h, 1_000_000);
        eprintln!("10^6 distinct, seed {seed}: estimate {} error {:+.3} %", h.estimate(), e * 100.0);
        assert!(e.abs() <= 0.02, "seed {seed}: error {e}");
    }
}

#[test]
fn intermediate_sizes_within_three_standard_errors() {
    let bound = 3.0 * relative_error_bound(DEFAULT_PRECISION);
    for n in [1_000u64, 3_000, 5_000, 20_000, 50_000, 100_000] {
        for seed in [11, 12, 13] {
            let h = distinct(DEFAULT_PRECISION, seed, n);
            let e = rel_error(&h, n);
            eprintln!("{n} distinct, seed {seed}: error {:+.3} % sparse {}", e * 100.0, h.is_sparse());
            assert!(e.abs() <= bound, "{n} distinct, seed {seed}: error {e}");
        }
    }
    assert!(distinct(DEFAULT_PRECISION, 1, 1_000).is_sparse());
    assert!(!distinct(DEFAULT_PRECISION, 1, 5_000).is_sparse());
}

#[test]
fn sparse_and_dense_give_identical_estimates() {
    for p in [4, 10, 14] {
        let mut h = Hll::new(p).unwrap();
        for i in 0..6_000 {
            h.add_hash(value(5, i));
            if i % 97 == 0 {
                let d = h.densified();
                assert_eq!(h.estimate(), d.estimate(), "p {p}, {i} values");
                assert_eq!(h, d);
            }
        }
    }
}

#[test]
fn merging_halves_gives_the_union_bytes() {
    for n in [100u64, 2_000, 3_500, 100_000] {
        let whole = distinct(DEFAULT_PRECISION, 9, n);
        let mut a = sketch(DEFAULT_PRECISION, (0..n / 2).map(|i| value(9, i)));
        let b = sketch(DEFAULT_PRECISION, (n / 2..n).map(|i| value(9, i)));
        a.merge(&b).unwrap();
        assert_eq!(a, whole);
        assert_eq!(a.to_bytes(), whole.to_bytes(), "{n}");
    }
}

#[test]
fn merge_refuses_another_precision() {
    let mut a = Hll::new(12).unwrap();
    assert_eq!(a.merge(&Hll::new(13).unwrap()), Err(HllError::PrecisionMismatch { ours: 12, theirs: 13 }));
}

#[test]
fn round_trips_through_bytes() {
    for n in [0u64, 1, 10, 1_000, 3_000, 3_500, 100_000] {
        let h = distinct(DEFAULT_PRECISION, 4, n);
        let bytes = h.to_bytes();
        assert_eq!(bytes.len(), h.serialized_len());
        let back = Hll::from_bytes(&bytes).unwrap();
        assert_eq!(back, h, "{n}");
        assert_eq!(back.estimate(), h.estimate());
        assert_eq!(back.to_bytes(), bytes);
        assert_eq!(back.is_sparse(), h.is_sparse());
    }
}

#[test]
fn a_form_its_registers_do_not_call_for_is_converted_on_read() {
    let small = distinct(DEFAULT_PRECISION, 4, 50);
    // `to_bytes` keeps the form: only the insert buffer is merged.
    let dense_bytes = small.densified().to_bytes();
    assert_eq!(dense_bytes[2], TAG_DENSE);
    let back = Hll::from_bytes(&dense_bytes).unwrap();
    assert!(back.is_sparse());
    assert_eq!(back.to_bytes(), small.to_bytes());
}

#[test]
fn serialized_sizes() {
    let sizes: Vec<usize> = [0, 10, 1_000, 100_000].map(|n| distinct(DEFAULT_PRECISION, 1, n).to_bytes().len()).into();
    eprintln!("serialized sizes at p=14 for 0, 10, 1000, 100000 distinct: {sizes:?}");
    assert_eq!(sizes[0], 4);
    assert!(sizes[1] <= 40);
    assert!(sizes[2] <= 2_100);
    assert_eq!(sizes[3], 3 + (1 << 14) * 6 / 8);
    // The switch: where the sparse bytes reach half the dense ones.
    let (mut h, mut i, mut largest) = (Hll::default(), 0, 0);
    while h.is_sparse() {
        largest = largest.max(h.serialized_len());
        h.add_hash(value(1, i));
        i += 1;
    }
    eprintln!("largest sparse: {largest} bytes; dense from {i} distinct values on");
    assert!(largest <= 3 + (1 << 14) * 6 / 8 / 2 + 64);
}

#[test]
fn every_truncation_is_an_error() {
    for n in [10u64, 1_000, 100_000] {
        let bytes = distinct(DEFAULT_PRECISION, 2, n).to_bytes();
        for len in 0..bytes.len() {
            assert_eq!(Hll::from_bytes(&bytes[..len]), Err(HllError::Truncated), "{n} values, {len} bytes");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(Hll::from_bytes(&longer), Err(HllError::TrailingBytes(1)));
    }
}

#[test]
fn hostile_bytes_are_typed_errors() {
    use HllError::*;
    let cases: &[(&[u8], HllError)] = &[
        (&[2, 14, 0, 0], Version(2)),
        (&[1, 3, 0, 0], Precision(3)),
        (&[1, 19, 0, 0], Precision(19)),
        (&[1, 4, 7, 0], Tag(7)),
        (&[1, 4, 0, 17], TooManyEntries { count: 17, registers: 16 }),
        (&[1, 4, 0, 1, 0x81, 0x08], IndexOutOfRange { index: 16, registers: 16 }),
        (&[1, 4, 0, 1, 0x40], RhoOutOfRange { index: 1, rho: 0, max: 61 }),
        (&[1, 4, 0, 1, 62], RhoOutOfRange { index: 0, rho: 62, max: 61 }),
        (&[1, 4, 0, 2, 0x41, 1], Unsorted),
        (&[1, 4, 0, 2, 0x41, 0], Unsorted),
        (&[1, 4, 0, 1, 0x81, 0x00], Varint),
        (&[1, 4, 0, 0xff, 0xff, 0xff, 0xff, 0x7f], Varint),
        (&[1, 4, 0, 0xff, 0xff, 0xff, 0xff, 0x8f], Varint),
        (&[1, 4, 0, 0xff, 0xff, 0xff, 0xff, 0x0f], TooManyEntries { count: u32::MAX, registers: 16 }),
        (&[1, 4, 0, 2, 0x41], Truncated),
        (&[1, 4, 1, 62, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], RhoOutOfRange { index: 0, rho: 62, max: 61 }),
    ];
    for (bytes, err) in cases {
        assert_eq!(Hll::from_bytes(bytes).as_ref(), Err(err), "{bytes:?}");
    }
}

fn precision() -> impl Strategy<Value = u8> {
    prop_oneof![4u8..=12, Just(14)]
}

fn values() -> impl Strategy<Value = Vec<u64>> {
    prop::collection::vec(any::<u64>(), 0..1_500)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn merge_is_the_union_and_a_semilattice(p in precision(), x in values(), y in values(), z in values()) {
        let (a, b, c) = (sketch(p, x.clone()), sketch(p, y.clone()), sketch(p, z.clone()));
        let merged = |l: &Hll, r: &Hll| { let mut m = l.clone(); m.merge(r).unwrap(); m };
        let ab = merged(&a, &b);
        let union = sketch(p, x.iter().chain(&y).copied());
        prop_assert_eq!(&ab, &union);
        prop_assert_eq!(ab.to_bytes(), union.to_bytes());
        prop_assert_eq!(ab.serialized_len(), union.to_bytes().len());
        // Idempotent: merging the same sketch again, or itself, changes nothing.
        prop_assert_eq!(merged(&ab, &b).to_bytes(), ab.to_bytes());
        prop_assert_eq!(merged(&a, &a).to_bytes(), a.to_bytes());
        // Commutative and associative.
        prop_assert_eq!(merged(&b, &a).to_bytes(), ab.to_bytes());
        prop_assert_eq!(merged(&ab, &c).to_bytes(), merged(&a, &merged(&b, &c)).to_bytes());
        prop_assert_eq!(merged(&ab, &c).estimate(), merged(&a, &merged(&b, &c)).estimate());
    }

    #[test]
    fn round_trip_is_exact(p in precision(), x in values()) {
        let h = sketch(p, x);
        let back = Hll::from_bytes(&h.to_bytes()).unwrap();
        prop_assert_eq!(back.to_bytes(), h.to_bytes());
        prop_assert_eq!(back.estimate(), h.estimate());
        prop_assert_eq!(back.estimate(), h.densified().estimate());
        prop_assert_eq!(back, h);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = Hll::from_bytes(&bytes);
    }

    #[test]
    fn headed_garbage_never_panics(p in 0u8..24, tag in 0u8..3, tail in prop::collection::vec(any::<u8>(), 0..64)) {
        let mut bytes = vec![VERSION, p, tag];
        bytes.extend(tail);
        if let Ok(h) = Hll::from_bytes(&bytes) {
            prop_assert_eq!(Hll::from_bytes(&h.to_bytes()).unwrap(), h);
        }
    }

    #[test]
    fn corrupted_sketches_never_panic(p in precision(), x in values(), at in any::<prop::sample::Index>(), b in any::<u8>()) {
        let mut bytes = sketch(p, x).to_bytes();
        let i = at.index(bytes.len());
        bytes[i] = b;
        if let Ok(h) = Hll::from_bytes(&bytes) {
            let again = h.to_bytes();
            prop_assert_eq!(again.len(), h.serialized_len());
            prop_assert_eq!(Hll::from_bytes(&again).unwrap(), h);
        }
    }
}

impl Repr {
    fn entries(&self) -> &[u32] {
        match self {
            Repr::Sparse { entries, .. } => entries,
            Repr::Dense(_) => panic!("dense"),
        }
    }
}

/// Where the classic estimator switched to linear counting (2.5 m to 5 m)
/// it was biased upwards (+2.4 % mean error at 41 000 values, p = 14);
/// the estimator in use has no such bump: the mean over 16 data sets is
/// within 3 standard errors of that mean (0.61 %) at every size around it.
#[test]
fn no_bias_around_the_old_linear_counting_switch() {
    for n in [20_000u64, 41_000, 45_000, 60_000] {
        let errors: Vec<f64> = (0..16).map(|seed| rel_error(&distinct(14, 1_000 + seed, n), n)).collect();
        let mean = errors.iter().sum::<f64>() / errors.len() as f64;
        assert!(mean.abs() <= 3.0 * relative_error_bound(14) / 4.0, "{n} distinct: mean error {:+.3} %", mean * 100.0);
    }
}

#[test]
fn text_formats_carry_sketches_as_base64() {
    let h = distinct(10, 7, 500);
    let json = serde_json::to_string(&h).unwrap();
    assert!(json.starts_with('"') && json.len() < h.to_bytes().len() * 4 / 3 + 8, "{} bytes", json.len());
    assert_eq!(serde_json::from_str::<Hll>(&json).unwrap(), h);
    assert!(serde_json::from_str::<Hll>("\"not base64!\"").is_err());
    assert!(serde_json::from_str::<Hll>("\"AAAA\"").is_err(), "base64 of a bad sketch");
}

#[test]
fn split_estimates_each_group_as_a_sketch_of_its_own_values() {
    // 32 groups of 16 registers (p = 9): group g holds 40 * g values.
    let mut whole = Hll::new(9).unwrap();
    let mut own: Vec<Hll> = (0..32).map(|_| Hll::new(4).unwrap()).collect();
    for g in 0..32u32 {
        for i in 0..40 * u64::from(g) {
            let h = value(u64::from(g), i);
            whole.add_grouped(5, g, h);
            // What a p = 4 sketch of the group's values alone keeps: the
            // same register and rho, from the hash's top 59 bits.
            own[g as usize].add_hash(h >> 5 << 5);
        }
    }
    let parts = whole.split(5).unwrap();
    assert_eq!(parts.len(), 32);
    for (g, (part, own)) in parts.iter().zip(&own).enumerate() {
        assert_eq!(part, own, "group {g}: the registers of its own sketch");
        assert_eq!(part.estimate(), own.estimate());
        assert_eq!(part.to_bytes(), own.to_bytes(), "group {g}: canonical form");
    }
    assert_eq!(parts[0].estimate(), 0, "an empty group estimates nothing");
    // A sketch split in one group is itself.
    assert_eq!(whole.split(0).unwrap(), vec![whole.clone()]);
    assert_eq!(whole.split(6), Err(HllError::Precision(3)), "groups of fewer than 16 registers are refused");
}
