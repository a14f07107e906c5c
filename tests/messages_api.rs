//! The Messages API (`llm.api: "anthropic"`) against the offline model endpoint, which answers it
//! at `/v1/messages` and checks each request's shape, with its prompt-cache simulation: the
//! cache breakpoints are where they should be and the prefix is the same bytes on every turn, the
//! first turn's cache write and the later turns' reads are priced at their rates and shown to
//! people (the spend line, the run page, `/metrics`), and overloaded and rate-limited answers
//! are retried after their `retry-after`. And the same loop as on chat completions: fenced
//! arguments streamed as they were written are repaired, a turn budget gives the chat API's
//! notice, a stalled stream meets the same idle timeout, and the key named by `llm.api_key_env`
//! goes out as `x-api-key`.

#[path = "support/agent.rs"]
mod agent_support;

use std::time::Duration;

use agent_support::*;
use picogent::llm::config::Price;
use picogent::notices::thousands;
use picogent::offline_model::script::Script;
use picogent::offline_model::{Faults, OfflineModelOptions};
use picogent::runtime::record::StoredRun;
use picogent::tracker::model::*;
use serde_json::{Value, json};

const PRICE: Price = Price {
    input_per_million: 3.0,
    output_per_million: 15.0,
    cache_read_per_million: Some(0.3),
    cache_write_per_million: Some(3.75),
};

fn messages_api() -> Value {
    json!({"llm": {"api": "anthropic", "max_output_tokens": 1024, "price": PRICE}})
}

/// The request without its `cache_control` markers, which move to the new last block each turn.
fn unmarked(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter().filter(|(k, _)| *k != "cache_control").map(|(k, v)| (k.clone(), unmarked(v))).collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(unmarked).collect()),
        other => other.clone(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_run_marks_the_stable_prefix_and_prices_the_cache_write_and_the_reads() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = picogent::offline_model::start(OfflineModelOptions::planner()).await.unwrap();
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", messages_api())).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");
    let task = create_assigned(
        &alice,
        "Prepare the release notes",
        "Collect what changed.\n- list the changes\n- draft the notes",
    )
    .await;
    wait_status(&alice, &task.id, TaskStatus::InReview).await;
    wait_idle(&agent).await;

    // Every request went to /v1/messages with the API's version header.
    assert!(model.request_paths().iter().all(|path| path == "/v1/messages"), "{:?}", model.request_paths());
    assert!(model.request_headers().iter().all(|h| h.anthropic_version.as_deref() == Some("2023-06-01")));
    let turns: Vec<Value> = model
        .requests()
        .into_iter()
        .filter(|request| {
            request["tools"].as_array().is_some_and(|tools| tools.iter().any(|t| t["name"] == "get_task"))
        })
        .collect();
    assert!(turns.len() >= 4, "the task run took several turns: {}", turns.len());
    for (i, request) in turns.iter().enumerate() {
        let tools = request["tools"].as_array().unwrap();
        assert_eq!(tools.last().unwrap()["cache_control"]["type"], "ephemeral", "turn {i}: the last tool");
        assert!(tools[..tools.len() - 1].iter().all(|t| t.get("cache_control").is_none()), "turn {i}");
        assert_eq!(request["system"].as_array().unwrap().last().unwrap()["cache_control"]["type"], "ephemeral");
        let last_turn = request["messages"].as_array().unwrap().last().unwrap();
        assert_eq!(last_turn["content"].as_array().unwrap().last().unwrap()["cache_control"]["type"], "ephemeral");
        assert_eq!(request.to_string().matches("cache_control").count(), 3, "turn {i}: three breakpoints");
        assert!(request["max_tokens"].as_u64().is_some_and(|n| n > 0), "turn {i}");
    }
    // The prefix is the same on every turn, and each turn's conversation starts with the last's.
    for pair in turns.windows(2) {
        assert_eq!(pair[0]["tools"], pair[1]["tools"]);
        assert_eq!(pair[0]["system"], pair[1]["system"]);
        let (before, after) = (unmarked(&pair[0]["messages"]), unmarked(&pair[1]["messages"]));
        let before = before.as_array().unwrap();
        let after = after.as_array().unwrap();
        // The last user turn may have grown by the results of the calls it answered.
        assert_eq!(before[..before.len() - 1], after[..before.len() - 1]);
    }

    let runs = runs_for(&agent, &format!("task:{}", task.id)).await;
    assert_eq!(runs.len(), 1);
    let record = StoredRun::of(&runs[0]).and_then(|stored| stored.record).unwrap();
    assert!(record.cache_write_tokens > 0, "the first turn wrote the prefix: {record:?}");
    assert!(
        record.cached_tokens * 100 > record.prompt_tokens * 60,
        "most of the prompt was read from the cache: {record:?}"
    );
    let (read, written) = model.cache_counted();
    assert!(read >= record.cached_tokens && written >= record.cache_write_tokens, "{read} {written} {record:?}");
    // Priced at the cache rates: the stored cost is the record's usage at PRICE, below the cost
    // of the same tokens at the input rate.
    let cost = runs[0].cost.expect("a price is set");
    assert!((cost - PRICE.cost(&record.usage())).abs() < 1e-9, "{cost} {record:?}");
    let uncached = Price::new(PRICE.input_per_million, PRICE.output_per_million).cost(&record.usage());
    assert!(cost < uncached * 0.6, "caching cut the cost: {cost} against {uncached}");

    // What people see: the spend line on the task, the run page, /metrics.
    let mine: Vec<MessageOut> =
        comments(&alice, &task.id).await.into_iter().filter(|m| m.author_slug == "picogent").collect();
    let summary = mine.last().expect("a summary on the task");
    let cache = format!(
        "({} cached, {} written to the cache)",
        thousands(record.cached_tokens),
        thousands(record.cache_write_tokens)
    );
    assert!(summary.content.contains(&cache) && summary.content.contains("cost"), "{}", summary.content);
    assert_eq!(mine.len(), 1, "one comment: {mine:#?}");
    let http = agent.http_addr.unwrap();
    let page = reqwest::get(format!("http://{http}/runs/{}", runs[0].id)).await.unwrap().text().await.unwrap();
    assert!(page.contains("id=\"prompt-cache\"") && page.contains("prompt tokens read from the cache"), "{page}");
    let metrics = reqwest::get(format!("http://{http}/metrics")).await.unwrap().text().await.unwrap();
    let cached_line = metrics.lines().find(|l| l.starts_with("picogent_model_tokens_total{kind=\"cached\"}")).unwrap();
    let counted: u64 = cached_line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(counted >= record.cached_tokens, "{metrics}");
    assert!(metrics.contains("picogent_model_tokens_total{kind=\"cache_write\"}"), "{metrics}");

    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// A 429 (`rate_limit_error`) and a 529 (`overloaded_error`), each with `retry-after: 1`: the
