//! A task tree as the router sees it (`router/tree.rs`): sub-tasks made on the board with
//! `parent:KEY` and `blocked_by:KEY` labels, as a person or a plan makes them, and the events
//! the board would send about them fed to the router. A waiting task is not started and says so
//! once; it starts when its last blocker is done, from an event or a reconciliation; a parent of
//! the agent's is ticked and rolled up once.

use picogent_tracker::TrackerClient;
use picogent_tracker::model::{
    CreateTask, EVENT_TASK_ASSIGNED, EVENT_TASK_UPDATED, Event, MessageOut, ReceivedEvent, TaskAssignedData, TaskOut,
    TaskStatus, TaskUpdatedData, UpdateTask,
};
use picogent_tracker::session::SessionKey;
use picogent_tracker::stream::StreamItem;
use picogent_tracker::tree::{blocked_by_label, parent_label};

use super::{Model, World, tracker_client};
use crate::router::Input;

/// `task.assigned` of `task` by alice, as the stream hands it to the router.
fn task_assigned(id: &str, seq: u64, task: &TaskOut) -> Input {
    let event = Event::TaskAssigned(TaskAssignedData { task: task.clone(), assigned_by: "alice".to_string() });
    received(id, seq, EVENT_TASK_ASSIGNED, event)
}

/// `task.updated` of `task` (its status changed) by bob.
fn task_updated(id: &str, seq: u64, task: &TaskOut) -> Input {
    let data = TaskUpdatedData { task: task.clone(), changed: vec!["status".into()], updated_by: "bob".into() };
    received(id, seq, EVENT_TASK_UPDATED, Event::TaskUpdated(data))
}

fn received(id: &str, seq: u64, name: &str, event: Event) -> Input {
    let ts = time::OffsetDateTime::now_utc().format(&time::format_description::well_known::Rfc3339).unwrap();
    Input::from(StreamItem::Event(ReceivedEvent { id: id.to_string(), seq, name: name.to_string(), ts, event }))
}

/// A task `who` creates in the team's project, assigned to `assignee`, with `labels`.
async fn task(who: &TrackerClient, title: &str, assignee: Option<&str>, labels: Vec<String>) -> TaskOut {
    let body = CreateTask {
        project_slug: "team".into(),
        title: title.into(),
        assignee_slug: assignee.map(str::to_string),
        labels: Some(labels),
        ..CreateTask::default()
    };
    who.create_task(&body, None).await.unwrap()
}

/// `task` moved to `status` by `who`, as the board answers it.
async fn moved(who: &TrackerClient, task: &TaskOut, status: TaskStatus) -> TaskOut {
    who.update_task(&task.id, &UpdateTask { status: Some(status), ..UpdateTask::default() }).await.unwrap()
}

/// What the agent said on the task `task_id`, oldest first.
async fn agent_said(world: &World, task_id: &str) -> Vec<String> {
    let said: Vec<MessageOut> = world.comments(task_id).await;
    said.into_iter().filter(|message| message.author_slug == "picogent").map(|message| message.content).collect()
}

