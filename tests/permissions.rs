//! `ask` means ask: in `permissions.mode: ask` the agent asks a human on the task before it
//! closes, reassigns, rejects or rewrites a task (`permissions.ask_tools`, judged per call), and
//! not before routine changes. Against the reference board, with the agent in process and a
//! scripted model, or with the tools built by `governed` exactly as the runtime builds them; every
//! check reads the board as a person would.

#[path = "support/agent.rs"]
mod agent_support;

use std::sync::Arc;
use std::time::Duration;

use agent_support::*;
use picogent::config::Config;
use picogent::offline_model::script::Script;
use picogent::offline_model::{OfflineModelHandle, OfflineModelOptions};
use picogent::session::SessionKey;
use picogent::tools::ToolResult;
use picogent::tools::{Registry, ToolContext, ToolSource, governed};
use picogent::tracker::TrackerClient;
use picogent::tracker::model::*;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);

async fn scripted(turns: Value) -> OfflineModelHandle {
    let script = Script::from_json(&json!({ "turns": turns }).to_string()).unwrap();
    picogent::offline_model::start(OfflineModelOptions::script(script)).await.unwrap()
}

/// The agent's permission questions on a task, oldest first (mentioning the person who asked
/// for the run, when one did).
async fn questions(alice: &TrackerClient, task_id: &str) -> Vec<String> {
    comments(alice, task_id)
        .await
        .into_iter()
        .filter(|m| m.author_slug == "picogent" && m.content.contains("Permission needed"))
        .map(|m| m.content)
        .collect()
}

/// Waits until the agent has asked `count` questions on the task; returns the last one.
async fn wait_question(alice: &TrackerClient, task_id: &str, count: usize) -> String {
    eventually(WAIT, &format!("question {count} on {task_id}"), || async {
        let asked = questions(alice, task_id).await;
        (asked.len() >= count).then(|| asked[count - 1].clone())
    })
    .await
}

/// The agent in `ask` mode on `board` with `model`, ready, and alice's client.
async fn ask_mode_agent(
    dir: &std::path::Path,
    board: &picogent::board::BoardHandle,
    model: &OfflineModelHandle,
) -> (picogent::runtime::AgentHandle, TrackerClient) {
    let extra = json!({"permissions": {"mode": "ask", "ask_timeout_ms": 30_000}});
    let agent = start_agent(agent_config(dir, &board.url(), &model.url(), "picogent", extra)).await;
    wait_ready(&agent).await;
    (agent, client(board, "tok-alice"))
}

fn text(result: &ToolResult) -> String {
    result.text.clone()
}

