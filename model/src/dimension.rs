//! The declared dimensions (`[[dimension]]`): which field, how it is
//! encoded in the Z-address (`keys.rs` compiles them), and whether it is
//! indexed at all.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DimensionType {
    /// Fixed-width UTF-8 prefix of the value's text: equality, ranges, IN.
    #[default]
    String,
    /// xxh3 of the value's text: equality only, but any length in few bits.
    Hash,
    /// An integer field's value, in the field's declared `min..=max`.
    Integer,
    /// A string field's declared `values`, by position.
    Enum,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DimensionSpec {
    pub field: String,
    #[serde(rename = "type", default)]
    pub kind: DimensionType,
    /// Width of a `string` dimension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u32>,
    /// Width of a `hash` dimension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bits: Option<u32>,
    /// In the Z-address (filters narrow the reads) or only stored.
    #[serde(default = "yes")]
    pub indexed: bool,
}

fn yes() -> bool {
    true
}

impl DimensionSpec {
    pub fn string(field: &str, bytes: u32) -> Self {
        DimensionSpec {
            field: field.into(),
            kind: DimensionType::String,
            bytes: Some(bytes),
            bits: None,
            indexed: true,
        }
    }
}

pub fn default_dimensions() -> Vec<DimensionSpec> {
    vec![
        DimensionSpec::string("referrer", 8),
        DimensionSpec::string("campaign", 6),
        DimensionSpec::string("country", 2),
    ]
}