/// A task waiting for two others is not started, says what it waits for once however often its
/// assignment comes, and watches both; the first blocker's end starts nothing, the last one's
/// starts it, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_task_says_so_once_and_starts_when_its_last_blocker_is_done() {
    let world = World::start(Model::Open).await;
    let router = world.start_router();
    let bob = tracker_client(&world.board, "tok-bob");
    let parent = task(&world.alice, "Add CSV export", Some("alice"), vec![]).await;
    let backend = task(&world.alice, "Backend", Some("bob"), vec![parent_label(&parent.key)]).await;
    let frontend = task(&world.alice, "Frontend", Some("bob"), vec![parent_label(&parent.key)]).await;
    let labels = vec![parent_label(&parent.key), blocked_by_label(&backend.key), blocked_by_label(&frontend.key)];
    let docs = task(&world.alice, "Docs page", Some("picogent"), labels).await;
    let session = SessionKey::Task(docs.id.clone());

    router.send(task_assigned("ev-1", 1, &docs)).await;
    router.send(task_assigned("ev-1", 1, &docs)).await;
    // The same assignment under another id: what a second look at it brings.
    router.send(task_assigned("ev-2", 2, &docs)).await;
    router.settled().await;

    assert!(world.runs_of(&session).await.is_empty(), "no run while it waits");
    let waiting = format!(
        "Waiting for {} (todo) and {} (todo) before starting; I start when they are done.",
        backend.key, frontend.key
    );
    assert_eq!(agent_said(&world, &docs.id).await, [waiting.as_str()]);
    for blocker in [&backend, &frontend] {
        let watchers = world.alice.get_task(&blocker.id).await.unwrap().watchers;
        assert!(watchers.contains(&"picogent".to_string()), "{}: {watchers:?}", blocker.key);
    }
    assert_eq!(world.metrics().event_count("task.assigned", "blocked"), 2);
    assert_eq!(world.metrics().event_count("task.assigned", "duplicate"), 1);

    let backend_done = moved(&bob, &backend, TaskStatus::Done).await;
    router.send(task_updated("ev-3", 3, &backend_done)).await;
    router.settled().await;
    assert!(world.runs_of(&session).await.is_empty(), "one blocker is still open");
    assert_eq!(agent_said(&world, &docs.id).await, [waiting.as_str()], "nothing more said");
    assert_eq!(world.model.request_count(), 0, "nothing asked of the model");

    let frontend_done = moved(&bob, &frontend, TaskStatus::Done).await;
    router.send(task_updated("ev-4", 4, &frontend_done)).await;
    router.settled().await;
    // The last blocker's end again, under another id: the task has its run.
    router.send(task_updated("ev-5", 5, &frontend_done)).await;
    router.settled().await;

    let runs = world.runs_of(&session).await;
    assert_eq!(runs.len(), 1, "{runs:#?}");
    assert_eq!(runs[0].trigger, format!("task.assigned {}", docs.key));
    assert_eq!(world.alice.get_task(&docs.id).await.unwrap().status, TaskStatus::InReview);
    let said = agent_said(&world, &docs.id).await;
    assert_eq!(said.len(), 2, "the notice and the run's summary: {said:#?}");
    assert_eq!(said[0], waiting);
    assert_eq!(world.metrics().event_count("task.updated", "unblocked"), 1);
    world.shut_down(Some(router)).await;
}

/// A reconciliation decides as the events would: a waiting task is left (said once, however
/// often the stream reconnects), a task whose blockers are all done is worked, a blocker that
/// does not exist is named; once the blocker is done, the next reconciliation starts its task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciliation_leaves_a_waiting_task_and_works_an_unblocked_one() {
    let world = World::start(Model::Open).await;
    let bob = tracker_client(&world.board, "tok-bob");
    let schema = task(&world.alice, "Schema", Some("bob"), vec![]).await;
    let migration = task(&world.alice, "Migration", Some("picogent"), vec![blocked_by_label(&schema.key)]).await;
    let orphan = task(&world.alice, "Orphan", Some("picogent"), vec![blocked_by_label("TE-99")]).await;
    let spec = moved(&bob, &task(&world.alice, "Spec", Some("bob"), vec![]).await, TaskStatus::Done).await;
    let free = task(&world.alice, "Free to go", Some("picogent"), vec![blocked_by_label(&spec.key)]).await;
    let router = world.start_router();

    let found = router.catch_up().await;
    router.settled().await;
    assert_eq!(found.tasks.worked, 1, "{found:?}");
    assert_eq!(found.tasks.skipped.get("blocked"), Some(&2), "{found:?}");
    assert_eq!(world.runs_of(&SessionKey::Task(free.id.clone())).await.len(), 1);
    assert_eq!(world.alice.get_task(&free.id).await.unwrap().status, TaskStatus::InReview);
    let waiting = format!("Waiting for {} (todo) before starting; I start when it is done.", schema.key);
    assert_eq!(agent_said(&world, &migration.id).await, [waiting.as_str()]);
    assert_eq!(
        agent_said(&world, &orphan.id).await,
        ["Waiting for TE-99 (not found) before starting; I start when it is done. TE-99 does not exist: remove the \
          label blocked_by:TE-99 and reassign me to start without it."]
    );

    let again = router.catch_up().await;
    router.settled().await;
    assert_eq!(again.tasks.worked, 0, "{again:?}");
    assert_eq!(again.tasks.skipped.get("blocked"), Some(&2), "{again:?}");
    assert_eq!(agent_said(&world, &migration.id).await, [waiting.as_str()], "said once");
    assert_eq!(agent_said(&world, &orphan.id).await.len(), 1, "said once");

    // The blocker's end happened while the agent was away: the next reconciliation finds it.
    moved(&bob, &schema, TaskStatus::Done).await;
    let after = router.catch_up().await;
    router.settled().await;
    assert_eq!(after.tasks.worked, 1, "{after:?}");
    assert_eq!(after.tasks.skipped.get("blocked"), Some(&1), "{after:?}");
    assert_eq!(world.runs_of(&SessionKey::Task(migration.id.clone())).await.len(), 1);
    assert_eq!(world.alice.get_task(&migration.id).await.unwrap().status, TaskStatus::InReview);
    assert!(world.runs_of(&SessionKey::Task(orphan.id.clone())).await.is_empty());
    world.shut_down(Some(router)).await;
}

