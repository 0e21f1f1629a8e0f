//! Z-order algorithms against brute force over every key of small layouts.
//!
//! For a random layout (2 to 5 dimensions, unequal widths, up to 12 bits in
//! all) and a random box, the oracle deinterleaves all 2^bits addresses once,
//! marks the ones inside the box, and derives the expected answer of every
//! question for every probe. Wider layouts (past 64 and 128 bits) are checked
//! by properties that do not need enumeration.

use proptest::prelude::*;
use std::sync::Arc;
use zigzag_core::zorder::{decompose, span_end_within_garbage, Layout, ZAddress, ZBox};

/// Widths of 2..=5 dimensions, 1..=5 bits each, at most 12 bits in total.
fn small_widths() -> impl Strategy<Value = Vec<u32>> {
    prop::collection::vec(1u32..=5, 2..=5).prop_filter("total <= 12", |w| w.iter().sum::<u32>() <= 12)
}

fn box_in(widths: Vec<u32>) -> impl Strategy<Value = (Vec<u32>, Vec<u128>, Vec<u128>)> {
    let per_dim: Vec<_> =
        widths.iter().map(|&w| (0u128..(1 << w), 0u128..(1 << w)).prop_map(|(a, b)| (a.min(b), a.max(b)))).collect();
    (Just(widths), per_dim).prop_map(|(w, bounds)| {
        let (lo, hi) = bounds.into_iter().unzip();
        (w, lo, hi)
    })
}

struct Oracle {
    bits: u32,
    inside: Vec<bool>,
}

impl Oracle {
    fn new(zb: &ZBox) -> Self {
        let layout = zb.layout();
        let bits = layout.total_bits();
        let inside = (0..1u128 << bits)
            .map(|z| {
                let vals = layout.deinterleave(&ZAddress::from_u128(z, bits));
                vals.iter().enumerate().all(|(d, &v)| zb.lo()[d] <= v && v <= zb.hi()[d])
            })
            .collect();
        Oracle { bits, inside }
    }
    fn next_in(&self, p: usize) -> Option<u128> {
        (p..self.inside.len()).find(|&z| self.inside[z]).map(|z| z as u128)
    }
    fn prev_in(&self, p: usize) -> Option<u128> {
        (0..=p).rev().find(|&z| self.inside[z]).map(|z| z as u128)
    }
    fn runs(&self) -> Vec<(u128, u128)> {
        let mut out: Vec<(u128, u128)> = Vec::new();
        for (z, &inside) in self.inside.iter().enumerate() {
            if !inside {
                continue;
            }
            match out.last_mut() {
                Some(last) if last.1 + 1 == z as u128 => last.1 = z as u128,
                _ => out.push((z as u128, z as u128)),
            }
        }
        out
    }
}

