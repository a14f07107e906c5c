//! How requests get into the handlers: the caller's identity, JSON bodies and query strings.
//!
//! Bodies and queries are parsed here, once, into the contract's request types, and every way
//! they can be wrong becomes a `422` naming the field (or a `413` for an oversized body), so the
//! handlers only ever see well-formed input.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use crate::BoardState;
use crate::error::BoardError;
use picogent_tracker::model::{MemberKind, limits};

/// The member a request acts as, put in the request's extensions by [`require_member`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Caller {
    pub slug: String,
    pub kind: MemberKind,
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = BoardError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Caller, BoardError> {
        parts.extensions.get::<Caller>().cloned().ok_or_else(|| BoardError::Unauthorized {
            message: "no bearer token: send Authorization: Bearer <token>".to_string(),
        })
    }
}

/// The bearer token of the `Authorization` header, if there is one.
pub(crate) fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim()).filter(|t| !t.is_empty())
}

/// Every member's token, read once when the board starts: members come only from the seed, so
/// the set cannot change while the board runs, and a request needs no database read to say who
/// sent it.
#[derive(Debug, Default)]
pub(crate) struct Members {
    by_token: std::collections::HashMap<String, Caller>,
}

impl Members {
    pub(crate) async fn load(pool: &sqlx::SqlitePool) -> Result<Members, sqlx::Error> {
        let rows: Vec<(String, String, String)> =
            sqlx::query_as("SELECT token, slug, kind FROM members").fetch_all(pool).await?;
        let by_token = rows
            .into_iter()
            .map(|(token, slug, kind)| {
                let kind = match kind.as_str() {
                    "agent" => MemberKind::Agent,
                    _ => MemberKind::Human,
                };
                (token, Caller { slug, kind })
            })
            .collect();
        Ok(Members { by_token })
    }
}

/// Finds the member a token belongs to.
pub(crate) fn authenticate(state: &BoardState, token: Option<&str>) -> Result<Caller, BoardError> {
    let Some(token) = token else {
        return Err(BoardError::Unauthorized {
            message: "no bearer token: send Authorization: Bearer <token>".to_string(),
        });
    };
    state
        .members
        .by_token
        .get(token)
        .cloned()
        .ok_or_else(|| BoardError::Unauthorized { message: "unknown token: no member has it".to_string() })
}

/// Middleware: refuses requests without a known bearer token, and records the caller.
pub(crate) async fn require_member(State(state): State<BoardState>, mut request: Request, next: Next) -> Response {
    match authenticate(&state, bearer_token(request.headers())) {
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(error) => error.into_response(),
    }
}

/// A JSON body parsed into `T`, with the contract's error answers for every way it can be wrong.
#[derive(Debug)]
pub(crate) struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = BoardError;

    async fn from_request(request: Request, state: &S) -> Result<JsonBody<T>, BoardError> {
        let bytes = match Bytes::from_request(request, state).await {
            Ok(bytes) => bytes,
            Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                return Err(BoardError::TooLarge { limit: limits::BODY_BYTES });
            }
            Err(rejection) => {
                return Err(BoardError::invalid("body", "a JSON object", format!("cannot read the body: {rejection}")));
            }
        };
        parse_json(&bytes).map(JsonBody)
    }
}

/// Parses a JSON body, naming the offending field on failure.
pub(crate) fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, BoardError> {
    // serde would read a struct from an array by position; the contract's bodies are objects.
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(BoardError::invalid("body", "a JSON object", "the body must be a JSON object"));
    }
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner();
        if inner.is_data() {
            data_error(&path, &strip_position(&inner.to_string()))
        } else {
            BoardError::invalid("body", "a JSON object", format!("the body is not valid JSON: {inner}"))
        }
    })?;
    deserializer.end().map_err(|e| {
        BoardError::invalid("body", "a single JSON object", format!("trailing data after the JSON: {e}"))
    })?;
    Ok(value)
}

/// A query string parsed into `T`, with the contract's error answers.
#[derive(Debug)]
pub(crate) struct QueryParams<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for QueryParams<T> {
    type Rejection = BoardError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<QueryParams<T>, BoardError> {
        let query = parts.uri.query().unwrap_or("");
        let deserializer = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
        serde_path_to_error::deserialize(deserializer).map(QueryParams).map_err(|error| {
            let path = error.path().to_string();
            data_error(&path, &error.into_inner().to_string())
        })
    }
}

/// serde_json appends " at line L column C"; the field name says more to the client.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(index) => message[..index].to_string(),
        None => message.to_string(),
    }
}

