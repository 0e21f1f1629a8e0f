//! `gather compact`: the command's arguments checked, the two tables
//! opened, the library's compaction run (`zigzag_gather::compact`), its
//! progress on stderr and a summary on stdout.

use super::Store;
use anyhow::{bail, Result};
use std::path::Path;
use zigzag_gather::window::{parse_duration, parse_time};
use zigzag_model::Projections;

pub(crate) async fn compact_cmd(
    store: &Store<'_>,
    config: Option<&Path>,
    before: &str,
    grace: &str,
    wait: &str,
    concurrency: usize,
) -> Result<()> {
    use zigzag_gather::compact::{compact, CompactOptions};
    let before_ms = parse_time("--before", before)?;
    let now = chrono::Utc::now().timestamp_millis();
    if before_ms > now {
        bail!("--before {before} is in the future: the seal would refuse events arriving now");
    }
    let millis = |arg, text| parse_duration(arg, text).map(|ms| std::time::Duration::from_millis(ms as u64));
    let opts = CompactOptions {
        before: before_ms,
        grace: millis("--grace", grace)?,
        wait: millis("--wait", wait)?,
        concurrency: concurrency.max(1),
    };
    let (aggregates, leases) = store.open_with_leases().await?;
    let config = store.layout(aggregates.as_ref(), config).await?;
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
