//! The tracker tools against the reference board on loopback: every tool with its main error
//! path, argument validation, identity, policy, result caps, and the `picogent tools` CLI.

use std::path::PathBuf;

use picogent::board::{BoardHandle, BoardOptions};
use picogent::config::TrackerConfig;
use picogent::llm::count_tools_json_tokens;
use picogent::retry::RetryConfig;
use picogent::secret::Secret;
use picogent::tools::ToolResult;
use picogent::tools::definition::specs;
use picogent::tools::{CHAT_REPLY_TOOLS, Policy, PolicySource, Registry, TASK_RUN_TOOLS, ToolContext, ToolSource};
use picogent::tracker::TrackerClient;
use serde_json::{Value, json};

const MAX_RESULT_BYTES: usize = 8 * 1024;

fn seed_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/board-seed.json")
}

fn tracker_config(url: &str, timeout_ms: u64) -> TrackerConfig {
    TrackerConfig {
        url: url.to_string(),
        api_prefix: "/api".to_string(),
        token_env: "TEAMBOARD_TOKEN".to_string(),
        timeout_ms,
        // One attempt: these tests are about what a single failure looks like.
        retry: RetryConfig { max_attempts: 1, ..RetryConfig::default() },
    }
}

fn registry_for(url: &str, token: &str, max_bytes: usize) -> Registry {
    let client = TrackerClient::new(&tracker_config(url, 5_000), Secret::new(token)).unwrap();
    Registry::new(client, max_bytes).unwrap()
}

/// The registry under a permission policy, as every user of tools gets it.
fn governed(registry: Registry, policy: Policy) -> PolicySource {
    PolicySource::new(std::sync::Arc::new(registry), policy, None)
}

struct Fixture {
    board: BoardHandle,
    _dir: tempfile::TempDir,
    /// The agent, `picogent`.
    agent: Registry,
    /// A human, `alice`, to set the scene.
    alice: Registry,
    context: ToolContext,
    alice_context: ToolContext,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let board =
        picogent::board::start(BoardOptions::loopback(dir.path().join("board.db"), Some(seed_path()))).await.unwrap();
    let agent = registry_for(&board.url(), "tok-picogent", MAX_RESULT_BYTES);
    let alice = registry_for(&board.url(), "tok-alice", MAX_RESULT_BYTES);
    Fixture {
        board,
        _dir: dir,
        agent,
        alice,
        context: ToolContext::new("picogent"),
        alice_context: ToolContext::new("alice"),
    }
}

fn text_of(result: &ToolResult) -> String {
    result.text.clone()
}

/// Checks what every result must satisfy: no token anywhere, and the structured content of a
/// success fits the tool's output schema.
fn check_result(registry: &dyn ToolSource, name: &str, result: &ToolResult) {
    let whole = format!("{}\n{}", result.text, result.structured.clone().unwrap_or_default());
    assert!(!whole.contains("tok-"), "a token leaked into the result of {name}: {whole}");
    if result.is_error {
        return;
    }
    let tool = registry.tools().into_iter().find(|t| t.name == name).unwrap();
    if let Some(schema) = &tool.output_schema {
        let schema = Value::Object(schema.as_ref().clone());
        let structured = result.structured.as_ref().expect("structured content");
        let validator = jsonschema::validator_for(&schema).unwrap();
        let errors: Vec<String> = validator.iter_errors(structured).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{name}: structured content breaks its output schema: {errors:?}\n{structured}");
    }
}

async fn call(registry: &dyn ToolSource, context: &ToolContext, name: &str, arguments: Value) -> ToolResult {
    let result = registry.call(name, arguments, context).await;
    check_result(registry, name, &result);
    result
}

/// A call that must succeed: its text and structured content.
async fn ok(registry: &dyn ToolSource, context: &ToolContext, name: &str, arguments: Value) -> (String, Value) {
    let result = call(registry, context, name, arguments.clone()).await;
    let text = text_of(&result);
    assert!(!result.is_error, "{name} {arguments} failed: {text}");
    (text, result.structured.unwrap())
}

/// A call that must fail: its text and the `error` object of its structured content.
async fn fail(registry: &dyn ToolSource, context: &ToolContext, name: &str, arguments: Value) -> (String, Value) {
    let result = call(registry, context, name, arguments.clone()).await;
    let text = text_of(&result);
    assert!(result.is_error, "{name} {arguments} should have failed: {text}");
    let error = result.structured.unwrap()["error"].clone();
    (text, error)
}

