//! The offline model endpoint's Gemini API over HTTP on loopback (`/v1beta/models/{model}:…`):
//! a whole answer and its follow-up, the stream adding up to the whole answer, token counting,
//! the implicit cache, faults in the API's error shape, and refusals of bad requests.

use reqwest::StatusCode;
use serde_json::{Value, json};

use picogent_offline_model::script::Script;
use picogent_offline_model::{Faults, OfflineModelHandle, OfflineModelOptions, start};

const API_KEY: &str = "gemini-offline-test";

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

/// POSTs `body` to `model`'s `{method}` of the model `gemini-offline` (`method` may carry a query).
async fn post_google(model: &OfflineModelHandle, method: &str, body: &Value) -> Answer {
    let url = format!("http://{}/v1beta/models/gemini-offline:{method}", model.address());
    let response = reqwest::Client::new().post(url).header("x-goog-api-key", API_KEY).json(body).send().await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    Answer { status, headers, text: response.text().await.unwrap() }
}

fn get_task_tools(description: &str) -> Value {
    json!([{"functionDeclarations": [{"name": "get_task", "description": description,
        "parametersJsonSchema": {"type": "object", "properties": {"task_id": {"type": "string"}}, "required": ["task_id"]}}]},
        {"googleSearch": {}}])
}

fn first_request(description: &str) -> Value {
    json!({
        "systemInstruction": {"parts": [{"text": "You work tasks."}]},
        "tools": get_task_tools(description),
        "contents": [{"role": "user", "parts": [{"text": "You were assigned a task.\nTask: TE-1"}]}],
        "generationConfig": {"temperature": 1},
    })
}

/// `first` with the model's `answer` and one more user content: a function response to its call.
fn follow_up(first: &Value, answer: &Value, output: &str) -> Value {
    let mut next = first.clone();
    let content = answer["candidates"][0]["content"].clone();
    let call = content["parts"].as_array().unwrap().iter().find(|part| part.get("functionCall").is_some()).unwrap();
    let response = json!({"functionResponse": {"id": call["functionCall"]["id"], "name": call["functionCall"]["name"],
                                              "response": {"output": output}}});
    let contents = next["contents"].as_array_mut().unwrap();
    contents.push(content);
    contents.push(json!({"role": "user", "parts": [response]}));
    next
}

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

#[tokio::test]
async fn a_generate_content_request_gets_a_function_call_and_its_follow_up_an_answer() {
    let model = start(OfflineModelOptions::script(two_turn_script())).await.unwrap();
    let first = first_request("Reads a task.");
    let answer = post_google(&model, "generateContent", &first).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    let response = answer.json();
    let candidate = &response["candidates"][0];
    assert_eq!(candidate["finishReason"], "STOP");
    assert_eq!(candidate["content"]["role"], "model");
    assert_eq!(candidate["content"]["parts"][0], json!({"text": "Reading the task"}));
    let call = &candidate["content"]["parts"][1]["functionCall"];
    assert_eq!((&call["name"], &call["args"]), (&json!("get_task"), &json!({"task_id": "TE-1"})));
    assert_eq!(response["modelVersion"], "gemini-offline");
    let usage = &response["usageMetadata"];
    let (prompt, output) =
        (usage["promptTokenCount"].as_u64().unwrap(), usage["candidatesTokenCount"].as_u64().unwrap());
    assert!(prompt > 0 && output > 0, "{usage}");
    assert_eq!(usage["totalTokenCount"].as_u64(), Some(prompt + output));

    let answer = post_google(&model, "generateContent", &follow_up(&first, &response, "{\"key\":\"TE-1\"}")).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    let response = answer.json();
    assert_eq!(response["candidates"][0]["content"]["parts"], json!([{"text": "The task is read"}]));
    assert!(model.mismatches().is_empty(), "{:?}", model.mismatches());
    assert_eq!(
        model.request_paths(),
        ["/v1beta/models/gemini-offline:generateContent", "/v1beta/models/gemini-offline:generateContent"]
    );
    let headers = model.request_headers();
    assert_eq!(headers[0].api_key.as_deref(), Some(API_KEY));
    assert!(!format!("{headers:?}").contains(API_KEY), "the key is never shown");
    model.shutdown().await;
}

#[tokio::test]
async fn a_function_response_without_ids_answers_the_call_of_its_name_and_an_error_response_is_an_error() {
    let script = Script::from_json(
        r#"{"turns": [{"expect": {"last_tool_result_contains": "no such task", "last_tool_result_is_error": true},
                       "reply": {"content": "It is gone"}}]}"#,
    )
    .unwrap();
    let model = start(OfflineModelOptions::script(script)).await.unwrap();
    let mut request = first_request("Reads a task.");
    let contents = request["contents"].as_array_mut().unwrap();
    contents.push(json!({"role": "model", "parts": [{"text": "thinking", "thought": true},
        {"functionCall": {"name": "get_task", "args": {"task_id": "TE-9"}}, "thoughtSignature": "c2ln"}]}));
    contents.push(json!({"role": "user", "parts": [{"functionResponse": {"name": "get_task",
        "response": {"error": "no such task"}}}]}));
    let answer = post_google(&model, "generateContent", &request).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    assert!(model.mismatches().is_empty(), "{:?}", model.mismatches());
    model.shutdown().await;
}

