//! `gather compact`: the command's arguments checked, the two tables
//! opened, the library's compaction run (`zigzag_gather::compact`), its
//! progress on stderr and a summary on stdout.

use anyhow::{bail, Result};
use std::path::Path;
use std::time::Duration;
use zigzag_app::store::StoreArgs;
use zigzag_gather::window::parse_time;
use zigzag_model::Projections;

pub(crate) async fn compact_cmd(
    store: &StoreArgs,
    config: Option<&Path>,
    before: &str,
    grace: Duration,
    wait: Duration,
    concurrency: usize,
) -> Result<()> {
    use zigzag_gather::compact::{compact, CompactOptions};
    let before_ms = parse_time("--before", before, chrono::Utc::now().timestamp_millis())?;
    let now = chrono::Utc::now().timestamp_millis();
    if before_ms > now {
        bail!("--before {before} is in the future: the seal would refuse events arriving now");
    }
    let opts = CompactOptions { before: before_ms, grace, wait, concurrency: concurrency.max(1) };
    let stores = store.open(None).await?;
    let (aggregates, leases) = (stores.aggregates, stores.leases);
    let config = super::layout(store, aggregates.as_ref(), config).await?;
    // A target put by a fill while its bins are folded would lose what it
    // puts after the fold: the fill first.
    if let Some(stored) = zigzag_model::versions::load(aggregates.as_ref()).await? {
        let states = zigzag_gather::relayout::coverage::states(aggregates.as_ref(), &stored).await?;
        if let Some(s) = states.iter().find(|s| s.derived < s.days.len()) {
            bail!(
                "layout version {}'s fill is not done ({} {}: {} of {} days): run `gather layout fill` first (`gather layout \
                 status` shows it)",
                s.version,
                s.target.projection,
                s.target.rollup,
                s.derived,
                s.days.len()
            );
        }
    }
    let projections = Projections::new(&config)?;
    let mut say = |line: String| eprintln!("compact: {line}");
    let report = compact(aggregates.as_ref(), leases.as_ref(), &projections, &opts, &mut say).await?;
    let (partials, items, deleted) =
        report.bins.iter().fold((0, 0, 0), |(p, i, d), b| (p + b.partials, i + b.items, d + b.deleted));
    println!(
        "compacted {} bins before {before}: {partials} partials folded into {items} items; {deleted} partials deleted",
        report.bins.len()
    );
    Ok(())
}
