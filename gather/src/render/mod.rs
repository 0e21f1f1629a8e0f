//! Output formats of a [`Report`]: a text table, CSV, JSON, and for time
//! series a chart (SVG or PNG).

#[cfg(feature = "charts")]
mod chart;
mod csv;
mod json;
mod table;

#[cfg(feature = "charts")]
pub use chart::{write_chart, ChartFormat, ChartMeasure};

use crate::error::Result;
use crate::report::{Cell, Report};
use zigzag_core::schema::format_instant;
use zigzag_model::schema::decimal::format_units;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Table,
    Csv,
    Json,
}

impl Format {
    pub fn parse(text: &str) -> Option<Format> {
        match text {
            "table" => Some(Format::Table),
            "csv" => Some(Format::Csv),
            "json" => Some(Format::Json),
            _ => None,
        }
    }
}

pub fn render(report: &Report, format: Format) -> Result<String> {
    match format {
        Format::Table => Ok(table::render(report)),
        Format::Csv => csv::render(report),
        Format::Json => json::render(report),
    }
}

/// A cell as text (tables and CSV): instants in RFC 3339, amounts as exact
/// decimals, ratios to six places, estimates to their field's places,
/// undefined values empty.
pub fn cell_text(c: &Cell) -> String {
    match c {
        Cell::Text(s) => s.clone(),
        Cell::Time(t) => format_instant(*t),
        Cell::Count(n) => n.to_string(),
        Cell::Decimal { units: Some(v), scale } => format_units(*v, *scale),
        Cell::Ratio(Some(r)) => format!("{r:.6}"),
        Cell::Estimate { value: Some(_), scale } => format!("{:.*}", *scale as usize, c.number().unwrap_or_default()),
        Cell::Decimal { units: None, .. } | Cell::Ratio(None) | Cell::Estimate { value: None, .. } => String::new(),
    }
}
