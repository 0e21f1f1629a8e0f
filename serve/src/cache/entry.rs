//! One slice of one read as the cache keeps it, and when it answers: its
//! marks against the slice's now (settled), or its age (unsettled).

use std::time::{Duration, Instant};
use zigzag_gather::merge::GroupKey;
use zigzag_model::changes::SliceMarks;
use zigzag_model::MeasureValues;

/// One slice of one read, as it was read.
pub(super) struct Entry {
    /// The marks found before its read (settled: the same after it).
    pub(super) marks: SliceMarks,
    pub(super) settled: bool,
    /// A flush was in progress on the slice when it was read.
    pub(super) busy: bool,
    /// When its read began.
    pub(super) read_at: Instant,
    /// The part of the slice it holds, `[from, to)`.
    pub(super) from: i64,
    pub(super) to: i64,
    pub(super) groups: Vec<(GroupKey, MeasureValues)>,
    pub(super) bytes: usize,
}

/// How an entry answers a slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Answers {
    No,
    Yes,
    /// As the slice was before a flush now in progress.
    BeforeFlush,
    /// As read a while ago (beyond `recheck`), part way through a flush
    /// still in progress.
    WhileFlushing,
}

/// How long entries answer beyond their marks.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ages {
    /// Any entry, from when its read began.
    pub(super) recheck: Duration,
    /// An unsettled entry read while a flush was writing its slice, as long
    /// as no flush finished on the slice since.
    pub(super) unsettled_for: Duration,
}

impl Entry {
    /// Whether it answers `[a, b)` of its slice, whose marks are `now`, at `at`.
    pub(super) fn answers(&self, a: i64, b: i64, now: &SliceMarks, at: Instant, ages: Ages) -> Answers {
        if !(self.from <= a && b <= self.to) {
            return Answers::No;
        }
        if self.settled && self.marks.holds_done_of(now) {
            return match self.marks.misses_a_flush_begun_in(now) {
                true => Answers::BeforeFlush,
                false => Answers::Yes,
            };
        }
        let age = at.saturating_duration_since(self.read_at);
        if age < ages.recheck {
            return Answers::Yes;
        }
        // Unsettled: its marks are those before its read, so holding their
        // done marks means no flush finished on the slice since.
        let flushing = self.busy && !now.quiet() && self.marks.holds_done_of(now);
        match !self.settled && flushing && age < ages.unsettled_for {
            true => Answers::WhileFlushing,
            false => Answers::No,
        }
    }
}

/// Memory of one group's entry (estimated: strings, measures, the map's overhead).
pub(super) fn group_bytes(k: &GroupKey, v: &MeasureValues) -> usize {
    let strings: usize = k.values.iter().map(|s| s.len() + 24).sum();
    let measures: usize =
        v.0.iter()
            .map(|m| match m {
                zigzag_model::MeasureValue::Sketch(s) => 32 + s.heap_bytes(),
                _ => 32,
            })
            .sum();
    64 + strings + measures
}
