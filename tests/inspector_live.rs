//! The run inspector shows a run while it runs: each turn is checkpointed into the state
//! database, so the run's page (`/runs/{id}` on the agent's listener) lists the tool calls made
//! so far before the run ends. The agent in process, the reference board and the offline model
//! answering each request after 300 ms, over loopback.

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