/// A call cut off by the output limit is never run, so it is never asked about either: in ask
/// mode a cut-off `update_task` to done posts no question and changes nothing; the model is told
/// the call was cut off, and the run goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_ask_mode_a_cut_off_call_is_neither_asked_about_nor_run() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = scripted(json!([
        {"reply": {"finish_reason": "length", "tool_calls": [
            {"name": "update_task", "raw_arguments": "{\"task_id\": \"TE-1\", \"status\": \"do"}]}},
        {"expect": {"last_tool_result_is_error": true, "last_tool_result_contains": "cut off by the output limit"},
         "reply": {"content": "I could not finish the change; TE-1 stays open."}}
    ]))
    .await;
    let (agent, alice) = ask_mode_agent(dir.path(), &board, &model).await;
    let task = create_assigned(&alice, "Release notes", "Write the release notes for 2.0").await;
    let session = format!("task:{}", task.id);
    eventually(WAIT, "the run to end", || async {
        runs_for(&agent, &session).await.into_iter().find(|run| run.finished_at.is_some())
    })
    .await;
    wait_idle(&agent).await;
    assert!(questions(&alice, &task.id).await.is_empty(), "nothing asked about a call that cannot run");
    assert_eq!(alice.get_task(&task.id).await.unwrap().status, TaskStatus::InProgress, "not closed");
    let said: Vec<_> = comments(&alice, &task.id).await.into_iter().filter(|m| m.author_slug == "picogent").collect();
    assert_eq!(said.len(), 1, "{said:#?}");
    assert!(said[0].content.starts_with("I could not finish the change"), "{}", said[0].content);
    assert!(model.mismatches().is_empty(), "{:?}", model.mismatches());
    agent.shutdown().await.unwrap();
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_ask_mode_the_agent_asks_before_closing_or_rejecting_a_task_and_not_before_routine_changes() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    // TE-1 is closed after a "no" and a "yes"; TE-2 is rejected after a "yes".
    let model = scripted(json!([
        {"expect": {"tools_include": ["update_task", "reject_task"]},
         "reply": {"tool_calls": [{"name": "update_task",
                                   "arguments": {"task_id": "TE-1", "status": "in_progress", "title": "Release notes, 2.0"}}]}},
        {"expect": {"last_tool_result_is_error": false},
         "reply": {"tool_calls": [{"name": "update_task", "arguments": {"task_id": "TE-1", "status": "done"}}]}},
        {"expect": {"last_tool_result_is_error": true, "last_tool_result_contains": "alice answered no"},
         "reply": {"tool_calls": [{"name": "update_task", "arguments": {"task_id": "TE-1", "status": "done"}}]}},
        {"expect": {"last_tool_result_is_error": false, "last_tool_result_contains": "done"},
         "reply": {"content": "Closed TE-1."}},
        {"expect": {"tools_include": ["reject_task"]},
         "reply": {"tool_calls": [{"name": "reject_task",
                                   "arguments": {"task_id": "TE-2", "reason": "I have no access to the payroll system"}}]}},
        {"expect": {"last_tool_result_is_error": false},
         "reply": {"content": "Gave TE-2 back."}}
    ]))
    .await;
    let (agent, alice) = ask_mode_agent(dir.path(), &board, &model).await;

    let task = create_assigned(&alice, "Release notes", "Write the release notes for 2.0").await;
    assert_eq!(task.key, "TE-1");
    // The routine change ran without a question: the new title is on the board before any ask.
    let asked = wait_question(&alice, &task.id, 1).await;
    let seen = alice.get_task(&task.id).await.unwrap();
    assert_eq!(seen.title, "Release notes, 2.0");
    println!("the question on TE-1:\n{asked}");
    assert!(asked.starts_with("@alice Permission needed: may I move task TE-1 to done?"), "{asked}");
    assert!(asked.contains("`update_task`") && asked.contains("permissions.ask_tools"), "{asked}");
    // Without a yes nothing changes: not while it waits, not after a no.
    assert_eq!(seen.status, TaskStatus::InProgress);
    comment(&alice, &task.id, "no, not before the review").await;
    let asked_again = wait_question(&alice, &task.id, 2).await;
    assert_eq!(asked_again, asked, "the same call is asked about in the same words");
    assert_eq!(alice.get_task(&task.id).await.unwrap().status, TaskStatus::InProgress);
    comment(&alice, &task.id, "yes").await;
    wait_status(&alice, &task.id, TaskStatus::Done).await;
    let session = format!("task:{}", task.id);
    eventually(WAIT, "the TE-1 run to end", || async {
        runs_for(&agent, &session).await.into_iter().find(|run| run.finished_at.is_some())
    })
    .await;
    wait_idle(&agent).await;
    let notes = comments(&alice, &task.id).await;
    let answers: Vec<_> =
        notes.iter().filter(|m| m.author_slug == "picogent" && m.content.starts_with("Closed TE-1.")).collect();
    assert_eq!(answers.len(), 1, "{notes:#?}");
    assert_eq!(questions(&alice, &task.id).await.len(), 2, "one question per call: {notes:#?}");

    let second = create_assigned(&alice, "Fix payroll export", "The export drops the last row").await;
    assert_eq!(second.key, "TE-2");
    let asked = wait_question(&alice, &second.id, 1).await;
    assert!(
        asked.starts_with("@alice Permission needed: may I reject task TE-2, giving it back unassigned with the reason \"I have no access to the payroll system\"?"),
        "{asked}"
    );
    let waiting = alice.get_task(&second.id).await.unwrap();
    assert_eq!(waiting.assignee_slug.as_deref(), Some("picogent"), "not rejected before the yes");
    comment(&alice, &second.id, "yes, fair enough").await;
    eventually(WAIT, "TE-2 given back", || async {
        let task = alice.get_task(&second.id).await.ok()?;
        (task.assignee_slug.is_none() && task.status == TaskStatus::Todo).then_some(())
    })
    .await;
    wait_idle(&agent).await;
    let notes = comments(&alice, &second.id).await;
    assert_eq!(notes.iter().filter(|m| m.content.starts_with("rejected:")).count(), 1, "{notes:#?}");
    assert!(model.mismatches().is_empty(), "{:?}", model.mismatches());
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// The tools as the runtime builds them for `config`, acting as the agent on `task_id`.
fn tools_for(board_url: &str, config: &Config) -> (Arc<dyn ToolSource>, ToolContext) {
    let agent: picogent::config::TrackerConfig = serde_json::from_value(json!({"url": board_url})).unwrap();
    let agent = TrackerClient::new(&agent, picogent::secret::Secret::new("tok-picogent")).unwrap();
    let registry: Arc<dyn ToolSource> = Arc::new(Registry::new(agent.clone(), 8192).unwrap());
    (Arc::new(governed(vec![registry], &config.permissions, &agent)), ToolContext::new("picogent"))
}

