//! The hot path: one key's accumulators within a generation, as plain
//! words (a count is one word, a sum two — an i128 —, a min or a max one),
//! inline for up to six words, and a bit per measure saying whether any
//! event gave it a value (so no value is a sentinel). Sketch measures'
//! sketches ([`super::sketch`]) are kept beside the words, allocated only
//! by layouts that have them.

use super::{MeasureKind, MeasureSet, MeasureValue, MeasureValues, Sketch};
use crate::schema::FieldValue;
use smallvec::SmallVec;

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Partial {
    words: SmallVec<[i64; 6]>,
    /// Bit i: measure i has a value (min/max/sum of at least one event).
    seen: u64,
    /// One sketch per sketch measure, in measure order (None: the layout
    /// has none). A thin pointer: 8 bytes on every partial, not 24 (Vec) or 16
    /// (boxed slice), since most layouts have none.
    #[allow(clippy::box_collection)]
    sketches: Option<Box<Vec<Sketch>>>,
}

/// The words copied as one block (a new key's partial is a copy of the
/// set's empty one; the derived clone pushed them one by one).
impl Clone for Partial {
    fn clone(&self) -> Self {
        Partial { words: SmallVec::from_slice(&self.words), seen: self.seen, sketches: self.sketches.clone() }
    }
}

/// Measures per layout: one `seen` bit each.
pub const MAX_MEASURES: usize = 64;

impl Partial {
    pub(super) fn new(set: &MeasureSet) -> Partial {
        let mut words = SmallVec::with_capacity(set.slots);
        for m in &set.measures {
            match m.kind {
                MeasureKind::Count => words.push(0),
                MeasureKind::Sum => words.extend([0, 0]),
                MeasureKind::Min => words.push(i64::MAX),
                MeasureKind::Max => words.push(i64::MIN),
                _ => {} // a sketch, beside the words
            }
        }
        let sketches = set
            .has_sketches()
            .then(|| Box::new(set.measures.iter().filter_map(|m| m.sketch.map(Sketch::empty)).collect()));
        Partial { words, seen: 0, sketches }
    }

    /// Adds one event (its typed values, in field order).
    #[inline]
    pub fn add(&mut self, set: &MeasureSet, values: &[FieldValue<'_>]) {
        for (i, m) in set.measures.iter().enumerate() {
            if let Some(c) = &m.condition {
                if !c.matches(values) {
                    continue;
                }
            }
            let s = m.slot;
            match m.kind {
                MeasureKind::Count => {
                    self.words[s] += 1;
                    continue;
                }
                MeasureKind::Sum | MeasureKind::Min | MeasureKind::Max => {}
                _ => {
                    if let (Some(f), Some(sketches)) = (m.field, &mut self.sketches) {
                        sketches[s].add(&values[f]);
                    }
                    continue;
                }
            }
            // A sum/min/max of an event without the field: nothing to add.
            let Some(v) = m.field.and_then(|f| values[f].units()) else { continue };
            self.seen |= 1 << i;
            match m.kind {
                MeasureKind::Sum => self.add_sum(s, v as i128),
                MeasureKind::Min => self.words[s] = self.words[s].min(v),
                MeasureKind::Max => self.words[s] = self.words[s].max(v),
                _ => {}
            }
        }
    }

    #[inline]
    fn sum(&self, s: usize) -> i128 {
        ((self.words[s + 1] as i128) << 64) | (self.words[s] as u64 as i128)
    }

    #[inline]
    fn add_sum(&mut self, s: usize, v: i128) {
        let total = self.sum(s) + v;
        self.words[s] = total as i64;
        self.words[s + 1] = (total >> 64) as i64;
    }

    pub fn merge(&mut self, set: &MeasureSet, other: &Partial) {
        for m in &set.measures {
            let s = m.slot;
            match m.kind {
                MeasureKind::Count => self.words[s] += other.words[s],
                MeasureKind::Sum => self.add_sum(s, other.sum(s)),
                MeasureKind::Min => self.words[s] = self.words[s].min(other.words[s]),
                MeasureKind::Max => self.words[s] = self.words[s].max(other.words[s]),
                _ => {
                    if let (Some(mine), Some(theirs)) = (&mut self.sketches, &other.sketches) {
                        // Same layout, same parameters: cannot fail.
                        let _ = mine[s].merge(&theirs[s]);
                    }
                }
            }
        }
        self.seen |= other.seen;
    }

    /// Widened to values (what a flush writes and a report shows).
    pub fn values(&self, set: &MeasureSet) -> MeasureValues {
        let values = set.measures.iter().enumerate().map(|(i, m)| {
            let seen = self.seen & (1 << i) != 0;
            let s = m.slot;
            match m.kind {
                MeasureKind::Count => MeasureValue::Count(self.words[s] as u64),
                MeasureKind::Sum => MeasureValue::Sum(self.sum(s)),
                MeasureKind::Min => MeasureValue::Min(seen.then_some(self.words[s])),
                MeasureKind::Max => MeasureValue::Max(seen.then_some(self.words[s])),
                _ => match &self.sketches {
                    Some(sketches) => MeasureValue::Sketch(Box::new(sketches[s].clone())),
                    None => MeasureValue::zero(m),
                },
            }
        });
        MeasureValues(values.collect())
    }

    /// Bytes held beyond the struct itself (many measures; sketches).
    pub fn heap_bytes(&self) -> usize {
        let words = if self.words.spilled() { self.words.capacity() * 8 } else { 0 };
        let sketches = self.sketches.as_ref().map_or(0, |s| {
            s.capacity() * std::mem::size_of::<Sketch>() + s.iter().map(Sketch::heap_bytes).sum::<usize>()
        });
        words + sketches
    }
}