/// Turns serde's message into a 422: the field from the path, or from the message when serde
/// reports at the enclosing object (missing and unknown fields).
fn data_error(path: &str, message: &str) -> BoardError {
    let quoted = message.split('`').nth(1).unwrap_or("");
    let expected = message.split_once("expected ").map(|(_, rest)| rest.to_string());
    let at_root = path == "." || path.is_empty();
    let prefix = if at_root { String::new() } else { format!("{path}.") };
    if message.starts_with("missing field") {
        let field = format!("{prefix}{quoted}");
        return BoardError::invalid(&field, "a value (the field is required)", format!("{field} is required"));
    }
    if message.starts_with("unknown field") {
        // serde_json's path already ends at the unknown field; serde_urlencoded's does not.
        let ends_at_field = path == quoted || path.ends_with(&format!(".{quoted}"));
        let field = if ends_at_field { path.to_string() } else { format!("{prefix}{quoted}") };
        let expected = expected.unwrap_or_else(|| "no such field".to_string());
        return BoardError::invalid(&field, expected.clone(), format!("unknown field {field}: expected {expected}"));
    }
    let field = if at_root { "body".to_string() } else { path.to_string() };
    let expected = expected.unwrap_or_else(|| "a valid value".to_string());
    BoardError::invalid(&field, expected, format!("{field} is invalid: {message}"))
}

/// Checks a string field against its length limit in characters.
pub(crate) fn check_length(field: &str, value: &str, max: usize) -> Result<(), BoardError> {
    let length = value.chars().count();
    if length > max {
        return Err(BoardError::invalid(
            field,
            format!("at most {max} characters"),
            format!("{field} is too long: {length} characters, at most {max}"),
        ));
    }
    Ok(())
}

/// Checks a string that must not be blank (titles, content) and its length.
pub(crate) fn check_text(field: &str, value: &str, max: usize) -> Result<(), BoardError> {
    if value.trim().is_empty() {
        return Err(BoardError::invalid(field, format!("1 to {max} characters"), format!("{field} must not be empty")));
    }
    check_length(field, value, max)
}

/// Checks a list of labels: how many, and how long each is.
pub(crate) fn check_labels(labels: &[String]) -> Result<(), BoardError> {
    if labels.len() > limits::LABELS {
        return Err(BoardError::invalid(
            "labels",
            format!("at most {} labels", limits::LABELS),
            format!("too many labels: {}, at most {}", labels.len(), limits::LABELS),
        ));
    }
    for label in labels {
        if label.trim().is_empty() {
            return Err(BoardError::invalid("labels", "non-empty labels", "a label is empty"));
        }
        check_length("labels", label, limits::LABEL)?;
    }
    Ok(())
}

/// The page size of a list query, when it gives none.
const DEFAULT_LIMIT: u32 = 50;
/// The largest page a list query may ask for.
const MAX_LIMIT: u32 = 200;

/// Checks `limit` of a list query against 1..=200.
pub(crate) fn page_limit(limit: Option<u32>) -> Result<u32, BoardError> {
    let limit = limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(BoardError::invalid(
            "limit",
            format!("an integer from 1 to {MAX_LIMIT}"),
            format!("limit {limit} is out of range"),
        ));
    }
    Ok(limit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use picogent_tracker::model::{CreateTask, TaskQuery};

    fn field_of(error: BoardError) -> String {
        match error {
            BoardError::Invalid { field, .. } => field,
            other => panic!("not invalid: {other:?}"),
        }
    }

    #[test]
    fn names_the_field_of_a_bad_body() {
        let cases: &[(&str, &str)] = &[
            (r#"{"title": "x"}"#, "project_slug"),
            (r#"{"project_slug": "team", "title": "x", "colour": 1}"#, "colour"),
            (r#"{"project_slug": "team", "title": "x", "status": "doing"}"#, "status"),
            (r#"{"project_slug": "team", "title": 5}"#, "title"),
            (r#"{"project_slug": "team", "title": "x", "labels": ["a", 3]}"#, "labels[1]"),
            (r#"[1, 2]"#, "body"),
            (r#"{"project_slug": "#, "body"),
        ];
        for (body, field) in cases {
            let error = parse_json::<CreateTask>(body.as_bytes()).unwrap_err();
            assert_eq!(field_of(error), *field, "{body}");
        }
    }

    #[test]
    fn names_the_field_of_a_bad_query() {
        let parse = |query: &str| {
            let deserializer = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
            serde_path_to_error::deserialize::<_, TaskQuery>(deserializer)
                .map_err(|e| data_error(&e.path().to_string(), &e.into_inner().to_string()))
        };
        assert_eq!(field_of(parse("limit=abc").unwrap_err()), "limit");
        assert_eq!(field_of(parse("colour=red").unwrap_err()), "colour");
        assert_eq!(parse("limit=5&status=todo").unwrap().limit, Some(5));
    }

    #[test]
    fn reads_bearer_tokens() {
        let mut headers = HeaderMap::new();
        assert_eq!(bearer_token(&headers), None);
        headers.insert(header::AUTHORIZATION, "Bearer tok-a".parse().unwrap());
        assert_eq!(bearer_token(&headers), Some("tok-a"));
        headers.insert(header::AUTHORIZATION, "Basic abc".parse().unwrap());
        assert_eq!(bearer_token(&headers), None);
    }
}
