//! Deploying: what the agent takes up when it starts on a board that has a history. Real board,
//! offline model and agent over loopback; everything is checked on the board, as a person on it
//! would see it, and in `/readyz`.

#[path = "support/agent.rs"]
mod agent_support;

use std::path::Path;
use std::time::Duration;

use agent_support::*;
use picogent::state::RunStatus;
use picogent::tracker::TrackerClient;
use picogent::tracker::model::*;
use serde_json::{Value, json};
use sqlx::sqlite::SqlitePool;

/// Opens the board's SQLite file beside the running board (WAL allows a second connection).
async fn board_db(dir: &Path) -> SqlitePool {
    SqlitePool::connect(&format!("sqlite://{}", dir.join("board.db").display())).await.unwrap()
}

/// Makes messages look sent `age` ago: the board keeps `created_at` as RFC 3339 text, which is
/// all the agent reads of a message's age.
async fn backdate(pool: &SqlitePool, ids: &[String], age: Duration) {
    let at = time::OffsetDateTime::now_utc() - age;
    let at = at.format(&time::format_description::well_known::Rfc3339).unwrap();
    for id in ids {
        let changed =
            sqlx::query("UPDATE messages SET created_at = ?1 WHERE id = ?2").bind(&at).bind(id).execute(pool).await;
        assert_eq!(changed.unwrap().rows_affected(), 1, "message {id}");
    }
}

/// The newest seq of the agent's event log on the board.
async fn head_seq(pool: &SqlitePool) -> u64 {
    let seq: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(seq), 0) FROM events WHERE member_slug = 'picogent'")
        .fetch_one(pool)
        .await
        .unwrap();
    seq as u64
}

/// Every message the agent has on the board, anywhere.
async fn agent_messages(pool: &SqlitePool) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM messages WHERE author_slug = 'picogent'").fetch_one(pool).await.unwrap()
}

async fn set_task(alice: &TrackerClient, task: &TaskOut, update: UpdateTask) -> TaskOut {
    alice.update_task(&task.id, &update).await.unwrap()
}

async fn reply(who: &TrackerClient, parent: &MessageOut, text: &str) -> MessageOut {
    who.reply_message(&parent.id, &ReplyMessage { content: text.into(), mentions: None, reply_to: None }, None)
        .await
        .unwrap()
}

fn agent_posts(messages: &[MessageOut]) -> usize {
    messages.iter().filter(|m| m.author_slug == "picogent").count()
}

/// The history of the board the agent starts on.
struct History {
    /// Open, assigned to the agent, never touched by it: the only tasks to work.
    open: Vec<TaskOut>,
    /// In review, done, reassigned to bob, or already summarised by the agent: left alone.
    closed: Vec<TaskOut>,
    /// The agent's summary comments already on the board (one per summarised task).
    summarised: Vec<TaskOut>,
    old_mentions: Vec<MessageOut>,
    /// Recent and never answered: each gets one reply.
    to_answer: Vec<MessageOut>,
    /// Recent, answered by the agent before it started: no second reply.
    answered_before: Vec<MessageOut>,
}

const OLD_MENTIONS: usize = 200;

