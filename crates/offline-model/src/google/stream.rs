//! Streamed answers of the Gemini API (`:streamGenerateContent`): the answer as chunks, each a
//! whole `GenerateContentResponse` — the text a word per chunk, then each function call whole
//! (the API never splits one), the last chunk with the `finishReason` and the `usageMetadata` —
//! sent as server-sent events (`data: …` lines, `?alt=sse`) with the endpoint's delay spread
//! between them, or as one JSON array without `alt=sse`.

use std::time::Duration;

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::GoogleAnswer;

/// `answer` as server-sent events, `delay` spread between them; `in_flight` is held until the
/// last event is out.
pub(super) fn sse(answer: &GoogleAnswer, delay: Duration, in_flight: crate::arrival::InFlight) -> Response {
    let chunks = chunks(answer);
    let gap = delay / u32::try_from(chunks.len()).unwrap_or(u32::MAX).max(1);
    let events = futures::stream::unfold((chunks.into_iter(), in_flight), move |(mut rest, in_flight)| async move {
        let chunk = rest.next()?;
        if !gap.is_zero() {
            tokio::time::sleep(gap).await;
        }
        Some((Ok::<_, std::convert::Infallible>(format!("data: {chunk}\r\n\r\n")), (rest, in_flight)))
    });
    (StatusCode::OK, [(header::CONTENT_TYPE, "text/event-stream")], Body::from_stream(events)).into_response()
}

/// The chunks: a word of text each, then a function call each; the last carries the finish
/// reason and the usage (an answer with nothing in it is one chunk with no parts).
pub(super) fn chunks(answer: &GoogleAnswer) -> Vec<Value> {
    let mut parts: Vec<Value> =
        answer.text.iter().flat_map(|text| text.split_inclusive(' ')).map(|word| json!({"text": word})).collect();
    parts.extend(answer.calls.iter().map(super::FunctionCall::part));
    if parts.is_empty() {
        return vec![answer.response(Vec::new(), true)];
    }
    let last = parts.len() - 1;
    parts.into_iter().enumerate().map(|(index, part)| answer.response(vec![part], index == last)).collect()
}
