//! A run that waits for a person — the model's question (`ask_person`), an `ask` mode approval —
//! is `awaiting_input`: the inspector lists it under its own filter and says what it waits for,
//! `/metrics` counts it, it holds no slot (another task is worked meanwhile on one slot), the
//! person's reply resumes it, a stop ends it with one notice, and it survives a restart (the
//! question is not asked twice, the answer given meanwhile is found). Over loopback: the
//! reference board, a scripted offline model endpoint, the agent in process.

#[path = "support/agent.rs"]
mod agent_support;

use std::time::Duration;

use agent_support::*;
use picogent::offline_model::script::Script;
use picogent::offline_model::{OfflineModelHandle, OfflineModelOptions};
use picogent::state::RunStatus;
use picogent::tracker::TrackerClient;
use picogent::tracker::model::*;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);

async fn scripted(turns: Value) -> OfflineModelHandle {
    let script = Script::from_json(&json!({ "turns": turns }).to_string()).unwrap();
    picogent::offline_model::start(OfflineModelOptions::script(script)).await.unwrap()
}

fn ask_colour() -> Value {
    json!({"expect": {"tools_include": ["ask_person"]},
           "reply": {"tool_calls": [{"name": "ask_person",
                                     "arguments": {"question": "Which colour should the button be?",
                                                   "options": ["blue", "green"]}}]}})
}

async fn said(alice: &TrackerClient, task_id: &str) -> Vec<MessageOut> {
    comments(alice, task_id).await.into_iter().filter(|m| m.author_slug == "picogent").collect()
}

