//! A model that misuses the coding tools, played by the offline model endpoint replaying a
//! script (a stand-in for a model, not an LLM), on the reference board with the stand-in coding
//! agent (`fixtures/coding-agent/stand-in.sh`) and a local bare repository as the remote. Each
//! mistake comes back to the model as a tool error it can act on; nothing runs twice, nothing
//! is pushed twice, and the person sees one answer.

#[path = "support/agent.rs"]
mod agent_support;
#[path = "support/git.rs"]
mod git_support;

use agent_support::*;
use git_support::{git, remote};
use picogent::offline_model::OfflineModelOptions;
use picogent::offline_model::script::Script;
use serde_json::{Value, json};

const STAND_IN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/coding-agent/stand-in.sh");
const FIX: &str = "In src/date.py replace \"2020-01-01\" with \"2024-06-01\".";

async fn scripted(turns: Value) -> picogent::offline_model::OfflineModelHandle {
    let script = Script::from_json(&json!({ "turns": turns }).to_string()).unwrap();
    picogent::offline_model::start(OfflineModelOptions::script(script)).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_call_missing_instructions_an_unknown_agent_and_a_repeat_are_answered_and_one_commit_is_pushed() {
    let dir = tempfile::tempdir().unwrap();
    let remote = remote(dir.path());
    let main_before = git(&remote, &["rev-parse", "main"]);
    let board = start_board(dir.path()).await;
    let model = scripted(json!([
        // Cut off by the output limit mid-arguments: not run.
        {"expect": {"tools_include": ["run_coding_agent", "workspace_status"]},
         "reply": {"finish_reason": "length", "tool_calls": [
             {"name": "run_coding_agent", "raw_arguments": "{\"instructions\": \"In src/date.py repl"}]}},
        {"expect": {"last_tool_result_is_error": true, "last_tool_result_contains": "cut off"},
         "reply": {"tool_calls": [{"name": "run_coding_agent", "arguments": {"instructions": "   "}}]}},
        {"expect": {"last_tool_result_is_error": true, "last_tool_result_contains": "instructions"},
         "reply": {"tool_calls": [{"name": "run_coding_agent", "arguments": {"instructions": FIX, "agent": "sloppy"}}]}},
        {"expect": {"last_tool_result_is_error": true, "last_tool_result_contains": "sloppy"},
         "reply": {"tool_calls": [{"name": "run_coding_agent", "arguments": {"instructions": FIX}}]}},
        {"expect": {"last_tool_result_is_error": false, "last_tool_result_contains": "pushed"},
         "reply": {"tool_calls": [{"name": "run_coding_agent", "arguments": {"instructions": FIX}}]}},
        // The same again: nothing new to commit, nothing pushed twice.
        {"expect": {"last_tool_result_contains": "the remote had it already"},
         "reply": {"tool_calls": [{"name": "workspace_status", "arguments": {}}]}},
        {"expect": {"last_tool_result_is_error": false, "last_tool_result_contains": "picogent/TE-1"},
         "reply": {"content": "Fixed: src/date.py now returns 2024-06-01."}}
    ]))
    .await;
    let extra = json!({"workspaces": {
        "root": dir.path().join("workspaces"),
        "repositories": {"app": {"url": remote, "base": "main", "projects": ["team"]}},
        "agents": {"stand-in": {"command": ["sh", STAND_IN, "{instructions}"], "output": "jsonl"}},
        "agent": "stand-in",
    }});
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra)).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");
    let task = create_assigned(&alice, "Fix the date parser", FIX).await;
    assert_eq!(task.key, "TE-1");
    eventually(std::time::Duration::from_secs(60), "the model's answer", || async {
        comments(&alice, &task.id).await.into_iter().find(|m| m.author_slug == "picogent")
    })
    .await;
    wait_idle(&agent).await;

    assert_eq!(model.mismatches(), Vec::<String>::new(), "each mistake came back as the script expected");
    assert_eq!(model.script_position(), 7);
    assert_eq!(git(&remote, &["rev-list", "--count", "main..picogent/TE-1"]), "1", "one commit");
    assert!(git(&remote, &["show", "picogent/TE-1:src/date.py"]).contains("2024-06-01"));
    assert_eq!(git(&remote, &["rev-parse", "main"]), main_before, "the base branch is untouched");
    let mine: Vec<_> = comments(&alice, &task.id).await.into_iter().filter(|m| m.author_slug == "picogent").collect();
    assert_eq!(mine.len(), 1, "one answer, no notice: {mine:#?}");
    assert!(mine[0].content.starts_with("Fixed: src/date.py"), "{}", mine[0].content);
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}
