//! Windows read from several rollups (whole days from day items, the
//! whole hours at the edges from hour items, the minutes left over from
//! minute items) answer exactly what reading every minute answers, bucket
//! for bucket and byte for byte for sketches, at the same freshness.
//!
//! Through the real pipeline into SQLite, with the hour and day items on
//! slower cadences than the minutes, and late events: a worker is killed
//! (its runtime shut down: no final flush, its lane, intent and leases
//! left as they were) at a random moment, so the slower sets lag the
//! minutes by what its memory held, sometimes with a flush half written.
//! On that table, random windows and steps are read twice: by the planner
//! as it chooses (mixed rollups, complete buckets by the lease table's
//! owed spans) and from the minute items alone. They must be equal; and
//! reading the coarse items without the lease table's word must differ
//! somewhere, or the check proves nothing.

use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use zigzag_core::table::SortedTable;
use zigzag_gather::execute::{execute_fresh, ExecOptions};
use zigzag_gather::filter::FilterSet;
use zigzag_gather::merge::Aggregation;
use zigzag_gather::plan::SourceRequest;
use zigzag_gather::plan::{Mixing, PlanRequest};
use zigzag_gather::window::WindowSpec;
use zigzag_gather::Completeness;
use zigzag_ingest::{Pipeline, PipelineOptions};
use zigzag_loadgen::{GenConfig, Generator, SyntheticSource};
use zigzag_model::{Config, Rollup};
use zigzag_sqlite::SqliteTable;

const M: i64 = 60_000;
const H: i64 = 60 * M;
const D: i64 = 24 * H;
const START: i64 = 1_795_132_800_000; // 2026-11-20T00:00:00Z
const SPAN: i64 = 3 * D;

fn config(hour_ms: u64, day_ms: u64) -> Config {
    Config::from_toml(&format!(
        r#"
[[measure]]
name = "clicks"
type = "count"
where = "type = click"
[[measure]]
name = "impressions"
type = "count"
where = "type = impression"
[[measure]]
name = "cost_max"
type = "max"
field = "cost"
[[measure]]
name = "users"
type = "distinct"
field = "user_id"
[[measure]]
name = "cost_q"
type = "quantile"
field = "cost"
[[projection]]
name = "cc"
dimensions = ["campaign", "country"]
[flush]
interval_ms = 50
every_ms = {{ "base.hour" = {hour_ms}, "base.day" = {day_ms}, "cc.hour" = {hour_ms}, "cc.day" = {day_ms} }}
"#
    ))
    .expect("config")
}

/// Runs a worker over `gen` and kills it after `kill_ms`.
async fn run_and_kill(db: &std::path::Path, config: &Config, gen: &Generator, kill_ms: u64) {
    let opts = PipelineOptions {
        failover: Duration::from_millis(1_500),
        max_pause: Duration::from_millis(200),
        batch_size: 100,
        ..PipelineOptions::new(config.clone(), "st", "w", db.with_file_name("dead-w"))
    };
    let aggregates: Arc<dyn SortedTable> = Arc::new(SqliteTable::open(db).unwrap());
    let leases: Arc<dyn SortedTable> = Arc::new(SqliteTable::open_table(db, "checkpoints").unwrap());
    let source = Arc::new(SyntheticSource::new(gen.clone(), Some(12_000.0)));
    let p = Arc::new(Pipeline::new(source, aggregates, leases, opts).unwrap());
    // A runtime of its own: shutting it down ends every task of the worker
    // at once, as a kill does.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    rt.spawn(p.clone().run(CancellationToken::new()));
    tokio::time::sleep(Duration::from_millis(kill_ms)).await;
    rt.shutdown_background();
}

/// A random window on minute edges inside the traffic's span, a step
/// (none, an hour or a day) and a grouping.
fn window(rng: &mut impl Rng) -> (i64, i64, Option<i64>, Vec<String>) {
    // Most windows in the first day and a half (a worker killed within
    // seconds read that far), some to the end of the span.
    let end = if rng.gen_bool(0.8) { START + 36 * H } else { START + SPAN };
    let start = START + rng.gen_range(0..(end - START) / M) * M;
    let len = rng.gen_range(1..=(end - start) / M) * M;
    let step = [None, Some(H), Some(D)][rng.gen_range(0..3)];
    let group = match rng.gen_range(0..3) {
        0 => vec![],
        1 => vec!["country".to_string()],
        _ => vec!["campaign".to_string()],
    };
    (start, start + len, step, group)
}

fn request(from: i64, to: i64, step: Option<i64>, rollup: Option<Rollup>, projection: Option<String>) -> PlanRequest {
    PlanRequest {
        window: WindowSpec::Absolute { from: from.to_string(), to: to.to_string() },
        rollup,
        step,
        timeseries: step.is_some(),
        filters: FilterSet::default(),
        now: START + SPAN,
        source: SourceRequest { projection, measures: None },
        mixing: Some(Mixing::complete(Completeness::unchecked())),
        snap: None,
        filling: Default::default(),
    }
}

