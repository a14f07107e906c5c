//! A task tree end to end, as a person sees it on the board: the reference board, the offline
//! model and the agent, all on 127.0.0.1:0. A parent assigned to the agent is broken into three
//! sub-tasks (made here as a plan's run makes them: labels `parent:KEY` and `blocked_by:KEY`, a
//! watch and a step each; the offline model makes no plans); two run at once, the third waits for
//! its blocker with one notice, and the parent is rolled up once when all are done.

#[path = "support/agent.rs"]
mod agent_support;

use std::time::Duration;

use agent_support::*;
use picogent::inspector::startup::ReconcileReport;
use picogent::router::Input;
use picogent::runtime::AgentHandle;
use picogent::state::RunStatus;
use picogent::tracker::TrackerClient;
use picogent::tracker::model::*;
use picogent::tracker::tree::{blocked_by_label, parent_label};
use picogent::transport::{LinkStatus, StartMode, StreamItem};
use serde_json::json;

/// A sub-task of `parent` the agent makes and assigns to itself, as a plan's run makes it:
/// labelled, watched, and with its step on the parent.
async fn sub_task(agent: &TrackerClient, parent: &TaskOut, title: &str, blocked_by: &[&TaskOut]) -> TaskOut {
    let mut labels = vec![parent_label(&parent.key)];
    labels.extend(blocked_by.iter().map(|blocker| blocked_by_label(&blocker.key)));
    let body = CreateTask {
        project_slug: "team".into(),
        title: title.into(),
        description: Some(format!("Part of {}", parent.key)),
        assignee_slug: Some("picogent".into()),
        labels: Some(labels),
        ..CreateTask::default()
    };
    let task = agent.create_task(&body, None).await.unwrap();
    agent.watch_task(&task.id, "picogent", None).await.unwrap();
    agent.add_step(&parent.id, &format!("{}: {}", task.key, task.title), None).await.unwrap();
    task
}

/// `event` under a new id, as a redelivery under another id (or a second look) brings it.
async fn deliver_again(agent: &AgentHandle, id: &str, name: &str, event: Event) {
    let ts = time::OffsetDateTime::now_utc().format(&time::format_description::well_known::Rfc3339).unwrap();
    let received = ReceivedEvent { id: id.into(), seq: 0, name: name.into(), ts, event };
    agent.inputs.send(Input::Stream(Box::new(StreamItem::Event(received)))).await.unwrap();
}

/// A reconciliation, as after a reconnect (the stream began again and caught up); returns what
/// it found and did once the router has taken it all up and every run it started has ended.
async fn reconcile(agent: &AgentHandle) -> ReconcileReport {
    let began = LinkStatus::Began { mode: StartMode::Resume, from_seq: 0, skipped: 0 };
    for status in [began, LinkStatus::CaughtUp { last_seq: 0 }] {
        agent.inputs.send(Input::Stream(Box::new(StreamItem::Status(status)))).await.unwrap();
    }
    // Past the barrier, the report of an earlier reconciliation is gone from the status board.
    router_settled(agent).await;
    let report = eventually(Duration::from_secs(20), "the reconciliation taken up", || async {
        agent.status.startup().and_then(|startup| startup.reconciliation)
    })
    .await;
    wait_settled(agent).await;
    report
}

async fn agent_comments(alice: &TrackerClient, task: &TaskOut) -> Vec<String> {
    let all = comments(alice, &task.id).await;
    all.into_iter().filter(|message| message.author_slug == "picogent").map(|message| message.content).collect()
}

async fn runs_of(agent: &AgentHandle, task: &TaskOut) -> Vec<picogent::state::RunRow> {
    runs_for(agent, &format!("task:{}", task.id)).await
}

