//! A run's own tree on the reference board: the write scope of a task run grows by exactly the
//! sub-tasks the agent made for its task, and `plan_subtasks` asks once and makes each sub-task
//! once, also when its call is made again with the same key (a run resumed after a crash).

use std::time::{Duration, Instant};

use picogent_support::secret::Secret;
use picogent_tools::plan::{PLAN_SUBTASKS, PlanTool};
use picogent_tools::scope::{Target, judge};
use picogent_tools::{DelegationConfig, PostPlace, RunScope, ToolContext, ToolSource};
use picogent_tracker::model::{CreateTask, MessageOut, MessageQuery, SendMessage, TaskOut, TaskQuery};
use picogent_tracker::session::SessionKey;
use picogent_tracker::{TrackerClient, TrackerConfig};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(20);

fn client(board: &picogent_board::BoardHandle, token: &str) -> TrackerClient {
    let config: TrackerConfig = serde_json::from_value(json!({"url": board.url()})).unwrap();
    TrackerClient::new(&config, Secret::new(token)).unwrap()
}

async fn create(who: &TrackerClient, title: &str, labels: &[&str], assignee: Option<&str>) -> TaskOut {
    let body = CreateTask {
        project_slug: "team".into(),
        title: title.into(),
        assignee_slug: assignee.map(str::to_string),
        labels: Some(labels.iter().map(|label| label.to_string()).collect()),
        ..CreateTask::default()
    };
    who.create_task(&body, None).await.unwrap()
}

async fn comment(who: &TrackerClient, task: &TaskOut, text: &str) -> MessageOut {
    let body = SendMessage { content: text.into(), task_id: Some(task.id.clone()), ..SendMessage::default() };
    who.send_message(&body, None).await.unwrap()
}

fn run_of(task: &TaskOut) -> ToolContext {
    let mut context = ToolContext::new("picogent");
    context.session = Some(SessionKey::Task(task.id.clone()));
    context.requester = Some("alice".to_string());
    context
}

async fn reach(context: &ToolContext, client: &TrackerClient, target: Target) -> RunScope {
    judge(&target, context, client).await.unwrap().reach
}

