//! The mapping, to the bit: tables pinned to an independent computation,
//! the lookup equal to a binary search, every value in its bucket and
//! within the accuracy of its representative, edges on the upper side.

use super::*;

/// splitmix64: deterministic test data.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[test]
fn bins_per_octave_are_the_fewest_that_give_the_accuracy() {
    assert_eq!(bins_per_octave_for(0.01), 35);
    assert_eq!(bins_per_octave_for(0.02), 18);
    for a in [0.0001, 0.001, 0.005, 0.01, 0.02, 0.05, 0.1] {
        let m = bins_per_octave_for(a);
        let map = Mapping::new(m).unwrap();
        assert!(map.accuracy() <= a, "a={a} m={m} actual={}", map.accuracy());
        if m > 1 {
            assert!(Mapping::new(m - 1).unwrap().accuracy() > a, "{m} is the fewest for {a}");
        }
    }
    assert!(Mapping::new(0).is_none());
    assert!(Mapping::new(MAX_BINS_PER_OCTAVE + 1).is_none());
}

#[test]
fn tables_are_sane_for_every_m() {
    let mut r = Rng(7);
    // Every m up to 600 and the largest ones (a table per m costs m wide
    // multiplications: all 4,096 take seconds in a debug build).
    for m in (1..=600).chain([3466, MAX_BINS_PER_OCTAVE]) {
        let map = Mapping::new(m).unwrap();
        let t = &map.table;
        assert_eq!(t.boundaries[0], 0);
        assert!(t.boundaries.windows(2).all(|w| w[0] < w[1]), "m={m}");
        // Within one ulp of libm's powf (which need not round correctly).
        for k in 0..m {
            let p = 2f64.powf(f64::from(k) / f64::from(m)).to_bits() & MANTISSA_MASK;
            assert!(t.boundaries[k as usize].abs_diff(p) <= 1, "m={m} k={k}");
        }
        let gamma = 2f64.powf(1.0 / f64::from(m));
        assert!((map.accuracy() / ((gamma - 1.0) / (gamma + 1.0)) - 1.0).abs() < 1e-9);
        // The LUT fast path agrees with a binary search.
        for _ in 0..50 {
            let x = r.next() >> (r.next() % 64) as u32;
            assert_eq!(map.index(x), map.index_by_binary_search(x), "m={m} x={x}");
        }
    }
}

/// Pins the boundary tables to the correctly rounded `2^(k/m)`, as
/// computed independently with 60-digit decimal arithmetic (Python's
/// `decimal`: FNV-1a over the 64-bit little-endian mantissas, sentinel
/// included). Any change to the table computation that moves a boundary
/// fails here.
#[test]
fn boundary_tables_are_pinned() {
    let fingerprint = |m: u32| {
        let map = Mapping::new(m).unwrap();
        map.table.boundaries.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            b.to_le_bytes().iter().fold(h, |h, &x| (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3))
        })
    };
    let got: Vec<(u32, u64)> = [4, 18, 35, 347, 3466].iter().map(|&m| (m, fingerprint(m))).collect();
    let want = vec![
        (4, 0xd6be_5544_31d6_f4d8),
        (18, 0x2e2c_97a0_fcc4_f248),
        (35, 0x8d41_1436_c52a_c43f),
        (347, 0x0f76_557e_e9a3_9c8b),
        (3466, 0x9051_9463_7d15_8b42),
    ];
    assert_eq!(got, want, "{got:#x?}");
}

fn check_x(map: &Mapping, x: u64) {
    let i = map.index(x);
    assert_eq!(i, map.index_by_binary_search(x), "x={x}");
    let (lo, hi) = map.bin_bounds(i);
    let xf = x as f64;
    assert!(lo <= xf && xf < hi, "x={x} not in bin {i} [{lo}, {hi})");
    let rep = map.representative(i);
    assert!((xf - rep).abs() <= map.accuracy() * xf * (1.0 + 1e-9), "x={x} rep={rep}");
}

#[test]
fn mapping_exhaustive_up_to_200k() {
    for m in [4, 18, 35, 3466] {
        let map = Mapping::new(m).unwrap();
        let mut prev = 0;
        for x in 1..=200_000u64 {
            check_x(&map, x);
            let i = map.index(x);
            assert!(i >= prev, "index not monotone at {x}");
            prev = i;
        }
    }
}

#[test]
fn mapping_random_up_to_2_pow_62() {
    let mut r = Rng(1);
    for m in [18, 35] {
        let map = Mapping::new(m).unwrap();
        let mut xs: Vec<u64> = (0..200_000).map(|_| (r.next() >> (2 + r.next() % 62)).max(1)).collect();
        xs.sort_unstable();
        let mut prev = 0;
        for &x in &xs {
            check_x(&map, x);
            let i = map.index(x);
            assert!(i >= prev);
            prev = i;
        }
    }
}

#[test]
fn mapping_around_every_boundary() {
    for m in [4, 18, 35] {
        let map = Mapping::new(m).unwrap();
        for e in 0..=62u32 {
            for k in 0..m {
                let i = e * m + k;
                let (lo, _) = map.bin_bounds(i);
                let f = lo.floor() as u64;
                let mut prev = 0;
                for x in [f.saturating_sub(1), f, f + 1, f + 2] {
                    if x == 0 {
                        continue;
                    }
                    check_x(&map, x);
                    let got = map.index(x);
                    assert!(got >= prev);
                    prev = got;
                    // Boundary convention: on or above the edge -> bin i.
                    assert_eq!(got >= i, x as f64 >= lo, "m={m} e={e} k={k} x={x}");
                }
                if lo.fract() == 0.0 && lo < 2f64.powi(63) {
                    // An integer exactly on the boundary is in the upper bin.
                    assert_eq!(map.index(lo as u64), i);
                }
            }
        }
        // The largest magnitude, |i64::MIN| = 2^63, is the max index.
        assert_eq!(map.index(i64::MIN.unsigned_abs()), map.max_index());
        assert_eq!(map.index(i64::MAX as u64), map.max_index());
    }
}
