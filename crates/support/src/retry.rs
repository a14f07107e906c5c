//! The one retry policy, shared by the tracker client and the model provider, and the one
//! reconnect schedule of the links kept up for good (the event stream, an external MCP server:
//! [`reconnect_delay`]).
//!
//! The seed design named the `backoff` crate; it is unmaintained (RUSTSEC-2025-0012), so retries
//! use `backon`, its maintained successor.
//!
//! Schedule: exponential from `initial_delay_ms`, doubling, capped at `max_delay_ms`, with full
//! jitter; at most `max_attempts` attempts (the first included) and never past `max_elapsed_ms`
//! of total sleeping. A `Retry-After` the server sent replaces the computed delay for that
//! attempt when it fits within `max_elapsed_ms`; a longer one ends the retrying with the error.
//! Whether an error is retried is decided by the caller's [`Retryable`] implementation on the
//! error enum, never by reading message text, and never by comparing one failure with the last:
//! a 5xx that comes back with the same body is retried like any other until the schedule ends,
//! as the SDKs people trust do (a server's own words that it is deterministic are classified into
//! the enum by the caller first, e.g. `llm::openai`).

use std::time::Duration;

use backon::{ExponentialBuilder, Retryable as _};
use serde::{Deserialize, Serialize};

/// How the retry policy treats one error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryDecision {
    /// Give up: the error is final (a 4xx other than 429, a bad answer).
    Stop,
    /// Try again after the computed backoff.
    Retry,
    /// Try again after exactly this long (the server's `Retry-After`).
    RetryAfter(Duration),
}

/// Errors that know whether they are worth another attempt.
pub trait Retryable {
    fn retry_decision(&self) -> RetryDecision;
}

/// `tracker.retry` and `llm.retry` in agent.json.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryConfig {
    /// Attempts in all, the first included; 1 disables retrying.
    pub max_attempts: u32,
    /// The first backoff delay.
    pub initial_delay_ms: u64,
    /// No single computed delay is longer than this.
    pub max_delay_ms: u64,
    /// Total time spent sleeping between attempts is at most this.
    pub max_elapsed_ms: u64,
    /// Randomise each delay (full jitter) so many clients do not retry in step.
    pub jitter: bool,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            max_attempts: 5,
            initial_delay_ms: 200,
            max_delay_ms: 5_000,
            max_elapsed_ms: 30_000,
            jitter: true,
        }
    }
}

/// The delay before reconnecting a link kept up for good after `failures` failures in a row:
/// `initial * 2^failures` capped at `max`, then jittered into its upper half, so clients spread
/// out, yet no delay collapses to zero and hammers the server.
pub fn reconnect_delay(failures: u32, initial: Duration, max: Duration, rng: &mut impl rand::Rng) -> Duration {
    let factor = 2u32.saturating_pow(failures.min(31));
    let ceiling = initial.saturating_mul(factor).min(max);
    let half = ceiling / 2;
    let jitter_ms = rng.random_range(0..=half.as_millis().min(u128::from(u64::MAX)) as u64);
    half + Duration::from_millis(jitter_ms)
}

/// Runs `operation` until it succeeds, fails with an error whose decision is `Stop`, or the
/// policy is spent. Returns the last error in the latter cases.
pub async fn with_retry<T, E, F, Fut>(policy: &RetryConfig, mut operation: F) -> Result<T, E>
where
    E: Retryable + std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut builder = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(policy.initial_delay_ms))
        .with_max_delay(Duration::from_millis(policy.max_delay_ms.max(policy.initial_delay_ms)))
        .with_max_times(policy.max_attempts.saturating_sub(1) as usize)
        .with_total_delay(Some(Duration::from_millis(policy.max_elapsed_ms)));
    if policy.jitter {
        builder = builder.with_jitter();
    }
    let max_elapsed = Duration::from_millis(policy.max_elapsed_ms);
    (|| operation())
        .retry(builder)
        .sleep(tokio::time::sleep)
        .when(|e: &E| e.retry_decision() != RetryDecision::Stop)
        .adjust(move |e: &E, computed| match (e.retry_decision(), computed) {
            // The policy is spent: stop, even if the server named a time.
            (_, None) => None,
            (RetryDecision::RetryAfter(wait), Some(_)) if wait <= max_elapsed => Some(wait),
            (RetryDecision::RetryAfter(_), Some(_)) => None,
            (_, computed) => computed,
        })
        .notify(|e: &E, delay| tracing::debug!(error = %e, delay_ms = delay.as_millis() as u64, "retrying"))
        .await
}

