//! A run's own tree on the reference board: the write scope of a task run grows by exactly the
//! sub-tasks the agent made for its task.

use picogent_support::secret::Secret;
use picogent_tools::scope::{Target, judge};
use picogent_tools::{PostPlace, RunScope, ToolContext};
use picogent_tracker::model::{CreateTask, MessageOut, SendMessage, TaskOut};
use picogent_tracker::session::SessionKey;
use picogent_tracker::{TrackerClient, TrackerConfig};
use serde_json::json;

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
