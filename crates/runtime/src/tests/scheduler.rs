//! The scheduler through its own API ([`scheduler::new`], [`Scheduler::run`],
//! [`Schedules::run_now`]), over a `ShiftedClock` the test sets: a due firing acts once however
//! many schedulers find it due, an idle one asks no model and posts nothing, what came due while
//! away is caught up once, and a firing asked for now runs once.
//!
//! Nothing waits for a fixed time. A scheduler settles what is due at each wake before it looks
//! at its stop token, so one stopped before it starts wakes once, at the clock's time, and ends:
//! the test awaits that end. A firing's run is awaited with the router's `settled`.

use std::path::Path;
use std::sync::Arc;

use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use picogent_schedule::{Clock, Fired, RunNowError, ShiftedClock};
use picogent_state::{ClaimKind, FiringOutcome, FiringRow, RunStatus, firing_claim_key};
use picogent_tracker::model::{MessageOut, MessageQuery};
use picogent_tracker::session::SessionKey;

use super::{Model, WAIT, World};
use crate::router::Input;
use crate::scheduler::{self, Scheduler, Schedules};

const MINUTE: i64 = 60_000;
const HOUR: i64 = 60 * MINUTE;
const DAY: i64 = 24 * HOUR;
/// 2026-03-02T00:00:00Z, in milliseconds: a whole hour, for the hourly job.
const MIDNIGHT_MS: i64 = 1_772_409_600_000;

/// A world whose one job, `standup`, posts a digest of project `team` on `cron` (UTC), and runs a
/// firing missed while away if it is at most `catch_up_ms` late.
async fn world_with_standup(cron: &str, catch_up_ms: u64) -> World {
    let job = json!({"cron": cron, "kind": "standup", "project": "team", "catch_up_ms": catch_up_ms});
    World::start_with(Model::Open, json!({"schedules": {"standup": job}})).await
}

/// The next 09:00 UTC after the real time: a task alice makes now moved within the day before it.
fn next_nine() -> i64 {
    let now = picogent_schedule::SystemClock.now_ms();
    let nine = now.div_euclid(DAY) * DAY + 9 * HOUR;
    if nine > now { nine } else { nine + DAY }
}

/// A scheduler over this world's jobs and services, reading `clock`, asking for runs on `inputs`
/// (the router's, or a channel the test reads), and the token that stops it.
fn new_scheduler(
    world: &World,
    clock: &Arc<ShiftedClock>,
    inputs: mpsc::Sender<Input>,
) -> (Schedules, Scheduler, CancellationToken) {
    let jobs = picogent_schedule::jobs(&world.services.config.schedules, Path::new(".")).unwrap();
    let stop = CancellationToken::new();
    let clock: Arc<dyn Clock> = clock.clone();
    let (schedules, scheduler) = scheduler::new(jobs, world.services.clone(), clock, inputs, stop.clone());
    (schedules, scheduler, stop)
}

/// One wake of `scheduler`: it settles what is due at the clock's time, finds itself stopped and
/// ends.
async fn wake_once(scheduler: Scheduler, stop: CancellationToken) {
    stop.cancel();
    tokio::time::timeout(WAIT, scheduler.run()).await.expect("the scheduler settled what was due and stopped");
}

/// One wake of `scheduler`, as [`wake_once`], failing at once if it asks for a run.
async fn wake_once_asking_nothing(scheduler: Scheduler, stop: CancellationToken, asked: &mut mpsc::Receiver<Input>) {
    tokio::select! {
        () = wake_once(scheduler, stop) => {}
        Some(_) = asked.recv() => panic!("the scheduler asked for a run"),
    }
}

/// The firings `/metrics` counts, one line per schedule and outcome.
fn firings_counted(world: &World) -> Vec<String> {
    let metrics = world.metrics().render(0, true, true);
    metrics.lines().filter(|line| line.starts_with("picogent_schedule_firings_total{")).map(str::to_string).collect()
}

/// Every firing of `standup` the state records, oldest first.
async fn firings(world: &World) -> Vec<FiringRow> {
    world.state.firings_after("standup", i64::MIN, 100).await.unwrap()
}

/// What the agent posted in project `team`'s chat, as alice sees it.
async fn agent_posts(world: &World) -> Vec<MessageOut> {
    let chat_id = world.alice.get_project("team").await.unwrap().chat_id;
    let query = MessageQuery { chat_id: Some(chat_id), limit: Some(200), ..MessageQuery::default() };
    let messages = world.alice.list_messages(&query).await.unwrap();
    messages.into_iter().filter(|message| message.author_slug == "picogent").collect()
}