#[tokio::test]
async fn task_tools_work_and_fail_usefully() {
    let f = fixture().await;
    let (agent, ctx) = (&f.agent, &f.context);

    // create_task
    let (text, task) = ok(
        agent,
        ctx,
        "create_task",
        json!({"project_slug": "team", "title": "Write the release notes", "priority": "high", "labels": ["docs"]}),
    )
    .await;
    assert_eq!(text, "created TE-1 [todo] Write the release notes (unassigned) high #docs");
    assert_eq!(task["key"], "TE-1");
    let (text, error) = fail(agent, ctx, "create_task", json!({"project_slug": "nope", "title": "x"})).await;
    assert_eq!(error["code"], "not_found", "{text}");
    assert_eq!(error["status"], 404);

    // get_task, by key and by id
    let (text, _) = ok(agent, ctx, "get_task", json!({"task_id": "TE-1"})).await;
    assert!(text.starts_with("TE-1 [todo] Write the release notes (unassigned)"), "{text}");
    assert!(text.contains("(no description)"), "{text}");
    let (_, by_id) = ok(agent, ctx, "get_task", json!({"task_id": task["id"]})).await;
    assert_eq!(by_id["key"], "TE-1");
    let (text, error) = fail(agent, ctx, "get_task", json!({"task_id": "TE-999"})).await;
    assert_eq!(error["code"], "not_found");
    assert!(text.contains("TE-999") && text.contains("check the id or key"), "{text}");

    // update_task: change, then clear the description with null
    let (text, updated) = ok(
        agent,
        ctx,
        "update_task",
        json!({"task_id": "TE-1", "status": "in_progress", "description": "Cover the new tools."}),
    )
    .await;
    assert!(text.starts_with("updated TE-1 [in_progress]"), "{text}");
    assert_eq!(updated["description"], "Cover the new tools.");
    let (_, cleared) = ok(agent, ctx, "update_task", json!({"task_id": "TE-1", "description": null})).await;
    assert_eq!(cleared["description"], Value::Null);
    let (text, error) = fail(agent, ctx, "update_task", json!({"task_id": "TE-1", "assignee_slug": "ghost"})).await;
    assert_eq!(error["code"], "not_found", "{text}");
    let (text, error) = fail(agent, ctx, "update_task", json!({"task_id": "TE-1"})).await;
    assert_eq!(error["code"], "invalid_arguments", "{text}");

    // list_tasks
    ok(
        &f.alice,
        &f.alice_context,
        "create_task",
        json!({"project_slug": "team", "title": "Bob's", "assignee_slug": "bob"}),
    )
    .await;
    let (text, page) = ok(agent, ctx, "list_tasks", json!({"status": ["in_progress"]})).await;
    assert_eq!(text, "1 tasks:\nTE-1 [in_progress] Write the release notes (unassigned) high #docs");
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
    let (text, _) = ok(agent, ctx, "list_tasks", json!({"project_id": "team", "assignee": "bob"})).await;
    assert_eq!(text, "1 tasks:\nTE-2 [todo] Bob's (bob)");
    let (text, error) = fail(agent, ctx, "list_tasks", json!({"cursor": "not-a-cursor"})).await;
    assert_eq!((error["code"].as_str(), error["field"].as_str()), (Some("invalid"), Some("cursor")), "{text}");

    // take_task: free task taken; someone else's is a conflict
    let (text, taken) = ok(agent, ctx, "take_task", json!({"task_id": "TE-1"})).await;
    assert!(text.starts_with("took TE-1"), "{text}");
    assert_eq!(taken["assignee_slug"], "picogent");
    let (text, error) = fail(agent, ctx, "take_task", json!({"task_id": "TE-2"})).await;
    assert_eq!(error["code"], "conflict");
    assert_eq!(error["status"], 409);
    assert!(text.contains("assigned to bob"), "{text}");

    // watch_task
    let (text, watched) = ok(agent, ctx, "watch_task", json!({"task_id": "TE-2"})).await;
    assert!(watched["watchers"].as_array().unwrap().contains(&json!("picogent")), "{text}");
    let (_, error) = fail(agent, ctx, "watch_task", json!({"task_id": "TE-404"})).await;
    assert_eq!(error["code"], "not_found");

    // reject_task: by the assignee, then again (no longer the assignee) is a conflict
    let (text, rejected) = ok(agent, ctx, "reject_task", json!({"task_id": "TE-1", "reason": "needs a human"})).await;
    assert_eq!(text, "rejected TE-1: needs a human");
    assert_eq!(rejected["ok"], true);
    let (_, after) = ok(agent, ctx, "get_task", json!({"task_id": "TE-1"})).await;
    assert_eq!((after["status"].as_str(), after["assignee_slug"].as_str()), (Some("todo"), None));
    let (_, error) = fail(agent, ctx, "reject_task", json!({"task_id": "TE-1", "reason": "again"})).await;
    assert_eq!(error["code"], "conflict");

    // assign_task
    let (text, assigned) = ok(agent, ctx, "assign_task", json!({"task_id": "TE-1", "assignee_slug": "alice"})).await;
    assert!(text.contains("(alice)"), "{text}");
    assert_eq!(assigned["assignee_slug"], "alice");
    let (_, error) = fail(agent, ctx, "assign_task", json!({"task_id": "TE-1", "assignee_slug": "ghost"})).await;
    assert_eq!(error["code"], "not_found");

    f.board.shutdown().await.unwrap();
}

