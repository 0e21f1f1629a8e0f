//! `gather`: reads what `ingest` wrote, as reports over a time window.
//!
//! A request goes through small steps, one module each, each importing
//! only those above it (`model/tests/module_graph.rs` refuses a circle):
//! - [`window`]: `--from/--to` or `--last`, and durations (`--step`);
//! - [`filter`]: `--where` expressions → Z-box constraints + exact tests;
//! - [`compact`]: closed buckets' partials folded, one item per key
//!   (`gather compact`), and its markers;
//! - [`plan`]: the window as spans of rollups (whole days from day items,
//!   hours at its edges, minutes left over, each where `complete` says a
//!   coarse item holds all of its finer ones), each span's bins × scatter
//!   prefixes as Z-range queries: a [`plan::Draft`] per way to read it,
//!   and the [`plan::Plan`] built once from the chosen one;
//! - `cost`: what reading a draft costs two ways (requests, sequential
//!   round trips and units);
//! - `route`: a plan's queries routed around compacted bins;
//! - [`execute`]: the queries in parallel under a concurrency limit, every
//!   page read, paced by `throttle` (RCU/s budget, retries);
//! - `statistics`: what ingest counted of each projection, rollup and bin;
//! - `choice`: the projection and decomposition that answer the report
//!   exactly, read the fastest way within an RCU allowance: one function
//!   of (request, layout, statistics) after one round trip of reads;
//! - [`merge`]: partial aggregates summed exactly per group;
//! - [`report`]: `timeseries`, `top`, `ctr`, `totals` as typed rows;
//! - [`render`]: table, CSV, JSON, and SVG/PNG charts;
//! - [`explain`]: the plan, estimate and actual cost;
//! - [`check`]: the store against a generator's ground truth;
//! - [`relayout`]: what changing the table's layout costs, priced from
//!   the statistics before anything is written.
//!
//! [`gather`] (`run.rs`) strings plan, execute and merge together; what the two
//! front ends (`gather`'s commands, `gather serve`) use is public, the
//! rest is the crate's own. `zbench` is the schema workbench.

pub mod check;
pub(crate) mod choice;
pub mod compact;
pub(crate) mod complete;
pub(crate) mod cost;
pub mod error;
pub mod execute;
pub mod explain;
pub mod filter;
pub mod merge;
pub mod plan;
pub mod relayout;
pub mod render;
pub mod report;
pub(crate) mod route;
pub(crate) mod run;
pub mod scatter;
pub(crate) mod statistics;
pub(crate) mod throttle;
pub mod window;
pub mod zbench;

pub use choice::{choose, finest_answering};
pub use complete::Completeness;
pub use error::GatherError;
pub use run::{gather, plan_report, Gathered, Planned};
pub use statistics::{kept_span, written_to};
pub use throttle::Retried;