/// Each sub-task's end ticks its step on a parent of the agent's; the last one's posts one
/// summary and moves the parent to review, and the same end again (another id, another router
/// over the same board, as after a restart) posts nothing more. A parent of someone else's is
/// left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_of_the_agents_is_ticked_and_rolled_up_once() {
    let world = World::start(Model::Open).await;
    let router = world.start_router();
    let bob = tracker_client(&world.board, "tok-bob");
    let agent = tracker_client(&world.board, "tok-picogent");
    let parent = moved(
        &world.alice,
        &task(&world.alice, "Add CSV export", Some("picogent"), vec![]).await,
        TaskStatus::InProgress,
    )
    .await;
    let backend = task(&world.alice, "Backend", Some("bob"), vec![parent_label(&parent.key)]).await;
    let frontend = task(&world.alice, "Frontend @otherbot", None, vec![parent_label(&parent.key)]).await;
    for sub_task in [&backend, &frontend] {
        agent.add_step(&parent.id, &format!("{}: {}", sub_task.key, sub_task.title), None).await.unwrap();
    }
    let steps_done = || async {
        let steps = world.alice.list_steps(&parent.id).await.unwrap();
        steps.iter().map(|step| step.done).collect::<Vec<_>>()
    };

    let backend_done = moved(&bob, &backend, TaskStatus::Done).await;
    router.send(task_updated("ev-1", 1, &backend_done)).await;
    router.settled().await;
    assert_eq!(steps_done().await, [true, false]);
    assert!(agent_said(&world, &parent.id).await.is_empty(), "no summary while a sub-task is open");
    assert_eq!(world.alice.get_task(&parent.id).await.unwrap().status, TaskStatus::InProgress);
    assert_eq!(world.metrics().event_count("task.updated", "rolled_up"), 1);

    let frontend_done = moved(&world.alice, &frontend, TaskStatus::Done).await;
    router.send(task_updated("ev-2", 2, &frontend_done)).await;
    router.send(task_updated("ev-3", 3, &frontend_done)).await;
    router.settled().await;

    assert_eq!(steps_done().await, [true, true]);
    let summary = format!(
        "All 2 sub-tasks of {p} are done; {p} moves to in_review.\n\n- {}: Backend (assigned to bob, done)\n- {}: \
         Frontend ＠otherbot (assigned to nobody, done)",
        backend.key,
        frontend.key,
        p = parent.key
    );
    assert_eq!(agent_said(&world, &parent.id).await, [summary.as_str()]);
    assert_eq!(world.alice.get_task(&parent.id).await.unwrap().status, TaskStatus::InReview);
    assert_eq!(world.model.request_count(), 0, "nothing asked of the model");

    // Another router over the same board and state, as after a restart, hears the end again.
    let (inputs, received_inputs) = tokio::sync::mpsc::channel(16);
    let second = tokio::spawn(world.router(inputs.clone()).run(received_inputs));
    inputs.send(task_updated("ev-4", 4, &frontend_done)).await.unwrap();
    let (reply, answered) = tokio::sync::oneshot::channel();
    inputs.send(Input::StopRun { run_id: "no-such-run: a barrier".into(), reply }).await.unwrap();
    assert!(!tokio::time::timeout(super::WAIT, answered).await.expect("the second router answered").unwrap());
    second.abort();
    router.send(task_updated("ev-5", 5, &frontend_done)).await;
    router.settled().await;
    assert_eq!(agent_said(&world, &parent.id).await, [summary], "one summary");

    // Someone else's parent: nothing of the agent's.
    let theirs = task(&world.alice, "Alice's epic", Some("alice"), vec![]).await;
    agent.add_step(&theirs.id, "TE-99: placeholder", None).await.unwrap();
    let part = task(&world.alice, "Part", Some("bob"), vec![parent_label(&theirs.key)]).await;
    let part_done = moved(&bob, &part, TaskStatus::Done).await;
    router.send(task_updated("ev-6", 6, &part_done)).await;
    router.settled().await;
    assert!(agent_said(&world, &theirs.id).await.is_empty());
    assert_eq!(world.alice.get_task(&theirs.id).await.unwrap().status, TaskStatus::Todo);
    assert_eq!(world.metrics().event_count("task.updated", "ignored"), 1);
    world.shut_down(Some(router)).await;
}