#[tokio::test]
async fn step_tools_work_and_fail_usefully() {
    let f = fixture().await;
    let (agent, ctx) = (&f.agent, &f.context);
    ok(agent, ctx, "create_task", json!({"project_slug": "team", "title": "Plan"})).await;

    let (text, first) = ok(agent, ctx, "add_step", json!({"task_id": "TE-1", "title": "Read the issue"})).await;
    assert!(text.starts_with("added [ ] "), "{text}");
    let (_, second) = ok(agent, ctx, "add_step", json!({"task_id": "TE-1", "title": "Write it"})).await;
    let (_, error) = fail(agent, ctx, "add_step", json!({"task_id": "TE-999", "title": "x"})).await;
    assert_eq!(error["code"], "not_found");

    let (text, done) = ok(agent, ctx, "complete_step", json!({"task_id": "TE-1", "step_id": first["id"]})).await;
    assert!(text.starts_with("completed [x]"), "{text}");
    assert_eq!(done["done"], true);
    let (text, error) = fail(agent, ctx, "complete_step", json!({"task_id": "TE-1", "step_id": "no-such-step"})).await;
    // A made-up id is answered with how to find the right one.
    assert!(text.contains("list_steps"), "{text}");
    assert_eq!(error["code"], "not_found");

    let (text, renamed) =
        ok(agent, ctx, "update_step", json!({"task_id": "TE-1", "step_id": second["id"], "title": "Write it well"}))
            .await;
    assert!(text.contains("Write it well"), "{text}");
    assert_eq!(renamed["done"], false);
    let (_, error) = fail(agent, ctx, "update_step", json!({"task_id": "TE-1", "step_id": "nope", "done": true})).await;
    assert_eq!(error["code"], "not_found");

    let (text, listed) = ok(agent, ctx, "list_steps", json!({"task_id": "TE-1"})).await;
    assert!(text.starts_with("2 steps:\n[x] "), "{text}");
    assert!(text.ends_with("1 of 2 done"), "{text}");
    assert_eq!(listed["steps"].as_array().unwrap().len(), 2);
    let (_, error) = fail(agent, ctx, "list_steps", json!({"task_id": "TE-999"})).await;
    assert_eq!(error["code"], "not_found");

    f.board.shutdown().await.unwrap();
}

