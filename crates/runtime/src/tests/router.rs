//! The router fed typed inputs (events as the stream hands them over, stop requests as MCP sends
//! them; run ends come from the runs it spawns): what a person then sees on the board, and what
//! the state holds.

use serde_json::json;

use picogent_state::{ClaimKind, RunStatus};
use picogent_tracker::model::{
    CreateTask, EVENT_MESSAGE_NEW, EVENT_TASK_ASSIGNED, EVENT_TASK_UNASSIGNED, Event, MessageNewData, MessageOut,
    ReceivedEvent, SendMessage, TaskAssignedData, TaskOut, TaskStatus, TaskUnassignedData, UpdateTask,
};
use picogent_tracker::session::SessionKey;
use picogent_tracker::stream::StreamItem;

use super::{Model, World, tracker_client};
use crate::router::Input;

/// `message.new` for `message`, as the stream hands it to the router: event `id`, at `seq`.
fn message_new(id: &str, seq: u64, message: &MessageOut) -> Input {
    let event = Event::MessageNew(MessageNewData { message: message.clone() });
    received(id, seq, EVENT_MESSAGE_NEW, event)
}

/// `task.assigned` of `task` by alice, as the stream hands it to the router.
fn task_assigned(id: &str, seq: u64, task: &TaskOut) -> Input {
    let event = Event::TaskAssigned(TaskAssignedData { task: task.clone(), assigned_by: "alice".to_string() });
    received(id, seq, EVENT_TASK_ASSIGNED, event)
}

fn received(id: &str, seq: u64, name: &str, event: Event) -> Input {
    let ts = time::OffsetDateTime::now_utc().format(&time::format_description::well_known::Rfc3339).unwrap();
    Input::from(StreamItem::Event(ReceivedEvent { id: id.to_string(), seq, name: name.to_string(), ts, event }))
}

/// The agent's messages among `messages`.
fn agents(messages: Vec<MessageOut>) -> Vec<MessageOut> {
    messages.into_iter().filter(|message| message.author_slug == "picogent").collect()
}

/// A mention is answered by one run and one reply in its thread that names it; the run's end,
/// its claim and the event are in the state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mention_starts_one_run_and_gets_one_reply() {
    let world = World::start(Model::Open).await;
    let router = world.start_router();
    let question = world.alice_says("@picogent how many tasks are open?").await;

    router.send(message_new("ev-1", 1, &question)).await;
    router.settled().await;

    let replies = agents(world.thread(&question.id).await);
    assert_eq!(replies.len(), 1, "{replies:#?}");
    assert_eq!(replies[0].reply_to.as_deref(), Some(question.id.as_str()), "the reply names the mention");
    let runs = world.runs_of(&SessionKey::Thread(question.id.clone())).await;
    assert_eq!(runs.len(), 1, "{runs:#?}");
    assert_eq!(runs[0].status, RunStatus::Completed, "{:?}", runs[0]);
    assert!(runs[0].finished_at.is_some() && runs[0].turns >= 1, "{:?}", runs[0]);
    assert!(world.state.is_claimed(ClaimKind::Message, &question.id).await.unwrap());
    assert!(world.state.is_event_processed("ev-1").await.unwrap());
    assert_eq!(world.state.last_seq().await.unwrap(), 1, "the resume point moved");
    assert_eq!(world.metrics().event_count("message.new", "run"), 1);
    world.shut_down(Some(router)).await;
}

/// The same event twice (a replay after a reconnect), and the same message under a second event
/// id, start one run and get one reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_event_is_handled_once() {
    let world = World::start(Model::Open).await;
    let router = world.start_router();
    let question = world.alice_says("@picogent what is due this week?").await;

    router.send(message_new("ev-1", 1, &question)).await;
    router.send(message_new("ev-1", 1, &question)).await;
    router.settled().await;
    // The message again under another event id: its claim holds, whenever it comes.
    router.send(message_new("ev-2", 2, &question)).await;
    router.settled().await;

    assert_eq!(agents(world.thread(&question.id).await).len(), 1, "one reply");
    assert_eq!(world.runs_of(&SessionKey::Thread(question.id.clone())).await.len(), 1, "one run");
    assert_eq!(world.state.list_runs(50).await.unwrap().len(), 1, "no run anywhere else");
    // The replayed id is dropped at the record; the other id at the message's claim.
    assert_eq!(world.metrics().event_count("message.new", "duplicate"), 2);
    assert_eq!(world.metrics().event_count("message.new", "run"), 1);
    world.shut_down(Some(router)).await;
}

