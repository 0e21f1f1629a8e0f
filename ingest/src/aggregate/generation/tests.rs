use super::*;
use proptest::prelude::*;
use std::collections::HashMap;
use zigzag_model::schema::FieldValue;
use zigzag_model::MeasureValue;

proptest! {
    /// The dense slots and their index tables behave as a map from
    /// (key, bucket) to one partial, and from a key to its names,
    /// whatever the order and however the tables grow.
    #[test]
    fn slots_and_names_are_a_map(ops in proptest::collection::vec((0u8..40, 0i64..30), 1..2_000)) {
        let set = zigzag_model::Config::default().measure_set().expect("shipped measures");
        let s = |x: &'static str| FieldValue::Str(x.into());
        let click = [s("click"), FieldValue::Time(0), s("r"), s("c"), s("DE"), s("/"), FieldValue::Absent, FieldValue::Absent];
        let mut part = ShardPartials::default();
        let mut oracle: HashMap<(u8, i64), u32> = HashMap::new();
        let mut names: HashMap<u8, u32> = HashMap::new();
        let mut grown = 0;
        for (key, bucket) in ops {
            // Identities sharing their low word: the index's hash (the
            // low word) collides, and equality must tell them apart.
            let id = (Identity::from(key) << 64) | Identity::from(key % 3);
            let text = format!("key-{key}");
            let mut values = Vec::new();
            zigzag_model::keys::pack_values(&[text.as_str(), "x"], &mut values);
            let (name, new_name) = part.name(id, &values, &mut grown).expect("one key, one set of names");
            prop_assert_eq!(new_name, !names.contains_key(&key), "new names are said so");
            prop_assert_eq!(*names.entry(key).or_insert(name), name, "a key keeps its index");
            let (p, created) = part.partial(name, new_name, bucket * 60_000, || set.partial());
            p.add(&set, &click);
            let seen = oracle.entry((key, bucket)).or_insert(0);
            prop_assert_eq!(created, *seen == 0);
            *seen += 1;
        }
        prop_assert_eq!(part.slots.len(), oracle.len());
        prop_assert_eq!(part.names.keys.len(), names.len());
        for slot in &part.slots {
            let key = names.iter().find(|(_, &n)| n == slot.name).map(|(k, _)| *k).expect("a known key");
            let count = MeasureValue::Count(oracle[&(key, slot.bucket / 60_000)] as u64);
            prop_assert_eq!(&slot.partial.values(&set).0[0], &count, "every add reached its own partial");
            let text = format!("key-{key}");
            prop_assert!(zigzag_model::keys::unpack_values(part.names.values(slot.name as usize)).eq([text.as_str(), "x"]));
        }
        // Another set of names for a known identity is a collision.
        let id: Identity = 0;
        if names.contains_key(&0) {
            let mut other = Vec::new();
            zigzag_model::keys::pack_values(&["other", "x"], &mut other);
            prop_assert!(part.name(id, &other, &mut grown).is_err());
        }
    }
}
