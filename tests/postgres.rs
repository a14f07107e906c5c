//! The agent with its state in PostgreSQL (`state.url = "postgres://…"`), end to end over real
//! sockets: the reference board, the offline model endpoint, the agent in process and as a
//! `picogent run` child, and the machine's PostgreSQL (`tests/support/postgres.rs`: each test in
//! a schema of its own, dropped at the end; a server that does not answer fails the test).
//! What is checked is what a person on the board sees: each task worked once, each mention
//! answered once, across restarts and with two agents in one database.

#[path = "support/agent.rs"]
mod agent_support;
#[path = "support/postgres.rs"]
mod test_postgres;

use std::path::Path;
use std::time::Duration;

use agent_support::*;
use picogent::config::Config;
use picogent::state::{RunStatus, State};
use picogent::tracker::TrackerClient;
use picogent::tracker::model::*;
use serde_json::json;
use sqlx::Connection;
use test_postgres::{TestSchema, with_schema};

/// An agent config whose state is in `schema`.
fn config_on(schema: &TestSchema, dir: &Path, board: &str, model: &str, slug: &str) -> Config {
    let mut config = agent_config(dir, board, model, slug, json!({}));
    config.state.postgres_url = Some(schema.url());
    config
}

fn mine(messages: &[MessageOut], slug: &str) -> usize {
    messages.iter().filter(|m| m.author_slug == slug).count()
}

