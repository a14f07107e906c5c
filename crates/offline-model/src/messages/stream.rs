//! Streamed answers of the Messages API (`"stream": true`): the answer a request would get, sent
//! as the API's server-sent events, each with its `event:` line — `message_start` (the message
//! with no content yet, and its input usage), a `ping`, then per content block
//! `content_block_start`, its deltas (a `text_delta` per word; a tool use's arguments as
//! `input_json_delta` pieces, two or more) and `content_block_stop`, then `message_delta` (the
//! stop reason and the output tokens) and `message_stop` — with the endpoint's delay spread
//! between the events, so a slow answer keeps its bytes coming.

use std::time::Duration;

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::MessageAnswer;

/// `answer` as a stream of events, `delay` spread between them; `in_flight` is held until the
/// last event is out.
pub(super) fn sse(answer: &MessageAnswer, delay: Duration, in_flight: crate::arrival::InFlight) -> Response {
    let events = events(answer);
    let gap = delay / u32::try_from(events.len()).unwrap_or(u32::MAX).max(1);
    let events = futures::stream::unfold((events.into_iter(), in_flight), move |(mut rest, in_flight)| async move {
        let (name, data) = rest.next()?;
        if !gap.is_zero() {
            tokio::time::sleep(gap).await;
        }
        Some((Ok::<_, std::convert::Infallible>(format!("event: {name}\ndata: {data}\n\n")), (rest, in_flight)))
    });
    (StatusCode::OK, [(header::CONTENT_TYPE, "text/event-stream")], Body::from_stream(events)).into_response()
}

/// The events, each its name and its data.
fn events(answer: &MessageAnswer) -> Vec<(&'static str, Value)> {
    let start = json!({"type": "message_start", "message": {
        "id": answer.id, "type": "message", "role": "assistant", "model": answer.model, "content": [],
        "stop_reason": null, "stop_sequence": null, "usage": answer.usage(0),
    }});
    let mut events = vec![("message_start", start), ("ping", json!({"type": "ping"}))];
    let mut index = 0;
    for text in answer.texts() {
        let deltas = text.split_inclusive(' ').map(|word| json!({"type": "text_delta", "text": word})).collect();
        block(&mut events, index, json!({"type": "text", "text": ""}), deltas);
        index += 1;
    }
    for call in &answer.tool_uses {
        let started = json!({"type": "tool_use", "id": call.id, "name": call.name, "input": {}});
        // The arguments' text as written, so broken JSON reaches the client broken (see the
        // module header of `messages`).
        let deltas = json_pieces(&call.arguments)
            .into_iter()
            .map(|piece| json!({"type": "input_json_delta", "partial_json": piece}))
            .collect();
        block(&mut events, index, started, deltas);
        index += 1;
    }
    events.push((
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": answer.stop_reason, "stop_sequence": null},
               "usage": {"output_tokens": answer.output_tokens}}),
    ));
    events.push(("message_stop", json!({"type": "message_stop"})));
    events
}

/// One content block's events: its start, its deltas, its stop.
fn block(events: &mut Vec<(&'static str, Value)>, index: usize, started: Value, deltas: Vec<Value>) {
    events.push((
        "content_block_start",
        json!({"type": "content_block_start", "index": index, "content_block": started}),
    ));
    for delta in deltas {
        events.push(("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": delta})));
    }
    events.push(("content_block_stop", json!({"type": "content_block_stop", "index": index})));
}

/// `text` in two or more pieces (cut at character boundaries), as the API streams a tool's
/// input: a client must join them before parsing. An empty text is one empty piece.
fn json_pieces(text: &str) -> Vec<String> {
    let characters: Vec<char> = text.chars().collect();
    if characters.len() < 2 {
        return vec![text.to_string()];
    }
    // Pieces of at most 32 characters, and never fewer than two.
    let size = characters.len().div_ceil(2).min(32);
    characters.chunks(size).map(|piece| piece.iter().collect()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_come_in_two_or_more_pieces_that_join_back() {
        for text in ["{}", r#"{"task_id":"TE-1"}"#, &format!(r#"{{"body":"{}"}}"#, "é".repeat(100))] {
            let pieces = json_pieces(text);
            assert!(pieces.len() >= 2, "{pieces:?}");
            assert_eq!(pieces.concat(), text);
        }
        assert_eq!(json_pieces(""), vec![String::new()]);
    }
}
