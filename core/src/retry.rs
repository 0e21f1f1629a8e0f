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

#[cfg(test)]
mod tests {
    use super::*;

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
