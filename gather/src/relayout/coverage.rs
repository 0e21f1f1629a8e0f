//! What a report may read of the parts a layout version added
//! ([`crate::plan::Filling`]): a target the fill owns below the cut is
//! read for a range only where every source day of it was derived at the
//! source's current change marks ([`super::fill`]); a target counted from
//! the cut on, only from the cut. Elsewhere the planner reads the parts it
//! read before the change, so an answer never changes because a fill runs.

use super::fill::{day_end, marks_digest, progress, progress_sk, source_days, DAY_MS};
use crate::error::{GatherError, Result};
use crate::plan::Filling;
use std::collections::BTreeMap;
use zigzag_core::schema::format_instant;
use zigzag_core::table::SortedTable;
use zigzag_model::changes;
use zigzag_model::versions::{Added, FillTarget, Stored, Version};

/// A fill's progress items, by key: what each unit was derived at and
/// what it spent.
type Progress = BTreeMap<Vec<u8>, super::fill::Recorded>;

/// How far one target is filled.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetState {
    /// The version that added it.
    pub version: u32,
    pub target: FillTarget,
    /// Source days below the cut (by the statistics), and those derived
    /// (at any marks).
    pub days: Vec<i64>,
    pub derived: usize,
    pub items_written: u64,
    /// Read and write units the derived days spent.
    pub rcu: f64,
    pub wcu: f64,
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

/// How far one fill target of `version` is (statistics and progress
/// read, no marks).
async fn state(table: &dyn SortedTable, version: &Version, t: &FillTarget, done: &Progress) -> Result<TargetState> {
    let days = source_days(table, t, version.cut_ms).await?;
    let derived = days.iter().filter(|d| done.contains_key(&progress_sk(t, **d))).count();
    let derived_units: Vec<_> = days.iter().filter_map(|d| done.get(&progress_sk(t, *d))).collect();
    let items_written = derived_units.iter().map(|d| d.items).sum();
    let (rcu, wcu) = (derived_units.iter().map(|d| d.rcu).sum(), derived_units.iter().map(|d| d.wcu).sum());
    let derived_to =
        days.iter().take_while(|d| done.contains_key(&progress_sk(t, **d))).last().map(|d| day_end(*d, version.cut_ms));
    Ok(TargetState { version: version.number, target: t.clone(), days, derived, items_written, rcu, wcu, derived_to })
}

/// How far each fill target the table's versions added and its layout
/// still writes is.
pub async fn states(table: &dyn SortedTable, stored: &Stored) -> Result<Vec<TargetState>> {
    let mut out = Vec::new();
    let mut done: BTreeMap<u32, Progress> = BTreeMap::new();
    for (v, added) in stored.added() {
        let Added::Fill(t) = added else { continue };
        if let std::collections::btree_map::Entry::Vacant(e) = done.entry(v.number) {
            e.insert(progress(table, v.number).await?);
        }
        out.push(state(table, v, t, &done[&v.number]).await?);
    }
    Ok(out)
}

/// What a report over `[from, to)` may read of the targets the table's
/// versions added (nothing to say on a table with one version): its
/// layout items read, and the window widened by a day each way, since a
/// plan may read the buckets around it. Throttled reads are retried, as
/// the report's own are.
pub async fn filling_of(table: &dyn SortedTable, from: i64, to: i64) -> Result<Filling> {
    let table = &crate::throttle::Retried::new(table);
    let stored = zigzag_model::versions::load(table).await.map_err(|e| GatherError::Config(e.to_string()))?;
    match stored {
        Some(s) if s.versions.len() > 1 => {
            filling(table, &s, from.saturating_sub(DAY_MS), to.saturating_add(DAY_MS)).await
        }
        _ => Ok(Filling::default()),
    }
}

