//! The offline model endpoint's Responses API (`/v1/responses`, as Codex CLI calls it) over HTTP
//! on loopback: a script replayed through `input` items (a call and its output), the stream of
//! events adding up to the whole response, and the refusal of input it cannot read.

use reqwest::StatusCode;
use serde_json::{Value, json};

use picogent_offline_model::script::Script;
use picogent_offline_model::{OfflineModelHandle, OfflineModelOptions, start};

/// A script answering the first turn with a call of `exec_command` and the second, once its
/// output is there, with text.
fn two_turn_script() -> Script {
    Script::from_json(
        r#"{"turns": [
            {"expect": {"tools_include": ["exec_command", "close_agent"], "messages_contain": "Fix src/date.py"},
             "reply": {"content": "Reading it first", "tool_calls": [{"name": "exec_command", "arguments": {"cmd": "cat src/date.py"}}]}},
            {"expect": {"last_tool_result_contains": "2020-01-01", "last_tool_result_is_error": false},
             "reply": {"content": "The date is read"}}
        ]}"#,
    )
    .unwrap()
}

/// A request as Codex sends one: instructions, developer and user messages, its function tools,
/// a namespace of more, and a hosted tool that is not the model's to call.
fn first_request(stream: bool) -> Value {
    json!({
        "model": "scripted", "stream": stream, "store": false, "instructions": "You are a coding agent.",
        "tools": [
            {"type": "function", "name": "exec_command", "description": "Runs a command.", "strict": false,
             "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}},
            {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.", "tools": [
                {"type": "function", "name": "close_agent", "description": "Closes one.", "parameters": {"type": "object"}}]},
            {"type": "web_search", "external_web_access": false}
        ],
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be precise."}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix src/date.py"}]}
        ],
    })
}

async fn post(model: &OfflineModelHandle, body: &Value) -> (StatusCode, String) {
    let response = reqwest::Client::new()
        .post(format!("{}/responses", model.url()))
        .bearer_auth("not-needed")
        .json(body)
        .send()
        .await
        .unwrap();
    (response.status(), response.text().await.unwrap())
}

/// The response a stream of events adds up to: the `response.completed` event's response, after
/// checking that every item's deltas add up to the item it announces done.
fn response_of_stream(text: &str) -> Value {
    let mut names = Vec::new();
    let (mut deltas, mut done_items, mut completed) = (String::new(), Vec::new(), Value::Null);
    for (number, event) in text.split("\n\n").filter(|event| !event.trim().is_empty()).enumerate() {
        let mut lines = event.lines();
        let name = lines.next().and_then(|line| line.strip_prefix("event: ")).expect("an event line");
        let data: Value = serde_json::from_str(lines.next().and_then(|l| l.strip_prefix("data: ")).unwrap()).unwrap();
        assert_eq!(data["type"], name, "the event line names the data's type");
        assert_eq!(data["sequence_number"], number, "{event}");
        names.push(name.to_string());
        match name {
            "response.output_text.delta" | "response.function_call_arguments.delta" => {
                deltas.push_str(data["delta"].as_str().unwrap());
            }
            "response.output_item.done" => {
                let item = &data["item"];
                let whole = match item["type"].as_str().unwrap() {
                    "message" => item["content"][0]["text"].as_str().unwrap().to_string(),
                    _ => item["arguments"].as_str().unwrap().to_string(),
                };
                assert_eq!(std::mem::take(&mut deltas), whole, "the deltas add up to the item");
                done_items.push(item.clone());
            }
            "response.completed" => completed = data["response"].clone(),
            _ => {}
        }
    }
    assert_eq!(names.first().map(String::as_str), Some("response.created"));
    assert_eq!(names.last().map(String::as_str), Some("response.completed"));
    assert_eq!(completed["output"], Value::Array(done_items), "the items done are the response's output");
    completed
}

#[tokio::test]
async fn a_responses_request_gets_a_function_call_and_its_output_an_answer_streamed_or_not() {
    let model = start(OfflineModelOptions::script(two_turn_script())).await.unwrap();
    let first = first_request(true);
    let (status, text) = post(&model, &first).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let response = response_of_stream(&text);
    assert_eq!(response["status"], "completed");
    assert_eq!(response["model"], "scripted");
    let output = response["output"].as_array().unwrap();
    assert_eq!(output[0]["type"], "message");
    assert_eq!(output[0]["role"], "assistant");
    assert_eq!(output[0]["content"][0]["text"], "Reading it first");
    let call = &output[1];
    assert_eq!((call["type"].as_str(), call["name"].as_str()), (Some("function_call"), Some("exec_command")));
    assert_eq!(
        serde_json::from_str::<Value>(call["arguments"].as_str().unwrap()).unwrap(),
        json!({"cmd": "cat src/date.py"})
    );
    assert!(response["usage"]["input_tokens"].as_u64().unwrap() > 0);
    assert!(response["usage"]["output_tokens"].as_u64().unwrap() > 0);
    assert_eq!(
        response["usage"]["total_tokens"].as_u64(),
        Some(
            response["usage"]["input_tokens"].as_u64().unwrap() + response["usage"]["output_tokens"].as_u64().unwrap()
        )
    );

    // The next request carries the turn back as items, a reasoning item among them, and the
    // call's output; this one is not streamed.
    let mut next = first_request(false);
    let input = next["input"].as_array_mut().unwrap();
    input.push(json!({"type": "reasoning", "summary": [], "encrypted_content": "opaque"}));
    input.push(output[0].clone());
    input.push(json!({"type": "function_call", "call_id": call["call_id"], "name": "exec_command", "arguments": call["arguments"]}));
    input.push(json!({"type": "function_call_output", "call_id": call["call_id"], "output": "def default():\n    return \"2020-01-01\"\n"}));
    let (status, text) = post(&model, &next).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let response: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(response["object"], "response");
    assert_eq!(response["status"], "completed");
    assert_eq!(
        response["output"][0]["content"][0],
        json!({"type": "output_text", "text": "The date is read", "annotations": []})
    );
    assert_eq!(response["output"].as_array().map(Vec::len), Some(1));
    assert_eq!(model.mismatches(), Vec::<String>::new());
    assert_eq!(model.script_position(), 2);
    assert_eq!(model.request_paths(), ["/v1/responses", "/v1/responses"]);
    assert_eq!(model.requests()[0], first);
    model.shutdown().await;
}

#[tokio::test]
async fn an_output_answering_no_call_and_input_that_is_not_items_are_refused_in_openais_error_shape() {
    let model = start(OfflineModelOptions::planner()).await.unwrap();
    let mut orphan = first_request(false);
    orphan["input"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "function_call_output", "call_id": "call_9", "output": "x"}));
    let (status, text) = post(&model, &orphan).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    let error: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert_eq!(error["error"]["message"], "input[2]: call_id \"call_9\" answers no earlier call");

    let (status, text) = post(&model, &json!({"model": "m", "input": 42})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert!(text.contains("expected a string or an array of items"), "{text}");
    let (status, text) = post(&model, &json!({"model": "m", "input": [{"type": "function_call", "name": "x"}]})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert!(text.contains("input[0]: a call needs `call_id`"), "{text}");
    model.shutdown().await;
}

#[tokio::test]
async fn the_planner_answers_a_text_input_on_the_responses_api() {
    let model = start(OfflineModelOptions::planner()).await.unwrap();
    let (status, text) = post(&model, &json!({"model": "m", "input": "Hello"})).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let response: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(response["status"], "completed");
    assert!(response["output"].as_array().is_some_and(|output| !output.is_empty()), "{response}");
    model.shutdown().await;
}