async fn make_history(alice: &TrackerClient, bob: &TrackerClient, me: &TrackerClient, pool: &SqlitePool) -> History {
    let chat = chat_id(alice).await;
    // 50 old assignments: 12 open, 30 in review, done or reassigned, 8 summarised by the agent.
    let mut open = Vec::new();
    let mut closed = Vec::new();
    let mut summarised = Vec::new();
    let status = |status| UpdateTask { status: Some(status), ..Default::default() };
    for n in 0..50 {
        let task = create_assigned(alice, &format!("Old task {n}"), &format!("From before\n- look at {n}")).await;
        match n {
            0..10 => open.push(task),
            10..12 => open.push(set_task(alice, &task, status(TaskStatus::InProgress)).await),
            12..22 => closed.push(set_task(alice, &task, status(TaskStatus::InReview)).await),
            22..32 => closed.push(set_task(alice, &task, status(TaskStatus::Done)).await),
            32..42 => {
                let to_bob = UpdateTask { assignee_slug: Some(Some("bob".into())), ..Default::default() };
                closed.push(set_task(alice, &task, to_bob).await)
            }
            _ => {
                comment(me, &task.id, "Done: looked at it, nothing to change. (summary from an earlier run)").await;
                summarised.push(task)
            }
        }
    }
    assert_eq!((open.len(), closed.len(), summarised.len()), (12, 30, 8));

    // 200 old mentions, two days old.
    let mut old_mentions = Vec::new();
    for n in 0..OLD_MENTIONS {
        let who = if n % 2 == 0 { alice } else { bob };
        old_mentions.push(say(who, &chat, &format!("@picogent old question {n}: what was the status?")).await);
    }
    let ids: Vec<String> = old_mentions.iter().map(|m| m.id.clone()).collect();
    backdate(pool, &ids, Duration::from_secs(2 * 24 * 3600)).await;

    // Recent mentions: three plain ones; one the agent already answered; a thread the agent
    // answered, with a follow-up after its answer.
    let mut to_answer = Vec::new();
    let mut answered_before = Vec::new();
    for n in 0..3 {
        to_answer.push(say(bob, &chat, &format!("@picogent recent question {n}: how many tasks are open?")).await);
    }
    let asked = say(alice, &chat, "@picogent did the deploy go out?").await;
    reply(me, &asked, "It did, at 10:00.").await;
    answered_before.push(asked);
    let root = say(alice, &chat, "@picogent can you look at the release notes?").await;
    reply(me, &root, "Looked: they are fine.").await;
    answered_before.push(root.clone());
    to_answer.push(reply(alice, &root, "@picogent thanks, and the changelog too?").await);
    History { open, closed, summarised, old_mentions, to_answer, answered_before }
}

/// The board as the agent must have left it: the open tasks worked once each, nothing on the
/// others, one reply per recent unanswered mention and none anywhere else.
async fn assert_board_after_first_start(
    alice: &TrackerClient,
    agent: &picogent::runtime::AgentHandle,
    history: &History,
) {
    for task in &history.open {
        let now = alice.get_task(&task.id).await.unwrap();
        assert_eq!(now.status, TaskStatus::InReview, "{}", task.key);
        let steps = alice.list_steps(&task.id).await.unwrap();
        assert!(!steps.is_empty() && steps.iter().all(|s| s.done), "{}: {steps:?}", task.key);
        assert_eq!(agent_posts(&comments(alice, &task.id).await), 1, "{}: one summary", task.key);
        let runs = runs_for(agent, &format!("task:{}", task.id)).await;
        assert_eq!(runs.len(), 1, "{}: worked once", task.key);
        assert_eq!(runs[0].status, RunStatus::Completed);
    }
    for task in &history.closed {
        let now = alice.get_task(&task.id).await.unwrap();
        assert_eq!((&now.status, &now.assignee_slug), (&task.status, &task.assignee_slug), "{}", task.key);
        assert!(alice.list_steps(&task.id).await.unwrap().is_empty(), "{}", task.key);
        assert_eq!(agent_posts(&comments(alice, &task.id).await), 0, "{}", task.key);
        assert!(runs_for(agent, &format!("task:{}", task.id)).await.is_empty(), "{}", task.key);
    }
    for task in &history.summarised {
        let now = alice.get_task(&task.id).await.unwrap();
        assert_eq!(now.status, TaskStatus::Todo, "{}: not acknowledged again", task.key);
        assert!(alice.list_steps(&task.id).await.unwrap().is_empty(), "{}", task.key);
        assert_eq!(agent_posts(&comments(alice, &task.id).await), 1, "{}: only the earlier summary", task.key);
    }
    for mention in &history.old_mentions {
        assert_eq!(agent_posts(&thread(alice, &mention.id).await), 0, "old mention {}", mention.content);
    }
    for mention in &history.to_answer {
        let root = mention.parent_id.as_deref().unwrap_or(&mention.id);
        let in_thread = thread(alice, root).await;
        let after: Vec<_> = in_thread.iter().skip_while(|m| m.id != mention.id).skip(1).cloned().collect();
        assert_eq!(agent_posts(&after), 1, "one reply to {:?}: {in_thread:#?}", mention.content);
    }
    for mention in &history.answered_before {
        let in_thread = thread(alice, &mention.id).await;
        let replies_to_it =
            in_thread.iter().take_while(|m| !m.content.contains("changelog")).cloned().collect::<Vec<_>>();
        assert_eq!(agent_posts(&replies_to_it), 1, "only the earlier answer to {:?}", mention.content);
    }
}