/// mention is answered once, after both waits (the retry policy's own delay is 50 ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overloaded_and_rate_limited_answers_are_retried_after_retry_after() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    // The agent's model check at start takes the first fault (it does not retry); the run meets
    // the second 429 and then the 529.
    let faults = Faults { rate_limit_burst: 2, overloaded_burst: 1, retry_after_secs: 1, ..Faults::default() };
    let model =
        picogent::offline_model::start(OfflineModelOptions { faults, ..OfflineModelOptions::planner() }).await.unwrap();
    let mut extra = messages_api();
    merge(
        &mut extra,
        json!({"llm": {"retry": {"max_attempts": 5, "initial_delay_ms": 50, "max_delay_ms": 50, "max_elapsed_ms": 20000, "jitter": false}}}),
    );
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra)).await;
    wait_ready(&agent).await;
    let before = model.request_count();
    let alice = client(&board, "tok-alice");
    let started = std::time::Instant::now();
    let question = say(&alice, &chat_id(&alice).await, "@picogent what is open?").await;
    let replies = eventually(Duration::from_secs(30), "the answer", || async {
        let replies: Vec<MessageOut> =
            thread(&alice, &question.id).await.into_iter().filter(|m| m.author_slug == "picogent").collect();
        (!replies.is_empty()).then_some(replies)
    })
    .await;
    let waited = started.elapsed();
    wait_idle(&agent).await;
    assert_eq!(thread(&alice, &question.id).await.iter().filter(|m| m.author_slug == "picogent").count(), 1);
    assert!(
        !replies[0].content.contains("rate limit") && !replies[0].content.contains("overloaded"),
        "{}",
        replies[0].content
    );
    assert!(model.request_count() - before >= 3, "the two faulted requests were sent again");
    assert!(waited >= Duration::from_secs(2), "each retry waited for its retry-after: {waited:?}");
    let runs = runs_for(&agent, &format!("thread:{}", question.id)).await;
    assert_eq!(runs[0].status, picogent::state::RunStatus::Completed, "{runs:#?}");

    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// Arguments in a Markdown fence, streamed as the model wrote them (`input_json_delta` pieces that
