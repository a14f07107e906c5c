//! Elicitation from a real MCP server (`tests/interop/elicit_server.py`, the official Python
//! SDK) in both protocol versions picogent speaks to servers: 2025-11-25 (`elicitation/create`
//! during the call) and 2026-07-28 (`input_required`, the call made again with the answers).
//! The question goes to the task's thread mentioning the person who asked; alice answers on
//! the reference board as a person would. A reply that does not fit is asked again once, a
//! decline is honoured, a link is posted and waits for `done`, a -32042 call is made again after
//! it, a timeout cancels and says so, and where nobody can be asked it is cancelled at once.

#[path = "support/agent.rs"]
mod agent_support;
#[path = "support/interop.rs"]
mod interop;

use std::path::PathBuf;
use std::time::Duration;

use agent_support::*;
use picogent::offline_model::script::Script;
use picogent::offline_model::{OfflineModelHandle, OfflineModelOptions};
use picogent::state::RunStatus;
use picogent::tracker::TrackerClient;
use picogent::tracker::model::*;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

fn python() -> PathBuf {
    interop::ensure_installed();
    let path = std::env::var_os("MCP_INTEROP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".interop/venv/bin/python"));
    assert!(path.exists(), "no Python with the MCP SDK at {}: run tests/interop/install.sh", path.display());
    path
}

fn elicit_server(protocol: &str) -> Value {
    json!({
        "command": python(),
        "args": [concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/elicit_server.py")],
        "protocol": protocol,
        "trusted": true,
    })
}

async fn scripted(turns: Value) -> OfflineModelHandle {
    let script = Script::from_json(&json!({ "turns": turns }).to_string()).unwrap();
    picogent::offline_model::start(OfflineModelOptions::script(script)).await.unwrap()
}

fn call(tool: &str) -> Value {
    json!({"tool_calls": [{"name": format!("mcp__elicit__{tool}"), "arguments": {}}]})
}

async fn said(alice: &TrackerClient, task_id: &str) -> Vec<MessageOut> {
    comments(alice, task_id).await.into_iter().filter(|m| m.author_slug == "picogent").collect()
}

/// Waits for the `n`th post of the agent on the task that contains `words`.
async fn nth_post(alice: &TrackerClient, task_id: &str, words: &str, n: usize) -> MessageOut {
    eventually(WAIT, &format!("post {n} with {words:?}"), || async {
        let posts: Vec<_> = said(alice, task_id).await.into_iter().filter(|m| m.content.contains(words)).collect();
        posts.get(n - 1).cloned()
    })
    .await
}

async fn agent_with(
    dir: &std::path::Path,
    board: &picogent::board::BoardHandle,
    model: &OfflineModelHandle,
    protocol: &str,
    extra: Value,
) -> picogent::runtime::AgentHandle {
    // Its tools are not marked read-only, so a run's scope lets them run only when named.
    let mut extra_config = json!({
        "mcp_servers": {"elicit": elicit_server(protocol)},
        "permissions": {"cross_scope_tools": ["mcp__elicit__*"]},
    });
    merge(&mut extra_config, extra);
    let agent = start_agent(agent_config(dir, &board.url(), &model.url(), "picogent", extra_config)).await;
    wait_ready(&agent).await;
    agent
}

async fn a_form_is_asked_in_the_thread_fitted_to_its_schema_and_asked_again_once(protocol: &str) {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = scripted(json!([
        {"expect": {"tools_include": ["mcp__elicit__book_table"]}, "reply": call("book_table")},
        {"expect": {"last_tool_result_contains": "booked a table for 4 at 19:00 for Ada, vegetarian"},
         "reply": {"content": "Booked a table for four at seven."}}
    ]))
    .await;
    let agent = agent_with(dir.path(), &board, &model, protocol, json!({})).await;
    let alice = client(&board, "tok-alice");
    let task = create_assigned(&alice, "Book a table", "Book a table for the team dinner.").await;

    let question = nth_post(&alice, &task.id, "asks, for the call `book_table`", 1).await;
    println!("the question ({protocol}):\n{}", question.content);
    assert!(question.content.starts_with("@alice The MCP server `elicit` asks"), "{}", question.content);
    assert!(question.content.contains("Who is the table for?"), "{}", question.content);
    assert!(
        question.content.contains("- `party_size` (required): a whole number from 1 to 12"),
        "{}",
        question.content
    );
    assert!(question.content.contains("one of `18:00`, `19:00`, `20:00`"), "{}", question.content);
    let session = format!("task:{}", task.id);
    let waiting = eventually(WAIT, "the run awaiting input", || async {
        runs_for(&agent, &session).await.into_iter().find(|run| run.waiting.is_some())
    })
    .await;
    assert_eq!(waiting.waiting.unwrap().kind, picogent::state::WaitKind::Elicitation);

    // Too many people: asked again once, saying why.
    comment(&alice, &task.id, "party_size: 20\nname: Ada\ntime: 19:00").await;
    let again = nth_post(&alice, &task.id, "asks, for the call `book_table`", 2).await;
    assert!(again.content.contains("That did not fit: `party_size`"), "{}", again.content);
    comment(&alice, &task.id, "party_size: 4\nname: Ada\ntime: 19:00\nvegetarian: yes").await;
    nth_post(&alice, &task.id, "Booked a table for four at seven.", 1).await;
    wait_idle(&agent).await;
    assert_eq!(said(&alice, &task.id).await.len(), 3, "two questions and one answer");
    assert_eq!(runs_for(&agent, &session).await[0].status, RunStatus::Completed);
    assert!(model.mismatches().is_empty(), "{:?}", model.mismatches());
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_form_elicitation_2026_07_28() {
    a_form_is_asked_in_the_thread_fitted_to_its_schema_and_asked_again_once("2026-07-28").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_form_elicitation_2025_11_25() {
    a_form_is_asked_in_the_thread_fitted_to_its_schema_and_asked_again_once("2025-11-25").await;
}

async fn a_link_waits_for_done_and_a_decline_is_honoured(protocol: &str) {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = scripted(json!([
        {"reply": call("connect_account")},
        {"expect": {"last_tool_result_contains": "connected"}, "reply": call("connect_account")},
        {"expect": {"last_tool_result_contains": "not connected: decline"},
         "reply": {"content": "Connected once; the second time you declined."}}
    ]))
    .await;
    let agent = agent_with(dir.path(), &board, &model, protocol, json!({})).await;
    let alice = client(&board, "tok-alice");
    let task = create_assigned(&alice, "Connect the account", "Connect my account, twice.").await;
    let link = nth_post(&alice, &task.id, "asks you to open this link", 1).await;
    assert!(link.content.contains("https://auth.example.com/connect?session="), "{}", link.content);
    assert!(link.content.starts_with("@alice"), "{}", link.content);
    comment(&alice, &task.id, "done").await;
    nth_post(&alice, &task.id, "asks you to open this link", 2).await;
    comment(&alice, &task.id, "no").await;
    nth_post(&alice, &task.id, "Connected once; the second time you declined.", 1).await;
    wait_idle(&agent).await;
    assert!(model.mismatches().is_empty(), "{:?}", model.mismatches());
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_elicitation_2026_07_28() {
    a_link_waits_for_done_and_a_decline_is_honoured("2026-07-28").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_elicitation_2025_11_25() {
    a_link_waits_for_done_and_a_decline_is_honoured("2025-11-25").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_needs_a_link_first_is_made_again_once_it_is_done() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = scripted(json!([
        {"reply": call("connect_account_strict")},
        {"expect": {"last_tool_result_contains": "connected", "last_tool_result_is_error": false},
         "reply": {"content": "Connected."}}
    ]))
    .await;
    let agent = agent_with(dir.path(), &board, &model, "2025-11-25", json!({})).await;
    let alice = client(&board, "tok-alice");
    let task = create_assigned(&alice, "Connect the account", "Connect my account.").await;
    nth_post(&alice, &task.id, "asks you to open this link", 1).await;
    comment(&alice, &task.id, "@picogent done").await;
    nth_post(&alice, &task.id, "Connected.", 1).await;
    wait_idle(&agent).await;
    assert!(model.mismatches().is_empty(), "{:?}", model.mismatches());
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_answer_in_time_cancels_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = scripted(json!([
        {"reply": call("book_table")},
        {"expect": {"last_tool_result_contains": "the user cancelled"}, "reply": {"content": "Nobody answered."}}
    ]))
    .await;
    let extra = json!({"elicitation": {"timeout_ms": 1500}});
    let agent = agent_with(dir.path(), &board, &model, "2026-07-28", extra).await;
    let alice = client(&board, "tok-alice");
    let task = create_assigned(&alice, "Book a table", "Book a table.").await;
    let told = nth_post(&alice, &task.id, "No answer within", 1).await;
    assert!(told.content.contains("I cancelled what the MCP server `elicit` asked for"), "{}", told.content);
    nth_post(&alice, &task.id, "Nobody answered.", 1).await;
    wait_idle(&agent).await;
    let metrics =
        reqwest::get(format!("http://{}/metrics", agent.http_addr.unwrap())).await.unwrap().text().await.unwrap();
    assert!(metrics.contains(r#"picogent_waits_total{kind="elicitation",end="timed_out"} 1"#), "{metrics}");
    assert!(model.mismatches().is_empty(), "{:?}", model.mismatches());
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// A host that nobody answers for (`picogent mcp`, `tools call`): the server's question is
/// cancelled at once, in both protocol versions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn where_nobody_can_be_asked_the_question_is_cancelled_at_once() {
    use picogent::mcp::client::ServerStatus;
    use picogent::tools::{ToolContext, ToolSource};
    let dir = tempfile::tempdir().unwrap();
    for protocol in ["2026-07-28", "2025-11-25"] {
        let config: picogent::config::McpServerConfig = serde_json::from_value(elicit_server(protocol)).unwrap();
        let servers = std::collections::BTreeMap::from([("elicit".to_string(), config)]);
        let artifacts = picogent::mcp::results::ArtifactStore::new(dir.path().join("artifacts"), 8192);
        let host = picogent::mcp::host::McpHost::start_servers(servers, artifacts).await;
        assert_eq!(host.servers()[0].status(), ServerStatus::Ready, "{protocol}");
        let started = std::time::Instant::now();
        let mut context = ToolContext::new("picogent");
        context.run_id = Some("run-cli".to_string());
        let result = host.call("mcp__elicit__book_table", json!({}), &context).await;
        let text = serde_json::to_string(&result.content).unwrap();
        assert!(text.contains("the user cancelled"), "{protocol}: {text}");
        assert!(started.elapsed() < Duration::from_secs(10), "{protocol}: at once");
        host.shutdown().await;
    }
}