/// The done-when of "a defined start": a fresh agent on a board with 200 old mentions and 50 old
/// assignments posts nothing about them and works only the open ones assigned to it — and a
/// second fresh start (the state file lost) posts nothing at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_agent_on_a_board_with_history_works_only_what_is_open_and_unanswered() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let pool = board_db(dir.path()).await;
    let alice = client(&board, "tok-alice");
    let bob = client(&board, "tok-bob");
    let me = client(&board, "tok-picogent");
    let history = make_history(&alice, &bob, &me, &pool).await;
    let head = head_seq(&pool).await;
    assert!(head >= 250, "the agent's log has the history: {head}");
    let before = agent_messages(&pool).await;
    assert_eq!(before, 10, "8 summaries and 2 replies from before");

    let config = agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}));
    let agent = start_agent(config.clone()).await;
    let body = startup_report(agent.http_addr.unwrap()).await;
    let startup = &body["startup"];
    assert_eq!(body["status"], "ready");
    assert_eq!(startup["mode"], "head", "{body:#}");
    assert_eq!(startup["from_seq"], head, "{body:#}");
    assert_eq!(startup["skipped_events"], head, "every past event read and none acted on: {body:#}");
    let found = &startup["reconciliation"];
    assert_eq!(found["tasks"], json!({"open": 20, "worked": 12, "skipped": {"summarised": 8}}), "{body:#}");
    // Newest first: the 6 recent ones, then old ones to the end of that page of 200.
    let mentions = json!({"window": "15m", "answered": 4, "skipped": {"old": 194, "handled": 2}});
    assert_eq!(found["mentions"], mentions, "{body:#}");
    assert_eq!(found["errors"], json!([]));

    // Live events after the head are heard as ever.
    let live = create_assigned(&alice, "A new task", "Now\n- do it").await;
    wait_status(&alice, &live.id, TaskStatus::InReview).await;
    for task in &history.open {
        wait_status(&alice, &task.id, TaskStatus::InReview).await;
    }
    eventually(Duration::from_secs(60), "a reply to each recent mention", || async {
        for mention in &history.to_answer {
            let root = mention.parent_id.as_deref().unwrap_or(&mention.id);
            let in_thread = thread(&alice, root).await;
            let after: Vec<_> = in_thread.iter().skip_while(|m| m.id != mention.id).skip(1).cloned().collect();
            (agent_posts(&after) > 0).then_some(())?;
        }
        Some(())
    })
    .await;
    wait_idle(&agent).await;
    assert_board_after_first_start(&alice, &agent, &history).await;
    // Nothing else anywhere: 12 + 1 summaries and 4 replies.
    assert_eq!(agent_messages(&pool).await, before + 13 + 4);
    // The past was read, not processed: the state holds only what came after the head.
    assert!(agent.state.last_seq().await.unwrap() > head);
    let runs = agent.state.list_runs(100).await.unwrap();
    assert_eq!(runs.len(), 12 + 1 + 4, "{runs:#?}");
    agent.shutdown().await.unwrap();

    // The state file is lost; a fresh start again: the board shows what was handled, so nothing
    // is posted, whatever the state file (does not) remember.
    for suffix in ["", "-wal", "-shm"] {
        let mut path = config.state.path.clone().into_os_string();
        path.push(suffix);
        let _ = std::fs::remove_file(path);
    }
    let posted = agent_messages(&pool).await;
    let agent = start_agent(config).await;
    let body = startup_report(agent.http_addr.unwrap()).await;
    let startup = &body["startup"];
    assert_eq!(startup["mode"], "head", "{body:#}");
    assert_eq!(startup["from_seq"], head_seq(&pool).await, "{body:#}");
    let found = &startup["reconciliation"];
    assert_eq!(found["tasks"], json!({"open": 8, "worked": 0, "skipped": {"summarised": 8}}), "{body:#}");
    let mentions = json!({"window": "15m", "answered": 0, "skipped": {"old": 194, "handled": 6}});
    assert_eq!(found["mentions"], mentions, "{body:#}");
    wait_idle(&agent).await;
    assert!(agent.state.list_runs(10).await.unwrap().is_empty(), "no run at all");
    assert_eq!(agent_messages(&pool).await, posted, "nothing posted");
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// After a restart with the state file kept, the stream resumes from the recorded position, and
/// reconciliation holds to the window as after a first start: here the tracker's log lost the
/// two mentions made while the agent was away, so only reconciliation can find them; the recent
/// one is answered once, the old one not at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_reconciliation_answers_only_mentions_inside_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let pool = board_db(dir.path()).await;
    let alice = client(&board, "tok-alice");
    let chat = chat_id(&alice).await;
    let config = agent_config(
        dir.path(),
        &board.url(),
        &model.url(),
        "picogent",
        json!({"startup": {"answer_mentions_since": "30m"}}),
    );
    let agent = start_agent(config.clone()).await;
    wait_ready(&agent).await;
    let first = say(&alice, &chat, "@picogent are you there?").await;
    eventually(Duration::from_secs(20), "the first reply", || async {
        (agent_posts(&thread(&alice, &first.id).await) == 1).then_some(())
    })
    .await;
    wait_idle(&agent).await;
    let recorded = agent.state.last_seq().await.unwrap();
    agent.shutdown().await.unwrap();

    let old = say(&alice, &chat, "@picogent (an hour ago) is the build green?").await;
    let recent = say(&alice, &chat, "@picogent (just now) is the build green?").await;
    // Ages that agree with the order they were written in: the first mention two hours ago.
    backdate(&pool, std::slice::from_ref(&first.id), Duration::from_secs(2 * 3600)).await;
    backdate(&pool, std::slice::from_ref(&old.id), Duration::from_secs(3600)).await;
    let lost = sqlx::query("DELETE FROM events WHERE member_slug = 'picogent' AND seq > ?1")
        .bind(recorded as i64)
        .execute(&pool)
        .await
        .unwrap()
        .rows_affected();
    assert!(lost >= 2, "the two mentions' events are gone from the log: {lost}");

    let agent = start_agent(config).await;
    let body = startup_report(agent.http_addr.unwrap()).await;
    let startup = &body["startup"];
    assert_eq!(startup["mode"], "resume", "{body:#}");
    assert_eq!(startup["from_seq"], recorded, "{body:#}");
    assert_eq!(startup["skipped_events"], 0, "{body:#}");
    let mentions = json!({"window": "30m", "answered": 1, "skipped": {"old": 2}});
    assert_eq!(startup["reconciliation"]["mentions"], mentions, "{body:#}");
    eventually(Duration::from_secs(20), "the reply to the recent mention", || async {
        (agent_posts(&thread(&alice, &recent.id).await) == 1).then_some(())
    })
    .await;
    wait_idle(&agent).await;
    assert_eq!(agent_posts(&thread(&alice, &old.id).await), 0, "the old mention is history");
    assert_eq!(agent_posts(&thread(&alice, &first.id).await), 1, "answered once, long ago");
    assert_eq!(agent_messages(&pool).await, 2);
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// `startup.answer_mentions_since: 0` answers no mention found by reconciliation, however
/// recent; live mentions are answered as ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_of_zero_answers_no_past_mention() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let pool = board_db(dir.path()).await;
    let alice = client(&board, "tok-alice");
    let chat = chat_id(&alice).await;
    let before = say(&alice, &chat, "@picogent a minute ago: anyone home?").await;
    let config = agent_config(
        dir.path(),
        &board.url(),
        &model.url(),
        "picogent",
        json!({"startup": {"answer_mentions_since": 0}}),
    );
    let agent = start_agent(config).await;
    let body = startup_report(agent.http_addr.unwrap()).await;
    let mentions = json!({"window": "0", "answered": 0, "skipped": {}});
    assert_eq!(body["startup"]["reconciliation"]["mentions"], mentions, "{body:#}");
    let live = say(&alice, &chat, "@picogent and now?").await;
    eventually(Duration::from_secs(20), "the reply to the live mention", || async {
        (agent_posts(&thread(&alice, &live.id).await) == 1).then_some(())
    })
    .await;
    wait_idle(&agent).await;
    assert_eq!(agent_posts(&thread(&alice, &before.id).await), 0);
    assert_eq!(agent_messages(&pool).await, 1);
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// `picogent run --from-start` replays the whole log and acts on it, whatever the state file
/// recorded: an old assignment the agent had summarised and an old mention, both left alone by
/// a start at the head, are worked. The choice is logged once at info and shown in `/readyz`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_start_replays_the_whole_log_and_acts_on_old_events() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let pool = board_db(dir.path()).await;
    let alice = client(&board, "tok-alice");
    let me = client(&board, "tok-picogent");
    let chat = chat_id(&alice).await;
    let task = create_assigned(&alice, "An old assignment", "From before\n- redo it").await;
    comment(&me, &task.id, "Done earlier (a summary the agent wrote before).").await;
    let mention = say(&alice, &chat, "@picogent from last week: what is open?").await;
    backdate(&pool, std::slice::from_ref(&mention.id), Duration::from_secs(7 * 24 * 3600)).await;

    // At the head (the default), both are left alone.
    let http = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let config =
        agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({"http": {"listen": http.to_string()}}));
    let agent = start_agent(config.clone()).await;
    let body = startup_report(agent.http_addr.unwrap()).await;
    assert_eq!(body["startup"]["mode"], "head", "{body:#}");
    assert_eq!(body["startup"]["reconciliation"]["tasks"]["skipped"], json!({"summarised": 1}), "{body:#}");
    assert_eq!(body["startup"]["reconciliation"]["mentions"]["skipped"], json!({"old": 1}), "{body:#}");
    wait_idle(&agent).await;
    assert!(agent.state.list_runs(10).await.unwrap().is_empty());
    agent.shutdown().await.unwrap();
    assert_eq!(agent_messages(&pool).await, 1);

    // `--from-start`, on the same state file (which recorded the head).
    let config_path = write_config(dir.path(), &config);
    let log_path = dir.path().join("agent.log");
    let mut process = std::process::Command::new(env!("CARGO_BIN_EXE_picogent"))
        .args(["--log-format", "json", "run", "--from-start", "--config"])
        .arg(&config_path)
        .env("TEAMBOARD_TOKEN", "tok-picogent")
        .env("RUST_LOG", "picogent=info")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let body = startup_report(http).await;
    assert_eq!(body["startup"]["mode"], "from_start", "{body:#}");
    assert_eq!(body["startup"]["from_seq"], 0, "{body:#}");
    assert_eq!(body["startup"]["skipped_events"], 0, "{body:#}");
    wait_status(&alice, &task.id, TaskStatus::InReview).await;
    eventually(Duration::from_secs(30), "a reply to the old mention", || async {
        (agent_posts(&thread(&alice, &mention.id).await) == 1).then_some(())
    })
    .await;
    let steps = alice.list_steps(&task.id).await.unwrap();
    assert!(!steps.is_empty() && steps.iter().all(|s| s.done), "{steps:?}");
    eventually(Duration::from_secs(20), "the summary", || async {
        (agent_posts(&comments(&alice, &task.id).await) == 2).then_some(())
    })
    .await;
    let killed = std::process::Command::new("kill").arg("-TERM").arg(process.id().to_string()).status().unwrap();
    assert!(killed.success());
    let status = tokio::task::spawn_blocking(move || process.wait().unwrap()).await.unwrap();
    assert!(status.success(), "exit status {status:?}");
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(!log.contains("tok-picogent"), "no token in the log");
    let started: Vec<Value> = log
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["fields"]["message"].as_str().is_some_and(|m| m.starts_with("started: ")))
        .collect();
    assert_eq!(started.len(), 1, "logged once: {log}");
    let fields = &started[0]["fields"];
    assert_eq!(started[0]["level"], "INFO");
    assert_eq!(fields["message"], "started: replayed the whole event log (--from-start)");
    assert_eq!((fields["mode"].clone(), fields["from_seq"].clone()), (json!("from_start"), json!(0)), "{fields}");
    assert_eq!(fields["tasks_worked"], 0, "the replayed event got there first: {fields}");
    assert_eq!(agent_messages(&pool).await, 1 + 2, "one summary, one reply");
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// With a model that answers in plain text, as many real models do, the reply in the thread is
/// the answer picogent posts for the run. That reply is what the board shows handled: a start
/// with the state file lost does not answer the mention again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_text_answer_counts_as_handled_after_the_state_file_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let faults = picogent::offline_model::Faults { plain_text_replies: true, ..Default::default() };
    let options = picogent::offline_model::OfflineModelOptions {
        faults,
        ..picogent::offline_model::OfflineModelOptions::planner()
    };
    let model = picogent::offline_model::start(options).await.unwrap();
    let pool = board_db(dir.path()).await;
    let alice = client(&board, "tok-alice");
    let config = agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}));
    let agent = start_agent(config.clone()).await;
    wait_ready(&agent).await;
    let question = say(&alice, &chat_id(&alice).await, "@picogent what is open?").await;
    eventually(Duration::from_secs(20), "the plain-text answer in the thread", || async {
        (agent_posts(&thread(&alice, &question.id).await) == 1).then_some(())
    })
    .await;
    wait_idle(&agent).await;
    agent.shutdown().await.unwrap();

    for suffix in ["", "-wal", "-shm"] {
        let mut path = config.state.path.clone().into_os_string();
        path.push(suffix);
        let _ = std::fs::remove_file(path);
    }
    let posted = agent_messages(&pool).await;
    let agent = start_agent(config).await;
    let body = startup_report(agent.http_addr.unwrap()).await;
    let mentions = json!({"window": "15m", "answered": 0, "skipped": {"handled": 1}});
    assert_eq!(body["startup"]["reconciliation"]["mentions"], mentions, "{body:#}");
    wait_idle(&agent).await;
    assert_eq!(agent_posts(&thread(&alice, &question.id).await), 1, "answered once");
    assert_eq!(agent_messages(&pool).await, posted, "nothing posted after the restart");
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// The messages of the agent in `messages` that name `asked` as what they answer.
fn answers_to(messages: &[MessageOut], asked: &MessageOut) -> usize {
    messages.iter().filter(|m| m.author_slug == "picogent" && m.reply_to.as_deref() == Some(asked.id.as_str())).count()
}

