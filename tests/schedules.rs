//! Scheduled work (`schedules`), end to end on the reference board with the offline model
//! endpoint: a standup posted once with every task linked, an idle firing that calls no model and
//! posts nothing, a restart across its time that repeats nothing, a missed firing caught up once
//! (and one missed for too long recorded skipped), stale nudges that are not repeated, a prompt
//! job that goes on from its session, a failing firing that leaves one notice while the next one
//! still runs, the mistakes that stop the start, and `picogent schedules list|run`.
//!
//! The schedules fire by a `ShiftedClock` the test sets (real time plus an offset); everything
//! else (the board's times, the runs) is real. Two replicas sharing one firing are in
//! `tests/replicas.rs`.

#[path = "support/agent.rs"]
mod agent_support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agent_support::*;
use picogent::runtime::AgentHandle;
use picogent::runtime::scheduler::Fired;
use picogent::schedule::{Clock, ShiftedClock};
use picogent::state::FiringOutcome;
use picogent::tracker::TrackerClient;
use picogent::tracker::model::*;
use serde_json::{Value, json};

const DAY: i64 = 24 * 3_600_000;
const MINUTE: i64 = 60_000;

fn now_ms() -> i64 {
    picogent::schedule::SystemClock.now_ms()
}

/// The first `hour`:00 UTC after `after_ms`.
fn next_utc_hour(after_ms: i64, hour: i64) -> i64 {
    let day_start = after_ms - after_ms.rem_euclid(DAY);
    let today = day_start + hour * 3_600_000;
    if today > after_ms { today } else { today + DAY }
}

/// A clock just before `at`, so the firing at `at` comes a moment after the agent starts.
fn clock_before(at: i64) -> Arc<ShiftedClock> {
    Arc::new(ShiftedClock::starting_at(at - 1_500))
}

async fn start_with(config: picogent::config::Config, clock: &Arc<ShiftedClock>) -> AgentHandle {
    let clock: Arc<dyn Clock> = clock.clone();
    start_agent_with_clock(config, Some(clock)).await
}

/// The agent's own messages in the team chat, oldest first.
async fn agent_posts(alice: &TrackerClient) -> Vec<MessageOut> {
    let chat = chat_id(alice).await;
    let query = MessageQuery { chat_id: Some(chat), limit: Some(200), ..MessageQuery::default() };
    let mut posts = alice.list_messages(&query).await.unwrap();
    posts.retain(|message| message.author_slug == "picogent");
    posts
}

async fn wait_posts(alice: &TrackerClient, count: usize) -> Vec<MessageOut> {
    eventually(Duration::from_secs(30), &format!("{count} posts of the agent in the chat"), || async {
        let posts = agent_posts(alice).await;
        (posts.len() >= count).then_some(posts)
    })
    .await
}

/// Waits until the firing of `job` at `at` has ended as its record says.
async fn wait_firing(agent: &AgentHandle, job: &str, at: i64) -> picogent::state::FiringRow {
    eventually(Duration::from_secs(30), &format!("the firing of {job} at {at} ended"), || async {
        let row = agent.state.get_firing(job, at).await.unwrap()?;
        // Over: every outcome but `Queued`, whose run may still post.
        (row.outcome != FiringOutcome::Queued).then_some(row)
    })
    .await
}

async fn task(
    alice: &TrackerClient,
    title: &str,
    assignee: Option<&str>,
    status: TaskStatus,
    labels: &[&str],
) -> TaskOut {
    let create = CreateTask {
        project_slug: "team".into(),
        title: title.into(),
        assignee_slug: assignee.map(str::to_string),
        status: Some(status),
        labels: Some(labels.iter().map(|label| label.to_string()).collect()),
        ..CreateTask::default()
    };
    alice.create_task(&create, None).await.unwrap()
}

fn standup(extra: Value) -> Value {
    let mut job = json!({"cron": "0 9 * * *", "timezone": "UTC", "kind": "standup", "project": "team"});
    merge(&mut job, extra);
    json!({"schedules": {"standup": job}})
}

