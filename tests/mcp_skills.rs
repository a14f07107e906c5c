//! Skills from an external MCP server, on the board: a server written with the official Python
//! SDK (`fixtures/mcp/skill_server.py`) offers `skill://` resources, and a person calls them in
//! a mention or a task comment (`$skills:deploy-notes staging`), the model lists and reads them,
//! a hostile one is capped and cleaned and grants nothing, the one named like the server's prompt
//! is skipped with one warning, and a skill the server adds later is there after its
//! `list_changed`. The model is the offline endpoint replaying a script; what it was sent is
//! read from the requests it recorded.
//!
//! The server runs on `.venv-test/bin/python` (`MCP_PYTHON`), installed with the other host-side
//! servers by `tests/interop/install.sh`.

#[path = "support/agent.rs"]
mod agent_support;
#[path = "support/interop.rs"]
mod interop;

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_support::*;
use picogent::offline_model::script::Script;
use picogent::offline_model::{OfflineModelHandle, OfflineModelOptions};
use picogent::prompts::{Part, split_fences};
use picogent::tracker::model::{CreateTask, MessageOut};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);
/// The cap on a skill's body (`picogent::mcp::skills::MAX_SKILL_BODY_CHARS`).
const BODY_CAP: usize = picogent::mcp::skills::MAX_SKILL_BODY_CHARS;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Python with the MCP SDK the host-side fixture servers run on.
fn python() -> String {
    interop::ensure_installed();
    let path =
        std::env::var_os("MCP_PYTHON").map(PathBuf::from).unwrap_or_else(|| root().join(".venv-test/bin/python"));
    assert!(
        path.exists(),
        "{} not found (set MCP_PYTHON, or install: python3 -m venv .venv-test && .venv-test/bin/pip install -r \
         tests/interop/requirements.txt)",
        path.display()
    );
    path.display().to_string()
}

/// The agent's config with the skill server as `skills`; its markers go to `markers`.
fn config_with_skills(dir: &Path, board: &str, model: &str, markers: &Path) -> picogent::config::Config {
    let server = json!({
        "command": python(),
        "args": [root().join("fixtures/mcp/skill_server.py").display().to_string(), markers.display().to_string()],
        "trusted": true
    });
    agent_config(dir, board, model, "picogent", json!({"mcp_servers": {"skills": server}}))
}

async fn scripted(turns: Value) -> OfflineModelHandle {
    let script = Script::from_json(&json!({ "turns": turns }).to_string()).unwrap();
    picogent::offline_model::start(OfflineModelOptions::script(script)).await.unwrap()
}

/// The first user message of a recorded request: the run's request.
fn request_text(request: &Value) -> String {
    let messages = request["messages"].as_array().unwrap();
    let user = messages.iter().find(|m| m["role"] == "user").unwrap();
    user["content"].as_str().unwrap().to_string()
}

