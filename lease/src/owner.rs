//! Who owns a lane or a lease: a process incarnation, not a worker id.
//!
//! Operators choose worker ids (`--worker-id`), and a restart with the same
//! id should resume its predecessor's shards at once. But two live
//! processes with one id (a deployment that pins the id on two replicas, a
//! paused pod whose replacement started) must never pass each other's
//! fences. So the owner written in the lease table is `<id>~<started>.<nonce>`:
//! the id, the process's start (ms since the epoch, its own clock) and
//! random bits. An owner string is compared whole everywhere a fence is
//! checked; only two rules look inside it:
//!
//! - a lane of an *older* incarnation of this worker's id is expired at
//!   once (the restart's fast takeover; `Observer`);
//! - a live lane of a *newer* incarnation means this process was replaced:
//!   it stops with [`crate::LeaseError::Superseded`] instead of fighting
//!   the replacement for the id.
//!
//! Owners written before incarnations existed (no `~`) count as the oldest
//! incarnation of their id. Start times come from different hosts' clocks:
//! they only decide which of two same-id processes yields, never a fence.

use std::cmp::Ordering;

/// This process's owner string for worker id `id`.
pub fn incarnation(id: &str) -> String {
    let started =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    format!("{id}~{started}.{:08x}", rand::random::<u32>())
}

/// An owner string's worker id and start (None: written before
/// incarnations, or not one of ours).
pub fn parse(owner: &str) -> (&str, Option<u64>) {
    let Some((id, inc)) = owner.rsplit_once('~') else { return (owner, None) };
    let Some((started, nonce)) = inc.split_once('.') else { return (owner, None) };
    match (started.parse::<u64>(), u32::from_str_radix(nonce, 16)) {
        (Ok(s), Ok(_)) if nonce.len() == 8 => (id, Some(s)),
        _ => (owner, None),
    }
}

/// The worker id an owner string belongs to.
pub fn worker_id(owner: &str) -> &str {
    parse(owner).0
}

/// Whether `newer` is a later incarnation of `older`'s worker id (same id,
/// a different owner, started later; ties broken by the whole string so
/// exactly one of two same-id owners supersedes the other).
pub fn supersedes(newer: &str, older: &str) -> bool {
    let ((a, a_started), (b, b_started)) = (parse(newer), parse(older));
    if a != b || newer == older {
        return false;
    }
    match a_started.cmp(&b_started) {
        Ordering::Greater => true,
        Ordering::Less => false,
        Ordering::Equal => newer > older,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_incarnation_parses_back_to_its_id_whatever_the_id_holds() {
        for id in ["a", "host-1f2e", "x~y", "we.ird~1.2", ""] {
            let me = incarnation(id);
            assert_eq!(worker_id(&me), id, "{me}");
            assert!(parse(&me).1.is_some(), "{me}");
        }
        assert_eq!(parse("legacy"), ("legacy", None));
        assert_eq!(parse("a~notanumber.0000000f"), ("a~notanumber.0000000f", None));
        assert_eq!(parse("a~12.zz"), ("a~12.zz", None));
    }

    #[test]
    fn the_later_start_supersedes_and_exactly_one_of_two_does() {
        let (old, new) = ("w~100.0000000a", "w~200.00000001");
        assert!(supersedes(new, old));
        assert!(!supersedes(old, new));
        assert!(supersedes(new, "w"), "any incarnation supersedes a pre-incarnation owner");
        assert!(!supersedes("w", new));
        assert!(!supersedes(new, new), "never itself");
        assert!(!supersedes("v~300.00000001", old), "another id never");
        let (x, y) = ("w~100.00000001", "w~100.00000002");
        assert!(supersedes(x, y) != supersedes(y, x), "same start: exactly one yields");
    }
}