/// The agent's own message, even one that names it, starts nothing and is answered by nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_own_message_is_ignored() {
    let world = World::start(Model::Open).await;
    let router = world.start_router();
    let agent = tracker_client(&world.board, "tok-picogent");
    let chat_id = world.alice.get_project("team").await.unwrap().chat_id;
    let own = SendMessage {
        content: "@picogent note to self: look at the backlog".into(),
        chat_id: Some(chat_id),
        ..Default::default()
    };
    let own = agent.send_message(&own, None).await.unwrap();

    router.send(message_new("ev-1", 1, &own)).await;
    router.settled().await;

    assert_eq!(world.metrics().event_count("message.new", "own_message"), 1);
    assert!(world.state.list_runs(50).await.unwrap().is_empty(), "no run");
    assert!(world.thread(&own.id).await.iter().all(|message| message.id == own.id), "no reply");
    assert_eq!(world.model.request_count(), 0, "nothing asked of the model");
    assert!(world.state.is_claimed(ClaimKind::Message, &own.id).await.unwrap(), "judged once, for good");
    world.shut_down(Some(router)).await;
}

/// A message to a thread whose run is still going steers that run: it is claimed with the run,
/// no second run starts, and the run takes it in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_message_to_a_busy_session_steers_its_run() {
    let world = World::start(Model::Held).await;
    let router = world.start_router();
    let question = world.alice_says("@picogent how many tasks are open?").await;
    router.send(message_new("ev-1", 1, &question)).await;
    // The run is at its first model request, held there: it is running.
    world.model_received(1).await;

    let chat_id = world.alice.get_project("team").await.unwrap().chat_id;
    let more = SendMessage {
        content: "@picogent and which of them are urgent?".into(),
        chat_id: Some(chat_id),
        parent_id: Some(question.id.clone()),
        ..Default::default()
    };
    let more = world.alice.send_message(&more, None).await.unwrap();
    router.send(message_new("ev-2", 2, &more)).await;
    router.handled().await;
    assert_eq!(world.metrics().event_count("message.new", "steered"), 1);
    assert!(world.state.is_claimed(ClaimKind::Message, &more.id).await.unwrap(), "claimed with the run it steers");
    let session = SessionKey::Thread(question.id.clone());
    assert_eq!(world.runs_of(&session).await.len(), 1, "no second run while the first goes on");

    world.open_model();
    router.settled().await;
    let runs = world.runs_of(&session).await;
    assert_eq!(runs.len(), 1, "no second run, and no follow-up: {runs:#?}");
    assert_eq!(runs[0].status, RunStatus::Completed, "{:?}", runs[0]);
    let record = runs[0].record.clone().expect("the run's record");
    assert_eq!(record["record"]["steering_inputs"], 1, "the run took the message in: {record:#}");
    assert!(!agents(world.thread(&question.id).await).is_empty(), "the thread is answered");
    world.shut_down(Some(router)).await;
}

/// A stop request for a running run stops it: its end is recorded as stopped and the person sees
/// one notice where they asked, however many stops came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_request_stops_a_run_with_one_notice() {
    let world = World::start(Model::Held).await;
    let router = world.start_router();
    let question = world.alice_says("@picogent summarise the backlog").await;
    router.send(message_new("ev-1", 1, &question)).await;
    world.model_received(1).await;
    let session = SessionKey::Thread(question.id.clone());
    let run_id = world.runs_of(&session).await.pop().expect("the run").id;

    assert!(router.stop_run(&run_id).await, "the running run is stopped");
    // A second stop, before or after the run's end reached the router: either way, no second notice.
    router.stop_run(&run_id).await;
    router.settled().await;
    assert!(!router.stop_run(&run_id).await, "an ended run is not stopped again");
    router.settled().await;

    let run = world.state.get_run(&run_id).await.unwrap().expect("the run's row");
    assert_eq!(run.status, RunStatus::Stopped, "{run:?}");
    assert!(run.finished_at.is_some(), "{run:?}");
    let said = agents(world.thread(&question.id).await);
    assert_eq!(said.len(), 1, "one notice and no answer: {said:#?}");
    assert_eq!(said[0].content, "Stopped: stopped over MCP.");
    assert_eq!(said[0].reply_to.as_deref(), Some(question.id.as_str()));
    world.shut_down(Some(router)).await;
}

