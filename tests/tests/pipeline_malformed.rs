//! Malformed input end to end: loadgen → ingest pipeline → store → gather.
//!
//! - A generator with 20% malformed records: the pipeline counts exactly the
//!   generator's valid and malformed records, dead-letters exactly the
//!   malformed ones (by shard and sequence number, with the right reason and
//!   the record's bytes), and the store's totals equal the ground truth.
//! - Arbitrary byte records mixed with valid events, through an in-test
//!   source: the pipeline never fails, every record is counted once as valid
//!   or rejected, and what it stored equals what the valid events sum to.

use base64::Engine;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use zigzag_core::table::{MemoryTable, SortedTable};
use zigzag_gather::check::{self, Status};
use zigzag_gather::execute::ExecOptions;
use zigzag_ingest::decode::{DecodeLimits, Decoder};
use zigzag_ingest::source::Source;
use zigzag_ingest::{Pipeline, PipelineOptions, RunSummary};
use zigzag_loadgen::{GenConfig, Generated, Generator, SyntheticSource};
use zigzag_model::{Config, KeyModel, MeasureValues, Truth};
use zigzag_sqlite::SqliteTable;
use zigzag_tests::VecSource;

/// Small flushes, so one run makes many of them.
fn config() -> Config {
    let mut c = Config::default();
    c.flush.max_keys = 500;
    c.flush.interval_ms = 20;
    c
}

async fn run_pipeline(
    source: Arc<dyn Source>,
    aggregates: Arc<dyn SortedTable>,
    checkpoints: Arc<dyn SortedTable>,
    config: &Config,
    limits: DecodeLimits,
    dead_letters: &Path,
) -> RunSummary {
    let opts = PipelineOptions {
        limits,
        batch_size: 100,
        ..PipelineOptions::new(config.clone(), "clicks", "malformed-test", dead_letters.to_path_buf())
    };
    let pipeline = Arc::new(Pipeline::new(source, aggregates, checkpoints, opts).expect("pipeline"));
    pipeline.run(CancellationToken::new()).await.expect("the pipeline never fails on bad records")
}

/// Gather's `check` of the store against `truth`: every group must match.
async fn assert_store_matches(table: &dyn SortedTable, config: &Config, truth: &Truth) {
    let km = KeyModel::new(config).unwrap();
    let opts = ExecOptions { consistent: true, ..ExecOptions::default() };
    let now = truth.last_ms.unwrap_or_default();
    let report = check::check(table, &zigzag_model::Projections::from(km.clone()), truth, now, &opts)
        .await
        .expect("gather check");
    let text = check::render(&report);
    assert_eq!(report.mismatches(), 0, "store != truth:\n{text}");
    assert!(report.rows.iter().all(|r| r.status == Status::Match), "{text}");
    let total = report.rows.iter().find(|r| r.check == "total").expect("a total row");
    assert_eq!(total.store, MeasureValues::from_named(&report.set, &truth.totals), "{text}");
}

/// The decode-error label each generator defect must be dead-lettered with.
fn expected_reason(defect: &str) -> &'static str {
    match defect {
        "truncated" => "malformed_json",
        "missing_referrer" => "missing_field",
        "bad_timestamp" => "bad_timestamp",
        "wrong_type" => "wrong_type",
        "not_utf8" => "not_utf8",
        "unknown_type" => "not_allowed",
        "negative_cost" => "out_of_range",
        "absurd_timestamp" => "timestamp_out_of_range",
        other => panic!("unknown generator defect {other:?}"),
    }
}

/// One dead-letter line: (shard, seq) and the rest.
struct DeadLetter {
    shard: String,
    seq: u64,
    reason: String,
    record: Vec<u8>,
}