/// join into no JSON): repaired as on chat completions, and the step lands on the task once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_arguments_in_a_stream_are_repaired_and_the_call_lands_once() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let alice = client(&board, "tok-alice");
    let task = alice
        .create_task(
            &CreateTask { project_slug: "team".into(), title: "Release".into(), ..CreateTask::default() },
            None,
        )
        .await
        .unwrap();
    let fenced = format!("```json\n{{\"task_id\": \"{}\", \"title\": \"Draft the release notes\"}}\n```", task.key);
    let script = Script::from_json(
        &json!({"turns": [
            {"expect": {"tools_include": ["add_step"]},
             "reply": {"tool_calls": [{"name": "add_step", "raw_arguments": fenced}]}},
            {"expect": {"last_tool_result_is_error": false, "last_tool_result_contains": "Draft the release notes"},
             "reply": {"content": "Added the step."}}
        ]})
        .to_string(),
    )
    .unwrap();
    let model = picogent::offline_model::start(OfflineModelOptions::script(script)).await.unwrap();
    let mut extra = messages_api();
    merge(&mut extra, json!({"llm": {"stream": true}}));
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra)).await;
    wait_ready(&agent).await;
    let assign = UpdateTask { assignee_slug: Some(Some("picogent".into())), ..UpdateTask::default() };
    alice.update_task(&task.id, &assign).await.unwrap();
    let session = format!("task:{}", task.id);
    let run = eventually(Duration::from_secs(30), "the run to end", || async {
        runs_for(&agent, &session).await.into_iter().find(|run| run.finished_at.is_some())
    })
    .await;
    wait_idle(&agent).await;
    assert_eq!(model.mismatches(), Vec::<String>::new());
    assert_eq!(run.status, picogent::state::RunStatus::Completed, "{run:#?}");
    let steps = alice.list_steps(&task.id).await.unwrap();
    let titles: Vec<&str> = steps.iter().map(|step| step.title.as_str()).collect();
    assert_eq!(titles, ["Draft the release notes"], "the repaired call ran once");
    // Streamed on the Messages API, and the record keeps what the model wrote.
    let turns: Vec<Value> =
        model.requests().into_iter().filter(|r| r["tools"].as_array().is_some_and(|t| t.len() > 1)).collect();
    assert!(turns.len() == 2 && turns.iter().all(|r| r["stream"] == true), "{turns:#?}");
    assert!(model.request_paths().iter().all(|path| path == "/v1/messages"));
    let calls = run.record.as_ref().unwrap()["record"]["calls"].clone();
    assert_eq!(calls[0]["outcome"], "ok", "{calls:#}");
    assert!(calls.to_string().contains("```json"), "{calls:#}");
    let summary = comments(&alice, &task.id).await.into_iter().find(|m| m.author_slug == "picogent").unwrap();
    assert!(summary.content.starts_with("Added the step."), "{}", summary.content);
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// A model that never stops calling tools meets `limits.max_turns`: the one notice on the task is
/// word for word the one the same run gets on chat completions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_budget_gives_the_same_notice_on_both_apis() {
    let mut notices = Vec::new();
    for api in ["openai", "anthropic"] {
        let dir = tempfile::tempdir().unwrap();
        let board = start_board(dir.path()).await;
        let faults = Faults { endless_tool_calls: true, ..Faults::default() };
        let model = picogent::offline_model::start(OfflineModelOptions { faults, ..OfflineModelOptions::planner() })
            .await
            .unwrap();
        let extra = json!({"llm": {"api": api}, "limits": {"max_turns": 3, "max_tool_calls": 1000}});
        let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra)).await;
        wait_ready(&agent).await;
        let alice = client(&board, "tok-alice");
        let task = create_assigned(&alice, "Never done", "- first\n- second").await;
        let notice = eventually(Duration::from_secs(30), "the notice on the task", || async {
            let mine: Vec<MessageOut> =
                comments(&alice, &task.id).await.into_iter().filter(|m| m.author_slug == "picogent").collect();
            mine.first().map(|m| m.content.clone())
        })
        .await;
        wait_idle(&agent).await;
        let runs = runs_for(&agent, &format!("task:{}", task.id)).await;
        assert_eq!(runs.len(), 1, "{api}: {runs:#?}");
        assert_eq!(runs[0].record.as_ref().unwrap()["record"]["outcome"], "budget_turns", "{api}: {:#?}", runs[0]);
        assert_eq!(runs[0].turns, 3, "{api}");
        assert!(model.request_paths().iter().any(|path| path.ends_with(if api == "openai" {
            "/chat/completions"
        } else {
            "/messages"
        })));
        assert_eq!(comments(&alice, &task.id).await.iter().filter(|m| m.author_slug == "picogent").count(), 1);
        notices.push(notice);
        agent.shutdown().await.unwrap();
        model.shutdown().await;
        board.shutdown().await.unwrap();
    }
    assert!(
        notices[0].contains("after 3 model turns") && notices[0].contains("`limits.max_turns`, now 3"),
        "{notices:?}"
    );
    assert_eq!(notices[0], notices[1], "the same notice on both APIs");
}

