//! `/metrics` of a layout change (`gather layout apply`): per version
//! whether every worker writes it, and per fill target its days, the days
//! derived, the items written and the read and write units spent, as
//! `gather layout status` prints them. Refreshed from the table in the
//! background at most once a [`FillGauges::EVERY`], and only on a table
//! whose layout has versions (one statistics read per target and one
//! progress read per version: what `status` reads).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use zigzag_core::table::SortedTable;
use zigzag_model::versions::Stored;

#[derive(Default)]
pub struct FillGauges {
    last: Mutex<Option<Instant>>,
}

impl FillGauges {
    pub const EVERY: Duration = Duration::from_secs(60);

    /// Refreshes the gauges in the background when due.
    pub fn refresh(&self, table: Arc<dyn SortedTable>, stored: &Stored) {
        if stored.versions.len() < 2 {
            return;
        }
        {
            let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|t| t.elapsed() < Self::EVERY) {
                return;
            }
            *last = Some(Instant::now());
        }
        let stored = stored.clone();
        tokio::spawn(async move {
            match zigzag_gather::relayout::coverage::states(table.as_ref(), &stored).await {
                Ok(states) => set(&stored, &states),
                Err(e) => tracing::warn!(error = %e, "could not read the fill's progress for /metrics"),
            }
        });
    }
}

fn set(stored: &Stored, states: &[zigzag_gather::relayout::coverage::TargetState]) {
    metrics::gauge!("zigzag_layout_version").set(f64::from(stored.newest.number));
    for v in stored.versions.iter().skip(1) {
        let adopted = if v.adopted { 1.0 } else { 0.0 };
        metrics::gauge!("zigzag_layout_version_adopted", "version" => v.number.to_string()).set(adopted);
    }
    for s in states {
        let t = &s.target;
        let labels = [
            ("version", s.version.to_string()),
            ("target", format!("{} {}", t.projection, t.rollup)),
            ("source", format!("{} {}", t.source, t.source_rollup)),
        ];
        metrics::gauge!("zigzag_layout_fill_days", &labels).set(s.days.len() as f64);
        metrics::gauge!("zigzag_layout_fill_days_derived", &labels).set(s.derived as f64);
        metrics::gauge!("zigzag_layout_fill_items_written", &labels).set(s.items_written as f64);
        metrics::gauge!("zigzag_layout_fill_read_units", &labels).set(s.rcu);
        metrics::gauge!("zigzag_layout_fill_write_units", &labels).set(s.wcu);
    }
}
