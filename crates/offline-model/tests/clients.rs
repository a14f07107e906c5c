//! The project's own model clients (`picogent_llm::chat_model`, both APIs, whole and streamed)
//! against the offline endpoint: a run's turns are answered, the server's prompt count is the
//! client's estimate, and the simulated cache's reads and writes reach the client's `Usage`.

use std::sync::Arc;

use serde_json::json;

use picogent_llm::config::LlmConfig;
use picogent_llm::{ChatRequest, FinishReason, Message, ToolSpec, estimate_prompt_tokens};
use picogent_offline_model::{OfflineModelOptions, start};

fn tools() -> Vec<ToolSpec> {
    // Long enough that the prompt passes the cache's minimum.
    let description: String = (0..700).map(|n| format!("rule{n} ")).collect();
    let schema = json!({"type": "object", "properties": {"task_id": {"type": "string"}}, "required": ["task_id"]});
    vec![ToolSpec {
        name: "get_task".into(),
        description,
        parameters: Arc::new(schema.as_object().cloned().unwrap_or_default()),
    }]
}

/// Two turns of a task run: the planner calls `get_task`, then (with the result) the next tool.
async fn two_turns(api: &str, stream: bool) {
    let model = start(OfflineModelOptions::planner()).await.unwrap();
    let config: LlmConfig =
        serde_json::from_value(json!({"api": api, "base_url": model.url(), "model": "offline", "stream": stream}))
            .unwrap();
    let client = picogent_llm::chat_model(&config, None).unwrap();
    let tools = tools();
    let mut messages = vec![Message::system("You work tasks."), Message::user("You were assigned a task.\nTask: TE-1")];
    let request = ChatRequest { messages: &messages, tools: &tools, max_output_tokens: Some(500) };
    let first = client.complete(&request).await.unwrap();
    assert_eq!(first.finish_reason, FinishReason::ToolCalls, "{api} stream={stream}: {first:?}");
    assert_eq!(first.tool_calls[0].name, "get_task");
    assert_eq!(first.usage.prompt_tokens, estimate_prompt_tokens(&messages, &tools), "{api} stream={stream}");
    assert_eq!(first.usage.cached_tokens, 0);

    let call = first.tool_calls[0].clone();
    messages.push(Message::Assistant { content: first.content.clone(), tool_calls: vec![call.clone()], refusal: None });
    messages.push(Message::Tool {
        tool_call_id: call.id,
        name: call.name,
        content: json!({"id": "uuid-1", "key": "TE-1", "description": "- one"}).to_string(),
        is_error: false,
    });
    let request = ChatRequest { messages: &messages, tools: &tools, max_output_tokens: Some(500) };
    let second = client.complete(&request).await.unwrap();
    assert_eq!(second.usage.prompt_tokens, estimate_prompt_tokens(&messages, &tools), "{api} stream={stream}");
    assert!(second.usage.cached_tokens >= 1024, "{api} stream={stream}: {:?}", second.usage);
    if api == "anthropic" {
        assert_eq!(second.usage.cached_tokens, first.usage.cache_write_tokens, "the next turn reads what was written");
        assert!(second.usage.cache_write_tokens > 0, "{:?}", second.usage);
        assert!(model.request_headers().iter().all(|headers| headers.anthropic_version.is_some()));
    }
    let (read, written) = model.cache_counted();
    assert_eq!(read, second.usage.cached_tokens);
    assert_eq!(written, first.usage.cache_write_tokens + second.usage.cache_write_tokens);
    model.shutdown().await;
}

#[tokio::test]
async fn the_messages_client_runs_against_the_endpoint() {
    two_turns("anthropic", false).await;
    two_turns("anthropic", true).await;
}

#[tokio::test]
async fn the_chat_completions_client_runs_against_the_endpoint() {
    two_turns("openai", false).await;
    two_turns("openai", true).await;
}
