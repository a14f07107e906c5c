//! `picogent check` and `picogent run` as a person setting up a deployment meets them: the binary
//! run against the reference board and the offline model, its report read line by line.

#[path = "support/agent.rs"]
mod agent_support;

use std::path::Path;
use std::time::Duration;

use agent_support::*;
use picogent::tracker::model::TaskStatus;
use serde_json::json;

/// `picogent check --config <path>` with `env` added; its exit status and stdout.
async fn check_with_env(config_path: &Path, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_picogent"));
    command.args(["check", "--config"]).arg(config_path).env("TEAMBOARD_TOKEN", "tok-picogent").env("RUST_LOG", "warn");
    for (name, value) in env {
        command.env(name, value);
    }
    let output = tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap();
    (output.status.code(), String::from_utf8_lossy(&output.stdout).to_string())
}

fn line<'a>(report: &'a str, what: &str) -> &'a str {
    report
        .lines()
        .find(|l| l.get(4..).unwrap_or_default().trim_start().starts_with(what))
        .unwrap_or_else(|| panic!("no {what} line:\n{report}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_fails_a_model_name_the_server_does_not_list() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let config =
        agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({"llm": {"model": "gpt-4o-mini"}}));
    let (code, report) = check_with_env(&write_config(dir.path(), &config), &[]).await;
    assert_eq!(code, Some(1), "{report}");
    let endpoint = line(&report, "model endpoint");
    assert!(endpoint.starts_with("FAIL"), "{report}");
    assert!(
        endpoint.contains("\"gpt-4o-mini\"")
            && endpoint.contains("\"offline-planner\"")
            && endpoint.contains("set llm.model"),
        "names the model, what the server lists, and the setting: {report}"
    );
    // The name it lists passes.
    let config = agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}));
    let (code, report) = check_with_env(&write_config(dir.path(), &config), &[]).await;
    assert_eq!(code, Some(0), "{report}");
    assert!(line(&report, "model endpoint").starts_with("ok") && report.contains("serves offline-planner"), "{report}");
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_fails_a_state_folder_that_is_missing_or_cannot_be_written() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let a_file = dir.path().join("not-a-folder");
    std::fs::write(&a_file, "x").unwrap();
    let missing = dir.path().join("var/lib/picogent");
    let cases = [
        (missing.join("agent.db"), vec!["does not exist", "mkdir -p", "picogent run also makes it"]),
        (a_file.join("agent.db"), vec!["is not a folder"]),
        // Nobody may make files in /proc, root included.
        (Path::new("/proc/picogent.db").to_path_buf(), vec!["cannot write in the state folder /proc", "write access"]),
    ];
    for (state, says) in cases {
        let config =
            agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({"state": {"path": state}}));
        let (code, report) = check_with_env(&write_config(dir.path(), &config), &[]).await;
        assert_eq!(code, Some(1), "{report}");
        let state_line = line(&report, "state");
        assert!(state_line.starts_with("FAIL"), "{}: {report}", state.display());
        for word in says {
            assert!(state_line.contains(word), "{}: {word}: {report}", state.display());
        }
        assert!(!missing.exists(), "check makes nothing");
    }
    let config = agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}));
    let (code, report) = check_with_env(&write_config(dir.path(), &config), &[]).await;
    assert_eq!(code, Some(0), "{report}");
    assert!(line(&report, "state").starts_with("ok") && line(&report, "state").contains("a first start"), "{report}");
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_makes_a_missing_state_folder_and_works_the_task() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let state = dir.path().join("var/lib/picogent/agent.db");
    let config = agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({"state": {"path": state}}));
    let process = std::sync::Mutex::new(spawn_agent_process(&write_config(dir.path(), &config)));
    let alice = client(&board, "tok-alice");
    let task = create_assigned(&alice, "Start on a new machine", "- one\n- two").await;
    let worked = eventually(Duration::from_secs(30), "the task worked", || async {
        let exited = process.lock().unwrap().try_wait().unwrap();
        assert!(exited.is_none(), "picogent run exited with {exited:?}");
        let now = alice.get_task(&task.id).await.ok()?;
        (now.status == TaskStatus::InReview).then_some(now)
    })
    .await;
    assert_eq!(worked.status, TaskStatus::InReview);
    let mut process = process.into_inner().unwrap();
    assert!(state.exists(), "the state is in the folder run made");
    let stopped = std::process::Command::new("kill").arg("-TERM").arg(process.id().to_string()).status().unwrap();
    assert!(stopped.success());
    let status = tokio::task::spawn_blocking(move || process.wait().unwrap()).await.unwrap();
    assert!(status.success(), "{status:?}");
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_says_where_a_config_mistake_is() {
    let dir = tempfile::tempdir().unwrap();
    let config = agent_config(dir.path(), "http://127.0.0.1:1", "http://127.0.0.1:1/v1", "picogent", json!({}));
    let path = write_config(dir.path(), &config);
    // In an override: the variable is named, not the file, and the words the setting takes.
    let (code, report) = check_with_env(&path, &[("PICOGENT_CHAT_LISTEN", "mention")]).await;
    assert_eq!(code, Some(1), "{report}");
    let config_line = line(&report, "config");
    assert!(
        config_line.starts_with("FAIL config") && config_line.contains("environment variable PICOGENT_CHAT_LISTEN")
    );
    assert!(config_line.contains("\"mention\" is not one of \"mentions\", \"all\", \"none\""), "{report}");
    assert!(!config_line.contains("agent.json"), "{report}");
    // The twelve-factor way to point the shipped file at PostgreSQL passes the config line.
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("agent.json");
    let (_, report) =
        check_with_env(&shipped, &[("PICOGENT_STATE__URL", "postgres://picogent@127.0.0.1:5432/test")]).await;
    assert!(line(&report, "config").starts_with("ok"), "{report}");
    // In the file's JSON: the line, and the line before it where the comma is missing.
    let text = serde_json::to_string_pretty(&config).unwrap();
    let broken = text.replacen("\"slug\": \"picogent\",", "\"slug\": \"picogent\"", 1);
    assert_ne!(broken, text);
    std::fs::write(&path, &broken).unwrap();
    let (code, report) = check_with_env(&path, &[]).await;
    assert_eq!(code, Some(1), "{report}");
    let slug_line = broken.lines().position(|l| l.contains("\"slug\"")).unwrap() + 1;
    assert!(report.contains(&format!("{slug_line} |   \"slug\": \"picogent\"")), "{report}");
    assert!(report.contains(&format!("a comma missing at the end of line {slug_line}")), "{report}");
}

