//! `gather layout`: the layout recorded in the table, as a person reads
//! and edits it.

use super::{reader_config, stored_layout};
use anyhow::{bail, Context, Result};
use clap::Subcommand;
use std::path::{Path, PathBuf};
use zigzag_app::store::StoreArgs;
use zigzag_model::layout::Layout;
use zigzag_model::Projections;

#[derive(Subcommand)]
pub(crate) enum LayoutCmd {
    /// Print the table's layout as the configuration file `ingest --config`
    /// reads: rollups, schema, dimensions, measures, projections, scatter,
    /// retention, and the flush cadences of --config (else the defaults:
    /// cadences are not recorded with the layout). Edit its flush section
    /// to change cadences without retyping the layout
    Show,
    /// Each change from the table's layout to NEW's, how it is made exact
    /// (summed from items the table holds, counted from the workers'
    /// adoption on, or refused with what to do instead), and what filling
    /// it costs before anything is written: items and RCU read, items and
    /// WCU written (at most), dollars on demand, time at the budget
    Diff {
        /// The configuration file with the new layout
        new: PathBuf,
        /// The read budget the time is given at
        #[arg(long, default_value_t = 1000.0)]
        rcu_per_sec: f64,
        /// The write budget the time is given at
        #[arg(long, default_value_t = 1000.0)]
        wcu_per_sec: f64,
    },
    /// Records NEW as the table's next layout version and fills what the
    /// table's items can fill, below the version's cut (see `diff`). Every
    /// worker must be stopped first; started again (without --config, or
    /// with NEW), they write the new layout from the cut on
    Apply {
        /// The configuration file with the new layout
        new: PathBuf,
        #[command(flatten)]
        budget: Budget,
        /// The clock the cut is chosen by (default: now)
        #[arg(long, hide = true)]
        now: Option<String>,
        /// With workers running: the cut lies at least this far ahead, so
        /// that every worker adopts the version before it (they ask every
        /// 10 s)
        #[arg(long, default_value = "2m", value_parser = zigzag_app::duration::positive)]
        adopt_within: std::time::Duration,
        /// With workers running: how long to wait for all of them to adopt
        /// it before leaving the fill to `gather layout fill`
        #[arg(long, default_value = "10m", value_parser = zigzag_app::duration::positive)]
        wait: std::time::Duration,
        /// Accept a cut more than a day past now because the table holds
        /// future-dated events (the cut lies past every event written)
        #[arg(long)]
        cut_past_future_events: bool,
    },
    /// Fills the newest version's targets again where their sources changed
    /// since (late events) or a fill stopped: only what is not current is
    /// written
    Fill {
        #[command(flatten)]
        budget: Budget,
    },
    /// Each change of the newest version and how far its fill is
    Status,
    /// Deletes the items of every projection or rollup an earlier version
    /// wrote and the newest does not (reports stopped reading them when it
    /// was dropped), and says the space freed. Without it they stay until
    /// their retention deletes them
    DeleteDropped {
        /// Write units per second the deletes may use (default: unpaced)
        #[arg(long)]
        wcu_per_sec: Option<f64>,
    },
}

/// A fill's budget.
#[derive(clap::Args, Clone, Copy)]
pub(crate) struct Budget {
    /// Read units per second the fill may use (default: unpaced)
    #[arg(long)]
    rcu_per_sec: Option<f64>,
    /// Write units per second the fill may use (default: unpaced)
    #[arg(long)]
    wcu_per_sec: Option<f64>,
}

pub(crate) async fn layout_cmd(store: &StoreArgs, config: Option<&Path>, cmd: LayoutCmd) -> Result<()> {
    match cmd {
        LayoutCmd::Show => show(store, config).await,
        LayoutCmd::Diff { new, rcu_per_sec, wcu_per_sec } => {
            if !(rcu_per_sec > 0.0 && wcu_per_sec > 0.0) {
                bail!("--rcu-per-sec and --wcu-per-sec must be positive");
            }
            diff(store, config, &new, rcu_per_sec, wcu_per_sec).await
        }
        LayoutCmd::Apply { new, budget, now, adopt_within, wait, cut_past_future_events } => {
            let now = match now {
                Some(t) => zigzag_gather::window::parse_time("--now", &t, chrono::Utc::now().timestamp_millis())?,
                None => chrono::Utc::now().timestamp_millis(),
            };
            let announce =
                super::relayout_cmd::Announce { grace: adopt_within, wait, future_cut: cut_past_future_events };
            super::relayout_cmd::apply(store, config, &new, budget.check()?, now, announce).await
        }
        LayoutCmd::Fill { budget } => super::relayout_cmd::fill_again(store, config, budget.check()?).await,
        LayoutCmd::Status => super::relayout_cmd::status(store).await,
        LayoutCmd::DeleteDropped { wcu_per_sec } => {
            let budget = Budget { rcu_per_sec: None, wcu_per_sec }.check()?;
            super::relayout_cmd::delete_dropped(store, config, budget.1).await
        }
    }
}

impl Budget {
    fn check(self) -> Result<(Option<f64>, Option<f64>)> {
        for (name, v) in [("--rcu-per-sec", self.rcu_per_sec), ("--wcu-per-sec", self.wcu_per_sec)] {
            if v.is_some_and(|v| v.is_nan() || v <= 0.0) {
                bail!("{name} must be positive");
            }
        }
        Ok((self.rcu_per_sec, self.wcu_per_sec))
    }
}

async fn show(store: &StoreArgs, path: Option<&Path>) -> Result<()> {
    let table = store.open_aggregates().await?;
    let Some(stored) = stored_layout(store, table.as_ref()).await? else {
        bail!("the table records no layout: no ingest has written to it yet (ingest records its layout first)");
    };
    let given = zigzag_app::config::load(path, zigzag_app::config::Base::Full, &[])?;
    let whose = match path {
        Some(p) => format!("those of --config {}", p.display()),
        None => "the defaults (give --config FILE for a file's)".to_string(),
    };
    let text = stored.to_toml(&given.flush)?;
    print!(
        "# The layout recorded in the table (digest {}), as `ingest --config` reads it.\n# [flush] is not part of \
         the layout: its cadences are {whose}; edit them here.\n\n{text}",
        stored.digest()
    );
    Ok(())
}

async fn diff(store: &StoreArgs, path: Option<&Path>, new: &Path, rcu_per_sec: f64, wcu_per_sec: f64) -> Result<()> {
    let table = store.open_aggregates().await?;
    let Some(stored) = stored_layout(store, table.as_ref()).await? else {
        bail!("the table records no layout: no ingest has written to it yet, so any layout is its first");
    };
    let given = zigzag_app::config::load(path, zigzag_app::config::Base::Full, &[])?;
    let old = reader_config(&given, Some(&stored), path)?;
    let next = zigzag_app::config::load(Some(new), zigzag_app::config::Base::Full, &[])?;
    let projections = Projections::new(&old)?;
    let next_projections = Projections::new(&next).with_context(|| format!("the layout of {}", new.display()))?;
    let now = chrono::Utc::now().timestamp_millis();
    let next_layout = Layout::of(&next);
    let priced =
        zigzag_gather::relayout::diff(table.as_ref(), &stored, &projections, &next_layout, &next_projections, now)
            .await?;
    print!("{}", zigzag_gather::relayout::render(&priced, rcu_per_sec, wcu_per_sec));
    Ok(())
}
