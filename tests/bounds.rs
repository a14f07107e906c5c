//! What another local user, or a model making names up, cannot get at or make grow, over real
//! sockets and files: the state database, its log and lock, and the board's database are `0600`
//! (so no other user reads them, or takes the lock to keep the agent from starting); a lock file
//! another user made is refused naming them; and `/metrics` gets no series from invented tool
//! names.
//!
//! The tests acting as another user need root (they run a command as `nobody`, and give a file
//! to it). CI runs as root; without root those parts are skipped, each printing `skipped (not
//! root)` and why, and the rest is checked.

#[path = "support/agent.rs"]
mod agent_support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::Duration;

use agent_support::{
    agent_config, client, comments, create_assigned, eventually, picogent_output, start_agent, start_board,
    start_model, wait_idle, wait_ready, write_config,
};
use picogent::offline_model::{self, OfflineModelOptions, script::Script};
use serde_json::json;

/// The uid (and gid) of `nobody` on Debian and most Linux systems.
const NOBODY: u32 = 65534;

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).mode() & 0o7777
}

fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").map(|m| m.uid() == 0).unwrap_or(false)
}

/// `command` run as `nobody`: whether it succeeded, and what it said.
fn as_nobody(command: &str, args: &[&str]) -> (bool, String) {
    let output = std::process::Command::new(command).args(args).uid(NOBODY).gid(NOBODY).output().unwrap();
    (output.status.success(), String::from_utf8_lossy(&output.stderr).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_state_its_log_and_lock_and_the_boards_database_are_private() {
    let dir = tempfile::tempdir().unwrap();
    // A folder any user may enter, as a home folder often is: only the files' modes keep them out.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let config = agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}));
    let agent = start_agent(config.clone()).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");
    let task = create_assigned(&alice, "Write it down", "- one\n- two").await;
    eventually(Duration::from_secs(30), "the run's summary", || async {
        comments(&alice, &task.id).await.iter().any(|m| m.author_slug == "picogent").then_some(())
    })
    .await;
    wait_idle(&agent).await;

    let files = ["picogent.db", "picogent.db-wal", "picogent.db-shm", "picogent.db.lock", "board.db", "board.db-wal"];
    for name in files {
        assert_eq!(mode(&dir.path().join(name)), 0o600, "{name}");
    }
    assert_eq!(mode(dir.path()), 0o755, "a folder picogent did not make is left as it is");
    if running_as_root() {
        // Another user reads neither database.
        for name in ["picogent.db", "picogent.db-wal", "board.db"] {
            let path = dir.path().join(name);
            let (read, said) = as_nobody("cat", &[path.to_str().unwrap()]);
            assert!(!read && said.contains("Permission denied"), "{name} was readable by nobody: {said}");
        }
    } else {
        eprintln!("skipped (not root): reading the files as another user needs root; CI runs as root");
    }
    agent.shutdown().await.unwrap();

    // With no agent running, another user cannot take the lock to keep the next start off.
    if running_as_root() {
        let lock = dir.path().join("picogent.db.lock");
        let (took, said) = as_nobody("flock", &["--nonblock", lock.to_str().unwrap(), "true"]);
        assert!(!took, "nobody took the state lock");
        assert!(said.contains("Permission denied"), "{said}");
    } else {
        eprintln!("skipped (not root): taking the lock as another user needs root; CI runs as root");
    }
    let agent = start_agent(config).await;
    wait_ready(&agent).await;
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_file_or_state_another_user_made_is_refused_naming_them() {
    if !running_as_root() {
        eprintln!(
            "skipped (not root): giving a file to another user needs root; CI runs as root, and the unit tests \
             check the message"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let config = agent_config(dir.path(), &board.url(), "http://127.0.0.1:9/v1", "picogent", json!({}));
    let config_path = write_config(dir.path(), &config);
    for name in ["picogent.db.lock", "picogent.db"] {
        let path = dir.path().join(name);
        // Made by another user, and open to all: whoever made it could read it or lock it.
        std::fs::write(&path, b"").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        std::os::unix::fs::chown(&path, Some(NOBODY), Some(NOBODY)).unwrap();
        let output = picogent_output(&["run"], &config_path).await;
        assert!(!output.status.success(), "{name}: the agent started");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(&format!("belongs to user nobody (uid {NOBODY})")), "{name}: {stderr}");
        assert!(stderr.contains("not to user root (uid 0)"), "{name}: {stderr}");
        assert!(stderr.contains(&format!("rm {}", path.display())), "says what to do: {stderr}");
        std::fs::remove_file(&path).unwrap();
    }
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_invented_tool_names_add_no_series_to_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let invented: Vec<_> =
        (0..300).map(|n| json!({"name": format!("invented_tool_{n}"), "arguments": {"n": n}})).collect();
    let script = Script::from_json(
        &json!({"turns": [
            {"reply": {"tool_calls": invented}},
            {"expect": {"last_tool_result_is_error": true, "last_tool_result_contains": "unknown tool"},
             "reply": {"content": "I made those tools up."}}
        ]})
        .to_string(),
    )
    .unwrap();
    let model = offline_model::start(OfflineModelOptions::script(script)).await.unwrap();
    // 300 calls in one answer are more than the default output cap (2048 tokens) lets through.
    let extra = json!({"limits": {"max_tool_calls": 1000, "max_tokens_per_run": 1_000_000},
                       "llm": {"max_output_tokens": 32_000}});
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra)).await;
    wait_ready(&agent).await;
    let metrics = || async {
        let url = format!("http://{}/metrics", agent.http_addr.unwrap());
        reqwest::get(url).await.unwrap().text().await.unwrap()
    };
    let series = |text: &str| text.lines().filter(|l| !l.starts_with('#')).map(str::to_string).collect::<Vec<_>>();
    let before = metrics().await;
    assert!(!before.contains("picogent_tool_calls_total{"), "{before}");

    let alice = client(&board, "tok-alice");
    let task = create_assigned(&alice, "Use tools", "Use whatever tools you like.").await;
    eventually(Duration::from_secs(60), "the run's answer", || async {
        comments(&alice, &task.id).await.iter().any(|m| m.content.contains("made those tools up")).then_some(())
    })
    .await;
    wait_idle(&agent).await;
    assert_eq!(model.mismatches(), Vec::<String>::new());
    let after = metrics().await;
    assert!(!after.contains("invented_tool"), "an invented name is a label:\n{after}");
    let tool_series: Vec<String> =
        series(&after).into_iter().filter(|l| l.starts_with("picogent_tool_calls_total{")).collect();
    assert_eq!(tool_series, ["picogent_tool_calls_total{tool=\"unknown\",outcome=\"unknown_tool\"} 300"]);
    // Every series of events the run added is of an event name the agent knows.
    for line in
        series(&after).iter().filter(|l| l.starts_with("picogent_events_total{") && !before.contains(l.as_str()))
    {
        let event = line.split('"').nth(1).unwrap();
        assert!(
            ["task.assigned", "task.unassigned", "task.updated", "message.new", "run", "unknown"].contains(&event),
            "{line}"
        );
    }
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}
