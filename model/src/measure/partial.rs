//! The hot path: one key's accumulators within a generation, as plain
//! words (a count is one word, a sum two — an i128 —, a min or a max one),
//! inline for up to six words, and a bit per measure saying whether any
//! event gave it a value (so no value is a sentinel).

use super::{MeasureKind, MeasureSet, MeasureValue, MeasureValues};
use crate::schema::FieldValue;
use smallvec::SmallVec;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partial {
    words: SmallVec<[i64; 6]>,
    /// Bit i: measure i has a value (min/max/sum of at least one event).
    seen: u64,
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
            }
        }
        Partial { words, seen: 0 }
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
            if m.kind == MeasureKind::Count {
                self.words[s] += 1;
                continue;
            }
            // A sum/min/max of an event without the field: nothing to add.
            let Some(v) = m.field.and_then(|f| values[f].units()) else { continue };
            self.seen |= 1 << i;
            match m.kind {
                MeasureKind::Sum => self.add_sum(s, v as i128),
                MeasureKind::Min => self.words[s] = self.words[s].min(v),
                MeasureKind::Max => self.words[s] = self.words[s].max(v),
                MeasureKind::Count => {}
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
            }
        });
        MeasureValues(values.collect())
    }

    /// Bytes held beyond the struct itself (a schema with many measures).
    pub fn heap_bytes(&self) -> usize {
        if self.words.spilled() {
            self.words.capacity() * 8
        } else {
            0
        }
    }
}
