//! `gather layout apply`, `fill` and `status`: a new layout version
//! recorded and filled (`zigzag_gather::relayout`), with a progress bar on
//! a terminal and plain lines otherwise.

use anyhow::{anyhow, bail, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::path::Path;
use zigzag_app::store::StoreArgs;
use zigzag_core::schema::format_instant;
use zigzag_core::table::SortedTable;
use zigzag_gather::relayout::adoption::{broken_advice, check, Adoption};
use zigzag_gather::relayout::apply::{cut, version_changes, workers_running};
use zigzag_gather::relayout::coverage::states;
use zigzag_gather::relayout::fill::{fill, Event, FillOptions, Totals, Unit};
use zigzag_model::layout::Layout;
use zigzag_model::versions::{self, Stored, Version};
use zigzag_model::{Config, Projections};

async fn stored(table: &dyn SortedTable) -> Result<Stored> {
    versions::load(table).await?.ok_or_else(|| {
        anyhow!("the table records no layout: no ingest has written to it yet, so any layout is its first")
    })
}

/// How a version is announced to running workers.
pub(crate) struct Announce {
    /// The cut lies at least this far ahead of now.
    pub grace: std::time::Duration,
    /// How long `apply` waits for every worker to adopt it.
    pub wait: std::time::Duration,
    /// A cut more than a day past now (future-dated events) is accepted.
    pub future_cut: bool,
}

pub(crate) async fn apply(
    store: &StoreArgs,
    path: Option<&Path>,
    new: &Path,
    (rcu_per_sec, wcu_per_sec): (Option<f64>, Option<f64>),
    now: i64,
    announce: Announce,
) -> Result<()> {
    let table = store.open_aggregates().await?;
    let leases = store.open_leases().await?;
    let stored = stored(table.as_ref()).await?;
    // One change in flight at a time: a worker adopting a later version at
    // once would say how far it wrote under this one, past its cut, and
    // make it look broken. A broken one stays unread; the next may follow.
    for v in stored.versions.iter().filter(|v| !v.adopted) {
        match check(table.as_ref(), leases.as_ref(), v).await? {
            Adoption::Held => {}
            Adoption::Waiting(lanes) => bail!(
                "layout version {} is announced and not yet written by every worker: apply another once it is \
                 (`gather layout status` says what it waits for). Nothing was written:\n  - {}",
                v.number,
                lanes.join("\n  - ")
            ),
            Adoption::Broken(lanes) => say(&format!(
                "{} (it stays unread; this version follows it):\n  - {}",
                broken_advice(v),
                lanes.join("\n  - ")
            )),
        }
    }
    let given = zigzag_app::config::load(path, zigzag_app::config::Base::Full, &[])?;
    let old = super::reader_config(&given, Some(stored.layout()), path)?;
    let next = zigzag_app::config::load(Some(new), zigzag_app::config::Base::Full, &[])?;
    let (projections, next_projections) = (Projections::new(&old)?, Projections::new(&next)?);
    let next_layout = Layout::of(&next);
    if next_layout.differences(stored.layout()).is_empty() {
        bail!("{} is the table's layout already (version {}): nothing to apply", new.display(), stored.newest.number);
    }
    let priced = zigzag_gather::relayout::diff(
        table.as_ref(),
        stored.layout(),
        &projections,
        &next_layout,
        &next_projections,
        now,
    )
    .await?;
    let changes = version_changes(&priced, &projections, &next_projections).map_err(|refused| {
        anyhow!("{} cannot be applied, nothing was written:\n  - {}", new.display(), refused.join("\n  - "))
    })?;
    // With no worker running, every later writer joins under the new
    // version: the cut may be now. Running ones adopt it within the grace.
    let running = workers_running(leases.as_ref()).await?;
    let adopted = running.is_empty();
    let ahead = if adopted { 0 } else { i64::try_from(announce.grace.as_millis()).unwrap_or(i64::MAX) };
    // Past every event written: the finest buckets' end (a day rollup's
    // would put a live table's cut at the next midnight).
    let written_to = zigzag_gather::written_to(table.as_ref(), &projections).await?;
    let cut_ms = cut(&changes, &next_projections, now.saturating_add(ahead), written_to);
    // Future-dated events put the cut past them: a target counted from it
    // counts nothing until then, a filled one is the fill's until then.
    // Said before anything is written, and applied only when asked.
    let day = zigzag_model::Rollup::Day.unit_ms();
    if let Some(end) = written_to.filter(|&end| end > now.saturating_add(ahead).saturating_add(day)) {
        if !announce.future_cut {
            bail!(
                "the table holds events up to {} (future-dated: more than a day past now), and a version's cut lies \
                 past every event written: it would be {}, so targets counted from it would count nothing until \
                 then. Nothing was written. Find where they come from (`gather totals --from now --to {}` reads \
                 them), or apply with --cut-past-future-events to accept that cut",
                format_instant(end),
                format_instant(cut_ms),
                format_instant(end)
            );
        }
        say(&format!(
            "the cut is {} (--cut-past-future-events: the table holds events up to then)",
            format_instant(cut_ms)
        ));
    }
    let version =
        versions::record(table.as_ref(), stored.newest.number, &next_layout, cut_ms, changes, now, adopted).await?;
    say(&format!(
        "layout version {} recorded: workers started from now on write it (without --config, or with {}); \
         the targets below are the fill's before {} and the workers' from then on",
        version.number,
        new.display(),
        format_instant(cut_ms)
    ));
    for t in &version.changes.counted {
        say(&format!(
            "  {} {}: counted from {} on (the table holds no source)",
            t.projection,
            t.rollup,
            format_instant(cut_ms)
        ));
    }
    for g in &version.changes.measures {
        say(&format!(
            "  {}: measure(s) {} counted from {} on (reports over earlier windows read them elsewhere, or say \
             from when they cover)",
            g.projection,
            g.measures.join(", "),
            format_instant(cut_ms)
        ));
    }
    if !adopted && !wait_adopted(table.as_ref(), leases.as_ref(), &version, &running, announce.wait).await? {
        return Ok(());
    }
    let version = Version { adopted: true, ..version };
    run_fill(table.as_ref(), &old, &next, &version, rcu_per_sec, wcu_per_sec).await
}

/// Waits up to `wait` for every running worker to adopt `version`: whether
/// it holds (else says what it waits for and what to run later).
async fn wait_adopted(
    table: &dyn SortedTable,
    leases: &dyn SortedTable,
    version: &Version,
    running: &[String],
    wait: std::time::Duration,
) -> Result<bool> {
    say(&format!(
        "workers are running ({}): announced to them; each writes what it holds and goes on under version {} \
         (reports read the parts they read before meanwhile)",
        running.join("; "),
        version.number
    ));
    let until = std::time::Instant::now() + wait;
    let mut told = std::time::Instant::now();
    loop {
        match check(table, leases, version).await? {
            Adoption::Held => {
                say(&format!("every worker writes layout version {}", version.number));
                return Ok(true);
            }
            Adoption::Broken(lanes) => bail!("{}:\n  - {}", broken_advice(version), lanes.join("\n  - ")),
            Adoption::Waiting(lanes) if std::time::Instant::now() >= until => {
                say(&format!(
                    "not every worker adopted version {} within {:?}; run `gather layout fill` once they have \
                     (`gather layout status` says which):\n  - {}",
                    version.number,
                    wait,
                    lanes.join("\n  - ")
                ));
                return Ok(false);
            }
            Adoption::Waiting(lanes) => {
                // The lanes are read every 2 s (one small strongly
                // consistent query); what it waits for is said every 30 s.
                if told.elapsed() >= std::time::Duration::from_secs(30) {
                    say(&format!("waiting for: {}", lanes.join("; ")));
                    told = std::time::Instant::now();
                }
                tokio::time::sleep(std::time::Duration::from_secs(2)).await
            }
        }
    }
}

pub(crate) async fn fill_again(
    store: &StoreArgs,
    path: Option<&Path>,
    (rcu_per_sec, wcu_per_sec): (Option<f64>, Option<f64>),
) -> Result<()> {
    let table = store.open_aggregates().await?;
    let leases = store.open_leases().await?;
    let stored = stored(table.as_ref()).await?;
    if stored.versions.len() < 2 {
        bail!("the table has one layout version: nothing to fill (`gather layout apply` records another)");
    }
    let given = zigzag_app::config::load(path, zigzag_app::config::Base::Full, &[])?;
    let new = stored.layout().apply(&given);
    // Each version's targets the layout still writes, read from the
    // layout before that version.
    let added = stored.added();
    let mut broken = Vec::new();
    for (i, v) in stored.versions.iter().enumerate().skip(1) {
        let fills: Vec<_> = added
            .iter()
            .filter(|(by, _)| by.number == v.number)
            .filter_map(|(_, a)| match a {
                versions::Added::Fill(t) => Some((*t).clone()),
                versions::Added::Counted(_) => None,
            })
            .collect();
        // Judged (and marked adopted once it holds) whether or not it has
        // fills: a version that only adds measures is read once marked.
        match check(table.as_ref(), leases.as_ref(), v).await? {
            Adoption::Held => {}
            Adoption::Waiting(lanes) => {
                say(&format!(
                    "layout version {}: not every worker writes it yet, nothing filled:\n  - {}",
                    v.number,
                    lanes.join("\n  - ")
                ));
                continue;
            }
            Adoption::Broken(lanes) => {
                say(&format!("{}:\n  - {}", broken_advice(v), lanes.join("\n  - ")));
                broken.push(v.number.to_string());
                continue;
            }
        }
        if fills.is_empty() {
            continue;
        }
        let old = stored.versions[i - 1].layout.apply(&given);
        let version =
            Version { changes: versions::Changes { fills, ..Default::default() }, adopted: true, ..v.clone() };
        run_fill(table.as_ref(), &old, &new, &version, rcu_per_sec, wcu_per_sec).await?;
    }
    if !broken.is_empty() {
        bail!("layout version(s) {} are broken: their targets stay unread (see above)", broken.join(", "));
    }
    Ok(())
}

async fn run_fill(
    table: &dyn SortedTable,
    old: &Config,
    new: &Config,
    version: &Version,
    rcu_per_sec: Option<f64>,
    wcu_per_sec: Option<f64>,
) -> Result<()> {
    if version.changes.fills.is_empty() {
        say("nothing to fill");
        return Ok(());
    }
    let opts = FillOptions {
        rcu_per_sec,
        wcu_per_sec,
        concurrency: zigzag_gather::execute::DEFAULT_CONCURRENCY,
        now_ms: chrono::Utc::now().timestamp_millis(),
    };
    let started = std::time::Instant::now();
    let mut watch = Watch::new();
    let totals = fill(table, old, new, version, &opts, &mut |e| watch.on(e)).await?;
    watch.finish();
    say(&summary(&totals, started.elapsed().as_secs_f64()));
    if totals.pending > 0 {
        say(&format!(
            "{} days were being written by a flush while they were read: run `gather layout fill` again (reports read \
             their sources for them meanwhile)",
            totals.pending
        ));
    }
    Ok(())
}

fn summary(t: &Totals, secs: f64) -> String {
    let retried = match t.retries {
        0 => String::new(),
        n => format!("; {n} calls sent again after throttling, a timeout or a 5xx"),
    };
    format!(
        "filled: {} days derived, {} already current, {} left for later; {} items read ({:.1} RCU), {} items written \
         ({:.0} WCU) in {secs:.1} s{retried}",
        t.derived, t.current, t.pending, t.items_read, t.rcu, t.items_written, t.wcu
    )
}

/// What a person watching sees: a bar with an ETA on a terminal, a line
/// per target and every tenth bin otherwise.
struct Watch {
    bar: Option<ProgressBar>,
    seen: usize,
    totals: Totals,
}

impl Watch {
    fn new() -> Watch {
        Watch { bar: None, seen: 0, totals: Totals::default() }
    }

    fn on(&mut self, e: &Event) {
        match e {
            Event::Planned { target, units } => {
                let what =
                    format!("{} {} from {} {}", target.projection, target.rollup, target.source, target.source_rollup);
                if let Some(bar) = self.bar.take() {
                    bar.finish();
                }
                if std::io::stderr().is_terminal() {
                    let bar = ProgressBar::new(*units as u64);
                    if let Ok(style) = ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} days, ETA {eta}") {
                        bar.set_style(style.progress_chars("=> "));
                    }
                    bar.set_message(what);
                    self.bar = Some(bar);
                } else {
                    say(&format!("filling {what}: {units} days"));
                }
                self.seen = 0;
            }
            Event::Unit { day, unit, .. } => {
                self.seen += 1;
                match unit {
                    Unit::Derived { items_written, wcu, .. } => {
                        self.totals.items_written += items_written;
                        self.totals.wcu += wcu;
                    }
                    Unit::Pending(why) => say(&format!("  day {}: left for later ({why})", format_instant(*day))),
                    Unit::Current => {}
                }
                match &self.bar {
                    Some(bar) => bar.inc(1),
                    None if self.seen.is_multiple_of(10) => say(&format!(
                        "  {} days done, {} items written ({:.0} WCU)",
                        self.seen, self.totals.items_written, self.totals.wcu
                    )),
                    None => {}
                }
            }
        }
    }

    fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish();
        }
    }
}

