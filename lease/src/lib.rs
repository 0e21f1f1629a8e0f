//! The lease protocol: how many `ingest` workers share a stream and one
//! aggregate table, exactly once, through crashes, pauses, handoffs and
//! resharding. One owner for all of it:
//!
//! - [`items`]: the lease table's items (shard leases, lanes) and every
//!   conditional write on them; [`checkpoint`]: a shard's checkpoint per
//!   item set (sets flushed on cadences of their own);
//! - [`owner`]: owners are process incarnations (`<id>~<start>.<nonce>`),
//!   so two live processes with one worker id never pass each other's
//!   fences;
//! - [`observer`]: expiry on this worker's monotonic clock;
//! - [`balance`]: one lease pass decided from a snapshot (take, steal,
//!   recover, free, complete, which shards may be read);
//! - [`coordinator`]: the worker's side over a `SortedTable`: join,
//!   heartbeat, flush intents, handoff, release; `join`: taking
//!   a lane, many workers at once; `pass`: a lease pass and what it reads
//!   (cheap at 1,000 shards: lane items on demand); `recovery`: dead
//!   workers' lanes freed or recovered; `table_io`: its reads and writes
//!   of the lease table, retried and counted;
//! - [`lifecycle`]: what precedes the first join, and the heartbeat and
//!   pass loops, reporting [`lifecycle::LeaseEvent`]s to the pipeline;
//! - [`epoch`]: the lease table bound to the aggregate table (a reset or
//!   foreign lease table is refused before anything is written);
//! - [`stream`]: lease state per incarnation of a stream (a stream
//!   deleted and created again starts fresh);
//! - [`owed`]: what a shard's slower item sets do not hold yet, recorded
//!   beside its checkpoint for readers that read coarse items;
//! - [`adoption`]: which layout version a lane's owner writes, said with
//!   the lane's take;
//! - [`seal`]: "no event before S any more", raised by `gather compact`,
//!   adopted and acknowledged by every worker before any bucket is closed;
//! - [`legacy`]: checkpoints of the single-writer format, migrated;
//! - [`report`]: the lease table as operators read it (`ingest leases`).
//!
//! docs/design/exactly-once.md ("Invariants") states the invariants.

pub mod adoption;
pub mod balance;
pub mod checkpoint;
pub mod coordinator;
pub mod epoch;
mod intent;
pub mod items;
mod join;
pub mod legacy;
pub mod lifecycle;
pub mod observer;
pub mod owed;
pub mod owner;
mod pass;
mod recovery;
pub mod report;
pub mod seal;
pub mod stream;
mod table_io;

pub use balance::{Plan, Ready, View};
pub use checkpoint::{Checkpoint, ItemSet};
pub use coordinator::{first_flush_after, Coordinator, LeaseOptions, LeaseStats, Recovery};
pub use intent::Began;
pub use items::{mark_attr, Beat, CorruptItem, Intent, IntentState, Lane, ShardLease, ShardRange};
pub use join::JOIN_ROUNDS;
pub use zigzag_model::source::ShardInfo;

use thiserror::Error;
use zigzag_core::table::TableError;

#[derive(Debug, Error)]
pub enum LeaseError {
    #[error("lease table: {0}")]
    Table(#[from] TableError),
    #[error(transparent)]
    Corrupt(#[from] CorruptItem),
    /// Another worker took this worker's lane: it was paused or cut off
    /// past the failover time. Everything in memory must be dropped.
    /// `joined`: which of this worker's joins held the lane (see
    /// `Coordinator::joined`), so a late report of an old loss is told
    /// apart from a loss of the lane held now.
    #[error("lane {lane} was taken by another worker (this worker was presumed dead)")]
    LaneLost { lane: u32, joined: u64 },
    /// A later process with this worker's id holds a live lane: this one
    /// was replaced (a restart while it was paused) or the id is used
    /// twice. It stops rather than fight the other for the id.
    #[error(
        "worker id {id} was started again elsewhere ({by} holds a live lane): this process ({me}) stops; \
         if both should run, give each its own --worker-id"
    )]
    Superseded { id: String, me: String, by: String },
    /// The aggregate table was written under another lease table (`epoch.rs`).
    #[error(
        "the aggregate table was written with lease table epoch {bound}, but this lease table's epoch is {found}: \
         it was reset, restored to another time than the aggregate table, or is another table. Writing now would \
         skip or double count events (flush numbers and checkpoints start over while the items keep their marks), \
         so nothing is written. To recover: restore the lease table that goes with this aggregate table (restore \
         both tables to the same point in time), or write into a new aggregate table"
    )]
    OtherLeaseTable { bound: String, found: String },
    /// A bookkeeping item (epoch, stream incarnation) that cannot be read.
    #[error("lease table: {0}")]
    Unreadable(String),
    /// The stream was deleted and created again while this worker read it.
    #[error(
        "stream {stream} was deleted and created again while this worker read it (incarnation {was}, now {now}): \
         stopping; a restart reads the new stream from the configured start and retires the old one's leases"
    )]
    StreamRecreated { stream: String, was: String, now: String },
    #[error("this worker has no lane (join first)")]
    NotJoined,
    #[error("lease table contended: {0}")]
    Contended(String),
    #[error("{0}")]
    Legacy(String),
    /// A dead worker's flush was begun under another layout: only a worker
    /// with that layout can recover it.
    #[error("lane {lane}: flush {k} was begun under another layout; a worker with that layout must recover it")]
    OtherLayout { lane: u32, k: u64 },
}

/// A whole-partition read's error as the table's (its keys are never
/// decoded, so only table errors occur).
pub(crate) fn table_error(e: zigzag_core::query::QueryError) -> TableError {
    match e {
        zigzag_core::query::QueryError::Table(t) => t,
        other => TableError::Store(Box::new(other)),
    }
}

impl zigzag_core::retry::Retryable for LeaseError {
    fn is_retryable(&self) -> bool {
        match self {
            LeaseError::Table(e) => e.is_retryable(),
            // Many workers joined at once: joining again later succeeds.
            LeaseError::Contended(_) => true,
            _ => false,
        }
    }
}