/// Three mentions in one task thread, posted before a first start: the agent answers a later
/// one first, and a reply to a later mention answers only that one. After the state file is
/// lost, a first start again reads what each reply of the agent names: the later mention is
/// handled, the two earlier ones are answered, each once, by a reply that names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_mentions_in_one_task_thread_are_each_answered_once_whichever_is_answered_first() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let pool = board_db(dir.path()).await;
    let alice = client(&board, "tok-alice");
    let task = alice
        .create_task(
            &CreateTask {
                project_slug: "team".into(),
                title: "Release 1.4".into(),
                assignee_slug: Some("bob".into()),
                ..CreateTask::default()
            },
            None,
        )
        .await
        .unwrap();
    // Threads are one level deep: every mention is a reply to the same first comment, so the
    // agent's replies all have that comment as their parent.
    let root = comment(&alice, &task.id, "Questions about the release, below.").await;
    let mut mentions = Vec::new();
    for n in 1..=3 {
        mentions.push(reply(&alice, &root, &format!("@picogent question {n}: is it ready?")).await);
    }
    let earlier: Vec<String> = mentions[..2].iter().map(|m| m.id.clone()).collect();
    // The first two look older than the window of a first start, so only the third is answered.
    backdate(&pool, &earlier, Duration::from_secs(20 * 60)).await;
    let config = agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}));
    let agent = start_agent(config.clone()).await;
    let body = startup_report(agent.http_addr.unwrap()).await;
    let found = &body["startup"]["reconciliation"]["mentions"];
    assert_eq!(found, &json!({"window": "15m", "answered": 1, "skipped": {"old": 2}}), "{body:#}");
    eventually(Duration::from_secs(20), "the reply to the third mention", || async {
        (answers_to(&comments(&alice, &task.id).await, &mentions[2]) == 1).then_some(())
    })
    .await;
    wait_idle(&agent).await;
    agent.shutdown().await.unwrap();

    // The state file is lost; the two earlier mentions are recent now. The agent's reply to the
    // third came after them in the thread: it answers the third alone.
    for suffix in ["", "-wal", "-shm"] {
        let mut path = config.state.path.clone().into_os_string();
        path.push(suffix);
        let _ = std::fs::remove_file(path);
    }
    backdate(&pool, &earlier, Duration::from_secs(60)).await;
    let agent = start_agent(config).await;
    let body = startup_report(agent.http_addr.unwrap()).await;
    assert_eq!(body["startup"]["mode"], "head", "{body:#}");
    let found = &body["startup"]["reconciliation"]["mentions"];
    assert_eq!(found, &json!({"window": "15m", "answered": 2, "skipped": {"handled": 1}}), "{body:#}");
    eventually(Duration::from_secs(30), "a reply to each earlier mention", || async {
        let thread = comments(&alice, &task.id).await;
        mentions[..2].iter().all(|mention| answers_to(&thread, mention) >= 1).then_some(())
    })
    .await;
    wait_idle(&agent).await;
    let thread = comments(&alice, &task.id).await;
    for mention in &mentions {
        assert_eq!(answers_to(&thread, mention), 1, "{:?} answered once: {thread:#?}", mention.content);
    }
    assert_eq!(agent_posts(&thread), 3, "nothing else: {thread:#?}");
    assert!(thread.iter().filter(|m| m.author_slug == "picogent").all(|m| m.parent_id.as_deref() == Some(&root.id)));
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}
