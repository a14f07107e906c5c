//! The Messages API adapter's tests: the request body, reading an answer whole and streamed,
//! and the error mapping.

use std::time::Duration;

use serde_json::{Value, json};

use super::stream::{EventError, Streamed};
use super::*;
use crate::ModelFailure;
use crate::http::MAX_STREAMED_BLOCKS;

fn chat(cache: bool) -> AnthropicChat {
    let config = LlmConfig {
        max_output_tokens: Some(500),
        prompt_cache: cache,
        parallel_tool_calls: Some(false),
        ..LlmConfig::new("http://127.0.0.1:1/v1/", "claude-x")
    };
    AnthropicChat::new(&config, None).unwrap()
}

fn conversation() -> Vec<Message> {
    vec![
        Message::system("be brief"),
        Message::user("Task: TE-1"),
        Message::Assistant {
            content: Some("Looking.".into()),
            tool_calls: vec![
                ToolCall { id: "c1".into(), name: "get_task".into(), arguments: r#"{"task_id":"TE-1"}"#.into() },
                ToolCall { id: "call.2".into(), name: "get_task".into(), arguments: "{broken".into() },
            ],
            refusal: None,
        },
        Message::Tool { tool_call_id: "c1".into(), name: "get_task".into(), content: "{}".into(), is_error: false },
        Message::Tool {
            tool_call_id: "call.2".into(),
            name: "get_task".into(),
            content: "error: bad".into(),
            is_error: true,
        },
        Message::user("also this"),
    ]
}

fn tools() -> Vec<ToolSpec> {
    ["get_task", "post_message"]
        .into_iter()
        .map(|name| ToolSpec { name: name.into(), description: "d".into(), parameters: Default::default() })
        .collect()
}

#[test]
fn the_body_has_the_apis_shape_and_its_breakpoints() {
    let messages = conversation();
    let tools = tools();
    let request = ChatRequest { messages: &messages, tools: &tools, max_output_tokens: Some(200) };
    let body: Value = serde_json::from_slice(&chat(true).wire_body(&request).unwrap()).unwrap();
    assert_eq!(body["max_tokens"], 200);
    assert_eq!(body["tool_choice"]["disable_parallel_tool_use"], true);
    assert_eq!(body["tools"][0]["input_schema"]["type"], "object");
    assert!(body["tools"][0].get("cache_control").is_none());
    assert_eq!(body["tools"][1]["cache_control"]["type"], "ephemeral");
    assert_eq!(body["system"][0]["text"], "be brief");
    assert_eq!(body["system"][0]["cache_control"]["type"], "ephemeral");
    let turns = body["messages"].as_array().unwrap();
    let roles: Vec<&str> = turns.iter().map(|t| t["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "user"]);
    assert_eq!(turns[1]["content"][1]["input"]["task_id"], "TE-1");
    assert_eq!(turns[1]["content"][2]["input"], json!({}), "arguments that were not an object");
    assert_eq!(turns[1]["content"][2]["id"], "call_2");
    let last = turns[2]["content"].as_array().unwrap();
    assert_eq!(last[0]["type"], "tool_result");
    assert_eq!(last[1]["is_error"], true);
    assert_eq!(last[1]["tool_use_id"], "call_2");
    assert_eq!(last[2]["text"], "also this");
    assert_eq!(last[2]["cache_control"]["type"], "ephemeral");
    let marks = serde_json::to_string(&body).unwrap().matches("cache_control").count();
    assert_eq!(marks, 3, "at most four breakpoints are allowed");
    let uncached: Value = serde_json::from_slice(&chat(false).wire_body(&request).unwrap()).unwrap();
    assert!(!serde_json::to_string(&uncached).unwrap().contains("cache_control"));
}

#[test]
fn the_prefix_is_the_same_bytes_on_the_next_turn() {
    let tools = tools();
    let mut messages = conversation();
    let first = chat(true).wire_body(&ChatRequest { messages: &messages, tools: &tools, max_output_tokens: None });
    messages.push(Message::Assistant { content: Some("done".into()), tool_calls: vec![], refusal: None });
    messages.push(Message::user("thanks"));
    let second = chat(true).wire_body(&ChatRequest { messages: &messages, tools: &tools, max_output_tokens: None });
    let (first, second) = (String::from_utf8(first.unwrap()).unwrap(), String::from_utf8(second.unwrap()).unwrap());
    let prefix = &first[..first.find(r#""messages""#).unwrap()];
    assert!(second.starts_with(prefix));
}

#[test]
fn an_answer_with_tool_use_and_cache_usage_is_read() {
    let answer: WireAnswer = serde_json::from_value(json!({
        "id": "msg_1", "type": "message", "role": "assistant",
        "content": [{"type": "thinking", "thinking": "hm", "signature": ""},
                    {"type": "text", "text": "On it."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_task", "input": {"task_id": "TE-1"}}],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 10, "output_tokens": 7, "cache_read_input_tokens": 1500, "cache_creation_input_tokens": 300}
    }))
    .unwrap();
    let request = ChatRequest { messages: &[], tools: &[], max_output_tokens: None };
    let response = answer.into_response(&request).unwrap();
    assert_eq!(response.content.as_deref(), Some("On it."));
    assert_eq!(response.tool_calls[0].arguments, r#"{"task_id":"TE-1"}"#);
    assert_eq!(response.finish_reason, FinishReason::ToolCalls);
    assert_eq!(
        (response.usage.prompt_tokens, response.usage.cached_tokens, response.usage.cache_write_tokens),
        (1810, 1500, 300)
    );
}

#[test]
fn streamed_events_add_up_to_one_answer() {
    let events = [
        json!({"type": "message_start", "message": {"usage": {"input_tokens": 5, "output_tokens": 1, "cache_read_input_tokens": 2000}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hel"}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "lo"}}),
        json!({"type": "ping"}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "t1", "name": "get_task", "input": {}}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"task"}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "_id\": \"TE-1\"}"}}),
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 9}}),
    ];
    let mut streamed = Streamed::default();
    for event in &events {
        assert!(!streamed.add_event(&event.to_string()).unwrap());
    }
    assert!(streamed.add_event(r#"{"type":"message_stop"}"#).unwrap());
    let request = ChatRequest { messages: &[], tools: &[], max_output_tokens: None };
    let response = streamed.into_answer().unwrap().into_response(&request).unwrap();
    assert_eq!(response.content.as_deref(), Some("Hello"));
    assert_eq!(response.tool_calls[0].arguments, r#"{"task_id":"TE-1"}"#);
    assert_eq!(response.finish_reason, FinishReason::Length);
    assert_eq!(
        (response.usage.prompt_tokens, response.usage.completion_tokens, response.usage.cached_tokens),
        (2005, 9, 2000)
    );
    let mut failed = Streamed::default();
    assert!(
        failed.add_event(r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#).unwrap()
    );
    assert!(matches!(failed.into_answer(), Err(LlmError::Server { .. })));
}

/// Feeds `events` (each an event's data) to a fresh [`Streamed`].
fn streamed(events: &[Value]) -> Streamed {
    let mut streamed = Streamed::default();
    for event in events {
        streamed.add_event(&event.to_string()).unwrap();
    }
    streamed
}

fn tool_use_events(pieces: &[&str]) -> Vec<Value> {
    let mut events = vec![
        json!({"type": "message_start", "message": {"usage": {"input_tokens": 5, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t1", "name": "add_step", "input": {}}}),
    ];
    for piece in pieces {
        events.push(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": piece}}));
    }
    events.push(json!({"type": "content_block_stop", "index": 0}));
    events.push(json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}));
    events.push(json!({"type": "message_stop"}));
    events
}

#[test]
fn streamed_input_that_is_not_json_reaches_the_loop_as_the_models_text() {
    let request = ChatRequest { messages: &[], tools: &[], max_output_tokens: None };
    let fenced = "```json\n{\"task_id\": \"TE-1\", \"title\": \"Draft\"}\n```";
    let (head, tail) = fenced.split_at(9);
    let response = streamed(&tool_use_events(&[head, tail])).into_answer().unwrap().into_response(&request).unwrap();
    // As written, not as a JSON string of it: the loop repairs a fenced object.
    assert_eq!(response.tool_calls[0].arguments, fenced);
    let cut = streamed(&tool_use_events(&["{\"task_id\": \"TE", "-1\", \"ti"]));
    let response = cut.into_answer().unwrap().into_response(&request).unwrap();
    assert_eq!(response.tool_calls[0].arguments, "{\"task_id\": \"TE-1\", \"ti");
    // Valid JSON is read as before; no pieces at all is an empty object.
    let whole = streamed(&tool_use_events(&["{\"task_id\":", " \"TE-1\"}"]));
    let response = whole.into_answer().unwrap().into_response(&request).unwrap();
    assert_eq!(response.tool_calls[0].arguments, r#"{"task_id":"TE-1"}"#);
    let empty = streamed(&tool_use_events(&[]));
    assert_eq!(empty.into_answer().unwrap().into_response(&request).unwrap().tool_calls[0].arguments, "{}");
}

#[test]
fn a_block_index_past_the_cap_is_a_protocol_error_not_an_allocation() {
    use picogent_support::retry::{RetryDecision, Retryable};
    let start = |index: usize| {
        json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})
            .to_string()
    };
    let mut answer = Streamed::default();
    let error = answer.add_event(&start(usize::MAX / 2)).unwrap_err();
    assert!(matches!(error, EventError::IndexPastCap { index } if index == usize::MAX / 2), "{error:?}");
    assert!(error.to_string().contains("at most 256 blocks"), "{error}");
    assert!(answer.blocks.capacity() <= MAX_STREAMED_BLOCKS, "nothing was allocated for it");
    answer.add_event(&start(MAX_STREAMED_BLOCKS - 1)).unwrap();
    assert_eq!(answer.blocks.len(), MAX_STREAMED_BLOCKS);
    assert!(answer.add_event(&start(MAX_STREAMED_BLOCKS)).is_err());
    // The transport turns the refusal into a server failure, retried as one.
    let error = LlmError::BadResponse { message: error.to_string() };
    assert_eq!(error.kind(), ModelFailure::ServerError);
    assert_eq!(error.retry_decision(), RetryDecision::Retry);
}

#[test]
fn a_stream_that_closes_before_message_stop_is_a_connection_error() {
    use picogent_support::retry::{RetryDecision, Retryable};
    let mut events = tool_use_events(&["{\"task_id\": \"TE-1\"}"]);
    events.pop();
    // Everything but `message_stop`, the stop reason included: still cut short.
    let error = streamed(&events).into_answer().unwrap_err();
    assert!(matches!(error, LlmError::Connection { .. }), "{error:?}");
    assert!(error.to_string().contains("message_stop"), "{error}");
    assert_eq!(error.retry_decision(), RetryDecision::Retry, "retried as a dropped connection");
    // Nothing at all (a 200 whose body is no stream) is cut short too.
    assert!(matches!(Streamed::default().into_answer(), Err(LlmError::Connection { .. })));
}

#[test]
fn errors_map_to_the_notices_causes() {
    use picogent_support::retry::{RetryDecision, Retryable};
    let body =
        |kind: &str, message: &str| json!({"type": "error", "error": {"type": kind, "message": message}}).to_string();
    let wait = Some(Duration::from_secs(3));
    let overloaded = classify_error(529, wait, body("overloaded_error", "Overloaded").as_bytes());
    assert_eq!(overloaded.retry_decision(), RetryDecision::RetryAfter(Duration::from_secs(3)));
    let limited = classify_error(429, wait, body("rate_limit_error", "slow down").as_bytes());
    assert_eq!(limited.kind(), ModelFailure::RateLimited);
    assert_eq!(limited.retry_decision(), RetryDecision::RetryAfter(Duration::from_secs(3)));
    let long = classify_error(
        400,
        None,
        body("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum").as_bytes(),
    );
    assert_eq!(long.kind(), ModelFailure::ContextLength);
    let field = classify_error(400, None, body("invalid_request_error", "max_tokens: Field required").as_bytes());
    assert_eq!(field.kind(), ModelFailure::ParameterRefused { parameter: "max_tokens".into() });
    let key = classify_error(401, None, body("authentication_error", "invalid x-api-key").as_bytes());
    assert_eq!(key.kind(), ModelFailure::Unauthorized);
    let credit = "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing.";
    let broke = classify_error(400, None, body("invalid_request_error", credit).as_bytes());
    assert_eq!(broke.kind(), ModelFailure::Rejected);
    assert_eq!(broke.retry_decision(), RetryDecision::Stop, "waiting does not bring credit");
    assert!(broke.to_string().contains("credit balance"), "the reason is kept: {broke}");
    let choice = classify_error(
        400,
        None,
        body("invalid_request_error", "tool_choice.disable_parallel_tool_use: Extra inputs are not permitted")
            .as_bytes(),
    );
    assert_eq!(choice.kind(), ModelFailure::ParameterRefused { parameter: "tool_choice".into() });
    // llama.cpp's /v1/messages answers errors in OpenAI's shape.
    let llama = br#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}"#;
    assert_eq!(classify_error(400, None, llama).kind(), ModelFailure::ContextLength);
}