/// A task assigned to the agent starts one run, which works the task to review and says so once;
/// the run's end is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_assigned_to_the_agent_starts_a_run_whose_end_is_recorded() {
    let world = World::start(Model::Open).await;
    let router = world.start_router();
    let task = world.assigned_task("Ship the docs").await;

    router.send(task_assigned("ev-1", 1, &task)).await;
    router.settled().await;

    let runs = world.runs_of(&SessionKey::Task(task.id.clone())).await;
    assert_eq!(runs.len(), 1, "{runs:#?}");
    let run = &runs[0];
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");
    assert_eq!(run.trigger, format!("task.assigned {}", task.key));
    assert!(run.finished_at.is_some() && run.tool_calls >= 1 && run.prompt_tokens > 0, "{run:?}");
    assert_eq!(world.alice.get_task(&task.id).await.unwrap().status, TaskStatus::InReview);
    assert_eq!(agents(world.comments(&task.id).await).len(), 1, "one summary comment");
    assert_eq!(world.metrics().event_count("task.assigned", "run"), 1);
    world.shut_down(Some(router)).await;
}

/// A person's `@picogent stop` on a task, and a task's unassignment, each stop the task's running
/// run: the run ends stopped, and the task shows one notice naming who stopped it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_command_and_an_unassignment_stop_the_run_with_one_notice_each() {
    let world = World::start(Model::Held).await;
    let router = world.start_router();
    let told_to_stop = world.assigned_task("Stop me").await;
    let unassigned = world.assigned_task("Unassign me").await;
    router.send(task_assigned("ev-1", 1, &told_to_stop)).await;
    router.send(task_assigned("ev-2", 2, &unassigned)).await;
    world.model_received(2).await;

    let stop = SendMessage {
        content: "@picogent stop".into(),
        task_id: Some(told_to_stop.id.clone()),
        ..SendMessage::default()
    };
    let stop = world.alice.send_message(&stop, None).await.unwrap();
    router.send(message_new("ev-3", 3, &stop)).await;
    let unassign = UpdateTask { assignee_slug: Some(None), ..UpdateTask::default() };
    let now_unassigned = world.alice.update_task(&unassigned.id, &unassign).await.unwrap();
    let data = TaskUnassignedData {
        task: now_unassigned,
        unassigned_by: "alice".to_string(),
        previous_assignee: "picogent".to_string(),
    };
    router.send(received("ev-4", 4, EVENT_TASK_UNASSIGNED, Event::TaskUnassigned(data))).await;
    router.settled().await;

    let cases = [
        (&told_to_stop, "Stopped: @alice asked me to stop."),
        (&unassigned, "Stopped: the task was unassigned by @alice."),
    ];
    for (task, notice) in cases {
        let runs = world.runs_of(&SessionKey::Task(task.id.clone())).await;
        assert_eq!(runs.len(), 1, "{runs:#?}");
        assert_eq!(runs[0].status, RunStatus::Stopped, "{:?}", runs[0]);
        let said: Vec<_> = agents(world.comments(&task.id).await).into_iter().map(|message| message.content).collect();
        assert_eq!(said, [notice], "{}", task.title);
        assert_ne!(world.alice.get_task(&task.id).await.unwrap().status, TaskStatus::InReview);
    }
    assert_eq!(world.metrics().event_count("message.new", "stop"), 1);
    assert_eq!(world.metrics().event_count("task.unassigned", "stop"), 1);
    world.shut_down(Some(router)).await;
}

