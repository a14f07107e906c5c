//! Workspaces against real git: a local bare repository is the remote, a worktree per task, a
//! commit on `picogent/<KEY>` pushed there, the base untouched; and a coding agent (a shell
//! script standing in for a CLI) run, stopped and timed out in a workspace.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[path = "../../../tests/support/git.rs"]
mod git_support;
use git_support::{git, remote};

use picogent_workspace::config::{CodingAgentConfig, Hooks, Problem, Repository, WorkspacesConfig};
use picogent_workspace::{AgentEnd, Invocation, TaskKey, Workspaces, coding};
use tokio_util::sync::CancellationToken;

fn config(dir: &Path, remote: &Path) -> WorkspacesConfig {
    WorkspacesConfig {
        root: dir.join("workspaces"),
        repositories: BTreeMap::from([(
            "billing".to_string(),
            Repository {
                url: remote.to_string_lossy().into_owned(),
                base: "main".into(),
                push: None,
                projects: vec!["billing".into()],
                labels: vec![],
            },
        )]),
        hooks: Hooks { after_create: Some("echo made > .made-by-hook".into()), ..Hooks::default() },
        ..WorkspacesConfig::default()
    }
}

/// A worktree's own git folder (its `.git` is a file naming it).
fn git_dir(worktree: &Path) -> PathBuf {
    PathBuf::from(git(worktree, &["rev-parse", "--absolute-git-dir"]))
}

#[tokio::test]
async fn a_task_gets_a_branch_its_commit_is_pushed_once_and_the_base_is_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let remote = remote(dir.path());
    let base_before = git(&remote, &["rev-parse", "main"]);
    let workspaces = Workspaces::new(Arc::new(config(dir.path(), &remote)), "picogent", "picogent@localhost");
    let key = TaskKey::new("TE-12").unwrap();

    let (workspace, hooks) = workspaces.open("billing", &key, None).await.unwrap();
    assert_eq!(workspace.branch, "picogent/TE-12");
    assert_eq!(workspace.path, dir.path().join("workspaces/billing/TE-12"));
    assert!(hooks.len() == 1 && hooks[0].succeeded(), "{hooks:?}");
    std::fs::remove_file(workspace.path.join(".made-by-hook")).unwrap();
    std::fs::write(workspace.path.join("src/date.py"), "def parse():\n    return \"2024-06-01\"\n").unwrap();
    let status = workspaces.status(&workspace).await.unwrap();
    assert_eq!(status.changed, [" M src/date.py"]);
    assert_eq!((status.diff.files.len(), status.diff.insertions, status.diff.deletions), (1, 1, 1));
    // A new file counts, and reading the status changes nothing in the index.
    std::fs::write(workspace.path.join("src/new.py"), "a = 1\nb = 2").unwrap();
    let index_before = std::fs::read(git_dir(&workspace.path).join("index")).unwrap();
    let status = workspaces.status(&workspace).await.unwrap();
    assert_eq!(status.changed, [" M src/date.py", "?? src/new.py"]);
    assert_eq!(status.diff.files, ["src/date.py", "src/new.py"]);
    assert_eq!((status.diff.insertions, status.diff.deletions), (3, 1));
    assert_eq!(std::fs::read(git_dir(&workspace.path).join("index")).unwrap(), index_before, "the index is as it was");
    std::fs::remove_file(workspace.path.join("src/new.py")).unwrap();

    let finished = workspaces.finish(&workspace, "TE-12: fix the date parser").await.unwrap();
    assert!(finished.committed && finished.pushed, "{finished:?}");
    let commit = finished.commit.clone().unwrap();
    assert_eq!(git(&remote, &["rev-parse", "picogent/TE-12"]), commit);
    assert_eq!(git(&remote, &["log", "-1", "--format=%s", "picogent/TE-12"]), "TE-12: fix the date parser");
    assert_eq!(git(&remote, &["rev-parse", "main"]), base_before, "the base branch is untouched");

    // The next run (a follow-up, or after a restart) finds the same tree; nothing new: no
    // second commit, no second push.
    let (again, hooks) = workspaces.open("billing", &key, None).await.unwrap();
    assert_eq!((again.path.clone(), hooks.len()), (workspace.path.clone(), 0));
    let second = workspaces.finish(&again, "TE-12: fix the date parser").await.unwrap();
    assert_eq!((second.committed, second.pushed, second.commit), (false, false, Some(commit.clone())));
    assert_eq!(git(&remote, &["rev-list", "--count", "main..picogent/TE-12"]), "1");

    // Its folder gone, the branch is found again in the mirror: the work goes on from it.
    workspaces.remove(&again).await.unwrap();
    assert!(!again.path.exists());
    let (reopened, _) = workspaces.open("billing", &key, None).await.unwrap();
    assert_eq!(git(&reopened.path, &["rev-parse", "HEAD"]), commit);
}

