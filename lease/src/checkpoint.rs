//! A shard's checkpoint: for every **item set** of the layout (a projection's
//! rollup, numbered in layout order) the last record applied to its items.
//!
//! Item sets are flushed on cadences of their own (minute series every few
//! seconds, hour and day items every few minutes), so their checkpoints
//! differ between the flushes of the slower ones. Most of the time, and
//! always after a flush that writes every set, they are equal: then the
//! checkpoint is written as one position, exactly as before cadences
//! existed (`seq` or `seq.sub`). Otherwise as `at|pos@i,j|pos@k`: every set
//! at `at` but the ones listed after it (`-` for "nothing applied yet").
//!
//! The value is compared and replaced whole (compare-and-set on the text),
//! and built only by [`Checkpoint::advance`] from the previous one, so two
//! workers that start from the same checkpoint and advance the same sets to
//! the same position write the same text.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;
use std::fmt;
use zigzag_model::Position;

/// An item set's number: its position among the layout's (projection,
/// rollup) pairs.
pub type ItemSet = u16;

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Checkpoint {
    /// Where every set not listed in `apart` is.
    at: Option<Position>,
    /// Sets elsewhere (never equal to `at`).
    apart: BTreeMap<ItemSet, Option<Position>>,
}

impl Checkpoint {
    /// Every set at `at` (None: nothing applied yet).
    pub fn uniform(at: Option<Position>) -> Checkpoint {
        Checkpoint { at, apart: BTreeMap::new() }
    }

    /// Nothing applied to any set.
    pub fn none() -> Checkpoint {
        Checkpoint::default()
    }

    /// Every set at one position: the checkpoint as a single position.
    pub fn is_uniform(&self) -> bool {
        self.apart.is_empty()
    }

    /// The single position, when every set is there.
    pub fn single(&self) -> Option<Option<Position>> {
        self.is_uniform().then_some(self.at)
    }

    /// Where set `s` is.
    pub fn get(&self, s: ItemSet) -> Option<Position> {
        self.apart.get(&s).copied().unwrap_or(self.at)
    }

    /// The earliest set's position: where a new reader must start.
    pub fn earliest(&self) -> Option<Position> {
        self.apart.values().copied().chain([self.at]).min().flatten()
    }

    /// The furthest set's position: no set needs a record up to it twice.
    pub fn furthest(&self) -> Option<Position> {
        self.apart.values().copied().chain([self.at]).max().flatten()
    }

    /// Whether any set has nothing applied yet.
    pub fn has_unread_set(&self) -> bool {
        self.at.is_none() || self.apart.values().any(Option::is_none)
    }

    /// The sets of the layout's `of` that are not at the furthest
    /// position: empty when every set is at one position, whatever the
    /// text lists.
    pub fn behind(&self, of: ItemSet) -> Vec<ItemSet> {
        let furthest = self.furthest();
        (0..of).filter(|&s| self.get(s) != furthest).collect()
    }

    /// The checkpoint after applying records up to `to` to `sets` (None:
    /// every set, which makes it uniform) of the layout's `of` sets. In
    /// its canonical form: `at` is where most sets are (the furthest of
    /// equals), the others are listed.
    pub fn advance(&self, sets: Option<&[ItemSet]>, to: Position, of: ItemSet) -> Checkpoint {
        let Some(sets) = sets else { return Checkpoint::uniform(Some(to)) };
        Checkpoint::of_sets(|s: ItemSet| if sets.contains(&s) { Some(to) } else { self.get(s) }, of, self.at)
    }

    /// The same positions numbered by another layout of `of` sets: set `s`
    /// there is set `from(s)` here (None: a set this layout does not have,
    /// which takes the furthest position: nothing before it is owed to a
    /// set added since). Sets this layout has and that one does not are
    /// dropped.
    pub fn renumber(&self, from: impl Fn(ItemSet) -> Option<ItemSet>, of: ItemSet) -> Checkpoint {
        let furthest = self.furthest();
        Checkpoint::of_sets(|s| from(s).map_or(furthest, |old| self.get(old)), of, self.at)
    }