/// A person's stop on a parent stops the run of every sub-task of it (`parent:KEY`), each with one
/// notice on its own task, and records the tree stopped; a run outside the tree goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_on_a_parent_stops_every_sub_task_run_and_nothing_else() {
    let world = World::start(Model::Held).await;
    let router = world.start_router();
    let parent = CreateTask { project_slug: "team".into(), title: "Add CSV export".into(), ..CreateTask::default() };
    let parent = world.alice.create_task(&parent, None).await.unwrap();
    let mut subtasks = Vec::new();
    for title in ["Backend", "Frontend"] {
        let subtask = CreateTask {
            project_slug: "team".into(),
            title: title.into(),
            assignee_slug: Some("picogent".into()),
            labels: Some(vec![picogent_tracker::tree::parent_label(&parent.key)]),
            ..CreateTask::default()
        };
        subtasks.push(world.alice.create_task(&subtask, None).await.unwrap());
    }
    let outside = world.assigned_task("Not part of it").await;
    for (n, task) in subtasks.iter().chain([&outside]).enumerate() {
        router.send(task_assigned(&format!("ev-{n}"), n as u64 + 1, task)).await;
    }
    world.model_received(3).await;

    let stop =
        SendMessage { content: "@picogent stop".into(), task_id: Some(parent.id.clone()), ..SendMessage::default() };
    let stop = world.alice.send_message(&stop, None).await.unwrap();
    router.send(message_new("ev-stop", 9, &stop)).await;
    // The sub-tasks' runs end; the one outside the tree is still held at its model request.
    router.handled().await;
    let status = &world.services.status;
    let mut changes = status.subscribe();
    while status.active_runs() > 1 {
        assert!(tokio::time::timeout(super::WAIT, changes.recv()).await.is_ok(), "the sub-tasks' runs never ended");
    }
    router.handled().await;

    let notice = format!("Stopped: @alice asked me to stop on {}, which this task is part of.", parent.key);
    for task in &subtasks {
        let runs = world.runs_of(&SessionKey::Task(task.id.clone())).await;
        assert_eq!(runs.iter().map(|run| run.status).collect::<Vec<_>>(), [RunStatus::Stopped], "{}", task.title);
        let said: Vec<_> = agents(world.comments(&task.id).await).into_iter().map(|message| message.content).collect();
        assert_eq!(said, std::slice::from_ref(&notice), "{}", task.title);
    }
    assert!(world.state.is_claimed(ClaimKind::TreeStop, &parent.key).await.unwrap(), "the tree is recorded stopped");
    // A sub-task assigned after the stop does not start.
    let late = CreateTask {
        project_slug: "team".into(),
        title: "Docs page".into(),
        assignee_slug: Some("picogent".into()),
        labels: Some(vec![picogent_tracker::tree::parent_label(&parent.key)]),
        ..CreateTask::default()
    };
    let late = world.alice.create_task(&late, None).await.unwrap();
    router.send(task_assigned("ev-late", 10, &late)).await;
    router.handled().await;
    assert!(world.runs_of(&SessionKey::Task(late.id.clone())).await.is_empty(), "a stopped tree starts nothing");
    router.send(task_assigned("ev-late-again", 11, &late)).await;
    router.handled().await;
    let said: Vec<_> = agents(world.comments(&late.id).await).into_iter().map(|message| message.content).collect();
    let why =
        format!("Not starting: the work under {} was stopped. Mention me here if this task should go on.", parent.key);
    assert_eq!(said, [why], "why it does not start, once");
    assert!(agents(world.comments(&parent.id).await).is_empty(), "the parent had no run: nothing said there");
    assert_eq!(world.metrics().event_count("message.new", "stop"), 1);
    world.open_model();
    router.settled().await;
    let outside_runs = world.runs_of(&SessionKey::Task(outside.id.clone())).await;
    assert_eq!(outside_runs.iter().map(|run| run.status).collect::<Vec<_>>(), [RunStatus::Completed], "went on");
    world.shut_down(Some(router)).await;
}

