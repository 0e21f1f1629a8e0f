//! zbench on a schema whose timestamp is binned into the partition key:
//! queries that cross bins return exactly what a brute-force scan of the
//! generated rows says, with every strategy.

use zigzag_core::query::{AdaptiveConfig, Strategy};
use zigzag_core::schema::Schema;
use zigzag_gather::zbench;

const SCHEMA: &str = r#"
[[dimension]]
name = "ts"
type = "timestamp"
unit = "minute"
bin = "week"
bits = 14
[[dimension]]
name = "site"
type = "enum"
values = ["a", "b", "c", "d"]
[[dimension]]
name = "v"
type = "uint"
bits = 8
"#;

// 2016-01-04 was a Monday: bins start there and every 7 days after.
const T0: i64 = 1_451_865_600;

fn rows() -> Vec<(i64, &'static str, u64)> {
    let sites = ["a", "b", "c", "d"];
    let mut s = 88172645463325252u64;
    (0..4000)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (T0 + (s % (5 * 7 * 86_400)) as i64, sites[(s >> 40) as usize % 4], (s >> 20) % 256)
        })
        .collect()
}

#[tokio::test]
async fn binned_queries_match_brute_force() {
    let schema = Schema::from_toml(SCHEMA).unwrap();
    let data = rows();
    let mut csv = String::from("ts,site,v\n");
    for (t, site, v) in &data {
        csv.push_str(&format!("{t},{site},{v}\n"));
    }
    let ds = zbench::load(&schema, 0, csv.as_bytes()).await.unwrap();
    assert_eq!(ds.rows, 4000);
    let (t1, t2) = (T0 + 3 * 86_400 + 600, T0 + 23 * 86_400 - 60);
    let queries = zbench::parse_queries(&format!(
        "[[query]]\nname = 'three bins'\nts = [{t1}, {t2}]\nv = {{ max = 40 }}\n\n\
         [[query]]\nname = 'sites'\nts = [{T0}, {}]\nsite = {{ in = ['b', 'd'] }}\nv = [100, 120]\n",
        T0 + 35 * 86_400
    ))
    .unwrap();
    let strategies = vec![
        Strategy::Naive,
        Strategy::Precise { budget: 64 },
        Strategy::PageJump { limit: 4 },
        Strategy::Adaptive(AdaptiveConfig::default()),
    ];
    let report = zbench::run(&schema, &ds, 0, &queries, &strategies).await.unwrap();
    // Timestamps are minute-resolution in the index: the filter keeps seconds exact.
    let want = [
        data.iter().filter(|(t, _, v)| (t1..=t2).contains(t) && *v <= 40).count(),
        data.iter().filter(|(_, s, v)| ["b", "d"].contains(s) && (100..=120).contains(v)).count(),
    ];
    assert_eq!(report.queries[0].boxes, 4, "day 3 .. day 23 crosses four weekly bins");
    assert_eq!(report.queries[1].boxes, 6, "T0 .. T0+35d touches six bins (the last one at its first instant)");
    for (q, want) in report.queries.iter().zip(want) {
        assert!(want > 10);
        for run in &q.runs {
            assert_eq!(run.returned as usize, want, "{} / {}", q.name, run.strategy);
        }
    }

    // Bins are partitions: an open time range cannot be planned, and the
    // error says which field of which query.
    let open = zbench::parse_queries("[[query]]\nname = 'open'\nv = 3\nts = { min = 1451865600 }\n").unwrap();
    let err = zbench::run(&schema, &ds, 0, &open, &strategies).await.unwrap_err().to_string();
    assert!(err.starts_with("query file, line 4: query \"open\", field \"ts\""), "{err}");
}