#[tokio::test]
async fn two_tasks_get_two_workspaces_and_a_failing_after_create_hook_leaves_none() {
    let dir = tempfile::tempdir().unwrap();
    let remote = remote(dir.path());
    let workspaces = Workspaces::new(Arc::new(config(dir.path(), &remote)), "picogent", "p@x");
    let (one, _) = workspaces.open("billing", &TaskKey::new("TE-1").unwrap(), None).await.unwrap();
    let (two, _) = workspaces.open("billing", &TaskKey::new("TE-2").unwrap(), None).await.unwrap();
    assert_ne!(one.path, two.path);
    assert_eq!(workspaces.present().len(), 2);
    assert!(workspaces.disk_usage() > 0);

    let mut failing = config(dir.path(), &remote);
    failing.hooks.after_create = Some("echo cannot install; exit 4".into());
    let workspaces = Workspaces::new(Arc::new(failing), "picogent", "p@x");
    let error = workspaces.open("billing", &TaskKey::new("TE-3").unwrap(), None).await.unwrap_err().to_string();
    assert!(error.contains("the after_create hook failed (exit 4): cannot install"), "{error}");
    assert!(!dir.path().join("workspaces/billing/TE-3").exists());
}

#[tokio::test]
async fn a_workspace_made_on_a_chosen_branch_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let remote = remote(dir.path());
    let workspaces = Workspaces::new(Arc::new(config(dir.path(), &remote)), "picogent", "p@x");
    let key = TaskKey::new("TE-4").unwrap();
    let (made, _) = workspaces.open("billing", &key, Some("picogent/fix-dates")).await.unwrap();
    assert_eq!(made.branch, "picogent/fix-dates");
    assert_eq!(git(&made.path, &["rev-parse", "--abbrev-ref", "HEAD"]), "picogent/fix-dates");
    // A follow-up that names no branch goes on on it; one naming another is refused.
    let (again, _) = workspaces.open("billing", &key, None).await.unwrap();
    assert_eq!(again.branch, "picogent/fix-dates");
    let error = workspaces.open("billing", &key, Some("picogent/other")).await.unwrap_err().to_string();
    assert!(error.contains("is not the workspace of picogent/other"), "{error}");
    std::fs::write(made.path.join("src/date.py"), "changed\n").unwrap();
    let finished = workspaces.finish(&again, "TE-4: fix").await.unwrap();
    assert!(finished.pushed);
    assert_eq!(git(&remote, &["log", "-1", "--format=%s", "picogent/fix-dates"]), "TE-4: fix");
}

