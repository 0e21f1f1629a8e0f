//! CSV with a header row; cells as in the table.

use super::cell_text;
use crate::error::{GatherError, Result};
use crate::report::Report;

pub fn render(report: &Report) -> Result<String> {
    let err = |e: &dyn std::fmt::Display| GatherError::Report(format!("writing CSV: {e}"));
    let mut w = ::csv::Writer::from_writer(Vec::new());
    w.write_record(&report.columns).map_err(|e| err(&e))?;
    for row in &report.rows {
        w.write_record(row.iter().map(cell_text)).map_err(|e| err(&e))?;
    }
    let bytes = w.into_inner().map_err(|e| err(&e))?;
    String::from_utf8(bytes).map_err(|e| err(&e))
}