/// A server that sends the headers and then nothing: the streamed request is given up after
/// `llm.idle_timeout_ms` on the Messages API as on chat completions, not after `timeout_ms`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_stream_meets_the_same_idle_timeout_on_both_apis() {
    use picogent::config::{Api, LlmConfig};
    use picogent::llm::{ChatRequest, LlmError, Message};
    use picogent::retry::RetryConfig;
    // The delay is spread between a stream's events: seconds before the first one.
    let options = OfflineModelOptions { delay: Duration::from_secs(60), ..OfflineModelOptions::planner() };
    let model = picogent::offline_model::start(options).await.unwrap();
    let messages = [Message::system("be brief"), Message::user("hello")];
    for api in [Api::Openai, Api::Anthropic] {
        let config = LlmConfig {
            api,
            stream: true,
            idle_timeout_ms: 400,
            timeout_ms: 60_000,
            retry: RetryConfig { max_attempts: 1, ..RetryConfig::default() },
            ..LlmConfig::new(model.url(), "offline-planner")
        };
        let chat = picogent::llm::chat_model(&config, None).unwrap();
        let started = std::time::Instant::now();
        let answer = chat.complete(&ChatRequest { messages: &messages, tools: &[], max_output_tokens: None }).await;
        let waited = started.elapsed();
        assert!(matches!(answer, Err(LlmError::Timeout { timeout_ms: 400 })), "{api:?}: {answer:?}");
        assert!(waited >= Duration::from_millis(400) && waited < Duration::from_secs(10), "{api:?}: {waited:?}");
    }
    let paths = model.request_paths();
    assert_eq!(paths, ["/v1/chat/completions", "/v1/messages"], "each request reached the server");
    // Not shut down: a graceful shutdown would wait for the stalled streams' next events.
    drop(model);
}

/// `picogent run` reads the key from the variable `llm.api_key_env` names and sends it as
/// `x-api-key` with every request (the start-up model check's and the run's), never as a bearer
/// token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_named_by_api_key_env_goes_out_as_x_api_key() {
    const KEY_ENV: &str = "PICOGENT_TEST_MESSAGES_API_KEY";
    const KEY: &str = "sk-ant-offline-0123456789";
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = picogent::offline_model::start(OfflineModelOptions::planner()).await.unwrap();
    let mut extra = messages_api();
    merge(&mut extra, json!({"llm": {"api_key_env": KEY_ENV}}));
    let config = agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra);
    let path = write_config(dir.path(), &config);
    let process = std::process::Command::new(env!("CARGO_BIN_EXE_picogent"))
        .args(["run", "--config"])
        .arg(&path)
        .env("TEAMBOARD_TOKEN", "tok-picogent")
        .env(KEY_ENV, KEY)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let process = std::sync::Mutex::new(process);
    let alice = client(&board, "tok-alice");
    let task = create_assigned(&alice, "With a key", "- one\n- two").await;
    eventually(Duration::from_secs(30), "the task worked", || async {
        let exited = process.lock().unwrap().try_wait().unwrap();
        assert!(exited.is_none(), "picogent run exited with {exited:?}");
        (alice.get_task(&task.id).await.ok()?.status == TaskStatus::InReview).then_some(())
    })
    .await;
    let mut process = process.into_inner().unwrap();
    let stopped = std::process::Command::new("kill").arg("-TERM").arg(process.id().to_string()).status().unwrap();
    assert!(stopped.success());
    let status = tokio::task::spawn_blocking(move || process.wait().unwrap()).await.unwrap();
    assert!(status.success(), "{status:?}");
    let headers = model.request_headers();
    assert!(headers.len() >= 3, "the model check and the run's turns: {headers:?}");
    for header in &headers {
        assert_eq!(header.path, "/v1/messages");
        assert_eq!(header.api_key.as_deref(), Some(KEY), "{header:?}");
        assert_eq!(header.anthropic_version.as_deref(), Some("2023-06-01"));
    }
    model.shutdown().await;
    board.shutdown().await.unwrap();
}