#[test]
fn hostile_names_are_refused_before_git_sees_them() {
    assert!(TaskKey::new("--upload-pack=touch /tmp/x").is_err());
    assert!(TaskKey::new("../../etc").is_err());
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path(), Path::new("/srv/git/billing.git"));
    config.allowed_paths = vec![PathBuf::from("/srv/git")];
    assert!(config.check().is_ok());
    config.repositories.get_mut("billing").unwrap().url = "/home/other/secret.git".into();
    let Problem { field, message } = config.check().unwrap_err();
    assert_eq!(field, "workspaces.repositories.billing.url");
    assert!(message.contains("outside `workspaces.allowed_paths`"), "{message}");
    config.repositories.get_mut("billing").unwrap().url = "--upload-pack=sh".into();
    assert!(config.check().unwrap_err().message.contains("git would read it as an option"));
    config.repositories.get_mut("billing").unwrap().url = "/srv/git/billing.git".into();
    config.repositories.get_mut("billing").unwrap().base = "-f".into();
    assert_eq!(config.check().unwrap_err().field, "workspaces.repositories.billing.base");
}

#[test]
fn a_repository_url_holding_a_credential_is_refused_without_showing_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path(), Path::new("/srv/git/billing.git"));
    for url in ["https://ghp_s3cret@git.example.com/team/billing.git", "https://bot:s3cret@git.example.com/billing.git"]
    {
        config.repositories.get_mut("billing").unwrap().url = url.into();
        let Problem { field, message } = config.check().unwrap_err();
        assert_eq!(field, "workspaces.repositories.billing.url");
        assert!(message.contains("holds a credential"), "{message}");
        assert!(!message.contains("s3cret"), "{message}");
    }
    config.repositories.get_mut("billing").unwrap().url = "https://git.example.com/team/billing.git".into();
    config.repositories.get_mut("billing").unwrap().push = Some("https://x:s3cret@git.example.com/b.git".into());
    let Problem { field, message } = config.check().unwrap_err();
    assert_eq!(field, "workspaces.repositories.billing.push");
    assert!(!message.contains("s3cret"), "{message}");
    // How ssh logs in is no secret.
    config.repositories.get_mut("billing").unwrap().push = Some("ssh://git@git.example.com/team/billing.git".into());
    assert!(config.check().is_ok());
    config.repositories.get_mut("billing").unwrap().push = Some("git@git.example.com:team/billing.git".into());
    assert!(config.check().is_ok());
}

/// A shell script standing in for a coding agent CLI: it prints stream-json lines, edits the file
/// its instructions name, and dumps its environment where the test reads it.
const STAND_IN: &str = r#"
printf '%s\n' '{"type":"assistant","message":{"content":[{"type":"tool_use","name":"edit","input":{"file_path":"src/date.py"}}]}}'
sed -i 's/2020-01-01/2024-06-01/' src/date.py
env > "$HOME/env.txt"
printf '%s\n' '{"type":"result","subtype":"success","result":"Changed src/date.py."}'
"#;

fn stand_in(script: &str) -> CodingAgentConfig {
    CodingAgentConfig {
        command: Some(vec!["sh".into(), "-c".into(), script.into(), "stand-in".into(), "{instructions}".into()]),
        output: Some(picogent_workspace::config::OutputFormat::Jsonl),
        env: Some(BTreeMap::from([("MODEL_URL".to_string(), "{base_url}".to_string())])),
        // Outside the sandbox: this crate's tests have no picogent binary for its relay (the
        // sandboxed runs are tests/sandbox.rs and tests/hostile_workspace.rs).
        sandbox: Some(false),
        ..CodingAgentConfig::default()
    }
}

