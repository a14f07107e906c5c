//! The inspector's page of a task tree (`/tree/{key}` on the agent's listener), over the
//! reference board, the offline model and the agent's state, all on 127.0.0.1:0: a parent with
//! three sub-tasks (one worked by the agent, one in its first review round, one waiting for
//! another) shows each with its state, assignee, blockers, review round, spend and latest run;
//! a sub-task's run page links to the tree; what people wrote is escaped; a key that is not one,
//! or names no task, is a 404 page.

#[path = "support/agent.rs"]
mod agent_support;

use std::time::Duration;

use agent_support::*;
use picogent::state::RunStatus;
use picogent::tracker::TrackerClient;
use picogent::tracker::model::*;
use picogent::tracker::tree::{blocked_by_label, parent_label};
use reqwest::StatusCode;
use serde_json::json;

async fn task(alice: &TrackerClient, title: &str, assignee: Option<&str>, labels: Vec<String>) -> TaskOut {
    let body = CreateTask {
        project_slug: "team".into(),
        title: title.into(),
        assignee_slug: assignee.map(str::to_string),
        labels: Some(labels),
        ..CreateTask::default()
    };
    alice.create_task(&body, None).await.unwrap()
}

/// The row of the sub-task `key` in the tree page `html`.
fn row<'a>(html: &'a str, key: &str) -> &'a str {
    let start = html.find(&format!("<tr data-key=\"{key}\">")).unwrap_or_else(|| panic!("no row {key}: {html}"));
    let end = html[start..].find("</tr>").unwrap();
    &html[start..start + end]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tree_page_shows_each_sub_task_with_its_state_round_and_spend() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}))).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");

    let parent = task(&alice, "Add CSV export", None, Vec::new()).await;
    let endpoint = task(&alice, "CSV endpoint", Some("picogent"), vec![parent_label(&parent.key)]).await;
    let labels = vec![parent_label(&parent.key), "review-round:1".to_string()];
    let button = task(&alice, "Export button", Some("bob"), labels).await;
    let labels = vec![parent_label(&parent.key), blocked_by_label(&button.key)];
    let docs = task(&alice, "Docs <script>alert('tree')</script>", Some("bob"), labels).await;
    assert_eq!([&parent.key, &endpoint.key, &button.key, &docs.key], ["TE-1", "TE-2", "TE-3", "TE-4"]);

    // The agent works its sub-task to review; its run has ended when the task is there.
    wait_status(&alice, &endpoint.id, TaskStatus::InReview).await;
    let run = eventually(Duration::from_secs(20), "the sub-task's run ended", || async {
        let run = runs_for(&agent, &format!("task:{}", endpoint.id)).await.into_iter().next()?;
        (run.status == RunStatus::Completed).then_some(run)
    })
    .await;
    let tokens = run.prompt_tokens + run.completion_tokens;
    assert!(tokens > 0, "{run:#?}");

    let http = agent.http_addr.unwrap();
    let response = reqwest::get(format!("http://{http}/tree/TE-1")).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers().contains_key(reqwest::header::CONTENT_SECURITY_POLICY));
    let html = response.text().await.unwrap();
    assert!(html.contains("Add CSV export") && html.contains("unassigned"), "the parent: {html}");
    let spent = picogent::notices::thousands(tokens);
    let per_tree = picogent::notices::thousands(400_000);
    assert!(html.contains(&format!("{spent} of {per_tree}")), "the tree's spend against its budget: {html}");

    let worked = row(&html, "TE-2");
    assert!(worked.contains("data-status=\"in_review\"") && worked.contains("@picogent"), "{worked}");
    assert!(worked.contains(&format!("<td class=\"tokens\">{spent}</td>")), "its spend: {worked}");
    assert!(worked.contains(&format!("href=\"/runs/{}\"", run.id)), "its run: {worked}");
    assert!(worked.contains("<td class=\"round\"><span class=\"muted\">none</span>"), "no review yet: {worked}");

    let reviewed = row(&html, "TE-3");
    assert!(reviewed.contains("data-status=\"todo\"") && reviewed.contains("@bob"), "{reviewed}");
    assert!(reviewed.contains("<td class=\"round\">1</td>"), "its review round: {reviewed}");
    assert!(reviewed.contains("<td class=\"tokens\">0</td>") && reviewed.contains("no run here"), "{reviewed}");

    let waiting = row(&html, "TE-4");
    assert!(waiting.contains("<td class=\"blockers\">TE-3</td>"), "what it waits for: {waiting}");
    assert!(!html.contains("<script>alert"), "a title is text, not markup: {html}");
    assert!(waiting.contains("Docs &lt;script&gt;alert("), "{waiting}");

    // The sub-task's run page links to its tree.
    let run_page = reqwest::get(format!("http://{http}/runs/{}", run.id)).await.unwrap().text().await.unwrap();
    assert!(run_page.contains("href=\"/tree/TE-1\""), "{run_page}");

    // Not a key, and a key of no task: a plain 404 page each.
    for (path, says) in [("not-a-key", "not-a-key is not a task key"), ("TE-99", "no task TE-99 on the board")] {
        let response = reqwest::get(format!("http://{http}/tree/{path}")).await.unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
        let text = response.text().await.unwrap();
        assert!(text.contains(says), "{path}: {text}");
    }
    agent.shutdown().await.unwrap();
    model.shutdown().await;
}
