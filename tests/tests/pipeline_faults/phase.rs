//! The lease table read as a worker reads it, and every store call
//! classified by the phase of the protocol it belongs to.

use super::*;

/// Reads the lease table with the crate's own reads and item parsers
/// (strongly consistent, every page); it writes nothing.
pub(crate) fn reader(table: &Arc<dyn SortedTable>) -> Coordinator {
    Coordinator::new(table.clone(), LeaseOptions::new(STREAM, "reader"))
}

pub(crate) async fn read_lanes(table: &Arc<dyn SortedTable>) -> Vec<Lane> {
    reader(table).read_lanes().await.expect("the lanes")
}

pub(crate) async fn read_leases(table: &Arc<dyn SortedTable>) -> Vec<ShardLease> {
    reader(table).read_leases().await.expect("the shard leases")
}

// ---------------------------------------------------------------------------
// Store calls, by phase of the protocol.

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Phase {
    /// Claiming a free lane's beat item (joining: before its lane item).
    ClaimBeat,
    /// Claiming a dead worker's beat item (before taking its lane item).
    TakeBeat,
    /// Taking a free lane (a worker starting or rejoining).
    Join,
    /// Taking a dead worker's lane (to recover its flush or free the lane).
    TakeLane,
    Heartbeat,
    /// Freeing a lane (leaving, or after a recovery) ...
    Release,
    /// ... and then its beat item.
    ReleaseBeat,
    CreateLease,
    TakeLease,
    /// Asking another worker for a lease (balancing).
    Handoff,
    /// Handing a lease over, or releasing it.
    Give,
    /// The flush intent: recorded open, ...
    Open,
    /// ... the consistent read of the shard leases right after it (the
    /// proof that they are still held), ...
    Proof,
    /// ... marked valid with the ranges proven held, ...
    Validate,
    /// ... the change marks of the slices it touches, begun (before its
    /// items) and done (after them), ...
    Changes,
    /// ... the value catalog's new values of its keys (before its items), ...
    Values,
    /// ... the aggregate item writes, under the lane's mark, ...
    Items,
    /// ... the planner's statistics merged (no mark: merges are idempotent), ...
    Statistics,
    /// ... committed, ...
    Commit,
    /// ... and each shard's checkpoint moved (compare-and-set).
    Advance,
    /// A dead worker's open intent dropped (a recovery).
    Abort,
    /// Recording (or checking) the layout in the aggregate table, and the
    /// lease table's epoch there.
    Layout,
    /// The lease table's epoch made (or read back), a stream's incarnation
    /// or its key recorded: once per worker start.
    Epoch,
    /// A seal acknowledged on the worker's lane.
    AcknowledgeSeal,
    /// Where a shard's first reader began, recorded in its lease.
    RecordStart,
    /// A finished lease no longer needed deleted (its children all started).
    Retire,
    /// The stream's lease generation moved on (after a lease write the
    /// other workers' passes must see).
    Generation,
    /// Other reads of the lease table (passes, joining, the legacy check).
    ReadLanes,
    ReadLeases,
    ReadLegacy,
}

pub(crate) fn action<'a>(req: &'a UpdateRequest, attr: &str) -> Option<&'a Action> {
    req.actions.iter().find(|(a, _)| a == attr).map(|(_, act)| act)
}

pub(crate) fn set_str<'a>(req: &'a UpdateRequest, attr: &str) -> Option<&'a str> {
    match action(req, attr) {
        Some(Action::Set(AttrValue::S(s))) => Some(s),
        _ => None,
    }
}

pub(crate) fn guarded(req: &UpdateRequest, attr: &str) -> bool {
    req.guards.iter().any(|g| g.attr == attr)
}

pub(crate) fn lease_table_phase(req: &UpdateRequest) -> Phase {
    if req.pk == LANES_PK {
        match set_str(req, "state") {
            Some("open") => Phase::Open,
            Some("valid") => Phase::Validate,
            Some("done") if action(req, "flush").is_some() => Phase::Commit,
            Some("done") => Phase::Abort,
            Some(s) => panic!("an unknown intent state {s:?}: {req:?}"),
            None => match set_str(req, "owner") {
                Some("") => Phase::Release,
                // Taking a free lane is guarded by an empty owner.
                Some(_) if req.guards.iter().any(|g| g.attr == "owner" && g.value == AttrValue::S(String::new())) => {
                    Phase::Join
                }
                Some(_) => Phase::TakeLane,
                None if action(req, "seal").is_some() => Phase::AcknowledgeSeal,
                None => panic!("an unknown lane update: {req:?}"),
            },
        }
    } else if req.pk == BEATS_PK {
        match set_str(req, "owner") {
            Some("") => Phase::ReleaseBeat,
            Some(_) if guarded(req, "beat") => Phase::TakeBeat,
            Some(_) => Phase::ClaimBeat,
            None if action(req, "beat").is_some() => Phase::Heartbeat,
            None => panic!("an unknown beat update: {req:?}"),
        }
    } else if req.pk == zigzag_lease::items::generation_pk(STREAM) {
        Phase::Generation
    } else if req.pk == zigzag_lease::epoch::EPOCH_PK
        || req.pk == zigzag_lease::stream::STREAMS_PK
        || req.pk == zigzag_lease::seal::STREAM_KEYS_PK
    {
        Phase::Epoch
    } else if req.pk == shards_pk(STREAM) {
        if action(req, "start_ms").is_some() {
            Phase::RecordStart
        } else if action(req, "cp").is_some() {
            Phase::Advance
        } else if action(req, "owner").is_some() {
            if guarded(req, "owner") {
                Phase::Give
            } else {
                Phase::TakeLease
            }
        } else if action(req, "handoff").is_some() {
            Phase::Handoff
        } else if matches!(action(req, "lease"), Some(Action::SetIfAbsent(_))) {
            Phase::CreateLease
        } else {
            panic!("an unknown lease update: {req:?}")
        }
    } else {
        panic!("an update outside the lease table's partitions: {req:?}")
    }
}

/// An open or validated intent with a range to SHARD_END, or an advance
/// that marks its shard finished.
pub(crate) fn ends_a_shard(phase: Phase, req: &UpdateRequest) -> bool {
    match phase {
        Phase::Advance => action(req, "fin") == Some(&Action::Set(AttrValue::Bool(true))),
        Phase::Open | Phase::Validate => set_str(req, "ranges").is_some_and(|r| r.contains("\"e\":true")),
        _ => false,
    }
}

/// The lane and flush number an item write is marked with (`w@<lane>` = k).
pub(crate) fn item_mark(req: &UpdateRequest) -> (u32, u64) {
    req.actions
        .iter()
        .find_map(|(attr, act)| {
            let lane = zigzag_model::mark::mark_lane(attr)?;
            match act {
                Action::Set(AttrValue::N(k)) => Some((lane, u64::try_from(*k).ok()?)),
                _ => None,
            }
        })
        .unwrap_or_else(|| panic!("an item write without its lane's mark: {req:?}"))
}

/// The lane a lease-table write is on, if a lane item.
pub(crate) fn lane_of(req: &UpdateRequest) -> Option<u32> {
    (req.pk == LANES_PK || req.pk == BEATS_PK)
        .then(|| u32::from_be_bytes(req.sk.as_slice().try_into().expect("4 bytes")))
}