/// `picogent check` says whether the prompt cache is active against the offline model endpoint
/// on both APIs (its simulation caches a long prefix on each), and why not when the Messages API
/// is sent no `cache_control`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_says_whether_the_prompt_cache_is_active_on_both_apis() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let cases = [
        (json!({"api": "openai"}), "active (openai API): the second of two identical requests read "),
        (json!({"api": "anthropic"}), "active (anthropic API): the second of two identical requests read "),
        (
            json!({"api": "anthropic", "prompt_cache": false}),
            "not active (anthropic API): the second of two identical requests read none of its",
        ),
    ];
    for (llm, says) in cases {
        let model = start_model(0).await;
        let config = agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({ "llm": llm }));
        let (code, report) = check_with_env(&write_config(dir.path(), &config), &[]).await;
        assert_eq!(code, Some(0), "{llm}: {report}");
        let cache = line(&report, "prompt cache");
        assert!(cache.starts_with("ok") && cache.contains(says), "{llm}: {report}");
        if llm["prompt_cache"] == false {
            assert!(cache.contains("llm.prompt_cache is false"), "{report}");
        } else {
            assert!(!cache.contains("not active"), "{llm}: {report}");
        }
        let path = if llm["api"] == "openai" { "/v1/chat/completions" } else { "/v1/messages" };
        assert!(model.request_paths().iter().all(|p| p == path), "{llm}: {:?}", model.request_paths());
        model.shutdown().await;
    }
    board.shutdown().await.unwrap();
}

