//! Renders a `zbench` report as a table (people) or JSON (machines).

use super::Report;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, CellAlignment, Table};

fn count(n: f64) -> String {
    if n < 1e6 {
        format!("{n:.0}")
    } else {
        format!("{n:.2e}")
    }
}

pub fn render_table(r: &Report) -> String {
    let mut out = format!("{} rows; Z-address {} bits; single-attribute index on {:?}\n", r.rows, r.z_bits, r.order_by);
    for q in &r.queries {
        out.push_str(&format!(
            "\n{}\n  search space: seed-001 estimate {} addresses; box {}; naive span {}; {} box(es)\n",
            q.name,
            count(q.seed_001_estimate),
            count(q.box_volume),
            count(q.naive_span),
            q.boxes
        ));
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED);
        t.set_header(vec!["index", "strategy", "returned", "scanned", "requests", "RCU", "scanned/returned"]);
        for run in &q.runs {
            let ratio =
                if run.returned > 0 { format!("{:.1}", run.scanned as f64 / run.returned as f64) } else { "-".into() };
            t.add_row(vec![
                Cell::new(&run.index),
                Cell::new(&run.strategy),
                Cell::new(run.returned).set_alignment(CellAlignment::Right),
                Cell::new(run.scanned).set_alignment(CellAlignment::Right),
                Cell::new(run.requests).set_alignment(CellAlignment::Right),
                Cell::new(format!("{:.1}", run.rcu)).set_alignment(CellAlignment::Right),
                Cell::new(ratio).set_alignment(CellAlignment::Right),
            ]);
        }
        out.push_str(&t.to_string());
        out.push('\n');
    }
    out
}

pub fn render_json(r: &Report) -> String {
    serde_json::to_string_pretty(r).expect("report serializes")
}
