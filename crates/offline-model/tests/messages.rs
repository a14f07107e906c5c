//! The offline model endpoint over HTTP on loopback: the Messages API (`/v1/messages`), its
//! stream, the simulated prompt cache of both APIs, the overloaded fault on both, and the
//! Messages API's refusals of bad requests.

use std::sync::Arc;

use reqwest::StatusCode;
use serde_json::{Value, json};

use picogent_llm::{Message, ToolCall, ToolSpec, estimate_prompt_tokens};
use picogent_offline_model::script::Script;
use picogent_offline_model::{Faults, OfflineModelHandle, OfflineModelOptions, start};

const API_KEY: &str = "sk-offline-test";

/// A tool description long enough that a prompt offering it passes the cache's minimum.
fn long_description() -> String {
    (0..700).map(|n| format!("rule{n} ")).collect()
}

fn get_task_tool(description: &str) -> Value {
    json!({"name": "get_task", "description": description,
           "input_schema": {"type": "object", "properties": {"task_id": {"type": "string"}}, "required": ["task_id"]}})
}

fn get_task_spec(description: &str) -> ToolSpec {
    let schema = json!({"type": "object", "properties": {"task_id": {"type": "string"}}, "required": ["task_id"]});
    ToolSpec {
        name: "get_task".into(),
        description: description.into(),
        parameters: Arc::new(schema.as_object().cloned().unwrap_or_default()),
    }
}

/// A script answering the first turn with a call of `get_task` and the second, once the result
/// is there, with text.
fn two_turn_script() -> Script {
    Script::from_json(
        r#"{"turns": [
            {"expect": {"tools_include": ["get_task"], "messages_contain": "Task: TE-1"},
             "reply": {"content": "Reading the task", "tool_calls": [{"name": "get_task", "arguments": {"task_id": "TE-1"}}]}},
            {"expect": {"last_tool_result_contains": "TE-1", "last_tool_result_is_error": false},
             "reply": {"content": "The task is read"}}
        ]}"#,
    )
    .unwrap()
}

struct Answer {
    status: StatusCode,
    headers: reqwest::header::HeaderMap,
    text: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|error| panic!("not JSON ({error}): {}", self.text))
    }
}

async fn post(url: &str, headers: &[(&str, &str)], body: &Value) -> Answer {
    let mut request = reqwest::Client::new().post(url).json(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    Answer { status, headers, text: response.text().await.unwrap() }
}

async fn post_messages(model: &OfflineModelHandle, body: &Value) -> Answer {
    post(&model.messages_url(), &[("x-api-key", API_KEY), ("anthropic-version", "2023-06-01")], body).await
}

async fn post_chat(model: &OfflineModelHandle, body: &Value) -> Answer {
    post(&format!("{}/chat/completions", model.url()), &[], body).await
}

fn first_request(tools: Value, system: Value) -> Value {
    json!({
        "model": "claude-offline", "max_tokens": 1000, "tools": tools, "system": system,
        "messages": [{"role": "user", "content": "You were assigned a task.\nTask: TE-1"}],
    })
}

/// `first` with the assistant's `answer` and one more user turn: the tool's result.
fn follow_up(first: &Value, answer: &Value, tool_result: Value) -> Value {
    let mut next = first.clone();
    let messages = next["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": answer["content"]}));
    messages.push(json!({"role": "user", "content": [tool_result]}));
    next
}

