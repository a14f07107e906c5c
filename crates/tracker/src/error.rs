//! What can go wrong talking to the tracker, shaped by what the caller will do about it.

use std::time::Duration;

use picogent_support::retry::{RetryDecision, Retryable};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TrackerError {
    /// 404: the thing named does not exist.
    #[error("not found: {message}")]
    NotFound { message: String },
    /// 409: the state of the tracker forbids it now (a task taken by someone else).
    #[error("conflict: {message}")]
    Conflict { message: String },
    /// 413/422: the request was malformed; `field` names the offending field when the tracker said.
    #[error("invalid {}: {message}", field.as_deref().unwrap_or("request"))]
    Invalid { field: Option<String>, message: String },
    /// 401: no token, or an unknown one.
    #[error("unauthorized: {message} (check the token in the environment variable named by tracker.token_env)")]
    Unauthorized { message: String },
    /// 403: the token is fine but the action is not allowed (acting as another member).
    #[error("forbidden: {message}")]
    Forbidden { message: String },
    /// 429: slow down; `retry_after` is the server's `Retry-After`.
    #[error("rate limited by the tracker: {message}")]
    RateLimited { retry_after: Option<Duration>, message: String },
    /// 5xx: the tracker failed. 500, 502, 503 and 504 are retried: every request this client
    /// sends is safe to repeat (reads, PATCH/PUT of values, POSTs with an `Idempotency-Key`), and
    /// a tracker that fails once for a moment must not fail a whole run (found by the soak).
    #[error("tracker error {status}: {message}")]
    Server { status: u16, retry_after: Option<Duration>, message: String },
    /// The request did not complete: connection refused or reset, timeout.
    #[error("cannot reach the tracker: {message}")]
    Transport { message: String, timed_out: bool },
    /// The tracker answered something that is not the contract's shape.
    #[error("unexpected answer from the tracker: {message}")]
    Decode { message: String },
    /// Not sent: another copy of this agent took over its identity on the tracker, so this copy
    /// writes nothing more (`tracker::presence`).
    #[error("this copy of the agent stopped acting: {message}")]
    Superseded { message: String },
}

impl TrackerError {
    /// The HTTP status this error stands for, where there is one.
    pub fn status(&self) -> Option<u16> {
        match self {
            TrackerError::NotFound { .. } => Some(404),
            TrackerError::Conflict { .. } => Some(409),
            TrackerError::Invalid { .. } => Some(422),
            TrackerError::Unauthorized { .. } => Some(401),
            TrackerError::Forbidden { .. } => Some(403),
            TrackerError::RateLimited { .. } => Some(429),
            TrackerError::Server { status, .. } => Some(*status),
            TrackerError::Transport { .. } | TrackerError::Decode { .. } | TrackerError::Superseded { .. } => None,
        }
    }
}

impl Retryable for TrackerError {
    fn retry_decision(&self) -> RetryDecision {
        match self {
            TrackerError::RateLimited { retry_after: Some(wait), .. } => RetryDecision::RetryAfter(*wait),
            TrackerError::RateLimited { retry_after: None, .. } => RetryDecision::Retry,
            TrackerError::Server { status: 500 | 502..=504, retry_after: Some(wait), .. } => {
                RetryDecision::RetryAfter(*wait)
            }
            TrackerError::Server { status: 500 | 502..=504, retry_after: None, .. } => RetryDecision::Retry,
            TrackerError::Transport { .. } => RetryDecision::Retry,
            TrackerError::Server { .. }
            | TrackerError::NotFound { .. }
            | TrackerError::Conflict { .. }
            | TrackerError::Invalid { .. }
            | TrackerError::Unauthorized { .. }
            | TrackerError::Forbidden { .. }
            | TrackerError::Decode { .. }
            | TrackerError::Superseded { .. } => RetryDecision::Stop,
        }
    }
}