/// Two schedulers sharing one state both find the 09:00 firing due and both ask for its run,
/// carrying its claim. The first run claims it and posts; the second, asked for only once that
/// run has ended (so no run of the session is going to refuse it), is refused by the claim alone:
/// one run, one digest, one record, one firing counted, and the watermark past 09:00.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_due_firing_two_schedulers_find_runs_once() {
    let world = world_with_standup("0 9 * * *", 3_600_000).await;
    let task = world.assigned_task("Write the release notes").await;
    let nine = next_nine();
    // Both last looked a minute before 09:00, and wake a second after it.
    world.state.advance_schedule_through("standup", nine - MINUTE).await.unwrap();
    let clock = Arc::new(ShiftedClock::starting_at(nine + 1_000));
    // The router waits until both have asked: each has found the firing unclaimed and read the
    // board by then.
    let (asks, mut asked) = mpsc::channel(16);
    let (_, first, stop_first) = new_scheduler(&world, &clock, asks.clone());
    let (_, second, stop_second) = new_scheduler(&world, &clock, asks);
    let first = tokio::spawn(wake_once(first, stop_first));
    let second = tokio::spawn(wake_once(second, stop_second));
    let mut requests = Vec::new();
    for _ in 0..2 {
        let input = tokio::time::timeout(WAIT, asked.recv()).await.expect("both schedulers asked for a run");
        let Some(Input::StartRun { request, reply }) = input else { panic!("a scheduler asks for nothing but runs") };
        assert_eq!(request.claim, Some((ClaimKind::Firing, firing_claim_key("standup", nine))));
        assert_eq!(request.session, SessionKey::Schedule("standup".to_string()));
        requests.push(Input::StartRun { request, reply });
    }
    let router = world.start_router();
    for request in requests {
        router.send(request).await;
        router.settled().await;
    }
    first.await.unwrap();
    second.await.unwrap();
    router.settled().await;

    let runs = world.runs_of(&SessionKey::Schedule("standup".to_string())).await;
    assert_eq!(runs.len(), 1, "one run: {runs:#?}");
    assert_eq!(runs[0].status, RunStatus::Completed, "{:?}", runs[0]);
    let recorded = firings(&world).await;
    assert_eq!(recorded.len(), 1, "{recorded:#?}");
    assert_eq!(
        (recorded[0].fire_at_ms, recorded[0].outcome, recorded[0].run_id.as_deref()),
        (nine, FiringOutcome::Posted, Some(runs[0].id.as_str()))
    );
    let posts = agent_posts(&world).await;
    assert_eq!(posts.len(), 1, "one digest: {posts:#?}");
    assert!(posts[0].content.starts_with("Standup for team: 1 task moved"), "{}", posts[0].content);
    assert!(posts[0].content.contains(&task.key), "{}", posts[0].content);
    assert_eq!(world.model.request_count(), 1, "one model call, for the one digest");
    assert_eq!(firings_counted(&world), ["picogent_schedule_firings_total{schedule=\"standup\",outcome=\"posted\"} 1"]);
    assert!(world.state.schedule_through("standup").await.unwrap() >= Some(nine), "the watermark moved past 09:00");
    world.shut_down(Some(router)).await;
}

/// A standup firing over a project where nothing moved reads the board and nothing else: it is
/// recorded idle, with why, asks for no run, calls no model and posts nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_firing_is_recorded_with_no_run_no_model_call_and_no_post() {
    let world = world_with_standup("0 9 * * *", 3_600_000).await;
    let nine = next_nine();
    world.state.advance_schedule_through("standup", nine - MINUTE).await.unwrap();
    let clock = Arc::new(ShiftedClock::starting_at(nine + 1_000));
    let (asks, mut asked) = mpsc::channel(16);
    let (_, scheduler, stop) = new_scheduler(&world, &clock, asks);

    wake_once_asking_nothing(scheduler, stop, &mut asked).await;

    let recorded = firings(&world).await;
    assert_eq!(recorded.len(), 1, "{recorded:#?}");
    assert_eq!((recorded[0].fire_at_ms, recorded[0].outcome), (nine, FiringOutcome::Idle));
    assert!(recorded[0].detail.starts_with("no task moved since"), "{}", recorded[0].detail);
    assert!(recorded[0].run_id.is_none(), "{:?}", recorded[0]);
    assert_eq!(world.model.request_count(), 0, "an idle firing calls no model");
    assert!(agent_posts(&world).await.is_empty(), "an idle firing posts nothing");
    assert!(world.state.list_runs(10).await.unwrap().is_empty(), "no run was queued");
    assert_eq!(firings_counted(&world), ["picogent_schedule_firings_total{schedule=\"standup\",outcome=\"idle\"} 1"]);
    assert!(world.state.schedule_through("standup").await.unwrap() >= Some(nine), "the watermark moved past 09:00");
    world.shut_down(None).await;
}

