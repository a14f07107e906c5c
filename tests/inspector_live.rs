//! The run inspector shows a run while it runs: each turn is checkpointed into the state
//! database, so the run's page (`/runs/{id}` on the agent's listener) lists the tool calls made
//! so far before the run ends. The agent in process, the reference board and the offline model
//! answering each request after 300 ms, over loopback. And `picogent runs list|show` (the
//! binary) print the same runs for a terminal: a list that fits 120 columns, a run found by the
//! short id the list shows.

#[path = "support/agent.rs"]
mod agent_support;

use std::time::Duration;

use agent_support::*;
use picogent::state::RunStatus;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_runs_page_shows_the_turns_so_far() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(300).await;
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}))).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");
    let steps: String = (1..=8).map(|n| format!("- step {n}\n")).collect();
    let task = create_assigned(&alice, "A task with many steps", &steps).await;
    let session = format!("task:{}", task.id);
    let run = eventually(Duration::from_secs(20), "the task's run", || async {
        runs_for(&agent, &session).await.into_iter().next()
    })
    .await;
    let page = format!("http://{}/runs/{}", agent.http_addr.unwrap(), run.id);
    let seen_running = eventually(Duration::from_secs(30), "a tool call on the page of the running run", || async {
        let html = reqwest::get(&page).await.ok()?.text().await.ok()?;
        let still_running = agent.state.get_run(&run.id).await.ok()??.status == RunStatus::Running;
        (html.contains("complete_step") && still_running).then_some(html)
    })
    .await;
    assert!(seen_running.contains("add_step") || seen_running.contains("complete_step"));
    wait_status(&alice, &task.id, picogent::tracker::model::TaskStatus::InReview).await;
    let done = eventually(Duration::from_secs(10), "the finished run's page", || async {
        let run = agent.state.get_run(&run.id).await.ok()??;
        (run.status == RunStatus::Completed).then_some(())?;
        reqwest::get(&page).await.ok()?.text().await.ok()
    })
    .await;
    assert!(done.matches("complete_step").count() >= 8, "every step's call is on the page");
    agent.shutdown().await.unwrap();
    model.shutdown().await;
}

/// A run waiting for a slot (`limits.max_concurrent_runs`) is listed as queued until it starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_waiting_for_a_slot_is_listed_as_queued() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(300).await;
    let extra = json!({"limits": {"max_concurrent_runs": 1}});
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra)).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");
    let steps: String = (1..=4).map(|n| format!("- step {n}\n")).collect();
    let _first = create_assigned(&alice, "The first task", &steps).await;
    let second = create_assigned(&alice, "The second task", &steps).await;
    let runs = format!("http://{}/runs", agent.http_addr.unwrap());
    let html = eventually(Duration::from_secs(20), "the second task queued on the runs page", || async {
        let html = reqwest::get(&runs).await.ok()?.text().await.ok()?;
        html.contains(&format!("data-queued=\"task:{}\"", second.id)).then_some(html)
    })
    .await;
    assert!(html.contains("Queued, waiting for a free slot"), "{html}");
    assert!(html.contains(&format!("task.assigned {}", second.key)), "its trigger: {html}");
    wait_status(&alice, &second.id, picogent::tracker::model::TaskStatus::InReview).await;
    let html = reqwest::get(&runs).await.unwrap().text().await.unwrap();
    assert!(!html.contains("Queued, waiting"), "nothing waits any more: {html}");
    agent.shutdown().await.unwrap();
    model.shutdown().await;
}