fn say(line: &str) {
    eprintln!("{line}");
}

pub(crate) async fn status(store: &StoreArgs) -> Result<()> {
    let table = store.open_aggregates().await?;
    let stored = stored(table.as_ref()).await?;
    let v = &stored.newest;
    if v.number == 1 {
        println!("layout version 1 (as the first writer recorded it): no change applied");
        return Ok(());
    }
    println!("layout version {} (applied {}), cut {}", v.number, format_instant(v.at_ms), format_instant(v.cut_ms));
    let leases = store.open_leases().await?;
    for v in stored.versions.iter().filter(|v| !v.adopted) {
        match check(table.as_ref(), leases.as_ref(), v).await? {
            Adoption::Held => println!("  version {}: every worker writes it now", v.number),
            Adoption::Waiting(lanes) => {
                println!("  version {}: waiting for the workers to adopt it:", v.number);
                for l in lanes {
                    println!("    - {l}");
                }
            }
            Adoption::Broken(lanes) => {
                println!("  version {}: {}", v.number, broken_advice(v));
                for l in lanes {
                    println!("    - {l}");
                }
            }
        }
    }
    let stored = self::stored(table.as_ref()).await?;
    for s in states(table.as_ref(), &stored).await? {
        let t = &s.target;
        let to = s.derived_to.map_or("nothing derived yet".into(), |e| format!("derived up to {}", format_instant(e)));
        println!(
            "  {} {} (version {}) summed from {} {}: {} of {} days ({:.0} %), {} items written ({:.1} RCU read, \
             {:.0} WCU written), {to}",
            t.projection,
            t.rollup,
            s.version,
            t.source,
            t.source_rollup,
            s.derived,
            s.days.len(),
            s.percent(),
            s.items_written,
            s.rcu,
            s.wcu
        );
    }
    for (by, added) in stored.added() {
        if let versions::Added::Counted(t) = added {
            let cut = format_instant(by.cut_ms);
            println!("  {} {} (version {}): counted from {cut} on", t.projection, t.rollup, by.number);
        }
    }
    for f in stored.measured_from() {
        let cut = format_instant(f.cut_ms);
        println!("  measure {} of {} (version {}): counted from {cut} on", f.measure, f.projection, f.version);
    }
    let filling = zigzag_gather::relayout::filling(table.as_ref(), &stored, i64::MIN, i64::MAX).await?;
    for note in filling.notes() {
        println!("  reports: {note}");
    }
    for note in filling.retention_notes() {
        println!("  reports: {note}");
    }
    if filling.is_empty() {
        println!("  reports read every target for any window");
    }
    Ok(())
}