fn read_dead_letters(path: &Path) -> Vec<DeadLetter> {
    let text = std::fs::read_to_string(path).expect("dead-letter file");
    text.lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
            let field = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_string);
            let shard = field("shard").unwrap_or_else(|| panic!("no shard: {line}"));
            let seq = field("seq").unwrap_or_else(|| panic!("no seq: {line}")).parse().expect("seq is decimal");
            let reason = field("reason").unwrap_or_else(|| panic!("no reason: {line}"));
            assert!(field("error").is_some_and(|e| !e.is_empty()), "no error message: {line}");
            let record = match (field("record"), field("record_base64")) {
                (Some(text), None) => text.into_bytes(),
                (None, Some(b64)) => base64::engine::general_purpose::STANDARD.decode(b64).expect("valid base64"),
                _ => panic!("exactly one of record / record_base64 expected: {line}"),
            };
            DeadLetter { shard, seq, reason, record }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_records_are_dead_lettered_exactly_and_totals_match_truth() {
    let gen_cfg = GenConfig {
        seed: 7,
        shards: 3,
        records: 20_000,
        referrers: 300,
        campaigns: 8,
        malformed_fraction: 0.2,
        ..GenConfig::default()
    };
    let gen = Generator::new(gen_cfg.clone());
    let truth = zigzag_loadgen::truth::compute(&gen);
    // Every malformed record of the generator: (shard id, seq) → (defect, bytes).
    let mut malformed: BTreeMap<(String, u64), (&'static str, Vec<u8>)> = BTreeMap::new();
    let mut buf = Vec::new();
    for shard in 0..gen_cfg.shards {
        for seq in 1..=gen.shard_len(shard) {
            if let Generated::Malformed(defect) = gen.record(shard, seq, &mut buf) {
                malformed.insert((Generator::shard_id(shard), seq), (defect, buf.clone()));
            }
        }
    }
    assert_eq!(malformed.len() as u64, truth.malformed);
    assert!(truth.malformed > 3_000, "about 20% of 20,000: {}", truth.malformed);

    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("zigzag.db");
    let aggregates: Arc<dyn SortedTable> = Arc::new(SqliteTable::open(&db).unwrap());
    let checkpoints: Arc<dyn SortedTable> = Arc::new(SqliteTable::open_table(&db, "checkpoints").unwrap());
    let dead = dir.path().join("dead.jsonl");
    let config = config();
    let source = Arc::new(SyntheticSource::new(Generator::new(gen_cfg), None));
    let s = run_pipeline(source, aggregates.clone(), checkpoints, &config, DecodeLimits::default(), &dead).await;

    assert_eq!(s.records, truth.records);
    assert_eq!(s.valid, truth.valid);
    assert_eq!(s.rejected, truth.malformed);
    assert!(s.flushes > 5, "small max_keys means many flushes: {s:?}");

    let letters = read_dead_letters(&dead);
    assert_eq!(letters.len() as u64, truth.malformed, "one line per malformed record");
    let seen: BTreeSet<(String, u64)> = letters.iter().map(|d| (d.shard.clone(), d.seq)).collect();
    assert_eq!(seen.len(), letters.len(), "no record is dead-lettered twice");
    let expected: BTreeSet<(String, u64)> = malformed.keys().cloned().collect();
    assert_eq!(seen, expected, "dead letters are exactly the generator's malformed records");
    for d in &letters {
        let (defect, bytes) = &malformed[&(d.shard.clone(), d.seq)];
        assert_eq!(d.reason, expected_reason(defect), "{} #{}: defect {defect}", d.shard, d.seq);
        assert_eq!(&d.record, bytes, "{} #{}: the record's bytes are kept", d.shard, d.seq);
    }
    let reasons: BTreeSet<&str> = letters.iter().map(|d| d.reason.as_str()).collect();
    assert_eq!(reasons.len(), 8, "every defect kind occurs: {reasons:?}");

    assert_store_matches(&*aggregates, &config, &truth).await;
}

// ---------------------------------------------------------------------------
// Arbitrary records through an in-test source.

/// 2026-11-20T00:00:00Z: valid events fall within two days of it.
const T0: i64 = 1_795_132_800_000;

/// A valid event, as JSON text; strings include escapes and multi-byte
/// characters that the fixed-width key encodings cut in the middle.
fn valid_event() -> impl Strategy<Value = Vec<u8>> {
    let referrer = prop::sample::select(vec!["news.example", "a", "ünïcødé-referrer", "quote\"d", "tab\tand\\slash"]);
    let campaign = prop::sample::select(vec!["camp-1", "camp-2", "€uro", "x"]);
    let country = prop::sample::select(vec!["DE", "US", "Ü", "日本"]);
    (any::<bool>(), 0..2 * 86_400_000i64, any::<bool>(), referrer, campaign, country, prop::option::of(0u32..5_000_000))
        .prop_map(|(click, offset, rfc3339, referrer, campaign, country, cost)| {
            let ts = T0 + offset;
            let ts = if rfc3339 {
                serde_json::Value::from(zigzag_core::schema::format_instant(ts))
            } else {
                serde_json::Value::from(ts)
            };
            let mut ev = serde_json::json!({
                "type": if click { "click" } else { "impression" },
                "ts": ts,
                "referrer": referrer,
                "campaign": campaign,
                "country": country,
                "url": "/p/1",
            });
            if let Some(c) = cost {
                // Micro-units as a decimal number (exact in f64 round trip).
                ev["cost"] = serde_json::Value::from(c as f64 / 1e6);
            }
            serde_json::to_vec(&ev).unwrap()
        })
}

fn any_record() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => prop::collection::vec(any::<u8>(), 0..300),
        2 => valid_event(),
    ]
}

