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

/// A planner refusal of `subject` (a selector's text) in a PromQL
/// user's words: what in the query to change, never a `gather` flag (the planner's errors name its flags:
/// `--step`, `--from`, `--where`).
pub(crate) fn refusal(e: GatherError, subject: &str) -> ServeError {
    use GatherError as G;
    let advice = "aggregate to the labels a projection keeps (sum by (...)), or use a range, step and time range of \
                  whole buckets of a rollup it has (e.g. sum_over_time(clicks[1h]) at a 1h step)";
    match e {
        G::Projection(why) | G::Rollup(why) => {
            ServeError::Unsupported(format!("{}: {}. To read it, {advice}", subject, without_flags(&why)))
        }
        G::Window { arg, text, why } => {
            let what = match arg {
                "--step" => format!("its ranges' ends at the query's times lie on {text} edges, and {text}"),
                "--from" => "the start of the time range".to_string(),
                "--to" => "the end of the time range".to_string(),
                _ => format!("the time range {text}"),
            };
            // The planner's "try <instant>" hint is a flag value: dropped.
            let why = without_flags(why.split("; try ").next().unwrap_or(&why));
            let sep = if arg == "--step" { " " } else { ": " };
            ServeError::Unsupported(format!(
                "{subject}: {what}{sep}{why} of the projections that keep its labels. To read it, {advice}"
            ))
        }
        G::Filter { expr, why } => ServeError::BadData(format!("{}: the matcher on {expr}: {why}", subject)),
        G::GroupBy { field, why } => ServeError::BadData(format!("{}: by ({field}): {why}", subject)),
        other => ServeError::Gather(other),
    }
}

/// The planner's words for what a report's flags set, as a query's: a
/// refusal that lists why each projection cannot answer quotes their
/// reasons, which name `gather`'s flags.
fn without_flags(text: &str) -> String {
    // Longest first: `--rollup` before a shorter flag it starts with.
    const WORDS: [(&str, &str); 10] = [
        ("--rcu-allowance", "the RCU allowance"),
        ("--projection", "projection"),
        ("--rollup", "rollup"),
        ("--where", "the matcher"),
        ("--last", "the time range"),
        ("--from", "the time range's start"),
        ("--step", "the step"),
        ("--snap", "snapping"),
        ("--to", "the time range's end"),
        ("--at", "the time"),
    ];
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("--") {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let word = WORDS.iter().find(|(flag, _)| {
            tail.strip_prefix(flag)
                .is_some_and(|after| !after.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '-'))
        });
        match word {
            Some((flag, said)) => {
                out.push_str(said);
                rest = &tail[flag.len()..];
            }
            None => {
                // Any other flag: its name, without the dashes.
                out.push_str("the option ");
                rest = &tail[2..];
            }
        }
    }
    out.push_str(rest);
    out
}

pub type Result<T, E = ServeError> = std::result::Result<T, E>;

pub(crate) fn unsupported(msg: impl Into<String>) -> ServeError {
    ServeError::Unsupported(msg.into())
}

/// What one query may cost before it is refused.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Buckets one read may span (its window over its rollup unit).
    pub max_buckets: i64,
    /// Series in a result.
    pub max_series: usize,
    /// The planner's estimated RCU, summed over the query's reads.
    pub max_rcu: f64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_buckets: 100_000, max_series: 10_000, max_rcu: 5_000.0 }
    }
}

pub(crate) fn too_many_series(n: usize, limits: &Limits) -> ServeError {
    ServeError::Limit(
        Limit::Series,
        format!(
            "{n} series (the server's limit is {}): aggregate them (sum by (...)), narrow the matchers, or raise \
         --max-series",
            limits.max_series
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The planner's refusals name `gather`'s flags; the HTTP API's say
    /// what to change in the query.
    #[test]
    fn a_planner_refusal_speaks_promql_and_names_no_flag() {
        let refusals = [
            GatherError::Window {
                arg: "--step",
                text: "1m".into(),
                why: "is not a multiple of 1h, the finest configured rollup".into(),
            },
            GatherError::Window {
                arg: "--from",
                text: "1795899300000".into(),
                why: "2026-11-28T20:55:00Z is not on a boundary of the finest rollup (1h); try 2026-11-28T20:00:00Z"
                    .into(),
            },
            GatherError::Filter { expr: "country".into(), why: "cannot narrow the index: out of range".into() },
            GatherError::GroupBy { field: "x".into(), why: "not a dimension".into() },
            GatherError::Projection("no projection answers this report exactly".into()),
            // What the planner says when every candidate fails: each one's
            // reason, some naming the flags of `gather`'s reports.
            GatherError::Projection(
                "no projection answers this report exactly (and none is approximated): total: not exact: does not \
                 keep referrer; referrer_country: not exact: --step \"1m\": is not a multiple of 1h, the finest \
                 rollup of projection referrer_country"
                    .into(),
            ),
            GatherError::Rollup(
                "--rollup hour cannot answer the window [2026-11-28T20:55:00Z, 2026-11-28T21:55:00Z): its buckets \
                 are whole hours; use a finer rollup"
                    .into(),
            ),
            GatherError::Projection("--projection cc: the layout has no such projection (it has total)".into()),
        ];
        for e in refusals {
            let said = refusal(e, "sum_over_time(clicks[5m])").to_string();
            assert!(!said.contains("--"), "{said}");
            assert!(said.starts_with("sum_over_time(clicks[5m]): "), "{said}");
        }
        let step = refusal(
            GatherError::Window { arg: "--step", text: "1m".into(), why: "is not a multiple of 1h".into() },
            "topk(20, x)",
        );
        assert!(matches!(step, ServeError::Unsupported(_)));
        let said = step.to_string();
        assert!(said.contains("lie on 1m edges, and 1m is not a multiple of 1h"), "{said}");
        assert!(said.contains("sum_over_time(clicks[1h]) at a 1h step"), "{said}");
        let listed = refusal(
            GatherError::Projection("referrer_country: not exact: --step \"1m\": is not a multiple of 1h".into()),
            "x",
        );
        assert!(listed.to_string().contains("referrer_country: not exact: the step \"1m\": is not"), "{listed}");
        assert_eq!(
            without_flags("--rollup-ish --to X, --to-do"),
            "the option rollup-ish the time range's end X, the option to-do"
        );
    }
}
