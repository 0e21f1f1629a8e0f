//! The pipeline configuration: the TOML file (`--config`), with its
//! settings' flags and `ZIGZAG_*` variables laid over it ([`overrides`]),
//! and how `--print-config` shows it.

pub mod overrides;

use crate::settings::{Setting, Source};
use anyhow::{anyhow, Context, Result};
use overrides::{Override, KEYS};
use std::path::Path;
use zigzag_model::config::SHIPPED_TOML;
use zigzag_model::Config;

/// What a binary reads without `--config`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Base {
    /// The shipped layout (`SHIPPED_TOML`): what writers write.
    Shipped,
    /// The built-in defaults: every dimension and rollup (a reader of a
    /// table from before layouts were recorded).
    Full,
}

impl Base {
    fn text(self) -> &'static str {
        match self {
            Base::Shipped => SHIPPED_TOML,
            Base::Full => "",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Base::Shipped => "the shipped layout",
            Base::Full => "the built-in defaults",
        }
    }
}

/// The configuration read, and what it was read from.
struct Layered {
    config: Config,
    /// The file's (or the base's) document, before the overrides.
    doc: toml::Table,
    /// The file's path, or the base's name.
    origin: String,
    from_file: bool,
}

fn layered(path: Option<&Path>, base: Base, overrides: &[Override]) -> Result<Layered> {
    let (text, origin) = match path {
        Some(p) => (read(p, "configuration")?, p.display().to_string()),
        None => (base.text().to_string(), base.name().to_string()),
    };
    let mut config = match (path, base) {
        // Not the same as parsing "": the defaults are what a table
        // written before projections were declared holds.
        (None, Base::Full) if overrides.is_empty() => Ok(Config::default()),
        _ => Config::from_toml(&text).with_context(|| format!("in {origin}")),
    };
    let doc: toml::Table = toml::from_str(&text).with_context(|| format!("in {origin}"))?;
    // One at a time, so that a value the configuration refuses is named:
    // the error is the one of the step that made a valid configuration
    // invalid (or the file's, when it needs a value only a flag gives, as
    // `prefixes = "auto"` needs writers, and none does).
    let mut over = doc.clone();
    for o in overrides {
        o.apply(&mut over).map_err(|e| anyhow!("{}: {e}", o.origin()))?;
        let now = Config::from_table(over.clone()).with_context(|| format!("{} (over {origin})", o.origin()));
        config = match (config, now) {
            (_, Ok(c)) => Ok(c),
            (Ok(_), Err(e)) | (Err(e), Err(_)) => Err(e),
        };
    }
    Ok(Layered { config: config?, doc, origin, from_file: path.is_some() })
}

/// The configuration in the file at `path` (or `base` without one) with
/// `overrides` laid over it.
pub fn load(path: Option<&Path>, base: Base, overrides: &[Override]) -> Result<Config> {
    Ok(layered(path, base, overrides)?.config)
}