/// With workspaces on, `check` names the git it found, and warns (exit 0) when it is older than the
/// workspaces' guard against agent-written attributes needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_warns_of_a_git_too_old_for_the_workspaces() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let workspaces = json!({"workspaces": {
        "root": dir.path().join("workspaces"),
        "repositories": {"app": {"url": dir.path().join("remote.git"), "base": "main", "projects": ["team"]}},
        "agents": {"stand-in": {"command": ["true", "{instructions}"]}},
        "agent": "stand-in",
    }});
    let config_path =
        write_config(dir.path(), &agent_config(dir.path(), &board.url(), &model.url(), "picogent", workspaces));
    let (code, report) = check_with_env(&config_path, &[]).await;
    assert_eq!(code, Some(0), "{report}");
    let git = line(&report, "git");
    assert!(git.starts_with("ok") && git.contains("git version 2."), "{report}");

    // A git that says it is 2.39, first on PATH.
    let old = dir.path().join("old-git");
    std::fs::create_dir(&old).unwrap();
    std::fs::write(old.join("git"), "#!/bin/sh\necho 'git version 2.39.5'\n").unwrap();
    std::fs::set_permissions(old.join("git"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", old.display(), std::env::var("PATH").unwrap());
    let (code, report) = check_with_env(&config_path, &[("PATH", &path)]).await;
    assert_eq!(code, Some(0), "a warning, not a failure: {report}");
    let git = line(&report, "git");
    assert!(git.starts_with("WARN") && git.contains("git version 2.39.5 is older than 2.40"), "{report}");
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// With workspaces on, `check` says for each coding agent whether its program is installed and
/// which version it says it is, and refuses a preset pointed at a model endpoint that speaks an
/// API the CLI does not (a Qwen Code told to use an Anthropic Messages endpoint).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_names_each_coding_agents_version_and_refuses_a_model_api_it_cannot_use() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let fake = dir.path().join("fake-cli");
    std::fs::write(&fake, "#!/bin/sh\n[ \"$1\" = --version ] && echo 'fake-cli 1.2.3' && exit 0\nexit 1\n").unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let coding_lines = |report: &str| -> Vec<String> {
        report
            .lines()
            .filter(|l| l.get(4..).unwrap_or_default().trim_start().starts_with("coding agent"))
            .map(str::to_string)
            .collect()
    };
    let workspaces = |llm: serde_json::Value, agents: serde_json::Value, default: &str| {
        json!({"llm": llm, "workspaces": {
            "root": dir.path().join("workspaces"),
            "repositories": {"app": {"url": dir.path().join("remote.git"), "base": "main", "projects": ["team"]}},
            "agents": agents,
            "agent": default,
        }})
    };

    let agents = json!({
        "fake": {"command": [fake, "{instructions}"]},
        "missing": {"command": ["no-such-coding-cli", "{instructions}"]},
    });
    let config =
        agent_config(dir.path(), &board.url(), &model.url(), "picogent", workspaces(json!({}), agents, "fake"));
    let (code, report) = check_with_env(&write_config(dir.path(), &config), &[]).await;
    assert_ne!(code, Some(0), "a coding agent that is not installed fails the check: {report}");
    let lines = coding_lines(&report);
    assert_eq!(lines.len(), 2, "{report}");
    assert!(
        lines[0].starts_with("ok") && lines[0].contains(&format!("`fake`: fake-cli 1.2.3 ({})", fake.display())),
        "{report}"
    );
    assert!(
        lines[1].starts_with("FAIL")
            && lines[1].contains("`missing`: its program `no-such-coding-cli` is not installed"),
        "{report}"
    );

    // Qwen Code and OpenCode speak OpenAI's chat completions; picogent's own model here speaks
    // Anthropic's Messages API, so neither can be pointed at it, and `check` says what to set.
    let messages = json!({"api": "anthropic"});
    for (name, preset) in [("qwen", "qwen-code"), ("opencode", "opencode")] {
        let config = agent_config(
            dir.path(),
            &board.url(),
            &model.url(),
            "picogent",
            workspaces(messages.clone(), json!({name: {"preset": preset}}), name),
        );
        let (code, report) = check_with_env(&write_config(dir.path(), &config), &[]).await;
        assert_ne!(code, Some(0), "{report}");
        let lines = coding_lines(&report);
        assert!(
            lines[0].starts_with("FAIL")
                && lines[0].contains(&format!("`{name}` ({preset}) speaks OpenAI's chat completions"))
                && lines[0].contains(&format!("set workspaces.agents.{name}.base_url")),
            "{report}"
        );
    }
    // And the other way: Claude Code speaks the Messages API, picogent's own model here OpenAI's.
    let claude = json!({"claude": {"preset": "claude-code"}});
    let config =
        agent_config(dir.path(), &board.url(), &model.url(), "picogent", workspaces(json!({}), claude, "claude"));
    let (code, report) = check_with_env(&write_config(dir.path(), &config), &[]).await;
    assert_ne!(code, Some(0), "{report}");
    let lines = coding_lines(&report);
    assert!(
        lines[0].starts_with("FAIL")
            && lines[0].contains("`claude` (claude-code) speaks Anthropic's Messages API")
            && lines[0].contains("which speaks OpenAI's chat completions"),
        "{report}"
    );
    // Gemini CLI speaks Google's Gemini API, which picogent's own model speaks on neither setting.
    for (llm, speaks) in [(json!({}), "OpenAI's chat completions"), (messages.clone(), "Anthropic's Messages API")] {
        let gemini = json!({"gemini": {"preset": "gemini-cli"}});
        let config =
            agent_config(dir.path(), &board.url(), &model.url(), "picogent", workspaces(llm, gemini, "gemini"));
        let (code, report) = check_with_env(&write_config(dir.path(), &config), &[]).await;
        assert_ne!(code, Some(0), "{report}");
        let lines = coding_lines(&report);
        assert!(
            lines[0].starts_with("FAIL")
                && lines[0].contains("`gemini` (gemini-cli) speaks Google's Gemini API")
                && lines[0].contains(&format!("which speaks {speaks}"))
                && lines[0]
                    .contains("set workspaces.agents.gemini.base_url to an endpoint that speaks Google's Gemini API"),
            "{report}"
        );
    }
    // Codex speaks only the Responses API, which picogent's own client (chat completions here)
    // does not: refused too, until it has an endpoint of its own.
    let codex = json!({"codex": {"preset": "codex"}});
    let config =
        agent_config(dir.path(), &board.url(), &model.url(), "picogent", workspaces(json!({}), codex, "codex"));
    let (code, report) = check_with_env(&write_config(dir.path(), &config), &[]).await;
    assert_ne!(code, Some(0), "{report}");
    let lines = coding_lines(&report);
    assert!(
        lines[0].starts_with("FAIL")
            && lines[0].contains("`codex` (codex) speaks OpenAI's Responses API")
            && lines[0].contains("which speaks OpenAI's chat completions")
            && lines[0]
                .contains("set workspaces.agents.codex.base_url to an endpoint that speaks OpenAI's Responses API"),
        "{report}"
    );
    // Given an endpoint of its own, the API is the operator's to choose: no refusal for it.
    let own = json!({"qwen": {"preset": "qwen-code", "base_url": format!("{}/v1", model.url())}});
    let config = agent_config(dir.path(), &board.url(), &model.url(), "picogent", workspaces(messages, own, "qwen"));
    let (_, report) = check_with_env(&write_config(dir.path(), &config), &[]).await;
    assert!(!coding_lines(&report)[0].contains("Messages API"), "{report}");
    model.shutdown().await;
    board.shutdown().await.unwrap();
}
