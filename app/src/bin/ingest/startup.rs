//! Start-up calls waited out through an outage. A worker deployed while
//! DynamoDB or Kinesis is down (or frozen) pauses with the running
//! worker's backoff ([`Outage`]), answers `/health` 200 and `/ready` 503
//! with what it waits for, and starts once the service is back: never a
//! crash loop. A mistake (a table it may not create, a key schema not
//! Zigzag's, access denied) still ends it at once, with one message.

use crate::probes::Watched;
use std::future::Future;
use tokio_util::sync::CancellationToken;
use zigzag_core::retry::{Outage, Retryable};
use zigzag_core::table::TableError;

/// An error of a start-up call, retryable when anything in its chain says so.
struct StartError(anyhow::Error);

impl Retryable for StartError {
    fn is_retryable(&self) -> bool {
        self.0.chain().any(|cause| {
            #[cfg(feature = "aws")]
            if let Some(e) = cause.downcast_ref::<zigzag_dynamodb::AdminError>() {
                return e.is_retryable();
            }
            cause.downcast_ref::<TableError>().is_some_and(Retryable::is_retryable)
        })
    }
}

/// Runs the start-up call `what` until it succeeds, fails for good, or
/// `stop` ends the wait (the last error is returned).
pub async fn wait_out<T, F, Fut>(
    what: &str,
    outage: Outage,
    stop: &CancellationToken,
    status: &Watched,
    mut call: F,
) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<T>>,
{
    status.starting(format!("starting: {what}"));
    let failed = |e: &StartError, failures: u32, wait: std::time::Duration| {
        let why = format!("{:#}", e.0);
        tracing::warn!(error = %why, retry_in_s = wait.as_secs_f64(), "{what}: unavailable, waiting");
        status.starting(format!("{what}, waiting out: {why} (attempt {failures}; next in {} s)", wait.as_secs()));
    };
    outage
        .wait_out(stop.cancelled(), failed, || {
            let attempt = call();
            async move { attempt.await.map_err(StartError) }
        })
        .await
        .map_err(|e| e.0)
}
