//! A run's trigger: its text (what people and tools read) and its typed value (what a run claimed
//! from the queue gets back) say the same, both ways, for every kind; a row written before the
//! queue kept the typed value is read by its text; a text that names no trigger closes its run.

use std::time::Duration;

use serde_json::json;
use tokio::sync::{mpsc, oneshot};

use picogent_state::{Enqueued, QueuedRun, RunStatus};
use picogent_tracker::session::SessionKey;

use super::{Model, WAIT, World};
use crate::request::{RunKind, RunRequest, Trigger};
use crate::router::Input;

/// 2026-03-02T09:00:00Z, in milliseconds.
const STANDUP_MS: i64 = 1_772_442_000_000;

/// Runs queued behind a full slot keep their trigger's text in their rows and on the status
/// board, and each claimed again gets back the very trigger it was queued with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_run_claimed_again_carries_its_typed_trigger() {
    let world = World::start_with(Model::Open, json!({"limits": {"max_concurrent_runs": 1}})).await;
    // The one slot is taken: the runs asked for below wait in the queue.
    world.services.slots.hold("a run in the only slot");
    let router = world.start_router();
    let triggers = [
        Trigger::FollowUp { run_id: "run-before".to_string() },
        Trigger::Scheduled { job: "daily standup".to_string(), fire_at_ms: STANDUP_MS + 250, manual: true },
        // No task key is `prompt`, so its text reads back as the prompt's; typed, it comes back
        // as it was.
        Trigger::StartRun { task_key: "prompt".to_string() },
    ];
    let mut queued = Vec::new();
    for trigger in triggers {
        // The router queues any kind with any trigger; a prompt is the simplest to build.
        let kind = RunKind::Prompt { text: "how many tasks are open?".to_string() };
        let request = RunRequest::new(SessionKey::new_prompt(), trigger.clone(), kind);
        let (reply, answered) = oneshot::channel();
        router.send(Input::StartRun { request: Box::new(request), reply }).await;
        let run_id = tokio::time::timeout(WAIT, answered).await.expect("the router answered").unwrap();
        queued.push((run_id.expect("the run is queued"), trigger));
    }
    router.handled().await;

    let waiting: Vec<String> = world.services.status.waiting().into_iter().map(|run| run.trigger).collect();
    let texts =
        ["follow-up of run-before", "schedule daily standup 2026-03-02T09:00:00.25Z (run now)", "start_run prompt"];
    assert_eq!(waiting, texts);
    for (run_id, trigger) in &queued {
        let row = world.state.get_run(run_id).await.unwrap().expect("the run's row");
        assert_eq!((row.status, row.trigger), (RunStatus::Queued, trigger.to_string()));
    }
    let claimed = world.queue.claim_runs(3, Duration::from_secs(60)).await.unwrap();
    assert_eq!(claimed.len(), 3, "{claimed:#?}");
    let router_claiming = world.router(mpsc::channel(1).0);
    for run in &claimed {
        let (_, trigger) = queued.iter().find(|(run_id, _)| run_id == &run.id).expect("a run this test queued");
        let stored: serde_json::Value = serde_json::from_str(run.request.as_deref().expect("its request")).unwrap();
        assert_eq!(stored["trigger"], serde_json::to_value(trigger).unwrap(), "kept typed: {stored}");
        let request = router_claiming.request_of(run).await.unwrap();
        assert_eq!(&request.trigger, trigger);
        assert_eq!(request.resume_run_id.as_deref(), Some(run.id.as_str()));
    }
    world.shut_down(Some(router)).await;
}

/// A queued request as this version stored it before it kept the trigger.
fn request_without_trigger() -> String {
    json!({"kind": {"kind": "prompt", "text": "how many tasks are open?"}, "prompt": null}).to_string()
}

/// Queues a run of a new prompt session recorded with `trigger`, as an earlier version did; its id.
async fn queued_before(world: &World, trigger: &str) -> String {
    let session = SessionKey::new_prompt();
    let request = request_without_trigger();
    let run = QueuedRun { session_key: &session, trigger, request: &request, claim: None, inputs: &[], behind: false };
    let Enqueued::Queued(run_id) = world.queue.enqueue(&run).await.unwrap() else { panic!("not queued") };
    run_id
}

/// A run queued before the request kept its trigger gets it back from its recorded text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_queued_before_typed_triggers_gets_its_trigger_from_its_text() {
    let world = World::start(Model::Open).await;
    let run_id = queued_before(&world, "follow-up of run-before").await;

    let claimed = world.queue.claim_runs(1, Duration::from_secs(60)).await.unwrap();
    assert_eq!(claimed.len(), 1, "{claimed:#?}");
    let request = world.router(mpsc::channel(1).0).request_of(&claimed[0]).await.unwrap();
    assert_eq!(request.trigger, Trigger::FollowUp { run_id: "run-before".to_string() });
    assert_eq!(request.resume_run_id, Some(run_id));
    world.shut_down(None).await;
}

/// A run whose recorded trigger names no trigger (and whose request does not keep one) is not
/// lost for a label: it gets the trigger its kind tells, runs once, and the run queued beside it
/// runs too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_trigger_reads_as_nothing_still_runs_once_told_by_its_kind() {
    let world = World::start(Model::Open).await;
    queued_before(&world, "reconcile everything").await;
    let claimed = world.queue.claim_runs(1, Duration::from_secs(60)).await.unwrap();
    let request = world.router(mpsc::channel(1).0).request_of(&claimed[0]).await.unwrap();
    assert_eq!(request.trigger, Trigger::StartPrompt, "a prompt run's trigger");
    world.shut_down(None).await;

    let world = World::start(Model::Open).await;
    let unreadable = queued_before(&world, "reconcile everything").await;
    let readable = queued_before(&world, "start_run prompt").await;
    let router = world.start_router();
    router.settled().await;
    for (run_id, text) in [(&unreadable, "reconcile everything"), (&readable, "start_run prompt")] {
        let ran = world.state.get_run(run_id).await.unwrap().expect("the run's row");
        assert_eq!((ran.status, ran.trigger.as_str()), (RunStatus::Completed, text), "{ran:?}");
    }
    assert!(world.queue.claim_runs(5, Duration::from_secs(60)).await.unwrap().is_empty(), "nothing left to claim");
    world.shut_down(Some(router)).await;
}