/// What the valid records sum to (decoded, then summed by the model's
/// one-event-at-a-time oracle), so gather's check can compare the store with it.
fn truth_of(shards: &[Arc<Vec<Vec<u8>>>], limits: &DecodeLimits) -> (Truth, u64) {
    let config = Config::default();
    let (set, keys, fields) =
        (config.measure_set().unwrap(), KeyModel::new(&config).unwrap(), config.typed_fields().unwrap());
    let decoder = Decoder::new(&config, *limits).unwrap();
    let mut t = Truth::default();
    let mut rejected = 0;
    for records in shards {
        for r in records.iter() {
            t.records += 1;
            let Ok(ev) = decoder.decode(r) else {
                rejected += 1;
                continue;
            };
            t.add_event(&set, &keys, &fields, ev.ts_ms, &ev.values);
        }
    }
    t.malformed = rejected;
    (t, rejected)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, failure_persistence: None, ..ProptestConfig::default() })]

    /// Arbitrary bytes mixed with valid events never fail the pipeline;
    /// each record is valid or rejected exactly once (some valid events
    /// exceed a small size limit); the store holds exactly the valid events.
    #[test]
    fn arbitrary_records_never_fail_the_pipeline(
        shards in prop::collection::vec(prop::collection::vec(any_record(), 0..80), 1..4),
        max_bytes in prop_oneof![Just(1usize << 20), 100usize..250],
    ) {
        let shards: Vec<Arc<Vec<Vec<u8>>>> = shards.into_iter().map(Arc::new).collect();
        let limits = DecodeLimits { max_bytes, ..DecodeLimits::default() };
        let (truth, expected_rejected) = truth_of(&shards, &limits);
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let dead = dir.path().join("dead.jsonl");
            let aggregates: Arc<dyn SortedTable> = Arc::new(MemoryTable::new());
            let checkpoints: Arc<dyn SortedTable> = Arc::new(MemoryTable::new());
            let mut config = config();
            config.flush.max_keys = 50;
            let source = Arc::new(VecSource::new(shards.clone()));
            let s = run_pipeline(source, aggregates.clone(), checkpoints, &config, limits, &dead).await;
            assert_eq!(s.records, truth.records);
            assert_eq!(s.valid + s.rejected, s.records);
            assert_eq!(s.valid, truth.valid);
            assert_eq!(s.rejected, expected_rejected);
            let letters = read_dead_letters(&dead);
            assert_eq!(letters.len() as u64, expected_rejected);
            for d in &letters {
                let index: usize = d.shard.strip_prefix("vec-").and_then(|i| i.parse().ok())
                    .unwrap_or_else(|| panic!("dead letter names shard {:?}", d.shard));
                assert_eq!(&d.record, &shards[index][d.seq as usize - 1], "{} #{}", d.shard, d.seq);
            }
            if truth.valid > 0 {
                assert_store_matches(&*aggregates, &config, &truth).await;
            }
        });
    }
}