/// Reads `req` from `projection` by its greedy decomposition (the first
/// alternative: the coarsest rollups wherever they are complete).
async fn read_greedy(
    table: &SqliteTable,
    config: &Config,
    projection: &str,
    req: PlanRequest,
    group: &[String],
) -> (zigzag_gather::plan::Plan, Groups) {
    let projections = zigzag_model::Projections::new(config).unwrap();
    let km = projections.by_name(projection).unwrap();
    let plan = zigzag_gather::plan::plan_source(km, req).unwrap();
    let fresh = || Aggregation::new(plan.step, group.to_vec(), km.measures().clone());
    let (a, _) = execute_fresh(table, &plan, &ExecOptions::default(), fresh, |a, item| a.add_item(item)).await.unwrap();
    (plan, a.groups)
}

type Groups = std::collections::BTreeMap<zigzag_gather::merge::GroupKey, zigzag_model::MeasureValues>;

/// What one killed run showed.
#[derive(Debug, Default)]
struct Seen {
    windows: usize,
    /// Windows read from more than one rollup, or from a coarse one.
    coarse: usize,
    /// Windows the unchecked coarse items answered differently.
    unchecked_differs: usize,
}

async fn compare(seed: u64, hour_ms: u64, day_ms: u64, kill_ms: u64, windows: usize) -> Seen {
    let config = config(hour_ms, day_ms);
    let gen = Generator::new(GenConfig {
        seed,
        shards: 3,
        records: 40_000,
        start_ms: START,
        span_ms: SPAN,
        late_fraction: 0.05,
        late_max_ms: 8 * H,
        referrers: 50,
        campaigns: 5,
        malformed_fraction: 0.0,
        ..GenConfig::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("z.db");
    run_and_kill(&db, &config, &gen, kill_ms).await;
    let table = SqliteTable::open(&db).unwrap();
    let leases = SqliteTable::open_table(&db, "checkpoints").unwrap();
    let complete = Completeness::read(&config, &leases).await.unwrap();
    let opts = ExecOptions::default();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut seen = Seen::default();
    for _ in 0..windows {
        let (from, to, step, group) = window(&mut rng);
        let what = format!(
            "[{from}, {to}) step {step:?} by {group:?}, {hour_ms}/{day_ms} ms cadences, killed at {kill_ms} ms"
        );
        // As the planner chooses (projection and decomposition by cost).
        let mixed =
            PlanRequest { mixing: Some(Mixing::complete(complete.clone())), ..request(from, to, step, None, None) };
        let g = zigzag_gather::gather(&table, &config, mixed, group.clone(), &opts).await.unwrap();
        let projection = g.plan.projection.clone();
        let minutes = request(from, to, step, Some(Rollup::Minute), Some(projection.clone()));
        let m = zigzag_gather::gather(&table, &config, minutes, group.clone(), &opts).await.unwrap();
        assert_eq!(m.plan.rollups(), "minute");
        assert!(
            g.aggregation.groups == m.aggregation.groups,
            "{what}: read from {} != all minutes\n{}",
            g.plan.rollups(),
            g.plan
        );
        // The most coarse items the planner may ever read: the greedy
        // decomposition, whatever it costs.
        let greedy =
            PlanRequest { mixing: Some(Mixing::complete(complete.clone())), ..request(from, to, step, None, None) };
        let (plan, greedy) = read_greedy(&table, &config, &projection, greedy, &group).await;
        assert!(greedy == m.aggregation.groups, "{what}: greedy read from {} != all minutes\n{plan}", plan.rollups());
        seen.windows += 1;
        if plan.rollups() != "minute" {
            seen.coarse += 1;
        }
        // The same with every coarse bucket taken as complete.
        let (_, blind) = read_greedy(&table, &config, &projection, request(from, to, step, None, None), &group).await;
        if blind != m.aggregation.groups {
            seen.unchecked_differs += 1;
        }
    }
    seen
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4, failure_persistence: None, ..ProptestConfig::default() })]

    /// Random cadences, traffic and kill points; 40 random windows each.
    #[test]
    fn mixed_rollup_answers_equal_all_minute_answers_at_every_flush_state(
        seed in 0u64..1_000,
        hour_ms in 150u64..700,
        day_extra in 0u64..900,
        kill_ms in 700u64..2_500,
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let seen = rt.block_on(compare(seed, hour_ms, hour_ms + day_extra, kill_ms, 40));
        prop_assert!(seen.coarse > 0, "some windows read coarse items: {seen:?}");
        eprintln!("seed {seed}, cadences {hour_ms}/{} ms, killed at {kill_ms} ms: {seen:?}", hour_ms + day_extra);
    }
}

/// Over many kill points, reading coarse items without the lease table's
/// owed spans answers differently somewhere: the check is what keeps
/// mixed answers exact, not luck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coarse_items_read_without_the_owed_spans_differ_from_the_minutes() {
    let mut differs = 0;
    for (i, kill_ms) in [600u64, 1_100, 1_600].into_iter().enumerate() {
        let seen = compare(100 + i as u64, 600, 1_200, kill_ms, 40).await;
        eprintln!("killed at {kill_ms} ms: {seen:?}");
        differs += seen.unchecked_differs;
    }
    assert!(differs > 0, "the slower sets lagged the minutes somewhere in a window read coarse");
}
