//! The agent loop over real HTTP: the offline model endpoint on 127.0.0.1:0 (planner or a
//! replayed script from `fixtures/llm/`), the OpenAI adapter (and the Messages API's, where a
//! behaviour is held to both), and the real tool registry over the reference board on
//! 127.0.0.1:0.

#[path = "support/llm_world.rs"]
mod llm_world;

use std::path::Path;
use std::time::Duration;

use std::sync::Arc;

use llm_world::{Gate, World};
use picogent::agent::{self, RunInput, RunOutcome, RunOutput, RunSetup, ToolCallOutcome};
use picogent::config::{Api, Limits, LlmConfig};
use picogent::llm::{ChatModel, Message};
use picogent::offline_model::script::Script;
use picogent::offline_model::{self, Faults, OfflineModelHandle, OfflineModelOptions};
use picogent::retry::RetryConfig;
use picogent::tools::{ToolContext, ToolSource};
use tokio_util::sync::CancellationToken;

fn llm_config(url: &str) -> LlmConfig {
    LlmConfig {
        temperature: Some(0.0),
        max_output_tokens: Some(2_000),
        timeout_ms: 10_000,
        parallel_tool_calls: Some(true),
        retry: RetryConfig {
            max_attempts: 5,
            initial_delay_ms: 10,
            max_delay_ms: 50,
            max_elapsed_ms: 10_000,
            jitter: false,
        },
        ..LlmConfig::new(url, "offline-planner")
    }
}

fn limits() -> Limits {
    Limits { run_timeout_ms: 60_000, ..Limits::default() }
}

