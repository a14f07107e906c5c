//! Streamed responses (`"stream": true`): the response a request would get, sent as the Responses
//! API's server-sent events — `response.created`, then per output item `output_item.added`, its
//! deltas (a `output_text.delta` per word, the call's arguments in one
//! `function_call_arguments.delta`) and `output_item.done`, then `response.completed` (or
//! `response.incomplete`) with the usage — each numbered by `sequence_number`, with the endpoint's
//! delay spread between them.

use std::time::Duration;

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// `answer` (a whole response object) as a stream of events, `delay` spread between them;
/// `in_flight` is held until the last event is out.
pub(super) fn sse(answer: Value, delay: Duration, in_flight: crate::arrival::InFlight) -> Response {
    let events = events(&answer);
    let gap = delay / u32::try_from(events.len()).unwrap_or(u32::MAX).max(1);
    let frames = futures::stream::unfold((events.into_iter(), in_flight), move |(mut rest, in_flight)| async move {
        let (kind, data) = rest.next()?;
        if !gap.is_zero() {
            tokio::time::sleep(gap).await;
        }
        Some((Ok::<_, std::convert::Infallible>(format!("event: {kind}\ndata: {data}\n\n")), (rest, in_flight)))
    });
    (StatusCode::OK, [(header::CONTENT_TYPE, "text/event-stream")], Body::from_stream(frames)).into_response()
}

/// Each event's type and its data (which carries the type too).
fn events(answer: &Value) -> Vec<(String, String)> {
    let mut events: Vec<(String, Value)> = Vec::new();
    let mut started = answer.clone();
    started["status"] = json!("in_progress");
    started["output"] = json!([]);
    started["usage"] = Value::Null;
    events.push(("response.created".into(), json!({"response": started})));
    for (output_index, item) in answer["output"].as_array().into_iter().flatten().enumerate() {
        let mut added = item.clone();
        added["status"] = json!("in_progress");
        match item["type"].as_str() {
            Some("message") => {
                added["content"] = json!([]);
                events
                    .push(("response.output_item.added".into(), json!({"output_index": output_index, "item": added})));
                for (content_index, part) in item["content"].as_array().into_iter().flatten().enumerate() {
                    let at =
                        json!({"item_id": item["id"], "output_index": output_index, "content_index": content_index});
                    let empty = match part["type"].as_str() {
                        Some("refusal") => json!({"type": "refusal", "refusal": ""}),
                        _ => json!({"type": "output_text", "text": "", "annotations": []}),
                    };
                    events.push(("response.content_part.added".into(), merged(&at, json!({"part": empty}))));
                    if let Some(text) = part["text"].as_str() {
                        for word in text.split_inclusive(' ') {
                            events.push(("response.output_text.delta".into(), merged(&at, json!({"delta": word}))));
                        }
                        events.push(("response.output_text.done".into(), merged(&at, json!({"text": text}))));
                    }
                    events.push(("response.content_part.done".into(), merged(&at, json!({"part": part}))));
                }
            }
            _ => {
                added["arguments"] = json!("");
                events
                    .push(("response.output_item.added".into(), json!({"output_index": output_index, "item": added})));
                let at = json!({"item_id": item["id"], "output_index": output_index});
                let arguments = item["arguments"].as_str().unwrap_or_default();
                events
                    .push(("response.function_call_arguments.delta".into(), merged(&at, json!({"delta": arguments}))));
                events.push((
                    "response.function_call_arguments.done".into(),
                    merged(&at, json!({"arguments": arguments})),
                ));
            }
        }
        events.push(("response.output_item.done".into(), json!({"output_index": output_index, "item": item})));
    }
    let last = if answer["status"] == "incomplete" { "response.incomplete" } else { "response.completed" };
    events.push((last.into(), json!({"response": answer})));
    events
        .into_iter()
        .enumerate()
        .map(|(sequence_number, (kind, mut data))| {
            data["type"] = json!(kind);
            data["sequence_number"] = json!(sequence_number);
            (kind, data.to_string())
        })
        .collect()
}

/// `base`'s fields with `more`'s added.
fn merged(base: &Value, more: Value) -> Value {
    let mut merged = base.clone();
    if let (Some(merged), Value::Object(more)) = (merged.as_object_mut(), more) {
        merged.extend(more);
    }
    merged
}