fn change(task: &TaskOut) -> Target {
    Target::Task { task: task.key.clone(), assignee: None }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_scope_grows_by_exactly_the_subtasks_the_agent_made_for_its_task() {
    let dir = tempfile::tempdir().unwrap();
    let board = picogent_board::start_seeded(dir.path()).await.unwrap();
    let (alice, picogent) = (client(&board, "tok-alice"), client(&board, "tok-picogent"));
    let own = create(&alice, "Add CSV export", &["epic"], Some("picogent")).await;
    let parent = format!("parent:{}", own.key);
    let subtask = create(&picogent, "Backend", &[&parent], Some("bob")).await;
    let labelled_by_a_person = create(&alice, "Looks like one", &[&parent], None).await;
    let unlabelled = create(&picogent, "Made, not a sub-task", &[], None).await;
    let of_another = create(&picogent, "Sub-task of another", &[&format!("parent:{}", unlabelled.key)], None).await;
    let note = comment(&alice, &subtask, "a question on the backend").await;
    let context = run_of(&own);

    assert_eq!(reach(&context, &picogent, change(&own)).await, RunScope::Run);
    assert_eq!(reach(&context, &picogent, change(&subtask)).await, RunScope::Run, "its sub-task");
    let on_subtask = Target::Post(PostPlace::Task { task_id: subtask.id.clone() });
    assert_eq!(reach(&context, &picogent, on_subtask).await, RunScope::Run, "a comment on it");
    let reply = Target::Post(PostPlace::Reply { parent_id: note.id.clone() });
    assert_eq!(reach(&context, &picogent, reply).await, RunScope::Run, "a reply in its comments");
    for (task, what) in
        [(&labelled_by_a_person, "a label alone"), (&unlabelled, "made by the agent alone"), (&of_another, "another's")]
    {
        assert_eq!(reach(&context, &picogent, change(task)).await, RunScope::Project, "{what}");
        let post = Target::Post(PostPlace::Task { task_id: task.id.clone() });
        assert_eq!(reach(&context, &picogent, post).await, RunScope::Project, "{what}");
    }
    // Handing a sub-task to someone else is a new decision, as it is for the run's own task.
    let reassign = Target::Task { task: subtask.key.clone(), assignee: Some(Some("alice".to_string())) };
    assert_eq!(reach(&context, &picogent, reassign).await, RunScope::Project);
    // From the sub-task's own run, its parent is another task.
    assert_eq!(reach(&run_of(&subtask), &picogent, change(&own)).await, RunScope::Project);
    board.shutdown().await.unwrap();
}

async fn subtasks_of(alice: &TrackerClient, key: &str) -> Vec<TaskOut> {
    let query = TaskQuery { labels: Some(format!("parent:{key}")), limit: Some(200), ..TaskQuery::default() };
    alice.list_tasks(&query).await.unwrap().items
}

async fn posts(alice: &TrackerClient, task: &TaskOut) -> Vec<MessageOut> {
    let query = MessageQuery { task_id: Some(task.id.clone()), limit: Some(200), ..MessageQuery::default() };
    alice.list_messages(&query).await.unwrap().into_iter().filter(|m| m.author_slug == "picogent").collect()
}

/// Waits for the agent's `n`th post on `task`.
async fn nth_post(alice: &TrackerClient, task: &TaskOut, n: usize) -> MessageOut {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(post) = posts(alice, task).await.into_iter().nth(n - 1) {
            return post;
        }
        assert!(Instant::now() < deadline, "no post {n} on {}", task.key);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn plan() -> serde_json::Value {
    json!({"summary": "backend, page, docs", "subtasks": [
        {"title": "Backend endpoint", "description": "Serve the report as CSV."},
        {"title": "Export button", "description": "A button on the page.", "assignee": "bob"},
        {"title": "Docs page", "description": "Say how to export.", "assignee": "alice", "waits_for": [1]}
    ]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_is_asked_once_and_made_once_when_its_call_is_made_again() {
    let dir = tempfile::tempdir().unwrap();
    let board = picogent_board::start_seeded(dir.path()).await.unwrap();
    let (alice, picogent) = (client(&board, "tok-alice"), client(&board, "tok-picogent"));
    let own = create(&alice, "Add CSV export", &["epic"], Some("picogent")).await;
    let tool = PlanTool::new(picogent.clone(), DelegationConfig::default(), WAIT)
        .with_poll_interval(Duration::from_millis(50));
    let mut context = run_of(&own);
    context.idempotency_key = Some("run-1-h0-t0-c0".to_string());

    let asking = {
        let (tool, context) = (tool.clone(), context.clone());
        tokio::spawn(async move { tool.call(PLAN_SUBTASKS, plan(), &context).await })
    };
    let question = nth_post(&alice, &own, 1).await;
    assert!(question.content.starts_with("@alice Plan for TE-1, in 3 sub-tasks: backend, page, docs\n"));
    assert!(question.content.contains("3. Docs page (for alice, waits for 1)"), "{}", question.content);
    comment(&alice, &own, "yes").await;
    let made = asking.await.unwrap();
    assert!(!made.is_error, "{}", made.text);
    assert_eq!(made.structured.as_ref().unwrap()["subtasks"], json!(["TE-2", "TE-3", "TE-4"]), "{}", made.text);

    let check_board = |questions: usize| {
        let alice = alice.clone();
        let own = own.clone();
        async move {
            let mut tasks = subtasks_of(&alice, &own.key).await;
            tasks.sort_by(|a, b| a.key.cmp(&b.key));
            let assignees: Vec<_> = tasks.iter().map(|t| t.assignee_slug.clone().unwrap()).collect();
            assert_eq!(assignees[..3], ["picogent", "bob", "alice"]);
            assert!(tasks.iter().all(|t| t.description.as_deref().unwrap().starts_with("Part of TE-1\n")));
            assert!(tasks.iter().all(|t| t.watchers.contains(&"picogent".to_string())), "{tasks:#?}");
            assert_eq!(tasks[2].labels, ["parent:TE-1", "blocked_by:TE-2"]);
            let steps: Vec<String> = alice.list_steps(&own.id).await.unwrap().into_iter().map(|s| s.title).collect();
            assert_eq!(steps.len(), tasks.len(), "a step per sub-task, once: {steps:?}");
            assert_eq!(steps[..3], ["TE-2: Backend endpoint", "TE-3: Export button", "TE-4: Docs page"]);
            assert_eq!(posts(&alice, &own).await.len(), questions, "questions asked");
            tasks.len()
        }
    };
    assert_eq!(check_board(1).await, 3);

    // The same call again, from a fresh start (a run resumed after a crash): found, not made or
    // asked again.
    let mut resumed = run_of(&own);
    resumed.idempotency_key = context.idempotency_key.clone();
    let again = tool.call(PLAN_SUBTASKS, plan(), &resumed).await;
    assert!(!again.is_error && again.text.contains("were created earlier"), "{}", again.text);
    assert_eq!(check_board(1).await, 3);

    // A later call that adds to the plan made is asked anew, and its yes makes only what it adds.
    let mut longer = plan();
    longer["subtasks"].as_array_mut().unwrap().push(json!({"title": "Changelog", "description": "One line."}));
    let mut later = run_of(&own);
    later.idempotency_key = Some("run-2-h0-t0-c0".to_string());
    let asking = {
        let tool = tool.clone();
        tokio::spawn(async move { tool.call(PLAN_SUBTASKS, longer, &later).await })
    };
    assert!(nth_post(&alice, &own, 2).await.content.contains("in 4 sub-tasks"));
    comment(&alice, &own, "yes").await;
    let extended = asking.await.unwrap();
    assert!(extended.text.starts_with("Created 4 sub-tasks of TE-1 (3 of them before this call)"), "{}", extended.text);
    assert_eq!(check_board(2).await, 4);

    // Another plan for the same task: a task is broken down once.
    let other = json!({"subtasks": [{"title": "All at once", "description": "Everything."}]});
    let refused = tool.call(PLAN_SUBTASKS, other, &run_of(&own)).await;
    assert!(refused.is_error && refused.text.contains("TE-1 already has sub-tasks: TE-2"), "{}", refused.text);
    assert_eq!(check_board(2).await, 4);
    board.shutdown().await.unwrap();
}
