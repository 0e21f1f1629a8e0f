//! A time-series chart: one line per group (the 10 largest when there are
//! more), time on x, one measure on y. SVG or PNG by the file's extension,
//! drawn by `plotters`; text uses a font compiled into the binary
//! (`epaint_default_fonts`), so no system font is needed.

use crate::error::{GatherError, Result};
use crate::report::{Cell, Report};
use chrono::{TimeZone, Utc};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Once;

const SIZE: (u32, u32) = (960, 540);
const MAX_SERIES: usize = 10;
const FONT: &str = "sans-serif";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChartFormat {
    Svg,
    Png,
}

impl ChartFormat {
    pub fn of(path: &Path) -> Option<ChartFormat> {
        match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
            "svg" => Some(ChartFormat::Svg),
            "png" => Some(ChartFormat::Png),
            _ => None,
        }
    }
}

/// One line: label, points (ms, value) in time order.
type Line = (String, Vec<(i64, f64)>);

/// The lines to draw.
struct Series {
    title: String,
    lines: Vec<Line>,
    x: (i64, i64),
    y_max: f64,
    span_ms: i64,
}

/// What a chart draws: a report column, and whether it is a ratio
/// (undefined where a group has no row, not zero).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChartMeasure {
    pub name: String,
    pub ratio: bool,
}

fn series(report: &Report, measure: &ChartMeasure) -> Result<Series> {
    let bad = |why: String| GatherError::Report(why);
    if report.kind != "timeseries" {
        return Err(bad(format!("a chart draws a time series, not {}", report.kind)));
    }
    let y = report.column(&measure.name).ok_or_else(|| bad(format!("no column {}", measure.name)))?;
    let first_measure = report.keys;
    let mut lines: BTreeMap<String, BTreeMap<i64, f64>> = BTreeMap::new();
    let mut times = BTreeSet::new();
    for row in &report.rows {
        let Some(Cell::Time(t)) = row.first() else { return Err(bad("a row without a time".into())) };
        let label: Vec<String> = row[1..first_measure].iter().map(super::cell_text).collect();
        let label = if label.is_empty() { measure.name.clone() } else { label.join(" / ") };
        times.insert(*t);
        let v = row[y].number();
        let line = lines.entry(label).or_default();
        if let Some(v) = v {
            line.insert(*t, v);
        }
    }
    // Counts and amounts are zero where a group has no row; a ratio is undefined there.
    let fill = !measure.ratio;
    let mut ranked: Vec<(Line, f64)> = lines
        .into_iter()
        .map(|(label, pts)| {
            let pts: Vec<(i64, f64)> = if fill {
                times.iter().map(|t| (*t, pts.get(t).copied().unwrap_or(0.0))).collect()
            } else {
                pts.into_iter().collect()
            };
            let total = pts.iter().map(|p| p.1).sum::<f64>();
            ((label, pts), total)
        })
        .collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0 .0.cmp(&b.0 .0)));
    let groups = ranked.len();
    ranked.truncate(MAX_SERIES);
    let (t0, t1) = (times.first().copied().unwrap_or(0), times.last().copied().unwrap_or(0));
    let y_max = ranked.iter().flat_map(|l| l.0 .1.iter().map(|p| p.1)).fold(0.0, f64::max);
    let step = times.iter().zip(times.iter().skip(1)).map(|(a, b)| b - a).min();
    let mut title = match step {
        Some(ms) => format!("{} per {}", measure.name, duration_label(ms)),
        None => measure.name.clone(),
    };
    if groups > MAX_SERIES {
        title.push_str(&format!(" (largest {MAX_SERIES} of {groups} groups)"));
    }
    Ok(Series {
        title,
        lines: ranked.into_iter().map(|(line, _)| line).collect(),
        x: (t0, t1.max(t0 + 1)),
        y_max: if y_max > 0.0 { y_max * 1.05 } else { 1.0 },
        span_ms: t1 - t0,
    })
}

fn duration_label(ms: i64) -> String {
    const UNITS: [(i64, &str); 4] = [(86_400_000, "d"), (3_600_000, "h"), (60_000, "min"), (1_000, "s")];
    for (unit, name) in UNITS {
        if ms % unit == 0 {
            return format!("{} {name}", ms / unit);
        }
    }
    format!("{ms} ms")
}

