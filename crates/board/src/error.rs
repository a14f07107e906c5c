//! The board's one error enum. Every failing handler returns it, and it alone becomes the
//! contract's error answer `{"error": {code, message, details}}`. Internal causes are logged here
//! and never sent to the client.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use picogent_tracker::model::{ErrorBody, ErrorDetail};

#[derive(Debug, thiserror::Error)]
pub enum BoardError {
    /// 401: no bearer token, or one that belongs to no member.
    #[error("{message}")]
    Unauthorized { message: String },
    /// 403: acting as another member.
    #[error("{message}")]
    Forbidden { message: String },
    /// 404: the thing named does not exist.
    #[error("{message}")]
    NotFound { message: String },
    /// 409: the board's state forbids the action now.
    #[error("{message}")]
    Conflict { message: String },
    /// 422: a field is missing, of the wrong type, unknown, out of range or too long.
    #[error("{message}")]
    Invalid { field: String, expected: String, message: String },
    /// 429: too many of these requests for now (the web page's sign-ins); `Retry-After` says
    /// how many seconds to wait.
    #[error("{message}")]
    RateLimited { message: String, retry_after_secs: u64 },
    /// 413: the body is over the contract's cap.
    #[error("the request body is over {limit} bytes")]
    TooLarge { limit: usize },
    /// 405: the route exists, the method does not (outside the contract's table, but answered
    /// in its shape all the same).
    #[error("this route does not take that method; see docs/tracker-api.md")]
    MethodNotAllowed,
    /// 500: a fault of the board; the cause is logged, the client hears nothing of it.
    #[error("internal error: {0}")]
    Database(#[from] sqlx::Error),
    /// 500 for causes that are not the database's.
    #[error("internal error: {0}")]
    Internal(String),
}

impl BoardError {
    pub fn not_found(what: &str, name: &str) -> BoardError {
        BoardError::NotFound { message: format!("{what} {name} not found") }
    }

    pub fn invalid(field: &str, expected: impl Into<String>, message: impl Into<String>) -> BoardError {
        BoardError::Invalid { field: field.to_string(), expected: expected.into(), message: message.into() }
    }

    pub fn conflict(message: impl Into<String>) -> BoardError {
        BoardError::Conflict { message: message.into() }
    }

    pub fn forbidden(message: impl Into<String>) -> BoardError {
        BoardError::Forbidden { message: message.into() }
    }

    /// The seconds a client is told to wait before it tries again (`Retry-After`), if any.
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            BoardError::RateLimited { retry_after_secs, .. } => Some(*retry_after_secs),
            _ => None,
        }
    }

    /// The HTTP status this error answers with.
    pub fn status(&self) -> StatusCode {
        self.status_and_code().0
    }

    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            BoardError::Unauthorized { .. } => (StatusCode::UNAUTHORIZED, "unauthorized"),
            BoardError::Forbidden { .. } => (StatusCode::FORBIDDEN, "forbidden"),
            BoardError::NotFound { .. } => (StatusCode::NOT_FOUND, "not_found"),
            BoardError::Conflict { .. } => (StatusCode::CONFLICT, "conflict"),
            BoardError::Invalid { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "invalid"),
            BoardError::TooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "invalid"),
            BoardError::RateLimited { .. } => (StatusCode::TOO_MANY_REQUESTS, "rate_limited"),
            BoardError::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            BoardError::Database(_) | BoardError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }
}

impl IntoResponse for BoardError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let (message, details) = match &self {
            BoardError::Invalid { field, expected, message } => {
                (message.clone(), json!({"field": field, "expected": expected}))
            }
            BoardError::TooLarge { limit } => {
                (self.to_string(), json!({"field": "body", "expected": format!("at most {limit} bytes")}))
            }
            BoardError::Database(_) | BoardError::Internal(_) => {
                tracing::error!(error = %self, "board request failed");
                ("the board failed to handle the request; see its log".to_string(), serde_json::Value::Null)
            }
            _ => (self.to_string(), serde_json::Value::Null),
        };
        let body = ErrorBody { error: ErrorDetail { code: code.to_string(), message, details } };
        let mut response = (status, Json(body)).into_response();
        if let Some(seconds) = self.retry_after_secs() {
            response.headers_mut().insert(axum::http::header::RETRY_AFTER, seconds.into());
        }
        response
    }
}