/// `picogent runs list` fits a terminal of 120 columns, whatever the runs hold, and names a chat
/// run by its words; `picogent runs show` takes the short id it shows (or any unique start of
/// an id), and an ambiguous start is an error that lists the runs it could mean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_list_fits_120_columns_and_runs_show_takes_a_short_id() {
    let dir = tempfile::tempdir().unwrap();
    let state_path = dir.path().join("state.db");
    let state = picogent::state::State::open(&state_path).await.unwrap();
    // Seventeen runs: two of them share the first character of their id (there are 16).
    let mut ids = Vec::new();
    for n in 0..16 {
        let id = state
            .start_run(&picogent::session::SessionKey::Task(format!("t{n}")), &format!("task.assigned TE-{}", 1000 + n))
            .await
            .unwrap();
        let finish = picogent::state::FinishRun {
            turns: 12,
            tool_calls: 40,
            prompt_tokens: 1_234_567,
            outcome: Some(format!("{} {}", "a long outcome that goes on and on;".repeat(8), n)),
            ..picogent::state::FinishRun::new(RunStatus::Failed)
        };
        assert!(state.finish_run(&id, &finish).await.unwrap());
        ids.push(id);
    }
    let message_id = "5d0c1a2b-3e4f-4a5b-8c6d-7e8f9a0b1c2d";
    let chat = state
        .start_run(&picogent::session::SessionKey::Thread(message_id.to_string()), &format!("message.new {message_id}"))
        .await
        .unwrap();
    let record = json!({"prompt": "…", "history_len": 0, "message_words": "what is on the board for the release?"});
    let finish = picogent::state::FinishRun {
        outcome: Some("Replied in the thread.".into()),
        record: Some(record),
        ..picogent::state::FinishRun::new(RunStatus::Completed)
    };
    assert!(state.finish_run(&chat, &finish).await.unwrap());
    ids.push(chat.clone());
    state.close().await;
    let config = dir.path().join("agent.json");
    let text = json!({
        "slug": "picogent", "name": "Picogent", "prompts_dir": dir.path(),
        "tracker": {"url": "http://127.0.0.1:9"},
        "llm": {"base_url": "http://127.0.0.1:9/v1", "model": "m"},
        "state": {"path": state_path},
    });
    std::fs::write(&config, text.to_string()).unwrap();
    let runs = |args: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_picogent"))
            .arg("runs")
            .args(args)
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).to_string(),
            String::from_utf8_lossy(&output.stderr).to_string(),
        )
    };

    let (code, list, stderr) = runs(&["list"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(list.lines().count(), 1 + ids.len(), "a header and a line per run:\n{list}");
    for line in list.lines() {
        assert!(line.chars().count() <= 120, "{} columns: {line}", line.chars().count());
    }
    for id in &ids {
        assert!(list.lines().any(|line| line.starts_with(&id[..8])), "{id} by its short id:\n{list}");
    }
    let chat_line = list.lines().find(|line| line.starts_with(&chat[..8])).unwrap();
    assert!(chat_line.contains("  \"what is on the board for the release?\": Replied"), "{chat_line}");
    assert!(!list.contains(message_id), "the message id is no name for a person:\n{list}");

    let (code, shown, stderr) = runs(&["show", &chat[..8]]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(shown.starts_with(&format!("run      {chat}  Completed")), "{shown}");
    let (code, shown, _) = runs(&["show", &chat]);
    assert_eq!(code, Some(0));
    assert!(shown.contains(&chat), "the whole id works too: {shown}");

    let first = |id: &String| id.chars().next().unwrap();
    let shared = ids.iter().map(first).find(|c| ids.iter().filter(|id| first(id) == *c).count() > 1).unwrap();
    let (code, out, stderr) = runs(&["show", &shared.to_string()]);
    assert_eq!(code, Some(1), "{out}");
    assert!(stderr.contains("is the start of several runs' ids; give more of it"), "{stderr}");
    let mut meant: Vec<&String> = ids.iter().filter(|id| first(id) == shared).collect();
    meant.sort();
    for id in meant.iter().take(10) {
        assert!(stderr.contains(id.as_str()), "{id} is listed: {stderr}");
    }
    let (code, _, stderr) = runs(&["show", "nosuchrun"]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("no run nosuchrun") && stderr.contains("picogent runs list"), "{stderr}");
}
