//! A store built the way ingest writes it: random events aggregated per
//! (rollup, bucket, key) and applied with the model's exactly-once update
//! (`plan_update`) under lane mark `w@1`, between the change marks a flush
//! writes around its items, in several flushes so random
//! scatter spreads a key's bucket over prefixes. Plus brute-force answers.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use zigzag_core::table::{AttrValue, SortedTable, UpdateOutcome};
use zigzag_model::measure::update::{plan_update, ItemWrite};
use zigzag_model::stats::{plan_stats_update, BinStats};
use zigzag_model::truth::Named;
use zigzag_model::value_catalog;
use zigzag_model::{Config, KeyModel, MeasureValue, MeasureValues, Projections, ScatterMode, Truth};

/// The shipped layout's dimensions, as these tests name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Referrer,
    Campaign,
    Country,
    Url,
}

impl Field {
    pub fn name(self) -> &'static str {
        match self {
            Field::Referrer => "referrer",
            Field::Campaign => "campaign",
            Field::Country => "country",
            Field::Url => "url",
        }
    }

    pub fn parse(name: &str) -> Field {
        [Field::Referrer, Field::Campaign, Field::Country, Field::Url]
            .into_iter()
            .find(|f| f.name() == name)
            .expect("a shipped dimension")
    }
}

impl std::fmt::Display for Field {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

pub fn names(fields: &[Field]) -> Vec<String> {
    fields.iter().map(|f| f.name().to_string()).collect()
}

/// The oracle's own sums of the shipped measures (not the model's code).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Measures {
    pub clicks: u64,
    pub impressions: u64,
    pub cost_sum: i128,
    pub cost_min: Option<i64>,
    pub cost_max: Option<i64>,
}

impl Measures {
    pub fn add_event(&mut self, click: bool, cost: Option<i64>) {
        if click {
            self.clicks += 1;
        } else {
            self.impressions += 1;
        }
        if let Some(c) = cost {
            self.cost_sum += c as i128;
            self.cost_min = Some(self.cost_min.map_or(c, |m| m.min(c)));
            self.cost_max = Some(self.cost_max.map_or(c, |m| m.max(c)));
        }
    }

    /// In the shipped layout's measure order.
    pub fn values(&self) -> MeasureValues {
        MeasureValues(vec![
            MeasureValue::Count(self.clicks),
            MeasureValue::Count(self.impressions),
            MeasureValue::Sum(self.cost_sum),
            MeasureValue::Min(self.cost_min),
            MeasureValue::Max(self.cost_max),
        ])
    }

    pub fn named(&self) -> Named {
        ["clicks", "impressions", "cost", "cost_min", "cost_max"]
            .into_iter()
            .map(String::from)
            .zip(self.values().0)
            .collect()
    }

    /// From a report's values (shipped order).
    pub fn of(v: &MeasureValues) -> Measures {
        let u = |i: usize| v.0[i].units();
        Measures {
            clicks: u(0).unwrap_or(0) as u64,
            impressions: u(1).unwrap_or(0) as u64,
            cost_sum: u(2).unwrap_or(0),
            cost_min: u(3).map(|x| x as i64),
            cost_max: u(4).map(|x| x as i64),
        }
    }
}

/// 2026-10-31T00:00:00Z: two days of events cross a month (hour and day
/// rollups' partition bin) and a day (minute rollup's bin).
pub const T0: i64 = 1_793_404_800_000;
pub const SPAN: i64 = 2 * 86_400_000;
pub const MINUTE: i64 = 60_000;
pub const HOUR: i64 = 3_600_000;
pub const DAY: i64 = 86_400_000;

/// Values chosen so fixed-width Z-strings collide: "news.exa" is the
/// 8-byte prefix of two referrers, "spring" the 6-byte prefix of two campaigns.
pub const REFERRERS: [&str; 5] = ["news.example", "news.example.org", "search.example", "a", "zz.social"];
pub const CAMPAIGNS: [&str; 4] = ["spring", "spring-sale", "c-42", "x"];
pub const COUNTRIES: [&str; 4] = ["DE", "FR", "US", "GB"];

#[derive(Debug, Clone, Copy)]
pub struct Event {
    pub t: i64,
    pub referrer: &'static str,
    pub campaign: &'static str,
    pub country: &'static str,
    pub click: bool,
    pub cost: Option<i64>,
}

impl Event {
    pub fn value(&self, f: Field) -> &'static str {
        match f {
            Field::Referrer => self.referrer,
            Field::Campaign => self.campaign,
            Field::Country => self.country,
            Field::Url => "/",
        }
    }
}

pub fn events(seed: u64, n: usize) -> Vec<Event> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|_| Event {
            t: T0 + rng.gen_range(0..SPAN),
            referrer: REFERRERS[rng.gen_range(0..REFERRERS.len())],
            campaign: CAMPAIGNS[rng.gen_range(0..CAMPAIGNS.len())],
            country: COUNTRIES[rng.gen_range(0..COUNTRIES.len())],
            click: rng.gen_bool(0.2),
            cost: rng.gen_bool(0.5).then(|| rng.gen_range(1..5_000_000)),
        })
        .collect()
}