async fn assign(alice: &TrackerClient, title: &str, description: &str, assignee: &str) -> TaskOut {
    let task = CreateTask {
        project_slug: "team".into(),
        title: title.into(),
        description: Some(description.into()),
        assignee_slug: Some(assignee.into()),
        ..CreateTask::default()
    };
    alice.create_task(&task, None).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_on_postgres_works_and_answers_once_across_a_restart() {
    with_schema(|schema| async move {
        let dir = tempfile::tempdir().unwrap();
        let board = start_board(dir.path()).await;
        let model = start_model(0).await;
        let config = config_on(&schema, dir.path(), &board.url(), &model.url(), "picogent");
        let agent = start_agent(config.clone()).await;
        wait_ready(&agent).await;
        let alice = client(&board, "tok-alice");
        let chat = chat_id(&alice).await;

        let task = create_assigned(&alice, "Ship the docs", "- write the guide\n- proofread it").await;
        let question = say(&alice, &chat, "@picogent where is the guide?").await;
        wait_status(&alice, &task.id, TaskStatus::InReview).await;
        eventually(Duration::from_secs(20), "the reply", || async {
            (mine(&thread(&alice, &question.id).await, "picogent") == 1).then_some(())
        })
        .await;
        wait_idle(&agent).await;
        agent.shutdown().await.unwrap();
        assert!(!dir.path().join("picogent.db").exists(), "no SQLite file: the state is in PostgreSQL");
        assert!(!dir.path().join("picogent.db.lock").exists());

        // Restarted on the same database: it resumes where it was and reconciles through REST,
        // finds the task and the mention handled, and does neither again.
        let agent = start_agent(config.clone()).await;
        wait_ready(&agent).await;
        let later = say(&alice, &chat, "@picogent and the changelog?").await;
        eventually(Duration::from_secs(20), "the reply after the restart", || async {
            (mine(&thread(&alice, &later.id).await, "picogent") == 1).then_some(())
        })
        .await;
        wait_idle(&agent).await;
        assert_eq!(mine(&comments(&alice, &task.id).await, "picogent"), 1, "one summary on the task");
        let steps = alice.list_steps(&task.id).await.unwrap();
        assert_eq!(steps.len(), 2, "each step once: {steps:#?}");
        assert!(steps.iter().all(|s| s.done));
        assert_eq!(mine(&thread(&alice, &question.id).await, "picogent"), 1, "the first question answered once");
        let runs = agent.state.list_runs(50).await.unwrap();
        assert_eq!(runs.len(), 3, "{runs:#?}");
        assert!(runs.iter().all(|run| run.status == RunStatus::Completed), "{runs:#?}");
        agent.shutdown().await.unwrap();
        model.shutdown().await;
        board.shutdown().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_agent_on_postgres_resumes_its_run_without_repeating_comments() {
    with_schema(|schema| async move {
        let dir = tempfile::tempdir().unwrap();
        let board = start_board(dir.path()).await;
        let model = start_model(250).await;
        let config = config_on(&schema, dir.path(), &board.url(), &model.url(), "picogent");
        let config_path = write_config(dir.path(), &config);
        let written = std::fs::read_to_string(&config_path).unwrap();
        assert!(written.contains("\"url\": \"postgres://"), "agent.json names the database: {written}");
        let mut process = spawn_agent_process(&config_path);
        let alice = client(&board, "tok-alice");
        let task = create_assigned(&alice, "Survive a crash", "- one\n- two\n- three").await;
        // Killed in the middle of the run: after a step is ticked, before the summary.
        eventually(Duration::from_secs(20), "a step ticked", || async {
            alice.list_steps(&task.id).await.ok()?.iter().any(|s| s.done).then_some(())
        })
        .await;
        process.kill().unwrap();
        process.wait().unwrap();
        let before = model.request_count();

        let mut process = spawn_agent_process(&config_path);
        wait_status(&alice, &task.id, TaskStatus::InReview).await;
        assert!(model.request_count() > before, "the restarted agent went on");
        let state = State::open_postgres(&schema.url(), "picogent").await.unwrap();
        let runs = eventually(Duration::from_secs(10), "the run recorded as finished", || async {
            let runs = state.list_runs(10).await.ok()?;
            runs.iter().all(|r| r.finished_at.is_some()).then_some(runs)
        })
        .await;
        process.kill().unwrap();
        process.wait().unwrap();
        let steps = alice.list_steps(&task.id).await.unwrap();
        assert_eq!(steps.len(), 3, "{steps:#?}");
        assert!(steps.iter().all(|s| s.done));
        assert_eq!(mine(&comments(&alice, &task.id).await, "picogent"), 1);
        assert_eq!(runs.len(), 1, "the interrupted run was resumed, not duplicated: {runs:#?}");
        assert_eq!(runs[0].status, RunStatus::Completed);
        state.close().await;
        model.shutdown().await;
        board.shutdown().await.unwrap();
    })
    .await;
}

/// Two agents keep their state in one database. The board tells both of the same message, with
/// the same id; each claims it under its own identity, so each answers it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_agents_in_one_postgres_database_each_do_their_own_work_once() {
    with_schema(|schema| async move {
        let dir = tempfile::tempdir().unwrap();
        let board = start_board(dir.path()).await;
        let model = start_model(0).await;
        let picogent = start_agent(config_on(&schema, dir.path(), &board.url(), &model.url(), "picogent")).await;
        let otherbot = start_agent(config_on(&schema, dir.path(), &board.url(), &model.url(), "otherbot")).await;
        wait_ready(&picogent).await;
        wait_ready(&otherbot).await;
        let alice = client(&board, "tok-alice");
        let chat = chat_id(&alice).await;

        let first = assign(&alice, "Label the issues", "- label them", "picogent").await;
        let second = assign(&alice, "Close stale branches", "- close them", "otherbot").await;
        let both = say(&alice, &chat, "@picogent @otherbot status, please").await;
        for task in [&first, &second] {
            wait_status(&alice, &task.id, TaskStatus::InReview).await;
        }
        eventually(Duration::from_secs(20), "a reply from each", || async {
            let replies = thread(&alice, &both.id).await;
            (mine(&replies, "picogent") == 1 && mine(&replies, "otherbot") == 1).then_some(())
        })
        .await;
        wait_idle(&picogent).await;
        wait_idle(&otherbot).await;

        let replies = thread(&alice, &both.id).await;
        assert_eq!((mine(&replies, "picogent"), mine(&replies, "otherbot")), (1, 1), "{replies:#?}");
        for (task, worker, other) in [(&first, "picogent", "otherbot"), (&second, "otherbot", "picogent")] {
            let notes = comments(&alice, &task.id).await;
            assert_eq!((mine(&notes, worker), mine(&notes, other)), (1, 0), "{}: {notes:#?}", task.key);
        }
        for (agent, task) in [(&picogent, &first), (&otherbot, &second)] {
            let runs = agent.state.list_runs(50).await.unwrap();
            let mut sessions: Vec<String> = runs.iter().map(|run| run.session_key.to_string()).collect();
            sessions.sort();
            let mut expected = vec![format!("task:{}", task.id), format!("thread:{}", both.id)];
            expected.sort();
            assert_eq!(sessions, expected, "each agent's state holds its own runs only");
        }
        picogent.shutdown().await.unwrap();
        otherbot.shutdown().await.unwrap();
        model.shutdown().await;
        board.shutdown().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_copy_on_the_same_postgres_state_refuses_to_start() {
    with_schema(|schema| async move {
        let dir = tempfile::tempdir().unwrap();
        let board = start_board(dir.path()).await;
        let model = start_model(0).await;
        let config = config_on(&schema, dir.path(), &board.url(), &model.url(), "picogent");
        let first = start_agent(config.clone()).await;
        wait_ready(&first).await;
        let config_path = write_config(dir.path(), &config);
        let second = picogent_output(&["run"], &config_path);
        let second = tokio::time::timeout(Duration::from_secs(20), second).await.expect("the second exits");
        let stderr = String::from_utf8_lossy(&second.stderr);
        assert!(!second.status.success(), "{stderr}");
        assert!(stderr.contains("another picogent run is using the state of agent `picogent`"), "{stderr}");
        // The first goes on, and answers alone.
        let alice = client(&board, "tok-alice");
        let question = say(&alice, &chat_id(&alice).await, "@picogent still there?").await;
        eventually(Duration::from_secs(20), "the reply", || async {
            (mine(&thread(&alice, &question.id).await, "picogent") == 1).then_some(())
        })
        .await;
        wait_idle(&first).await;
        assert_eq!(mine(&thread(&alice, &question.id).await, "picogent"), 1);
        first.shutdown().await.unwrap();
        model.shutdown().await;
        board.shutdown().await.unwrap();
    })
    .await;
}

/// The backends that hold the agent `agent`'s advisory lock in `schema` (`PostgresLock::take`).
async fn lock_backends(schema: &TestSchema, agent: &str) -> Vec<i32> {
    let mut connection = schema.connection().await;
    let pids = sqlx::query_scalar(
        "WITH k AS (SELECT hashtextextended('picogent agent ' || COALESCE(current_schema(), '') || '/' || $1, 0) AS key) \
         SELECT l.pid FROM pg_locks l, k WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted \
         AND l.classid = ((k.key >> 32) & 4294967295)::oid AND l.objid = (k.key & 4294967295)::oid",
    )
    .bind(agent)
    .fetch_all(&mut connection)
    .await
    .unwrap();
    let _ = connection.close().await;
    pids
}

/// Ends the connection that holds the agent's lock, as a restart of PostgreSQL or a cut would.
async fn end_lock_connection(schema: &TestSchema, agent: &str) {
    let pids = lock_backends(schema, agent).await;
    assert_eq!(pids.len(), 1, "one connection holds the lock: {pids:?}");
    let mut connection = schema.connection().await;
    // With a timeout the server waits until the backend is gone, and its lock with it.
    let ended: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1, 5000)")
        .bind(pids[0])
        .fetch_one(&mut connection)
        .await
        .unwrap();
    assert!(ended);
    let _ = connection.close().await;
}

/// Ends the lock's connection and takes the lock as another copy would, before the agent takes
/// it again. The agent asks its connection every heartbeat, so it may win the race now and then:
/// then its new connection is ended too, until the other copy has the lock.
async fn take_over_lock(schema: &TestSchema, agent: &str) -> picogent::state::PostgresLock {
    for _ in 0..20 {
        if lock_backends(schema, agent).await.len() == 1 {
            end_lock_connection(schema, agent).await;
        }
        if let Ok(lock) = picogent::state::PostgresLock::take(&schema.url(), agent, false).await {
            return lock;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("another copy could not take the lock of {agent} in 20 tries");
}

/// The agent's lock in PostgreSQL lasts as long as its connection. When the connection ends the
/// agent takes the lock again and goes on (a second copy is still refused); when another copy
/// took it first, this copy stops acting, says why, and answers nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_lost_with_its_connection_is_taken_again_or_this_copy_stands_down() {
    use picogent::state::{PostgresLock, StateError};
    with_schema(|schema| async move {
        let dir = tempfile::tempdir().unwrap();
        let board = start_board(dir.path()).await;
        let model = start_model(0).await;
        let config = config_on(&schema, dir.path(), &board.url(), &model.url(), "picogent");
        let agent = start_agent(config.clone()).await;
        wait_ready(&agent).await;
        let alice = client(&board, "tok-alice");
        let chat = chat_id(&alice).await;
        let first_pid = lock_backends(&schema, "picogent").await;

        end_lock_connection(&schema, "picogent").await;
        eventually(Duration::from_secs(10), "the lock taken again", || async {
            let now = lock_backends(&schema, "picogent").await;
            (now.len() == 1 && now != first_pid).then_some(())
        })
        .await;
        let refused = PostgresLock::take(&schema.url(), "picogent", false).await;
        assert!(
            matches!(refused, Err(StateError::PostgresLocked { .. })),
            "a second copy is still refused: {refused:?}"
        );
        let question = say(&alice, &chat, "@picogent still there?").await;
        eventually(Duration::from_secs(20), "the reply", || async {
            (mine(&thread(&alice, &question.id).await, "picogent") == 1).then_some(())
        })
        .await;
        assert!(!agent.is_superseded());

        // Another copy takes the lock the moment the connection ends: this copy stands down.
        let other = take_over_lock(&schema, "picogent").await;
        tokio::time::timeout(Duration::from_secs(10), agent.superseded()).await.expect("this copy stands down");
        let reason = agent.status.superseded().unwrap_or_default().to_string();
        assert!(reason.contains("took its lock in the PostgreSQL database"), "{reason}");
        assert!(!reason.contains("password"), "{reason}");
        let unanswered = say(&alice, &chat, "@picogent are you the one answering?").await;
        // Past the point where it would answer: its event stream has ended, and the router
        // handled all it had heard, and the ends of the runs that started.
        eventually(Duration::from_secs(10), "the event stream stopped", || async { agent.is_finished().then_some(()) })
            .await;
        wait_settled(&agent).await;
        assert_eq!(
            mine(&thread(&alice, &unanswered.id).await, "picogent"),
            0,
            "a copy that stood down answers nothing"
        );
        other.release().await;
        let _ = tokio::time::timeout(Duration::from_secs(10), agent.shutdown()).await;
        model.shutdown().await;
        board.shutdown().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn picogent_run_says_what_to_do_when_postgres_does_not_answer() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let unused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = unused.local_addr().unwrap().port();
    drop(unused);
    let mut config = agent_config(dir.path(), &board.url(), "http://127.0.0.1:9/v1", "picogent", json!({}));
    config.state.postgres_url = Some(format!("postgres://picogent@127.0.0.1:{port}/agents"));
    let config_path = write_config(dir.path(), &config);
    let run = tokio::time::timeout(Duration::from_secs(20), picogent_output(&["run"], &config_path))
        .await
        .expect("picogent run gives up at once");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "cannot connect to the PostgreSQL state database postgres://picogent@127.0.0.1:{port}/agents"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("check that PostgreSQL is running") && stderr.contains("state.url"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    board.shutdown().await.unwrap();
}