#[tokio::test]
async fn a_messages_request_with_tools_gets_tool_use_and_its_follow_up_an_answer() {
    let model = start(OfflineModelOptions::script(two_turn_script())).await.unwrap();
    let first = first_request(json!([get_task_tool("Reads a task.")]), json!("You work tasks."));
    let answer = post_messages(&model, &first).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    let message = answer.json();
    assert_eq!(message["type"], "message");
    assert_eq!(message["role"], "assistant");
    assert_eq!(message["model"], "claude-offline");
    assert_eq!(message["stop_reason"], "tool_use");
    assert_eq!(message["stop_sequence"], Value::Null);
    assert_eq!(message["content"][0], json!({"type": "text", "text": "Reading the task"}));
    let call = &message["content"][1];
    assert_eq!(call["type"], "tool_use");
    assert_eq!(call["name"], "get_task");
    assert_eq!(call["input"], json!({"task_id": "TE-1"}));
    assert!(call["id"].as_str().unwrap().starts_with("toolu_"), "{call}");
    assert!(message["usage"]["input_tokens"].as_u64().unwrap() > 0);
    assert!(message["usage"]["output_tokens"].as_u64().unwrap() > 0);

    let result = json!({"type": "tool_result", "tool_use_id": call["id"], "content": [{"type": "text", "text": "{\"key\":\"TE-1\"}"}]});
    let answer = post_messages(&model, &follow_up(&first, &message, result)).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    let message = answer.json();
    assert_eq!(message["stop_reason"], "end_turn");
    assert_eq!(message["content"], json!([{"type": "text", "text": "The task is read"}]));
    assert!(model.mismatches().is_empty(), "{:?}", model.mismatches());

    assert_eq!(model.request_paths(), ["/v1/messages", "/v1/messages"]);
    let headers = model.request_headers();
    assert_eq!(headers[0].api_key.as_deref(), Some(API_KEY));
    assert_eq!(headers[0].anthropic_version.as_deref(), Some("2023-06-01"));
    assert!(!format!("{headers:?}").contains(API_KEY), "the key is never shown");
    assert_eq!(model.requests()[0], first);
    model.shutdown().await;
}

#[tokio::test]
async fn the_planner_answers_on_the_messages_api_too() {
    let model = start(OfflineModelOptions::planner()).await.unwrap();
    let request = first_request(json!([get_task_tool("Reads a task.")]), json!([{"type": "text", "text": "s"}]));
    let message = post_messages(&model, &request).await.json();
    assert_eq!(message["stop_reason"], "tool_use");
    assert_eq!(message["content"][0]["name"], "get_task");
    assert_eq!(message["content"][0]["input"]["task_id"], "TE-1");
    model.shutdown().await;
}

/// The content a stream of Messages API events adds up to, its stop reason and its usage (the
/// start's, with the delta's output tokens).
fn content_of_stream(text: &str) -> (Vec<Value>, Value, Value) {
    let mut content: Vec<Value> = Vec::new();
    let mut partial_json: Vec<String> = Vec::new();
    let (mut stop_reason, mut usage) = (Value::Null, Value::Null);
    let mut names = Vec::new();
    for event in text.split("\n\n").filter(|event| !event.trim().is_empty()) {
        let mut lines = event.lines();
        let name = lines.next().and_then(|line| line.strip_prefix("event: ")).expect("an event line");
        let data: Value = serde_json::from_str(lines.next().and_then(|l| l.strip_prefix("data: ")).unwrap()).unwrap();
        assert_eq!(data["type"], name, "the event line names the data's type");
        names.push(name.to_string());
        match name {
            "message_start" => usage = data["message"]["usage"].clone(),
            "content_block_start" => {
                content.push(data["content_block"].clone());
                partial_json.push(String::new());
            }
            "content_block_delta" => {
                let index = data["index"].as_u64().unwrap() as usize;
                let delta = &data["delta"];
                match delta["type"].as_str().unwrap() {
                    "text_delta" => {
                        let text =
                            format!("{}{}", content[index]["text"].as_str().unwrap(), delta["text"].as_str().unwrap());
                        content[index]["text"] = json!(text);
                    }
                    "input_json_delta" => partial_json[index].push_str(delta["partial_json"].as_str().unwrap()),
                    other => panic!("unexpected delta {other}"),
                }
            }
            "content_block_stop" => {
                let index = data["index"].as_u64().unwrap() as usize;
                if content[index]["type"] == "tool_use" {
                    content[index]["input"] = serde_json::from_str(&partial_json[index]).unwrap();
                }
            }
            "message_delta" => {
                stop_reason = data["delta"]["stop_reason"].clone();
                usage["output_tokens"] = data["usage"]["output_tokens"].clone();
            }
            "message_stop" | "ping" => {}
            other => panic!("unexpected event {other}"),
        }
    }
    assert_eq!(names.first().map(String::as_str), Some("message_start"));
    assert_eq!(names.last().map(String::as_str), Some("message_stop"));
    let json_deltas = text.matches("input_json_delta").count();
    assert!(json_deltas >= 2, "a tool use's input comes in two or more pieces: {text}");
    (content, stop_reason, usage)
}

