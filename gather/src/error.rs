//! The library's errors. Each names the part of the request, or the
//! partition, it is about, so the binary only adds context.

use thiserror::Error;
use zigzag_core::query::QueryError;

#[derive(Debug, Error)]
pub enum GatherError {
    /// A bad `--from`, `--to`, `--last` or `--step`.
    #[error("{arg} {text:?}: {why}")]
    Window { arg: &'static str, text: String, why: String },
    /// No window given at all.
    #[error("no time window: give --last (e.g. --last 1h, --last 7d), or --from and --to")]
    NoWindow,
    /// A bad `--where` expression.
    #[error("--where {expr:?}: {why}")]
    Filter { expr: String, why: String },
    /// A bad `--group-by` field.
    #[error("--group-by {field:?}: {why}")]
    GroupBy { field: String, why: String },
    /// No configured rollup can answer the window at the asked resolution.
    #[error("rollup: {0}")]
    Rollup(String),
    #[error("configuration: {0}")]
    Config(String),
    /// No projection answers the report exactly, or `--projection` names
    /// one that cannot.
    #[error("projection: {0}")]
    Projection(String),
    /// A query failed; `pk` is its partition.
    #[error("query of partition {pk}: {source}")]
    Query {
        pk: String,
        #[source]
        source: QueryError,
    },
    /// A stored item that does not look like an aggregate.
    #[error("item in partition {pk}: {why}")]
    Item { pk: String, why: String },
    #[error("report: {0}")]
    Report(String),
    #[error("chart {path}: {why}")]
    Chart { path: String, why: String },
    #[error("truth file: {0}")]
    Truth(String),
    /// `gather compact` could not go on (the seal did not hold, a foreign
    /// lease table, ...).
    #[error("compact: {0}")]
    Compact(String),
    /// A bin read from its scatter prefixes was compacted and its partials
    /// deleted while the report read: the report reads again.
    #[error("bin {bin} was compacted while this report read it (read it again)")]
    CompactedWhileRead { bin: String },
}

pub type Result<T, E = GatherError> = std::result::Result<T, E>;
