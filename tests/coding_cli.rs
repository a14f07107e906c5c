//! Real coding agent CLIs in a task's workspace: Qwen Code (`@qwen-code/qwen-code` from npm),
//! Claude Code (`@anthropic-ai/claude-code` from npm, on the Messages API), Gemini CLI
//! (`@google/gemini-cli` from npm, on Google's Gemini API), Codex CLI (`@openai/codex` from npm,
//! on the Responses API), OpenCode (`opencode-ai` from npm, on chat completions) and
//! mini-swe-agent (`mini-swe-agent` from PyPI), installed on first use by
//! `tests/coding-agents/install.sh`, run through their presets and driven by the offline model
//! endpoint replaying a script (a stand-in for a model, not an LLM). The agent itself works the
//! task with the offline planner, which delegates it. Checked as a person would: the branch on
//! the remote (a local bare repository) has the commit, the task's answer names it, the base
//! branch is untouched, and the CLI saw no token of picogent's. For each CLI too: an error it
//! reports (the model refuses its request) fails the run with one notice naming it, and a stop
//! kills it, with the long command it was running, and leaves one notice.

#[path = "support/agent.rs"]
mod agent_support;
#[path = "support/git.rs"]
mod git_support;
#[path = "support/setup.rs"]
mod setup;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use agent_support::*;
use git_support::git;
use picogent::offline_model::OfflineModelOptions;
use picogent::offline_model::script::Script;
use picogent::tracker::model::*;
use serde_json::json;

const QWEN_VERSION: &str = "0.15.10";
const MSWEA_VERSION: &str = "2.4.6";
const CLAUDE_VERSION: &str = "2.1.197";
const GEMINI_VERSION: &str = "0.61.0";
const CODEX_VERSION: &str = "0.171.0";
const OPENCODE_VERSION: &str = "1.18.33";

/// A folder of the install script's cache holding `program`.
fn installed(folder: &str, program: &str) -> PathBuf {
    let cache = std::env::var_os("PICOGENT_CLI_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/picogent/cli"));
    let bin = cache.join(folder);
    assert!(
        bin.join(program).exists(),
        "{program} is not installed at {}: run `bash tests/coding-agents/install.sh`",
        bin.display()
    );
    bin
}