#[tokio::test]
async fn message_tools_work_and_fail_usefully() {
    let f = fixture().await;
    let (agent, ctx) = (&f.agent, &f.context);
    let (_, project) = ok(agent, ctx, "get_project", json!({"slug": "team"})).await;
    let chat_id = project["chat_id"].as_str().unwrap().to_string();
    ok(agent, ctx, "create_task", json!({"project_slug": "team", "title": "Talk"})).await;

    let (text, first) =
        ok(agent, ctx, "send_message", json!({"chat_id": chat_id, "content": "hello @alice", "mentions": ["bob"]}))
            .await;
    assert!(text.starts_with("sent msg ") && text.ends_with("hello @alice"), "{text}");
    let mut mentions: Vec<String> = serde_json::from_value(first["mentions"].clone()).unwrap();
    mentions.sort();
    assert_eq!(mentions, ["alice", "bob"]);
    let (_, comment) = ok(agent, ctx, "send_message", json!({"task_id": "TE-1", "content": "a comment"})).await;
    assert!(comment["task_id"].is_string());
    let (text, error) =
        fail(agent, ctx, "send_message", json!({"chat_id": chat_id, "task_id": "TE-1", "content": "x"})).await;
    assert_eq!(error["code"], "invalid_arguments");
    assert!(text.contains("exactly one of chat_id, task_id, parent_id"), "{text}");
    let (_, error) = fail(agent, ctx, "send_message", json!({"task_id": "TE-999", "content": "x"})).await;
    assert_eq!(error["code"], "not_found");

    let (text, reply) =
        ok(&f.alice, &f.alice_context, "reply_message", json!({"parent_id": first["id"], "content": "hi"})).await;
    assert!(text.contains(&format!("(reply to {})", first["id"].as_str().unwrap())), "{text}");
    assert_eq!(reply["parent_id"], first["id"]);
    let (_, error) = fail(agent, ctx, "reply_message", json!({"parent_id": "no-such-message", "content": "x"})).await;
    assert_eq!(error["code"], "not_found");

    let (text, listed) = ok(agent, ctx, "list_messages", json!({"chat_id": chat_id})).await;
    assert!(text.starts_with("2 messages:\nmsg "), "{text}");
    assert_eq!(listed["messages"].as_array().unwrap().len(), 2);
    let (text, _) = ok(agent, ctx, "list_messages", json!({"parent_id": first["id"]})).await;
    assert!(text.starts_with("2 messages:"), "{text}");
    let (text, _) = ok(agent, ctx, "list_messages", json!({"mentioning": "alice", "limit": 10})).await;
    assert!(text.starts_with("1 messages:"), "{text}");
    let (text, _) = ok(agent, ctx, "list_messages", json!({"task_id": "TE-1"})).await;
    assert!(text.starts_with("1 messages:") && text.ends_with("a comment"), "{text}");
    let (_, error) = fail(agent, ctx, "list_messages", json!({})).await;
    assert_eq!(error["code"], "invalid_arguments");
    let (_, error) = fail(agent, ctx, "list_messages", json!({"task_id": "TE-999"})).await;
    assert_eq!(error["code"], "not_found");

    f.board.shutdown().await.unwrap();
}

#[tokio::test]
async fn project_and_member_tools_work_and_fail_usefully() {
    let f = fixture().await;
    let (agent, ctx) = (&f.agent, &f.context);

    let (text, projects) = ok(agent, ctx, "list_projects", json!({})).await;
    assert!(text.starts_with("1 projects:\nteam TE Team"), "{text}");
    assert_eq!(projects["projects"].as_array().unwrap().len(), 1);
    let (text, _) = ok(agent, ctx, "get_project", json!({"slug": "team"})).await;
    assert!(text.starts_with("team TE Team"), "{text}");
    let (_, error) = fail(agent, ctx, "get_project", json!({"slug": "nope"})).await;
    assert_eq!(error["code"], "not_found");

    // No arguments at all (null) is fine for a tool that takes none.
    let (text, members) = ok(agent, ctx, "list_members", Value::Null).await;
    assert!(text.starts_with("4 members:"), "{text}");
    assert!(text.contains("alice (human) Alice") && text.contains("picogent (agent)"), "{text}");
    assert_eq!(members["members"].as_array().unwrap().len(), 4);
    let (_, error) = fail(agent, ctx, "list_members", json!({"everyone": true})).await;
    assert_eq!(error["code"], "invalid_arguments");

    let (text, _) = ok(agent, ctx, "get_member", json!({"slug": "alice"})).await;
    assert_eq!(text, "alice (human) Alice");
    let (_, error) = fail(agent, ctx, "get_member", json!({"slug": "ghost"})).await;
    assert_eq!(error["code"], "not_found");

    let (text, status) = ok(agent, ctx, "update_my_status", json!({"status": "planning TE-1"})).await;
    assert_eq!(text, "status: planning TE-1");
    assert_eq!(status["status"], "planning TE-1");
    let (text, _) = ok(agent, ctx, "get_member", json!({"slug": "me"})).await;
    assert_eq!(text, "picogent (agent) picogent: planning TE-1");
    let (text, error) = fail(agent, ctx, "update_my_status", json!({"status": "x".repeat(201)})).await;
    assert_eq!(error["fields"], json!(["status"]), "{text}");

    // A token the tracker does not know: an error result that does not repeat the token.
    let stranger = registry_for(&f.board.url(), "tok-unknown-123", MAX_RESULT_BYTES);
    let (text, error) = fail(&stranger, ctx, "list_members", json!({})).await;
    assert_eq!((error["code"].as_str(), error["status"].as_u64()), (Some("unauthorized"), Some(401)), "{text}");
    assert!(text.contains("tell a human"), "{text}");

    f.board.shutdown().await.unwrap();
}

