//! A user's first external MCP servers, configured as their READMEs say, with no `trusted`: the
//! official `mcp-server-time` (PyPI) and `@modelcontextprotocol/server-filesystem` (npm), both
//! installed by `tests/interop/install.sh`. In a task run, a tool each server annotates
//! `readOnlyHint: true` is a read, as picogent's own reads are: it works. A tool that writes is
//! refused in `auto` (one notice, naming the setting) and asked in `ask`. The model is the
//! offline endpoint replaying a script (a stand-in, not an LLM); everything is checked on the
//! board and on disk.

#[path = "support/agent.rs"]
mod agent_support;
#[path = "support/interop.rs"]
mod interop;

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_support::*;
use picogent::offline_model::script::Script;
use picogent::offline_model::{OfflineModelHandle, OfflineModelOptions};
use picogent::tracker::model::*;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The two servers as their READMEs configure them: the command and its arguments, nothing else.
fn servers(allowed: &Path) -> Value {
    interop::ensure_installed();
    let node_modules = root().join("tests/interop/node_modules");
    json!({"mcp_servers": {
        "time": {"command": root().join(".venv-test/bin/mcp-server-time")},
        "fs": {"command": node_modules.join(".bin/mcp-server-filesystem"), "args": [allowed]},
    }})
}

async fn scripted(turns: Value) -> OfflineModelHandle {
    let script = Script::from_json(&json!({ "turns": turns }).to_string()).unwrap();
    picogent::offline_model::start(OfflineModelOptions::script(script)).await.unwrap()
}

async fn run_ended(agent: &picogent::runtime::AgentHandle, task: &TaskOut) {
    let session = format!("task:{}", task.id);
    eventually(WAIT, "the run to end", || async {
        runs_for(agent, &session).await.into_iter().find(|run| run.finished_at.is_some())
    })
    .await;
    wait_idle(agent).await;
}

/// Reads with both servers, then a write with the filesystem server.
fn reads_then_a_write(notes: &Path, written: &Path) -> Value {
    json!([
        {"expect": {"tools_include": ["mcp__time__get_current_time", "mcp__fs__read_text_file"]},
         "reply": {"tool_calls": [{"name": "mcp__time__get_current_time", "arguments": {"timezone": "UTC"}}]}},
        {"expect": {"last_tool_result_is_error": false, "last_tool_result_contains": "datetime"},
         "reply": {"tool_calls": [{"name": "mcp__fs__read_text_file", "arguments": {"path": notes}}]}},
        {"expect": {"last_tool_result_is_error": false, "last_tool_result_contains": "ship on friday"},
         "reply": {"tool_calls": [{"name": "mcp__fs__write_file",
             "arguments": {"path": written, "content": "overwritten by the model"}}]}},
        {"expect": {"last_tool_result_is_error": true},
         "reply": {"content": "I read the time and the notes; I did not write the file."}}
    ])
}

fn files(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let allowed = dir.join("shared");
    std::fs::create_dir_all(&allowed).unwrap();
    let notes = allowed.join("notes.txt");
    std::fs::write(&notes, "ship on friday\n").unwrap();
    let written = allowed.join("plan.txt");
    std::fs::write(&written, "the plan\n").unwrap();
    (allowed, notes, written)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_auto_mode_reads_of_official_servers_work_and_a_write_is_refused_with_one_notice() {
    let dir = tempfile::tempdir().unwrap();
    let (allowed, notes, written) = files(dir.path());
    let board = start_board(dir.path()).await;
    let model = scripted(reads_then_a_write(&notes, &written)).await;
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", servers(&allowed))).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");
    let task = create_assigned(&alice, "What is the time, and what do the notes say?", "Look it up.").await;
    run_ended(&agent, &task).await;
    assert_eq!(model.mismatches(), Vec::<String>::new(), "the reads worked and the write was refused");
    assert_eq!(model.script_position(), 4);
    assert_eq!(std::fs::read_to_string(&written).unwrap(), "the plan\n", "nothing was written");
    let notices: Vec<String> = comments(&alice, &task.id)
        .await
        .into_iter()
        .filter(|m| m.author_slug == "picogent" && m.content.contains("mcp__fs__write_file"))
        .map(|m| m.content)
        .collect();
    assert_eq!(notices.len(), 1, "{notices:#?}");
    assert!(notices[0].contains("permissions.cross_scope_tools"), "the notice names the setting: {}", notices[0]);
    assert!(!notices.iter().any(|n| n.contains("get_current_time") || n.contains("read_text_file")), "{notices:#?}");
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_ask_mode_a_write_of_an_official_server_is_asked_and_the_reads_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let (allowed, notes, written) = files(dir.path());
    let board = start_board(dir.path()).await;
    let model = scripted(reads_then_a_write(&notes, &written)).await;
    let mut extra = servers(&allowed);
    extra["permissions"] = json!({"mode": "ask", "ask_timeout_ms": 60_000});
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra)).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");
    let task = create_assigned(&alice, "What is the time, and what do the notes say?", "Look it up.").await;
    let asked = eventually(WAIT, "the question on the task", || async {
        comments(&alice, &task.id)
            .await
            .into_iter()
            .filter(|m| m.author_slug == "picogent" && m.content.contains("Permission needed"))
            .map(|m| m.content)
            .collect::<Vec<_>>()
            .into_iter()
            .next()
    })
    .await;
    assert!(asked.contains("write_file"), "{asked}");
    comment(&alice, &task.id, "no").await;
    run_ended(&agent, &task).await;
    assert_eq!(model.mismatches(), Vec::<String>::new());
    let questions = comments(&alice, &task.id)
        .await
        .into_iter()
        .filter(|m| m.author_slug == "picogent" && m.content.contains("Permission needed"))
        .count();
    assert_eq!(questions, 1, "only the write was asked about");
    assert_eq!(std::fs::read_to_string(&written).unwrap(), "the plan\n");
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}