fn script(name: &str) -> Script {
    Script::from_file(&Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/llm").join(name)).unwrap()
}

const SYSTEM: &str = "You are picogent, a team agent working on the Team Board.";

/// A started model endpoint, the client pointed at it, and the tracker world.
struct Harness {
    model: OfflineModelHandle,
    chat: Arc<dyn ChatModel>,
    world: World,
}

impl Harness {
    /// On chat completions, answers read whole.
    async fn start(options: OfflineModelOptions) -> Harness {
        Harness::start_on(options, Api::Openai, false).await
    }

    /// On `api`, answers streamed or read whole.
    async fn start_on(options: OfflineModelOptions, api: Api, stream: bool) -> Harness {
        let model = offline_model::start(options).await.unwrap();
        let config = LlmConfig { api, stream, ..llm_config(&model.url()) };
        let chat = picogent::llm::chat_model(&config, None).unwrap();
        Harness { model, chat, world: World::start().await }
    }

    async fn run(&self, limits: Limits, prompt: &str) -> RunOutput {
        self.run_with(limits, prompt, CancellationToken::new(), None).await
    }

    async fn run_with(
        &self,
        limits: Limits,
        prompt: &str,
        cancel: CancellationToken,
        steering: Option<tokio::sync::mpsc::UnboundedReceiver<String>>,
    ) -> RunOutput {
        self.run_over(self.world.tools(), self.world.tool_names(), limits, prompt, cancel, steering).await
    }

    async fn run_over(
        &self,
        tools: Arc<dyn ToolSource>,
        offered_tools: Vec<String>,
        limits: Limits,
        prompt: &str,
        cancel: CancellationToken,
        steering: Option<tokio::sync::mpsc::UnboundedReceiver<String>>,
    ) -> RunOutput {
        let setup = RunSetup {
            model: self.chat.as_ref(),
            tools: tools.as_ref(),
            offered_tools,
            limits,
            tool_context: ToolContext::new(self.world.agent_slug()),
            cancel,
            steering,
            window: agent::ModelWindow::default(),
            checkpoint: None,
            expects_tool_calls: false,
        };
        let input = RunInput { system_prompt: SYSTEM.to_string(), history: vec![], prompt: prompt.to_string() };
        let run = agent::run(setup, input);
        // The runtime spawns runs on the multi-threaded runtime: the future must be `Send`.
        fn assert_send<F: Send>(_: &F) {}
        assert_send(&run);
        run.await
    }

    async fn finish(self) {
        assert_eq!(self.model.mismatches(), Vec::<String>::new(), "the script saw unexpected requests");
        self.model.shutdown().await;
        self.world.shutdown().await;
    }
}

fn task_prompt(key: &str) -> String {
    format!("You were assigned a task. Work it and hand it over for review.\nTask: {key}\n")
}

#[tokio::test]
async fn planner_works_a_task_end_to_end() {
    let harness = Harness::start(OfflineModelOptions::planner()).await;
    let key = harness.world.create_task("Ship it.\n- write the code\n- test it\n* document it").await;
    let output = harness.run(limits(), &task_prompt(&key)).await;
    let record = &output.record;
    assert_eq!(record.outcome, RunOutcome::Completed, "{record:#?}");
    assert!(record.final_message.contains("in_review"), "{}", record.final_message);

    assert_eq!(harness.world.task(&key).await.status.as_str(), "in_review");
    let steps = harness.world.steps(&key).await;
    let titles: Vec<&str> = steps.iter().map(|s| s.title.as_str()).collect();
    assert_eq!(titles, ["write the code", "test it", "document it"]);
    assert!(steps.iter().all(|s| s.done), "every step ticked: {steps:?}");
    // The summary is the run's final answer; the runtime posts it on the task (tests/runtime.rs).
    assert!(record.final_message.contains("offline planner"), "{}", record.final_message);
    assert!(harness.world.comments(&key).await.is_empty(), "the loop itself posts no summary");

    // get_task, 3 add_step, update_task, 3 complete_step, update_task; then the summary.
    assert_eq!(record.turns, 6);
    assert_eq!(record.tool_calls, 9);
    let counts = |name: &str| record.tool_calls_by_name[name];
    assert_eq!(counts("add_step").ok, 3);
    assert_eq!(counts("complete_step").ok, 3);
    assert_eq!(counts("update_task").ok, 2);
    assert!(!record.tool_calls_by_name.contains_key("send_message"));
    assert_eq!(counts("get_task").ok, 1);
    assert!(record.prompt_tokens > 0 && record.completion_tokens > 0);
    assert!(!record.tokens_estimated);

    // The conversation comes back whole, ready to resume: prompt, 6 assistant turns, 9 results.
    assert_eq!(output.conversation.len(), 1 + 6 + 9);
    assert!(matches!(output.conversation[0], Message::User { .. }));

    // Prompt caching: system prompt and tool list byte-identical on every turn.
    let requests = harness.model.requests();
    assert_eq!(requests.len(), 6);
    let prefix = |request: &serde_json::Value| (request["messages"][0].to_string(), request["tools"].to_string());
    for request in &requests[1..] {
        assert_eq!(prefix(request), prefix(&requests[0]));
    }
    harness.finish().await;
}

#[tokio::test]
async fn token_counts_match_the_server_with_and_without_usage() {
    for omit_usage in [false, true] {
        let harness = Harness::start(OfflineModelOptions { omit_usage, ..OfflineModelOptions::planner() }).await;
        let key = harness.world.create_task("").await;
        let record = harness.run(limits(), &task_prompt(&key)).await.record;
        assert_eq!(record.outcome, RunOutcome::Completed, "{record:#?}");
        assert_eq!(record.tokens_estimated, omit_usage);
        // With `usage`, the record adds up what the server reported; without it, the loop counts
        // with o200k by the rule the server uses, so the sums agree exactly.
        assert_eq!(
            (record.prompt_tokens, record.completion_tokens),
            harness.model.tokens_counted(),
            "omit_usage {omit_usage}"
        );
        assert_eq!(record.turns as usize, harness.model.request_count());
        assert!(record.model_time_ms + record.tool_time_ms <= record.wall_time_ms + 1, "{record:#?}");
        harness.finish().await;
    }
}

#[tokio::test]
async fn parallel_read_only_calls_run_concurrently() {
    // Chat completions read whole; the Messages API (two `tool_use` blocks in one answer)
    // streamed and read whole.
    for (api, stream) in [(Api::Openai, false), (Api::Anthropic, true), (Api::Anthropic, false)] {
        let options = OfflineModelOptions::script(script("parallel_reads.json"));
        let harness = Harness::start_on(options, api, stream).await;
        let key = harness.world.create_task("").await;
        assert_eq!(key, "TE-1", "the fixture names TE-1");
        // The gate lets no call through until both have arrived: run one after the other, the
        // first would be refused by the gate and the script's expectation of no error would fail.
        let gate: Arc<dyn ToolSource> = Arc::new(Gate::new(harness.world.tools(), 2));
        let output = harness
            .run_over(gate, harness.world.tool_names(), limits(), &task_prompt(&key), CancellationToken::new(), None)
            .await;
        let record = output.record;
        assert_eq!(record.outcome, RunOutcome::Completed, "{api:?} {stream}: {record:#?}");
        let [first, second] = &record.calls[..] else { panic!("two calls expected: {:?}", record.calls) };
        assert_eq!((first.name.as_str(), second.name.as_str()), ("get_task", "list_steps"));
        assert_eq!((first.outcome, second.outcome), (ToolCallOutcome::Ok, ToolCallOutcome::Ok));
        assert!(
            first.started_us < second.ended_us && second.started_us < first.ended_us,
            "{api:?} {stream}: the recorded intervals do not overlap: {first:?} {second:?}"
        );
        let path = if api == Api::Openai { "/v1/chat/completions" } else { "/v1/messages" };
        assert!(harness.model.request_paths().iter().all(|p| p == path), "{:?}", harness.model.request_paths());
        harness.finish().await;
    }
}

/// A tool call in an answer cut off by the output limit (`stop_reason: "max_tokens"` on the
/// Messages API) is never run: the model is told so by rule, as on chat completions.
#[tokio::test]
async fn a_cut_off_call_is_refused_by_rule_on_both_apis() {
    for (api, stream) in [(Api::Openai, false), (Api::Anthropic, true), (Api::Anthropic, false)] {
        let turns = serde_json::json!({"turns": [
            {"reply": {"finish_reason": "length", "tool_calls": [
                {"name": "add_step", "raw_arguments": "{\"task_id\": \"TE-1\", \"title\": \"Half a ti"}]}},
            {"expect": {"last_tool_result_is_error": true, "last_tool_result_contains": "cut off by the output limit"},
             "reply": {"content": "I will write a shorter step."}}
        ]});
        let script = Script::from_json(&turns.to_string()).unwrap();
        let harness = Harness::start_on(OfflineModelOptions::script(script), api, stream).await;
        let key = harness.world.create_task("").await;
        let record = harness.run(limits(), &task_prompt(&key)).await.record;
        assert_eq!(record.outcome, RunOutcome::Completed, "{api:?} {stream}: {record:#?}");
        assert_eq!(record.calls.len(), 1, "{record:#?}");
        assert_eq!(record.calls[0].outcome, ToolCallOutcome::Refused, "{api:?} {stream}");
        assert!(harness.world.steps(&key).await.is_empty(), "{api:?} {stream}: the cut-off call never ran");
        if api == Api::Anthropic {
            let first = &harness.model.requests()[0];
            assert!(first["max_tokens"].as_u64().is_some(), "{first}");
        }
        harness.finish().await;
    }
}

#[tokio::test]
async fn planner_answers_a_mention_in_its_thread() {
    let harness = Harness::start(OfflineModelOptions::planner()).await;
    let message = harness.world.post_in_chat("@picogent what is on the board today?").await;
    let prompt = format!(
        "Message id: {id}\nThread id: {id}\n@alice wrote to you (@picogent):\n\n{content}\n",
        id = message.id,
        content = message.content
    );
    let offered: Vec<String> = picogent::tools::CHAT_REPLY_TOOLS.iter().map(|n| n.to_string()).collect();
    let output =
        harness.run_over(harness.world.tools(), offered, limits(), &prompt, CancellationToken::new(), None).await;
    assert_eq!(output.record.outcome, RunOutcome::Completed, "{:#?}", output.record);
    assert_eq!(output.record.tool_calls_by_name["reply_message"].ok, 1);
    let thread = harness.world.thread(&message.id).await;
    assert_eq!(thread.len(), 2, "{thread:?}");
    assert_eq!(thread[1].author_slug, "picogent");
    assert_eq!(thread[1].parent_id.as_deref(), Some(message.id.as_str()));
    assert!(thread[1].content.contains("offline planner"));
    harness.finish().await;
}

#[tokio::test]
async fn scripted_misbehaviour_is_answered_with_errors_the_model_reads() {
    // (fixture, tool, outcome of the first call, calls of that tool in all)
    let cases = [
        ("tool_error_recovery.json", "get_task", ToolCallOutcome::Error, 2),
        ("malformed_arguments.json", "get_task", ToolCallOutcome::InvalidArguments, 2),
        ("unknown_tool.json", "get_taks", ToolCallOutcome::UnknownTool, 1),
        ("not_offered.json", "create_task", ToolCallOutcome::UnknownTool, 1),
    ];
    for (fixture, tool, first_outcome, calls) in cases {
        let harness = Harness::start(OfflineModelOptions::script(script(fixture))).await;
        let key = harness.world.create_task("").await;
        let record = harness.run(limits(), &task_prompt(&key)).await.record;
        assert_eq!(record.outcome, RunOutcome::Completed, "{fixture}: {record:#?}");
        assert_eq!(record.calls[0].outcome, first_outcome, "{fixture}");
        assert_eq!(record.calls.iter().filter(|c| c.name == tool).count(), calls, "{fixture}");
        assert_eq!(harness.model.script_position(), record.turns as usize, "{fixture}");
        harness.finish().await;
    }
}

#[tokio::test]
async fn refusals_and_empty_answers_are_recorded() {
    for (fixture, outcome) in [("refusal.json", RunOutcome::Refusal), ("empty_answer.json", RunOutcome::EmptyAnswer)] {
        let harness = Harness::start(OfflineModelOptions::script(script(fixture))).await;
        let output = harness.run(limits(), "Task: TE-1").await;
        let record = &output.record;
        assert_eq!(record.outcome, outcome, "{fixture}: {record:#?}");
        assert_eq!(record.turns, 1);
        assert!(record.final_message.starts_with("I could not finish"), "{}", record.final_message);
        if outcome == RunOutcome::Refusal {
            assert!(record.detail.as_deref().unwrap_or_default().contains("I cannot help"), "{record:#?}");
        }
        harness.finish().await;
    }
}

#[tokio::test]
async fn the_endpoint_lists_its_model() {
    let model = offline_model::start(OfflineModelOptions::planner()).await.unwrap();
    let listed: serde_json::Value =
        reqwest::get(format!("{}/models", model.url())).await.unwrap().json().await.unwrap();
    assert_eq!(listed["data"][0]["id"], offline_model::MODEL_NAME);
    model.shutdown().await;
}

#[tokio::test]
async fn rate_limit_waits_for_retry_after_then_succeeds() {
    let harness = Harness::start(OfflineModelOptions::script(script("rate_limited.json"))).await;
    let started = std::time::Instant::now();
    let record = harness.run(limits(), &task_prompt("TE-1")).await.record;
    assert_eq!(record.outcome, RunOutcome::Completed, "{record:#?}");
    assert_eq!(harness.model.request_count(), 2);
    assert_eq!(record.turns, 1);
    // The policy's own backoff is 10 ms; only honouring `Retry-After: 1` waits a second.
    assert!(started.elapsed() >= Duration::from_secs(1), "retried after {:?}", started.elapsed());
    harness.finish().await;
}

#[tokio::test]
async fn a_burst_of_server_errors_is_retried() {
    let faults = Faults { server_error_burst: 3, ..Faults::default() };
    let harness = Harness::start(OfflineModelOptions { faults, ..OfflineModelOptions::planner() }).await;
    let key = harness.world.create_task("").await;
    let record = harness.run(limits(), &task_prompt(&key)).await.record;
    assert_eq!(record.outcome, RunOutcome::Completed, "{record:#?}");
    assert_eq!(harness.model.request_count() as u32, record.turns + 3);
    harness.finish().await;
}

#[tokio::test]
async fn errors_past_the_retry_policy_end_the_run_as_model_error() {
    let faults = Faults { server_error_burst: 10, ..Faults::default() };
    let harness = Harness::start(OfflineModelOptions { faults, ..OfflineModelOptions::planner() }).await;
    let record = harness.run(limits(), &task_prompt("TE-1")).await.record;
    assert_eq!(record.outcome, RunOutcome::ModelError);
    assert_eq!(harness.model.request_count(), 5, "max_attempts");
    assert!(record.detail.as_deref().unwrap_or_default().contains("500"), "{record:#?}");
    harness.finish().await;
}

#[tokio::test]
async fn truncated_bodies_and_invalid_arguments_are_survived() {
    let faults = Faults { truncated_body_burst: 2, invalid_arguments: 1, ..Faults::default() };
    let harness = Harness::start(OfflineModelOptions { faults, ..OfflineModelOptions::planner() }).await;
    let key = harness.world.create_task("").await;
    let record = harness.run(limits(), &task_prompt(&key)).await.record;
    assert_eq!(record.outcome, RunOutcome::Completed, "{record:#?}");
    assert_eq!(record.calls[0].outcome, ToolCallOutcome::InvalidArguments);
    assert_eq!(record.tool_calls_by_name["get_task"].ok, 1);
    assert_eq!(harness.world.task(&key).await.status.as_str(), "in_review");
    harness.finish().await;
}

#[tokio::test]
async fn context_length_error_drops_old_tool_results_and_retries_once() {
    let harness = Harness::start(OfflineModelOptions::script(script("context_length.json"))).await;
    let key = harness.world.create_task("").await;
    let output = harness.run(limits(), &task_prompt(&key)).await;
    let record = &output.record;
    assert_eq!(record.outcome, RunOutcome::Completed, "{record:#?}");
    assert_eq!(record.context_trims.len(), 1);
    assert!(record.context_trims[0].contains("dropped 1 old tool results"), "{:?}", record.context_trims);
    assert_eq!(harness.model.request_count(), 5);
    assert_eq!(record.turns, 4);
    // The original request survives the trim.
    assert!(output.conversation[0].text().contains(&key));
    harness.finish().await;
}

#[tokio::test]
async fn turn_budget_stops_exactly() {
    let faults = Faults { endless_tool_calls: true, ..Faults::default() };
    let harness = Harness::start(OfflineModelOptions { faults, ..OfflineModelOptions::planner() }).await;
    let key = harness.world.create_task("").await;
    let record = harness.run(Limits { max_turns: 3, ..limits() }, &task_prompt(&key)).await.record;
    assert_eq!(record.outcome, RunOutcome::BudgetTurns);
    assert_eq!(record.turns, 3);
    assert_eq!(harness.model.request_count(), 3);
    assert_eq!(record.tool_calls, 6);
    assert!(record.final_message.contains("3 model turns"), "{}", record.final_message);
    harness.finish().await;
}

#[tokio::test]
async fn tool_call_budget_stops_exactly() {
    let faults = Faults { endless_tool_calls: true, ..Faults::default() };
    let harness = Harness::start(OfflineModelOptions { faults, ..OfflineModelOptions::planner() }).await;
    let key = harness.world.create_task("").await;
    // Every endless call is the same `get_task`: the repetition guard stays out of the way here.
    let output =
        harness.run(Limits { max_tool_calls: 5, max_identical_calls: 100, ..limits() }, &task_prompt(&key)).await;
    let record = &output.record;
    assert_eq!(record.outcome, RunOutcome::BudgetToolCalls);
    assert_eq!(record.tool_calls, 5);
    assert_eq!(record.turns, 3);
    assert_eq!(record.tool_calls_by_name["get_task"].ok, 5);
    assert_eq!(record.tool_calls_by_name["get_task"].not_run, 1);
    // The call past the budget still has its answer in the conversation.
    let last = output.conversation.last().unwrap();
    assert!(matches!(last, Message::Tool { is_error: true, .. }) && last.text().contains("budget"), "{last:?}");
    harness.finish().await;
}

#[tokio::test]
async fn token_budget_stops_before_it_is_overshot() {
    let full = Harness::start(OfflineModelOptions::planner()).await;
    let key = full.world.create_task("").await;
    let needed = full.run(limits(), &task_prompt(&key)).await.record.total_tokens();
    full.finish().await;

    let harness = Harness::start(OfflineModelOptions::planner()).await;
    let key = harness.world.create_task("").await;
    let budget = needed / 2;
    let record = harness.run(Limits { max_tokens_per_run: budget, ..limits() }, &task_prompt(&key)).await.record;
    assert_eq!(record.outcome, RunOutcome::BudgetTokens, "{record:#?}");
    assert!(record.total_tokens() <= budget, "{} > {budget}", record.total_tokens());
    assert!(record.turns >= 1);
    // Every request asked for no more output than the budget had left.
    for request in harness.model.requests() {
        assert!(request["max_completion_tokens"].as_u64().unwrap() <= budget);
    }
    harness.finish().await;
}

#[tokio::test]
async fn deadline_stops_a_slow_run() {
    let harness =
        Harness::start(OfflineModelOptions { delay: Duration::from_secs(2), ..OfflineModelOptions::planner() }).await;
    let record = harness.run(Limits { run_timeout_ms: 200, ..limits() }, &task_prompt("TE-1")).await.record;
    assert_eq!(record.outcome, RunOutcome::Deadline);
    assert_eq!(record.turns, 0);
    assert!(record.final_message.contains("ran out of time"), "{}", record.final_message);
    harness.finish().await;
}

#[tokio::test]
async fn cancellation_stops_a_run_mid_way() {
    let harness =
        Harness::start(OfflineModelOptions { delay: Duration::from_millis(300), ..OfflineModelOptions::planner() })
            .await;
    let key = harness.world.create_task("").await;
    let cancel = CancellationToken::new();
    let prompt = task_prompt(&key);
    let run = harness.run_with(limits(), &prompt, cancel.clone(), None);
    let watch = async {
        // The second model request is in flight (held by the delay) when we cancel.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while harness.model.request_count() < 2 {
            assert!(tokio::time::Instant::now() < deadline, "the run never sent a second request");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        cancel.cancel();
    };
    let (output, ()) = tokio::join!(run, watch);
    assert_eq!(output.record.outcome, RunOutcome::Cancelled);
    assert_eq!(output.record.turns, 1);
    assert_eq!(output.record.tool_calls, 1);
    harness.finish().await;
}

#[tokio::test]
async fn steering_inputs_join_the_conversation() {
    let harness = Harness::start(OfflineModelOptions::planner()).await;
    let key = harness.world.create_task("").await;
    let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
    sender.send("Also: keep the summary short.".to_string()).unwrap();
    let output = harness.run_with(limits(), &task_prompt(&key), CancellationToken::new(), Some(receiver)).await;
    assert_eq!(output.record.outcome, RunOutcome::Completed);
    assert_eq!(output.record.steering_inputs, 1);
    assert!(output.conversation.iter().any(|m| m.text() == "Also: keep the summary short."));
    harness.finish().await;
}
