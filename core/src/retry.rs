//! Bounded retries with exponential backoff and full jitter (sleep a
//! uniform random time in `[0, min(cap, base * 2^attempt))`), for errors that
//! say they are worth retrying (throttling, timeouts, 5xx). One helper for
//! every call site — stores, sources, producers — instead of copy-pasted
//! retry loops.

use crate::table::TableError;
use rand::Rng;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub base: Duration,
    pub cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy { max_attempts: 10, base: Duration::from_millis(25), cap: Duration::from_secs(5) }
    }
}

/// An error that knows whether trying again may succeed.
pub trait Retryable {
    fn is_retryable(&self) -> bool;
}

impl Retryable for TableError {
    fn is_retryable(&self) -> bool {
        matches!(self, TableError::Throttled(_) | TableError::Unavailable(_))
    }
}

impl RetryPolicy {
    /// The sleep before retry number `attempt + 1`: uniform in
    /// `[0, min(cap, base * 2^attempt)]`.
    pub fn delay(&self, attempt: u32) -> Duration {
        let ceiling = self.base.saturating_mul(1 << attempt.min(20)).min(self.cap);
        rand::thread_rng().gen_range(Duration::ZERO..=ceiling)
    }

    /// Runs `op` until it succeeds, fails with a non-retryable error, or
    /// `max_attempts` are spent; counts each retry in `retries`.
    pub async fn run<T, E, F, Fut>(&self, retries: &AtomicU64, mut op: F) -> Result<T, E>
    where
        E: Retryable,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let mut attempt = 0;
        loop {
            match op().await {
                Err(e) if e.is_retryable() && self.pause(&mut attempt, retries).await => {}
                other => return other,
            }
        }
    }

    /// The backoff step of [`Self::run`], for retry loops that change state
    /// between attempts (renewing an iterator, shrinking a batch to its
    /// failed part) and so cannot be one closure: after failed attempt
    /// number `*attempt` (from 0), returns false when the attempts are
    /// spent; otherwise counts a retry, sleeps, advances `*attempt` and
    /// returns true.
    pub async fn pause(&self, attempt: &mut u32, retries: &AtomicU64) -> bool {
        if *attempt + 1 >= self.max_attempts {
            return false;
        }
        retries.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(self.delay(*attempt)).await;
        *attempt += 1;
        true
    }
}

/// Waiting out an outage: a worker pauses through one, at start as while
/// running, and never gives up on its own. Pauses of 1 s doubling up to
/// `max_pause` (no jitter: workers that failed together retry a second or
/// more apart already, by when each found the store down).
#[derive(Debug, Clone, Copy)]
pub struct Outage {
    pub max_pause: Duration,
}

impl Outage {
    /// The pause before attempt `failures + 1`.
    pub fn pause_after(&self, failures: u32) -> Duration {
        let base = Duration::from_secs(1).saturating_mul(1 << failures.saturating_sub(1).min(10));
        base.min(self.max_pause)
    }

    /// Runs `op` until it succeeds or fails with an error trying again
    /// cannot help (returned at once). Each retryable failure is told to
    /// `failed` (the error, failures so far, the pause before the next
    /// attempt); `stop` ending a pause returns the last error.
    pub async fn wait_out<T, E, F, Fut>(
        &self,
        stop: impl Future<Output = ()>,
        mut failed: impl FnMut(&E, u32, Duration),
        mut op: F,
    ) -> Result<T, E>
    where
        E: Retryable,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let mut stop = std::pin::pin!(stop);
        let mut failures = 0;
        loop {
            match op().await {
                Err(e) if e.is_retryable() => {
                    failures += 1;
                    let wait = self.pause_after(failures);
                    failed(&e, failures, wait);
                    tokio::select! {
                        _ = &mut stop => return Err(e),
                        _ = tokio::time::sleep(wait) => {}
                    }
                }
                other => return other,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_outage_is_waited_out_with_growing_pauses_until_stopped_or_refused() {
        let outage = Outage { max_pause: Duration::from_secs(4) };
        let pauses: Vec<u64> = (1..=5).map(|f| outage.pause_after(f).as_secs()).collect();
        assert_eq!(pauses, [1, 2, 4, 4, 4]);
        // Down for 6 attempts, then up: never given up.
        let mut calls = 0;
        let mut told = Vec::new();
        let began = tokio::time::Instant::now();
        let r: Result<u32, TableError> = outage
            .wait_out(
                std::future::pending(),
                |e: &TableError, n: u32, wait: Duration| told.push((e.to_string(), n, wait.as_secs())),
                || {
                    calls += 1;
                    let n = calls;
                    async move {
                        if n <= 6 {
                            Err(TableError::Unavailable("timed out".into()))
                        } else {
                            Ok(n)
                        }
                    }
                },
            )
            .await;
        assert_eq!(r.unwrap(), 7);
        assert_eq!(told.iter().map(|t| t.2).collect::<Vec<_>>(), [1, 2, 4, 4, 4, 4]);
        assert_eq!(told[5].1, 6);
        assert_eq!(began.elapsed().as_secs(), 19);
        // A mistake is not waited out.
        let r: Result<(), _> = outage
            .wait_out(
                std::future::pending(),
                |_, _, _| panic!("not retried"),
                || async { Err(TableError::InvalidRequest("no such table".into())) },
            )
            .await;
        assert!(matches!(r, Err(TableError::InvalidRequest(_))));
        // Stopped during a pause: the last error.
        let r: Result<(), _> = outage
            .wait_out(
                tokio::time::sleep(Duration::from_millis(1500)),
                |_, _, _| {},
                || async { Err(TableError::Throttled("slow down".into())) },
            )
            .await;
        assert!(matches!(r, Err(TableError::Throttled(_))));
    }

    #[tokio::test]
    async fn retries_throttles_then_gives_up() {
        let policy = RetryPolicy { max_attempts: 4, base: Duration::from_millis(1), cap: Duration::from_millis(2) };
        let retries = AtomicU64::new(0);
        let mut calls = 0;
        let r: Result<u32, _> = policy
            .run(&retries, || {
                calls += 1;
                let n = calls;
                async move {
                    if n < 3 {
                        Err(TableError::Throttled("slow down".into()))
                    } else {
                        Ok(n)
                    }
                }
            })
            .await;
        assert_eq!(r.unwrap(), 3);
        assert_eq!(retries.load(Ordering::Relaxed), 2);
        let r: Result<(), _> = policy.run(&retries, || async { Err(TableError::Throttled("x".into())) }).await;
        assert!(matches!(r, Err(TableError::Throttled(_))));
        assert_eq!(retries.load(Ordering::Relaxed), 5, "4 attempts = 3 more retries");
        let r: Result<(), _> = policy.run(&retries, || async { Err(TableError::InvalidRequest("no".into())) }).await;
        assert!(matches!(r, Err(TableError::InvalidRequest(_))));
        assert_eq!(retries.load(Ordering::Relaxed), 5, "validation errors are not retried");
    }
}