/// Tick marks on round times (multiples of a round step, UTC), at most ~8.
fn time_ticks(t0: i64, t1: i64) -> Vec<i64> {
    const MIN: i64 = 60_000;
    const STEPS: [i64; 14] = [
        MIN,
        5 * MIN,
        10 * MIN,
        15 * MIN,
        30 * MIN,
        60 * MIN,
        120 * MIN,
        180 * MIN,
        360 * MIN,
        720 * MIN,
        1440 * MIN,
        2 * 1440 * MIN,
        7 * 1440 * MIN,
        30 * 1440 * MIN,
    ];
    let span = (t1 - t0).max(1);
    let step = STEPS.iter().copied().find(|s| span / s <= 8).unwrap_or(span / 8 + 1);
    let first = t0.div_euclid(step) * step + if t0.rem_euclid(step) == 0 { 0 } else { step };
    (0..).map(|i| first + i * step).take_while(|t| *t <= t1).collect()
}

fn time_label(t: i64, span_ms: i64) -> String {
    let Some(dt) = Utc.timestamp_millis_opt(t).single() else { return t.to_string() };
    if span_ms <= 86_400_000 {
        dt.format("%H:%M").to_string()
    } else if span_ms <= 14 * 86_400_000 {
        dt.format("%m-%d %H:%M").to_string()
    } else {
        dt.format("%Y-%m-%d").to_string()
    }
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, s: &Series) -> std::result::Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |e: &dyn std::fmt::Display| e.to_string();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(&s.title, (FONT, 22))
        .margin(16)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d((s.x.0..s.x.1).with_key_points(time_ticks(s.x.0, s.x.1)), 0.0..s.y_max)
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .x_labels(8)
        .y_labels(8)
        .x_label_formatter(&|t| time_label(*t, s.span_ms))
        .x_desc("time (UTC)")
        .draw()
        .map_err(|x| e(&x))?;
    for (i, (label, pts)) in s.lines.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(|x| e(&x))?
            .label(label.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2)));
    }
    if s.lines.len() > 1 {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|x| e(&x))?;
    }
    root.present().map_err(|x| e(&x))
}

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The bundled font is valid; if registration failed, text would be
        // skipped by plotters' error path below rather than panic.
        let _ = plotters::style::register_font(FONT, FontStyle::Normal, epaint_default_fonts::UBUNTU_LIGHT);
    });
}

/// Draws `measure` of a time-series report into `path` (.svg or .png).
pub fn write_chart(report: &Report, measure: &ChartMeasure, path: &Path) -> Result<()> {
    let err = |why: String| GatherError::Chart { path: path.display().to_string(), why };
    let format = ChartFormat::of(path).ok_or_else(|| err("the file name must end in .svg or .png".into()))?;
    let s = series(report, measure)?;
    register_font();
    match format {
        ChartFormat::Svg => {
            let mut svg = String::new();
            draw(SVGBackend::with_string(&mut svg, SIZE).into_drawing_area(), &s).map_err(err)?;
            std::fs::write(path, svg).map_err(|e| err(e.to_string()))
        }
        ChartFormat::Png => draw(BitMapBackend::new(path, SIZE).into_drawing_area(), &s).map_err(err),
    }
}

#[cfg(test)]
mod tick_tests {
    use super::*;

    #[test]
    fn ticks_fall_on_round_times() {
        let day = 1_795_132_800_000; // 2026-11-20T00:00Z
        let ticks = time_ticks(day, day + 23 * 3_600_000);
        assert!(ticks.len() <= 8 && ticks.len() >= 4, "{ticks:?}");
        assert!(ticks.iter().all(|t| t % (3 * 3_600_000) == 0), "{ticks:?}");
        let t = time_ticks(day + 7 * 60_000, day + 37 * 60_000);
        assert_eq!(t.first(), Some(&(day + 10 * 60_000)));
        assert_eq!(duration_label(3_600_000), "1 h");
        assert_eq!(duration_label(300_000), "5 min");
    }
}
