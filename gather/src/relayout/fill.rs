//! The fill: each target a layout version added that the table's items can
//! fill (`zigzag_model::versions::FillTarget`), below the version's cut,
//! summed from its source's items.
//!
//! The unit is one UTC day of the source (every target bucket lies in one:
//! a day is a minute bin, and a month bin of hours or days holds whole
//! days), so a unit holds at most a day of items: its change marks are
//! read (strongly consistent), then its items, read as a report grouped by
//! the target's dimensions at the target's bucket, then its marks again. Only if the two reads of marks
//! are equal and quiet (no flush between its begin and its done) did the
//! read see no flush writing; the sums are then the target's items, to
//! the unit (counts and sums add, minima and maxima compare, sketches
//! merge), and are **put** whole (`zigzag_model::measure::whole`): the
//! fill is the only writer of a target's buckets before the cut, so a
//! unit written twice (a kill, a retry) is written the same. Last, a
//! progress item records the marks the unit was derived at
//! ([`progress_pk`]).
//!
//! A unit is **current** while its source's marks equal the ones recorded.
//! A late event moves them: the unit is derived again by the next fill,
//! and until then a report reads the source for that range
//! ([`super::coverage`]). So a fill is resumable after a kill anywhere:
//! it starts over, skipping the current units.
//!
//! The fill writes change marks on the target's slices under its own lane
//! ([`FILL_LANE`]), begun before its items and done after, so `gather
//! serve`'s cache sees a slice derived again, and statistics for the
//! planner's estimates, as a flush does.

use crate::error::{GatherError, Result};
use crate::execute::{Actual, ExecOptions};
use crate::filter::FilterSet;
use crate::merge::Aggregation;
use crate::plan::{Filling, PlanRequest, SourceRequest};
use crate::window::WindowSpec;
use futures::StreamExt;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use zigzag_core::schema::{format_instant, TimeBin};
use zigzag_core::table::{AttrValue, Item, QueryRequest, SortKeyCondition, SortedTable, UpdateOutcome, UpdateRequest};
use zigzag_model::changes::{self, SliceMarks};
use zigzag_model::measure::whole::{whole_items, WholeKey};
use zigzag_model::measure::MeasureValues;
use zigzag_model::stats::{plan_stats_update, BinStats, StoredStats, STATS_PK};
use zigzag_model::versions::{FillTarget, Version};
use zigzag_model::{Config, KeyModel, Projections, Rollup};

/// The change-mark lane of fills (no lease lane is this high).
pub const FILL_LANE: u32 = u32::MAX;

/// Every fill progress partition key starts with this.
pub const FILL_PK: &str = "#fill";

/// The partition of a version's fill progress: one item per (target,
/// source bin).
pub fn progress_pk(version: u32) -> String {
    format!("{FILL_PK}#v{version:06}")
}

/// A unit's progress key: the target and the day.
pub(super) fn progress_sk(t: &FillTarget, day: i64) -> Vec<u8> {
    format!("{}#{}#{}", t.projection, t.rollup, TimeBin::Day.label(day)).into_bytes()
}

pub(super) const DAY_MS: i64 = 86_400_000;

const MARKS: &str = "marks";
const ITEMS: &str = "items";
/// Read and write units the unit spent, in thousandths.
const RCU_MILLI: &str = "rcu_m";
const WCU_MILLI: &str = "wcu_m";
const DAY: &str = "day";
const DERIVED_AT: &str = "at";

/// How a fill runs.
#[derive(Debug, Clone)]
pub struct FillOptions {
    /// Read budget (RCU/s) and write budget (WCU/s); None: unpaced.
    pub rcu_per_sec: Option<f64>,
    pub wcu_per_sec: Option<f64>,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Now (ms): the items' expiry and the derivation's mark.
    pub now_ms: i64,
}

/// What happened to one unit.
#[derive(Debug, Clone, PartialEq)]
pub enum Unit {
    /// Derived now: items read and written, RCU and WCU spent.
    Derived { items_read: u64, items_written: u64, rcu: f64, wcu: f64 },
    /// Derived before, at the source's current marks.
    Current,
    /// Not derived now: why (a flush was writing it; read again later).
    Pending(String),
}

/// What a fill reports as it goes.
#[derive(Debug, Clone)]
pub enum Event {
    /// The units to look at, per target.
    Planned { target: FillTarget, units: usize },
    /// One unit done with.
    Unit { target: FillTarget, day: i64, unit: Unit },
}

/// A fill's totals.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
    pub units: usize,
    pub derived: usize,
    pub current: usize,
    pub pending: usize,
    pub items_read: u64,
    pub items_written: u64,
    pub rcu: f64,
    pub wcu: f64,
    /// Calls sent again after throttling, a timeout or a 5xx.
    pub retries: u64,
}

