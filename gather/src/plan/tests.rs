//! The planner's rollup choice, decompositions, retention and boxes.

use super::*;
use zigzag_model::Config;

const T: i64 = 1_763_719_200_000; // 2025-11-21T10:00:00Z
const H: i64 = 3_600_000;

fn req(from: i64, to: i64, step: Option<i64>, timeseries: bool) -> PlanRequest {
    PlanRequest {
        window: WindowSpec::Absolute { from: from.to_string(), to: to.to_string() },
        rollup: None,
        step,
        timeseries,
        filters: FilterSet::default(),
        now: T,
        source: SourceRequest::default(),
        mixing: None,
        snap: None,
        filling: Default::default(),
    }
}

#[test]
fn rollup_choice() {
    let km = KeyModel::new(&Config::default()).unwrap();
    let day = T - 10 * H;
    let p = plan_source(&km, req(day, day + 48 * H, None, false)).unwrap();
    assert_eq!(p.single_rollup().unwrap(), Rollup::Day);
    assert_eq!((p.reads[0].boxes.len(), p.queries()), (1, 16), "one month bin x 16 prefixes");
    let p = plan_source(&km, req(day, day + 48 * H, None, true)).unwrap();
    assert_eq!((p.step, p.single_rollup().unwrap()), (Some(H), Rollup::Hour), "48 h: hourly points, not 2880 minutes");
    let p = plan_source(&km, req(T, T + 2 * H, None, true)).unwrap();
    assert_eq!((p.step, p.single_rollup().unwrap()), (Some(60_000), Rollup::Minute));
    let p = plan_source(&km, req(T + 60_000, T + 5 * H + 60_000, Some(H), true)).unwrap();
    assert_eq!(p.single_rollup().unwrap(), Rollup::Minute, "unaligned to hours: minutes");
    assert_eq!(p.reads[0].boxes.len(), 1);
    let p = plan_source(&km, req(day - H, day + H, None, false)).unwrap();
    assert_eq!((p.single_rollup().unwrap(), p.reads[0].boxes.len()), (Rollup::Hour, 1));
    let mut r = req(day - H, day + H, None, false);
    r.rollup = Some(Rollup::Minute);
    let p = plan_source(&km, r).unwrap();
    assert_eq!(
        (p.single_rollup().unwrap(), p.reads[0].boxes.len(), p.queries()),
        (Rollup::Minute, 2, 32),
        "two day bins"
    );
    assert_eq!(p.reads[0].queries[16].pk, "000#minute#2025-11-21");
}

/// Minutes kept 1 day, then a version lengthening it to 7 days with its
/// cut a day ago: the minutes of buckets before the cut carry the 1-day
/// expiry and are refused past it (read from hours instead), as if the
/// version had not come; from the cut on, the 7 days hold.
#[test]
fn a_lengthened_retention_does_not_read_minutes_written_under_the_shorter_one_past_it() {
    let before = Config::from_toml("[retention]\nminute = \"1d\"\n").unwrap();
    let after = Config::from_toml("[retention]\nminute = \"7d\"\n").unwrap();
    let km = KeyModel::new(&after).unwrap();
    let cut = T - 24 * H;
    let lengthened = |r: &mut PlanRequest| r.filling.kept_before(cut, before.retention.clone(), 2);
    // Two days ago, 5-minute steps: under 7 days the minutes would be read;
    // written under 1 day, they may be gone: refused, naming why.
    let mut r = req(T - 48 * H, T - 46 * H, Some(300_000), true);
    assert_eq!(plan_source(&km, r.clone()).unwrap().single_rollup().unwrap(), Rollup::Minute, "7 days alone");
    lengthened(&mut r);
    let e = plan_source(&km, r).unwrap_err().to_string();
    assert!(e.contains("minute items are kept 1d") && e.contains("layout version 2"), "{e}");
    // Hourly, the same window reads hours.
    let mut r = req(T - 48 * H, T - 46 * H, Some(H), true);
    lengthened(&mut r);
    assert_eq!(plan_source(&km, r).unwrap().single_rollup().unwrap(), Rollup::Hour);
    // From the cut on, minutes as ever.
    let mut r = req(cut + H, cut + 2 * H, Some(60_000), true);
    lengthened(&mut r);
    assert_eq!(plan_source(&km, r).unwrap().single_rollup().unwrap(), Rollup::Minute);
}

