//! The board page and the run inspector in a real browser: Debian's Chromium, driven by
//! Playwright (`tests/browser/see_it_work.mjs`) against the demo stack started here (reference
//! board, offline planner model, agent): statuses as labels, times as "3 min ago" with the exact
//! time on hover, a chat run named by its question's words, the start told in a table. Chromium
//! and the script's packages are installed on first use (`tests/browser/install.sh`); the test
//! fails, never skips, when that fails, and says why. Screenshots land in
//! `target/browser-screenshots/`.

#[path = "support/agent.rs"]
mod agent_support;
#[path = "support/git.rs"]
mod git_support;
#[path = "support/setup.rs"]
mod setup;

use std::path::{Path, PathBuf};
use std::time::Duration;

use picogent::secret::Secret;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// The token of the inspector served off loopback.
const UI_TOKEN: &str = "ui-token-for-the-browser-test";

fn chromium() -> PathBuf {
    let path = PathBuf::from(std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into()));
    assert!(
        path.exists(),
        "Chromium is missing at {}: install Debian's package (apt-get install -y chromium) or set CHROMIUM; \
         .ci/run installs it",
        path.display()
    );
    path
}

fn browser_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    assert!(
        dir.join("node_modules/playwright-core/package.json").exists(),
        "playwright-core is missing: run `npm ci` in tests/browser (.ci/run does)"
    );
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_sees_the_agent_work_in_the_browser() {
    setup::ensure_browser();
    let chromium = chromium();
    let dir = browser_dir();
    let prompts = Path::new(env!("CARGO_MANIFEST_DIR")).join("prompts");
    let demo = picogent::demo::start(Some(prompts)).await.expect("the demo stack starts");
    agent_support::wait_ready(&demo.agent).await;
    let inspector = format!("http://{}", demo.agent.http_addr.expect("the agent serves http"));
    // The same inspector on a listener that is not loopback (all addresses, reached here through
    // 127.0.0.1): every page wants the token.
    let wildcard: std::net::SocketAddr = "0.0.0.0:0".parse().unwrap();
    let access = picogent::inspector::Access::for_listener(wildcard, Some(Secret::new(UI_TOKEN)), "PICOGENT_UI_TOKEN")
        .expect("a token is set");
    let guarded = picogent::inspector::Inspector::new(
        demo.agent.state.clone(),
        demo.agent.status.clone(),
        demo.agent.metrics.clone(),
        picogent::runtime::inspector_settings(&demo.config),
        Vec::new(),
        access,
        CancellationToken::new(),
    );
    let stop_guarded = CancellationToken::new();
    let doors = picogent::web::DoorLimits::default();
    let (guarded_addr, _guarded) =
        picogent::runtime::http::serve(wildcard, picogent::inspector::routes(guarded), doors, stop_guarded.clone())
            .await
            .expect("the guarded inspector listens");
    let guarded_url = format!("http://127.0.0.1:{}", guarded_addr.port());
    let shots = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/browser-screenshots");
    let run = tokio::process::Command::new("node")
        .arg("see_it_work.mjs")
        .current_dir(&dir)
        .env("BOARD_URL", demo.board.url())
        .env("INSPECTOR_URL", &inspector)
        .env("GUARDED_INSPECTOR_URL", &guarded_url)
        .env("UI_TOKEN", UI_TOKEN)
        .env("SCREENSHOTS", &shots)
        .env("CHROMIUM", &chromium)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(300), run)
        .await
        .expect("the browser script finishes within 5 minutes")
        .expect("node runs (install Node.js)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    stop_guarded.cancel();
    demo.shutdown().await.expect("the demo stack stops");
    assert!(output.status.success(), "the browser scenarios failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("7 passed, 0 failed"), "not every scenario ran:\n{stdout}");
    for shot in [
        "board-signed-in.png",
        "board-task-worked.png",
        "board-columns.png",
        "board-chat.png",
        "inspector-runs.png",
        "inspector-chat-run.png",
        "inspector-run.png",
        "inspector-events.png",
        "inspector-health.png",
        "board-escaped-title.png",
        "inspector-token-needed.png",
    ] {
        assert!(shots.join(shot).exists(), "no screenshot {shot} in {}", shots.display());
    }
}

/// A coding run watched in the inspector in Chromium (`tests/browser/coding_live.mjs`): the run
/// page shows the coding agent's output so far, its next lines arrive through the page's live
/// updates while it works (the same lines `run://{id}/logs` serves), escaped as text, and when it
/// ends the page names the branch and the pushed commit. The coding agent waits for a file before
/// each step; the browser script writes it once it has seen the step before, so nothing is timed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_watches_a_coding_run_live_in_the_browser() {
    use agent_support::*;
    setup::ensure_browser();
    let chromium = chromium();
    let dir = tempfile::tempdir().unwrap();
    let remote = git_support::remote(dir.path());
    // In its home, which the sandbox shows it (the seeded board's first task is TE-1).
    let home = dir.path().join("workspaces/.homes/app/TE-1");
    let script = "echo 'reading the date parser'; while [ ! -f \"$HOME/go-1\" ]; do sleep 0.1; done; \
         sed -i 's/2020-01-01/2024-06-01/' src/date.py; echo 'edited the date parser <b>bold</b>'; \
         while [ ! -f \"$HOME/go-2\" ]; do sleep 0.1; done; echo 'all done'";
    let extra = json!({"workspaces": {
        "root": dir.path().join("workspaces"),
        "repositories": {"app": {"url": remote, "base": "main", "projects": ["team"]}},
        "agents": {"watched": {"command": ["sh", "-c", script, "coding-agent", "{instructions}"]}},
        "agent": "watched",
        "direct": true,
    }});
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra)).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");
    let task = create_assigned(&alice, "Fix the date parser", "In src/date.py the default date is old.").await;
    assert_eq!(task.key, "TE-1");
    let run = eventually(Duration::from_secs(20), "the task's run", || async {
        runs_for(&agent, &format!("task:{}", task.id)).await.into_iter().next()
    })
    .await;
    let shots = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/browser-screenshots-coding");
    let watch = tokio::process::Command::new("node")
        .arg("coding_live.mjs")
        .current_dir(browser_dir())
        .env("RUN_URL", format!("http://{}/runs/{}", agent.http_addr.unwrap(), run.id))
        .env("GO_1", home.join("go-1"))
        .env("GO_2", home.join("go-2"))
        .env("SCREENSHOTS", &shots)
        .env("CHROMIUM", &chromium)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(180), watch)
        .await
        .expect("the browser script finishes within 3 minutes")
        .expect("node runs (install Node.js)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    wait_idle(&agent).await;
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
    assert!(output.status.success() && stdout.contains("ok coding run live"), "{stdout}\n{stderr}");
    for shot in ["inspector-coding-live-1.png", "inspector-coding-live-2.png", "inspector-coding-done.png"] {
        assert!(shots.join(shot).exists(), "no screenshot {shot} in {}", shots.display());
    }
}