/// With one slot, a second task's run waits in the queue; stopped there, it never starts and the
/// task shows one notice; the first run goes on to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_stopped_while_it_waits_for_a_slot_never_starts_and_says_so_once() {
    let world = World::start_with(Model::Held, json!({"limits": {"max_concurrent_runs": 1}})).await;
    let router = world.start_router();
    let first = world.assigned_task("Busy work").await;
    let waiting = world.assigned_task("Wait your turn").await;
    router.send(task_assigned("ev-1", 1, &first)).await;
    router.send(task_assigned("ev-2", 2, &waiting)).await;
    router.handled().await;
    world.model_received(1).await;
    assert_eq!(world.services.status.active_runs(), 1);
    assert_eq!(world.services.status.waiting().len(), 1, "the second run waits for the slot");
    let queued = world.runs_of(&SessionKey::Task(waiting.id.clone())).await.pop().expect("the queued run");
    assert_eq!(queued.status, RunStatus::Queued);

    assert!(router.stop_run(&queued.id).await, "a queued run is stopped");
    world.open_model();
    router.settled().await;

    let said: Vec<_> = agents(world.comments(&waiting.id).await).into_iter().map(|message| message.content).collect();
    assert_eq!(said, ["Stopped before it started: stopped over MCP."]);
    let stopped = world.state.get_run(&queued.id).await.unwrap().expect("the run's row");
    assert_eq!((stopped.status, stopped.turns), (RunStatus::Stopped, 0), "{stopped:?}");
    assert_eq!(world.runs_of(&SessionKey::Task(waiting.id.clone())).await.len(), 1);
    assert_eq!(world.alice.get_task(&waiting.id).await.unwrap().status, TaskStatus::Todo, "never worked");
    assert_eq!(world.alice.get_task(&first.id).await.unwrap().status, TaskStatus::InReview);
    assert!(world.services.status.waiting().is_empty());
    world.shut_down(Some(router)).await;
}

/// A run that fails leaves one notice where it was asked, answering the mention and naming the
/// setting to change; the run's end is recorded as failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_leaves_one_notice_where_it_was_asked() {
    let world = World::start_with(Model::Open, json!({"limits": {"max_tokens_per_run": 100}})).await;
    let router = world.start_router();
    let question = world.alice_says("@picogent how many tasks are open?").await;

    router.send(message_new("ev-1", 1, &question)).await;
    router.settled().await;

    let said = agents(world.thread(&question.id).await);
    assert_eq!(said.len(), 1, "{said:#?}");
    assert!(said[0].content.contains("limits.max_tokens_per_run"), "{}", said[0].content);
    assert_eq!(said[0].reply_to.as_deref(), Some(question.id.as_str()));
    let runs = world.runs_of(&SessionKey::Thread(question.id.clone())).await;
    assert_eq!(runs.len(), 1, "{runs:#?}");
    assert_eq!(runs[0].status, RunStatus::Failed, "{:?}", runs[0]);
    assert_eq!(world.model.request_count(), 0);
    world.shut_down(Some(router)).await;
}

/// What was assigned and asked while the agent was away is found through REST once the stream
/// catches up, and taken up once: the task worked, the mention answered. A second catch-up, and
/// the mention's event arriving late, do neither again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_came_while_away_is_taken_up_once_when_the_stream_catches_up() {
    let world = World::start(Model::Open).await;
    let task = world.assigned_task("Assigned while away").await;
    let question = world.alice_says("@picogent are you there?").await;
    let router = world.start_router();

    let found = router.catch_up().await;
    router.settled().await;
    assert_eq!((found.tasks.worked, found.mentions.answered), (1, 1), "{found:?}");
    assert_eq!(world.alice.get_task(&task.id).await.unwrap().status, TaskStatus::InReview);
    assert_eq!(agents(world.comments(&task.id).await).len(), 1);
    assert_eq!(agents(world.thread(&question.id).await).len(), 1);

    let again = router.catch_up().await;
    router.send(message_new("ev-late", 7, &question)).await;
    router.settled().await;
    assert_eq!((again.tasks.worked, again.mentions.answered), (0, 0), "{again:?}");
    assert_eq!(world.runs_of(&SessionKey::Task(task.id.clone())).await.len(), 1, "the task worked once");
    assert_eq!(world.runs_of(&SessionKey::Thread(question.id.clone())).await.len(), 1, "the mention answered once");
    assert_eq!(agents(world.comments(&task.id).await).len(), 1);
    assert_eq!(agents(world.thread(&question.id).await).len(), 1);
    world.shut_down(Some(router)).await;
}