/// The CLIs installed (the first call runs the install script) and on PATH: a coding agent gets
/// picogent's PATH (and nothing else of its environment). Set once for the whole binary, before
/// any agent starts. A `OnceLock`, not a `Once`: when the install fails, the cell stays empty and
/// every test fails with the script's first cause (kept by `setup`), not with "poisoned".
fn put_clis_on_path() {
    static ON_PATH: OnceLock<()> = OnceLock::new();
    ON_PATH.get_or_init(|| {
        setup::ensure_coding_clis();
        let qwen = installed(&format!("qwen-{QWEN_VERSION}/node_modules/.bin"), "qwen");
        let mini = installed(&format!("mswea-{MSWEA_VERSION}/bin"), "mini");
        let claude = installed(&format!("claude-code-{CLAUDE_VERSION}/node_modules/.bin"), "claude");
        let gemini = installed(&format!("gemini-cli-{GEMINI_VERSION}/node_modules/.bin"), "gemini");
        let codex = installed(&format!("codex-{CODEX_VERSION}/node_modules/.bin"), "codex");
        let opencode = installed(&format!("opencode-{OPENCODE_VERSION}/node_modules/.bin"), "opencode");
        let path = format!(
            "{}:{}:{}:{}:{}:{}:{}",
            qwen.display(),
            mini.display(),
            claude.display(),
            gemini.display(),
            codex.display(),
            opencode.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        // SAFETY: the tests of this binary call this first thing, before they start any thread
        // that reads the environment; `OnceLock` makes the others wait until it is set.
        unsafe { std::env::set_var("PATH", path) };
    });
}

/// The team's remote, and its `main`.
fn remote(dir: &Path) -> (PathBuf, String) {
    let remote = git_support::remote(dir);
    let main = git(&remote, &["rev-parse", "main"]);
    (remote, main)
}

/// What a person sees of the coding agent's work: the commit on the task's branch of the remote,
/// its subject starting `subject`, `src/date.py` changed; the base branch untouched; one answer on
/// the task naming the commit.
async fn work_pushed(
    alice: &picogent::tracker::TrackerClient,
    task: &TaskOut,
    remote: &Path,
    main_before: &str,
    subject: &str,
) {
    let branch = format!("picogent/{}", task.key);
    let on_branch = git(remote, &["show", &format!("{branch}:src/date.py")]);
    assert!(on_branch.contains("2024-06-01"), "{on_branch}");
    let said = git(remote, &["log", "-1", "--format=%s", &branch]);
    assert!(said.starts_with(subject), "{said}");
    assert_eq!(git(remote, &["rev-parse", "main"]), main_before, "the base branch is untouched");
    let commit = git(remote, &["rev-parse", &branch]);
    let answers: Vec<_> = comments(alice, &task.id).await.into_iter().filter(|m| m.author_slug == "picogent").collect();
    assert_eq!(answers.len(), 1, "{answers:#?}");
    assert!(
        answers[0].content.contains(&format!("Work: branch `{branch}`, commit {}", &commit[..10])),
        "{}",
        answers[0].content
    );
}

/// None of picogent's tokens (the tracker's, the MCP one) in what the coding agent sent its model.
fn no_token_sent(coding_model: &picogent::offline_model::OfflineModelHandle) {
    let requests = serde_json::to_string(&coding_model.requests()).unwrap();
    for secret in ["tok-picogent", MCP_TOKEN] {
        assert!(!requests.contains(secret), "{secret} reached the coding agent");
    }
}

/// A CLI of `preset` works the board's first task (TE-1, "Fix the date parser") through its
/// preset, the offline endpoint replaying `script` (given the absolute path of the task's
/// `src/date.py`): the task ends in review; every turn of the script was asked for, as it
/// expected, and every request went to `path`; the work is pushed as a person sees it
/// ([`work_pushed`], the commit's subject starting `subject`), and no token of picogent's went to
/// the model.
async fn the_cli_edits_the_file_and_its_commit_is_pushed(
    preset: &str,
    script: impl FnOnce(&str) -> serde_json::Value,
    path: &str,
    subject: &str,
) {
    put_clis_on_path();
    let dir = tempfile::tempdir().unwrap();
    let (remote, main_before) = remote(dir.path());
    let file = dir.path().join("workspaces/app/TE-1/src/date.py");
    let script: Script = serde_json::from_value(script(file.to_str().unwrap())).unwrap();
    let turns = script.turns.len();
    let coding_model = picogent::offline_model::start(OfflineModelOptions::script(script)).await.unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let extra = json!({"workspaces": {
        "root": dir.path().join("workspaces"),
        "repositories": {"app": {"url": remote, "base": "main", "projects": ["team"]}},
        "agents": {"cli": {"preset": preset, "base_url": coding_model.url(), "model": "scripted",
                           "timeout_ms": 180_000}},
    }});
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra)).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");
    let task = create_assigned(&alice, "Fix the date parser", "src/date.py returns an old default date.").await;
    assert_eq!(task.key, "TE-1");
    eventually(std::time::Duration::from_secs(180), "the task in review", || async {
        let task = alice.get_task(&task.id).await.ok()?;
        (task.status == TaskStatus::InReview && agent.status.active_runs() == 0).then_some(())
    })
    .await;

    assert_eq!(coding_model.mismatches(), Vec::<String>::new(), "{preset} asked what the script expected");
    assert_eq!(coding_model.script_position(), turns, "{preset}: every turn of the script was asked for");
    let paths = coding_model.request_paths();
    assert!(paths.iter().all(|asked| asked == path), "{preset}: {paths:?}");
    work_pushed(&alice, &task, &remote, &main_before, subject).await;
    no_token_sent(&coding_model);
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    coding_model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qwen_code_edits_the_file_and_picogent_pushes_its_commit_on_the_tasks_branch() {
    // Qwen Code's tools are its own (`read_file`, `edit`, `run_shell_command`, …); it asks the
    // model on chat completions at `{base_url}/chat/completions`.
    let script = |file: &str| {
        json!({
            "description": "Qwen Code reads src/date.py, edits one line, and says so",
            "turns": [
                {"reply": {"content": "Reading it first.", "tool_calls": [{"name": "read_file", "arguments": {"file_path": file}}]}},
                {"expect": {"tools_include": ["edit", "read_file"], "last_tool_result_contains": "2020-01-01"},
                 "reply": {"tool_calls": [{"name": "edit", "arguments": {
                    "file_path": file, "old_string": "    return \"2020-01-01\"", "new_string": "    return \"2024-06-01\""}}]}},
                {"reply": {"content": "Updated src/date.py: the default is 2024-06-01."}}
            ]
        })
    };
    the_cli_edits_the_file_and_its_commit_is_pushed(
        "qwen-code",
        script,
        "/v1/chat/completions",
        "TE-1: Updated src/date.py",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mini_swe_agent_edits_the_file_with_bash_and_its_submission_is_pushed_on_the_tasks_branch() {
    // mini-swe-agent's one tool is `bash`, run in the workspace (its working directory); it ends
    // when the model runs the submit command alone.
    let script = |_file: &str| {
        json!({
            "description": "mini-swe-agent edits src/date.py with sed, checks it, and submits",
            "turns": [
                {"expect": {"tools_include": ["bash"]},
                 "reply": {"content": "Replacing the old default.", "tool_calls": [{"name": "bash", "arguments": {
                    "command": "sed -i 's/2020-01-01/2024-06-01/' src/date.py && cat src/date.py"}}]}},
                {"expect": {"last_tool_result_contains": "2024-06-01"},
                 "reply": {"content": "Done: src/date.py returns 2024-06-01.", "tool_calls": [{"name": "bash", "arguments": {
                    "command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}}]}}
            ]
        })
    };
    the_cli_edits_the_file_and_its_commit_is_pushed("mini-swe-agent", script, "/v1/chat/completions", "TE-1: ").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_writes_the_file_on_the_messages_api_and_picogent_pushes_its_commit() {
    // Claude Code's tools are its own (`Read`, `Edit`, `Write`, `Bash`, …); it asks the model on
    // the Messages API at `{api_root}/v1/messages`.
    let script = |file: &str| {
        json!({
            "description": "Claude Code reads src/date.py, edits one line with its Edit tool, and says so",
            "turns": [
                {"expect": {"tools_include": ["Read", "Edit", "Write", "Bash"]},
                 "reply": {"content": "Reading it first.", "tool_calls": [{"name": "Read", "arguments": {"file_path": file}}]}},
                {"expect": {"last_tool_result_contains": "2020-01-01"},
                 "reply": {"tool_calls": [{"name": "Edit", "arguments": {
                    "file_path": file, "old_string": "    return \"2020-01-01\"", "new_string": "    return \"2024-06-01\""}}]}},
                {"expect": {"last_tool_result_contains": "date.py"},
                 "reply": {"content": "Updated src/date.py: the default is 2024-06-01."}}
            ]
        })
    };
    the_cli_edits_the_file_and_its_commit_is_pushed("claude-code", script, "/v1/messages", "TE-1: Updated src/date.py")
        .await;
}

/// Whether a process whose command line starts `timeout <seconds>` is alive on the machine: the
/// long command the scripted model had the CLI run (`timeout N tail -f /dev/null`: Qwen Code
/// refuses a plain `sleep`). Read from `/proc`, so it is seen inside
/// the sandbox's own pid namespace too; a zombie is not alive.
fn long_command_running(seconds: &str) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else { return false };
    entries.flatten().any(|entry| {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let is_it = cmdline.starts_with(format!("timeout\0{seconds}\0").as_bytes());
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        is_it && !stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z'))
    })
}

/// An error the CLI reports, and a stop, as a person sees them, with the real CLI of `preset`:
/// - the scripted model refuses the CLI's first request (HTTP `refusal`, one the CLI does not try again, with words of its own): the run
///   (direct: the task goes straight to the CLI) fails with one notice naming those words;
/// - on a second task the model has the CLI run a long command (`shell_call`, the CLI's own shell
///   tool running `timeout <seconds> tail -f /dev/null`); once that command runs, `@picogent stop` kills the CLI's
///   process group (the command with it), and the task gets one notice, "Stopped".
async fn a_reported_error_fails_the_run_naming_it_and_a_stop_kills_the_cli(
    preset: &str,
    refusal: u16,
    shell_call: serde_json::Value,
    seconds: &str,
) {
    put_clis_on_path();
    let dir = tempfile::tempdir().unwrap();
    let (remote, main_before) = remote(dir.path());
    let script: Script = serde_json::from_value(json!({
        "description": "the model refuses the first request; on the next task it runs a long command",
        "turns": [
            {"fault": {"status": refusal, "message": "no model named scripted is served here (refusal 4711)"}},
            {"reply": {"content": "Running the long check.", "tool_calls": [shell_call]}}
        ]
    }))
    .unwrap();
    let coding_model = picogent::offline_model::start(OfflineModelOptions::script(script)).await.unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let extra = json!({"workspaces": {
        "root": dir.path().join("workspaces"),
        "repositories": {"app": {"url": remote, "base": "main", "projects": ["team"]}},
        "agents": {"cli": {"preset": preset, "base_url": coding_model.url(), "model": "scripted",
                           "timeout_ms": 180_000}},
        // The task goes straight to the CLI: its failure is the run's.
        "direct": true,
    }});
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra)).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");
    let said = |task: TaskOut| {
        let alice = &alice;
        async move {
            comments(alice, &task.id).await.into_iter().filter(|m| m.author_slug == "picogent").collect::<Vec<_>>()
        }
    };

    let refused = create_assigned(&alice, "Fix the date parser", "src/date.py returns an old default date.").await;
    eventually(std::time::Duration::from_secs(180), "the failure notice", || async {
        (!said(refused.clone()).await.is_empty()).then_some(())
    })
    .await;
    wait_idle(&agent).await;
    let notices = said(refused.clone()).await;
    assert_eq!(notices.len(), 1, "one notice: {notices:#?}");
    assert!(
        notices[0].content.contains("refusal 4711"),
        "{preset}: the notice names the error: {}",
        notices[0].content
    );
    let runs = runs_for(&agent, &format!("task:{}", refused.id)).await;
    assert_eq!(runs[0].status, picogent::state::RunStatus::Failed, "{preset}: {:?}", runs[0].error);
    assert_eq!(coding_model.script_position(), 1, "{preset}: the refused request was not tried again");

    let long = create_assigned(&alice, "Check the date parser", "Run the long check on src/date.py.").await;
    let running = tokio::time::timeout(
        std::time::Duration::from_secs(180),
        eventually(std::time::Duration::from_secs(200), "the CLI's long command running", || async {
            long_command_running(seconds).then_some(())
        }),
    )
    .await;
    if running.is_err() {
        // Said with what the CLI last told its model: a CLI that refuses the command says why.
        let requests = coding_model.requests();
        let last = requests.last().map(|request| request["messages"].to_string()).unwrap_or_default();
        let tail: String = last.chars().skip(last.chars().count().saturating_sub(1500)).collect();
        panic!("{preset} never ran the long command; the end of its last request: {tail}");
    }
    comment(&alice, &long.id, "@picogent stop").await;
    eventually(std::time::Duration::from_secs(30), "the long command killed with the CLI", || async {
        (!long_command_running(seconds)).then_some(())
    })
    .await;
    eventually(std::time::Duration::from_secs(30), "the stop notice", || async {
        (!said(long.clone()).await.is_empty()).then_some(())
    })
    .await;
    wait_idle(&agent).await;
    let notices = said(long.clone()).await;
    assert_eq!(notices.len(), 1, "one notice: {notices:#?}");
    assert!(notices[0].content.starts_with("Stopped"), "{preset}: {}", notices[0].content);
    let runs = runs_for(&agent, &format!("task:{}", long.id)).await;
    assert_eq!(runs[0].status, picogent::state::RunStatus::Stopped);
    assert_eq!(coding_model.mismatches(), Vec::<String>::new(), "{preset} asked what the script expected");
    let branches = git(&remote, &["branch", "--format=%(refname:short)"]);
    assert_eq!(branches.trim(), "main", "{preset}: nothing pushed");
    assert_eq!(git(&remote, &["rev-parse", "main"]), main_before);
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    coding_model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qwen_code_reports_a_refused_request_as_a_failure_and_is_killed_by_a_stop() {
    let call = json!({"name": "run_shell_command",
                      "arguments": {"command": "timeout 3011 tail -f /dev/null; echo checked", "is_background": false, "description": "the long check"}});
    a_reported_error_fails_the_run_naming_it_and_a_stop_kills_the_cli("qwen-code", 400, call, "3011").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mini_swe_agent_reports_a_refused_request_as_a_failure_and_is_killed_by_a_stop() {
    let call = json!({"name": "bash", "arguments": {"command": "timeout 3012 tail -f /dev/null; echo checked"}});
    a_reported_error_fails_the_run_naming_it_and_a_stop_kills_the_cli("mini-swe-agent", 404, call, "3012").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_reports_a_refused_request_as_a_failure_and_is_killed_by_a_stop() {
    let call = json!({"name": "Bash", "arguments": {"command": "timeout 3013 tail -f /dev/null; echo checked", "description": "the long check"}});
    a_reported_error_fails_the_run_naming_it_and_a_stop_kills_the_cli("claude-code", 400, call, "3013").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_cli_replaces_the_line_on_the_gemini_api_and_picogent_pushes_its_commit() {
    // Gemini CLI's tools are its own (`read_file`, `replace`, `write_file`, `run_shell_command`,
    // …); it streams from `{api_root}/v1beta/models/{model}:streamGenerateContent`.
    let script = |file: &str| {
        json!({
            "description": "Gemini CLI reads src/date.py, replaces one line, and says so",
            "turns": [
                {"expect": {"tools_include": ["read_file", "replace", "write_file", "run_shell_command"]},
                 "reply": {"content": "Reading it first.", "tool_calls": [{"name": "read_file", "arguments": {"file_path": file}}]}},
                {"expect": {"last_tool_result_contains": "2020-01-01"},
                 "reply": {"tool_calls": [{"name": "replace", "arguments": {
                    "file_path": file, "instruction": "Make the default date 2024-06-01.",
                    "old_string": "    return \"2020-01-01\"", "new_string": "    return \"2024-06-01\""}}]}},
                {"expect": {"last_tool_result_contains": "date.py", "last_tool_result_is_error": false},
                 "reply": {"content": "Updated src/date.py: the default is 2024-06-01."}}
            ]
        })
    };
    the_cli_edits_the_file_and_its_commit_is_pushed(
        "gemini-cli",
        script,
        "/v1beta/models/scripted:streamGenerateContent",
        "TE-1: Updated src/date.py",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_cli_reports_a_refused_request_as_a_failure_and_is_killed_by_a_stop() {
    let call = json!({"name": "run_shell_command",
                      "arguments": {"command": "timeout 3014 tail -f /dev/null; echo checked", "description": "the long check"}});
    a_reported_error_fails_the_run_naming_it_and_a_stop_kills_the_cli("gemini-cli", 400, call, "3014").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_edits_the_file_with_its_shell_on_the_responses_api_and_picogent_pushes_its_commit() {
    // Codex's tools are its own: `exec_command` runs a shell command (`cmd`) in the workspace. It
    // asks the model on the Responses API at `{base_url}/responses`.
    let script = |_file: &str| {
        json!({
            "description": "Codex reads src/date.py with its shell, edits one line with sed, and says so",
            "turns": [
                {"expect": {"tools_include": ["exec_command"], "messages_contain": "src/date.py"},
                 "reply": {"content": "Reading it first.", "tool_calls": [{"name": "exec_command", "arguments": {
                    "cmd": "cat src/date.py"}}]}},
                {"expect": {"last_tool_result_contains": "2020-01-01"},
                 "reply": {"tool_calls": [{"name": "exec_command", "arguments": {
                    "cmd": "sed -i 's/2020-01-01/2024-06-01/' src/date.py && grep -n 2024 src/date.py"}}]}},
                {"expect": {"last_tool_result_contains": "2024-06-01"},
                 "reply": {"content": "Updated src/date.py: the default is 2024-06-01."}}
            ]
        })
    };
    the_cli_edits_the_file_and_its_commit_is_pushed("codex", script, "/v1/responses", "TE-1: Updated src/date.py")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_reports_a_refused_request_as_a_failure_and_is_killed_by_a_stop() {
    let call = json!({"name": "exec_command",
                      "arguments": {"cmd": "timeout 3015 tail -f /dev/null; echo checked", "yield_time_ms": 300_000}});
    a_reported_error_fails_the_run_naming_it_and_a_stop_kills_the_cli("codex", 400, call, "3015").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_reads_and_edits_the_file_with_its_own_tools_on_chat_completions_and_picogent_pushes_its_commit() {
    // OpenCode's tools are its own: `read` and `edit` take a `filePath` (`edit` an `oldString` and
    // a `newString`), `bash` a `command` (and a `timeout`, a `workdir`). It streams chat
    // completions from `{base_url}/chat/completions`, and asks for no session title (the preset
    // gives it one): four turns, and nothing else.
    let script = |file: &str| {
        json!({
            "description": "OpenCode reads src/date.py, edits one line, checks it with its shell, and says so",
            "turns": [
                {"expect": {"tools_include": ["read", "edit", "bash"], "messages_contain": "src/date.py"},
                 "reply": {"content": "Reading it first.", "tool_calls": [{"name": "read", "arguments": {"filePath": file}}]}},
                {"expect": {"last_tool_result_contains": "2020-01-01"},
                 "reply": {"tool_calls": [{"name": "edit", "arguments": {
                    "filePath": file, "oldString": "    return \"2020-01-01\"", "newString": "    return \"2024-06-01\""}}]}},
                {"expect": {"last_tool_result_contains": "Edit applied", "last_tool_result_is_error": false},
                 "reply": {"tool_calls": [{"name": "bash", "arguments": {
                    "command": "grep -n 2024 src/date.py"}}]}},
                {"expect": {"last_tool_result_contains": "2024-06-01"},
                 "reply": {"content": "Updated src/date.py: the default is 2024-06-01."}}
            ]
        })
    };
    the_cli_edits_the_file_and_its_commit_is_pushed(
        "opencode",
        script,
        "/v1/chat/completions",
        "TE-1: Updated src/date.py",
    )
    .await;
}

/// OpenCode does not try a 400 again (its error says `isRetryable: false`) and exits 1 after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_reports_a_refused_request_as_a_failure_and_is_killed_by_a_stop() {
    // Its `bash` tool's own timeout (two minutes unless told) is set past the test's.
    let call = json!({"name": "bash", "arguments": {"command": "timeout 3016 tail -f /dev/null; echo checked",
                                                    "timeout": 600_000}});
    a_reported_error_fails_the_run_naming_it_and_a_stop_kills_the_cli("opencode", 400, call, "3016").await;
}
