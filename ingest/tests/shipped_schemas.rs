//! The example schemas in `examples/schemas/` parse, and records written
//! the way each one describes decode and aggregate to what a hand count of
//! the same records says (totals per rollup, every measure).

use std::collections::BTreeMap;
use zigzag_ingest::aggregate::{Aggregator, Generation};
use zigzag_ingest::decode::{DecodeLimits, Decoder};
use zigzag_ingest::source::RecordBatch;
use zigzag_model::{Config, KeyModel, MeasureValue, Position};

fn load(name: &str) -> Config {
    let path = format!("{}/../examples/schemas/{name}", env!("CARGO_MANIFEST_DIR"));
    Config::from_toml(&std::fs::read_to_string(&path).unwrap()).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Aggregates `records` and returns every measure's total, per rollup.
fn totals(config: &Config, records: &[String]) -> (BTreeMap<String, Vec<MeasureValue>>, u64) {
    let keys = KeyModel::new(config).unwrap();
    let agg = Aggregator::new(
        &zigzag_model::Projections::from(keys.clone()),
        Decoder::new(config, DecodeLimits::default()).unwrap(),
        config.measure_set().unwrap(),
    );
    let gen = Generation::default();
    let mut batch = RecordBatch::default();
    for (i, r) in records.iter().enumerate() {
        batch.push(Position::at(i as u64 + 1), r.as_bytes());
    }
    let mut rejected = Vec::new();
    agg.add_batch(&gen, 0, &batch, &mut rejected).unwrap();
    let rollups: Vec<_> = keys.rollups().collect();
    let merged = gen.into_rollups(agg.measures(), &rollups, |_| true).unwrap();
    let mut out: BTreeMap<String, Vec<MeasureValue>> = BTreeMap::new();
    for (k, (p, _)) in merged {
        let v = p.values(agg.measures());
        match out.get_mut(k.rollup.name()) {
            Some(t) => t.iter_mut().zip(&v.0).for_each(|(a, b)| a.merge(b)),
            None => {
                out.insert(k.rollup.name().to_string(), v.0);
            }
        }
    }
    (out, rejected.len() as u64)
}

#[test]
fn the_ad_server_schema_counts_nested_events_exactly() {
    let config = load("ad_server.toml");
    let kinds = ["view", "view", "view", "click", "conversion"];
    let (mut views, mut clicks, mut conversions, mut spend, mut max) = (0u64, 0u64, 0u64, 0i128, None::<i64>);
    let mut records = Vec::new();
    for i in 0..500i64 {
        let kind = kinds[i as usize % kinds.len()];
        let price = (i % 3 != 0).then_some(1_000 + i * 37);
        let geo =
            if i % 7 == 0 { String::new() } else { format!(r#","geo":{{"cc":"{}"}}"#, ["DE", "FR"][i as usize % 2]) };
        let price_json = price.map_or(String::new(), |p| format!(r#","price_micros":{p}"#));
        records.push(format!(
            r#"{{"event":"{kind}","at":{},"ad":{{"id":"a-{i}","campaign":{{"id":{}}}}}{geo},"device":{{"os":"ios"}}{price_json},"user":{{"id":"u-{}"}}}}"#,
            1_795_256_130_000 + i * 7_000,
            i % 11,
            i % 50
        ));
        match kind {
            "view" => views += 1,
            "click" => clicks += 1,
            _ => conversions += 1,
        }
        if let Some(p) = price {
            spend += p as i128;
            max = Some(max.map_or(p, |m: i64| m.max(p)));
        }
    }
    records.push(r#"{"event":"skip","at":1795256130000,"ad":{"campaign":{"id":1}}}"#.into());
    records.push(r#"{"event":"view","at":1795256130000,"ad":{"campaign":{"id":-4}}}"#.into());
    let (by_rollup, rejected) = totals(&config, &records);
    assert_eq!(rejected, 2, "an unknown event kind and a negative campaign id are dead-lettered");
    let want = vec![
        MeasureValue::Count(views),
        MeasureValue::Count(clicks),
        MeasureValue::Count(conversions),
        MeasureValue::Sum(spend),
        MeasureValue::Max(max),
    ];
    assert_eq!(by_rollup.len(), 3);
    for (rollup, got) in by_rollup {
        assert_eq!(got[..5], want, "{rollup}");
        assert!(matches!(got[5], MeasureValue::Sketch(_)), "{rollup}: users is a sketch");
        assert_eq!(got[5].units(), Some(50), "{rollup}: u-0 .. u-49");
    }
}

#[test]
fn the_access_log_schema_reads_csv_lines_and_skips_the_header() {
    let config = load("access_log.toml");
    let mut records = vec!["time,method,path,status,bytes".to_string()];
    let (mut errors, mut bytes, mut largest) = (0u64, 0i128, 0i64);
    for i in 0..300i64 {
        let status = [200, 200, 404, 500, 503][i as usize % 5];
        let size = i * 13 % 9_000;
        let path = if i % 4 == 0 { r#""/search?q=a,b""#.to_string() } else { format!("/p/{}", i % 9) };
        records.push(format!("21/Nov/2026:10:{:02}:{:02} +0000,GET,{path},{status},{size}", i / 60 % 60, i % 60));
        errors += u64::from(status >= 500);
        bytes += size as i128;
        largest = largest.max(size);
    }
    records.push("21/Nov/2026:10:15:30 +0000,GET,/x,200".into());
    let (by_rollup, rejected) = totals(&config, &records);
    assert_eq!(rejected, 1, "a short line is dead-lettered; the header is skipped, not dead-lettered");
    let want = vec![
        MeasureValue::Count(300),
        MeasureValue::Count(errors),
        MeasureValue::Sum(bytes),
        MeasureValue::Max(Some(largest)),
    ];
    assert_eq!(by_rollup.len(), 2);
    for (rollup, got) in by_rollup {
        assert_eq!(got, want, "{rollup}");
    }
}