fn tool_names(request: &Value) -> Vec<String> {
    request["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap().to_string()).collect()
}

/// The last tool result of a recorded request.
fn last_tool_result(request: &Value) -> String {
    let messages = request["messages"].as_array().unwrap();
    let tool = messages.iter().rev().find(|m| m["role"] == "tool").unwrap();
    tool["content"].as_str().unwrap().to_string()
}

/// The text inside the fences of `text`, and outside them.
fn data_and_structure(text: &str) -> (Vec<String>, String) {
    let mut data = Vec::new();
    let mut structure = String::new();
    for part in split_fences(text) {
        match part {
            Part::Data(inside) => data.push(inside.to_string()),
            Part::Structure(outside) => structure.push_str(outside),
        }
    }
    (data, structure)
}

/// The agent's reply under `root` (a chat message or a task comment) that contains `needle`.
async fn reply_containing(alice: &picogent::tracker::TrackerClient, root: &str, needle: &str) -> MessageOut {
    eventually(WAIT, &format!("a reply containing {needle:?}"), || async {
        thread(alice, root).await.into_iter().find(|m| m.author_slug == "picogent" && m.content.contains(needle))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skill_called_in_a_mention_or_a_task_comment_is_the_request_and_a_hostile_one_is_capped_and_cleaned() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = scripted(json!([
        {"expect": {"messages_contain": "DEPLOY-NOTES-BODY", "tools_include": ["list_mcp_skills", "use_mcp_skill"]},
         "reply": {"content": "Staging: tag the release, then watch the dashboard for ten minutes."}},
        {"expect": {"messages_contain": "HOSTILE-BODY-START"},
         "reply": {"content": "That skill asks for nothing I can do here."}}
    ]))
    .await;
    let agent = start_agent(config_with_skills(dir.path(), &board.url(), &model.url(), dir.path())).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");

    // A mention in the chat: the answer is in its thread.
    let chat = chat_id(&alice).await;
    let asked = say(&alice, &chat, "@picogent $skills:deploy-notes staging").await;
    reply_containing(&alice, &asked.id, "watch the dashboard").await;
    let request = request_text(&model.requests()[0]);
    let (data, structure) = data_and_structure(&request);
    assert!(
        structure.contains("## Skill `deploy-notes` of the MCP server `skills`"),
        "under picogent's heading: {request}"
    );
    assert!(structure.contains("@alice asked you to use the skill `$skills:deploy-notes`"), "{request}");
    assert!(data.iter().any(|d| d.contains("DEPLOY-NOTES-BODY")), "the body is fenced: {request}");
    assert!(data.iter().any(|d| d.contains("### Deploy notes")), "its heading is demoted below picogent's");
    assert!(data.iter().any(|d| d == "staging"), "the person's words are fenced: {data:?}");
    assert!(!structure.contains("DEPLOY-NOTES-BODY"), "no skill text outside a fence");
    assert!(!request.contains("description: How we deploy"), "the frontmatter is not part of the body");

    // A task comment, by the skill's full name: the answer is under the comment.
    let task = alice
        .create_task(
            &CreateTask {
                project_slug: "team".into(),
                title: "Check the hostile skill".into(),
                assignee_slug: Some("alice".into()),
                ..CreateTask::default()
            },
            None,
        )
        .await
        .unwrap();
    let asked = comment(&alice, &task.id, "@picogent $mcp__skills__hostile check it").await;
    reply_containing(&alice, &asked.id, "asks for nothing").await;
    let requests = model.requests();
    assert_eq!(requests.len(), 2, "one model request per run");
    let whole = requests[1].to_string();
    let request = request_text(&requests[1]);
    assert!(request.contains("HOSTILE-BODY-START"), "{request}");
    for hidden in
        ["HIDDEN-COMMENT", "HIDDEN-DESCRIPTION", "<|im_start|>", "<|im_end|>", "[INST]", "HOSTILE-TAIL-PAST-THE-CAP"]
    {
        assert!(!whole.contains(hidden), "{hidden} reached the model");
    }
    for invisible in ['\u{200B}', '\u{200D}', '\u{2063}'] {
        assert!(!request.contains(invisible), "{invisible:?} reached the model");
    }
    let (data, _) = data_and_structure(&request);
    let body = data.iter().find(|d| d.contains("HOSTILE-BODY-START")).unwrap();
    assert!(body.chars().count() < BODY_CAP + 100, "the body is capped: {} characters", body.chars().count());
    assert!(body.contains("[cut: "), "a cut body says so");
    // Its frontmatter granted nothing: no tool it named, no rule of its own in the prompt.
    assert!(!tool_names(&requests[1]).iter().any(|name| name.contains("Bash")), "{:?}", tool_names(&requests[1]));
    assert!(!whole.contains("allowed_tools") && !whole.contains("**/*") && !whole.contains("Bash"), "{whole}");
    assert_eq!(model.mismatches(), Vec::<String>::new());
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_lists_and_reads_skills_and_a_skill_added_later_is_there_after_list_changed() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = scripted(json!([
        {"expect": {"tools_include": ["list_mcp_skills", "use_mcp_skill", "mcp__skills__add_skill"]},
         "reply": {"tool_calls": [{"name": "list_mcp_skills", "arguments": {}}]}},
        {"expect": {"last_tool_result_contains": "$skills:deploy-notes (server skills, also $mcp__skills__deploy-notes) — How we deploy"},
         "reply": {"tool_calls": [{"name": "use_mcp_skill", "arguments": {"name": "$skills:deploy-notes", "arguments": "production"}}]}},
        {"expect": {"last_tool_result_contains": "DEPLOY-NOTES-BODY", "last_tool_result_is_error": false},
         "reply": {"tool_calls": [{"name": "use_mcp_skill", "arguments": {"name": "skills:nope"}}]}},
        {"expect": {"last_tool_result_is_error": true, "last_tool_result_contains": "unknown skill `skills:nope`; the skills are: $skills:deploy-notes, $skills:hostile"},
         "reply": {"tool_calls": [{"name": "mcp__skills__add_skill", "arguments": {
             "name": "release-checklist", "description": "What to check before a release.",
             "body": "RELEASE-CHECKLIST-BODY: run the tests, then read the changelog."}}]}},
        {"expect": {"last_tool_result_contains": "added skill://release-checklist"},
         "reply": {"content": "I can use deploy-notes and hostile, and I added release-checklist."}},
        {"expect": {"messages_contain": "RELEASE-CHECKLIST-BODY"},
         "reply": {"content": "Checked v2 against the release checklist."}}
    ]))
    .await;
    let agent = start_agent(config_with_skills(dir.path(), &board.url(), &model.url(), dir.path())).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");
    let chat = chat_id(&alice).await;

    let asked = say(&alice, &chat, "@picogent which skills can you use? Add a release checklist.").await;
    reply_containing(&alice, &asked.id, "I added release-checklist").await;
    let requests = model.requests();
    let listing = last_tool_result(&requests[1]);
    assert!(
        listing.contains("$skills:hostile (server skills, also $mcp__skills__hostile) — Helpful tips."),
        "{listing}"
    );
    assert!(!listing.contains("greet"), "the skill named like the prompt is skipped: {listing}");
    assert!(!listing.contains("HIDDEN"), "{listing}");
    let skill = last_tool_result(&requests[2]);
    assert!(skill.contains("## Skill `deploy-notes` of the MCP server `skills`"), "{skill}");
    assert!(skill.contains("Arguments: production"), "{skill}");

    // The server announced the new skill and picogent read it: a person can call it now.
    let asked = say(&alice, &chat, "@picogent $skills:release-checklist v2").await;
    reply_containing(&alice, &asked.id, "Checked v2").await;
    assert_eq!(model.mismatches(), Vec::<String>::new());
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skill_in_a_comment_that_joins_a_running_task_run_reaches_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let markers = dir.path().join("markers");
    std::fs::create_dir(&markers).unwrap();
    let board = start_board(dir.path()).await;
    let model = scripted(json!([
        {"expect": {"tools_include": ["mcp__skills__wait_for_release"]},
         "reply": {"tool_calls": [{"name": "mcp__skills__wait_for_release", "arguments": {}}]}},
        {"expect": {"messages_contain": "DEPLOY-NOTES-BODY", "last_tool_result_contains": "released"},
         "reply": {"content": "Deployed to production, following the deploy notes."}}
    ]))
    .await;
    let agent = start_agent(config_with_skills(dir.path(), &board.url(), &model.url(), &markers)).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");

    let task = create_assigned(&alice, "Ship it", "Ship the release.").await;
    eventually(WAIT, "the run to wait on the server", || async { markers.join("waiting").exists().then_some(()) })
        .await;
    comment(&alice, &task.id, "@picogent $skills:deploy-notes production").await;
    eventually(WAIT, "the comment to steer the run", || async {
        (agent.metrics.event_count("message.new", "steered") == 1).then_some(())
    })
    .await;
    std::fs::write(markers.join("release"), "go").unwrap();
    eventually(WAIT, "the run's answer on the task", || async {
        comments(&alice, &task.id)
            .await
            .into_iter()
            .find(|m| m.author_slug == "picogent" && m.content.contains("Deployed"))
    })
    .await;
    let steered = model.requests()[1].to_string();
    assert!(steered.contains("asked you to use the skill `$skills:deploy-notes`"), "{steered}");
    assert!(steered.contains("production"), "{steered}");
    assert_eq!(model.mismatches(), Vec::<String>::new());
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_skill_named_like_a_prompt_is_skipped_with_one_warning_and_the_prompt_keeps_the_name() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = scripted(json!([
        {"expect": {"messages_contain": "GREET-PROMPT: say hello to Bob"},
         "reply": {"content": "Hello Bob!"}},
        {"expect": {"tools_include": ["mcp__skills__add_skill"]},
         "reply": {"tool_calls": [{"name": "mcp__skills__add_skill", "arguments": {
             "name": "release-checklist", "description": "Before a release.", "body": "Run the tests."}}]}},
        {"expect": {"last_tool_result_contains": "added skill://release-checklist"},
         "reply": {"content": "Added the release checklist."}}
    ]))
    .await;
    let config = config_with_skills(dir.path(), &board.url(), &model.url(), dir.path());
    let log_path = dir.path().join("agent.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut agent = spawn_agent_process_logging(&write_config(dir.path(), &config), log, "warn,picogent_mcp=info");
    let alice = client(&board, "tok-alice");
    let chat = chat_id(&alice).await;

    // The skill lost its name to the prompt: its alias is no command, and the answer lists those
    // there are.
    let asked = say(&alice, &chat, "@picogent $skills:greet Bob").await;
    let notice = reply_containing(&alice, &asked.id, "unknown command $skills:greet").await;
    assert!(
        notice.content.contains("available: /mcp__skills__greet, $skills:deploy-notes, $skills:hostile"),
        "{}",
        notice.content
    );
    // The name is the prompt's, whichever sigil calls it.
    let asked = say(&alice, &chat, "@picogent $mcp__skills__greet name=Bob").await;
    reply_containing(&alice, &asked.id, "Hello Bob!").await;
    // The resources change: the namespace is built again, and the conflict is not told again.
    let asked = say(&alice, &chat, "@picogent add a release checklist skill").await;
    reply_containing(&alice, &asked.id, "Added the release checklist").await;
    let asked = say(&alice, &chat, "@picogent $skills:greet again").await;
    reply_containing(&alice, &asked.id, "$skills:release-checklist").await;

    agent.kill().unwrap();
    agent.wait().unwrap();
    let log = std::fs::read_to_string(&log_path).unwrap();
    let warnings: Vec<&str> = log.lines().filter(|line| line.contains("two mcp commands have one name")).collect();
    assert_eq!(warnings.len(), 1, "one warning: {log}");
    assert!(warnings[0].contains("the prompt `greet` of mcp server `skills` keeps it"), "{}", warnings[0]);
    assert!(
        warnings[0].contains("the skill `greet` (skill://greet) of mcp server `skills` is skipped"),
        "{}",
        warnings[0]
    );
    // What the hostile skill's frontmatter asked for was cleared, and said so once.
    let cleared: Vec<&str> = log.lines().filter(|line| line.contains("frontmatter fields cleared")).collect();
    assert_eq!(cleared.len(), 1, "{log}");
    assert!(cleared[0].contains("allowed_tools, paths, auto_trigger"), "{}", cleared[0]);
    assert_eq!(model.mismatches(), Vec::<String>::new());
    model.shutdown().await;
    board.shutdown().await.unwrap();
}
