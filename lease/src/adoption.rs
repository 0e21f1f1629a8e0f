//! Layout versions in the lease table: which version of the table's layout
//! (`zigzag_model::versions`) a lane's owner writes, how far the events it
//! wrote under an older one reach, and which layout numbers an apart
//! checkpoint's item sets.
//!
//! Written with the lane's take (`join.rs`), in the same conditional write,
//! so no reader ever sees a lane owned by one worker with another's
//! acknowledgement: a worker running an older version holds a lane that
//! says so. `gather layout apply` announces a version to running workers;
//! each writes everything it holds, leaves its lane and joins again under
//! the new version (`zigzag_ingest::pipeline`), saying on its new lane how
//! far the events it wrote before reached. The version holds once every
//! owned lane acknowledges it, and its cut is past every such event
//! (`zigzag_gather::relayout::adoption`).
//!
//! A worker that died between a faster and a slower cadence's flushes
//! leaves shards whose item sets are apart, numbered by its layout. The
//! checkpoint is written with that layout's digest (`ld`); a worker
//! of another version renumbers it by the sets' names before reading
//! (`Checkpoint::renumber`, [`crate::items::renumber_checkpoint`]).

use crate::coordinator::{lock, Coordinator};
use crate::LeaseError;
use zigzag_core::table::{UpdateOutcome, UpdateRequest};

/// On a lane: the layout version its owner writes.
pub(crate) const VERSION: &str = "lv";
/// On a lane: the end (ms) of the newest event its owner's process wrote
/// under an older version (0: none).
pub(crate) const HIGH: &str = "lh";
/// On a lane: the end (ms) of the newest event its owner had read when it
/// began its last flush, under the version it writes: kept after the lane
/// is freed, so a worker that left without adopting a version still says
/// how far it wrote under the old one.
pub(crate) const WROTE_TO: &str = "ln";
/// On a shard lease whose checkpoint is apart: the digest of the layout
/// that numbers its item sets (a set's number is its place in a layout's
/// order, so another version numbers them otherwise).
pub(crate) const SETS_OF: &str = "ld";

/// What a worker says of its layout on the lane it takes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LayoutAck {
    /// The version it writes (0: a worker of a build before versions, or a
    /// lane taken before they existed).
    pub version: u32,
    /// The end of the newest event it wrote under an older version (ms).
    pub high_ms: i64,
}

impl LayoutAck {
    /// The lane write `req` also recording this acknowledgement.
    pub fn stamp(&self, req: UpdateRequest) -> UpdateRequest {
        req.set(VERSION, i64::from(self.version)).set(HIGH, self.high_ms)
    }
}

impl Coordinator {
    /// The layout version this worker writes and how far it wrote under an
    /// older one, said on every lane it takes from now on.
    pub fn set_layout(&self, ack: LayoutAck) {
        *lock(&self.layout) = ack;
    }

    /// The end (ms) of the newest event read so far: said with every
    /// intent from now on.
    pub fn read_events_to(&self, ms: i64) {
        self.read_to.fetch_max(ms, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn events_read_to(&self) -> i64 {
        self.read_to.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn layout_ack(&self) -> LayoutAck {
        *lock(&self.layout)
    }

    /// Renumbers the apart checkpoint of a lease this worker holds (`from`,
    /// numbered by another layout) as `to`, numbered by `layout`. False:
    /// the lease moved since (lost, or completed by a recovery); the next
    /// pass says what it is now.
    pub async fn renumber(
        &self,
        shard: &str,
        lease: u64,
        (from, to): (&crate::Checkpoint, &crate::Checkpoint),
        layout: &str,
    ) -> Result<bool, LeaseError> {
        let me = self.worker().to_string();
        let req = crate::items::renumber_checkpoint(self.stream(), shard, lease, &me, (from, to), layout);
        Ok(matches!(self.write_lease(&req, false).await?, UpdateOutcome::Applied(_)))
    }
}