fn date_of(ms: i64) -> String {
    let at = time::OffsetDateTime::from_unix_timestamp(ms / 1000).unwrap();
    at.date().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standup_is_posted_once_with_every_task_linked_and_an_idle_one_calls_no_model() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let alice = client(&board, "tok-alice");
    let nine = next_utc_hour(now_ms(), 9);
    let review = task(&alice, "Ship the login page for @alice", Some("bob"), TaskStatus::InReview, &[]).await;
    let blocked = task(&alice, "Wait for the vendor", Some("alice"), TaskStatus::InProgress, &["blocked"]).await;
    let due = task(&alice, "Send the invoice", None, TaskStatus::Todo, &[&format!("due:{}", date_of(nine))]).await;
    let config = agent_config(dir.path(), &board.url(), &model.url(), "picogent", standup(json!({})));
    let clock = clock_before(nine);
    let agent = start_with(config, &clock).await;

    // The firing at 09:00: one post in the project's chat, the model's words over picogent's list.
    let posts = wait_posts(&alice, 1).await;
    let digest = &posts[0].content;
    assert!(
        digest
            .starts_with("Standup for team: 3 tasks moved since the last one, 1 task is blocked, 1 task is due soon."),
        "{digest}"
    );
    // The time "moved" counts from reads as a person writes it (`Sat 5 Dec 09:00 UTC`).
    let prompt = first_user_prompt(&model);
    let since = prompt.lines().find(|line| line.starts_with("Moved since ")).unwrap_or_default();
    let words: Vec<&str> = since.trim_start_matches("Moved since ").trim_end_matches(':').split(' ').collect();
    assert!(words.len() == 5 && words[4] == "UTC", "{since:?} in {prompt}");
    for task in [&review, &blocked, &due] {
        assert!(digest.contains(&format!("{}/tasks/{}", board.url(), task.id)), "{} is linked: {digest}", task.key);
    }
    assert!(
        digest.contains(&format!("Blocked:\n- {} Wait for the vendor (in progress, alice)", blocked.key)),
        "{digest}"
    );
    assert!(digest.contains(&format!("due {}", date_of(nine))), "{digest}");
    // The digest pings nobody, whatever a title says.
    assert!(posts[0].mentions.is_empty() && !digest.contains("@alice"), "{:?}: {digest}", posts[0].mentions);
    let row = wait_firing(&agent, "standup", nine).await;
    assert_eq!((row.outcome, row.detail.as_str()), (FiringOutcome::Posted, "moved 3, blocked 1, due 1"));
    let model_calls = model.request_count();
    assert_eq!(model_calls, 1, "one model call for the digest");

    // The next morning nothing moved: the board is read, no model is asked, nothing is posted.
    clock.set_now(nine + DAY - 1_500);
    let idle = wait_firing(&agent, "standup", nine + DAY).await;
    assert_eq!(idle.outcome, FiringOutcome::Idle);
    assert!(idle.detail.starts_with("no task moved since"), "{}", idle.detail);
    assert_eq!(model.request_count(), model_calls, "an idle firing calls no model");
    assert_eq!(agent_posts(&alice).await.len(), 1, "an idle firing posts nothing");

    // What a person sees of it: /metrics counts both, and the page lists the schedule.
    let http = agent.http_addr.unwrap();
    let metrics = reqwest::get(format!("http://{http}/metrics")).await.unwrap().text().await.unwrap();
    assert!(
        metrics.contains("picogent_schedule_firings_total{schedule=\"standup\",outcome=\"posted\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("picogent_schedule_firings_total{schedule=\"standup\",outcome=\"idle\"} 1"), "{metrics}");
    let page = reqwest::get(format!("http://{http}/schedules")).await.unwrap().text().await.unwrap();
    assert!(page.contains("data-schedule=\"standup\"") && page.contains("0 9 * * * (UTC)"), "{page}");
    assert!(page.contains("pill idle") && page.contains("no task moved since"), "{page}");

    // `picogent schedules run` and `list` against the running agent, as an operator types them.
    let config_path = dir.path().join("agent.json");
    let mut file = agent_config(dir.path(), &board.url(), &model.url(), "picogent", standup(json!({})));
    file.http.listen = http.to_string();
    std::fs::write(&config_path, serde_json::to_string_pretty(&file).unwrap()).unwrap();
    let run = picogent_cli(&["schedules", "run", "standup", "--config"], &config_path).await;
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let said = String::from_utf8_lossy(&run.stdout);
    assert!(said.starts_with("standup: nothing to say (no task moved since"), "{said}");
    alice
        .update_task(&review.id, &UpdateTask { status: Some(TaskStatus::Done), ..UpdateTask::default() })
        .await
        .unwrap();
    let fired = agent.schedules.run_now("standup").await.unwrap();
    assert!(matches!(fired, Fired::Queued { .. }), "{fired:?}");
    let posts = wait_posts(&alice, 2).await;
    assert!(posts[1].content.starts_with("Standup for team: 1 task moved"), "{}", posts[1].content);
    wait_idle(&agent).await;
    let list = picogent_cli(&["schedules", "list", "--config"], &config_path).await;
    let listed = String::from_utf8_lossy(&list.stdout);
    assert!(list.status.success(), "{}", String::from_utf8_lossy(&list.stderr));
    assert!(listed.starts_with("standup (standup · project team): 0 9 * * * (UTC)\n"), "{listed}");
    assert!(listed.contains("\n  next:  ") && listed.contains(" 09:00 UTC (in "), "{listed}");
    assert!(listed.contains("  last:  ") && listed.contains(" posted: moved 1, blocked 1, due 1 (run "), "{listed}");
    let unknown = picogent_cli(&["schedules", "run", "standp", "--config"], &config_path).await;
    assert!(!unknown.status.success());
    assert!(
        String::from_utf8_lossy(&unknown.stderr)
            .contains("there is no schedule \"standp\"; the schedules are: standup")
    );
    assert_eq!(agent_posts(&alice).await.len(), 2, "nothing posted twice");

    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// Runs the picogent binary with `args` and the config path last.
async fn picogent_cli(args: &[&str], config: &Path) -> std::process::Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_picogent"));
    command.args(args).arg(config).env("RUST_LOG", "warn");
    tokio::time::timeout(Duration::from_secs(30), command.output()).await.expect("the command ends").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_repeats_no_firing_and_one_missed_while_away_is_caught_up_once() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let alice = client(&board, "tok-alice");
    let nine = next_utc_hour(now_ms(), 9);
    let moving = task(&alice, "Write the release notes", Some("bob"), TaskStatus::Todo, &[]).await;
    let config =
        agent_config(dir.path(), &board.url(), &model.url(), "picogent", standup(json!({"catch_up_ms": 3_600_000})));

    let clock = clock_before(nine);
    let agent = start_with(config.clone(), &clock).await;
    wait_posts(&alice, 1).await;
    wait_firing(&agent, "standup", nine).await;
    wait_idle(&agent).await;
    agent.shutdown().await.unwrap();

    // Back ten minutes after its time: the firing of 09:00 is not done again. A firing asked for
    // now is handled only after the start's look at what came due, so it shows that look is over.
    let clock = Arc::new(ShiftedClock::starting_at(nine + 10 * MINUTE));
    let agent = start_with(config.clone(), &clock).await;
    let barrier = agent.schedules.run_now("standup").await.unwrap();
    assert!(matches!(barrier, Fired::Idle { .. }), "nothing moved since 09:00: {barrier:?}");
    let firings = agent.state.last_firings("standup", 10).await.unwrap();
    assert_eq!(firings.iter().filter(|row| row.fire_at_ms == nine).count(), 1);
    assert_eq!(firings.len(), 2, "09:00 and the one asked for: {firings:?}");
    assert_eq!(agent_posts(&alice).await.len(), 1, "no second digest after the restart");
    agent.shutdown().await.unwrap();

    // Away across the next 09:00 and back 20 minutes later, within catch_up_ms: it runs once.
    alice
        .update_task(&moving.id, &UpdateTask { status: Some(TaskStatus::InProgress), ..UpdateTask::default() })
        .await
        .unwrap();
    let clock = Arc::new(ShiftedClock::starting_at(nine + DAY + 20 * MINUTE));
    let agent = start_with(config.clone(), &clock).await;
    let posts = wait_posts(&alice, 2).await;
    assert!(posts[1].content.starts_with("Standup for team: 1 task moved"), "{}", posts[1].content);
    assert_eq!(wait_firing(&agent, "standup", nine + DAY).await.outcome, FiringOutcome::Posted);
    wait_idle(&agent).await;
    agent.shutdown().await.unwrap();
    let clock = Arc::new(ShiftedClock::starting_at(nine + DAY + 30 * MINUTE));
    let agent = start_with(config.clone(), &clock).await;
    agent.schedules.run_now("standup").await.unwrap();
    assert_eq!(agent_posts(&alice).await.len(), 2, "the caught-up firing is not caught up again");
    agent.shutdown().await.unwrap();

    // Away for longer than catch_up_ms past the next one: recorded skipped, with why; not run.
    let clock = Arc::new(ShiftedClock::starting_at(nine + 2 * DAY + 3 * 3_600_000));
    let agent = start_with(config, &clock).await;
    agent.schedules.run_now("standup").await.unwrap();
    let skipped = agent.state.get_firing("standup", nine + 2 * DAY).await.unwrap().expect("recorded");
    assert_eq!(skipped.outcome, FiringOutcome::Skipped);
    assert!(skipped.detail.contains("catch_up_ms"), "{}", skipped.detail);
    assert_eq!(agent_posts(&alice).await.len(), 2);
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// Nudges on the tasks of people untouched for `days`, one each, not again within `days`; no
/// model call; the agent's own tasks, bots' tasks and done tasks left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_tasks_are_nudged_once_each_and_not_again_within_their_days() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let alice = client(&board, "tok-alice");
    let todo = task(&alice, "Renew the certificate", Some("bob"), TaskStatus::Todo, &[]).await;
    let doing = task(&alice, "Migrate the wiki", Some("alice"), TaskStatus::InProgress, &[]).await;
    let mine = task(&alice, "The agent's own", Some("picogent"), TaskStatus::Todo, &[]).await;
    let bots = task(&alice, "A bot's", Some("otherbot"), TaskStatus::Todo, &[]).await;
    let done = task(&alice, "Finished", Some("bob"), TaskStatus::Done, &[]).await;
    let nobody = task(&alice, "Nobody's", None, TaskStatus::Todo, &[]).await;
    // Assignments are not worked here: what the agent posts on a task is a nudge or nothing.
    let extra = json!({"schedules": {"nudges": {"cron": "0 10 * * *", "kind": "stale", "project": "team", "days": 3}},
                       "task_listen": "none"});
    let config = agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra);
    let ten = next_utc_hour(now_ms() + 4 * DAY, 10);
    let clock = clock_before(ten);
    let agent = start_with(config.clone(), &clock).await;
    let row = wait_firing(&agent, "nudges", ten).await;
    assert_eq!(row.outcome, FiringOutcome::Posted, "{row:?}");
    let nudges = |task: TaskOut| {
        let alice = alice.clone();
        async move {
            comments(&alice, &task.id).await.into_iter().filter(|c| c.author_slug == "picogent").collect::<Vec<_>>()
        }
    };
    let on_todo = nudges(todo.clone()).await;
    assert_eq!(on_todo.len(), 1, "{on_todo:?}");
    assert!(
        on_todo[0].content.starts_with(&format!("@bob, {} has not moved for 4 days.", todo.key)),
        "{}",
        on_todo[0].content
    );
    assert_eq!(on_todo[0].mentions, ["bob"], "the assignee hears it");
    assert_eq!(nudges(doing.clone()).await.len(), 1);
    for left in [&mine, &bots, &done, &nobody] {
        let posted = nudges(left.clone()).await;
        assert!(posted.is_empty(), "{} is left alone: {posted:?}", left.title);
    }
    assert_eq!(model.request_count(), 0, "a nudge needs no model");

    // The next day, and after a restart: nothing is nudged again within 3 days.
    clock.set_now(ten + DAY - 1_500);
    let next = wait_firing(&agent, "nudges", ten + DAY).await;
    assert_eq!(next.outcome, FiringOutcome::Idle, "{next:?}");
    agent.shutdown().await.unwrap();
    let clock = Arc::new(ShiftedClock::starting_at(ten + DAY + 5 * MINUTE));
    let agent = start_with(config.clone(), &clock).await;
    assert!(matches!(agent.schedules.run_now("nudges").await.unwrap(), Fired::Idle { .. }));
    assert_eq!(nudges(todo.clone()).await.len(), 1);
    assert_eq!(nudges(doing.clone()).await.len(), 1);

    // Three days after the first nudge, still untouched: nudged again, once.
    clock.set_now(ten + 3 * DAY - 1_500);
    assert_eq!(wait_firing(&agent, "nudges", ten + 3 * DAY).await.outcome, FiringOutcome::Posted);
    assert_eq!(nudges(todo).await.len(), 2);
    assert_eq!(nudges(doing).await.len(), 2);
    assert_eq!(model.request_count(), 0, "a nudge needs no model");
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// A `prompt` job runs its file as a run in its named session: each firing's answer is posted in
/// the project's chat, and the next firing goes on from the conversation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_job_posts_its_answer_and_goes_on_from_its_session() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let alice = client(&board, "tok-alice");
    std::fs::write(dir.path().join("weekly.md"), "Summarise the week for the team.").unwrap();
    let extra = json!({"schedules": {"weekly": {
        "cron": "0 16 * * 5", "kind": "prompt", "prompt": dir.path().join("weekly.md"), "project": "team",
        "session": "weekly-review", "max_turns": 3}}});
    let config = agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra);
    let friday = picogent::schedule::Cadence::parse("0 16 * * 5", "UTC").unwrap().next_after(now_ms()).unwrap();
    let clock = clock_before(friday);
    let agent = start_with(config, &clock).await;
    let posts = wait_posts(&alice, 1).await;
    assert!(posts[0].content.contains("offline planner"), "{}", posts[0].content);
    wait_firing(&agent, "weekly", friday).await;
    clock.set_now(friday + 7 * DAY - 1_500);
    wait_posts(&alice, 2).await;
    assert_eq!(wait_firing(&agent, "weekly", friday + 7 * DAY).await.outcome, FiringOutcome::Posted);
    // The second firing's request holds the first one's exchange: memory across firings.
    let requests = model.requests();
    let last = requests.last().unwrap().to_string();
    assert_eq!(last.matches("Summarise the week for the team.").count(), 2, "{last}");
    let runs = agent.state.list_runs(10).await.unwrap();
    assert!(runs.iter().all(|run| run.session_key.to_string() == "schedule:weekly-review"), "{runs:?}");
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// A firing whose run fails leaves one notice where it would have posted, and the next firing
/// still runs (and, failing again, says so once more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_firing_leaves_one_notice_and_the_next_one_still_runs() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let alice = client(&board, "tok-alice");
    task(&alice, "Something that moved", Some("bob"), TaskStatus::Todo, &[]).await;
    // No model answers there.
    let dead = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead_url = format!("http://{}/v1", dead.local_addr().unwrap());
    drop(dead);
    let extra = json!({
        "schedules": {"standup": {"cron": "0 9 * * *", "kind": "standup", "project": "team"}},
        "llm": {"timeout_ms": 2000, "retry": {"max_attempts": 1, "initial_delay_ms": 10, "max_delay_ms": 10, "max_elapsed_ms": 100, "jitter": false}},
    });
    let config = agent_config(dir.path(), &board.url(), &dead_url, "picogent", extra);
    // The last 09:00 before now: the board's changes since then are news at both firings (a
    // failed digest read nothing for the next one to start from).
    let nine = next_utc_hour(now_ms(), 9) - DAY;
    let clock = clock_before(nine);
    let agent = start_with(config, &clock).await;
    assert_eq!(wait_firing(&agent, "standup", nine).await.outcome, FiringOutcome::Failed);
    let notices = wait_posts(&alice, 1).await;
    assert!(notices[0].content.starts_with("Scheduled `standup`: "), "{}", notices[0].content);
    assert!(notices[0].content.contains("model server cannot be reached"), "names the cause: {}", notices[0].content);
    assert!(
        notices[0].content.contains("`picogent schedules run standup`") && !notices[0].content.contains("mention me"),
        "says how to run it again: {}",
        notices[0].content
    );
    clock.set_now(nine + DAY - 1_500);
    assert_eq!(wait_firing(&agent, "standup", nine + DAY).await.outcome, FiringOutcome::Failed);
    wait_posts(&alice, 2).await;
    wait_idle(&agent).await;
    assert_eq!(agent_posts(&alice).await.len(), 2, "one notice per firing");
    agent.shutdown().await.unwrap();
    board.shutdown().await.unwrap();
}