impl Totals {
    fn add(&mut self, unit: &Unit) {
        match unit {
            Unit::Derived { items_read, items_written, rcu, wcu } => {
                self.derived += 1;
                self.items_read += items_read;
                self.items_written += items_written;
                self.rcu += rcu;
                self.wcu += wcu;
            }
            Unit::Current => self.current += 1,
            Unit::Pending(_) => self.pending += 1,
        }
    }
}

/// Write pacing: waits until what was spent fits the budget since start.
pub(super) struct Budget {
    start: Instant,
    wcu_per_sec: Option<f64>,
    wcu: f64,
}

impl Budget {
    /// At most `wcu_per_sec` write units a second from now (None: unpaced).
    pub(super) fn new(wcu_per_sec: Option<f64>) -> Budget {
        Budget { start: Instant::now(), wcu_per_sec, wcu: 0.0 }
    }

    /// Spends `wcu`, after waiting until it fits the budget.
    pub(super) async fn spend(&mut self, wcu: f64) {
        self.wcu += wcu;
        if let Some(rate) = self.wcu_per_sec.filter(|r| *r > 0.0) {
            let due = Duration::from_secs_f64(self.wcu / rate);
            if let Some(wait) = due.checked_sub(self.start.elapsed()) {
                tokio::time::sleep(wait).await;
            }
        }
    }
}

/// The days (start) of `t`'s source holding items before `cut`: each
/// day from a statistics item's first bucket to its last.
pub async fn source_days(table: &dyn SortedTable, t: &FillTarget, cut: i64) -> Result<Vec<i64>> {
    let prefix = format!("{}#{}#", t.source, t.source_rollup).into_bytes();
    let stats = crate::statistics::read(table, SortKeyCondition::BeginsWith(prefix)).await?;
    let mut days: Vec<i64> = stats
        .bins()
        .flat_map(|s: &StoredStats| {
            let (first, last) = (s.lo.div_euclid(DAY_MS), s.hi.div_euclid(DAY_MS));
            (first..=last).map(|d| d * DAY_MS)
        })
        .filter(|d| *d < cut)
        .collect();
    days.sort_unstable();
    days.dedup();
    Ok(days)
}

/// One unit's recorded progress.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// The source's marks digest it was derived at.
    pub marks: String,
    pub items: u64,
    /// What deriving it spent (0 for units recorded before these were).
    pub rcu: f64,
    pub wcu: f64,
}

/// The recorded progress of `version`'s fill, per (target, day label).
pub async fn progress(table: &dyn SortedTable, version: u32) -> Result<BTreeMap<Vec<u8>, Recorded>> {
    let mut req = QueryRequest::new(progress_pk(version), SortKeyCondition::Any);
    req.consistent = true;
    let items = zigzag_core::query::run_key_range(table, req)
        .await
        .map_err(|e| GatherError::Query { pk: progress_pk(version), source: e })?
        .items;
    let num = |i: &zigzag_core::table::Item, name: &str| match i.attrs.get(name) {
        Some(AttrValue::N(n)) => i64::try_from(*n).unwrap_or(0),
        _ => 0,
    };
    Ok(items
        .into_iter()
        .filter_map(|i| {
            let marks = match i.attrs.get(MARKS) {
                Some(AttrValue::S(s)) => s.clone(),
                _ => return None,
            };
            let items = u64::try_from(num(&i, ITEMS)).unwrap_or(0);
            let (rcu, wcu) = (num(&i, RCU_MILLI) as f64 / 1000.0, num(&i, WCU_MILLI) as f64 / 1000.0);
            Some((i.sk, Recorded { marks, items, rcu, wcu }))
        })
        .collect())
}

/// A digest of a unit's marks: equal exactly when no flush wrote it in
/// between.
pub fn marks_digest(marks: &BTreeMap<i64, SliceMarks>) -> String {
    let mut text = String::new();
    for (slice, m) in marks {
        text.push_str(&format!("{slice}:"));
        for (lane, (b, d)) in &m.lanes {
            text.push_str(&format!("{lane}={b}/{d},"));
        }
        text.push(';');
    }
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(text.as_bytes()))
}

/// The end of the part of `day` a target's fill owns.
pub(super) fn day_end(day: i64, cut: i64) -> i64 {
    (day + DAY_MS).min(cut)
}

