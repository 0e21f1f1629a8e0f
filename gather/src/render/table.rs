//! A text table (comfy-table), numbers right-aligned.

use super::cell_text;
use crate::report::{Cell, Report};
use comfy_table::{presets::UTF8_FULL_CONDENSED, CellAlignment, Table};

pub fn render(report: &Report) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(report.columns.iter().map(|c| c.as_str()));
    for row in &report.rows {
        t.add_row(row.iter().map(|c| {
            let cell = comfy_table::Cell::new(cell_text(c));
            match c {
                Cell::Text(_) | Cell::Time(_) => cell,
                _ => cell.set_alignment(CellAlignment::Right),
            }
        }));
    }
    if report.rows.is_empty() {
        return format!("{t}\n(no rows)\n");
    }
    format!("{t}\n")
}