/// What stops the start, naming the job and what to fix: a pattern, a zone, a prompt file, a
/// field of another kind (all when the config loads), a project the tracker does not have (at
/// start).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mistake_in_a_schedule_stops_the_start_naming_the_job_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (json!({"cron": "0 9 * *", "kind": "standup", "project": "team"}), "schedules.daily.cron", "expected 5 fields"),
        (
            json!({"cron": "0 9 * * *", "timezone": "Europe/Berln", "kind": "standup", "project": "team"}),
            "schedules.daily.timezone",
            "like Europe/Berlin",
        ),
        (
            json!({"cron": "0 9 * * *", "kind": "prompt", "prompt": "missing.md"}),
            "schedules.daily.prompt",
            "missing.md",
        ),
        (
            json!({"cron": "0 9 * * *", "kind": "standup", "project": "team", "days": 3}),
            "schedules.daily.days",
            "stale",
        ),
        (json!({"cron": "0 9 * * *", "kind": "standups", "project": "team"}), "schedules.daily.kind", "standup"),
    ];
    for (job, field, fix) in cases {
        let path = dir.path().join("agent.json");
        let config = json!({"slug": "picogent", "name": "P", "tracker": {"url": "http://127.0.0.1:9"},
                            "llm": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}, "schedules": {"daily": job}});
        std::fs::write(&path, config.to_string()).unwrap();
        let error = picogent::config::Config::load(&path).unwrap_err().to_string();
        assert!(error.contains(field) && error.contains(fix), "{field}: {error}");
    }

    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let extra = json!({"schedules": {"daily": {"cron": "0 9 * * *", "kind": "standup", "project": "teem"}}});
    let config = agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra);
    let refused = picogent::runtime::start(agent_options(config, None)).await;
    let error = refused.err().expect("an unknown project stops the start").to_string();
    assert!(
        error.contains("schedules.daily.project") && error.contains("\"teem\"") && error.contains("team"),
        "{error}"
    );

    // `picogent check` says the same before a start, and when each schedule fires next.
    let path = dir.path().join("agent.json");
    for (project, says) in [("teem", "FAIL schedules "), ("team", "ok   schedules ")] {
        let extra = json!({"schedules": {"daily": {"cron": "0 9 * * *", "kind": "standup", "project": project}}});
        let config = agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra);
        std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_picogent"));
        command.args(["check", "--config"]).arg(&path).env("TEAMBOARD_TOKEN", "tok-picogent").env("RUST_LOG", "warn");
        let output = command.output().await.unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let line = stdout.lines().find(|line| line.contains("schedules")).unwrap_or_default();
        assert!(line.starts_with(says), "{stdout}");
        match project {
            "teem" => assert!(line.contains("\"teem\"") && line.contains("schedules.daily.project"), "{line}"),
            _ => assert!(line.contains("daily (standup) next ") && line.contains("09:00 UTC"), "{line}"),
        }
    }
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// `picogent demo --keep` names the commands that fire its schedule now; they work on the demo.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demos_schedule_fires_now_with_the_command_it_prints() {
    let demo = picogent::demo::start(None).await.unwrap();
    demo.play(Duration::from_secs(60)).await.unwrap();
    wait_idle(&demo.agent).await;
    let config = demo.write_config().unwrap();
    let run = picogent_cli(&["schedules", "run", picogent::demo::DEMO_SCHEDULE, "--config"], &config).await;
    let said = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success() && said.starts_with("standup: queued as run "),
        "{said}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let digest = eventually(Duration::from_secs(30), "the demo's digest", || async {
        let posts = agent_posts(&demo.alice).await;
        posts.into_iter().find(|post| post.content.starts_with("Standup for team:"))
    })
    .await;
    assert!(digest.content.contains("Moved since"), "{}", digest.content);
    wait_idle(&demo.agent).await;
    // The `runs show` it prints works as printed, from another folder: its words, run as they are.
    let printed = said.split('`').nth(1).expect("a command between backticks");
    let words: Vec<&str> = printed.split_whitespace().collect();
    assert_eq!(words[..3], ["picogent", "runs", "show"], "{printed}");
    let elsewhere = tempfile::tempdir().unwrap();
    let shown = tokio::process::Command::new(env!("CARGO_BIN_EXE_picogent"))
        .args(&words[1..])
        .current_dir(elsewhere.path())
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.status.success() && text.contains("schedule standup"),
        "{text}{}",
        String::from_utf8_lossy(&shown.stderr)
    );
    assert!(std::fs::read_dir(elsewhere.path()).unwrap().next().is_none(), "it left nothing behind where it ran");
    let list = picogent_cli(&["schedules", "list", "--config"], &config).await;
    let listed = String::from_utf8_lossy(&list.stdout);
    assert!(
        listed.contains("standup (standup · project team): 0 9 * * 1-5 (UTC)") && listed.contains(" posted: "),
        "{listed}"
    );
    demo.shutdown().await.unwrap();
}