    /// The canonical checkpoint of `of` sets at `value(s)`: `at` is where
    /// most sets are (the furthest of equals; `none`: without sets), the
    /// others are listed.
    fn of_sets(value: impl Fn(ItemSet) -> Option<Position>, of: ItemSet, none: Option<Position>) -> Checkpoint {
        let mut counts: BTreeMap<Option<Position>, usize> = BTreeMap::new();
        for s in 0..of {
            *counts.entry(value(s)).or_default() += 1;
        }
        // Most sets, then the furthest position (the map is in order).
        let at = counts.iter().max_by_key(|(p, n)| (**n, **p)).map_or(none, |(p, _)| *p);
        let apart = (0..of).map(|s| (s, value(s))).filter(|(_, p)| *p != at).collect();
        Checkpoint { at, apart }
    }
}

impl fmt::Display for Checkpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pos = |p: &Option<Position>| p.map_or("-".to_string(), |p| p.to_string());
        write!(f, "{}", pos(&self.at))?;
        // Sets at one position are listed together.
        let mut groups: BTreeMap<Option<Position>, Vec<ItemSet>> = BTreeMap::new();
        for (s, p) in &self.apart {
            groups.entry(*p).or_default().push(*s);
        }
        for (p, sets) in groups {
            let list: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
            write!(f, "|{}@{}", pos(&p), list.join(","))?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Checkpoint {
    type Err = String;

    fn from_str(text: &str) -> Result<Checkpoint, String> {
        let pos = |t: &str| -> Result<Option<Position>, String> {
            match t {
                "-" => Ok(None),
                t => t.parse::<Position>().map(Some).map_err(|e| format!("position {t:?}: {e}")),
            }
        };
        let mut parts = text.split('|');
        let at = pos(parts.next().unwrap_or_default())?;
        let mut apart = BTreeMap::new();
        for part in parts {
            let (p, sets) = part.split_once('@').ok_or_else(|| format!("{part:?} is not POSITION@SETS"))?;
            let p = pos(p)?;
            for s in sets.split(',') {
                let s: ItemSet = s.parse().map_err(|_| format!("item set {s:?} is not a number"))?;
                if p != at {
                    apart.insert(s, p);
                }
            }
        }
        Ok(Checkpoint { at, apart })
    }
}

impl From<Option<Position>> for Checkpoint {
    fn from(at: Option<Position>) -> Checkpoint {
        Checkpoint::uniform(at)
    }
}

/// In an intent's JSON: the text, or null for nothing applied (what a
/// range's `from` was before cadences: old intents read the same).
impl Serialize for Checkpoint {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.single() {
            Some(None) => s.serialize_none(),
            _ => s.collect_str(self),
        }
    }
}

