//! `gather serve`: the Prometheus HTTP API over Zigzag's aggregates, so
//! Grafana's built-in Prometheus data source (and `promtool`) read them
//! with no plugin. It is one more front end over `gather`'s planner: a
//! query's reads are the same [`PlanRequest`](zigzag_gather::plan::PlanRequest)
//! the CLI builds.
//!
//! A query goes through small steps, one module each:
//! - [`compile`]: PromQL (parsed by `promql-parser`) checked against the
//!   documented subset and the layout ([`catalog`]) into a [`query::Query`]:
//!   reads ([`query::Leaf`]) under pure nodes; merge aggregations pushed
//!   into the reads;
//! - [`read`]: each leaf planned and read through `gather`, then folded
//!   into one sample per step (`x[r]` at `t`: the buckets ending in
//!   `(t - r, t]`); [`cache`]: the time slices no flush changed since
//!   they were read, kept in memory; [`recent`]: the small reads every
//!   query makes (layout, statistics, change marks), shared;
//! - [`eval`]: aggregations, vector matching, functions ([`series`]);
//! - [`engine`]: the three strung together, with the limits;
//! - [`fills`]: a layout change's fill progress as gauges on `/metrics`;
//! - [`meta`]: label names, label values and series for query editors;
//! - [`api`]: the HTTP routes, parameters and response shapes.

pub mod api;
pub mod cache;
pub mod catalog;
pub mod compile;
pub mod engine;
pub mod error;
pub mod eval;
pub mod fills;
pub mod meta;
pub mod query;
pub mod read;
pub mod reader;
pub mod recent;
pub mod samples;
pub mod series;

pub use api::{router, Server, ServerOptions};
pub use catalog::Catalog;
pub use engine::{Answer, Engine};
pub use error::Limits;
pub use error::ServeError;
pub use meta::{Found, Lookup};