pub fn config(prefixes: u32, mode: ScatterMode) -> Config {
    let mut c = Config::default();
    c.scatter.prefixes = prefixes;
    c.scatter.mode = mode;
    c
}

pub const FLUSHES: u64 = 3;

/// Writes every rollup's aggregates of `events`; event `i` goes in flush `i % 3 + 1`.
pub async fn write_store<T: SortedTable + ?Sized>(table: &T, config: &Config, events: &[Event]) {
    for flush in 1..=FLUSHES {
        let of_flush: Vec<&Event> =
            events.iter().enumerate().filter(|(i, _)| *i as u64 % FLUSHES + 1 == flush).map(|(_, e)| e).collect();
        write_flush(table, config, &of_flush, flush, Until::Done).await;
    }
}

/// How far [`write_flush`] goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// Begin marks, statistics and items, not the done marks: a flush in
    /// progress, as a reader sees it while the flush writes (or after its
    /// worker died).
    Items,
    Done,
}

/// Writes flush `flush` of lane 1 of `events`, as a flusher does, in
/// every projection of the layout: begin marks, statistics, items, done
/// marks ([`finish_flush`] writes the done marks of one stopped at
/// [`Until::Items`]).
pub async fn write_flush<T: SortedTable + ?Sized>(
    table: &T,
    config: &Config,
    events: &[&Event],
    flush: u64,
    until: Until,
) {
    let projections = Projections::new(config).unwrap();
    write_values(table, &projections, events).await;
    for km in projections.iter() {
        write_projection(table, km, events, flush).await;
    }
    if until == Until::Done {
        finish_flush(table, config, events, flush).await;
    }
}