#[tokio::test]
async fn file_tools_work_and_fail_usefully() {
    let f = fixture().await;
    let (agent, ctx) = (&f.agent, &f.context);
    ok(agent, ctx, "create_task", json!({"project_slug": "team", "title": "Files"})).await;
    let (_, message) = ok(agent, ctx, "send_message", json!({"task_id": "TE-1", "content": "notes attached"})).await;
    let message_id = message["id"].as_str().unwrap().to_string();

    let (text, file) = ok(
        agent,
        ctx,
        "upload_file",
        json!({"message_id": message_id, "filename": "notes.txt", "content": "line one\nline two", "mime_type": "text/plain"}),
    )
    .await;
    assert!(text.starts_with("uploaded ") && text.contains("notes.txt text/plain 17 bytes"), "{text}");
    let (_, binary) = ok(
        agent,
        ctx,
        "upload_file",
        json!({"message_id": message_id, "filename": "blob.bin", "content": "AAEC/w==", "base64": true,
               "mime_type": "application/octet-stream"}),
    )
    .await;
    let (_, error) =
        fail(agent, ctx, "upload_file", json!({"message_id": "no-such-message", "filename": "a.txt", "content": "x"}))
            .await;
    assert_eq!(error["code"], "not_found");
    let (text, error) = fail(
        agent,
        ctx,
        "upload_file",
        json!({"message_id": message_id, "filename": "a.bin", "content": "not base64!", "base64": true}),
    )
    .await;
    assert_eq!(error["fields"], json!(["content"]), "{text}");

    let (text, listed) = ok(agent, ctx, "list_files", json!({"message_id": message_id})).await;
    assert!(text.starts_with("2 files:"), "{text}");
    assert_eq!(listed["files"].as_array().unwrap().len(), 2);
    let (text, _) = ok(agent, ctx, "list_files", json!({"task_id": "TE-1"})).await;
    assert!(text.starts_with("2 files:"), "{text}");
    let (_, error) = fail(agent, ctx, "list_files", json!({"task_id": "TE-1", "message_id": message_id})).await;
    assert_eq!(error["code"], "invalid_arguments");
    let (_, error) = fail(agent, ctx, "list_files", json!({"project_id": "nope"})).await;
    assert_eq!(error["code"], "not_found");

    let (text, content) = ok(agent, ctx, "download_file", json!({"file_id": file["id"]})).await;
    assert_eq!(text, "notes.txt (text/plain, 17 bytes):\nline one\nline two");
    assert_eq!(content["content"], "bGluZSBvbmUKbGluZSB0d28=");
    let (text, _) = ok(agent, ctx, "download_file", json!({"file_id": binary["id"]})).await;
    assert!(text.starts_with("blob.bin (application/octet-stream, 4 bytes): binary"), "{text}");
    let (_, error) = fail(agent, ctx, "download_file", json!({"file_id": "no-such-file"})).await;
    assert_eq!(error["code"], "not_found");

    f.board.shutdown().await.unwrap();
}

#[tokio::test]
async fn bad_arguments_are_refused_naming_the_field() {
    let f = fixture().await;
    ok(&f.agent, &f.context, "create_task", json!({"project_slug": "team", "title": "Target"})).await;
    // (tool, arguments, field named, words the message must carry)
    let cases: Vec<(&str, Value, &str, &str)> = vec![
        ("get_task", json!({}), "task_id", "expected a string (got nothing; it is required)"),
        ("get_task", json!({"task_id": 15}), "task_id", "expected a string (got a number 15)"),
        ("update_task", json!({"task_id": "TE-1", "status": "doing"}), "status", "one of: backlog, todo"),
        ("list_tasks", json!({"status": ["todo", "doing"]}), "status[1]", "one of: backlog, todo"),
        ("create_task", json!({"project_slug": "team", "title": "x", "priority": "asap"}), "priority", "urgent"),
        (
            "get_task",
            json!({"task_id": "TE-1", "verbose": true}),
            "verbose",
            "is not a field of this tool; its fields are: task_id",
        ),
        ("create_task", json!({"project_slug": "team", "title": "t".repeat(201)}), "title", "at most 200 characters"),
        ("reject_task", json!({"task_id": "TE-1", "reason": "r".repeat(2001)}), "reason", "at most 2000 characters"),
        ("list_tasks", json!({"limit": 0}), "limit", "an integer from 1 to 200"),
        ("update_step", json!({"task_id": "TE-1", "step_id": "s", "done": "yes"}), "done", "true or false"),
        (
            "create_task",
            json!({"project_slug": "team", "title": "x", "labels": ["ok", "l".repeat(51)]}),
            "labels[1]",
            "at most 50 characters",
        ),
    ];
    for (tool, arguments, field, words) in cases {
        let (text, error) = fail(&f.agent, &f.context, tool, arguments.clone()).await;
        assert_eq!(error["code"], "invalid_arguments", "{tool} {arguments}: {text}");
        assert!(text.contains(&format!("field `{field}`")), "{tool} {arguments}: {text}");
        assert_eq!(error["fields"], json!([field]), "{tool} {arguments}: {text}");
        assert!(text.contains(words), "{tool} {arguments}: expected {words:?} in {text}");
    }
    // A model that sends unset optional fields as null means "left out".
    ok(&f.agent, &f.context, "list_tasks", json!({"status": null, "limit": null, "cursor": null})).await;
    // Nothing was created by the refused calls.
    let (text, _) = ok(&f.agent, &f.context, "list_tasks", json!({})).await;
    assert_eq!(text, "1 tasks:\nTE-1 [todo] Target (unassigned)");
    f.board.shutdown().await.unwrap();
}