/// Fills every target of `version` (the newest) below its cut. `old` is
/// the configuration of the version before (its sources' layout), `new`
/// this version's.
pub async fn fill(
    table: &dyn SortedTable,
    old: &Config,
    new: &Config,
    version: &Version,
    opts: &FillOptions,
    on: &mut (dyn FnMut(&Event) + Send),
) -> Result<Totals> {
    if !version.adopted {
        // A worker of the older layout may still write past the cut what
        // the targets were to hold (`adoption.rs`).
        return Err(GatherError::Config(format!(
            "layout version {} is not written by every worker yet: `gather layout status` names the lanes; the fill \
             runs once they adopt it",
            version.number
        )));
    }
    // Every write of the fill is idempotent: a throttled or timed-out call
    // is sent again rather than ending a long fill.
    let retried = crate::throttle::Retried::new(table);
    let table: &dyn SortedTable = &retried;
    let config_err = |e: zigzag_model::ConfigError| GatherError::Config(e.to_string());
    let (old_projections, new_projections) =
        (Projections::new(old).map_err(config_err)?, Projections::new(new).map_err(config_err)?);
    let mut totals = Totals::default();
    let mut budget = Budget::new(opts.wcu_per_sec);
    let done = progress(table, version.number).await?;
    for t in &version.changes.fills {
        let km = new_projections
            .by_name(&t.projection)
            .ok_or_else(|| GatherError::Config(format!("the version writes no projection {}", t.projection)))?;
        old_projections
            .by_name(&t.source)
            .ok_or_else(|| GatherError::Config(format!("the table writes no projection {}", t.source)))?;
        let days = source_days(table, t, version.cut_ms).await?;
        on(&Event::Planned { target: t.clone(), units: days.len() });
        for day in days {
            let recorded = done.get(&progress_sk(t, day)).map(|d| d.marks.as_str());
            let unit = fill_unit(table, old, km, t, version, day, recorded, opts, &mut budget).await?;
            totals.units += 1;
            totals.add(&unit);
            on(&Event::Unit { target: t.clone(), day, unit });
        }
    }
    totals.retries = retried.retries();
    Ok(totals)
}

/// One unit: derived at the source's current marks, or found current, or
/// left for later.
#[allow(clippy::too_many_arguments)]
async fn fill_unit(
    table: &dyn SortedTable,
    old: &Config,
    km: &KeyModel,
    t: &FillTarget,
    version: &Version,
    day: i64,
    recorded: Option<&str>,
    opts: &FillOptions,
    budget: &mut Budget,
) -> Result<Unit> {
    let end = day_end(day, version.cut_ms);
    let marks = |table| async move {
        changes::read(table, &t.source, t.source_rollup, day, end)
            .await
            .map_err(|e| GatherError::Query { pk: changes::CHANGES_PK.into(), source: e.into() })
    };
    let before = marks(table).await?;
    if !before.values().all(SliceMarks::quiet) {
        return Ok(Unit::Pending("a flush is writing it".into()));
    }
    let digest = marks_digest(&before);
    if recorded == Some(digest.as_str()) {
        return Ok(Unit::Current);
    }
    let (agg, actual) = read_source(table, old, km, t, day, end, opts).await?;
    let after = marks(table).await?;
    if after != before {
        return Ok(Unit::Pending("a flush wrote it while it was read".into()));
    }
    let (written, wcu) = write_target(table, km, t, &agg, opts, budget).await?;
    // An update, not a put: the fill needs no PutItem (the compactor's role).
    let progress = UpdateRequest::new(progress_pk(version.number), progress_sk(t, day))
        .set(MARKS, digest.as_str())
        .set(ITEMS, written as i64)
        .set(RCU_MILLI, (actual.stats.rcu * 1000.0).round() as i64)
        .set(WCU_MILLI, (wcu * 1000.0).round() as i64)
        .set(DAY, day)
        .set(DERIVED_AT, opts.now_ms);
    table
        .update(&progress)
        .await
        .map_err(|e| GatherError::Query { pk: progress_pk(version.number), source: e.into() })?;
    Ok(Unit::Derived { items_read: actual.stats.scanned, items_written: written, rcu: actual.stats.rcu, wcu })
}

/// The source's items of `[from, end)`, strongly consistent, summed by the
/// target's dimensions and buckets.
async fn read_source(
    table: &dyn SortedTable,
    old: &Config,
    km: &KeyModel,
    t: &FillTarget,
    from: i64,
    end: i64,
    opts: &FillOptions,
) -> Result<(Aggregation, Actual)> {
    let req = PlanRequest {
        window: WindowSpec::Absolute { from: format_instant(from), to: format_instant(end) },
        rollup: Some(t.source_rollup),
        step: Some(t.rollup.unit_ms()),
        timeseries: true,
        filters: FilterSet::default(),
        now: opts.now_ms,
        source: SourceRequest { projection: Some(t.source.clone()), measures: None },
        mixing: None,
        snap: None,
        filling: Filling::default(),
    };
    let group_by: Vec<String> = km.dims().iter().map(|d| d.name.clone()).collect();
    let exec = ExecOptions {
        concurrency: opts.concurrency.max(1),
        rcu_per_sec: opts.rcu_per_sec,
        consistent: true,
        ..ExecOptions::default()
    };
    let gathered = crate::run::gather(table, old, req, group_by, &exec).await?;
    Ok((gathered.aggregation, gathered.actual))
}