#[tokio::test]
async fn a_streamed_answer_adds_up_to_the_whole_one() {
    let turn = r#"{"reply": {"content": "Reading the task now", "tool_calls": [{"name": "get_task", "arguments": {"task_id": "TE-1"}}]}}"#;
    let script = Script::from_json(&format!(r#"{{"turns": [{turn}, {turn}]}}"#)).unwrap();
    let model = start(OfflineModelOptions::script(script)).await.unwrap();
    let request = first_request(json!([get_task_tool("Reads a task.")]), json!("s"));
    let whole = post_messages(&model, &request).await.json();
    let mut streamed_request = request.clone();
    streamed_request["stream"] = json!(true);
    let answer = post_messages(&model, &streamed_request).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.headers["content-type"], "text/event-stream");
    let (mut content, stop_reason, usage) = content_of_stream(&answer.text);
    // Only the ids differ: each answer numbers its own.
    assert_eq!(content[1]["id"], "toolu_2_0");
    content[1]["id"] = whole["content"][1]["id"].clone();
    assert_eq!(Value::Array(content), whole["content"]);
    assert_eq!(stop_reason, whole["stop_reason"]);
    assert_eq!(usage, whole["usage"]);
    model.shutdown().await;
}

#[tokio::test]
async fn the_next_turn_reads_what_the_last_one_wrote() {
    let model = start(OfflineModelOptions::script(two_turn_script())).await.unwrap();
    let description = long_description();
    let ephemeral = json!({"type": "ephemeral"});
    let mut tool = get_task_tool(&description);
    tool["cache_control"] = ephemeral.clone();
    let system = json!([{"type": "text", "text": "You work tasks.", "cache_control": ephemeral}]);
    let mut first = first_request(json!([tool]), system);
    first["messages"][0]["content"] =
        json!([{"type": "text", "text": "You were assigned a task.\nTask: TE-1", "cache_control": ephemeral}]);
    let answer = post_messages(&model, &first).await.json();
    let usage = answer["usage"].clone();
    assert_eq!(usage["cache_read_input_tokens"], 0, "{usage}");
    let written = usage["cache_creation_input_tokens"].as_u64().unwrap();
    assert!(written >= 1024, "{usage}");

    // The next turn: the breakpoint moves from the task's text to the tool's result.
    let call_id = answer["content"][1]["id"].clone();
    let result = json!({"type": "tool_result", "tool_use_id": call_id, "content": "{\"key\":\"TE-1\"}", "cache_control": ephemeral});
    let mut next = follow_up(&first, &answer, result);
    next["messages"][0]["content"][0].as_object_mut().unwrap().remove("cache_control");
    let second = post_messages(&model, &next).await.json();
    let usage = &second["usage"];
    assert_eq!(usage["cache_read_input_tokens"].as_u64(), Some(written), "{usage}");
    let written_next = usage["cache_creation_input_tokens"].as_u64().unwrap();
    assert!(written_next > 0, "the new turn is written: {usage}");

    let spec = get_task_spec(&description);
    let messages = vec![
        Message::system("You work tasks."),
        Message::user("You were assigned a task.\nTask: TE-1"),
        Message::Assistant {
            content: Some("Reading the task".into()),
            tool_calls: vec![ToolCall {
                id: call_id.as_str().unwrap().into(),
                name: "get_task".into(),
                arguments: json!({"task_id": "TE-1"}).to_string(),
            }],
            refusal: None,
        },
        Message::Tool {
            tool_call_id: call_id.as_str().unwrap().into(),
            name: "get_task".into(),
            content: "{\"key\":\"TE-1\"}".into(),
            is_error: false,
        },
    ];
    let total = estimate_prompt_tokens(&messages, std::slice::from_ref(&spec));
    let input = usage["input_tokens"].as_u64().unwrap();
    assert_eq!(input + written + written_next, total, "{usage}");
    let first_total = estimate_prompt_tokens(&messages[..2], &[spec]);
    assert_eq!(model.tokens_counted().0, first_total + total);
    assert_eq!(model.cache_counted(), (written, written + written_next));
    model.shutdown().await;
}

#[tokio::test]
async fn no_cache_is_reported_when_the_cache_is_off() {
    let options = OfflineModelOptions { cache: false, ..OfflineModelOptions::planner() };
    let model = start(options).await.unwrap();
    let mut tool = get_task_tool(&long_description());
    tool["cache_control"] = json!({"type": "ephemeral"});
    let request = first_request(json!([tool]), json!("s"));
    for _ in 0..2 {
        let usage = post_messages(&model, &request).await.json()["usage"].clone();
        assert_eq!(usage["cache_read_input_tokens"], 0);
        assert_eq!(usage["cache_creation_input_tokens"], 0);
    }
    assert_eq!(model.cache_counted(), (0, 0));
    model.shutdown().await;
}

#[tokio::test]
async fn chat_completions_report_the_cached_prefix_of_the_second_request() {
    let model = start(OfflineModelOptions::planner()).await.unwrap();
    let tool = json!({"type": "function", "function": {"name": "get_task", "description": long_description(),
                      "parameters": {"type": "object", "properties": {"task_id": {"type": "string"}}}}});
    let first = json!({"model": "m", "tools": [tool], "messages": [
        {"role": "system", "content": "You work tasks."},
        {"role": "user", "content": "You were assigned a task.\nTask: TE-1"},
    ]});
    let answer = post_chat(&model, &first).await.json();
    assert_eq!(answer["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    let call = answer["choices"][0]["message"]["tool_calls"][0].clone();
    let mut second = first.clone();
    let messages = second["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": null, "tool_calls": [call]}));
    messages.push(json!({"role": "tool", "tool_call_id": call["id"], "content": "{\"key\":\"TE-1\"}"}));
    second["stream"] = json!(true);
    second["stream_options"] = json!({"include_usage": true});
    let streamed = post_chat(&model, &second).await.text;
    let usage: Value = streamed
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .find_map(|chunk| chunk.get("usage").cloned())
        .expect("a usage chunk");
    let cached = usage["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
    let prompt = usage["prompt_tokens"].as_u64().unwrap();
    assert!(cached >= 1024 && cached.is_multiple_of(128) && cached < prompt, "{usage}");
    assert_eq!(model.cache_counted(), (cached, 0));
    model.shutdown().await;
}

#[tokio::test]
async fn the_overloaded_fault_answers_on_both_endpoints() {
    let faults = Faults { rate_limit_burst: 1, overloaded_burst: 2, retry_after_secs: 3, ..Faults::default() };
    let model = start(OfflineModelOptions { faults, ..OfflineModelOptions::planner() }).await.unwrap();
    let messages_request = first_request(json!([get_task_tool("Reads a task.")]), json!("s"));
    let chat_request = json!({"model": "m", "messages": [{"role": "user", "content": "hello"}]});

    let limited = post_messages(&model, &messages_request).await;
    assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        limited.json(),
        json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down (offline fault)"}})
    );
    assert_eq!(limited.headers["retry-after"], "3");

    let overloaded = post_messages(&model, &messages_request).await;
    assert_eq!(overloaded.status.as_u16(), 529);
    assert_eq!(overloaded.json()["type"], "error");
    assert_eq!(overloaded.json()["error"]["type"], "overloaded_error");
    assert_eq!(overloaded.headers["retry-after"], "3");

    let overloaded = post_chat(&model, &chat_request).await;
    assert_eq!(overloaded.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(overloaded.json()["error"]["type"], "overloaded_error");
    assert_eq!(overloaded.headers["retry-after"], "3");

    assert_eq!(post_chat(&model, &chat_request).await.status, StatusCode::OK);
    assert_eq!(post_messages(&model, &messages_request).await.status, StatusCode::OK);
    assert_eq!(
        model.request_paths(),
        ["/v1/messages", "/v1/messages", "/v1/chat/completions", "/v1/chat/completions", "/v1/messages"]
    );
    model.shutdown().await;
}

#[tokio::test]
async fn other_faults_take_the_messages_shape() {
    let faults = Faults { server_error_burst: 1, truncated_body_burst: 1, ..Faults::default() };
    let model = start(OfflineModelOptions { faults, ..OfflineModelOptions::planner() }).await.unwrap();
    let request = first_request(json!([]), json!("s"));
    let failed = post_messages(&model, &request).await;
    assert_eq!(failed.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(failed.json()["error"]["type"], "api_error");
    assert!(failed.headers.get("retry-after").is_none());
    let cut = post_messages(&model, &request).await;
    assert_eq!(cut.status, StatusCode::OK);
    assert!(serde_json::from_str::<Value>(&cut.text).is_err(), "{}", cut.text);
    model.shutdown().await;

    let script = Script::from_json(
        r#"{"turns": [{"fault": {"status": 400, "code": "context_length_exceeded"}},
                      {"fault": {"status": 429, "retry_after": 2}},
                      {"reply": {"content": "one two three four five six seven eight nine ten"}},
                      {"reply": {"content": "short", "finish_reason": "length"}}]}"#,
    )
    .unwrap();
    let model = start(OfflineModelOptions::script(script)).await.unwrap();
    let too_long = post_messages(&model, &request).await;
    assert_eq!(too_long.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        too_long.json()["error"],
        json!({"type": "invalid_request_error", "message": "prompt is too long: 250000 tokens > 200000 maximum"})
    );
    let limited = post_messages(&model, &request).await;
    assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(limited.json()["error"]["type"], "rate_limit_error");
    assert_eq!(limited.headers["retry-after"], "2");
    let mut capped = request.clone();
    capped["max_tokens"] = json!(3);
    let cut = post_messages(&model, &capped).await.json();
    assert_eq!(cut["stop_reason"], "max_tokens");
    assert_eq!(cut["content"], json!([{"type": "text", "text": "one two three"}]));
    assert_eq!(cut["usage"]["output_tokens"], 3);
    assert_eq!(post_messages(&model, &request).await.json()["stop_reason"], "max_tokens");
    model.shutdown().await;
}

#[tokio::test]
async fn broken_arguments_stay_broken_in_a_way_each_shape_can_carry() {
    let faults = Faults { invalid_arguments: 2, ..Faults::default() };
    let model = start(OfflineModelOptions { faults, ..OfflineModelOptions::planner() }).await.unwrap();
    let request = first_request(json!([get_task_tool("Reads a task.")]), json!("s"));
    let whole = post_messages(&model, &request).await.json();
    let raw = whole["content"][0]["input"]["__raw_arguments"].as_str().unwrap().to_string();
    assert!(serde_json::from_str::<Value>(&raw).is_err(), "{raw}");
    let mut streamed = request.clone();
    streamed["stream"] = json!(true);
    let text = post_messages(&model, &streamed).await.text;
    let joined: String = text
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .filter_map(|event| event["delta"]["partial_json"].as_str().map(str::to_string))
        .collect();
    assert_eq!(joined, raw, "the stream sends the broken text itself");
    model.shutdown().await;
}

#[tokio::test]
async fn bad_messages_requests_are_refused_saying_why() {
    let model = start(OfflineModelOptions::planner()).await.unwrap();
    let valid = first_request(json!([get_task_tool("Reads a task.")]), json!("s"));
    let mut no_max_tokens = valid.clone();
    no_max_tokens.as_object_mut().unwrap().remove("max_tokens");
    let unknown_result = json!({"model": "m", "max_tokens": 10, "messages": [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "hi"}]}]});
    let mut too_many_marks = valid.clone();
    too_many_marks["messages"] = json!([{"role": "user", "content": (0..5)
        .map(|n| json!({"type": "text", "text": format!("part {n}"), "cache_control": {"type": "ephemeral"}}))
        .collect::<Vec<_>>()}]);
    let bad_role = json!({"model": "m", "max_tokens": 10, "messages": [{"role": "developer", "content": "x"}]});
    let bad_block =
        json!({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": [{"type": "nonsense"}]}]});
    // `valid` with `field` set to `value`.
    let with = |field: &str, value: Value| {
        let mut request = valid.clone();
        request[field] = value;
        request
    };
    let user = |content: Value| json!([{"role": "user", "content": content}]);
    let answered =
        |content: Value| json!([{"role": "user", "content": "hi"}, {"role": "assistant", "content": content}]);
    let cases = [
        (no_max_tokens, "max_tokens: Field required"),
        (with("max_tokens", json!(0)), "max_tokens: Input should be greater than or equal to 1"),
        (json!({"model": "m", "max_tokens": 10}), "messages: Field required"),
        (with("temperature", json!(2.0)), "temperature: Input should be between 0 and 1"),
        (with("model", json!(5)), "the request body is not a messages request: "),
        (
            with("tools", json!([{"name": "t", "input_schema": "x"}])),
            "tools[0].input_schema: Input should be an object",
        ),
        (
            with("tools", json!([{"name": "t", "input_schema": {}, "cache_control": {"type": "persistent"}}])),
            "tools[0].cache_control.type: Input should be 'ephemeral'",
        ),
        (
            with("system", json!([{"type": "text", "text": "s", "cache_control": {"type": "ephemeral", "ttl": "2h"}}])),
            "system[0].cache_control.ttl: Input should be '5m' or '1h'",
        ),
        (with("system", json!(5)), "system: Input should be a valid string or a list of text blocks"),
        (
            with("messages", user(json!(5))),
            "messages[0].content: Input should be a valid string or a list of content blocks",
        ),
        (unknown_result, r#"messages[0].content[0]: tool_use_id "toolu_x" answers no earlier tool_use block"#),
        (
            with("messages", user(json!([{"type": "tool_result", "tool_use_id": "toolu_x", "content": 5}]))),
            "messages[0].content[0].content: Input should be a valid string or a list of text blocks",
        ),
        (
            with("messages", user(json!([{"type": "tool_use", "id": "toolu_x", "name": "t", "input": {}}]))),
            "messages[0].content[0]: a tool_use block belongs in an assistant message",
        ),
        (
            with("messages", answered(json!([{"type": "tool_result", "tool_use_id": "toolu_x"}]))),
            "messages[1].content[0]: a tool_result block belongs in a user message",
        ),
        (
            with("messages", answered(json!([{"type": "tool_use", "id": "toolu_x", "name": "t", "input": "x"}]))),
            "messages[1].content[0].input: Input should be a valid dictionary",
        ),
        (too_many_marks, "A maximum of 4 blocks with cache_control may be provided. Found 5."),
        (bad_role, r#"messages[0].role: Input should be 'user', 'assistant' or 'system', not "developer""#),
        (bad_block, "messages[0].content[0]: "),
    ];
    for (request, expected) in cases {
        let answer = post_messages(&model, &request).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.text);
        let error = answer.json();
        assert_eq!(error["type"], "error");
        assert_eq!(error["error"]["type"], "invalid_request_error");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains(expected), "{message:?} should say {expected:?}");
    }
    let no_version = post(&model.messages_url(), &[("x-api-key", API_KEY)], &valid).await;
    assert_eq!(no_version.status, StatusCode::BAD_REQUEST);
    assert_eq!(no_version.json()["error"]["message"], "anthropic-version: header is required");
    assert_eq!(model.request_headers().last().unwrap().anthropic_version, None);
    let not_json = reqwest::Client::new()
        .post(model.messages_url())
        .header("anthropic-version", "2023-06-01")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(not_json.status(), StatusCode::BAD_REQUEST);
    model.shutdown().await;
}
