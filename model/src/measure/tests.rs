use super::update::{extremes_of, plan_update, remembered_extremes, ItemWrite};
use super::*;
use crate::schema::FieldValue;
use crate::truth::event_values;
use crate::Config;
use proptest::prelude::*;
use std::borrow::Cow;
use zigzag_core::table::{apply_update, AttrValue, Item, UpdateOutcome};

fn shipped() -> (MeasureSet, Vec<TypedField>) {
    let c = Config::default();
    (c.measure_set().unwrap(), c.typed_fields().unwrap())
}

/// A shipped-schema event: kind, cost in micro-units.
fn event(click: bool, cost: Option<i64>) -> Vec<FieldValue<'static>> {
    let s = |x: &'static str| FieldValue::Str(Cow::Borrowed(x));
    vec![
        s(if click { "click" } else { "impression" }),
        FieldValue::Time(0),
        s("r"),
        s("c"),
        s("DE"),
        s("/"),
        cost.map_or(FieldValue::Absent, FieldValue::Dec),
        FieldValue::Absent,
    ]
}

fn partial_of(set: &MeasureSet, events: &[Vec<FieldValue<'static>>]) -> Partial {
    let mut p = set.partial();
    for e in events {
        p.add(set, e);
    }
    p
}

proptest! {
    /// The hot-path accumulator equals the one-event-at-a-time oracle, and
    /// merging split partials equals accumulating everything.
    #[test]
    fn partials_equal_the_oracle_and_merge_exactly(
        events in proptest::collection::vec((any::<bool>(), proptest::option::of(0i64..i64::MAX)), 0..40),
        cut in 0usize..40,
    ) {
        let (set, _) = shipped();
        let events: Vec<_> = events.into_iter().map(|(c, cost)| event(c, cost)).collect();
        let mut oracle = set.zero();
        for e in &events {
            oracle.merge(&event_values(&set, e));
        }
        let whole = partial_of(&set, &events);
        prop_assert_eq!(whole.values(&set), oracle.clone());
        let cut = cut.min(events.len());
        let mut left = partial_of(&set, &events[..cut]);
        left.merge(&set, &partial_of(&set, &events[cut..]));
        prop_assert_eq!(left.values(&set), oracle);
    }
}

#[test]
fn sums_do_not_overflow_at_the_limits() {
    let (set, _) = shipped();
    let events: Vec<_> = (0..4).map(|_| event(true, Some(i64::MAX))).collect();
    let v = partial_of(&set, &events).values(&set);
    assert_eq!(v.0[2], MeasureValue::Sum(4 * i64::MAX as i128));
    assert_eq!(v.0[3], MeasureValue::Min(Some(i64::MAX)), "a value at the limit is a value, not 'none'");
}

fn write<'a>(set: &'a MeasureSet, values: &'a MeasureValues, flush: u64) -> ItemWrite<'a> {
    static DIMS: [(&str, AttrValue); 0] = [];
    ItemWrite { pk: "p".into(), sk: vec![1], bucket_start: 60_000, dims: &DIMS, values, set, mark_attr: "w@1", flush }
}

/// Applies like a flusher does: first attempt, then plan from the old item.
fn apply(item: Option<Item>, w: &ItemWrite) -> (Option<Item>, u32) {
    let mut known: Option<Item> = None;
    let mut current = item;
    for attempt in 1..=4 {
        let Some(req) = plan_update(w, known.as_ref()) else { return (current, attempt - 1) };
        match apply_update(current.clone(), &req).unwrap() {
            UpdateOutcome::Applied(new) => return (Some(new), attempt),
            UpdateOutcome::ConditionFailed(old) => {
                known = old.clone();
                current = old;
            }
        }
    }
    panic!("no convergence");
}

fn costs(set: &MeasureSet, cs: &[i64]) -> MeasureValues {
    let events: Vec<_> = cs.iter().map(|c| event(true, Some(*c))).collect();
    partial_of(set, &events).values(set)
}

#[test]
fn min_max_and_sums_are_exact_and_replays_are_skipped() {
    let (set, _) = shipped();
    let (item, n) = apply(None, &write(&set, &costs(&set, &[5, 9]), 1));
    assert_eq!(n, 1, "a new item takes one write");
    let (item, n) = apply(item, &write(&set, &costs(&set, &[6, 7]), 2));
    assert_eq!(n, 1, "min/max unchanged: one write");
    let third = costs(&set, &[2, 12]);
    let (item, n) = apply(item, &write(&set, &third, 3));
    assert_eq!(n, 2, "min and max move: one more write");
    let (item, n) = apply(item.clone(), &write(&set, &third, 3));
    assert_eq!(n, 1, "replay: one failed attempt, then skipped");
    let item = item.unwrap();
    let m = MeasureValues::from_item(&set, &item).unwrap();
    assert_eq!(m.0[0], MeasureValue::Count(6));
    assert_eq!(m.0[2], MeasureValue::Sum(41));
    assert_eq!((m.0[3], m.0[4]), (MeasureValue::Min(Some(2)), MeasureValue::Max(Some(12))));
    assert_eq!(item.attrs["cost"], AttrValue::N("0.000041".parse().unwrap()), "decimal scale 6, exact");
    assert_eq!(item.attrs[crate::keys::TIME_ATTR], AttrValue::from(60_000));
}

#[test]
fn remembered_extremes_make_a_moving_min_or_max_one_write() {
    let (set, _) = shipped();
    let (item, _) = apply(None, &write(&set, &costs(&set, &[5, 9]), 1));
    let memory = remembered_extremes(&set, "p", &[1], &extremes_of(&set, item.as_ref().unwrap()));
    let second = costs(&set, &[2, 12]);
    let req = plan_update(&write(&set, &second, 2), Some(&memory)).unwrap();
    let UpdateOutcome::Applied(after) = apply_update(item.clone(), &req).unwrap() else {
        panic!("min and max move in the first write")
    };
    assert_eq!(extremes_of(&set, &after), vec![Some(2), Some(12)]);
    // A stale memory (the store moved on) fails the guard: nothing applied.
    let stale = remembered_extremes(&set, "p", &[1], &[Some(9), Some(9)]);
    let third = costs(&set, &[7]);
    let req = plan_update(&write(&set, &third, 3), Some(&stale)).unwrap();
    assert!(!apply_update(Some(after), &req).unwrap().applied(), "min 2 < 7: the guess 'min moves to 7' is refused");
}

#[test]
fn declarations_are_checked_against_the_fields() {
    let (_, fields) = shipped();
    let err =
        |specs: &[MeasureSpec], ratios: &[RatioSpec]| MeasureSet::new(specs, ratios, &fields).unwrap_err().to_string();
    let count = MeasureSpec::new("n", MeasureKind::Count, None, None);
    assert!(err(&[count.clone(), count.clone()], &[]).contains("declared twice"));
    assert!(err(&[MeasureSpec::new("n", MeasureKind::Count, Some("cost"), None)], &[]).contains("takes no `field`"));
    assert!(err(&[MeasureSpec::new("s", MeasureKind::Sum, None, None)], &[]).contains("needs a `field`"));
    assert!(err(&[MeasureSpec::new("s", MeasureKind::Sum, Some("referrer"), None)], &[]).contains("a string"));
    assert!(err(&[MeasureSpec::new("t", MeasureKind::Count, None, None)], &[]).contains("reserved"));
    assert!(err(&[MeasureSpec::new("n", MeasureKind::Count, None, Some("type = view"))], &[]).contains("not one of"));
    let ratio = RatioSpec { name: "r".into(), numerator: "n".into(), denominator: "m".into() };
    assert!(err(std::slice::from_ref(&count), &[ratio]).contains("\"m\" is not a declared measure"));
    let spend = MeasureSpec::new("spend", MeasureKind::Sum, Some("cost"), Some("type = click"));
    let set = MeasureSet::new(&[count, spend], &[], &fields).unwrap();
    let v = partial_of(&set, &[event(true, Some(3)), event(false, Some(4))]).values(&set);
    assert_eq!(v.0, vec![MeasureValue::Count(2), MeasureValue::Sum(3)], "where applies to a sum too");
}

#[test]
fn ratios_are_read_from_two_measures() {
    let (set, _) = shipped();
    let v = partial_of(&set, &[event(true, None), event(false, None), event(false, None)]).values(&set);
    let ctr = &set.ratios()[0];
    assert_eq!(set.ratio(ctr, &v), Some(0.5));
    assert_eq!(set.ratio(ctr, &set.zero()), None);
}
