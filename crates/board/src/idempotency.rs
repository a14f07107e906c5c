//! `Idempotency-Key` on every POST: the first answer to a key is stored per member for 24 hours
//! and returned again, same status and body, for a repeat of the key.
//!
//! Concurrent duplicates are safe because the key is claimed by inserting its row first (the
//! primary key makes exactly one insert win); a duplicate that finds the row still pending waits
//! for the first request's answer. The first request is handled in a task of its own, so a
//! client that hangs up mid-request cannot leave the key pending forever: the work finishes and
//! its answer is stored for the retry. A 5xx answer is not stored, so a retry acts again.

use std::time::Duration;

use axum::body::{Body, Bytes, to_bytes};
use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::BoardState;
use crate::error::BoardError;
use crate::extract::Caller;
use picogent_tracker::model::limits;

pub(crate) const HEADER: &str = "idempotency-key";
/// How long a key is remembered.
const KEY_LIFETIME_SECONDS: i64 = 24 * 60 * 60;
/// How long a duplicate waits for the first request's answer before giving up.
const PENDING_WAIT: Duration = Duration::from_secs(30);
const MAX_KEY_LENGTH: usize = 200;

enum Claim {
    /// This request is the first with the key: handle it and store the answer.
    Owned,
    /// An earlier request answered: replay it.
    Replay { status: u16, body: String },
}

fn unix_now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

fn check_key(value: &HeaderValue) -> Result<String, BoardError> {
    let expected = format!("1 to {MAX_KEY_LENGTH} visible ASCII characters");
    let bytes = value.as_bytes();
    if bytes.is_empty() || bytes.len() > MAX_KEY_LENGTH || !bytes.iter().all(|b| (0x21..=0x7e).contains(b)) {
        return Err(BoardError::invalid("Idempotency-Key", expected, "the Idempotency-Key header is malformed"));
    }
    Ok(String::from_utf8_lossy(bytes).into_owned())
}

/// Middleware for the authenticated routes: passes everything but keyed POSTs straight through.
pub(crate) async fn idempotent_posts(State(state): State<BoardState>, request: Request, next: Next) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let Some(value) = request.headers().get(HEADER) else {
        return next.run(request).await;
    };
    let key = match check_key(value) {
        Ok(key) => key,
        Err(error) => return error.into_response(),
    };
    let Some(caller) = request.extensions().get::<Caller>().cloned() else {
        return next.run(request).await;
    };
    let path = request.uri().path().to_string();
    // Read the whole body before claiming the key: a client that hangs up mid-body must not
    // leave an answer ("cannot read the body") stored under its key for the retry to get.
    let (parts, body) = request.into_parts();
    let bytes = match Bytes::from_request(Request::from_parts(parts.clone(), body), &()).await {
        Ok(bytes) => bytes,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return BoardError::TooLarge { limit: limits::BODY_BYTES }.into_response();
        }
        Err(rejection) => {
            return BoardError::invalid("body", "a JSON object", format!("cannot read the body: {rejection}"))
                .into_response();
        }
    };
    let request = Request::from_parts(parts, Body::from(bytes));
    match claim(&state, &caller.slug, &key, &path).await {
        Err(error) => error.into_response(),
        Ok(Claim::Replay { status, body }) => replay(status, body),
        Ok(Claim::Owned) => {
            let worker_state = state.clone();
            let worker = state.tasks.spawn(async move {
                let response = next.run(request).await;
                let result = finish(&worker_state, &caller.slug, &key, response).await;
                worker_state.idempotency_done.notify_waiters();
                result
            });
            match worker.await {
                Ok(Ok(response)) => response,
                Ok(Err(error)) => error.into_response(),
                Err(join_error) => {
                    BoardError::Internal(format!("an idempotent request failed: {join_error}")).into_response()
                }
            }
        }
    }
}