/// The value catalog's entries of `events`, as a flush writes them before
/// its items (`zigzag_model::value_catalog`).
async fn write_values<T: SortedTable + ?Sized>(table: &T, projections: &Projections, events: &[&Event]) {
    let Some(first) = projections.iter().next() else { return };
    let rollups: Vec<_> = projections.iter().flat_map(|km| km.rollups()).collect();
    let mut latest: BTreeMap<(String, &'static str), i64> = BTreeMap::new();
    for km in projections.iter() {
        for d in km.dims() {
            for e in events {
                let day = value_catalog::day_of(e.t);
                let at = latest.entry((d.name.clone(), e.value(Field::parse(&d.name)))).or_insert(day);
                *at = (*at).max(day);
            }
        }
    }
    for ((dim, value), day) in latest {
        let expires = value_catalog::expires(first.retention(), &rollups, day);
        table.update(&value_catalog::record(&dim, value, day, expires)).await.unwrap();
    }
}

/// One projection's part of [`write_flush`], up to its done marks.
async fn write_projection<T: SortedTable + ?Sized>(table: &T, km: &KeyModel, events: &[&Event], flush: u64) {
    let fields: Vec<Field> = km.dims().iter().map(|d| Field::parse(&d.name)).collect();
    let mut partials: BTreeMap<(u8, i64, Vec<&'static str>), Measures> = BTreeMap::new();
    for e in events {
        for (ri, r) in km.rollups().enumerate() {
            let key = (ri as u8, r.floor(e.t), fields.iter().map(|f| e.value(*f)).collect());
            partials.entry(key).or_default().add_event(e.click, e.cost);
        }
    }
    let rollups: Vec<_> = km.rollups().collect();
    // The planner's statistics, as a flush keeps them (per rollup and bin).
    let mut stats: BTreeMap<(u8, i64), BinStats> = BTreeMap::new();
    for (ri, bucket, values) in partials.keys() {
        let r = rollups[*ri as usize];
        let id = KeyModel::identity(values);
        let prefix = km.prefix(id, r, *bucket, 1, flush);
        let s = stats.entry((*ri, r.bin().start_of(*bucket))).or_insert_with(|| BinStats::new(*bucket));
        s.add(r, prefix, *bucket, id);
        if let Some(value) = km.partition_value(values) {
            s.add_value(value);
        }
    }
    for ((ri, bin), s) in &stats {
        let mut known = None;
        loop {
            let req = plan_stats_update(km.name(), rollups[*ri as usize], *bin, s, known.as_ref()).unwrap();
            let Some(req) = req else { break };
            match table.update(&req).await.unwrap() {
                UpdateOutcome::Applied(_) => break,
                UpdateOutcome::ConditionFailed(old) => known = old,
            }
        }
    }
    // The change marks around the items, as a flush writes them.
    let slices = touched(km, events);
    for &(r, s) in &slices {
        table.update(&zigzag_model::changes::begin(km.name(), r, s, 1, flush)).await.unwrap();
    }
    for ((ri, bucket, values), m) in partials {
        let r = rollups[ri as usize];
        let id = KeyModel::identity(&values);
        let prefix = km.prefix(id, r, bucket, 1, flush);
        let dims: Vec<(&str, AttrValue)> =
            fields.iter().map(|f| f.name()).zip(values.iter().map(|v| AttrValue::S(v.to_string()))).collect();
        let values_m = m.values();
        let w = ItemWrite {
            pk: km.partition_key(prefix, r, r.bin().start_of(bucket)),
            sk: km.sort_key(r, bucket, &values, id).unwrap(),
            bucket_start: bucket,
            expires: km.retention().expires_at(r, bucket),
            dims: &dims,
            values: &values_m,
            set: km.measures(),
            mark_attr: "w@1",
            flush,
        };
        apply(table, &w).await;
    }
}

/// The done marks of flush `flush` of `events` (one written up to
/// [`Until::Items`]).
pub async fn finish_flush<T: SortedTable + ?Sized>(table: &T, config: &Config, events: &[&Event], flush: u64) {
    for km in Projections::new(config).unwrap().iter() {
        for (r, s) in touched(km, events) {
            table.update(&zigzag_model::changes::done(km.name(), r, s, 1, flush)).await.unwrap();
        }
    }
}

/// The (rollup, slice) pairs holding a bucket of `events`.
fn touched(km: &KeyModel, events: &[&Event]) -> std::collections::BTreeSet<(zigzag_model::Rollup, i64)> {
    let rollups: Vec<_> = km.rollups().collect();
    events
        .iter()
        .flat_map(|e| rollups.iter().map(|&r| (r, zigzag_model::changes::slice_start(r, r.floor(e.t)))))
        .collect()
}

/// [`write_store`], and the layout recorded in the table as ingest records
/// it (readers that take it from the table: `gather`, `gather serve`).
pub async fn write_recorded<T: SortedTable>(table: &T, config: &Config, events: &[Event]) {
    write_store(table, config, events).await;
    let layout = zigzag_model::layout::Layout::of(config);
    zigzag_model::layout::ensure(table, &layout).await.expect("a new table takes the layout");
}

/// Applies one write as a flusher does: first attempt, then re-plan from
/// the item a failed guard returned.
async fn apply<T: SortedTable + ?Sized>(table: &T, w: &ItemWrite<'_>) {
    let mut known = None;
    for _ in 0..4 {
        let Some(req) = plan_update(w, known.as_ref()).expect("in range") else { return };
        match table.update(&req).await.unwrap() {
            UpdateOutcome::Applied(_) => return,
            UpdateOutcome::ConditionFailed(old) => known = old,
        }
    }
    panic!("update did not converge");
}

/// Measures per (bucket, group-by values).
pub type Groups = BTreeMap<(Option<i64>, Vec<String>), Measures>;

/// Brute force: measures of the events in `[start, end)` passing `keep`,
/// per (bucket of `step`, `group_by` values).
pub fn brute(
    events: &[Event],
    start: i64,
    end: i64,
    step: Option<i64>,
    group_by: &[Field],
    keep: impl Fn(&Event) -> bool,
) -> Groups {
    let mut out = Groups::new();
    for e in events.iter().filter(|e| start <= e.t && e.t < end && keep(e)) {
        let bucket = step.map(|s| e.t.div_euclid(s) * s);
        let values = group_by.iter().map(|f| e.value(*f).to_string()).collect();
        out.entry((bucket, values)).or_default().add_event(e.click, e.cost);
    }
    out
}

/// The ground truth loadgen would write for `events`.
pub fn truth(events: &[Event]) -> Truth {
    let mut t = Truth { records: events.len() as u64, valid: events.len() as u64, ..Truth::default() };
    let mut total = Measures::default();
    let mut by_day: BTreeMap<String, Measures> = BTreeMap::new();
    let mut by_country: BTreeMap<String, Measures> = BTreeMap::new();
    let mut by_campaign: BTreeMap<String, Measures> = BTreeMap::new();
    for e in events {
        total.add_event(e.click, e.cost);
        let day = chrono::DateTime::from_timestamp_millis(e.t).unwrap().format("%Y-%m-%d").to_string();
        by_day.entry(day).or_default().add_event(e.click, e.cost);
        by_country.entry(e.country.to_string()).or_default().add_event(e.click, e.cost);
        by_campaign.entry(e.campaign.to_string()).or_default().add_event(e.click, e.cost);
        t.first_ms = Some(t.first_ms.map_or(e.t, |f| f.min(e.t)));
        t.last_ms = Some(t.last_ms.map_or(e.t, |l| l.max(e.t)));
    }
    let conv = |m: BTreeMap<String, Measures>| m.into_iter().map(|(k, v)| (k, v.named())).collect();
    t.totals = total.named();
    t.by_day = conv(by_day);
    t.by.insert("country".into(), conv(by_country));
    t.by.insert("campaign".into(), conv(by_campaign));
    t
}
