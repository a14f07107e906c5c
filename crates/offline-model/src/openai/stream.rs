//! Streamed answers (`"stream": true`): the answer a request would get, sent as server-sent
//! events the way OpenAI-compatible servers send them — a chunk per word of text, a chunk per
//! tool call, the finish reason, the usage, then `[DONE]` — with the endpoint's delay spread
//! between the chunks, so a slow answer keeps its bytes coming.

use std::time::Duration;

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// `answer` (a whole chat completion) as a stream of chunks, `delay` spread between them;
/// `in_flight` is held until the last chunk is out.
pub(super) fn sse(answer: Value, delay: Duration, in_flight: crate::arrival::InFlight) -> Response {
    let chunks = chunks(&answer);
    let gap = delay / u32::try_from(chunks.len()).unwrap_or(u32::MAX).max(1);
    let events = futures::stream::unfold((chunks.into_iter(), in_flight), move |(mut rest, in_flight)| async move {
        let chunk = rest.next()?;
        if !gap.is_zero() {
            tokio::time::sleep(gap).await;
        }
        Some((Ok::<_, std::convert::Infallible>(format!("data: {chunk}\n\n")), (rest, in_flight)))
    });
    (StatusCode::OK, [(header::CONTENT_TYPE, "text/event-stream")], Body::from_stream(events)).into_response()
}

fn chunks(answer: &Value) -> Vec<String> {
    let frame = |delta: Value, finish: Value| {
        json!({"id": answer["id"], "object": "chat.completion.chunk", "created": 0, "model": answer["model"],
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        .to_string()
    };
    let choice = &answer["choices"][0];
    let message = &choice["message"];
    let mut chunks = vec![frame(json!({"role": "assistant"}), Value::Null)];
    if let Some(content) = message["content"].as_str() {
        for word in content.split_inclusive(' ') {
            chunks.push(frame(json!({"content": word}), Value::Null));
        }
    }
    if let Some(refusal) = message["refusal"].as_str() {
        chunks.push(frame(json!({"refusal": refusal}), Value::Null));
    }
    for (index, call) in message["tool_calls"].as_array().into_iter().flatten().enumerate() {
        let delta = json!({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                           "function": {"name": call["function"]["name"], "arguments": call["function"]["arguments"]}}]});
        chunks.push(frame(delta, Value::Null));
    }
    chunks.push(frame(json!({}), choice["finish_reason"].clone()));
    if !answer["usage"].is_null() {
        chunks.push(
            json!({"id": answer["id"], "object": "chat.completion.chunk", "created": 0, "model": answer["model"],
                   "choices": [], "usage": answer["usage"]})
            .to_string(),
        );
    }
    chunks.push("[DONE]".to_string());
    chunks
}