async fn claim(state: &BoardState, member: &str, key: &str, path: &str) -> Result<Claim, BoardError> {
    let deadline = tokio::time::Instant::now() + PENDING_WAIT;
    loop {
        // Register for the wake-up before looking, so an answer stored in between is not missed.
        let notified = state.idempotency_done.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();

        sqlx::query("DELETE FROM idempotency WHERE member_slug = ?1 AND key = ?2 AND created_at < ?3")
            .bind(member)
            .bind(key)
            .bind(unix_now() - KEY_LIFETIME_SECONDS)
            .execute(&state.pool)
            .await?;
        let inserted = sqlx::query(
            "INSERT INTO idempotency (member_slug, key, method, path, status, body, created_at) \
             VALUES (?1, ?2, 'POST', ?3, NULL, NULL, ?4) ON CONFLICT DO NOTHING",
        )
        .bind(member)
        .bind(key)
        .bind(path)
        .bind(unix_now())
        .execute(&state.pool)
        .await?
        .rows_affected();
        if inserted == 1 {
            return Ok(Claim::Owned);
        }
        let stored: Option<(String, String, Option<i64>, Option<String>)> =
            sqlx::query_as("SELECT method, path, status, body FROM idempotency WHERE member_slug = ?1 AND key = ?2")
                .bind(member)
                .bind(key)
                .fetch_optional(&state.pool)
                .await?;
        match stored {
            // Released (a 5xx) or expired in between: try to claim it again.
            None => continue,
            Some((method, stored_path, _, _)) if method != "POST" || stored_path != path => {
                return Err(BoardError::invalid(
                    "Idempotency-Key",
                    "a new key for a different request",
                    format!("this Idempotency-Key was already used for {method} {stored_path}"),
                ));
            }
            Some((_, _, Some(status), Some(body))) => {
                let status = u16::try_from(status).unwrap_or(500);
                return Ok(Claim::Replay { status, body });
            }
            Some(_) => {
                if tokio::time::Instant::now() >= deadline {
                    return Err(BoardError::conflict(
                        "a request with this Idempotency-Key is still in progress; retry later",
                    ));
                }
                // The first request is still running: wait for an answer to be stored.
                let _ = tokio::time::timeout(Duration::from_millis(200), notified).await;
            }
        }
    }
}

/// Stores the first answer (or releases the key after a 5xx) and gives the answer back.
async fn finish(state: &BoardState, member: &str, key: &str, response: Response) -> Result<Response, BoardError> {
    let (parts, body) = response.into_parts();
    let bytes = match to_bytes(body, usize::MAX).await {
        Ok(bytes) => bytes,
        Err(error) => {
            release(state, member, key).await?;
            return Err(BoardError::Internal(format!("cannot buffer an answer: {error}")));
        }
    };
    if parts.status.is_server_error() {
        release(state, member, key).await?;
    } else {
        sqlx::query("UPDATE idempotency SET status = ?3, body = ?4 WHERE member_slug = ?1 AND key = ?2")
            .bind(member)
            .bind(key)
            .bind(i64::from(parts.status.as_u16()))
            .bind(String::from_utf8_lossy(&bytes).into_owned())
            .execute(&state.pool)
            .await?;
    }
    Ok(Response::from_parts(parts, Body::from(bytes)))
}

async fn release(state: &BoardState, member: &str, key: &str) -> Result<(), BoardError> {
    sqlx::query("DELETE FROM idempotency WHERE member_slug = ?1 AND key = ?2")
        .bind(member)
        .bind(key)
        .execute(&state.pool)
        .await?;
    Ok(())
}

fn replay(status: u16, body: String) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, body).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response.headers_mut().insert("idempotent-replayed", HeaderValue::from_static("true"));
    response
}

/// Forgets answered keys past their lifetime; returns how many. Pending keys belong to requests
/// in flight and stay (those a crash left pending go at the next start, in [`clean_up`]).
pub(crate) async fn prune_expired(pool: &sqlx::SqlitePool) -> Result<u64, sqlx::Error> {
    let deleted = sqlx::query("DELETE FROM idempotency WHERE status IS NOT NULL AND created_at < ?1")
        .bind(unix_now() - KEY_LIFETIME_SECONDS)
        .execute(pool)
        .await?
        .rows_affected();
    Ok(deleted)
}

/// At start: forgets keys left pending by a crash and keys past their lifetime.
pub(crate) async fn clean_up(pool: &sqlx::SqlitePool) -> Result<(), sqlx::Error> {
    sqlx::query("DELETE FROM idempotency WHERE status IS NULL OR created_at < ?1")
        .bind(unix_now() - KEY_LIFETIME_SECONDS)
        .execute(pool)
        .await?;
    Ok(())
}
