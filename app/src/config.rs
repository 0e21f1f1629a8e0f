//! Reading the pipeline configuration (TOML).

use anyhow::{Context, Result};
use std::path::Path;
use zigzag_model::Config;

/// The configuration in the file at `path`, or `default` without one (the
/// shipped layout for writers; the built-in defaults for a reader of a
/// table from before layouts were recorded).
pub fn load(path: Option<&Path>, default: impl FnOnce() -> Config) -> Result<Config> {
    match path {
        None => Ok(default()),
        Some(p) => Config::from_toml(&read(p, "configuration")?).with_context(|| format!("in {}", p.display())),
    }
}

/// The pipeline configuration's settings as `--print-config` shows them:
/// where it came from (`source`), then one line per setting.
fn describe(config: &Config, source: &str) -> String {
    let rollups = |r: &[zigzag_model::Rollup]| r.iter().map(|r| r.name()).collect::<Vec<_>>().join(", ");
    let mut lines = vec![format!("pipeline configuration: {source}")];
    let mut line = |k: &str, v: String| lines.push(format!("  {k:<20} {v}"));
    line(
        "rollups",
        if config.rollups.is_empty() { "none (the base is not written)".into() } else { rollups(&config.rollups) },
    );
    for p in &config.projections {
        line(
            &format!("projection.{}", p.name),
            format!(
                "dimensions [{}], rollups [{}], {} prefix(es) {}",
                p.dimensions.join(", "),
                rollups(&p.rollups),
                p.scatter.prefixes,
                p.scatter.mode.name()
            ),
        );
    }
    line("scatter", format!("{} prefix(es) {}", config.scatter.prefixes, config.scatter.mode.name()));
    line("retention", config.retention.describe());
    line("flush.interval_ms", config.flush.interval_ms.to_string());
    let every: Vec<String> = config.flush.every_ms.iter().map(|(k, v)| format!("{k} = {v}")).collect();
    line("flush.every_ms", if every.is_empty() { "-".into() } else { every.join(", ") });
    line("flush.max_keys", config.flush.max_keys.to_string());
    line("flush.max_memory_mb", config.flush.max_memory_mb.to_string());
    line("flush.concurrency", config.flush.concurrency.to_string());
    lines.join("\n") + "\n"
}

/// `--print-config`: the binary's settings, then the pipeline
/// configuration from `path`, or `default` without one (None: the binary
/// reads it from the table, and says so).
pub fn print_with(settings: &str, path: Option<&Path>, default: Option<fn() -> Config>) -> Result<()> {
    print!("{settings}");
    match (path, default) {
        (Some(p), _) => print!("{}", describe(&load(Some(p), Config::default)?, &p.display().to_string())),
        (None, Some(d)) => print!("{}", describe(&d(), "the shipped layout (no --config)")),
        (None, None) => println!("pipeline configuration: the table's layout, read when a report runs"),
    }
    Ok(())
}

/// A file's text, or an error naming it and what it is.
pub fn read(path: &Path, what: &str) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading the {what} {}", path.display()))
}
