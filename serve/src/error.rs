//! The server's errors, each with the Prometheus API's error type and
//! HTTP status: a request that cannot be read is `bad_data` (400), a query
//! the subset refuses or the store cannot answer is `execution` (422), a
//! query over its time is `timeout` (503).

use thiserror::Error;
use zigzag_gather::GatherError;

#[derive(Debug, Error)]
pub enum ServeError {
    /// A parameter or the query text cannot be read.
    #[error("{0}")]
    BadData(String),
    /// Valid PromQL the subset does not answer; the text says what to
    /// write instead.
    #[error("{0}")]
    Unsupported(String),
    /// A limit of the server's refused the query (window, series, RCU).
    #[error("{1}")]
    Limit(Limit, String),
    /// The query is valid but cannot be evaluated on these series (e.g. a
    /// one-to-one match that finds several series).
    #[error("{0}")]
    Execution(String),
    /// Planning or reading failed.
    #[error("{0}")]
    Gather(#[from] GatherError),
    /// A read shared by several queries failed.
    #[error("{0}")]
    Read(std::sync::Arc<GatherError>),
    #[error("query timed out after {0:?}; narrow the window or the matchers, or raise --query-timeout")]
    Timeout(std::time::Duration),
    /// Every query slot is busy.
    #[error("too many queries at once (--max-queries {0}); retry shortly")]
    Busy(usize),
    /// The table's layout could not be read (a query is never answered
    /// on a layout not checked against the table's).
    #[error("{0}")]
    Layout(String),
    /// A bug: evaluating the query panicked (the server stays up).
    #[error("internal error while evaluating the query (a bug in gather serve: please report the query)")]
    Internal,
    /// No such endpoint.
    #[error("not found: gather serve answers the Prometheus HTTP API under /api/v1/")]
    NotFound,
    /// The bearer token is missing or wrong.
    #[error("unauthorized: send 'Authorization: Bearer <token>'")]
    Unauthorized,
}

/// The limits a query may be refused by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// `--max-buckets`: buckets one read spans.
    Buckets,
    /// `--max-series`: series in a result.
    Series,
    /// `--rcu-budget`: the planner's estimated RCU of a query.
    Rcu,
    /// `--max-queries`: queries evaluated at once.
    QuerySlots,
    /// `--query-timeout`, or the request's `timeout`.
    Timeout,
}

impl Limit {
    /// Its label value in `zigzag_serve_queries_refused_total`.
    pub fn name(self) -> &'static str {
        match self {
            Limit::Buckets => "buckets",
            Limit::Series => "series",
            Limit::Rcu => "rcu",
            Limit::QuerySlots => "query_slots",
            Limit::Timeout => "timeout",
        }
    }
}

impl ServeError {
    /// The limit that refused the query, if one did.
    pub fn limit(&self) -> Option<Limit> {
        match self {
            ServeError::Limit(l, _) => Some(*l),
            ServeError::Busy(_) => Some(Limit::QuerySlots),
            ServeError::Timeout(_) => Some(Limit::Timeout),
            _ => None,
        }
    }

    /// The Prometheus API's `errorType`.
    pub fn error_type(&self) -> &'static str {
        match self {
            _ if self.store_failed() => "unavailable",
            ServeError::BadData(_) => "bad_data",
            ServeError::Timeout(_) => "timeout",
            ServeError::Busy(_) => "unavailable",
            ServeError::Unauthorized => "unauthorized",
            ServeError::NotFound => "not_found",
            ServeError::Internal => "internal",
            _ => "execution",
        }
    }

    /// The HTTP status: 4xx for anything the request can change, 503 for
    /// a timeout (as Prometheus answers), never a 500 for bad input.
    pub fn status(&self) -> u16 {
        match self {
            // The store failed (an outage, throttling past its retries): not the request's fault.
            _ if self.store_failed() => 503,
            ServeError::BadData(_) => 400,
            ServeError::Unauthorized => 401,
            ServeError::NotFound => 404,
            ServeError::Internal => 500,
            ServeError::Busy(_) => 429,
            ServeError::Timeout(_) => 503,
            _ => 422,
        }
    }

    /// Reading the store failed, not the request: a query of the
    /// aggregates, alone or shared, or the layout item.
    fn store_failed(&self) -> bool {
        let gather = match self {
            ServeError::Layout(_) => return true,
            ServeError::Gather(e) => e,
            ServeError::Read(e) => e.as_ref(),
            _ => return false,
        };
        matches!(gather, GatherError::Query { .. })
    }
}

pub type Result<T, E = ServeError> = std::result::Result<T, E>;

pub(crate) fn unsupported(msg: impl Into<String>) -> ServeError {
    ServeError::Unsupported(msg.into())
}
