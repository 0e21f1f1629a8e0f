//! What a report may read of the parts a layout version added
//! ([`crate::plan::Filling`]): a target the fill owns below the cut is
//! read for a range only where every source day of it was derived at the
//! source's current change marks ([`super::fill`]); a target counted from
//! the cut on, only from the cut. Elsewhere the planner reads the parts it
//! read before the change, so an answer never changes because a fill runs.

use super::fill::{day_end, marks_digest, progress, progress_sk, source_days};
use crate::error::{GatherError, Result};
use crate::plan::Filling;
use zigzag_core::table::SortedTable;
use zigzag_model::changes;
use zigzag_model::versions::{FillTarget, Version};

const DAY_MS: i64 = 86_400_000;

fn iso(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).map_or_else(String::new, |d| d.format("%Y-%m-%dT%H:%MZ").to_string())
}

/// How far one target is filled.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetState {
    pub target: FillTarget,
    /// Source days below the cut (by the statistics), and those derived
    /// (at any marks).
    pub days: Vec<i64>,
    pub derived: usize,
    pub items_written: u64,
    /// The end of the first run of derived days (None: none derived).
    pub derived_to: Option<i64>,
}

impl TargetState {
    pub fn percent(&self) -> f64 {
        if self.days.is_empty() {
            100.0
        } else {
            100.0 * self.derived as f64 / self.days.len() as f64
        }
    }
}

/// How far each fill target of `version` is (statistics and progress
/// read, no marks).
pub async fn states(table: &dyn SortedTable, version: &Version) -> Result<Vec<TargetState>> {
    let done = progress(table, version.number).await?;
    let mut out = Vec::new();
    for t in &version.changes.fills {
        let days = source_days(table, t, version.cut_ms).await?;
        let derived = days.iter().filter(|d| done.contains_key(&progress_sk(t, **d))).count();
        let items_written = days.iter().filter_map(|d| done.get(&progress_sk(t, *d))).map(|(_, n)| n).sum();
        let derived_to = days
            .iter()
            .take_while(|d| done.contains_key(&progress_sk(t, **d)))
            .last()
            .map(|d| day_end(*d, version.cut_ms));
        out.push(TargetState { target: t.clone(), days, derived, items_written, derived_to });
    }
    Ok(out)
}

/// What a report over `[from, to)` may read of `version`'s targets.
pub async fn filling(table: &dyn SortedTable, version: &Version, from: i64, to: i64) -> Result<Filling> {
    let mut filling = Filling::default();
    if version.number <= 1 || from >= version.cut_ms {
        return Ok(filling);
    }
    let cut = version.cut_ms;
    for t in &version.changes.counted {
        filling.insert(
            &t.projection,
            t.rollup,
            cut,
            format!("added by layout version {} and counted from {} on only", version.number, iso(cut)),
        );
    }
    if version.changes.fills.is_empty() {
        return Ok(filling);
    }
    let done = progress(table, version.number).await?;
    let states = states(table, version).await?;
    for state in states {
        let t = &state.target;
        // Every source day of the window below the cut (from the first the
        // statistics know: one without statistics but with marks is not
        // current), each derived at the source's marks as they are now?
        let mut stale_to = None;
        let first = state.days.first().copied().unwrap_or(cut);
        let mut day = from.max(first).div_euclid(DAY_MS) * DAY_MS;
        while day < to.min(cut) {
            let end = day_end(day, cut);
            let marks = changes::read(table, &t.source, t.source_rollup, day, end)
                .await
                .map_err(|e| GatherError::Query { pk: changes::CHANGES_PK.into(), source: e.into() })?;
            let current = match done.get(&progress_sk(t, day)) {
                Some((digest, _)) => *digest == marks_digest(&marks),
                None => marks.is_empty(),
            };
            if !current {
                stale_to = Some(end);
            }
            day += DAY_MS;
        }
        if let Some(readable_from) = stale_to {
            let up_to = state.derived_to.map_or("nothing derived yet".to_string(), |e| format!("derived up to {}", iso(e)));
            filling.insert(
                &t.projection,
                t.rollup,
                readable_from,
                format!(
                    "filling: {:.0} %, {up_to} (layout version {}; read from {} meanwhile)",
                    state.percent(),
                    version.number,
                    t.source
                ),
            );
        }
    }
    Ok(filling)
}