#[tokio::test]
async fn acting_as_another_member_is_refused_before_any_request() {
    let f = fixture().await;
    ok(&f.alice, &f.alice_context, "create_task", json!({"project_slug": "team", "title": "Free"})).await;
    for tool in ["take_task", "watch_task"] {
        let (text, error) = fail(&f.agent, &f.context, tool, json!({"task_id": "TE-1", "agent_slug": "alice"})).await;
        assert_eq!(error["code"], "refused", "{text}");
        assert!(text.contains("as yourself (picogent), not as alice"), "{text}");
    }
    let (_, task) = ok(&f.agent, &f.context, "get_task", json!({"task_id": "TE-1"})).await;
    assert_eq!(task["assignee_slug"], Value::Null);
    assert_eq!(task["watchers"], json!([]));
    // Naming yourself is fine.
    let (_, task) = ok(&f.agent, &f.context, "take_task", json!({"task_id": "TE-1", "agent_slug": "picogent"})).await;
    assert_eq!(task["assignee_slug"], "picogent");

    // No request is made at all: against a tracker that is not there the refusal is the same.
    let nowhere = registry_for("http://127.0.0.1:9", "tok-picogent", MAX_RESULT_BYTES);
    let (_, error) = fail(&nowhere, &f.context, "take_task", json!({"task_id": "TE-1", "agent_slug": "bob"})).await;
    assert_eq!(error["code"], "refused");
    f.board.shutdown().await.unwrap();
}

#[tokio::test]
async fn names_policy_and_subsets() {
    let f = fixture().await;
    // Unknown names come back with the closest ones.
    let (text, error) = fail(&f.agent, &f.context, "get_tsk", json!({"task_id": "TE-1"})).await;
    assert_eq!(error["code"], "unknown_tool");
    assert_eq!(error["suggestions"][0], "get_task", "{text}");

    // A denied tool is not offered and a call to it is refused.
    let policy = Policy {
        allowed_tools: vec![],
        disallowed_tools: vec!["*_task".into(), "upload_?ile".into()],
        mode: picogent::config::PermissionMode::Auto,
        ask_tools: vec![],
    };
    let limited = governed(registry_for(&f.board.url(), "tok-picogent", MAX_RESULT_BYTES), policy);
    let names: Vec<String> = limited.tools().iter().map(|tool| tool.name.to_string()).collect();
    let offered: Vec<&str> = names.iter().map(String::as_str).collect();
    assert!(!offered.contains(&"take_task") && !offered.contains(&"upload_file"), "{offered:?}");
    assert!(offered.contains(&"list_tasks") && offered.contains(&"add_step"), "{offered:?}");
    let (text, error) = fail(&limited, &f.context, "create_task", json!({"project_slug": "team", "title": "x"})).await;
    assert_eq!(error["code"], "refused");
    assert!(text.contains("policy"), "{text}");
    let (text, _) = ok(&f.agent, &f.context, "list_tasks", json!({})).await;
    assert_eq!(text, "no tasks", "the refused call must not have created anything");

    // A subset offers fewer tools, in the fixed order, and refuses the others.
    let chat = f.agent.subset(CHAT_REPLY_TOOLS).unwrap();
    assert_eq!(chat.offered_names().len(), CHAT_REPLY_TOOLS.len());
    let (text, error) = fail(&chat, &f.context, "create_task", json!({"project_slug": "team", "title": "x"})).await;
    assert_eq!(error["code"], "refused");
    assert!(text.contains("not offered for this kind of run"), "{text}");
    ok(&chat, &f.context, "list_members", json!({})).await;
    let task_run = f.agent.subset(TASK_RUN_TOOLS).unwrap();
    assert!(task_run.offered_names().contains(&"take_task"));
    assert!(f.agent.subset(&["no_such_tool"]).is_err());
    let steps_only = f.agent.groups(&[picogent::tools::ToolGroup::Steps]);
    assert_eq!(steps_only.offered_names(), ["list_steps", "add_step", "complete_step", "update_step"]);
    f.board.shutdown().await.unwrap();
}