/// A sub-task whose run fails is named once on its parent, with the first line of its own notice;
/// one handed back by its assignee is named once on a parent of the agent's, with their reason,
/// however often the event comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_or_handed_back_sub_task_is_said_once_on_its_parent() {
    let world = World::start_with(Model::Open, serde_json::json!({"limits": {"max_tokens_per_run": 100}})).await;
    let router = world.start_router();
    let bob = tracker_client(&world.board, "tok-bob");
    let parent = task(&world.alice, "Add CSV export", Some("picogent"), vec![]).await;
    // The parent's own assignment is not fed to the router: the test is about its sub-tasks.
    let failing = task(&world.alice, "Docs page", Some("picogent"), vec![parent_label(&parent.key)]).await;
    router.send(task_assigned("ev-1", 1, &failing)).await;
    router.settled().await;

    let on_failing = agent_said(&world, &failing.id).await;
    assert_eq!(on_failing.len(), 1, "the run's own notice: {on_failing:#?}");
    let first_line = on_failing[0].lines().next().unwrap();
    let on_parent = agent_said(&world, &parent.id).await;
    assert_eq!(on_parent.len(), 1, "{on_parent:#?}");
    assert!(
        on_parent[0].starts_with(&format!("Sub-task {} (Docs page) failed: ", failing.key))
            && on_parent[0].contains(first_line),
        "{on_parent:#?}"
    );

    let handed = task(&world.alice, "Export button", Some("bob"), vec![parent_label(&parent.key)]).await;
    bob.reject_task(&handed.id, "not my area, ask @carol", None).await.unwrap();
    let now = world.alice.get_task(&handed.id).await.unwrap();
    let data =
        TaskUpdatedData { task: now, changed: vec!["assignee_slug".into(), "status".into()], updated_by: "bob".into() };
    for (n, id) in ["ev-2", "ev-3"].into_iter().enumerate() {
        router.send(received(id, 2 + n as u64, EVENT_TASK_UPDATED, Event::TaskUpdated(data.clone()))).await;
    }
    router.settled().await;
    let on_parent = agent_said(&world, &parent.id).await;
    let expected = format!(
        "Sub-task {} (Export button) was handed back by bob: not my area, ask ＠carol. It needs someone to take it \
         before this task can be done.",
        handed.key
    );
    assert_eq!(on_parent.iter().filter(|said| **said == expected).count(), 1, "{on_parent:#?}");
    assert_eq!(on_parent.len(), 2, "{on_parent:#?}");
    assert_eq!(world.metrics().event_count("task.updated", "handed_back"), 2);

    // A parent that is not the agent's hears nothing from it.
    let theirs = task(&world.alice, "Alice's epic", Some("alice"), vec![]).await;
    let other = task(&world.alice, "Part of it", Some("bob"), vec![parent_label(&theirs.key)]).await;
    bob.reject_task(&other.id, "no", None).await.unwrap();
    let now = world.alice.get_task(&other.id).await.unwrap();
    let data = TaskUpdatedData { task: now, changed: vec!["assignee_slug".into()], updated_by: "bob".into() };
    router.send(received("ev-4", 4, EVENT_TASK_UPDATED, Event::TaskUpdated(data))).await;
    router.settled().await;
    assert!(agent_said(&world, &theirs.id).await.is_empty());
    world.shut_down(Some(router)).await;
}