#[tokio::test]
async fn the_planner_answers_on_the_gemini_api_too() {
    let model = start(OfflineModelOptions::planner()).await.unwrap();
    let response = post_google(&model, "generateContent", &first_request("Reads a task.")).await.json();
    let call = &response["candidates"][0]["content"]["parts"][0]["functionCall"];
    assert_eq!(call["name"], "get_task");
    assert_eq!(call["args"]["task_id"], "TE-1");
    model.shutdown().await;
}

/// The response a stream of chunks adds up to: the text joined, the calls in order, the last
/// chunk's finish reason and usage.
fn whole_of_chunks(chunks: &[Value]) -> (Vec<Value>, Value, Value) {
    let mut text = String::new();
    let mut parts = Vec::new();
    for chunk in chunks {
        for part in chunk["candidates"][0]["content"]["parts"].as_array().unwrap() {
            match part.get("text").and_then(Value::as_str) {
                Some(piece) => text.push_str(piece),
                None => parts.push(part.clone()),
            }
        }
    }
    let last = chunks.last().unwrap();
    for chunk in &chunks[..chunks.len() - 1] {
        assert!(chunk["candidates"][0].get("finishReason").is_none() && chunk.get("usageMetadata").is_none());
    }
    let mut all = vec![json!({"text": text})];
    all.extend(parts);
    (all, last["candidates"][0]["finishReason"].clone(), last["usageMetadata"].clone())
}