/// A firing runs within its own budget, and a notice that blames it names the job's setting;
/// what it spent counts towards the day's budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_firing_is_held_to_its_own_budget_and_its_spend_counts_towards_the_day() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let alice = client(&board, "tok-alice");
    let work = task(&alice, "Tidy the backlog", None, TaskStatus::Todo, &[]).await;
    // The offline planner works a task named this way step by step: more turns than allowed.
    std::fs::write(dir.path().join("tidy.md"), format!("Task: {}\nTidy it up.", work.key)).unwrap();
    let extra = json!({"schedules": {"tidy": {
        "cron": "0 8 * * *", "kind": "prompt", "prompt": dir.path().join("tidy.md"), "project": "team", "max_turns": 2}}});
    let config = agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra);
    let eight = next_utc_hour(now_ms(), 8);
    let clock = clock_before(eight);
    let agent = start_with(config, &clock).await;
    assert_eq!(wait_firing(&agent, "tidy", eight).await.outcome, FiringOutcome::Failed);
    let notice = wait_posts(&alice, 1).await.remove(0).content;
    assert!(
        notice.contains("I stopped after 2 model turns, the limit for one run (`schedules.tidy.max_turns`, now 2)"),
        "{notice}"
    );
    assert!(
        notice.contains("`picogent schedules run tidy`") && !notice.to_lowercase().contains("mention me"),
        "{notice}"
    );
    let runs = agent.state.list_runs(10).await.unwrap();
    assert_eq!((runs.len(), runs[0].turns), (1, 2));
    let spent = agent.state.spend_today().await.unwrap().tokens;
    assert_eq!(spent, runs[0].prompt_tokens + runs[0].completion_tokens, "the firing's tokens count towards the day");
    assert!(spent > 0);
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// A standup whose model misbehaves the way real ones do: it tries to post the digest itself with
/// a tool it was not offered, then its answer is cut off at the output limit. The person sees one
/// notice in the chat naming the limit and how to run it again, nothing the model tried to post;
/// the next firing, answered in plain text, posts the digest once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standup_whose_model_misbehaves_leaves_one_notice_and_the_next_posts_once() {
    use picogent::offline_model::{OfflineModelOptions, script::Script};
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let script: Script = serde_json::from_value(json!({"turns": [
        {"expect": {"tools_exclude": ["send_message", "reply_message", "update_task"]},
         "reply": {"tool_calls": [{"name": "send_message", "arguments": {"content": "STANDUP BY THE MODEL"}}]}},
        {"reply": {"content": "Standup: the login page moved and", "finish_reason": "length"}},
        {"reply": {"content": "Standup for team: the login page is done."}},
    ]}))
    .unwrap();
    let model = picogent::offline_model::start(OfflineModelOptions::script(script)).await.unwrap();
    let alice = client(&board, "tok-alice");
    let login = task(&alice, "Ship the login page", Some("bob"), TaskStatus::InReview, &[]).await;
    let config = agent_config(dir.path(), &board.url(), &model.url(), "picogent", standup(json!({})));
    let nine = next_utc_hour(now_ms(), 9);
    let clock = clock_before(nine);
    let agent = start_with(config, &clock).await;
    assert_eq!(wait_firing(&agent, "standup", nine).await.outcome, FiringOutcome::Failed);
    let notice = wait_posts(&alice, 1).await.remove(0).content;
    assert!(notice.starts_with("Scheduled `standup`: My answer was cut off at the output limit"), "{notice}");
    assert!(
        notice.contains("`llm.max_output_tokens`") && notice.contains("`picogent schedules run standup`"),
        "{notice}"
    );

    alice
        .update_task(&login.id, &UpdateTask { status: Some(TaskStatus::Done), ..UpdateTask::default() })
        .await
        .unwrap();
    assert!(matches!(agent.schedules.run_now("standup").await.unwrap(), Fired::Queued { .. }));
    let posts = wait_posts(&alice, 2).await;
    assert!(
        posts[1].content.starts_with("Standup for team: the login page is done.\n\nMoved since"),
        "{}",
        posts[1].content
    );
    wait_idle(&agent).await;
    let posts = agent_posts(&alice).await;
    assert_eq!(posts.len(), 2, "one notice, one digest: {posts:?}");
    assert!(posts.iter().all(|post| !post.content.contains("STANDUP BY THE MODEL")));
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}