pub(crate) async fn delete_dropped(store: &StoreArgs, path: Option<&Path>, wcu_per_sec: Option<f64>) -> Result<()> {
    let table = store.open_aggregates().await?;
    let stored = stored(table.as_ref()).await?;
    let given = zigzag_app::config::load(path, zigzag_app::config::Base::Full, &[])?;
    let leases = store.open_leases().await?;
    if check(table.as_ref(), leases.as_ref(), &stored.newest).await? != Adoption::Held {
        // A worker of the layout before may still write what was dropped.
        bail!(
            "layout version {} is not written by every worker yet (`gather layout status` names the lanes): delete \
             once it is",
            stored.newest.number
        );
    }
    if zigzag_gather::relayout::dropped::dropped(&stored).is_empty() {
        say("no layout version dropped a projection or rollup: nothing to delete");
        return Ok(());
    }
    let started = std::time::Instant::now();
    let mut tell = |line: String| say(&line);
    let deleted =
        zigzag_gather::relayout::dropped::delete_dropped(table.as_ref(), &stored, &given, wcu_per_sec, &mut tell)
            .await?;
    for left in &deleted.left {
        say(&format!("left: {left}"));
    }
    println!(
        "deleted {} items, {} bytes freed ({:.0} WCU) in {:.1} s",
        deleted.items,
        deleted.bytes,
        deleted.wcu,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