async fn page(url: &str) -> String {
    reqwest::get(url).await.unwrap().text().await.unwrap().replace("&#x2f;", "/")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_waits_without_a_slot_is_shown_and_counted_and_the_reply_resumes_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = scripted(json!([
        ask_colour(),
        // TE-2, worked on the one slot while TE-1 waits.
        {"reply": {"tool_calls": [{"name": "get_task", "arguments": {"task_id": "TE-2"}}]}},
        {"expect": {"last_tool_result_contains": "TE-2"}, "reply": {"content": "Looked at TE-2."}},
        // TE-1 again, with alice's answer.
        {"expect": {"last_tool_result_contains": "alice answered: blue"}, "reply": {"content": "Made it blue."}}
    ]))
    .await;
    let extra = json!({"limits": {"max_concurrent_runs": 1}, "elicitation": {"ask_person": true}});
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra)).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");
    let base = format!("http://{}", agent.http_addr.unwrap());

    let first = create_assigned(&alice, "Paint the button", "The button needs a colour.").await;
    let question = eventually(WAIT, "the question on TE-1", || async {
        said(&alice, &first.id).await.into_iter().find(|m| m.content.contains("Question:"))
    })
    .await;
    assert!(
        question.content.starts_with("@alice Question: Which colour should the button be?"),
        "it mentions who asked: {}",
        question.content
    );
    assert!(question.content.contains("`blue`, `green`"), "{}", question.content);
    let session = format!("task:{}", first.id);
    let waiting = eventually(WAIT, "the run recorded as awaiting input", || async {
        runs_for(&agent, &session).await.into_iter().find(|run| run.waiting.is_some())
    })
    .await;
    assert_eq!(waiting.shown_status(), "awaiting_input");
    let what = waiting.waiting.clone().unwrap();
    assert_eq!(what.kind, picogent::state::WaitKind::Question);
    assert_eq!(what.person.as_deref(), Some("alice"));
    assert_eq!(what.asked_message_id.as_deref(), Some(question.id.as_str()));

    // Its own filter in the inspector, and what it waits for on its page.
    let listed = page(&format!("{base}/runs?status=awaiting_input")).await;
    assert!(listed.contains(&waiting.id[..8]), "{listed}");
    assert!(listed.contains("waits for @alice (question): Which colour should the button be?"), "{listed}");
    let shown = page(&format!("{base}/runs/{}", waiting.id)).await;
    assert!(shown.contains("Awaiting input") && shown.contains(r#"id="waiting""#), "{shown}");
    let metrics = page(&format!("{base}/metrics")).await;
    assert!(metrics.contains("picogent_runs_awaiting_input 1"), "{metrics}");

    // One slot, and it is free: TE-2 is worked while TE-1 waits.
    let second = create_assigned(&alice, "Check the other task", "Look at it.").await;
    eventually(WAIT, "TE-2 answered while TE-1 waits", || async {
        said(&alice, &second.id).await.into_iter().find(|m| m.content.starts_with("Looked at TE-2."))
    })
    .await;
    assert!(runs_for(&agent, &session).await[0].waiting.is_some(), "TE-1 still waits");

    // Another person's reply is not the answer; alice's is.
    let bob = client(&board, "tok-bob");
    comment(&bob, &first.id, "green!").await;
    comment(&alice, &first.id, "blue").await;
    let answer = eventually(WAIT, "TE-1's answer", || async {
        said(&alice, &first.id).await.into_iter().find(|m| m.content.starts_with("Made it blue."))
    })
    .await;
    wait_idle(&agent).await;
    assert!(answer.content.starts_with("Made it blue."));
    let run = agent.state.get_run(&waiting.id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert!(run.waiting.is_none());
    assert_eq!(said(&alice, &first.id).await.len(), 2, "one question and one answer");
    let metrics = page(&format!("{base}/metrics")).await;
    assert!(metrics.contains("picogent_runs_awaiting_input 0"), "{metrics}");
    assert!(metrics.contains(r#"picogent_waits_total{kind="question",end="answered"} 1"#), "{metrics}");
    assert!(model.mismatches().is_empty(), "{:?}", model.mismatches());
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_while_an_approval_waits_ends_the_run_with_one_notice() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = scripted(json!([
        {"reply": {"tool_calls": [{"name": "update_task", "arguments": {"task_id": "TE-1", "status": "done"}}]}}
    ]))
    .await;
    let extra = json!({"permissions": {"mode": "ask", "ask_timeout_ms": 60_000}});
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra)).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");
    let task = create_assigned(&alice, "Release notes", "Write the release notes for 2.0").await;
    let session = format!("task:{}", task.id);
    let waiting = eventually(WAIT, "the approval awaited", || async {
        runs_for(&agent, &session).await.into_iter().find(|run| run.waiting.is_some())
    })
    .await;
    let what = waiting.waiting.clone().unwrap();
    assert_eq!(what.kind, picogent::state::WaitKind::Approval);
    assert_eq!(what.what, "may I move task TE-1 to done?");

    comment(&alice, &task.id, "@picogent stop").await;
    let stopped = eventually(WAIT, "the stop notice", || async {
        said(&alice, &task.id).await.into_iter().find(|m| m.content.starts_with("Stopped"))
    })
    .await;
    wait_idle(&agent).await;
    assert!(stopped.content.contains("@alice asked me to stop"), "{}", stopped.content);
    let notes = said(&alice, &task.id).await;
    assert_eq!(notes.iter().filter(|m| m.content.starts_with("Stopped")).count(), 1, "{notes:#?}");
    assert_eq!(notes.len(), 2, "the question and the one notice: {notes:#?}");
    let run = agent.state.get_run(&waiting.id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Stopped);
    assert_eq!(alice.get_task(&task.id).await.unwrap().status, TaskStatus::InProgress, "not closed");
    let metrics = page(&format!("http://{}/metrics", agent.http_addr.unwrap())).await;
    assert!(metrics.contains(r#"picogent_waits_total{kind="approval",end="stopped"} 1"#), "{metrics}");
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_waiting_at_a_restart_finds_the_answer_given_meanwhile_and_asks_once() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let before = scripted(json!([ask_colour()])).await;
    let ask = json!({"elicitation": {"ask_person": true}});
    let config = agent_config(dir.path(), &board.url(), &before.url(), "picogent", ask.clone());
    let agent = start_agent(config).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");
    let task = create_assigned(&alice, "Paint the button", "The button needs a colour.").await;
    let session = format!("task:{}", task.id);
    let waiting = eventually(WAIT, "the run awaiting input", || async {
        runs_for(&agent, &session).await.into_iter().find(|run| run.waiting.is_some())
    })
    .await;
    // Stopped while it waits: it stays running, to resume at the next start.
    agent.shutdown().await.unwrap();
    before.shutdown().await;
    comment(&alice, &task.id, "blue").await;

    let after = scripted(json!([
        ask_colour(),
        {"expect": {"last_tool_result_contains": "alice answered: blue"}, "reply": {"content": "Made it blue."}}
    ]))
    .await;
    let agent = start_agent(agent_config(dir.path(), &board.url(), &after.url(), "picogent", ask)).await;
    eventually(WAIT, "the answer after the restart", || async {
        said(&alice, &task.id).await.into_iter().find(|m| m.content.starts_with("Made it blue."))
    })
    .await;
    wait_idle(&agent).await;
    let run = agent.state.get_run(&waiting.id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Completed, "the same run resumed and finished");
    let notes = said(&alice, &task.id).await;
    assert_eq!(notes.iter().filter(|m| m.content.contains("Question:")).count(), 1, "asked once: {notes:#?}");
    assert_eq!(notes.len(), 2, "{notes:#?}");
    assert!(after.mismatches().is_empty(), "{:?}", after.mismatches());
    agent.shutdown().await.unwrap();
    after.shutdown().await;
    board.shutdown().await.unwrap();
}

/// No answer to the model's question in time: the thread is told once, as for an elicitation,
/// and the run goes on without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_not_answered_in_time_is_told_once_in_the_thread() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = scripted(json!([
        ask_colour(),
        {"expect": {"last_tool_result_contains": "No answer within"}, "reply": {"content": "Went with blue, unasked."}}
    ]))
    .await;
    let extra = json!({"elicitation": {"ask_person": true, "timeout_ms": 1_500}});
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra)).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");
    let task = create_assigned(&alice, "Paint the button", "The button needs a colour.").await;
    eventually(WAIT, "the answer", || async {
        said(&alice, &task.id).await.into_iter().find(|m| m.content.starts_with("Went with blue"))
    })
    .await;
    wait_idle(&agent).await;
    let notes = said(&alice, &task.id).await;
    let told: Vec<_> = notes.iter().filter(|m| m.content.starts_with("No answer within")).collect();
    assert_eq!(told.len(), 1, "{notes:#?}");
    assert!(told[0].content.contains("I went on without the answer to my question"), "{}", told[0].content);
    assert_eq!(notes.len(), 3, "the question, the notice and the answer: {notes:#?}");
    let metrics = page(&format!("http://{}/metrics", agent.http_addr.unwrap())).await;
    assert!(metrics.contains(r#"picogent_waits_total{kind="question",end="timed_out"} 1"#), "{metrics}");
    assert!(model.mismatches().is_empty(), "{:?}", model.mismatches());
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}
