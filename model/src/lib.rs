//! The data model shared by `ingest` (writer) and `gather` (reader): what an
//! aggregate item is and where it lives.
//!
//! - [`config`]: the pipeline configuration (TOML, all defaults sensible).
//! - [`rollup`]: rollup granularities and their partition time bins.
//! - [`keys`]: partition key (scatter prefix + rollup + time bin) and sort
//!   key (Z-address + identity suffix) of an aggregate, and the scatter rule.
//! - [`layout`]: the layout stored with the data (writers must match it,
//!   readers take it from the table).
//! - [`measures`]: the measures of one aggregate, their item attributes and
//!   the exactly-once update request.
//! - [`position`]: stream positions (sequence numbers up to 256 bits).
//! - [`source`]: the contract of a replayable, sharded record source.
//! - [`truth`]: a generator's ground truth, to check reports against.

pub mod config;
pub mod keys;
pub mod layout;
pub mod measures;
pub mod position;
pub mod rollup;
pub mod source;
pub mod truth;

pub use config::{Config, ConfigError, Field, ScatterMode};
pub use keys::{Identity, KeyModel};
pub use measures::{Measure, Measures};
pub use position::{Position, SeqNo};
pub use rollup::Rollup;
pub use truth::{Truth, TruthMeasures};
