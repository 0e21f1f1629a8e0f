//! docs/METRICS.md documents every metric the code emits, and nothing
//! else: a metric added without a row (name, type, unit, labels, meaning,
//! what to alarm on), or a row left behind by a metric removed or renamed,
//! fails here.

use std::collections::BTreeMap;
use zigzag_testkit::sources;

/// Each metric name in the code, with its type (`counter`, `gauge`,
/// `histogram`: the macro that emits it).
fn metrics_in_code() -> BTreeMap<String, String> {
    let mut found = BTreeMap::new();
    for file in sources::product_sources() {
        let text = std::fs::read_to_string(&file).unwrap();
        for kind in ["counter", "gauge", "histogram"] {
            let macro_call = format!("{kind}!(");
            for (at, _) in sources::without_unit_tests(&text).match_indices(&macro_call) {
                let rest = text[at + macro_call.len()..].trim_start();
                let Some(rest) = rest.strip_prefix('"') else { continue };
                let name = rest.split('"').next().unwrap_or_default().to_string();
                if let Some(other) = found.insert(name.clone(), kind.to_string()) {
                    assert_eq!(other, kind, "{name} is emitted as a {other} and as a {kind}");
                }
            }
        }
    }
    found
}

/// Each metric row of the document: the name in the first cell, the cells.
fn metrics_in_doc() -> BTreeMap<String, Vec<String>> {
    let text = std::fs::read_to_string(sources::workspace_root().join("docs/METRICS.md")).unwrap();
    let mut rows = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("| `zigzag_")) {
        let cells: Vec<String> = line.trim_matches('|').split('|').map(|c| c.trim().to_string()).collect();
        let name = cells[0].trim_matches('`').to_string();
        assert!(rows.insert(name.clone(), cells).is_none(), "{name} has two rows");
    }
    rows
}

#[test]
fn every_metric_in_the_code_has_one_row_in_the_metrics_doc_and_no_row_is_stale() {
    let code = metrics_in_code();
    let doc = metrics_in_doc();
    assert!(code.len() > 30, "the scan found the metrics: {code:?}");
    let undocumented: Vec<_> = code.keys().filter(|n| !doc.contains_key(*n)).collect();
    let stale: Vec<_> = doc.keys().filter(|n| !code.contains_key(*n)).collect();
    assert!(undocumented.is_empty(), "metrics without a row in docs/METRICS.md: {undocumented:?}");
    assert!(stale.is_empty(), "rows in docs/METRICS.md for metrics the code does not emit: {stale:?}");
    for (name, cells) in &doc {
        assert_eq!(cells.len(), 6, "{name}: Metric | Type | Unit | Labels | Meaning | Alarm on");
        assert_eq!(cells[1], code[name], "{name}: the document says {}, the code emits a {}", cells[1], code[name]);
        assert!(cells[4].len() > 10, "{name}: say what it means");
    }
}
