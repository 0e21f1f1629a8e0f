//! Whether every writer adopted a layout version announced while workers
//! ran (`gather layout apply` with workers running).
//!
//! Such a version's cut lies ahead of now by a grace. Each running worker
//! asks for newer versions every few seconds, writes everything it holds,
//! and joins again under the new one, saying on the lane it takes which
//! version it writes and the end of the newest event it wrote under an
//! older one (`zigzag_lease::adoption`). The version **holds** once every
//! owned lane writes it (or a later one) and no lane has a dead worker's
//! flush in flight: from then on every event a worker writes reaches the
//! version's targets from the cut on. It is **broken** when a lane's
//! older events reach past the cut: a worker wrote, under the old layout,
//! events the targets from the cut on were to hold (the worker did not
//! adopt it before the cut passed: a build from before versions, a worker
//! stuck or partitioned). Then nothing reads or fills the version's
//! targets, and `apply` says what to do.
//!
//! Until a version holds, reports read the parts they read before and the
//! fill waits (`coverage.rs`, `fill.rs`). Once it holds it is marked so
//! (`versions::mark_adopted`) and never judged again. Once judged broken
//! it is marked so too (`versions::mark_broken`), and stays broken: the
//! lanes that showed it are taken again by workers of a later start,
//! which show nothing of what was written past the cut.

use crate::error::{GatherError, Result};
use zigzag_core::schema::format_instant;
use zigzag_core::table::SortedTable;
use zigzag_lease::Lane;
use zigzag_model::versions::{self, Version};

/// Where a version's adoption stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Adoption {
    /// Every writer writes it; its targets may be read and filled.
    Held,
    /// Lanes that do not write it yet, in words.
    Waiting(Vec<String>),
    /// Lanes whose events under an older layout reach past the cut.
    Broken(Vec<String>),
}

/// The adoption of `version` given every lane (read after it was recorded).
pub fn judge(version: &Version, lanes: &[Lane]) -> Adoption {
    if version.adopted {
        return Adoption::Held;
    }
    let (mut waiting, mut broken) = (Vec::new(), Vec::new());
    for lane in lanes {
        match (&lane.owner, lane.in_flight()) {
            (Some(_), _) if lane.layout.version < version.number => waiting.push(format!(
                "lane {} ({}) writes layout version {}: a running worker adopts {} at its next layout check; a \
                 build from before versions never does (upgrade it)",
                lane.lane,
                lane.worker_id().unwrap_or("?"),
                lane.layout.version,
                version.number
            )),
            (Some(_), _) if lane.layout.high_ms > version.cut_ms => broken.push(format!(
                "lane {} ({}) wrote events up to {} under an older layout, past the cut {}",
                lane.lane,
                lane.worker_id().unwrap_or("?"),
                format_instant(lane.layout.high_ms),
                format_instant(version.cut_ms)
            )),
            (Some(_), _) => {}
            (None, Some(i)) => waiting.push(format!(
                "lane {} has flush {} of a dead worker in flight: a live worker recovers it",
                lane.lane, i.k
            )),
            // Its last owner left without adopting, after reading past the
            // cut under the old layout.
            (None, None) if lane.layout.version < version.number && lane.wrote_to_ms > version.cut_ms => {
                broken.push(format!(
                    "lane {} (free now) was last written under layout version {} with events up to {}, past the \
                     cut {}",
                    lane.lane,
                    lane.layout.version,
                    format_instant(lane.wrote_to_ms),
                    format_instant(version.cut_ms)
                ))
            }
            (None, None) => {}
        }
    }
    if !broken.is_empty() {
        Adoption::Broken(broken)
    } else if !waiting.is_empty() {
        Adoption::Waiting(waiting)
    } else {
        Adoption::Held
    }
}

/// Reads the lanes and judges `version`; marks it adopted once it holds.
pub async fn check(table: &dyn SortedTable, leases: &dyn SortedTable, version: &Version) -> Result<Adoption> {
    if version.adopted {
        return Ok(Adoption::Held);
    }
    let stale = |why: String| Ok(Adoption::Broken(vec![format!("judged broken earlier: {why}")]));
    if let Some(why) = &version.broken {
        return stale(why.clone());
    }
    let lanes = zigzag_lease::seal::read_lanes(leases).await.map_err(|e| GatherError::Config(e.to_string()))?;
    let table_error = |e: zigzag_model::layout::LayoutError| GatherError::Config(e.to_string());
    match judge(version, &lanes) {
        Adoption::Held => match versions::mark_adopted(table, version.number).await.map_err(table_error)? {
            true => Ok(Adoption::Held),
            // Judged broken by another reader in between.
            false => stale("by another `gather layout` command".into()),
        },
        // Recorded, so that it stays broken once those lanes are taken
        // again and show nothing of it.
        Adoption::Broken(lanes) => {
            versions::mark_broken(table, version.number, &lanes.join("; ")).await.map_err(table_error)?;
            Ok(Adoption::Broken(lanes))
        }
        waiting => Ok(waiting),
    }
}