#[tokio::test]
async fn a_coding_agent_works_in_the_workspace_with_only_the_environment_its_entry_names() {
    // SAFETY: set before anything else in this test binary reads the environment.
    unsafe {
        std::env::set_var("TEAMBOARD_TOKEN", "tok-secret-tracker");
        std::env::set_var("PICOGENT_MCP_TOKEN", "tok-secret-mcp");
    }
    let dir = tempfile::tempdir().unwrap();
    let remote = remote(dir.path());
    let workspaces = Workspaces::new(Arc::new(config(dir.path(), &remote)), "picogent", "p@x");
    let (workspace, _) = workspaces.open("billing", &TaskKey::new("TE-5").unwrap(), None).await.unwrap();
    let agent = stand_in(STAND_IN).resolve("stand-in").unwrap();
    let lines = Mutex::new(Vec::new());
    let invocation = Invocation {
        agent: &agent,
        workspace: &workspace,
        instructions: "Fix src/date.py; title: `rm -rf ~` $(touch /tmp/pwned)",
        model: "m",
        base_url: "http://127.0.0.1:9/v1",
    };
    let report =
        coding::run(&invocation, &|line| lines.lock().unwrap().push(line.to_string()), &CancellationToken::new()).await;
    assert_eq!(report.end, AgentEnd::Finished, "{report:?}");
    assert_eq!(report.final_message, "Changed src/date.py.");
    assert_eq!(report.progress, ["edit src/date.py"]);
    assert_eq!(lines.lock().unwrap().len(), 2, "each line streamed as it came");
    assert!(std::fs::read_to_string(workspace.path.join("src/date.py")).unwrap().contains("2024-06-01"));
    let env = std::fs::read_to_string(workspace.home.join("env.txt")).unwrap();
    assert!(env.contains("MODEL_URL=http://127.0.0.1:9/v1"), "{env}");
    assert!(!env.contains("tok-secret"), "no token of picogent's reaches the agent: {env}");
    assert!(!Path::new("/tmp/pwned").exists());
}

#[tokio::test]
async fn a_coding_agent_is_killed_at_a_stop_and_at_its_timeout_and_a_crash_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let remote = remote(dir.path());
    let workspaces = Workspaces::new(Arc::new(config(dir.path(), &remote)), "picogent", "p@x");
    let (workspace, _) = workspaces.open("billing", &TaskKey::new("TE-6").unwrap(), None).await.unwrap();
    let run = |script: &str, timeout_ms: u64, cancel: CancellationToken| {
        let mut entry = stand_in(script);
        entry.timeout_ms = Some(timeout_ms);
        let agent = entry.resolve("stand-in").unwrap();
        let workspace = workspace.clone();
        async move {
            let invocation =
                Invocation { agent: &agent, workspace: &workspace, instructions: "x", model: "m", base_url: "u" };
            coding::run(&invocation, &|_| {}, &cancel).await
        }
    };
    let pidfile = workspace.home.join("pid");
    let hang = format!("sleep 300 & echo $! > {}; wait", pidfile.display());

    let cancel = CancellationToken::new();
    let stopper = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        stopper.cancel();
    });
    let stopped = run(&hang, 60_000, cancel).await;
    assert_eq!(stopped.end, AgentEnd::Stopped);
    assert_eq!(stopped.failure().unwrap(), "the coding agent stand-in was stopped");
    assert_gone(&pidfile).await;

    let timed_out = run(&hang, 300, CancellationToken::new()).await;
    assert_eq!(timed_out.end, AgentEnd::TimedOut { after_ms: 300 });
    assert!(timed_out.failure().unwrap().contains("workspaces.agents.stand-in.timeout_ms"));
    assert_gone(&pidfile).await;

    let crashed = run("echo 'segfault in parser' >&2; exit 139", 60_000, CancellationToken::new()).await;
    assert_eq!(crashed.end, AgentEnd::Failed { reason: "exit 139: segfault in parser".into() });

    let missing = CodingAgentConfig {
        command: Some(vec!["no-such-coding-cli".into()]),
        sandbox: Some(false),
        ..Default::default()
    };
    let agent = missing.resolve("ghost").unwrap();
    let invocation = Invocation { agent: &agent, workspace: &workspace, instructions: "x", model: "m", base_url: "u" };
    let report = coding::run(&invocation, &|_| {}, &CancellationToken::new()).await;
    assert!(matches!(&report.end, AgentEnd::NotStarted { reason } if reason.contains("is it installed")), "{report:?}");
}

