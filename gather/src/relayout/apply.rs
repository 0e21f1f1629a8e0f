//! `gather layout apply`: a priced diff made a version of the table's
//! layout (`zigzag_model::versions`), then filled ([`super::fill`]).
//!
//! What this build applies: projections and rollups added (summed from the
//! table where a source keeps their dimensions and measures, else counted
//! from the cut on), projections and rollups dropped (reports stop reading
//! them; their items are left to their retention), retention, ratios and
//! decoding, and measures a projection gains (counted from the cut on:
//! items of earlier buckets hold none of them). It refuses, saying what to
//! do instead, what cannot stay exact (`layout_diff`'s refusals) and what
//! it does not build yet: a projection's scatter changed in place, and a
//! fill whose source the same version drops.
//!
//! The cut is the first bucket edge of the coarsest target rollup at or
//! after both now and the end of the newest finest bucket the table holds
//! (`statistics::written_to`: past every event written). With
//! no worker holding a lane or with a flush in flight, every bucket before
//! it was written under the old layout (the fill's), every one from it on
//! is written by workers that join under the new one. With workers
//! running, "now" is a grace ahead (`--adopt-within`), the version is
//! recorded as announced, and the workers adopt it while they run
//! ([`super::adoption`]). A worker of the old layout started later is
//! refused (`versions::ensure`).

use super::Priced;
use crate::error::{GatherError, Result};
use zigzag_core::table::SortedTable;
use zigzag_model::layout_diff::Fill;
use zigzag_model::versions::{Changes, FillTarget, NewMeasures, NewTarget};
use zigzag_model::{Projections, Rollup};

/// The version's changes from a priced diff, or every reason it cannot be
/// applied.
pub fn version_changes(
    priced: &[Priced],
    old: &Projections,
    new: &Projections,
) -> std::result::Result<Changes, Vec<String>> {
    let mut changes = Changes::default();
    let mut refused = Vec::new();
    for p in priced {
        let c = &p.change;
        match (&c.fill, &c.target) {
            (Fill::Refused(why), _) => refused.push(format!("{}: {why}", c.what)),
            (Fill::From(_), Some((projection, rollup))) => {
                if old.by_name(projection).is_some_and(|km| km.rollups().any(|r| r == *rollup)) {
                    refused.push(format!(
                        "{}: re-spreading a projection in place is not built yet; add a projection under a new name \
                         with the new scatter (it is summed from this one), and drop this one in a later version",
                        c.what
                    ));
                    continue;
                }
                let Some(price) = &p.price else {
                    refused.push(format!("{}: no source of it is in the table's statistics", c.what));
                    continue;
                };
                if new
                    .by_name(&price.source.projection)
                    .is_none_or(|km| !km.rollups().any(|r| r == price.source.rollup))
                {
                    refused.push(format!(
                        "{}: it is summed from {} {}, which this layout drops; drop it in a later version, once the \
                         fill is done",
                        c.what, price.source.projection, price.source.rollup
                    ));
                    continue;
                }
                changes.fills.push(FillTarget {
                    projection: projection.clone(),
                    rollup: *rollup,
                    source: price.source.projection.clone(),
                    source_rollup: price.source.rollup,
                });
            }
            (Fill::FromAdoption(_), Some((projection, rollup))) => {
                changes.counted.push(NewTarget { projection: projection.clone(), rollup: *rollup })
            }
            (Fill::FromAdoption(_), None) => match &c.gained {
                Some((projection, measures)) => {
                    changes.measures.push(NewMeasures { projection: projection.clone(), measures: measures.clone() })
                }
                None => refused.push(format!("{}: nothing in the table can fill it", c.what)),
            },
            (Fill::From(_), None) | (Fill::Nothing(_), _) => {}
        }
    }
    if refused.is_empty() {
        Ok(changes)
    } else {
        Err(refused)
    }
}

/// The cut: the first edge of the coarsest target rollup (or rollup of a
/// projection gaining a measure, read in `new`) at or after both `now` and
/// `table_end` (past every event the table holds).
pub fn cut(changes: &Changes, new: &Projections, now: i64, table_end: Option<i64>) -> i64 {
    let gaining = changes.measures.iter().filter_map(|g| new.by_name(&g.projection)).flat_map(|km| km.rollups());
    let rollups = changes.fills.iter().map(|f| f.rollup).chain(changes.counted.iter().map(|t| t.rollup)).chain(gaining);
    let unit = rollups.map(Rollup::unit_ms).max().unwrap_or(60_000);
    let at = now.max(table_end.unwrap_or(i64::MIN));
    at.div_euclid(unit) * unit + if at.rem_euclid(unit) == 0 { 0 } else { unit }
}

/// The lanes a worker holds or has a flush in flight on, in words (empty:
/// none; a version is adopted as it is recorded).
pub async fn workers_running(leases: &dyn SortedTable) -> Result<Vec<String>> {
    let lanes = zigzag_lease::seal::read_lanes(leases).await.map_err(|e| GatherError::Config(e.to_string()))?;
    Ok(lanes
        .iter()
        .filter_map(|l| match (&l.owner, l.in_flight()) {
            (Some(owner), _) => Some(format!("lane {} is held by {owner}", l.lane)),
            (None, Some(i)) => Some(format!("lane {} has flush {} in flight (its worker died)", l.lane, i.k)),
            (None, None) => None,
        })
        .collect())
}