#[tokio::test]
async fn long_results_are_cut_with_a_paging_line() {
    let f = fixture().await;
    for n in 0..30 {
        let title = format!("task {n} {}", "é".repeat(150));
        ok(&f.agent, &f.context, "create_task", json!({"project_slug": "team", "title": title})).await;
    }
    let small = registry_for(&f.board.url(), "tok-picogent", 1_000);
    let (text, page) = ok(&small, &f.context, "list_tasks", json!({"limit": 30})).await;
    assert!(text.len() <= 1_000, "{} bytes", text.len());
    assert!(text.starts_with("30 tasks:"), "{text}");
    assert!(text.contains("bytes left out; use a smaller limit and page with cursor]"), "{text}");
    // The structured content is whole.
    assert_eq!(page["items"].as_array().unwrap().len(), 30);

    // Paging: a page of 10 says how to get the next.
    let (text, page) = ok(&f.agent, &f.context, "list_tasks", json!({"limit": 10})).await;
    let cursor = page["next_cursor"].as_str().unwrap();
    assert!(text.ends_with(&format!("more: call list_tasks with cursor \"{cursor}\"")), "{text}");
    let (text, _) = ok(&f.agent, &f.context, "list_tasks", json!({"limit": 10, "cursor": cursor})).await;
    assert!(text.starts_with("10 tasks:\nTE-11 "), "{text}");
    f.board.shutdown().await.unwrap();
}

#[tokio::test]
async fn writes_use_the_idempotency_key_of_the_context() {
    let f = fixture().await;
    let mut context = ToolContext::new("picogent");
    context.idempotency_key = Some("run-1-call-1".into());
    let arguments = json!({"project_slug": "team", "title": "Once"});
    let (_, first) = ok(&f.agent, &context, "create_task", arguments.clone()).await;
    let (_, again) = ok(&f.agent, &context, "create_task", arguments).await;
    assert_eq!(first["id"], again["id"]);
    let (text, _) = ok(&f.agent, &f.context, "list_tasks", json!({})).await;
    assert_eq!(text, "1 tasks:\nTE-1 [todo] Once (unassigned)");
    f.board.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_unreachable_or_silent_tracker_is_an_error_result() {
    let context = ToolContext::new("picogent");
    // Nothing listens on a port we bound and closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let gone = registry_for(&format!("http://127.0.0.1:{port}"), "tok-picogent", 8192);
    let (text, error) = fail(&gone, &context, "get_task", json!({"task_id": "TE-1"})).await;
    assert_eq!(error["code"], "unreachable", "{text}");

    // A server that accepts and never answers: the call times out.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            open.push(socket);
        }
    });
    let client = TrackerClient::new(&tracker_config(&url, 200), Secret::new("tok-picogent")).unwrap();
    let slow = Registry::new(client, 8192).unwrap();
    let (text, error) = fail(&slow, &context, "create_task", json!({"project_slug": "team", "title": "x"})).await;
    assert_eq!(error["code"], "timeout", "{text}");
    assert!(text.contains("check before repeating"), "{text}");
    held.abort();
}

#[tokio::test]
async fn a_cancelled_run_stops_the_call() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            open.push(socket);
        }
    });
    let client = TrackerClient::new(&tracker_config(&url, 60_000), Secret::new("tok-picogent")).unwrap();
    let registry = Registry::new(client, 8192).unwrap();
    let context = ToolContext::new("picogent");
    context.cancel.cancel();
    let (text, error) = fail(&registry, &context, "get_task", json!({"task_id": "TE-1"})).await;
    assert_eq!(error["code"], "cancelled", "{text}");
    held.abort();
}

// ---- the CLI ----