fn make_box(widths: &[u32], lo: Vec<u128>, hi: Vec<u128>) -> ZBox {
    ZBox::new(Arc::new(Layout::new(widths).unwrap()), lo, hi).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn relevance_bigmin_litmax_match_brute_force((widths, lo, hi) in small_widths().prop_flat_map(box_in)) {
        let zb = make_box(&widths, lo, hi);
        let oracle = Oracle::new(&zb);
        let bits = oracle.bits;
        // Box corners are the extreme inside addresses.
        prop_assert_eq!(zb.min().to_u128(), oracle.next_in(0));
        prop_assert_eq!(zb.max().to_u128(), oracle.prev_in(oracle.inside.len() - 1));
        for p in 0..oracle.inside.len() {
            let probe = ZAddress::from_u128(p as u128, bits);
            prop_assert_eq!(zb.is_relevant(&probe), oracle.inside[p], "is_relevant({})", p);
            let got = zb.next_jump_in(&probe).map(|z| z.to_u128().unwrap());
            prop_assert_eq!(got, oracle.next_in(p), "next_jump_in({}) widths {:?}", p, widths);
            let got = zb.litmax(&probe).map(|z| z.to_u128().unwrap());
            prop_assert_eq!(got, oracle.prev_in(p), "litmax({}) widths {:?}", p, widths);
        }
    }

    #[test]
    fn decomposition_matches_brute_force(
        (widths, lo, hi) in small_widths().prop_flat_map(box_in),
        budget in 1usize..40,
    ) {
        let zb = make_box(&widths, lo, hi);
        let oracle = Oracle::new(&zb);
        let runs = oracle.runs();

        let exact = decompose(&zb, usize::MAX);
        prop_assert!(exact.exact);
        let got: Vec<_> = exact.ranges.iter().map(|r| (r.lo.to_u128().unwrap(), r.hi.to_u128().unwrap())).collect();
        prop_assert_eq!(&got, &runs);

        let d = decompose(&zb, budget);
        let got: Vec<_> = d.ranges.iter().map(|r| (r.lo.to_u128().unwrap(), r.hi.to_u128().unwrap())).collect();
        prop_assert!(got.len() <= budget);
        prop_assert_eq!(d.exact, runs.len() <= budget);
        if d.exact {
            prop_assert_eq!(&got, &runs);
        }
        // Sorted, disjoint, non-adjacent, and a superset whose ends are inside.
        for w in got.windows(2) {
            prop_assert!(w[0].1 + 1 < w[1].0);
        }
        for &(a, b) in &got {
            prop_assert!(oracle.inside[a as usize] && oracle.inside[b as usize]);
        }
        for (z, &inside) in oracle.inside.iter().enumerate() {
            if inside {
                let z = z as u128;
                prop_assert!(got.iter().any(|&(a, b)| a <= z && z <= b), "{} not covered", z);
            }
        }
        // Closing the smallest gaps: every kept gap is at least as large as
        // every closed one.
        if !d.exact && runs.len() > budget {
            let kept: Vec<u128> = got.windows(2).map(|w| w[1].0 - w[0].1 - 1).collect();
            let closed: Vec<u128> = runs.windows(2)
                .filter(|w| got.iter().any(|&(a, b)| a <= w[0].1 && w[1].0 <= b))
                .map(|w| w[1].0 - w[0].1 - 1)
                .collect();
            if let (Some(&kmin), Some(&cmax)) = (kept.iter().min(), closed.iter().max()) {
                prop_assert!(kmin >= cmax, "kept gap {} < closed gap {}", kmin, cmax);
            }
        }
    }

    #[test]
    fn volume_in_range_counts_the_inside_addresses_of_the_range(
        (widths, lo, hi) in small_widths().prop_flat_map(box_in),
        a in any::<u16>(),
        b in any::<u16>(),
    ) {
        let zb = make_box(&widths, lo, hi);
        let oracle = Oracle::new(&zb);
        let n = oracle.inside.len();
        let (a, b) = (usize::from(a) % n, usize::from(b) % n);
        let want = if a <= b { oracle.inside[a..=b].iter().filter(|&&i| i).count() } else { 0 };
        let got = zb.volume_in_range(&ZAddress::from_u128(a as u128, oracle.bits), &ZAddress::from_u128(b as u128, oracle.bits));
        prop_assert_eq!(got, want as f64, "volume_in_range({}, {}) widths {:?}", a, b, widths);
    }

    #[test]
    fn garbage_span_is_the_longest_within_budget(
        (widths, lo, hi) in small_widths().prop_flat_map(box_in),
        garbage in 0u32..64,
        start_pick in any::<prop::sample::Index>(),
    ) {
        let zb = make_box(&widths, lo, hi);
        let oracle = Oracle::new(&zb);
        let inside: Vec<u128> = (0..oracle.inside.len()).filter(|&z| oracle.inside[z]).map(|z| z as u128).collect();
        let start = inside[start_pick.index(inside.len())];
        let limit = zb.max().to_u128().unwrap();
        // Brute force: extend while the outside count stays within budget.
        let mut outside = 0;
        let mut end = start;
        for z in start..=limit {
            if !oracle.inside[z as usize] {
                outside += 1;
            }
            if outside > garbage {
                break;
            }
            end = z;
        }
        let bits = oracle.bits;
        let got = span_end_within_garbage(&zb, &ZAddress::from_u128(start, bits), zb.max(), garbage as f64);
        prop_assert_eq!(got.to_u128(), Some(end));
    }

    #[test]
    fn interleave_round_trips_and_orders_bytes(
        widths in prop::collection::vec(1u32..=128, 1..=6),
        seed_a in any::<[u128; 6]>(),
        seed_b in any::<[u128; 6]>(),
    ) {
        let layout = Layout::new(&widths).unwrap();
        let mask = |w: u32| if w == 128 { u128::MAX } else { (1u128 << w) - 1 };
        let a: Vec<u128> = widths.iter().zip(seed_a).map(|(&w, v)| v & mask(w)).collect();
        let b: Vec<u128> = widths.iter().zip(seed_b).map(|(&w, v)| v & mask(w)).collect();
        let (za, zb) = (layout.interleave(&a), layout.interleave(&b));
        prop_assert_eq!(layout.deinterleave(&za), a.clone());
        let bits = layout.total_bits();
        prop_assert_eq!(za.cmp(&zb), za.to_bytes(bits).cmp(&zb.to_bytes(bits)));
        prop_assert_eq!(ZAddress::from_bytes(&za.to_bytes(bits), bits).unwrap(), za.clone());
        // Reference interleave, one bit at a time from the top, round-robin.
        let mut reference = Vec::new();
        for r in 0..*widths.iter().max().unwrap() {
            for (d, &w) in widths.iter().enumerate() {
                if r < w {
                    reference.push(a[d] >> (w - 1 - r) & 1 == 1);
                }
            }
        }
        let got: Vec<bool> = (0..bits).rev().map(|p| za.bit(p)).collect();
        prop_assert_eq!(got, reference);
    }

    /// Wide layouts (past 64 and 128 bits): BIGMIN's answer is inside, not
    /// below the probe, and no sampled inside point lies between them;
    /// LITMAX likewise from above.
    #[test]
    fn wide_bigmin_litmax_properties(
        widths in prop::collection::vec(20u32..=70, 2..=5),
        corners in prop::collection::vec((any::<u128>(), any::<u128>()), 5),
        probe_vals in prop::collection::vec(any::<u128>(), 5),
        samples in prop::collection::vec(prop::collection::vec(any::<u128>(), 5), 64),
    ) {
        let layout = Arc::new(Layout::new(&widths).unwrap());
        let n = widths.len();
        let mask = |w: u32| (1u128 << w) - 1;
        let (mut lo, mut hi) = (Vec::new(), Vec::new());
        for d in 0..n {
            let (a, b) = (corners[d].0 & mask(widths[d]), corners[d].1 & mask(widths[d]));
            lo.push(a.min(b));
            hi.push(a.max(b));
        }
        let zb = ZBox::new(layout.clone(), lo.clone(), hi.clone()).unwrap();
        let pv: Vec<u128> = (0..n).map(|d| probe_vals[d] & mask(widths[d])).collect();
        let probe = layout.interleave(&pv);
        let inside_points: Vec<ZAddress> = samples.iter().map(|s| {
            let v: Vec<u128> = (0..n).map(|d| lo[d] + s[d] % (hi[d] - lo[d] + 1)).collect();
            layout.interleave(&v)
        }).collect();
        match zb.next_jump_in(&probe) {
            Some(r) => {
                prop_assert!(zb.is_relevant(&r));
                prop_assert!(r >= probe);
                for q in &inside_points {
                    prop_assert!(!(q >= &probe && q < &r), "inside point between probe and BIGMIN");
                }
            }
            None => prop_assert!(zb.max() < &probe),
        }
        match zb.litmax(&probe) {
            Some(r) => {
                prop_assert!(zb.is_relevant(&r));
                prop_assert!(r <= probe);
                for q in &inside_points {
                    prop_assert!(!(q <= &probe && q > &r), "inside point between LITMAX and probe");
                }
            }
            None => prop_assert!(zb.min() > &probe),
        }
    }
}

#[test]
fn single_point_box_and_probes_outside() {
    let layout = Arc::new(Layout::new(&[5, 2, 3]).unwrap());
    let zb = ZBox::new(layout.clone(), vec![17, 2, 5], vec![17, 2, 5]).unwrap();
    let point = layout.interleave(&[17, 2, 5]);
    assert_eq!(zb.min(), &point);
    assert_eq!(zb.max(), &point);
    let below = layout.zero();
    let above = layout.max_address();
    assert_eq!(zb.next_jump_in(&below), Some(point.clone()));
    assert_eq!(zb.next_jump_in(&above), None);
    assert_eq!(zb.litmax(&above), Some(point.clone()));
    assert_eq!(zb.litmax(&below), None);
    let d = decompose(&zb, 10);
    assert!(d.exact);
    assert_eq!(d.ranges.len(), 1);
    assert_eq!(d.ranges[0].lo, point);
    assert_eq!(d.ranges[0].hi, point);
}