#[test]
fn a_window_past_a_rollups_retention_is_read_from_a_coarser_one_or_refused() {
    let config = Config::from_toml("[retention]\nminute = \"1d\"\nhour = \"7d\"\n").unwrap();
    let km = KeyModel::new(&config).unwrap();
    let day = T - 10 * H; // midnight
                          // Two days ago at a 5-minute step: minutes are gone, hours cannot
                          // give 5 minutes: refused, naming the retention.
    let e = plan_source(&km, req(day - 48 * H, day - 46 * H, Some(300_000), true)).unwrap_err().to_string();
    assert!(e.contains("from items still kept") && e.contains("minute items are kept 1d"), "{e}");
    // The same window hourly: the hours are still kept.
    let p = plan_source(&km, req(day - 48 * H, day - 46 * H, Some(H), true)).unwrap();
    assert_eq!(p.single_rollup().unwrap(), Rollup::Hour);
    // Forced onto the expired rollup: refused with the way out.
    let mut r = req(day - 48 * H, day - 46 * H, None, false);
    r.rollup = Some(Rollup::Minute);
    let e = plan_source(&km, r).unwrap_err().to_string();
    assert!(e.contains("--rollup minute") && e.contains("use a coarser rollup"), "{e}");
    // Ten days ago: hours are gone too; whole days are kept forever.
    let p = plan_source(&km, req(day - 240 * H, day - 216 * H, None, false)).unwrap();
    assert_eq!(p.single_rollup().unwrap(), Rollup::Day);
    let e = plan_source(&km, req(day - 240 * H, day - 239 * H, None, false)).unwrap_err().to_string();
    assert!(e.contains("hour items are kept 7d"), "an hour ten days ago: {e}");
    // This morning's minutes are read as ever.
    let p = plan_source(&km, req(T - 2 * H, T - H, Some(60_000), true)).unwrap();
    assert_eq!(p.single_rollup().unwrap(), Rollup::Minute);
}

#[test]
fn a_mixed_window_reads_days_hours_and_minutes_and_no_coarse_bucket_across_a_cut() {
    let km = KeyModel::new(&Config::default()).unwrap();
    let day = T - 10 * H; // 2025-11-21T00:00Z
    let m = 60_000;
    let (from, to) = (day - 2 * 24 * H - 3 * H - 5 * m, day + 5 * H + 7 * m);
    let mut r = req(from, to, None, false);
    r.mixing = Some(Mixing::default());
    let spans = |p: &Plan| p.reads.iter().map(|r| (r.rollup, r.window.start, r.window.end)).collect::<Vec<_>>();
    let p = plan_source(&km, r.clone()).unwrap();
    assert_eq!(
        spans(&p),
        vec![
            (Rollup::Minute, from, day - 2 * 24 * H - 3 * H),
            (Rollup::Hour, day - 2 * 24 * H - 3 * H, day - 2 * 24 * H),
            (Rollup::Day, day - 2 * 24 * H, day),
            (Rollup::Hour, day, day + 5 * H),
            (Rollup::Minute, day + 5 * H, to),
        ]
    );
    assert_eq!(p.rollups(), "day+hour+minute");
    // A cut inside the second day and one inside an hour: the buckets
    // around them are read finer, the rest as before.
    let cuts = vec![day - 24 * H + 90 * m, day + 2 * H + 30 * m];
    r.mixing = Some(Mixing { cuts: cuts.clone(), ..Mixing::default() });
    let p = plan_source(&km, r).unwrap();
    for read in &p.reads {
        for c in &cuts {
            let unit = read.rollup.unit_ms();
            let mut b = read.window.start;
            while b < read.window.end {
                assert!(!(b < *c && *c < b + unit), "{:?} bucket at {b} straddles the cut {c}", read.rollup);
                b += unit;
            }
        }
    }
    assert_eq!(spans(&p)[2], (Rollup::Day, day - 2 * 24 * H, day - 24 * H), "one day, then the cut day's hours");
    assert_eq!(p.reads.iter().map(|r| r.window.len_ms()).sum::<i64>(), to - from, "the whole window, once");
}

#[test]
fn a_box_spans_every_dimension_but_time_unless_a_filter_narrows_it() {
    let config = Config::default();
    let km = KeyModel::new(&config).unwrap();
    let day = T - 10 * H;
    let p = plan_source(&km, req(day, day + 24 * H, None, false)).unwrap();
    assert_eq!(p.reads[0].spans_all_but_time, vec![true], "no filter: only time narrows the box");
    assert_eq!(p.reads[0].box_share, vec![None], "no statistics yet");
    let mut r = req(day, day + 24 * H, None, false);
    r.filters = FilterSet::parse(&["country = DE"], &config).unwrap();
    let p = plan_source(&km, r).unwrap();
    assert_eq!(p.reads[0].spans_all_but_time, vec![false], "a country narrows it");
}

#[test]
fn errors() {
    let km = KeyModel::new(&Config::default()).unwrap();
    let mut r = req(T, T + H, None, false);
    r.rollup = Some(Rollup::Day);
    let e = plan_source(&km, r).unwrap_err().to_string();
    assert!(e.contains("--rollup day cannot answer"), "{e}");
    let mut r = req(T, T + H, Some(60_000), true);
    r.rollup = Some(Rollup::Hour);
    assert!(plan_source(&km, r).unwrap_err().to_string().contains("cannot give a step of 1m"));
    let e = plan_source(&km, req(T, T + H, Some(90_000), true)).unwrap_err().to_string();
    assert!(e.contains("--step \"90s\"") && e.contains("multiple of 1m"), "{e}");
    let c = Config::from_toml("rollups = [\"hour\"]").unwrap();
    let km = KeyModel::new(&c).unwrap();
    let mut r = req(T, T + H, None, false);
    r.rollup = Some(Rollup::Minute);
    assert!(plan_source(&km, r).unwrap_err().to_string().contains("not configured (configured: hour)"));
}
