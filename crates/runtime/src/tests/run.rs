//! One run, executed as the router spawns it (queued and claimed in the state first): what it
//! leaves on the board, what it records, and the end it reports. Its notice is the router's to
//! post, so a run here only says what it would be.

use std::time::Duration;

use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use picogent_state::{Enqueued, QueuedRun, RunStatus};
use picogent_tracker::model::{TaskOut, TaskStatus};
use picogent_tracker::session::SessionKey;

use super::{Model, WAIT, World};
use crate::guard::{Asked, Asker, Steering};
use crate::record::StoredRun;
use crate::request::{RunDone, RunKind, RunRequest, Trigger};

/// The run of `task` as the router asks for it.
fn task_request(task: &TaskOut) -> RunRequest {
    let kind = RunKind::Task { task: Box::new(task.clone()), assigned_by: "alice".to_string() };
    RunRequest::new(SessionKey::Task(task.id.clone()), Trigger::Assigned { task_key: task.key.clone() }, kind)
}

/// Queues and claims a run of `request`'s session, as the router does before it spawns one;
/// its run id.
async fn claimed(world: &World, request: &RunRequest) -> String {
    let trigger = request.trigger.to_string();
    let run = QueuedRun {
        session_key: &request.session,
        trigger: &trigger,
        request: "{}",
        claim: None,
        inputs: &[],
        behind: false,
    };
    let Enqueued::Queued(run_id) = world.queue.enqueue(&run).await.unwrap() else { panic!("not queued") };
    let claimed = world.queue.claim_runs(1, Duration::from_secs(60)).await.unwrap();
    assert_eq!(claimed.iter().map(|run| run.id.as_str()).collect::<Vec<_>>(), [run_id.as_str()]);
    run_id
}

/// Executes the run `run_id` to its end, with no steering.
async fn execute(world: &World, run_id: &str, request: RunRequest, cancel: CancellationToken) -> RunDone {
    let (_steer, steering) = mpsc::unbounded_channel();
    let run = crate::run::execute(world.services.clone(), run_id.to_string(), request, cancel, steering);
    tokio::time::timeout(WAIT, run).await.expect("the run ended")
}

/// A task run acknowledges the task before its first model request, works it to review, posts
/// one summary, and records its start (the prompt it sent, its fence) and its end, the session
/// and the day's spend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_run_is_acknowledged_worked_and_recorded_from_start_to_end() {
    let world = World::start(Model::Open).await;
    let task = world.assigned_task("Ship the docs").await;
    let request = task_request(&task);
    let run_id = claimed(&world, &request).await;

    let done = execute(&world, &run_id, request, CancellationToken::new()).await;

    assert_eq!((done.status, done.notice.as_deref(), done.steering_consumed), (RunStatus::Completed, None, 0));
    assert_eq!(done.session, SessionKey::Task(task.id.clone()));
    let first = world.model.requests().first().cloned().expect("a model request");
    assert!(first.to_string().contains("Status: in_progress"), "acknowledged before the model was asked: {first}");
    assert_eq!(world.alice.get_task(&task.id).await.unwrap().status, TaskStatus::InReview);
    let steps = world.alice.list_steps(&task.id).await.unwrap();
    assert!(steps.len() == 2 && steps.iter().all(|step| step.done), "{steps:#?}");
    let said: Vec<_> =
        world.comments(&task.id).await.into_iter().filter(|message| message.author_slug == "picogent").collect();
    assert_eq!(said.len(), 1, "one summary: {said:#?}");

    let run = world.state.get_run(&run_id).await.unwrap().expect("the run's row");
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");
    assert!(run.finished_at.is_some() && run.turns >= 2 && run.tool_calls >= 4, "{run:?}");
    let stored = run.record_as::<StoredRun>().unwrap().expect("the run's record");
    assert!(
        stored.start.prompt.contains(&task.title)
            && stored.start.system_prompt.is_some()
            && stored.start.fence.is_some()
    );
    assert!(stored.record.is_some_and(|record| record.total_tokens() > 0));
    let session = world.state.load_session(&SessionKey::Task(task.id.clone())).await.unwrap();
    assert!(session.is_some(), "the conversation is kept for the task's next run");
    assert!(world.state.spend_today().await.unwrap().tokens >= run.prompt_tokens + run.completion_tokens);
    world.shut_down(None).await;
}

/// A run whose token budget cannot fit its first request asks the model nothing, ends failed with
/// the cause recorded, and hands the router one notice naming the budget (posting is the router's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_cannot_fit_its_first_request_fails_with_a_notice_for_the_router() {
    let world = World::start_with(Model::Open, json!({"limits": {"max_tokens_per_run": 100}})).await;
    let task = world.assigned_task("Too big a budget").await;
    let request = task_request(&task);
    let run_id = claimed(&world, &request).await;

    let done = execute(&world, &run_id, request, CancellationToken::new()).await;

    assert_eq!(done.status, RunStatus::Failed);
    let notice = done.notice.expect("a notice");
    assert!(notice.contains("limits.max_tokens_per_run"), "names the setting: {notice}");
    assert_eq!(world.model.request_count(), 0, "no model request");
    let run = world.state.get_run(&run_id).await.unwrap().expect("the run's row");
    assert_eq!(run.status, RunStatus::Failed, "{run:?}");
    assert!(run.finished_at.is_some(), "{run:?}");
    assert_eq!(world.alice.get_task(&task.id).await.unwrap().status, TaskStatus::InProgress, "acknowledged");
    assert!(world.comments(&task.id).await.is_empty(), "the run posts no notice itself");
    world.shut_down(None).await;
}

