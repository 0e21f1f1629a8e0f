//! JSON: `{"report": kind, "rows": [{column: value, ...}, ...]}`, columns
//! in report order. Counts are integers, amounts are exact decimal numbers
//! (written from micro-units, never through a float), instants are RFC 3339
//! strings, undefined values are null.

use crate::error::{GatherError, Result};
use crate::report::{Cell, Report};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::value::RawValue;
use zigzag_core::schema::format_instant;
use zigzag_model::schema::decimal::format_units;

#[derive(serde::Serialize)]
struct Doc<'a> {
    report: &'a str,
    rows: Vec<Row<'a>>,
}

/// One row as a JSON object whose values are already JSON text.
struct Row<'a>(Vec<(&'a str, Box<RawValue>)>);

impl Serialize for Row<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

fn json_text(c: &Cell) -> Result<String> {
    let err = |e: serde_json::Error| GatherError::Report(format!("JSON: {e}"));
    Ok(match c {
        Cell::Text(s) => serde_json::to_string(s).map_err(err)?,
        Cell::Time(t) => serde_json::to_string(&format_instant(*t)).map_err(err)?,
        Cell::Count(n) => n.to_string(),
        Cell::Decimal { units: Some(v), scale } => format_units(*v, *scale),
        Cell::Ratio(Some(r)) if r.is_finite() => serde_json::to_string(r).map_err(err)?,
        Cell::Estimate { value: Some(_), .. } => super::cell_text(c),
        Cell::Decimal { units: None, .. } | Cell::Ratio(_) | Cell::Estimate { .. } => "null".into(),
    })
}

pub fn render(report: &Report) -> Result<String> {
    let mut rows = Vec::with_capacity(report.rows.len());
    for row in &report.rows {
        let mut obj = Vec::with_capacity(row.len());
        for (name, c) in report.columns.iter().zip(row) {
            let raw = RawValue::from_string(json_text(c)?)
                .map_err(|e| GatherError::Report(format!("column {name} as JSON: {e}")))?;
            obj.push((name.as_str(), raw));
        }
        rows.push(Row(obj));
    }
    let doc = Doc { report: report.kind, rows };
    serde_json::to_string_pretty(&doc).map(|s| s + "\n").map_err(|e| GatherError::Report(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_are_exact_and_columns_ordered() {
        let r = Report {
            kind: "totals",
            columns: vec!["zeta".into(), "cost".into(), "ctr".into()],
            keys: 1,
            rows: vec![vec![
                Cell::Text("a\"b".into()),
                Cell::Decimal { units: Some(123_456_789_012_345_678_901), scale: 6 },
                Cell::Ratio(None),
            ]],
        };
        let s = render(&r).unwrap();
        assert!(s.contains("123456789012345.678901"), "{s}");
        assert!(s.find("zeta").unwrap() < s.find("cost").unwrap());
        let v: serde_json::Value = serde_json::from_str(&s).unwrap();
        assert_eq!(v["rows"][0]["zeta"], "a\"b");
        assert!(v["rows"][0]["ctr"].is_null());
    }
}