impl<'de> Deserialize<'de> for Checkpoint {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Checkpoint, D::Error> {
        match Option::<String>::deserialize(d)? {
            None => Ok(Checkpoint::none()),
            Some(t) => t.parse().map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(n: u64) -> Position {
        Position::at(n)
    }

    #[test]
    fn a_uniform_checkpoint_is_one_position_as_before() {
        let c = Checkpoint::uniform(Some(Position::new(zigzag_model::SeqNo::from_u128(42), 3)));
        assert_eq!(c.to_string(), "42.3");
        assert_eq!("42.3".parse::<Checkpoint>().unwrap(), c);
        assert_eq!(serde_json::to_string(&Checkpoint::none()).unwrap(), "null");
        assert_eq!(serde_json::from_str::<Checkpoint>("null").unwrap(), Checkpoint::none());
        assert_eq!(serde_json::from_str::<Checkpoint>("\"7\"").unwrap(), Checkpoint::uniform(Some(p(7))));
    }

    #[test]
    fn sets_advance_apart_and_a_whole_advance_joins_them() {
        let c = Checkpoint::uniform(Some(p(10)));
        let fast = c.advance(Some(&[0, 2]), p(20), 5);
        assert_eq!(fast.to_string(), "10|20@0,2");
        assert_eq!((fast.get(0), fast.get(1), fast.get(2)), (Some(p(20)), Some(p(10)), Some(p(20))));
        assert_eq!((fast.earliest(), fast.furthest()), (Some(p(10)), Some(p(20))));
        let again = fast.advance(Some(&[0, 2]), p(30), 5);
        assert_eq!(again.to_string(), "10|30@0,2");
        assert_eq!(again.advance(None, p(40), 5), Checkpoint::uniform(Some(p(40))));
        // Sets that reach `at` again are not listed.
        assert!(fast.advance(Some(&[0, 2]), p(10), 5).is_uniform());
        // Every set moved, one cadence after another: one position again.
        let mid = again.advance(Some(&[1, 3]), p(30), 5);
        assert_eq!(mid.to_string(), "30|10@4", "most sets are at 30 now");
        assert!(mid.advance(Some(&[4]), p(30), 5).is_uniform());
        let fresh = Checkpoint::none().advance(Some(&[1]), p(5), 3);
        assert_eq!(fresh.to_string(), "-|5@1");
        assert!(fresh.has_unread_set() && fresh.earliest().is_none());
        for text in ["x", "1|2", "1|2@a"] {
            assert!(text.parse::<Checkpoint>().is_err(), "{text}");
        }
    }

    proptest! {
        /// Text and JSON read back as the same checkpoint, and every set
        /// is where the advances put it.
        #[test]
        fn advances_are_tracked_per_set_and_read_back(steps in proptest::collection::vec((proptest::collection::vec(0u16..6, 0..6), 1u64..50, any::<bool>()), 0..12)) {
            let mut c = Checkpoint::none();
            let mut oracle: [Option<Position>; 6] = [None; 6];
            for (sets, to, all) in steps {
                if all {
                    c = c.advance(None, p(to), 6);
                    oracle = [Some(p(to)); 6];
                } else {
                    c = c.advance(Some(&sets), p(to), 6);
                    for s in sets {
                        oracle[s as usize] = Some(p(to));
                    }
                }
                for s in 0..6u16 {
                    prop_assert_eq!(c.get(s), oracle[s as usize]);
                }
                prop_assert_eq!(c.to_string().parse::<Checkpoint>().unwrap(), c.clone());
                let uniform = oracle.iter().all(|x| *x == oracle[0]);
                prop_assert_eq!(c.is_uniform(), uniform, "one position exactly when every set is there");
                let json = serde_json::to_string(&c).unwrap();
                prop_assert_eq!(serde_json::from_str::<Checkpoint>(&json).unwrap(), c.clone());
            }
        }

        /// Renumbered for another layout, every set it has keeps its
        /// position, a set it adds takes the furthest, and the text is the
        /// canonical one (as if advanced to there set by set).
        #[test]
        fn a_renumbered_checkpoint_keeps_every_named_sets_position_and_puts_new_ones_furthest(
            positions in proptest::collection::vec(proptest::option::of(1u64..6), 1..7),
            map in proptest::collection::vec(proptest::option::of(0u16..7), 0..9),
        ) {
            let of = positions.len() as u16;
            let mut c = Checkpoint::none();
            for (s, at) in positions.iter().enumerate() {
                if let Some(at) = at {
                    c = c.advance(Some(&[s as u16]), p(*at), of);
                }
            }
            let from = |s: ItemSet| map.get(s as usize).copied().flatten().filter(|o| *o < of);
            let renumbered = c.renumber(from, map.len() as u16);
            for s in 0..map.len() as u16 {
                let want = from(s).map_or(c.furthest(), |o| c.get(o));
                prop_assert_eq!(renumbered.get(s), want, "set {}", s);
            }
            prop_assert_eq!(renumbered.to_string().parse::<Checkpoint>().unwrap(), renumbered.clone());
            let same = c.renumber(Some, of);
            prop_assert_eq!(same, c, "renumbered for its own layout, unchanged");
        }
    }
}