/// A sub-task's run gets what its tree has left of `limits.max_tokens_per_tree`: with the parent's
/// earlier run and a sibling's having spent nearly all of it, the run cannot fit its first request,
/// asks the model nothing, and its notice names the tree's setting and its parent; a task outside
/// the tree is not held by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_task_run_past_its_tree_budget_fails_with_a_notice_naming_the_setting() {
    let world = World::start_with(Model::Open, json!({"limits": {"max_tokens_per_tree": 9_000}})).await;
    let parent = world.assigned_task("Add CSV export").await;
    let subtask = |title: &str, labels: Vec<String>| picogent_tracker::model::CreateTask {
        project_slug: "team".into(),
        title: title.into(),
        description: Some(format!("Part of {}", parent.key)),
        assignee_slug: Some("picogent".into()),
        labels: Some(labels),
        ..Default::default()
    };
    let parent_label = picogent_tracker::tree::parent_label(&parent.key);
    let sibling = world.alice.create_task(&subtask("Backend", vec![parent_label.clone()]), None).await.unwrap();
    let task = world.alice.create_task(&subtask("Docs page", vec![parent_label, "docs".into()]), None).await.unwrap();
    // What the tree spent before: 5,000 tokens on the parent, 3,800 on the sibling.
    for (task, tokens) in [(&parent, 5_000), (&sibling, 3_800)] {
        let run_id = claimed(&world, &task_request(task)).await;
        let finish = picogent_state::FinishRun {
            prompt_tokens: tokens - 100,
            completion_tokens: 100,
            ..picogent_state::FinishRun::new(RunStatus::Completed)
        };
        assert!(world.state.finish_run(&run_id, &finish).await.unwrap());
    }

    let request = task_request(&task);
    let run_id = claimed(&world, &request).await;
    let done = execute(&world, &run_id, request, CancellationToken::new()).await;

    assert_eq!(done.status, RunStatus::Failed);
    let notice = done.notice.expect("a notice");
    assert!(notice.contains("limits.max_tokens_per_tree"), "names the setting: {notice}");
    assert!(notice.contains(&parent.key) && notice.contains("200 tokens were left"), "names the tree: {notice}");
    assert_eq!(world.model.request_count(), 0, "no model request");

    // The parent itself is not a sub-task: its run is held by its own budget only.
    let request = task_request(&parent);
    let run_id = claimed(&world, &request).await;
    let done = execute(&world, &run_id, request, CancellationToken::new()).await;
    assert_eq!((done.status, done.notice), (RunStatus::Completed, None));
    world.shut_down(None).await;
}

/// A run cancelled by a person ends `stopped`; one cut short by the agent's shutdown ends
/// `interrupted` and stays `running` in the state, to resume from the same request at the next
/// start. Neither says anything itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_run_ends_stopped_and_one_cut_short_by_the_shutdown_stays_running() {
    let world = World::start(Model::Held).await;
    let stopped = world.assigned_task("Stop me").await;
    let interrupted = world.assigned_task("Cut me short").await;
    let cases = [(&stopped, false, RunStatus::Stopped), (&interrupted, true, RunStatus::Interrupted)];
    for (n, (task, shutdown, expected)) in cases.into_iter().enumerate() {
        let request = task_request(task);
        let run_id = claimed(&world, &request).await;
        let cancel = CancellationToken::new();
        let run = tokio::spawn(crate::run::execute(
            world.services.clone(),
            run_id.clone(),
            request,
            cancel.clone(),
            mpsc::unbounded_channel().1,
        ));
        // Held at its model request: in the loop, past its recorded start.
        world.model_received(n + 1).await;
        if shutdown {
            // What the router does at a shutdown whose grace is over.
            world.services.shutdown.cancel();
        }
        cancel.cancel();
        let done = tokio::time::timeout(WAIT, run).await.expect("the run ended").unwrap();
        assert_eq!((done.status, done.notice.as_deref()), (expected, None), "{}", task.title);
        let row = world.state.get_run(&run_id).await.unwrap().expect("the run's row");
        match expected {
            RunStatus::Interrupted => {
                assert_eq!((row.status, row.finished_at), (RunStatus::Running, None), "resumable: {row:?}");
                assert!(row.record.is_some(), "its start is kept for the resume");
            }
            _ => assert_eq!(row.status, RunStatus::Stopped, "{row:?}"),
        }
        assert_ne!(world.alice.get_task(&task.id).await.unwrap().status, TaskStatus::InReview);
        assert!(world.comments(&task.id).await.is_empty(), "nothing said by the run");
    }
    world.shut_down(None).await;
}

/// Steering sent before the run starts is the loop's at its first turn: the model reads it, and
/// the run reports it taken in, so the router starts no follow-up for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steering_sent_before_the_start_reaches_the_model_and_is_counted_as_taken() {
    let world = World::start(Model::Open).await;
    let task = world.assigned_task("Steer me").await;
    let request = task_request(&task);
    let run_id = claimed(&world, &request).await;
    let (steer, steering) = mpsc::unbounded_channel();
    let asked = Asked { message_id: "m-steer".to_string(), asker: Asker::Person };
    let text = "also mention the changelog".to_string();
    steer.send(Steering { text: text.clone(), asked: Some(asked) }).unwrap();

    let run = crate::run::execute(world.services.clone(), run_id.clone(), request, CancellationToken::new(), steering);
    let done = tokio::time::timeout(WAIT, run).await.expect("the run ended");

    assert_eq!((done.status, done.steering_consumed), (RunStatus::Completed, 1));
    let requests = world.model.requests();
    assert!(requests.iter().any(|request| request.to_string().contains(&text)), "the model read it");
    let row = world.state.get_run(&run_id).await.unwrap().expect("the run's row");
    assert_eq!(row.record.expect("the record")["record"]["steering_inputs"], 1);
    drop(steer);
    world.shut_down(None).await;
}
