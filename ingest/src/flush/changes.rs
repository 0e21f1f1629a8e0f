//! The change marks around a flush's items (`zigzag_model::changes`): `b@L
//! = k` on every slice the flush touches before its first item, `d@L = k`
//! after its last. Unlike the statistics they are not best effort: a
//! reader trusts a slice whose marks say no flush is changing it, so a
//! flush whose begin marks are not all written writes no item, and one
//! whose done marks are not all written fails like a failed item write
//! (the caller runs it again; every applied write is then skipped).

use super::*;
use std::collections::BTreeSet;
use zigzag_model::changes;
use zigzag_model::Rollup;

/// The slices a flush touches: (projection index, rollup, slice start).
pub(super) type Slices = BTreeSet<(u8, Rollup, i64)>;

#[derive(Clone, Copy)]
pub(super) enum Phase {
    Begin,
    Done,
}

impl Flusher {
    /// Writes one phase's marks on every slice, retrying what failed
    /// retryably; a mark found already there (a replay) is done.
    pub(super) async fn write_changes(&self, slices: &Slices, writer: Writer, phase: Phase) -> Result<(), FlushError> {
        let todo: Vec<UpdateRequest> = slices
            .iter()
            .map(|&(p, rollup, start)| {
                let name = self.projections.get(p as usize).map_or("?", |km| km.name());
                match phase {
                    Phase::Begin => changes::begin(name, rollup, start, writer.lane, writer.k),
                    Phase::Done => changes::done(name, rollup, start, writer.lane, writer.k),
                }
            })
            .collect();
        self.write_upward(todo, Upward::ChangeMarks).await
    }
}