#[tokio::test]
async fn a_streamed_answer_adds_up_to_the_whole_one_as_events_and_as_an_array() {
    let turn = r#"{"reply": {"content": "Reading the task now", "tool_calls": [{"name": "get_task", "arguments": {"task_id": "TE-1"}}]}}"#;
    let script = Script::from_json(&format!(r#"{{"turns": [{turn}, {turn}, {turn}]}}"#)).unwrap();
    let options = OfflineModelOptions { cache: false, ..OfflineModelOptions::script(script) };
    let model = start(options).await.unwrap();
    let request = first_request("Reads a task.");
    let whole = post_google(&model, "generateContent", &request).await.json();
    let expected = whole["candidates"][0]["content"]["parts"].clone();

    let answer = post_google(&model, "streamGenerateContent?alt=sse", &request).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    assert_eq!(answer.headers["content-type"], "text/event-stream");
    let chunks: Vec<Value> = answer
        .text
        .split("\r\n\r\n")
        .filter(|event| !event.trim().is_empty())
        .map(|event| serde_json::from_str(event.strip_prefix("data: ").expect("a data line")).unwrap())
        .collect();
    assert!(chunks.len() >= 5, "a word per chunk, then the call: {}", answer.text);
    let (mut parts, finish, usage) = whole_of_chunks(&chunks);
    // Only the ids differ: each answer numbers its own.
    assert_eq!(parts[1]["functionCall"]["id"], "call_2_0");
    parts[1]["functionCall"]["id"] = expected[1]["functionCall"]["id"].clone();
    assert_eq!(Value::Array(parts), expected);
    assert_eq!((finish, usage), (whole["candidates"][0]["finishReason"].clone(), whole["usageMetadata"].clone()));

    let array = post_google(&model, "streamGenerateContent", &request).await.json();
    let (parts, _, _) = whole_of_chunks(array.as_array().unwrap());
    assert_eq!(parts[0], expected[0]);
    assert_eq!(
        model.request_paths()[1..],
        ["/v1beta/models/gemini-offline:streamGenerateContent", "/v1beta/models/gemini-offline:streamGenerateContent"]
    );
    model.shutdown().await;
}

#[tokio::test]
async fn tokens_are_counted_and_the_second_request_reads_the_cached_prefix() {
    let turn = r#"{"reply": {"content": "ok"}}"#;
    let script = Script::from_json(&format!(r#"{{"turns": [{turn}, {turn}]}}"#)).unwrap();
    let model = start(OfflineModelOptions::script(script)).await.unwrap();
    let description: String = (0..700).map(|n| format!("rule{n} ")).collect();
    let request = first_request(&description);
    let counted = post_google(&model, "countTokens", &json!({"generateContentRequest": request})).await.json();
    let total = counted["totalTokens"].as_u64().unwrap();
    assert!(total > 1024, "{counted}");

    let first = post_google(&model, "generateContent", &request).await.json();
    assert_eq!(first["usageMetadata"]["promptTokenCount"].as_u64(), Some(total));
    assert!(first["usageMetadata"].get("cachedContentTokenCount").is_none(), "{first}");
    let mut next = request.clone();
    next["contents"].as_array_mut().unwrap().push(first["candidates"][0]["content"].clone());
    next["contents"].as_array_mut().unwrap().push(json!({"role": "user", "parts": [{"text": "And now?"}]}));
    let second = post_google(&model, "generateContent", &next).await.json();
    let cached = second["usageMetadata"]["cachedContentTokenCount"].as_u64().unwrap_or(0);
    assert!(cached >= 1024, "{second}");
    assert!(cached < second["usageMetadata"]["promptTokenCount"].as_u64().unwrap(), "{second}");
    model.shutdown().await;
}

#[tokio::test]
async fn faults_take_the_gemini_apis_error_shape() {
    let faults = Faults { rate_limit_burst: 1, retry_after_secs: 7, overloaded_burst: 1, ..Faults::default() };
    let script = Script::from_json(
        r#"{"turns": [{"fault": {"status": 400, "message": "API key not valid"}},
                      {"fault": {"status": 400, "code": "context_length_exceeded"}}]}"#,
    )
    .unwrap();
    let model = start(OfflineModelOptions { faults, ..OfflineModelOptions::script(script) }).await.unwrap();
    let request = first_request("Reads a task.");
    let limited = post_google(&model, "generateContent", &request).await;
    assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(limited.headers["retry-after"], "7");
    let error = &limited.json()["error"];
    assert_eq!((&error["code"], &error["status"]), (&json!(429), &json!("RESOURCE_EXHAUSTED")));
    assert_eq!(error["details"][0]["retryDelay"], "7s");
    let overloaded = post_google(&model, "streamGenerateContent?alt=sse", &request).await;
    assert_eq!(overloaded.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(overloaded.json()["error"]["status"], "UNAVAILABLE");
    let refused = post_google(&model, "generateContent", &request).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        refused.json(),
        json!({"error": {"code": 400, "message": "API key not valid", "status": "INVALID_ARGUMENT"}})
    );
    let too_long = post_google(&model, "generateContent", &request).await.json();
    assert!(too_long["error"]["message"].as_str().unwrap().contains("exceeds the maximum number of tokens"));
    let unknown = post_google(&model, "embedContent", &request).await;
    assert_eq!(
        (unknown.status, unknown.json()["error"]["status"].clone()),
        (StatusCode::NOT_FOUND, json!("NOT_FOUND"))
    );
    model.shutdown().await;
}

#[tokio::test]
async fn bad_gemini_requests_are_refused_saying_why() {
    let model = start(OfflineModelOptions::planner()).await.unwrap();
    let valid = first_request("Reads a task.");
    let with = |pointer: &str, value: Value| {
        let mut request = valid.clone();
        *request.pointer_mut(pointer).unwrap() = value;
        request
    };
    let cases = [
        (json!({"tools": []}), "contents: contents is not specified"),
        (json!("text"), "the request body is not a generateContent request"),
        (with("/contents/0/role", json!("assistant")), "contents[0].role: Please use a valid role: user, model."),
        (with("/contents/0/parts/0", json!({})), "contents[0].parts[0]: a part needs text"),
        (with("/contents/0/parts/0", json!({"text": 3})), "contents[0].parts[0]: invalid type"),
        (
            with("/contents/0/parts/0", json!({"functionCall": {"name": "get_task", "args": {}}})),
            "contents[0].parts[0]: functionCall belongs in a model content",
        ),
        (
            with("/contents/0/parts/0", json!({"functionResponse": {"name": "get_task", "response": {}}})),
            r#"contents[0].parts[0].functionResponse: functionResponse "get_task" answers no function call"#,
        ),
        (
            with("/tools/0/functionDeclarations/0", json!({"description": "x"})),
            "tools[0].functionDeclarations[0]: missing field `name`",
        ),
    ];
    for (request, expected) in cases {
        let answer = post_google(&model, "generateContent", &request).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.text);
        let error = answer.json()["error"].clone();
        assert_eq!(error["status"], "INVALID_ARGUMENT");
        assert!(error["message"].as_str().unwrap().starts_with(expected), "{expected}: {error}");
    }
    let args = json!({"role": "model", "parts": [{"functionCall": {"name": "get_task", "args": [1]}}]});
    let mut request = valid.clone();
    request["contents"].as_array_mut().unwrap().push(args);
    let answer = post_google(&model, "generateContent", &request).await.json();
    assert_eq!(
        answer["error"]["message"],
        "contents[1].parts[0].functionCall.args: functionCall.args should be an object"
    );
    model.shutdown().await;
}
