//! What a version changes beside its layout: the targets it fills, those
//! counted from its cut on, and the measures projections gain.

use crate::rollup::Rollup;
use serde::{Deserialize, Serialize};

/// A target the fill owns below the cut: a projection's rollup summed from
/// another's items.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FillTarget {
    pub projection: String,
    pub rollup: Rollup,
    pub source: String,
    pub source_rollup: Rollup,
}

/// A projection's rollup counted from the version's adoption on: nothing
/// before the cut holds it, and a report over earlier buckets is refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewTarget {
    pub projection: String,
    pub rollup: Rollup,
}

/// What a version changes beside its layout.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changes {
    /// Summed from the table's items below the cut.
    pub fills: Vec<FillTarget>,
    /// Counted from the cut on only.
    pub counted: Vec<NewTarget>,
    /// Measures projections the table writes gain, counted from the cut
    /// on (absent from versions recorded before this field: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub measures: Vec<NewMeasures>,
}

/// Measures a projection the table writes gains: its items of buckets
/// before the cut hold none of them (a flush of a late event does not add
/// them either), those from the cut on hold every event's. A report reads
/// them only from the cut on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewMeasures {
    pub projection: String,
    pub measures: Vec<String>,
}

/// One measure a projection holds only from a version's cut on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeasuredFrom {
    pub projection: String,
    pub measure: String,
    pub cut_ms: i64,
    /// The version that added it.
    pub version: u32,
    /// Whether every writer writes that version (else nothing reads it).
    pub adopted: bool,
}

/// A target a version added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Added<'a> {
    /// Summed from the table below the version's cut.
    Fill(&'a FillTarget),
    /// Counted from the version's cut on.
    Counted(&'a NewTarget),
}

impl Added<'_> {
    pub fn projection(&self) -> &str {
        match self {
            Added::Fill(t) => &t.projection,
            Added::Counted(t) => &t.projection,
        }
    }

    pub fn rollup(&self) -> Rollup {
        match self {
            Added::Fill(t) => t.rollup,
            Added::Counted(t) => t.rollup,
        }
    }
}