async fn picogent(args: &[&str], token: Option<&str>) -> (i32, String, String) {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_picogent"));
    command.args(args).env_remove("TEAMBOARD_TOKEN").env("RUST_LOG", "warn");
    if let Some(token) = token {
        command.env("TEAMBOARD_TOKEN", token);
    }
    let output = command.output().await.unwrap();
    (
        output.status.code().unwrap(),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

#[tokio::test]
async fn the_cli_lists_and_calls_tools_with_exit_codes() {
    let (code, stdout, _) = picogent(&["tools", "list", "--tokens"], None).await;
    assert_eq!(code, 0);
    assert_eq!(stdout.lines().count(), 24, "{stdout}");
    let total_line = stdout.lines().last().unwrap();
    let total: u64 = total_line.strip_prefix("total: ").unwrap().split(' ').next().unwrap().parse().unwrap();
    assert!(total <= 2_000, "{total_line}");
    assert_eq!(total, count_tools_json_tokens(&specs(&registry_for("http://127.0.0.1:9", "x", 8192).definitions())));
    let (code, stdout, _) = picogent(&["tools", "list", "--json", "--tokens"], None).await;
    assert_eq!(code, 0);
    let listed: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(listed["tools"].as_array().unwrap().len(), 23);
    assert_eq!(listed["tokens"]["total"], total);

    let f = fixture().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agent.json");
    let text = json!({
        "slug": "picogent", "name": "Picogent",
        "tracker": {"url": f.board.url(), "retry": {"max_attempts": 1}},
        "llm": {"base_url": "http://127.0.0.1:9/v1", "model": "offline-planner"}
    });
    std::fs::write(&config, text.to_string()).unwrap();
    let config = config.to_str().unwrap();

    let (code, stdout, stderr) = picogent(
        &["tools", "call", "create_task", r#"{"project_slug": "team", "title": "From the CLI"}"#, "--config", config],
        Some("tok-picogent"),
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "created TE-1 [todo] From the CLI (unassigned)\n");
    let (code, stdout, _) = picogent(
        &["tools", "call", "get_task", r#"{"task_id": "TE-1"}"#, "--config", config, "--json"],
        Some("tok-picogent"),
    )
    .await;
    assert_eq!(code, 0);
    let task: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(task["created_by"], "picogent");

    // An error result: exit code 1, the message on stdout.
    let (code, stdout, _) =
        picogent(&["tools", "call", "get_task", r#"{"task_id": "TE-99"}"#, "--config", config], Some("tok-picogent"))
            .await;
    assert_eq!(code, 1);
    assert!(stdout.contains("not found"), "{stdout}");
    let (code, stdout, _) = picogent(
        &["tools", "call", "get_task", r#"{"task_id": "TE-1", "x": 1}"#, "--config", config],
        Some("tok-picogent"),
    )
    .await;
    assert_eq!(code, 1);
    assert!(stdout.contains("field `x`"), "{stdout}");

    // Bad usage: exit code 2.
    let (code, _, stderr) =
        picogent(&["tools", "call", "get_task", "{not json", "--config", config], Some("tok-picogent")).await;
    assert_eq!(code, 2);
    assert!(stderr.contains("not valid JSON"), "{stderr}");
    let (code, _, stderr) =
        picogent(&["tools", "call", "get_task", "[1]", "--config", config], Some("tok-picogent")).await;
    assert_eq!(code, 2, "{stderr}");
    let (code, _, stderr) = picogent(&["tools", "call", "get_task", "{}", "--config", config], None).await;
    assert_eq!(code, 2);
    assert!(stderr.contains("TEAMBOARD_TOKEN"), "{stderr}");
    let (code, _, _) = picogent(&["tools", "frobnicate"], None).await;
    assert_eq!(code, 2);

    f.board.shutdown().await.unwrap();
}

/// The tool definitions' cost in prompt tokens, counted as the OpenAI adapter sends them.
#[test]
fn token_budgets_hold() {
    let catalog = picogent::tools::Catalog::new().unwrap();
    let all = count_tools_json_tokens(&specs(&catalog.definitions()));
    let task_run = count_tools_json_tokens(&specs(&catalog.subset(TASK_RUN_TOOLS).unwrap().definitions()));
    let chat = count_tools_json_tokens(&specs(&catalog.subset(CHAT_REPLY_TOOLS).unwrap().definitions()));
    println!("tokens: all {all}, task run {task_run}, chat {chat}");
    for tool in catalog.definitions() {
        println!("{} {}", count_tools_json_tokens(&[tool.spec()]), tool.name);
    }
    assert!(all <= 2_000, "all 23 tools take {all} tokens");
    assert!(task_run <= 1_500, "the task-run preset takes {task_run} tokens");
    assert!(chat <= 900, "the chat preset takes {chat} tokens");
}