/// The watchdog says a sub-task in progress that went quiet on a parent of the agent's, once per
/// silence however many passes see it; activity (a comment) ends the silence, and the next one is
/// said again. A sub-task not in progress, or quiet for less than the bound, is not said.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_sub_task_is_said_once_per_silence_on_its_parent() {
    use std::time::Duration;
    use time::OffsetDateTime;
    use time::format_description::well_known::Rfc3339;

    let world = World::start(Model::Open).await;
    let agent = tracker_client(&world.board, "tok-picogent");
    let bob = tracker_client(&world.board, "tok-bob");
    let stall = Duration::from_secs(300);
    let parent = moved(
        &world.alice,
        &task(&world.alice, "Add CSV export", Some("picogent"), vec![]).await,
        TaskStatus::InProgress,
    )
    .await;
    let quiet = task(&world.alice, "Tests", Some("bob"), vec![parent_label(&parent.key)]).await;
    let quiet = moved(&bob, &quiet, TaskStatus::InProgress).await;
    task(&world.alice, "Not started", Some("bob"), vec![parent_label(&parent.key)]).await;
    let changed = OffsetDateTime::parse(&quiet.updated_at, &Rfc3339).unwrap();

    let pass = |now: OffsetDateTime| crate::watchdog::pass(&agent, "picogent", stall, now);
    assert_eq!(pass(changed + time::Duration::minutes(4)).await.unwrap(), 0, "quiet for less than the bound");
    let later = changed + time::Duration::minutes(7);
    assert_eq!(pass(later).await.unwrap(), 1);
    assert_eq!(pass(later + time::Duration::minutes(3)).await.unwrap(), 1, "the same silence, seen again");
    let stalled =
        |said: &Vec<String>| said.iter().filter(|text| text.starts_with(&format!("Sub-task {}", quiet.key))).count();
    let said = agent_said(&world, &parent.id).await;
    assert_eq!(said.len(), 1, "{said:#?}");
    assert!(
        said[0].ends_with(
            "(Tests), assigned to bob, has had no activity for 7 min. Ask bob how it stands, or reassign it."
        ),
        "{said:#?}"
    );

    // bob says something: a new silence begins, and is said when it is long enough.
    let comment = picogent_tracker::model::SendMessage {
        content: "still on it".into(),
        task_id: Some(quiet.id.clone()),
        ..Default::default()
    };
    let comment = bob.send_message(&comment, None).await.unwrap();
    let spoke = OffsetDateTime::parse(&comment.created_at, &Rfc3339).unwrap();
    assert_eq!(pass(spoke + time::Duration::minutes(2)).await.unwrap(), 0);
    assert_eq!(pass(spoke + time::Duration::minutes(6)).await.unwrap(), 1);
    assert_eq!(stalled(&agent_said(&world, &parent.id).await), 2);

    // A parent of someone else's: nothing.
    let theirs = task(&world.alice, "Alice's epic", Some("alice"), vec![]).await;
    let other = task(&world.alice, "Part of it", Some("bob"), vec![parent_label(&theirs.key)]).await;
    moved(&bob, &other, TaskStatus::InProgress).await;
    assert_eq!(pass(spoke + time::Duration::days(1)).await.unwrap(), 1, "the agent's parent's one quiet sub-task only");
    assert!(agent_said(&world, &theirs.id).await.is_empty());
    world.shut_down(None).await;
}