async fn set_status(who: &TrackerClient, task: &TaskOut, status: TaskStatus) -> TaskOut {
    who.update_task(&task.id, &UpdateTask { status: Some(status), ..UpdateTask::default() }).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sub_tasks_start_in_order_and_the_parent_is_rolled_up_once() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let board_db = dir.path().join("board.db");
    let model = start_model(0).await;
    let alice = client(&board, "tok-alice");
    let me = client(&board, "tok-picogent");

    // TE-1 was assigned to the agent, which broke it down and said so: its comment after the
    // assignment tells the start's reconciliation the task has been taken up.
    let parent = create_assigned(&alice, "Add CSV export to the reports page", "Export what the page shows.").await;
    assert_eq!(parent.key, "TE-1");
    let parent = set_status(&me, &parent, TaskStatus::InProgress).await;
    comment(&me, &parent.id, "I broke this into three sub-tasks and roll them up here.").await;
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}))).await;
    wait_ready(&agent).await;

    let backend = sub_task(&me, &parent, "CSV endpoint", &[]).await;
    let frontend = sub_task(&me, &parent, "Export button", &[]).await;
    let docs = sub_task(&me, &parent, "Docs page", &[&backend]).await;
    assert_eq!([&backend.key, &frontend.key, &docs.key], ["TE-2", "TE-3", "TE-4"]);

    // TE-2 and TE-3 are worked; TE-4 waits for TE-2, says so once and has no run.
    for task in [&backend, &frontend] {
        wait_status(&alice, &task.id, TaskStatus::InReview).await;
    }
    caught_up_with_board(&agent, &board_db, "picogent").await;
    for task in [&backend, &frontend] {
        let runs = runs_of(&agent, task).await;
        assert_eq!(runs.len(), 1, "{}: {runs:#?}", task.key);
        assert_eq!(runs[0].status, RunStatus::Completed, "{}", task.key);
    }
    let waiting = agent_comments(&alice, &docs).await;
    assert_eq!(waiting.len(), 1, "{waiting:#?}");
    assert!(
        waiting[0].starts_with("Waiting for TE-2 (") && waiting[0].contains("I start when it is done."),
        "{waiting:?}"
    );
    assert!(runs_of(&agent, &docs).await.is_empty(), "TE-4 waits");
    assert_eq!(alice.get_task(&docs.id).await.unwrap().status, TaskStatus::Todo);

    // Its assignment again under another id, and a reconciliation: nothing more said or started.
    let assigned = TaskAssignedData { task: docs.clone(), assigned_by: "picogent".into() };
    deliver_again(&agent, "replayed-assignment", EVENT_TASK_ASSIGNED, Event::TaskAssigned(assigned)).await;
    router_settled(&agent).await;
    let found = reconcile(&agent).await;
    assert_eq!((found.tasks.worked, found.tasks.skipped.get("blocked")), (0, Some(&1)), "{found:?}");
    assert_eq!(agent_comments(&alice, &docs).await.len(), 1, "said once");
    assert!(runs_of(&agent, &docs).await.is_empty(), "still waiting");
    assert!(agent.metrics.event_count("task.assigned", "blocked") >= 3);

    // TE-2 done: TE-4 starts, and TE-2's step on the parent is ticked.
    set_status(&alice, &backend, TaskStatus::Done).await;
    wait_status(&alice, &docs.id, TaskStatus::InReview).await;
    caught_up_with_board(&agent, &board_db, "picogent").await;
    let runs = runs_of(&agent, &docs).await;
    assert_eq!(runs.len(), 1, "{runs:#?}");
    assert_eq!(runs[0].status, RunStatus::Completed);
    let steps = alice.list_steps(&parent.id).await.unwrap();
    let ticked: Vec<(&str, bool)> = steps.iter().map(|step| (step.title.as_str(), step.done)).collect();
    assert_eq!(ticked, [("TE-2: CSV endpoint", true), ("TE-3: Export button", false), ("TE-4: Docs page", false)]);
    assert_ne!(alice.get_task(&parent.id).await.unwrap().status, TaskStatus::InReview);

    // The rest done: the parent gets one summary and moves to review, every step ticked.
    set_status(&alice, &frontend, TaskStatus::Done).await;
    let docs_done = set_status(&alice, &docs, TaskStatus::Done).await;
    wait_status(&alice, &parent.id, TaskStatus::InReview).await;
    caught_up_with_board(&agent, &board_db, "picogent").await;
    let summary = |said: &Vec<String>| said.iter().filter(|text| text.starts_with("All 3 sub-tasks of TE-1")).count();
    let said = agent_comments(&alice, &parent).await;
    assert_eq!(summary(&said), 1, "{said:#?}");
    let text = said.iter().find(|text| text.starts_with("All 3")).unwrap();
    for line in [
        "- TE-2: CSV endpoint (assigned to picogent, done)",
        "- TE-3: Export button (assigned to picogent, done)",
        "- TE-4: Docs page (assigned to picogent, done)",
    ] {
        assert!(text.contains(line), "{text}");
    }
    // The sub-tasks' runs were the agent's: the summary says what the tree spent of its budget.
    let spent = text.split("The tree's runs here spent ").nth(1).unwrap_or_else(|| panic!("a spend line: {text}"));
    let tokens: u64 = spent.split(' ').next().unwrap().replace(',', "").parse().unwrap();
    assert!(tokens > 0 && spent.contains("tokens of 400,000 (`limits.max_tokens_per_tree`)"), "{text}");
    assert!(alice.list_steps(&parent.id).await.unwrap().iter().all(|step| step.done));

    // The last end again under another id, and a reconciliation: no second summary, no run.
    let updated = TaskUpdatedData { task: docs_done, changed: vec!["status".into()], updated_by: "alice".into() };
    deliver_again(&agent, "replayed-update", EVENT_TASK_UPDATED, Event::TaskUpdated(updated)).await;
    router_settled(&agent).await;
    let found = reconcile(&agent).await;
    assert_eq!((found.tasks.open, found.tasks.worked), (0, 0), "{found:?}");
    assert_eq!(summary(&agent_comments(&alice, &parent).await), 1, "one summary");
    assert_eq!(alice.get_task(&parent.id).await.unwrap().status, TaskStatus::InReview);
    assert!(runs_of(&agent, &parent).await.is_empty(), "the parent's plan was never run again");
    for task in [&backend, &frontend, &docs] {
        assert_eq!(runs_of(&agent, task).await.len(), 1, "{}", task.key);
    }
    assert!(agent.metrics.event_count("task.updated", "rolled_up") >= 2);
    assert_eq!(agent.metrics.event_count("task.updated", "unblocked"), 1);
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}