/// An hourly job away from 00:01 to 05:20, with two hours of catch-up: the 05:00 firing runs
/// (idle here), the 04:00 one is skipped as superseded by it, 01:00 to 03:00 as too late, each
/// once with its reason; a restart a minute later finds nothing more to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn firings_missed_while_away_are_caught_up_once_and_the_rest_skipped_with_why() {
    let world = world_with_standup("0 * * * *", 2 * 3_600_000).await;
    world.state.advance_schedule_through("standup", MIDNIGHT_MS + MINUTE).await.unwrap();
    let back = MIDNIGHT_MS + 5 * HOUR + 20 * MINUTE;
    let clock = Arc::new(ShiftedClock::starting_at(back));
    let (asks, mut asked) = mpsc::channel(16);
    let (_, scheduler, stop) = new_scheduler(&world, &clock, asks.clone());

    wake_once_asking_nothing(scheduler, stop, &mut asked).await;

    let recorded = firings(&world).await;
    let outcomes: Vec<(i64, FiringOutcome)> =
        recorded.iter().map(|row| ((row.fire_at_ms - MIDNIGHT_MS) / HOUR, row.outcome)).collect();
    assert_eq!(
        outcomes,
        [
            (1, FiringOutcome::Skipped),
            (2, FiringOutcome::Skipped),
            (3, FiringOutcome::Skipped),
            (4, FiringOutcome::Skipped),
            (5, FiringOutcome::Idle)
        ],
        "{recorded:#?}"
    );
    assert!(recorded.iter().all(|row| (row.fire_at_ms - MIDNIGHT_MS) % HOUR == 0), "on the hour: {recorded:#?}");
    for too_late in &recorded[..3] {
        assert!(too_late.detail.contains("late (catch_up_ms allows 2 h)"), "{}", too_late.detail);
    }
    assert!(
        recorded[3].detail.contains("the later firing of 2026-03-02 05:00 UTC ran instead"),
        "{}",
        recorded[3].detail
    );
    let through = world.state.schedule_through("standup").await.unwrap().expect("a watermark");
    assert!(through >= back, "the watermark is at the time it came back");

    // Restarted a minute later over the same state: nothing came due since, nothing is repeated.
    clock.set_now(back + MINUTE);
    let (_, restarted, stop) = new_scheduler(&world, &clock, asks);
    wake_once_asking_nothing(restarted, stop, &mut asked).await;
    assert_eq!(firings(&world).await, recorded, "nothing recorded twice");
    assert_eq!(world.model.request_count(), 0);
    world.shut_down(None).await;
}

/// "Run now" fires the job once, at the clock's time: its run posts one digest and is recorded
/// with the firing; asked again with nothing moved since, it is idle and posts nothing. A name no
/// job has is refused with the names there are, and a stopped scheduler refuses as stopping.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_now_fires_once_and_again_only_when_there_is_news() {
    let world = world_with_standup("0 9 * * *", 3_600_000).await;
    let task = world.assigned_task("Review the budget").await;
    // An hour before the next 09:00: nothing comes due by itself meanwhile.
    let clock = Arc::new(ShiftedClock::starting_at(next_nine() - HOUR));
    let router = world.start_router();
    let (schedules, scheduler, stop) = new_scheduler(&world, &clock, router.inputs.clone());
    let running = tokio::spawn(scheduler.run());

    let unknown = schedules.run_now("standp").await;
    assert_eq!(unknown, Err(RunNowError::Unknown { name: "standp".to_string(), known: "standup".to_string() }));
    let asked_at = clock.now_ms();
    let fired = schedules.run_now("standup").await.unwrap();
    let Fired::Queued { run_id } = fired else { panic!("queued as a run: {fired:?}") };
    router.settled().await;

    let posts = agent_posts(&world).await;
    assert_eq!(posts.len(), 1, "one digest: {posts:#?}");
    assert!(posts[0].content.starts_with("Standup for team: 1 task moved"), "{}", posts[0].content);
    assert!(posts[0].content.contains(&task.key), "{}", posts[0].content);
    let runs = world.runs_of(&SessionKey::Schedule("standup".to_string())).await;
    assert_eq!(
        runs.iter().map(|run| (run.id.as_str(), run.status)).collect::<Vec<_>>(),
        [(run_id.as_str(), RunStatus::Completed)]
    );
    let recorded = firings(&world).await;
    assert_eq!(recorded.len(), 1, "{recorded:#?}");
    assert_eq!((recorded[0].outcome, recorded[0].run_id.as_deref()), (FiringOutcome::Posted, Some(run_id.as_str())));
    assert!((asked_at..=clock.now_ms()).contains(&recorded[0].fire_at_ms), "fired when asked: {:?}", recorded[0]);
    let model_calls = world.model.request_count();

    // Asked again: nothing moved since the digest read the board.
    let again = schedules.run_now("standup").await.unwrap();
    let Fired::Idle { detail } = again else { panic!("nothing to say: {again:?}") };
    assert!(detail.starts_with("no task moved since"), "{detail}");
    assert_eq!(agent_posts(&world).await.len(), 1, "nothing posted twice");
    assert_eq!(world.model.request_count(), model_calls, "no model call for nothing to say");
    let outcomes: Vec<FiringOutcome> = firings(&world).await.iter().map(|row| row.outcome).collect();
    assert_eq!(outcomes, [FiringOutcome::Posted, FiringOutcome::Idle]);

    stop.cancel();
    tokio::time::timeout(WAIT, running).await.expect("the scheduler stopped").unwrap();
    assert_eq!(schedules.run_now("standup").await, Err(RunNowError::Stopping));
    world.shut_down(Some(router)).await;
}
