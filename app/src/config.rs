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

/// A file's text, or an error naming it and what it is.
pub fn read(path: &Path, what: &str) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading the {what} {}", path.display()))
}
