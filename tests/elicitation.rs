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

/// A person answers a form as people do, in a sentence: the model fits it to the form in a small
/// request of its own (the offline model's script plays that answer), picogent says what it
/// understood before sending it, and the server gets typed, checked values.
async fn a_plain_answer_is_fitted_by_the_model_and_said_before_it_is_sent(protocol: &str) {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = scripted(json!([
        {"expect": {"tools_include": ["mcp__elicit__deploy"]}, "reply": call("deploy")},
        {"expect": {"messages_contain": "version 1.4.2, yes deploy now"},
         "reply": {"content": "```json\n{\"version\": \"1.4.2\", \"confirm\": true}\n```"}},
        {"expect": {"last_tool_result_contains": "deployed 1.4.2"}, "reply": {"content": "Deployed 1.4.2."}}
    ]))
    .await;
    let agent = agent_with(dir.path(), &board, &model, protocol, json!({})).await;
    let alice = client(&board, "tok-alice");
    let task = create_assigned(&alice, "Deploy the release", "Deploy what is ready.").await;
    nth_post(&alice, &task.id, "asks, for the call `deploy`", 1).await;
    comment(&alice, &task.id, "version 1.4.2, yes deploy now").await;
    let read = nth_post(&alice, &task.id, "I read:", 1).await;
    assert!(read.content.contains("I read: version 1.4.2, confirm yes. Sending."), "{}", read.content);
    nth_post(&alice, &task.id, "Deployed 1.4.2.", 1).await;
    wait_idle(&agent).await;
    let posts = said(&alice, &task.id).await;
    assert!(!posts.iter().any(|m| m.content.contains("did not fit")), "understood the first time: {posts:#?}");
    assert!(model.mismatches().is_empty(), "{:?}", model.mismatches());
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_answer_2026_07_28() {
    a_plain_answer_is_fitted_by_the_model_and_said_before_it_is_sent("2026-07-28").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_answer_2025_11_25() {
    a_plain_answer_is_fitted_by_the_model_and_said_before_it_is_sent("2025-11-25").await;
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
        let text = &result.text;
        assert!(text.contains("the user cancelled"), "{protocol}: {text}");
        assert!(started.elapsed() < Duration::from_secs(10), "{protocol}: at once");
        host.shutdown().await;
    }
}

/// The lines the server wrote to its `ELICIT_LOG_FILE`: what it was told.
fn server_log(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_string).collect()
}

fn logging_to(path: &std::path::Path) -> Value {
    json!({"mcp_servers": {"elicit": {"env": {"ELICIT_LOG_FILE": path}}}})
}

async fn waiting_for(agent: &picogent::runtime::AgentHandle, session: &str) -> picogent::state::Waiting {
    eventually(WAIT, "the run awaiting input", || async {
        runs_for(agent, session).await.into_iter().find_map(|run| run.waiting)
    })
    .await
}