/// What a report over `[from, to)` may read of the targets the table's
/// versions added.
pub async fn filling(table: &dyn SortedTable, stored: &Stored, from: i64, to: i64) -> Result<Filling> {
    let mut filling = Filling::default();
    // A retention changed by a version: items written before its cut carry
    // the expiry of the one before.
    for pair in stored.versions.windows(2) {
        let (before, v) = (&pair[0], &pair[1]);
        if before.layout.retention != v.layout.retention {
            filling.kept_before(v.cut_ms, before.layout.retention.clone(), v.number);
        }
    }
    // A measure a projection gained: no item of a bucket before the cut
    // holds it.
    for f in stored.measured_from() {
        if !f.adopted {
            let note = format!(
                "added by layout version {}, which not every worker writes yet (`gather layout status`)",
                f.version
            );
            filling.insert_measure(&f.projection, &f.measure, i64::MAX, note);
        } else if from < f.cut_ms {
            let note =
                format!("added by layout version {} and counted from {} on only", f.version, format_instant(f.cut_ms));
            filling.insert_measure(&f.projection, &f.measure, f.cut_ms, note);
        }
    }
    let mut done: BTreeMap<u32, Progress> = BTreeMap::new();
    for (version, added) in stored.added() {
        let cut = version.cut_ms;
        if !version.adopted {
            // Announced to running workers, not yet written by all of them
            // (`adoption.rs`): nothing of it is read, before or after the cut.
            let note = format!(
                "added by layout version {}, which not every worker writes yet (`gather layout status`)",
                version.number
            );
            filling.insert(added.projection(), added.rollup(), i64::MAX, note);
            continue;
        }
        if from >= cut {
            continue;
        }
        let t = match added {
            Added::Counted(t) => {
                let note = format!(
                    "added by layout version {} and counted from {} on only",
                    version.number,
                    format_instant(cut)
                );
                filling.insert(&t.projection, t.rollup, cut, note);
                continue;
            }
            Added::Fill(t) => t,
        };
        if let std::collections::btree_map::Entry::Vacant(e) = done.entry(version.number) {
            e.insert(progress(table, version.number).await?);
        }
        let done = &done[&version.number];
        let state = state(table, version, t, done).await?;
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
                Some(d) => d.marks == marks_digest(&marks),
                None => marks.is_empty(),
            };
            if !current {
                stale_to = Some(end);
            }
            day += DAY_MS;
        }
        if let Some(readable_from) = stale_to {
            let up_to = state
                .derived_to
                .map_or("nothing derived yet".to_string(), |e| format!("derived up to {}", format_instant(e)));
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

#[cfg(test)]
mod tests {
    use super::*;
    use zigzag_core::table::MemoryTable;
    use zigzag_model::layout::Layout;
    use zigzag_model::{Config, Rollup};

    #[tokio::test]
    async fn a_version_that_lengthens_the_retention_keeps_the_shorter_one_for_buckets_before_its_cut() {
        let table = MemoryTable::new();
        let short = Layout::of(&Config::from_toml("[retention]\nminute = \"1d\"\n").unwrap());
        let long = Layout::of(&Config::from_toml("[retention]\nminute = \"7d\"\n").unwrap());
        zigzag_model::versions::ensure(&table, &short).await.unwrap();
        let cut = 1_795_132_800_000;
        zigzag_model::versions::record(&table, 1, &long, cut, Default::default(), cut, true).await.unwrap();
        let stored = zigzag_model::versions::load(&table).await.unwrap().unwrap();
        let f = filling(&table, &stored, cut - 3 * DAY_MS, cut + DAY_MS).await.unwrap();
        let now = cut + DAY_MS;
        let e = f.kept(Rollup::Minute, cut - 2 * DAY_MS, now).unwrap_err();
        assert!(e.contains("kept 1d") && e.contains("layout version 2"), "{e}");
        assert!(f.kept(Rollup::Minute, cut, now).is_ok(), "from the cut on, the longer one");
        assert!(f.kept(Rollup::Hour, cut - 2 * DAY_MS, now).is_ok(), "hours were kept forever under both");
    }
}
