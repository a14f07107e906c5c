#![allow(dead_code, unreachable_pub)] // each test binary uses a different part; `pub` is for them
//! The work two humans give the agent in a soak, and what the board must show afterwards: each
//! `Soak task …` in review with each of its steps once and ticked and one comment of the agent's,
//! each `@picogent question …` answered once, no agent message twice. Shared by `tests/soak.rs`
//! (one agent under faults) and `tests/replicas_soak.rs` (three replicas killed and restarted).

use std::time::{Duration, Instant};

use picogent::secret::Secret;
use picogent::tracker::TrackerClient;
use picogent::tracker::model::{CreateTask, SendMessage};
use serde_json::json;
use sqlx::sqlite::SqlitePool;

/// A human on the board at `board_url`, retrying patiently.
pub fn human(board_url: &str, token: &str) -> TrackerClient {
    let config: picogent::config::TrackerConfig = serde_json::from_value(json!({
        "url": board_url, "timeout_ms": 5000,
        "retry": {"max_attempts": 10, "initial_delay_ms": 50, "max_delay_ms": 500, "max_elapsed_ms": 8000, "jitter": true}
    }))
    .unwrap();
    TrackerClient::new(&config, Secret::new(token)).unwrap()
}

/// Sends one thing as a human, retrying with the same idempotency key until the board takes it,
/// so a restart of the board neither loses nor doubles it.
pub async fn send_until_taken<T, F, Fut>(what: &str, mut send: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, picogent::tracker::TrackerError>>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match send().await {
            Ok(value) => return value,
            Err(error) => {
                assert!(Instant::now() < deadline, "{what} never reached the board: {error}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// One human's share of the traffic: `tasks` tasks and `mentions` mentions, spread over
/// `sending`, interleaved.
pub async fn human_traffic(
    client: TrackerClient,
    slug: &'static str,
    chat_id: String,
    tasks: usize,
    mentions: usize,
    sending: Duration,
) {
    let total = tasks + mentions;
    let pause = sending / total as u32;
    let started = Instant::now();
    for n in 0..total {
        // Tasks spread evenly among the mentions: exactly `tasks` of the items are tasks.
        let is_task = n * tasks / total != (n + 1) * tasks / total;
        let key = format!("soak-{slug}-{n}");
        if is_task {
            let steps = 1 + n % 3;
            let description = (1..=steps).map(|s| format!("- step {s} of {slug} {n}")).collect::<Vec<_>>().join("\n");
            let body = CreateTask {
                project_slug: "team".into(),
                title: format!("Soak task {slug} {n}"),
                description: Some(description),
                assignee_slug: Some("picogent".into()),
                ..CreateTask::default()
            };
            send_until_taken(&key, || client.create_task(&body, Some(&key))).await;
        } else {
            let body = SendMessage {
                content: format!("@picogent question {n} from {slug}: how many tasks are open?"),
                chat_id: Some(chat_id.clone()),
                ..SendMessage::default()
            };
            send_until_taken(&key, || client.send_message(&body, Some(&key))).await;
        }
        let next = started + pause * (n as u32 + 1);
        tokio::time::sleep_until(next.into()).await;
    }
}

#[derive(Debug, Default)]
pub struct Outcome {
    pub tasks: i64,
    pub tasks_done: i64,
    pub mentions: i64,
    pub mentions_answered: i64,
}

impl Outcome {
    /// Every one of `tasks` tasks in review with its steps and summary, every one of `mentions`
    /// mentions answered.
    pub fn finished(&self, tasks: usize, mentions: usize) -> bool {
        self.tasks == tasks as i64
            && self.tasks_done == tasks as i64
            && self.mentions == mentions as i64
            && self.mentions_answered == mentions as i64
    }
}

/// Whether the work still moves: a soak fails when nothing on the board moved for a while, not
/// when a loaded machine makes the whole of it slow. `moved` takes each new reading.
#[derive(Debug)]
pub struct Progress {
    last: (i64, i64, i64, i64),
    since: std::time::Instant,
}

impl Progress {
    pub fn new() -> Progress {
        Progress { last: (-1, -1, -1, -1), since: std::time::Instant::now() }
    }

    /// Takes a reading; how long the board has shown the same work.
    pub fn still_for(&mut self, now: &Outcome) -> std::time::Duration {
        let reading = (now.tasks, now.tasks_done, now.mentions, now.mentions_answered);
        if reading != self.last {
            self.last = reading;
            self.since = std::time::Instant::now();
        }
        self.since.elapsed()
    }
}

/// How far the work is, from the board's database.
pub async fn outcome(board: &SqlitePool) -> Outcome {
    let tasks: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks WHERE title LIKE 'Soak task %'")
        .fetch_one(board)
        .await
        .unwrap_or(0);
    // Done: in review, every step ticked, and a summary comment written.
    let tasks_done: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM tasks t WHERE t.title LIKE 'Soak task %' AND t.status = 'in_review'
           AND NOT EXISTS (SELECT 1 FROM steps s WHERE s.task_id = t.id AND s.done = 0)
           AND EXISTS (SELECT 1 FROM messages m WHERE m.task_id = t.id AND m.author_slug = 'picogent')",
    )
    .fetch_one(board)
    .await
    .unwrap_or(0);
    let mentions: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM messages WHERE author_slug IN ('alice', 'bob') AND content LIKE '@picogent question %'",
    )
    .fetch_one(board)
    .await
    .unwrap_or(0);
    let mentions_answered: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM messages q WHERE q.author_slug IN ('alice', 'bob') AND q.content LIKE '@picogent question %'
           AND EXISTS (SELECT 1 FROM messages r WHERE r.parent_id = q.id AND r.author_slug = 'picogent')",
    )
    .fetch_one(board)
    .await
    .unwrap_or(0);
    Outcome { tasks, tasks_done, mentions, mentions_answered }
}

/// What the board shows of the work: how much was done once, and what was done twice or not at all.
#[derive(Debug, Default)]
pub struct BoardCheck {
    pub tasks_worked: i64,
    pub mentions_answered: i64,
    pub duplicates: Vec<String>,
    pub losses: Vec<String>,
}

/// Checks the board's database for `tasks` soak tasks and `mentions` soak mentions.
pub async fn check_board(board: &SqlitePool, tasks: usize, mentions: usize) -> BoardCheck {
    let mut check = BoardCheck::default();
    // Each human item reached the board exactly once.
    let human_items: Vec<(String, i64)> = sqlx::query_as(
        "SELECT title, count(*) FROM tasks WHERE title LIKE 'Soak task %' GROUP BY title
         UNION ALL
         SELECT content, count(*) FROM messages WHERE author_slug IN ('alice', 'bob') GROUP BY content",
    )
    .fetch_all(board)
    .await
    .unwrap();
    for (what, count) in &human_items {
        if *count != 1 {
            check.duplicates.push(format!("{count} × human item {what:?}"));
        }
    }

    // Tasks: in review, each step once and ticked, exactly one comment from the agent.
    let rows: Vec<(String, String, String, String)> = sqlx::query_as(
        "SELECT id, key, status, coalesce(description, '') FROM tasks WHERE title LIKE 'Soak task %' ORDER BY row",
    )
    .fetch_all(board)
    .await
    .unwrap();
    if rows.len() != tasks {
        check.losses.push(format!("{} soak tasks on the board, expected {tasks}", rows.len()));
    }
    for (id, key, status, description) in &rows {
        let steps: Vec<(String, bool)> =
            sqlx::query_as("SELECT title, done FROM steps WHERE task_id = ? ORDER BY position")
                .bind(id)
                .fetch_all(board)
                .await
                .unwrap();
        let expected: Vec<String> = description.lines().map(|line| line.trim_start_matches("- ").to_string()).collect();
        let titles: Vec<String> = steps.iter().map(|(title, _)| title.clone()).collect();
        let comments: i64 =
            sqlx::query_scalar("SELECT count(*) FROM messages WHERE task_id = ? AND author_slug = 'picogent'")
                .bind(id)
                .fetch_one(board)
                .await
                .unwrap();
        if titles.len() > expected.len() || comments > 1 {
            check.duplicates.push(format!("{key}: steps {titles:?}, {comments} agent comments"));
        } else if status != "in_review" || titles != expected || steps.iter().any(|(_, done)| !done) || comments != 1 {
            check.losses.push(format!("{key}: {status}, steps {steps:?}, {comments} agent comments"));
        } else {
            check.tasks_worked += 1;
        }
    }

    // Mentions: exactly one reply each.
    let replies: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT q.id, q.content, (SELECT count(*) FROM messages r WHERE r.parent_id = q.id AND r.author_slug = 'picogent')
         FROM messages q WHERE q.author_slug IN ('alice', 'bob') AND q.content LIKE '@picogent question %'",
    )
    .fetch_all(board)
    .await
    .unwrap();
    if replies.len() != mentions {
        check.losses.push(format!("{} mentions on the board, expected {mentions}", replies.len()));
    }
    for (_, content, count) in &replies {
        match count {
            1 => check.mentions_answered += 1,
            0 => check.losses.push(format!("unanswered: {content:?}")),
            n => check.duplicates.push(format!("{n} replies to {content:?}")),
        }
    }

    // No duplicate comments at all: no two agent messages with the same place and text.
    let repeated: Vec<(String, i64)> = sqlx::query_as(
        "SELECT content, count(*) FROM messages WHERE author_slug = 'picogent'
         GROUP BY coalesce(task_id, ''), coalesce(parent_id, ''), coalesce(chat_id, ''), content HAVING count(*) > 1",
    )
    .fetch_all(board)
    .await
    .unwrap();
    for (content, count) in repeated {
        check.duplicates.push(format!("{count} × agent message {content:?}"));
    }
    let agent_messages: i64 = sqlx::query_scalar("SELECT count(*) FROM messages WHERE author_slug = 'picogent'")
        .fetch_one(board)
        .await
        .unwrap();
    let expected_messages = (tasks + mentions) as i64;
    if agent_messages > expected_messages {
        check.duplicates.push(format!("{agent_messages} agent messages, expected {expected_messages}"));
    }
    check
}

/// Checks the runs the agent recorded, as (session key, status): one run per session, each
/// completed, and `sessions` sessions in all. Adds what is wrong to `check`.
pub fn check_runs<'a>(check: &mut BoardCheck, runs: impl IntoIterator<Item = (&'a str, &'a str)>, sessions: usize) {
    let mut by_session = std::collections::BTreeMap::<&str, Vec<&str>>::new();
    for (session, status) in runs {
        by_session.entry(session).or_default().push(status);
    }
    for (session, statuses) in &by_session {
        if statuses.len() != 1 {
            check.duplicates.push(format!("{} runs for {session}: {statuses:?}", statuses.len()));
        } else if statuses[0] != "completed" {
            check.losses.push(format!("run for {session} ended {}", statuses[0]));
        }
    }
    if by_session.len() != sessions {
        check.losses.push(format!("{} sessions with runs, expected {sessions}", by_session.len()));
    }
}
