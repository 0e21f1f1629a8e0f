//! The application layer: everything the three binaries (`ingest`,
//! `gather`, `loadgen`, in `src/bin/`) share, so that the libraries below
//! them know nothing of command lines, files or signals.
//!
//! - [`store`]: `--db` / `--dynamodb` → the aggregate table and its lease
//!   table (one naming rule), opened for writing, reading or operating;
//! - `aws` (feature `aws`, on by default): the AWS options every AWS call
//!   takes (`--region`, `--endpoint-url`, `--aws-timeout`);
//! - [`config`]: the pipeline configuration file, and its settings as
//!   flags and variables over it;
//! - [`settings`]: every option a flag, a `ZIGZAG_*` variable and a key of
//!   the file, layered; `--print-config`, `--completions SHELL`, `--man`;
//!   [`VERSION`] (with the commit built from);
//! - [`duration`]: one duration grammar for every flag (`zigzag_core::duration`);
//! - [`layout_cache`]: the layout a reader last read from a table, so a
//!   report plans while it reads the layout again;
//! - [`signals`]: SIGINT and SIGTERM as a cancellation token;
//! - [`worker`]: the options of a pipeline worker (`ingest`, `loadgen --sink ingest`);
//! - [`purge`]: deleting expired items from a store without a TTL (SQLite);
//! - [`logging`] and [`summary`]: log lines, text or JSON, and the run summary;
//! - [`telemetry`]: metrics as Prometheus text and as CloudWatch EMF documents.
//!
//! Errors here carry context for a person (anyhow): this is the edge.
//!
//! Feature `aws` (default) brings DynamoDB (`--dynamodb`) and Kinesis
//! (`ingest --kinesis`, `loadgen --sink kinesis:`), and the AWS SDK, minutes
//! to compile; without it the binaries run embedded only (SQLite, files,
//! the synthetic source), which is what the demo builds.

/// `--version`: the package version and the commit the binaries were
/// built from (`build.rs`).
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("ZIGZAG_COMMIT"), ")");

#[cfg(feature = "aws")]
pub mod aws;
pub mod config;
pub mod duration;
pub mod layout_cache;
pub mod logging;
pub mod purge;
pub mod settings;
pub mod signals;
pub mod store;
pub mod summary;
pub mod telemetry;
pub mod worker;