/// An `ask` mode approval, then a link the server asks for, in one call: two questions, two
/// messages, each answered by a reply of its own; and only the person who asked for the run
/// approves (bob's `yes` is not theirs to give).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_and_a_link_in_one_call_are_two_questions_and_only_the_requester_approves() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = scripted(json!([
        {"reply": call("connect_account")},
        {"expect": {"last_tool_result_contains": "connected", "last_tool_result_is_error": false},
         "reply": {"content": "Connected your account."}}
    ]))
    .await;
    // Not trusted: every tool of the server counts as destructive, and asks first.
    let extra = json!({
        "mcp_servers": {"elicit": {"trusted": false}},
        "permissions": {"mode": "ask", "ask_timeout_ms": 60_000},
    });
    let agent = agent_with(dir.path(), &board, &model, "2026-07-28", extra).await;
    let alice = client(&board, "tok-alice");
    let bob = client(&board, "tok-bob");
    let task = create_assigned(&alice, "Connect the account", "Connect my account.").await;
    let session = format!("task:{}", task.id);

    let approval = nth_post(&alice, &task.id, "Permission needed", 1).await;
    assert!(
        approval.content.starts_with("@alice Permission needed: may I run `mcp__elicit__connect_account`"),
        "{}",
        approval.content
    );
    assert_eq!(waiting_for(&agent, &session).await.person.as_deref(), Some("alice"));
    let bobs_yes = comment(&bob, &task.id, "yes").await;
    // The run read bob's `yes` and passed it over: its waiting record says so.
    let waiting = eventually(WAIT, "bob's yes read and passed over", || async {
        runs_for(&agent, &session)
            .await
            .into_iter()
            .find_map(|run| run.waiting)
            .filter(|w| w.passed_over.as_ref().is_some_and(|passed| passed.last_message_id == bobs_yes.id))
    })
    .await;
    assert_eq!(waiting.kind, picogent::state::WaitKind::Approval, "bob's yes approves nothing");
    assert_eq!(waiting.passed_over.as_ref().map(|passed| (passed.count, passed.last_by.as_str())), Some((1, "bob")));
    assert_eq!(said(&alice, &task.id).await.len(), 1, "nothing but the approval yet");

    comment(&alice, &task.id, "yes").await;
    let link = nth_post(&alice, &task.id, "asks you to open this link", 1).await;
    assert_ne!(link.id, approval.id, "a question of its own");
    assert!(link.content.starts_with("@alice"), "{}", link.content);
    let waiting = eventually(WAIT, "the link awaited", || async {
        runs_for(&agent, &session)
            .await
            .into_iter()
            .find_map(|run| run.waiting)
            .filter(|w| w.asked_message_id == Some(link.id.clone()))
    })
    .await;
    assert_eq!(waiting.kind, picogent::state::WaitKind::Elicitation, "the approval's yes did not answer the link");

    comment(&alice, &task.id, "done").await;
    nth_post(&alice, &task.id, "Connected your account.", 1).await;
    wait_idle(&agent).await;
    assert_eq!(said(&alice, &task.id).await.len(), 3, "the approval, the link and the answer");
    assert_eq!(runs_for(&agent, &session).await[0].status, RunStatus::Completed);
    assert!(model.mismatches().is_empty(), "{:?}", model.mismatches());
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// A tool that asks twice in one call (on 2026-07-28 in two rounds): two questions, each
/// answered on its own; a form of one field takes the whole reply as its value.
async fn a_call_that_asks_twice_asks_two_questions(protocol: &str) {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = scripted(json!([
        {"reply": call("plan_trip")},
        {"expect": {"last_tool_result_contains": "planned 3 nights in Lisbon"}, "reply": {"content": "Planned."}}
    ]))
    .await;
    let agent = agent_with(dir.path(), &board, &model, protocol, json!({})).await;
    let alice = client(&board, "tok-alice");
    let task = create_assigned(&alice, "Plan the offsite", "Plan our trip.").await;
    let first = nth_post(&alice, &task.id, "Where to?", 1).await;
    comment(&alice, &task.id, "Lisbon").await;
    let second = nth_post(&alice, &task.id, "How many nights in Lisbon?", 1).await;
    assert_ne!(first.id, second.id, "{protocol}: a question of its own");
    assert!(
        !second.content.contains("did not fit"),
        "{protocol}: `Lisbon` answered the first only: {}",
        second.content
    );
    comment(&alice, &task.id, "3").await;
    nth_post(&alice, &task.id, "Planned.", 1).await;
    wait_idle(&agent).await;
    assert_eq!(said(&alice, &task.id).await.len(), 3, "{protocol}: two questions and the answer");
    assert!(model.mismatches().is_empty(), "{protocol}: {:?}", model.mismatches());
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_asks_twice_2026_07_28() {
    a_call_that_asks_twice_asks_two_questions("2026-07-28").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_asks_twice_2025_11_25() {
    a_call_that_asks_twice_asks_two_questions("2025-11-25").await;
}

/// Asked in a chat thread (a mention in the project's chat), the person's reply there is the
/// answer, and only that: the model does not read it again as steering, and no follow-up run
/// starts for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elicitation_in_a_chat_thread_reaches_the_model_once() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = scripted(json!([
        {"expect": {"tools_include": ["mcp__elicit__book_table"]}, "reply": call("book_table")},
        {"expect": {"last_tool_result_contains": "booked a table for 4 at 19:00 for Ada"},
         "reply": {"content": "Booked a table for four at seven."}}
    ]))
    .await;
    let agent = agent_with(dir.path(), &board, &model, "2025-11-25", json!({})).await;
    let alice = client(&board, "tok-alice");
    let chat = chat_id(&alice).await;
    let root = say(&alice, &chat, "@picogent book us a table for tonight").await;
    let question = eventually(WAIT, "the question in the thread", || async {
        thread(&alice, &root.id).await.into_iter().find(|m| m.author_slug == "picogent")
    })
    .await;
    assert!(question.content.starts_with("@alice The MCP server `elicit` asks"), "{}", question.content);
    waiting_for(&agent, &format!("thread:{}", root.id)).await;
    let reply = SendMessage {
        content: "party_size: 4\nname: Ada\ntime: 19:00".into(),
        parent_id: Some(root.id.clone()),
        ..SendMessage::default()
    };
    alice.send_message(&reply, None).await.unwrap();
    eventually(WAIT, "the answer in the thread", || async {
        thread(&alice, &root.id).await.into_iter().find(|m| m.content.starts_with("Booked a table"))
    })
    .await;
    // Past the point where a follow-up run would start: the router handled every event the board
    // holds for the agent (the reply's, then the answer's) and the end of the run.
    caught_up_with_board(&agent, &dir.path().join("board.db"), "picogent").await;
    let posts: Vec<_> = thread(&alice, &root.id).await.into_iter().filter(|m| m.author_slug == "picogent").collect();
    assert_eq!(posts.len(), 2, "one question and one answer: {posts:#?}");
    let requests = model.requests();
    assert_eq!(requests.len(), 2, "one run of two turns, no follow-up");
    let said_to_model: Vec<&str> = requests[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user" || m["role"] == "tool")
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(
        !said_to_model.iter().any(|m| m.contains("name: Ada")),
        "the reply is not steering too: {said_to_model:#?}"
    );
    let answers = said_to_model.iter().filter(|m| m.contains("booked a table for 4 at 19:00 for Ada")).count();
    assert_eq!(answers, 1, "read once, as the answer: {said_to_model:#?}");
    assert_eq!(runs_for(&agent, &format!("thread:{}", root.id)).await.len(), 1);
    assert!(model.mismatches().is_empty(), "{:?}", model.mismatches());
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// The agent shut down while a form waits: the server is told nothing (not `cancel`), the run
/// resumes at the next start, asks the same message (not posted twice), and finds the answer
/// given meanwhile.
async fn a_restart_during_a_form_elicitation(protocol: &str) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let board = start_board(dir.path()).await;
    // A fixed key: a `requestState` sealed before the restart still opens after it.
    let extra = || {
        let mut extra = logging_to(&log);
        merge(&mut extra, json!({"mcp_servers": {"elicit": {"env": {"ELICIT_REQUEST_STATE_KEY": "k".repeat(40)}}}}));
        extra
    };
    let before = scripted(json!([{"reply": call("book_table")}])).await;
    let agent = agent_with(dir.path(), &board, &before, protocol, extra()).await;
    let alice = client(&board, "tok-alice");
    let task = create_assigned(&alice, "Book a table", "Book a table for the team dinner.").await;
    let session = format!("task:{}", task.id);
    nth_post(&alice, &task.id, "asks, for the call `book_table`", 1).await;
    let waiting = waiting_for(&agent, &session).await;
    let run_id = runs_for(&agent, &session).await[0].id.clone();
    agent.shutdown().await.unwrap();
    before.shutdown().await;
    assert_eq!(server_log(&log), Vec::<String>::new(), "{protocol}: the server was told nothing");
    comment(&alice, &task.id, "party_size: 2\nname: Bo\ntime: 18:00").await;

    let after = scripted(json!([
        {"reply": call("book_table")},
        {"expect": {"last_tool_result_contains": "booked a table for 2 at 18:00 for Bo"}, "reply": {"content": "Booked."}}
    ]))
    .await;
    let agent = agent_with(dir.path(), &board, &after, protocol, extra()).await;
    nth_post(&alice, &task.id, "Booked.", 1).await;
    wait_idle(&agent).await;
    let run = agent.state.get_run(&run_id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Completed, "{protocol}: the same run resumed and finished");
    let posts = said(&alice, &task.id).await;
    let questions: Vec<_> = posts.iter().filter(|m| m.content.contains("asks, for the call `book_table`")).collect();
    assert_eq!(questions.len(), 1, "{protocol}: asked once: {posts:#?}");
    assert_eq!(Some(questions[0].id.clone()), waiting.asked_message_id, "{protocol}");
    assert_eq!(posts.len(), 2, "{protocol}: {posts:#?}");
    assert_eq!(server_log(&log), ["book_table accept"], "{protocol}");
    assert!(after.mismatches().is_empty(), "{protocol}: {:?}", after.mismatches());
    agent.shutdown().await.unwrap();
    after.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_during_a_form_elicitation_2026_07_28() {
    a_restart_during_a_form_elicitation("2026-07-28").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_during_a_form_elicitation_2025_11_25() {
    a_restart_during_a_form_elicitation("2025-11-25").await;
}

/// `@picogent stop` while a form waits: one notice, and the server is told `cancel` (and ends
/// the call itself).
async fn a_stop_during_an_elicitation(protocol: &str) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let board = start_board(dir.path()).await;
    let model = scripted(json!([{"reply": call("book_table")}])).await;
    let agent = agent_with(dir.path(), &board, &model, protocol, logging_to(&log)).await;
    let alice = client(&board, "tok-alice");
    let task = create_assigned(&alice, "Book a table", "Book a table.").await;
    let session = format!("task:{}", task.id);
    nth_post(&alice, &task.id, "asks, for the call `book_table`", 1).await;
    waiting_for(&agent, &session).await;
    comment(&alice, &task.id, "@picogent stop").await;
    let stopped = nth_post(&alice, &task.id, "Stopped", 1).await;
    assert!(stopped.content.contains("@alice asked me to stop"), "{}", stopped.content);
    wait_idle(&agent).await;
    eventually(WAIT, "the server told cancel", || async { (server_log(&log) == ["book_table cancel"]).then_some(()) })
        .await;
    let posts = said(&alice, &task.id).await;
    assert_eq!(posts.len(), 2, "{protocol}: the question and one notice: {posts:#?}");
    assert_eq!(runs_for(&agent, &session).await[0].status, RunStatus::Stopped);
    let metrics =
        reqwest::get(format!("http://{}/metrics", agent.http_addr.unwrap())).await.unwrap().text().await.unwrap();
    assert!(metrics.contains(r#"picogent_waits_total{kind="elicitation",end="stopped"} 1"#), "{metrics}");
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_during_an_elicitation_2026_07_28() {
    a_stop_during_an_elicitation("2026-07-28").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_during_an_elicitation_2025_11_25() {
    a_stop_during_an_elicitation("2025-11-25").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_form_declined_on_the_board_is_declined_to_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let board = start_board(dir.path()).await;
    let model = scripted(json!([
        {"reply": call("book_table")},
        {"expect": {"last_tool_result_contains": "the user declined"}, "reply": {"content": "You declined."}}
    ]))
    .await;
    let agent = agent_with(dir.path(), &board, &model, "2025-11-25", logging_to(&log)).await;
    let alice = client(&board, "tok-alice");
    let task = create_assigned(&alice, "Book a table", "Book a table.").await;
    nth_post(&alice, &task.id, "asks, for the call `book_table`", 1).await;
    comment(&alice, &task.id, "Decline.").await;
    nth_post(&alice, &task.id, "You declined.", 1).await;
    wait_idle(&agent).await;
    assert_eq!(server_log(&log), ["book_table decline"]);
    assert_eq!(said(&alice, &task.id).await.len(), 2, "the question and the answer");
    assert!(model.mismatches().is_empty(), "{:?}", model.mismatches());
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// Two runs call the same 2025-11-25 server at once: its calls take turns, so the one in flight
/// is always the one asking, and each person is asked (none is cancelled for want of knowing
/// which call asked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_of_one_2025_11_25_server_take_turns_and_each_is_asked() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = scripted(json!([
        {"reply": call("book_table")},
        {"reply": call("book_table")},
        {"expect": {"last_tool_result_contains": "booked a table for 2 at 18:00 for Ada"}, "reply": {"content": "Booked for Ada."}},
        {"expect": {"last_tool_result_contains": "booked a table for 3 at 20:00 for Bo"}, "reply": {"content": "Booked for Bo."}}
    ]))
    .await;
    let agent = agent_with(dir.path(), &board, &model, "2025-11-25", json!({})).await;
    let alice = client(&board, "tok-alice");
    let one = create_assigned(&alice, "Book a table", "Book a table for the team.").await;
    let two = create_assigned(&alice, "Book another table", "Book a table for the guests.").await;
    let asked = |task_id: String| {
        let alice = alice.clone();
        async move { said(&alice, &task_id).await.into_iter().any(|m| m.content.contains("asks, for the call")) }
    };
    let (first, second) = eventually(WAIT, "the first question", || async {
        match (asked(one.id.clone()).await, asked(two.id.clone()).await) {
            (true, _) => Some((one.id.clone(), two.id.clone())),
            (_, true) => Some((two.id.clone(), one.id.clone())),
            _ => None,
        }
    })
    .await;
    // Both runs called; the second call waits for the first to end, unasked and not cancelled:
    // `/metrics` shows it waiting for its turn on the server.
    let metrics = format!("http://{}/metrics", agent.http_addr.unwrap());
    eventually(WAIT, "the second call waiting for its turn", || async {
        let text = reqwest::get(&metrics).await.ok()?.text().await.ok()?;
        text.contains(r#"picogent_mcp_calls_waiting{server="elicit"} 1"#).then_some(())
    })
    .await;
    assert!(!asked(second.clone()).await, "one call at a time");
    comment(&alice, &first, "party_size: 2\nname: Ada\ntime: 18:00").await;
    nth_post(&alice, &second, "asks, for the call `book_table`", 1).await;
    comment(&alice, &second, "party_size: 3\nname: Bo\ntime: 20:00").await;
    nth_post(&alice, &first, "Booked for Ada.", 1).await;
    nth_post(&alice, &second, "Booked for Bo.", 1).await;
    wait_idle(&agent).await;
    assert!(model.mismatches().is_empty(), "{:?}", model.mismatches());
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}
