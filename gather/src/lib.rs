//! `gather`: reads what `ingest` wrote, as reports over a time window.
//!
//! A request goes through small steps, one module each:
//! - [`window`]: `--from/--to` or `--last`, and durations (`--step`);
//! - [`filter`]: `--where` expressions → Z-box constraints + exact tests;
//! - [`choice`]: the projection that answers the report exactly, read the
//!   fastest way within an RCU allowance ([`cost`]: requests, sequential
//!   round trips and units of each way), costed from [`statistics`] ingest
//!   keeps;
//! - [`plan`]: the window as spans of rollups (whole days from day items,
//!   hours at its edges, minutes left over, each where [`complete`] says a
//!   coarse item holds all of its finer ones), each span's bins × scatter
//!   prefixes as Z-range queries, and an estimate;
//! - [`execute`]: the queries in parallel under a concurrency limit, every
//!   page read, paced by [`throttle`] (RCU/s budget, retries);
//! - [`merge`]: partial aggregates summed exactly per group;
//! - [`report`]: `timeseries`, `top`, `ctr`, `totals` as typed rows;
//! - [`render`]: table, CSV, JSON, and SVG/PNG charts;
//! - [`explain`]: the plan, estimate and actual cost;
//! - [`check`]: the store against a generator's ground truth;
//! - [`compact`]: closed buckets' partials folded, one item per key
//!   (`gather compact`), and how reports read around it.
//!
//! [`run::gather`] strings plan, execute and merge together. `zbench` is
//! the schema workbench.

pub mod check;
pub mod choice;
pub mod compact;
pub mod complete;
pub mod cost;
pub mod error;
pub mod execute;
pub mod explain;
pub mod filter;
pub mod merge;
pub mod plan;
pub mod render;
pub mod report;
pub mod run;
pub mod scatter;
pub mod statistics;
pub mod throttle;
pub mod window;
pub mod zbench;

pub use complete::Completeness;
pub use error::GatherError;
pub use run::{gather, plan_report, Gathered, Planned};