/// The process whose pid is in `pidfile` is gone (or a zombie about to be reaped).
async fn assert_gone(pidfile: &Path) {
    let pid: i32 = std::fs::read_to_string(pidfile).unwrap().trim().parse().unwrap();
    std::fs::remove_file(pidfile).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let alive = stat.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')) && !stat.is_empty();
        if !alive {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{pid} outlived its coding agent");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn an_outcome_file_that_is_not_done_is_a_failure_though_the_exit_is_0() {
    let dir = tempfile::tempdir().unwrap();
    let remote = remote(dir.path());
    let workspaces = Workspaces::new(Arc::new(config(dir.path(), &remote)), "picogent", "p@x");
    let (workspace, _) = workspaces.open("billing", &TaskKey::new("TE-7").unwrap(), None).await.unwrap();
    // As mini-swe-agent past its step limit: exit 0, its trajectory says otherwise.
    let entry = CodingAgentConfig {
        command: Some(vec![
            "sh".into(),
            "-c".into(),
            "echo \"{\\\"info\\\":{\\\"exit_status\\\":\\\"$1\\\"}}\" > \"$HOME/out.json\"".into(),
            "x".into(),
            "{instructions}".into(),
        ]),
        result: Some(picogent_workspace::config::ResultFile {
            path: "{home}/out.json".into(),
            pointer: "/info/exit_status".into(),
            done: vec!["Submitted".into()],
        }),
        sandbox: Some(false),
        ..CodingAgentConfig::default()
    };
    let agent = entry.resolve("mini").unwrap();
    let run = |instructions: &'static str| {
        let (agent, workspace) = (agent.clone(), workspace.clone());
        async move {
            let invocation =
                Invocation { agent: &agent, workspace: &workspace, instructions, model: "m", base_url: "u" };
            coding::run(&invocation, &|_| {}, &CancellationToken::new()).await
        }
    };
    assert_eq!(run("Submitted").await.end, AgentEnd::Finished);
    assert_eq!(run("LimitsExceeded").await.end, AgentEnd::Failed { reason: "it ended LimitsExceeded".into() });
    // A run that writes nothing is not taken for the one before it.
    let silent = CodingAgentConfig { command: Some(vec!["true".into()]), ..entry.clone() }.resolve("mini").unwrap();
    let invocation = Invocation { agent: &silent, workspace: &workspace, instructions: "x", model: "m", base_url: "u" };
    let report = coding::run(&invocation, &|_| {}, &CancellationToken::new()).await;
    assert!(
        matches!(&report.end, AgentEnd::Failed { reason } if reason.starts_with("it wrote no result file")),
        "{report:?}"
    );
}

#[tokio::test]
async fn one_coding_agent_at_a_time_per_workspace_and_none_across_two() {
    let dir = tempfile::tempdir().unwrap();
    let remote = remote(dir.path());
    let workspaces = Arc::new(Workspaces::new(Arc::new(config(dir.path(), &remote)), "picogent", "p@x"));
    let (one, _) = workspaces.open("billing", &TaskKey::new("TE-8").unwrap(), None).await.unwrap();
    let (other, _) = workspaces.open("billing", &TaskKey::new("TE-9").unwrap(), None).await.unwrap();
    let held = workspaces.lock(&one).await;
    // Another task's workspace is free; the same one waits until the first lets go.
    let _other =
        tokio::time::timeout(Duration::from_secs(5), workspaces.lock(&other)).await.expect("another workspace");
    assert!(
        tokio::time::timeout(Duration::from_millis(200), workspaces.lock(&one)).await.is_err(),
        "the same workspace waits"
    );
    let waiting = tokio::spawn({
        let (workspaces, one) = (workspaces.clone(), one.clone());
        async move {
            let _second = workspaces.lock(&one).await;
        }
    });
    drop(held);
    tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the second gets it once the first let go")
        .unwrap();
    // Nor is a workspace removed while a coding agent works in it.
    let held = workspaces.lock(&one).await;
    assert!(workspaces.remove_if_idle(&one).await.unwrap().is_none());
    assert!(one.path.exists());
    drop(held);
    assert!(workspaces.remove_if_idle(&one).await.unwrap().is_some());
    assert!(!one.path.exists());
}