/// The pipeline configuration as `--print-config` shows it: where it came
/// from, then one line per part: its value, where the value came from,
/// and for a setting its flag and variable.
fn describe(l: &Layered, overrides: &[Override]) -> String {
    let config = &l.config;
    let declared = || match l.from_file {
        true => Source::File(l.origin.clone().into()).to_string(),
        false => l.origin.clone(),
    };
    let source_of = |path: &[&str]| -> String {
        if let Some(o) = overrides.iter().rev().find(|o| o.key.path == path) {
            return o.source.to_string();
        }
        let mut at = Some(&l.doc);
        let mut value = None;
        for name in path {
            value = at.and_then(|t| t.get(*name));
            at = value.and_then(toml::Value::as_table);
        }
        match value {
            Some(_) => declared(),
            None => Source::Default.to_string(),
        }
    };
    let rollups = |r: &[zigzag_model::Rollup]| r.iter().map(|r| r.name()).collect::<Vec<_>>().join(", ");
    let every: Vec<String> = config.flush.every_ms.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let (inputs, derived) = (&config.scatter_rule.inputs, &config.scatter_rule.derived);
    let value_of = |key: &str| -> String {
        match key {
            "rollups" if config.rollups.is_empty() => "none (the base is not written)".into(),
            "rollups" => rollups(&config.rollups),
            "scatter.prefixes" => match derived.get(zigzag_model::projection::BASE) {
                Some(d) => format!("{} ({d})", config.scatter.prefixes),
                None => config.scatter.prefixes.to_string(),
            },
            "scatter.mode" => config.scatter.mode.name().into(),
            "scatter.writers" => inputs.writers.map_or("-".into(), |w| w.to_string()),
            "scatter.events_per_sec" => inputs.events_per_sec.map_or("-".into(), |e| e.to_string()),
            "scatter.cardinality" if inputs.cardinality.is_empty() => "-".into(),
            "scatter.cardinality" => {
                inputs.cardinality.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
            }
            "retention" => config.retention.describe(),
            "flush.interval_ms" => config.flush.interval_ms.to_string(),
            "flush.every_ms" if every.is_empty() => "-".into(),
            "flush.every_ms" => every.join(","),
            "flush.max_keys" => config.flush.max_keys.to_string(),
            "flush.max_memory_mb" => config.flush.max_memory_mb.to_string(),
            "flush.concurrency" => config.flush.concurrency.to_string(),
            other => unreachable!("a setting without a value: {other}"),
        }
    };
    let mut rows: Vec<[String; 4]> = KEYS
        .iter()
        .map(|k| {
            let var = crate::settings::env_var(k.flag);
            [k.dotted(), value_of(&k.dotted()), source_of(k.path), format!("[--{}, {var}]", k.flag)]
        })
        .collect();
    for p in &config.projections {
        let value = format!(
            "dimensions [{}], rollups [{}], {} prefix(es) {}{}",
            p.dimensions.join(", "),
            rollups(&p.rollups),
            p.scatter.prefixes,
            p.scatter.mode.name(),
            derived.get(&p.name).map_or(String::new(), |d| format!(" ({d})"))
        );
        rows.push([format!("projection.{}", p.name), value, declared(), String::new()]);
    }
    let width = |i: usize| rows.iter().map(|r| r[i].len()).max().unwrap_or(0);
    let (w0, w1, w2) = (width(0), width(1).min(48), width(2));
    let mut out = format!("pipeline configuration: {}\n", l.origin);
    for [k, v, s, f] in &rows {
        out.push_str(format!("  {k:<w0$}  {v:<w1$}  {s:<w2$}  {f}").trim_end());
        out.push('\n');
    }
    out
}

/// `--print-config`: the binary's settings, then the pipeline
/// configuration from `path` (or `base`) with `overrides` over it (no
/// base: the binary reads it from the table, and says so).
pub fn print_with(settings: &[Setting], path: Option<&Path>, base: Option<Base>, overrides: &[Override]) -> Result<()> {
    print!("{}", crate::settings::render(settings));
    match (path, base) {
        (None, None) => println!("pipeline configuration: the table's layout, read when a report runs"),
        (_, base) => print!("{}", describe(&layered(path, base.unwrap_or(Base::Full), overrides)?, overrides)),
    }
    Ok(())
}

/// What a writer takes of the layout `aggregates` records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// All of it (no `--config` and no layout flag given: the table's
    /// newest version, flush settings kept).
    Layout,
    /// Only the scatter prefix counts the scatter rule derived.
    Scatter,
}

/// `config` with what `aggregates` records: its whole layout
/// ([`Recorded::Layout`]), or the scatter prefix counts for the
/// projections whose counts the scatter rule derived (`prefixes =
/// "auto"`): a count cannot change under written items, so the table's
/// holds (logged when the rule now says otherwise). No read when nothing
/// was derived.
pub async fn adopt_recorded(
    config: Config,
    take: Recorded,
    aggregates: &dyn zigzag_core::table::SortedTable,
) -> Result<Config> {
    if take == Recorded::Scatter && config.scatter_rule.derived.is_empty() {
        return Ok(config);
    }
    let Some(stored) = zigzag_model::versions::load(aggregates).await.context("reading the table's layout")? else {
        return Ok(config);
    };
    if take == Recorded::Layout {
        tracing::info!(
            version = stored.newest.number,
            "no --config: writing the table's layout (`gather layout show` prints it)"
        );
        return Ok(stored.layout().apply(&config));
    }
    let stored = stored.newest.layout;
    let (config, notes) = config.adopt_recorded(&stored);
    for note in notes {
        tracing::info!("{note}");
    }
    Ok(config)
}

/// A file's text, or an error naming it and what it is.
pub fn read(path: &Path, what: &str) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading the {what} {}", path.display()))
}