/// What a broken version leaves, and what to do, in words.
pub fn broken_advice(version: &Version) -> String {
    format!(
        "layout version {} cannot be made exact as announced: nothing reads or fills its targets. Stop the workers \
         named, then apply the layout after it again (`gather layout apply` a copy with the targets under new names: \
         with the workers stopped the cut is chosen past everything written)",
        version.number
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use zigzag_lease::adoption::LayoutAck;
    use zigzag_model::layout::Layout;
    use zigzag_model::versions::Changes;

    fn version(adopted: bool) -> Version {
        Version {
            number: 2,
            layout: Layout::of(&zigzag_model::Config::default()),
            cut_ms: 3_600_000,
            changes: Changes::default(),
            at_ms: 0,
            adopted,
            broken: None,
        }
    }

    fn lane(n: u32, owner: Option<&str>, version: u32, high_ms: i64) -> Lane {
        Lane {
            lane: n,
            owner: owner.map(Into::into),
            stream: "s".into(),
            beater: owner.map(Into::into),
            beat: 1,
            flush: 0,
            intent: None,
            seal: 0,
            layout: LayoutAck { version, high_ms },
            wrote_to_ms: 0,
        }
    }

    #[test]
    fn a_version_holds_only_once_every_owned_lane_writes_it_with_older_events_before_the_cut() {
        let v = version(false);
        let free_stale = lane(3, None, 1, 9_999_999_999);
        let lanes = [lane(0, Some("a"), 2, 3_599_000), lane(1, Some("b"), 1, 0), free_stale.clone()];
        match judge(&v, &lanes) {
            Adoption::Waiting(w) => {
                assert_eq!(w.len(), 1, "{w:?}");
                assert!(w[0].contains("lane 1 (b) writes layout version 1"), "{w:?}");
            }
            other => panic!("lane 1 has not adopted: {other:?}"),
        }
        let lanes = [lane(0, Some("a"), 2, 3_599_000), lane(1, Some("b"), 3, 3_600_000), free_stale];
        assert_eq!(
            judge(&v, &lanes),
            Adoption::Held,
            "a later version counts; an event ending at the cut is before it"
        );
        let late = [lane(0, Some("a"), 2, 3_600_001)];
        match judge(&v, &late) {
            Adoption::Broken(b) => assert!(b[0].contains("past the cut"), "{b:?}"),
            other => panic!("an older event past the cut breaks it: {other:?}"),
        }
        assert_eq!(judge(&version(true), &late), Adoption::Held, "once held, never judged again");
        // A worker that left without adopting: its freed lane says how far
        // it read under the old layout.
        let left = |wrote_to_ms| Lane { wrote_to_ms, ..lane(4, None, 1, 0) };
        assert_eq!(judge(&v, &[left(3_600_000)]), Adoption::Held, "it left before the cut");
        match judge(&v, &[left(3_600_001)]) {
            Adoption::Broken(b) => assert!(b[0].contains("lane 4 (free now)"), "{b:?}"),
            other => panic!("it left after reading past the cut: {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_version_judged_broken_stays_broken_once_its_lanes_show_nothing_and_is_never_marked_adopted() {
        use zigzag_core::table::MemoryTable;
        let (table, no_lanes) = (MemoryTable::new(), MemoryTable::new());
        let v1 = Layout::of(&zigzag_model::Config::default());
        versions::ensure(&table, &v1).await.unwrap();
        let v2 = version(false).layout;
        let announced = versions::record(&table, 1, &v2, 3_600_000, Changes::default(), 0, false).await.unwrap();
        // What `check` records when it judges it broken.
        assert!(versions::mark_broken(&table, 2, "lane 0 (a) wrote events up to 02:00 past the cut").await.unwrap());
        let stored = versions::load(&table).await.unwrap().unwrap();
        assert_eq!(stored.newest.broken.as_deref(), Some("lane 0 (a) wrote events up to 02:00 past the cut"));
        // No lane shows anything now (the workers started again): judged
        // afresh it would hold; recorded, it stays broken.
        assert_eq!(judge(&announced, &[]), Adoption::Held);
        match check(&table, &no_lanes, &stored.newest).await.unwrap() {
            Adoption::Broken(why) => assert!(why[0].contains("judged broken earlier: lane 0 (a)"), "{why:?}"),
            other => panic!("a broken version stays broken: {other:?}"),
        }
        assert!(!versions::mark_adopted(&table, 2).await.unwrap(), "never marked adopted");
        assert!(versions::mark_broken(&table, 2, "again").await.unwrap(), "still broken");
        let stored = versions::load(&table).await.unwrap().unwrap();
        assert!(!stored.newest.adopted);
        let first = Some("lane 0 (a) wrote events up to 02:00 past the cut");
        assert_eq!(stored.newest.broken.as_deref(), first, "the first reason stays");
        // An adopted version is never marked broken.
        let v3 = Layout::of(&zigzag_model::Config::from_toml("rollups = [\"minute\", \"hour\"]\n").unwrap());
        versions::record(&table, 2, &v3, 7_200_000, Changes::default(), 0, false).await.unwrap();
        assert!(versions::mark_adopted(&table, 3).await.unwrap());
        assert!(!versions::mark_broken(&table, 3, "late").await.unwrap());
        let stored = versions::load(&table).await.unwrap().unwrap();
        assert!(stored.newest.adopted && stored.newest.broken.is_none());
    }
}