fn on_task(context: &ToolContext, task: &TaskOut) -> ToolContext {
    ToolContext { session: Some(SessionKey::Task(task.id.clone())), ..context.clone() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_tools_judge_each_call_and_an_empty_list_leaves_only_the_annotations() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let alice = client(&board, "tok-alice");
    let config = |permissions: Value| {
        agent_config(dir.path(), &board.url(), "http://127.0.0.1:9/v1", "picogent", json!({"permissions": permissions}))
    };
    let (tools, context) = tools_for(&board.url(), &config(json!({"mode": "ask", "ask_timeout_ms": 30_000})));
    let task = create_assigned(&alice, "Tidy the backlog", "Close what is stale").await;
    let in_task = on_task(&context, &task);
    let call = |name: &'static str, arguments: Value| {
        let (tools, in_task) = (tools.clone(), in_task.clone());
        async move { tools.call(name, arguments, &in_task).await }
    };

    // Routine: to itself, a new title, a move to in_progress; and a call the tool refuses for its
    // arguments (nothing happens, so nothing is asked).
    let mine = call("assign_task", json!({"task_id": task.key, "assignee_slug": "picogent"})).await;
    assert!(!mine.is_error, "{}", text(&mine));
    let retitled =
        call("update_task", json!({"task_id": task.key, "title": "Tidy the backlog now", "status": "in_progress"}))
            .await;
    assert!(!retitled.is_error, "{}", text(&retitled));
    let wrong = call("update_task", json!({"task_id": task.key, "status": "finished"})).await;
    assert!(text(&wrong).contains("invalid arguments"), "{}", text(&wrong));
    assert_eq!(questions(&alice, &task.id).await, Vec::<String>::new());
    let seen = alice.get_task(&task.id).await.unwrap();
    assert_eq!((seen.title.as_str(), seen.status), ("Tidy the backlog now", TaskStatus::InProgress));

    // To another member: asked in plain words, and nothing happens until alice says yes.
    let handing = tokio::spawn(call("assign_task", json!({"task_id": task.key, "assignee_slug": "bob"})));
    let asked = wait_question(&alice, &task.id, 1).await;
    assert!(asked.starts_with(&format!("Permission needed: may I assign task {} to @bob?", task.key)), "{asked}");
    assert_eq!(alice.get_task(&task.id).await.unwrap().assignee_slug.as_deref(), Some("picogent"));
    comment(&alice, &task.id, "yes").await;
    let handed = handing.await.unwrap();
    assert!(!handed.is_error, "{}", text(&handed));
    assert_eq!(alice.get_task(&task.id).await.unwrap().assignee_slug.as_deref(), Some("bob"));

    // Rewriting what the task asks for is asked about too; a no leaves the description as it was.
    let rewriting = tokio::spawn(call("update_task", json!({"task_id": task.key, "description": "Nothing to do"})));
    let asked = wait_question(&alice, &task.id, 2).await;
    assert!(
        asked.starts_with(&format!("Permission needed: may I replace the description of task {}?", task.key)),
        "{asked}"
    );
    comment(&alice, &task.id, "no").await;
    let refused = rewriting.await.unwrap();
    assert!(text(&refused).contains("alice answered no"), "{}", text(&refused));
    assert_eq!(alice.get_task(&task.id).await.unwrap().description.as_deref(), Some("Close what is stale"));

    // `ask_tools: []`: closing and reassigning run at once; reject_task, annotated destructive,
    // still asks.
    let (bare, _) = tools_for(&board.url(), &config(json!({"mode": "ask", "ask_timeout_ms": 30_000, "ask_tools": []})));
    let other = create_assigned(&alice, "Rotate the keys", "Rotate them all").await;
    let in_other = on_task(&context, &other);
    let closed = bare.call("update_task", json!({"task_id": other.key, "status": "done"}), &in_other).await;
    assert!(!closed.is_error, "{}", text(&closed));
    let given = bare.call("assign_task", json!({"task_id": other.key, "assignee_slug": "alice"}), &in_other).await;
    assert!(!given.is_error, "{}", text(&given));
    assert_eq!(questions(&alice, &other.id).await, Vec::<String>::new());
    let seen = alice.get_task(&other.id).await.unwrap();
    assert_eq!((seen.status, seen.assignee_slug.as_deref()), (TaskStatus::Done, Some("alice")));
    let third = create_assigned(&alice, "Water the plants", "").await;
    let in_third = on_task(&context, &third);
    let rejecting = tokio::spawn({
        let (bare, in_third, key) = (bare.clone(), in_third.clone(), third.key.clone());
        async move { bare.call("reject_task", json!({"task_id": key, "reason": "no hands"}), &in_third).await }
    });
    let asked = wait_question(&alice, &third.id, 1).await;
    assert!(asked.contains(&format!("may I reject task {}", third.key)), "{asked}");
    comment(&alice, &third.id, "no").await;
    let refused = rejecting.await.unwrap();
    assert!(text(&refused).contains("alice answered no"), "{}", text(&refused));
    assert_eq!(alice.get_task(&third.id).await.unwrap().assignee_slug.as_deref(), Some("picogent"));
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_glob_in_ask_tools_stops_the_agent_at_start_saying_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let good = agent_config(dir.path(), "http://127.0.0.1:9", "http://127.0.0.1:9/v1", "picogent", json!({}));
    let mut file = serde_json::to_value(&good).unwrap();
    let cases = [
        (json!(["update task"]), "field `permissions.ask_tools`: \"update task\" is not a tool name or glob"),
        (json!(["assign_tasks"]), "field `permissions.ask_tools`: no tool is named \"assign_tasks\""),
        (json!("update_task"), "field `permissions.ask_tools`: invalid type: string \"update_task\", expected a list"),
    ];
    for (ask_tools, expected) in cases {
        file["permissions"]["ask_tools"] = ask_tools.clone();
        let path = dir.path().join("agent.json");
        std::fs::write(&path, serde_json::to_string_pretty(&file).unwrap()).unwrap();
        let output = picogent_output(&["run"], &path).await;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{ask_tools}: {stderr}");
        assert!(stderr.contains(expected), "{ask_tools}: {stderr}");
    }
}
