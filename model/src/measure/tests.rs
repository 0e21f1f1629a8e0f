use super::update::{
    extremes_of, plan_sketch_update, plan_update, remembered_extremes, sketch_key, ItemWrite, SketchWrite, VERSION_ATTR,
};
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
    ItemWrite {
        pk: "p".into(),
        sk: vec![1],
        bucket_start: 60_000,
        expires: None,
        dims: &DIMS,
        values,
        set,
        mark_attr: "w@1",
        flush,
    }
}

/// Applies like a flusher does: first attempt, then plan from the old item.
fn apply(item: Option<Item>, w: &ItemWrite) -> (Option<Item>, u32) {
    let mut known: Option<Item> = None;
    let mut current = item;
    for attempt in 1..=4 {
        let Some(req) = plan_update(w, known.as_ref()).expect("in range") else { return (current, attempt - 1) };
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
    assert_eq!(m.0[3..5], [MeasureValue::Min(Some(2)), MeasureValue::Max(Some(12))]);
    assert_eq!(item.attrs["cost"], AttrValue::N("0.000041".parse().unwrap()), "decimal scale 6, exact");
    assert_eq!(item.attrs[crate::keys::TIME_ATTR], AttrValue::from(60_000));
}

#[test]
fn a_sum_past_what_the_store_keeps_exactly_is_refused_never_clamped() {
    let (set, _) = shipped();
    let sum = |units: i128| {
        let mut v = set.zero();
        v.0[2] = MeasureValue::Sum(units);
        v
    };
    let too_big = sum(MAX_STORED_UNITS + 1);
    let err = plan_update(&write(&set, &too_big, 1), None).unwrap_err();
    assert!(err.contains("measure cost") && err.contains("smaller scale"), "{err}");
    // In range alone, out of range on top of the stored total: the guard
    // refuses the ADD, and the plan from the returned item is an error.
    let (item, _) = apply(None, &write(&set, &sum(MAX_STORED_UNITS - 10), 1));
    let near = item.unwrap();
    let eleven = sum(11);
    let req = plan_update(&write(&set, &eleven, 2), None).unwrap().unwrap();
    let UpdateOutcome::ConditionFailed(Some(old)) = apply_update(Some(near.clone()), &req).unwrap() else {
        panic!("the guard holds the total in range")
    };
    assert!(plan_update(&write(&set, &eleven, 2), Some(&old)).is_err());
    // Exactly at the limit is fine, and so is going back down.
    let (item, _) = apply(Some(near), &write(&set, &sum(10), 2));
    let (item, _) = apply(item, &write(&set, &sum(-(MAX_STORED_UNITS)), 3));
    let m = MeasureValues::from_item(&set, &item.unwrap()).unwrap();
    assert_eq!(m.0[2], MeasureValue::Sum(0));
}

#[test]
fn remembered_extremes_make_a_moving_min_or_max_one_write() {
    let (set, _) = shipped();
    let (item, _) = apply(None, &write(&set, &costs(&set, &[5, 9]), 1));
    let memory = remembered_extremes(&set, "p", &[1], &extremes_of(&set, item.as_ref().unwrap()));
    let second = costs(&set, &[2, 12]);
    let req = plan_update(&write(&set, &second, 2), Some(&memory)).unwrap().unwrap();
    let UpdateOutcome::Applied(after) = apply_update(item.clone(), &req).unwrap() else {
        panic!("min and max move in the first write")
    };
    assert_eq!(extremes_of(&set, &after), vec![Some(2), Some(12)]);
    // A stale memory (the store moved on) fails the guard: nothing applied.
    let stale = remembered_extremes(&set, "p", &[1], &[Some(9), Some(9)]);
    let third = costs(&set, &[7]);
    let req = plan_update(&write(&set, &third, 3), Some(&stale)).unwrap().unwrap();
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

fn with_users() -> (MeasureSet, Vec<TypedField>) {
    let c = Config::default();
    let fields = c.typed_fields().unwrap();
    let mut specs = c.measures.clone();
    specs.push(MeasureSpec::new("users", MeasureKind::Distinct, Some("user_id"), None));
    let clicking = MeasureSpec::new("clicking_users", MeasureKind::Distinct, Some("user_id"), Some("type = click"));
    specs.push(clicking.with_option("precision", 8));
    (MeasureSet::new(&specs, &[], &fields).unwrap(), fields)
}

fn user_event(click: bool, user: &'static str) -> Vec<FieldValue<'static>> {
    let mut e = event(click, None);
    e[7] = FieldValue::Str(Cow::Borrowed(user));
    e
}

fn sketch(v: &MeasureValues, i: usize) -> &crate::hll::Hll {
    match &v.0[i] {
        MeasureValue::Sketch(s) => match &**s {
            Sketch::Distinct(h) => h,
            #[allow(unreachable_patterns)]
            other => panic!("{other:?} is not a distinct count"),
        },
        other => panic!("{other:?} is not a sketch"),
    }
}

#[test]
fn distinct_counts_follow_where_and_equal_the_oracle() {
    let (set, _) = with_users();
    let events: Vec<_> = (0..300).map(|i| user_event(i % 3 == 0, ["a", "b", "c", "d", "e"][i % 5])).collect();
    let mut oracle = set.zero();
    for e in &events {
        oracle.merge(&event_values(&set, e));
    }
    let mut left = partial_of(&set, &events[..120]);
    left.merge(&set, &partial_of(&set, &events[120..]));
    let v = left.values(&set);
    assert_eq!(v, oracle, "split partials merged = the one-event-at-a-time oracle, sketches included");
    assert_eq!(sketch(&v, 5).estimate(), 5);
    assert_eq!(sketch(&v, 6).estimate(), 5, "i % 3 == 0 meets every i % 5");
    assert_eq!(sketch(&v, 6).precision(), 8);
    let only_e: Vec<_> = (0..10).map(|_| user_event(true, "e")).collect();
    assert_eq!(sketch(&partial_of(&set, &only_e).values(&set), 6).estimate(), 1);
    let refused = |spec: MeasureSpec| MeasureSet::new(&[spec], &[], &with_users().1).unwrap_err().to_string();
    let users = || MeasureSpec::new("u", MeasureKind::Distinct, Some("user_id"), None);
    assert!(refused(users().with_option("precision", 30)).contains("precision 30 is outside 4..=18"));
    assert!(refused(users().with_option("precison", 8)).contains("`precison` is not an option of a distinct"));
    assert!(refused(users().with_option("precision", "8")).contains("must be a whole number"));
    let cost = MeasureSpec::new("c", MeasureKind::Sum, Some("cost"), None).with_option("precision", 8);
    assert!(refused(cost).contains("`precision` is not an option of a sum"));
}

fn sketch_write<'a>(m: &'a Measure, h: &'a Sketch) -> SketchWrite<'a> {
    SketchWrite {
        pk: "p".into(),
        sk: sketch_key(&[1], 5),
        bucket_start: 60_000,
        expires: None,
        dims: &[],
        measure: m,
        sketch: h,
        mark_attr: "w@1",
        flush: 1,
    }
}

/// Applies a sketch write like the flusher: first attempt, then re-plan
/// from what a refused attempt returned. Returns the requests sent.
fn apply_sketch(item: Option<Item>, w: &SketchWrite) -> (Option<Item>, u32) {
    let (mut known, mut current) = (None, item);
    for sent in 0..4 {
        let Some(req) = plan_sketch_update(w, known.as_ref()).unwrap() else { return (current, sent) };
        match apply_update(current.clone(), &req).unwrap() {
            UpdateOutcome::Applied(new) => return (Some(new), sent + 1),
            UpdateOutcome::ConditionFailed(old) => {
                known = old.clone();
                current = old;
            }
        }
    }
    panic!("no convergence");
}

#[test]
fn sketch_items_merge_once_whatever_the_replays_and_order_concurrent_writers() {
    let (set, _) = with_users();
    let m = &set.measures()[5];
    let flush = |users: &[&'static str]| {
        let events: Vec<_> = users.iter().map(|u| user_event(false, u)).collect();
        Sketch::Distinct(sketch(&partial_of(&set, &events).values(&set), 5).clone())
    };
    let (a, b) = (flush(&["a", "b"]), flush(&["b", "c", "d"]));
    let write = |h| sketch_write(m, h);
    let (item, sent) = apply_sketch(None, &write(&a));
    assert_eq!(sent, 1, "a new sketch item: one write");
    let (item, sent) = apply_sketch(item, &write(&b));
    assert_eq!(sent, 2, "an existing one: refused (version), then merged");
    let (item, sent) = apply_sketch(item, &write(&a));
    assert_eq!(sent, 1, "a replay: one refused attempt, then nothing to add");
    let item = item.unwrap();
    assert_eq!(item.attrs[VERSION_ATTR], AttrValue::N(2.into()), "two writes changed the sketch");
    let stored = MeasureValues::from_item(&set, &item).unwrap();
    assert_eq!(sketch(&stored, 5).estimate(), 4, "a, b, c, d");
    // A writer that read version 1 and writes after another moved it to 2
    // is refused and merges again: nothing is lost.
    let one = apply_sketch(None, &write(&a)).0.unwrap();
    let c = flush(&["x"]);
    let stale = plan_sketch_update(&write(&c), Some(&one)).unwrap().unwrap();
    let UpdateOutcome::ConditionFailed(Some(now)) = apply_update(Some(item.clone()), &stale).unwrap() else {
        panic!("a stale version is refused")
    };
    let (after, _) = apply_sketch(Some(now), &write(&c));
    let merged = MeasureValues::from_item(&set, &after.unwrap()).unwrap();
    assert_eq!(sketch(&merged, 5).estimate(), 5, "a, b, c, d, x");
    assert_eq!(sketch_key(&[1, 2], 5), [1, 2, b'#', 5]);
}

#[test]
fn a_set_without_some_measures_counts_the_others_as_the_whole_set_does_and_keeps_only_ratios_of_them() {
    let (users, fields) = with_users();
    let specs: Vec<MeasureSpec> = Config::default()
        .measures
        .into_iter()
        .chain([
            MeasureSpec::new("users", MeasureKind::Distinct, Some("user_id"), None),
            MeasureSpec::new("clicking_users", MeasureKind::Distinct, Some("user_id"), Some("type = click")),
        ])
        .collect();
    let set = MeasureSet::new(&specs, &Config::default().ratios, &fields).unwrap();
    assert!(!set.ratios().is_empty() && set.measures().len() == users.measures().len());
    let events = [user_event(true, "u1"), user_event(false, "u2"), user_event(true, "u3"), user_event(false, "u1")];
    let whole = partial_of(&set, &events).values(&set);
    for gone in [&["impressions"][..], &["cost", "users"], &["clicks", "cost_min", "clicking_users"]] {
        let narrow = set.without(gone);
        let names: Vec<&str> = narrow.measures().iter().map(|m| m.name.as_str()).collect();
        let expected: Vec<&str> =
            set.measures().iter().map(|m| m.name.as_str()).filter(|m| !gone.contains(m)).collect();
        assert_eq!(names, expected);
        // Its own accumulators (slots numbered again) count what the whole
        // set's do.
        let values = partial_of(&narrow, &events).values(&narrow);
        let kept: Vec<MeasureValue> = set
            .measures()
            .iter()
            .zip(&whole.0)
            .filter(|(m, _)| !gone.contains(&m.name.as_str()))
            .map(|(_, v)| v.clone())
            .collect();
        assert_eq!(values.0, kept, "without {gone:?}");
        // A ratio stays only with both its measures, and reads the same.
        for r in set.ratios() {
            let reads = [&set.measures()[r.numerator].name, &set.measures()[r.denominator].name];
            match narrow.ratios().iter().find(|n| n.name == r.name) {
                Some(n) => assert_eq!(narrow.ratio(n, &values), set.ratio(r, &whole)),
                None => assert!(reads.iter().any(|m| gone.contains(&m.as_str())), "{} dropped", r.name),
            }
        }
    }
}