/// The inspector's view of a tree (`tree_view.rs`): each sub-task's review round from its label,
/// its latest run, the branch of the latest run that left one, and what its runs spent, under
/// the tree's spend (the parent's runs with them); a key of no task is not found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tree_view_reads_rounds_runs_branches_and_spend() {
    use picogent_inspector::{TreeError, TreeSource};
    let world = World::start(Model::Open).await;
    let parent = task(&world.alice, "Add CSV export", None, Vec::new()).await;
    let labels = vec![parent_label(&parent.key), "review-round:2".to_string(), blocked_by_label("TE-9")];
    let sub_task = task(&world.alice, "CSV endpoint", Some("bob"), labels).await;
    // A coding run left a branch; a later run of the same task left none; the parent ran once.
    let session = SessionKey::Task(sub_task.id.clone());
    let mut run_ids = Vec::new();
    for (session, tokens, branch) in [
        (&session, 300, Some("picogent/TE-2")),
        (&session, 200, None),
        (&SessionKey::Task(parent.id.clone()), 1_000, None),
    ] {
        // Queued and claimed, as the router starts a run: this state finishes its own runs only.
        let run = picogent_state::QueuedRun {
            session_key: session,
            trigger: "task.assigned",
            request: "{}",
            claim: None,
            inputs: &[],
            behind: false,
        };
        let picogent_state::Enqueued::Queued(run_id) = world.queue.enqueue(&run).await.unwrap() else { panic!() };
        world.queue.claim_runs(1, std::time::Duration::from_secs(60)).await.unwrap();
        let work = branch.map(|branch| {
            serde_json::json!({"repository": "app", "branch": branch, "commit": null, "pushed": false,
                   "diff": {"files": [], "insertions": 0, "deletions": 0}, "link": null})
        });
        let record = serde_json::json!({"prompt": "go", "history_len": 0, "coding": {"log": "", "work": work}});
        world.state.save_run_record(&run_id, &record).await.unwrap();
        let finish = picogent_state::FinishRun {
            prompt_tokens: tokens,
            ..picogent_state::FinishRun::new(picogent_state::RunStatus::Completed)
        };
        assert!(world.state.finish_run(&run_id, &finish).await.unwrap(), "{run_id} finished");
        run_ids.push(run_id);
    }
    let view = crate::tree_view::TreeView { client: world.services.client.clone(), state: world.state.clone() };
    let tree = view.tree(&parent.key).await.unwrap();
    assert_eq!((tree.parent.key.as_str(), tree.part_of.as_deref()), ("TE-1", None));
    assert_eq!(tree.spent.tokens, 1_500, "the parent's runs and the sub-task's: {tree:#?}");
    let [row] = tree.sub_tasks.as_slice() else { panic!("{tree:#?}") };
    assert_eq!((row.task.key.as_str(), row.task.assignee.as_deref()), ("TE-2", Some("bob")));
    assert_eq!((row.review_round, row.blockers.clone()), (Some(2), vec!["TE-9".to_string()]));
    assert_eq!(row.branch.as_deref(), Some("picogent/TE-2"), "the latest run that left a branch");
    assert_eq!(row.latest_run.as_deref(), Some(run_ids[1].as_str()));
    assert_eq!(row.spent.tokens, 500);
    assert!(matches!(view.tree("TE-99").await, Err(TreeError::NotFound { key }) if key == "TE-99"));
    world.shut_down(None).await;
}