/// Puts the target's items summed in `agg`, with change marks around them
/// and statistics after; the items and write units written.
async fn write_target(
    table: &dyn SortedTable,
    km: &KeyModel,
    t: &FillTarget,
    agg: &Aggregation,
    opts: &FillOptions,
    budget: &mut Budget,
) -> Result<(u64, f64)> {
    let rollup = t.rollup;
    let table_err =
        |pk: &str, e: zigzag_core::table::TableError| GatherError::Query { pk: pk.into(), source: e.into() };
    let mut items: Vec<Item> = Vec::new();
    let mut stats: BTreeMap<i64, BinStats> = BTreeMap::new();
    let mut slices: Vec<i64> = Vec::new();
    for (key, values) in &agg.groups {
        let Some(bucket) = key.bucket else { continue };
        let strs: Vec<&str> = key.values.iter().map(String::as_str).collect();
        let id = KeyModel::identity(&strs);
        let prefix = km.prefix(id, rollup, bucket, FILL_LANE, 0);
        let bin = rollup.bin().start_of(bucket);
        let sk = km.sort_key(rollup, bucket, &strs, id).map_err(|e| GatherError::Config(e.to_string()))?;
        let pk = km.item_partition_key(prefix, rollup, bin, &strs);
        let dims: Vec<(&str, AttrValue)> =
            km.dims().iter().zip(&strs).map(|(d, v)| (d.name.as_str(), d.attr(v))).collect();
        let measures = MeasureValues::from_named(km.measures(), &values.named(&agg.set));
        let whole =
            WholeKey { pk, sk, bucket_start: bucket, expires: km.retention().expires_at(rollup, bucket), dims: &dims };
        items.extend(
            whole_items(&whole, km.measures(), &measures)
                .map_err(|why| GatherError::Item { pk: whole.pk.clone(), why })?,
        );
        let s = stats.entry(bin).or_insert_with(|| BinStats::new(bucket));
        s.add(rollup, prefix, bucket, id);
        if let Some(v) = km.partition_value(&strs) {
            s.add_value(v);
        }
        slices.push(changes::slice_start(rollup, bucket));
    }
    slices.sort_unstable();
    slices.dedup();
    // Marks upward only: a derivation later than any before.
    let k = opts.now_ms.max(1) as u64;
    for &s in &slices {
        let req = changes::begin(km.name(), rollup, s, FILL_LANE, k);
        table.update(&req).await.map_err(|e| table_err(&req.pk, e))?;
    }
    // Batches in flight as the store takes them (one for SQLite, which
    // serializes writes; more for DynamoDB), each sent when the budget
    // allows.
    let in_flight = table.write_parallelism().min(opts.concurrency).max(1);
    let mut pending = futures::stream::FuturesUnordered::new();
    let mut wcu = 0.0;
    for chunk in items.chunks(25) {
        let units: f64 = chunk.iter().map(|i| (i.size() as f64 / 1024.0).ceil().max(1.0)).sum();
        budget.spend(units).await;
        while pending.len() >= in_flight {
            if let Some(done) = pending.next().await {
                done?;
            }
        }
        pending.push(async move { table.put_batch(chunk.to_vec()).await.map_err(|e| table_err(&chunk[0].pk, e)) });
        wcu += units;
    }
    while let Some(done) = pending.next().await {
        done?;
    }
    for &s in &slices {
        let req = changes::done(km.name(), rollup, s, FILL_LANE, k);
        table.update(&req).await.map_err(|e| table_err(&req.pk, e))?;
    }
    for (bin, s) in &stats {
        write_stats(table, km.name(), rollup, *bin, s).await?;
    }
    Ok((items.len() as u64, wcu))
}

/// Merges one bin's statistics (a sketch merge: repeating it is harmless).
async fn write_stats(table: &dyn SortedTable, projection: &str, rollup: Rollup, bin: i64, s: &BinStats) -> Result<()> {
    let err = |why: String| GatherError::Item { pk: STATS_PK.into(), why };
    let mut known: Option<Item> = None;
    for _ in 0..8 {
        let Some(req) = plan_stats_update(projection, rollup, bin, s, known.as_ref()).map_err(err)? else {
            return Ok(());
        };
        match table.update(&req).await.map_err(|e| GatherError::Query { pk: STATS_PK.into(), source: e.into() })? {
            UpdateOutcome::Applied(_) => return Ok(()),
            UpdateOutcome::ConditionFailed(item) => known = item,
        }
    }
    Err(err(format!("statistics of {projection} {rollup}: still contended after 8 attempts")))
}
