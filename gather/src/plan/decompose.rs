//! A window as spans of rollups: the whole buckets of the coarsest rollup
//! that may stand for them, the rest from the next finer one, down to the
//! finest ("Last 7 days" at 20:59: whole days from day items, the whole
//! hours at its edges from hour items, the minutes left over from minute
//! items). What "may stand for them" means is the caller's: a bucket whose
//! items are complete ([`crate::complete`]) and still kept (retention).

use zigzag_model::Rollup;

/// `[start, end)` read from one rollup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub rollup: Rollup,
    pub start: i64,
    pub end: i64,
}

fn ceil(r: Rollup, t: i64) -> i64 {
    let f = r.floor(t);
    if f == t {
        t
    } else {
        f + r.unit_ms()
    }
}

/// Decomposes `[start, end)` (on the edges of `rollups[0]`) over
/// `rollups`, in ascending units each dividing the next: a bucket of a
/// coarser rollup lying whole in the window is read from it when
/// `usable(rollup, bucket_start, bucket_end)`, everything else from the
/// finer ones; `rollups[0]` reads what is left. Spans in time order, those
/// of one rollup that touch joined.
pub fn decompose(
    start: i64,
    end: i64,
    rollups: &[Rollup],
    usable: &mut dyn FnMut(Rollup, i64, i64) -> bool,
) -> Vec<Span> {
    let mut out = Vec::new();
    if !rollups.is_empty() {
        cover(start, end, rollups.len() - 1, rollups, usable, &mut out);
    }
    let mut joined: Vec<Span> = Vec::with_capacity(out.len());
    for s in out {
        match joined.last_mut() {
            Some(last) if last.rollup == s.rollup && last.end == s.start => last.end = s.end,
            _ => joined.push(s),
        }
    }
    joined
}

fn cover(
    lo: i64,
    hi: i64,
    level: usize,
    rollups: &[Rollup],
    usable: &mut dyn FnMut(Rollup, i64, i64) -> bool,
    out: &mut Vec<Span>,
) {
    if lo >= hi {
        return;
    }
    let r = rollups[level];
    if level == 0 {
        out.push(Span { rollup: r, start: lo, end: hi });
        return;
    }
    let (first, last) = (ceil(r, lo), r.floor(hi));
    if first >= last {
        return cover(lo, hi, level - 1, rollups, usable, out);
    }
    cover(lo, first, level - 1, rollups, usable, out);
    let unit = r.unit_ms();
    let mut run: Option<i64> = None;
    let mut b = first;
    while b < last {
        if usable(r, b, b + unit) {
            run.get_or_insert(b);
        } else {
            if let Some(s) = run.take() {
                out.push(Span { rollup: r, start: s, end: b });
            }
            cover(b, b + unit, level - 1, rollups, usable, out);
        }
        b += unit;
    }
    if let Some(s) = run {
        out.push(Span { rollup: r, start: s, end: last });
    }
    cover(last, hi, level - 1, rollups, usable, out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const M: i64 = 60_000;
    const H: i64 = 60 * M;
    const D: i64 = 24 * H;
    const ALL: [Rollup; 3] = [Rollup::Minute, Rollup::Hour, Rollup::Day];

    #[test]
    fn the_last_seven_days_at_20_59_are_days_hours_and_minutes() {
        let day = 20_000 * D;
        let end = day + 20 * H + 59 * M;
        let spans = decompose(end - 7 * D, end, &ALL, &mut |_, _, _| true);
        let shape: Vec<(Rollup, i64, i64)> = spans.iter().map(|s| (s.rollup, s.start - day, s.end - day)).collect();
        assert_eq!(
            shape,
            vec![
                (Rollup::Minute, -7 * D + 20 * H + 59 * M, -7 * D + 21 * H),
                (Rollup::Hour, -7 * D + 21 * H, -6 * D),
                (Rollup::Day, -6 * D, 0),
                (Rollup::Hour, 0, 20 * H),
                (Rollup::Minute, 20 * H, 20 * H + 59 * M),
            ]
        );
    }

    #[test]
    fn a_bucket_that_may_not_stand_for_itself_is_read_finer() {
        let day = 20_000 * D;
        // The last hour of the day is owed a record: its hour and its day are read finer.
        let owed = day + 23 * H;
        let spans = decompose(day, day + D, &ALL, &mut |r, lo, hi| !(lo <= owed && owed < hi && r != Rollup::Minute));
        let shape: Vec<(Rollup, i64, i64)> = spans.iter().map(|s| (s.rollup, s.start - day, s.end - day)).collect();
        assert_eq!(shape, vec![(Rollup::Hour, 0, 23 * H), (Rollup::Minute, 23 * H, D)]);
    }

    /// Which rollup reads a finest bucket, by brute force: the coarsest
    /// whose bucket around it lies whole in the window and is usable.
    fn oracle(m: i64, start: i64, end: i64, rollups: &[Rollup], usable: &dyn Fn(Rollup, i64, i64) -> bool) -> Rollup {
        for &r in rollups.iter().rev() {
            let b = r.floor(m);
            let whole = b >= start && b + r.unit_ms() <= end;
            if r == rollups[0] || (whole && usable(r, b, b + r.unit_ms())) {
                return r;
            }
        }
        rollups[0]
    }

    proptest! {
        /// Every finest bucket of the window is read once, from the rollup
        /// the brute force names, by spans on that rollup's edges in time
        /// order.
        #[test]
        fn spans_cover_the_window_once_from_the_coarsest_usable_rollup(
            start_m in 0i64..(3 * 24 * 60),
            len_m in 1i64..(4 * 24 * 60),
            unusable in proptest::collection::vec(0i64..(8 * 24 * 60), 0..6),
            skip_hour in any::<bool>(),
        ) {
            let rollups: Vec<Rollup> = if skip_hour { vec![Rollup::Minute, Rollup::Day] } else { ALL.to_vec() };
            let (start, end) = (1_000 * D + start_m * M, 1_000 * D + (start_m + len_m) * M);
            let bad: Vec<i64> = unusable.iter().map(|m| 1_000 * D + m * M).collect();
            let usable = |_: Rollup, lo: i64, hi: i64| !bad.iter().any(|&t| lo <= t && t < hi);
            let spans = decompose(start, end, &rollups, &mut |r, lo, hi| usable(r, lo, hi));
            let mut at = start;
            for s in &spans {
                prop_assert_eq!(s.start, at, "in order, no gap, no overlap");
                prop_assert!(s.end > s.start);
                prop_assert_eq!(s.rollup.floor(s.start), s.start);
                prop_assert_eq!(s.rollup.floor(s.end), s.end);
                let mut m = s.start;
                while m < s.end {
                    prop_assert_eq!(s.rollup, oracle(m, start, end, &rollups, &usable), "minute {}", m);
                    m += M;
                }
                at = s.end;
            }
            prop_assert_eq!(at, end);
            prop_assert!(spans.windows(2).all(|w| w[0].rollup != w[1].rollup || w[0].end != w[1].start), "joined");
        }
    }
}
