//! The data model shared by `ingest` (writer) and `gather` (reader): what an
//! aggregate item is and where it lives.
//!
//! - [`config`]: the pipeline configuration (TOML, all defaults sensible);
//!   it parses the file and assembles the other parts from it
//!   (`config/assemble.rs`); nothing here imports it back
//!   (`tests/module_graph.rs` checks). [`shipped`]: the layout written
//!   without one.
//! - [`error`]: [`ConfigError`], what every part says of a declaration it
//!   cannot use. [`dimension`]: the declared dimensions and their types.
//! - [`schema`]: the declared event schema (format, fields, types) and the
//!   rules that type a field's value.
//! - [`rollup`]: rollup granularities and their partition time bins.
//! - [`keys`]: partition key (scatter prefix + rollup + time bin) and sort
//!   key (Z-address + identity suffix) of an aggregate, and the scatter rule.
//! - [`literal`]: quoted values in `where` expressions (measures and
//!   gather's `--where`).
//! - [`layout`]: the layout stored with the data (writers must match it,
//!   readers take it from the table); [`versions`]: the versions
//!   `gather layout apply` records, each with its cut and fill targets.
//! - [`projection`]: declared subsets of the dimensions, each written
//!   with its own rollups, measures and scatter; the base is one of them.
//! - [`scatter`]: the scatter rule (the GSI write-scaling article's write-rate formula) and the
//!   prefix counts it derives for `prefixes = "auto"`.
//! - [`measure`]: the measure kinds (count, sum, min, max): accumulation,
//!   merge, item codec and the exactly-once update request, in one place.
//! - [`changes`]: the change marks a flush writes around its items, per
//!   time slice, so a reader knows whether a slice changed since it read it.
//! - [`stats`]: items per projection, rollup and bin, kept by ingest for
//!   gather's planner.
//! - [`value_catalog`]: every value each dimension took, written by the
//!   flush, for label values over all the data kept.
//! - [`position`]: stream positions (sequence numbers up to 256 bits).
//! - [`source`]: the contract of a replayable, sharded record source.
//! - [`truth`]: a generator's ground truth, to check reports against.

pub mod changes;
pub mod config;
pub mod dimension;
pub mod error;
pub mod hll;
pub mod keys;
pub mod layout;
pub mod layout_diff;
pub mod literal;
pub mod mark;
pub mod measure;
pub mod position;
pub mod projection;
pub mod retention;
pub mod rollup;
pub mod scatter;
pub mod schema;
pub mod shipped;
pub mod source;
pub mod stats;
pub mod truth;
pub mod value_catalog;
pub mod versions;

pub use config::Config;
pub use error::ConfigError;
pub use keys::Projections;
pub use keys::{Identity, KeyDim, KeyModel};
pub use measure::{MeasureSet, MeasureValue, MeasureValues};
pub use position::{Position, SeqNo};
pub use retention::Retention;
pub use rollup::Rollup;
pub use scatter::ScatterMode;
pub use truth::Truth;