/// Parses a `Retry-After` header value given in seconds (the HTTP-date form is rare from APIs and
/// is treated as absent).
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let seconds: f64 = value.trim().parse().ok()?;
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds.min(3600.0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[derive(Debug)]
    struct TestError(RetryDecision);
    impl std::fmt::Display for TestError {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{:?}", self.0)
        }
    }
    impl Retryable for TestError {
        fn retry_decision(&self) -> RetryDecision {
            self.0
        }
    }

    fn policy(max_attempts: u32) -> RetryConfig {
        RetryConfig { max_attempts, initial_delay_ms: 5, max_delay_ms: 50, max_elapsed_ms: 10_000, jitter: false }
    }

    // Paused time: the clock moves only when every task waits on a timer, and then straight to
    // it, so the schedule is checked to the millisecond and no test waits for real.

    #[tokio::test(start_paused = true)]
    async fn retries_until_success() {
        let attempts = AtomicU32::new(0);
        let start = tokio::time::Instant::now();
        let result: Result<u32, TestError> = with_retry(&policy(5), || async {
            let n = attempts.fetch_add(1, Ordering::SeqCst);
            if n < 2 { Err(TestError(RetryDecision::Retry)) } else { Ok(n) }
        })
        .await;
        assert_eq!(result.unwrap(), 2);
        assert_eq!(attempts.load(Ordering::SeqCst), 3);
        // 5 ms, then doubled: 10 ms.
        assert_eq!(start.elapsed(), Duration::from_millis(15));
    }

    #[tokio::test(start_paused = true)]
    async fn stops_at_max_attempts() {
        let attempts = AtomicU32::new(0);
        let start = tokio::time::Instant::now();
        let result: Result<(), TestError> = with_retry(&policy(3), || async {
            attempts.fetch_add(1, Ordering::SeqCst);
            Err(TestError(RetryDecision::Retry))
        })
        .await;
        assert!(result.is_err());
        assert_eq!(attempts.load(Ordering::SeqCst), 3);
        assert_eq!(start.elapsed(), Duration::from_millis(15), "no sleep after the last attempt");
    }

    #[tokio::test(start_paused = true)]
    async fn delays_are_capped_at_max_delay() {
        let attempts = AtomicU32::new(0);
        let start = tokio::time::Instant::now();
        let result: Result<(), TestError> = with_retry(&policy(6), || async {
            attempts.fetch_add(1, Ordering::SeqCst);
            Err(TestError(RetryDecision::Retry))
        })
        .await;
        assert!(result.is_err());
        assert_eq!(attempts.load(Ordering::SeqCst), 6);
        // 5, 10, 20, 40, then 50 ms (the cap) instead of 80.
        assert_eq!(start.elapsed(), Duration::from_millis(125));
    }

    #[tokio::test(start_paused = true)]
    async fn never_retries_a_final_error() {
        let attempts = AtomicU32::new(0);
        let start = tokio::time::Instant::now();
        let result: Result<(), TestError> = with_retry(&policy(5), || async {
            attempts.fetch_add(1, Ordering::SeqCst);
            Err(TestError(RetryDecision::Stop))
        })
        .await;
        assert!(result.is_err());
        assert_eq!(attempts.load(Ordering::SeqCst), 1);
        assert_eq!(start.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn honours_retry_after() {
        let attempts = AtomicU32::new(0);
        let start = tokio::time::Instant::now();
        let result: Result<(), TestError> = with_retry(&policy(2), || async {
            if attempts.fetch_add(1, Ordering::SeqCst) == 0 {
                Err(TestError(RetryDecision::RetryAfter(Duration::from_millis(300))))
            } else {
                Ok(())
            }
        })
        .await;
        assert!(result.is_ok());
        // Exactly the server's wait, not the computed 5 ms.
        assert_eq!(start.elapsed(), Duration::from_millis(300));
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_after_past_max_elapsed_ends_the_retrying() {
        let attempts = AtomicU32::new(0);
        let start = tokio::time::Instant::now();
        let result: Result<(), TestError> = with_retry(&policy(5), || async {
            attempts.fetch_add(1, Ordering::SeqCst);
            Err(TestError(RetryDecision::RetryAfter(Duration::from_secs(11))))
        })
        .await;
        assert!(result.is_err());
        assert_eq!(attempts.load(Ordering::SeqCst), 1);
        assert_eq!(start.elapsed(), Duration::ZERO);
    }

    #[test]
    fn parses_retry_after_seconds() {
        assert_eq!(parse_retry_after("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse_retry_after(" 0.5 "), Some(Duration::from_millis(500)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(parse_retry_after("-1"), None);
    }

    #[test]
    fn the_reconnect_delay_doubles_is_capped_and_never_collapses_to_zero_is_capped_and_never_collapses_to_zero() {
        let initial = Duration::from_millis(250);
        let max = Duration::from_secs(30);
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for failed_attempts in 0..40u32 {
            let ceiling = (initial * 2u32.saturating_pow(failed_attempts.min(31))).min(max);
            for _ in 0..50 {
                let delay = reconnect_delay(failed_attempts, initial, max, &mut rng);
                assert!(delay >= ceiling / 2, "attempt {failed_attempts}: {delay:?} below half of {ceiling:?}");
                assert!(delay <= ceiling, "attempt {failed_attempts}: {delay:?} above {ceiling:?}");
            }
        }
        // The jitter really varies the delay.
        let delays: std::collections::HashSet<_> =
            (0..20).map(|_| reconnect_delay(5, initial, max, &mut rng)).collect();
        assert!(delays.len() > 1);
    }
}
