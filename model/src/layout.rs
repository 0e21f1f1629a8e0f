//! The layout: the part of the configuration that decides what a flush
//! writes and where (rollups, dimensions and their encodings, measures,
//! scatter), stored with the data. The first writer records it in the
//! aggregate table; a writer with another layout is refused with what
//! differs; readers take it from the table, so they need no configuration.
//!
//! Its canonical form is JSON with fields in a fixed order (not `Debug`
//! output, which changes with the code), and its digest is the xxh3-64 of
//! that text.

use crate::config::{Config, DimensionSpec, ScatterMode};
use crate::measures::Measure;
use crate::rollup::Rollup;
use serde::{Deserialize, Serialize};
use zigzag_core::table::{AttrValue, Item, SortedTable, TableError, UpdateOutcome, UpdateRequest};

/// The layout item's key in the aggregate table (no item partition key
/// starts with `#`).
pub const LAYOUT_PK: &str = "#layout";
pub const LAYOUT_SK: &[u8] = b"layout";
const TEXT: &str = "layout";
const DIGEST: &str = "digest";

/// Bumped when the meaning of a layout's fields changes.
pub const LAYOUT_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Layout {
    pub version: u32,
    pub rollups: Vec<Rollup>,
    pub dimensions: Vec<DimensionSpec>,
    pub measures: Vec<Measure>,
    pub scatter_prefixes: u32,
    pub scatter_mode: ScatterMode,
}

#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    #[error("store: {0}")]
    Table(#[from] TableError),
    #[error("the layout item in the table is unreadable: {0}")]
    Corrupt(String),
    #[error(
        "the table was written with another layout; this configuration differs in: {}. \
         Use the table's layout (gather reads it from the table) or write to another table",
        .0.join("; ")
    )]
    Differs(Vec<String>),
}

impl zigzag_core::retry::Retryable for LayoutError {
    fn is_retryable(&self) -> bool {
        matches!(self, LayoutError::Table(e) if zigzag_core::retry::Retryable::is_retryable(e))
    }
}

impl Layout {
    pub fn of(config: &Config) -> Layout {
        Layout {
            version: LAYOUT_VERSION,
            rollups: config.rollups.clone(),
            dimensions: config.dimensions.clone(),
            measures: config.measures.clone(),
            scatter_prefixes: config.scatter.prefixes,
            scatter_mode: config.scatter.mode,
        }
    }

    /// `config` with this layout (its flush settings kept).
    pub fn apply(&self, config: &Config) -> Config {
        let mut c = config.clone();
        c.rollups = self.rollups.clone();
        c.dimensions = self.dimensions.clone();
        c.measures = self.measures.clone();
        c.scatter.prefixes = self.scatter_prefixes;
        c.scatter.mode = self.scatter_mode;
        c
    }

    pub fn canonical(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    pub fn digest(&self) -> String {
        format!("{:016x}", xxhash_rust::xxh3::xxh3_64(self.canonical().as_bytes()))
    }

    /// What differs from `stored`, one phrase per field.
    pub fn differences(&self, stored: &Layout) -> Vec<String> {
        let mut out = Vec::new();
        let mut field = |name: &str, mine: String, theirs: String| {
            if mine != theirs {
                out.push(format!("{name} is {mine} here but {theirs} in the table"));
            }
        };
        field("version", self.version.to_string(), stored.version.to_string());
        field("rollups", json(&self.rollups), json(&stored.rollups));
        field("dimensions", json(&self.dimensions), json(&stored.dimensions));
        field("measures", json(&self.measures), json(&stored.measures));
        field("scatter.prefixes", self.scatter_prefixes.to_string(), stored.scatter_prefixes.to_string());
        field("scatter.mode", self.scatter_mode.name().into(), stored.scatter_mode.name().into());
        out
    }

    fn from_item(item: &Item) -> Result<Layout, LayoutError> {
        match item.attrs.get(TEXT) {
            Some(AttrValue::S(text)) => serde_json::from_str(text).map_err(|e| LayoutError::Corrupt(e.to_string())),
            other => Err(LayoutError::Corrupt(format!("no layout text ({other:?})"))),
        }
    }
}

/// A field as a difference message shows it.
fn json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// Records `layout` in the table if it has none; otherwise checks it is
/// the same. Called by every writer before its first flush.
pub async fn ensure(table: &dyn SortedTable, layout: &Layout) -> Result<(), LayoutError> {
    let req = UpdateRequest::new(LAYOUT_PK, LAYOUT_SK.to_vec())
        .set_if_absent(TEXT, layout.canonical().as_str())
        .set_if_absent(DIGEST, layout.digest().as_str());
    let stored = match table.update(&req).await? {
        UpdateOutcome::Applied(item) | UpdateOutcome::ConditionFailed(Some(item)) => Layout::from_item(&item)?,
        UpdateOutcome::ConditionFailed(None) => return Err(LayoutError::Corrupt("refused without an item".into())),
    };
    let differences = layout.differences(&stored);
    if differences.is_empty() {
        Ok(())
    } else {
        Err(LayoutError::Differs(differences))
    }
}

/// The table's layout, if a writer recorded one.
pub async fn load(table: &dyn SortedTable) -> Result<Option<Layout>, LayoutError> {
    match table.get(LAYOUT_PK, LAYOUT_SK).await? {
        None => Ok(None),
        Some(item) => Layout::from_item(&item).map(Some),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zigzag_core::table::MemoryTable;

    #[test]
    fn the_canonical_form_is_stable_json() {
        let l = Layout::of(&Config::default());
        assert_eq!(
            l.canonical(),
            r#"{"version":1,"rollups":["minute","hour","day"],"dimensions":[{"field":"referrer","type":"string","bytes":8,"bits":null},{"field":"campaign","type":"string","bytes":6,"bits":null},{"field":"country","type":"string","bytes":2,"bits":null}],"measures":["clicks","impressions","cost_sum","cost_min","cost_max"],"scatter_prefixes":16,"scatter_mode":"hash"}"#
        );
        assert_eq!(serde_json::from_str::<Layout>(&l.canonical()).unwrap(), l);
        assert_eq!(l.digest().len(), 16);
    }

    #[tokio::test]
    async fn the_first_writer_records_it_and_another_layout_is_refused_by_name() {
        let table = MemoryTable::new();
        assert_eq!(load(&table).await.unwrap(), None);
        let mine = Layout::of(&Config::default());
        ensure(&table, &mine).await.unwrap();
        ensure(&table, &mine).await.unwrap();
        assert_eq!(load(&table).await.unwrap(), Some(mine.clone()));
        let mut other = Config::default();
        other.scatter.prefixes = 8;
        other.rollups = vec![Rollup::Hour];
        let e = ensure(&table, &Layout::of(&other)).await.unwrap_err().to_string();
        assert!(e.contains("scatter.prefixes is 8 here but 16 in the table") && e.contains("rollups"), "{e}");
        assert!(!e.contains("measures"), "only what differs: {e}");
        let mut flush_only = Config::default();
        flush_only.flush.interval_ms = 5;
        ensure(&table, &Layout::of(&flush_only)).await.expect("flush timing is not layout");
        assert_eq!(mine.apply(&other).scatter.prefixes, 16);
    }
}
