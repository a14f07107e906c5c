//! `picogent state migrate`: an agent's state moved from its SQLite file into PostgreSQL, end to
//! end over real sockets. It uses the reference board, the offline model endpoint, the agent in
//! process and as a `picogent` child, and the machine's PostgreSQL (`tests/support/postgres.rs`:
//! each test in a schema of its own). What is checked is what a person on the board sees: after
//! the move the agent goes on where it stopped, and answers and works nothing a second time.
//! Also checked: what the command refuses, that a refusal changes nothing, and its exit codes.

#[path = "support/agent.rs"]
mod agent_support;
#[path = "support/postgres.rs"]
mod test_postgres;

use std::path::Path;
use std::time::Duration;

use agent_support::*;
use picogent::config::Config;
use picogent::state::migrate::{MigrateError, sqlite_to_postgres};
use picogent::state::{ClaimKind, FinishRun, FiringOutcome, InputKind, PostgresLock, RunStatus, State};
use picogent::tracker::model::*;
use serde_json::json;
use sqlx::AssertSqlSafe;
use test_postgres::{TestSchema, with_schema};

/// Every table the agent keeps, as the command prints them, in its order.
const TABLES: [&str; 10] = [
    "processed_events",
    "stream_position",
    "named_values",
    "claims",
    "sessions",
    "runs",
    "run_inputs",
    "daily_spend",
    "replies",
    "schedule_firings",
];

/// The session key written `text` (`task:t-1`, `thread:m-1`).
fn key(text: &str) -> picogent::session::SessionKey {
    picogent::session::SessionKey::parse(text).expect("a session key")
}

fn on_postgres(config: &Config, schema: &TestSchema) -> Config {
    let mut config = config.clone();
    config.state.postgres_url = Some(schema.url());
    config
}

fn mine(messages: &[MessageOut]) -> usize {
    messages.iter().filter(|m| m.author_slug == "picogent").count()
}

/// The agent's rows in each table of `schema`, and how many tables the schema holds at all.
async fn rows_in(schema: &TestSchema, agent: &str) -> (Vec<i64>, i64) {
    let mut connection = schema.connection().await;
    let tables: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = $1")
        .bind(&schema.name)
        .fetch_one(&mut connection)
        .await
        .unwrap();
    let mut counts = Vec::new();
    if tables > 0 {
        for table in TABLES {
            let count = format!("SELECT COUNT(*) FROM {table} WHERE agent = $1");
            counts.push(sqlx::query_scalar(AssertSqlSafe(count)).bind(agent).fetch_one(&mut connection).await.unwrap());
        }
    }
    (counts, tables)
}

/// `picogent state migrate <args>` as the agent member, to its end: (exit code, stdout, stderr).
async fn migrate_command(args: &[&str]) -> (i32, String, String) {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_picogent"));
    command.args(["state", "migrate"]).args(args).env("RUST_LOG", "warn");
    let output = tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap();
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (output.status.code().unwrap_or(-1), text(&output.stdout), text(&output.stderr))
}

/// An agent on SQLite answers a mention and works a task, and stops. While it is away a person
/// reopens the task (the board alone would now call it unsummarised) and mentions it again.
/// `picogent state migrate` (the binary) moves its state; the same identity started on PostgreSQL
/// resumes from the recorded position, not at the head. It answers the mention made while it was
/// away and a new one once each, and neither answers the old mention nor works the task again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_moved_to_postgres_goes_on_where_it_stopped_and_does_nothing_twice() {
    with_schema(|schema| async move {
        let dir = tempfile::tempdir().unwrap();
        let board = start_board(dir.path()).await;
        let model = start_model(0).await;
        let config = agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}));
        let config_path = write_config(dir.path(), &config);
        let alice = client(&board, "tok-alice");
        let chat = chat_id(&alice).await;

        let agent = start_agent(config.clone()).await;
        wait_ready(&agent).await;
        let task = create_assigned(&alice, "Ship the docs", "- write the guide\n- proofread it").await;
        let question = say(&alice, &chat, "@picogent where is the guide?").await;
        wait_status(&alice, &task.id, TaskStatus::InReview).await;
        eventually(Duration::from_secs(20), "the reply on SQLite", || async {
            (mine(&thread(&alice, &question.id).await) == 1).then_some(())
        })
        .await;
        wait_idle(&agent).await;
        let recorded = agent.state.last_seq().await.unwrap();
        let copy_id = agent.state.get_value("presence.copy_id").await.unwrap().expect("a copy id");
        let sqlite_runs = agent.state.list_runs(50).await.unwrap();
        assert_eq!(sqlite_runs.len(), 2, "{sqlite_runs:#?}");
        agent.shutdown().await.unwrap();

        // While the agent is away.
        let reopen = UpdateTask { status: Some(TaskStatus::InProgress), ..Default::default() };
        alice.update_task(&task.id, &reopen).await.unwrap();
        let while_away = say(&alice, &chat, "@picogent and the changelog?").await;

        let db = dir.path().join("picogent.db");
        let (code, stdout, stderr) = migrate_command(&[
            "--from",
            db.to_str().unwrap(),
            "--to",
            &schema.url(),
            "--config",
            config_path.to_str().unwrap(),
        ])
        .await;
        assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.len(), TABLES.len() + 1, "{stdout}");
        for (line, table) in lines.iter().zip(TABLES) {
            assert!(line.starts_with(&format!("{table}: ")) && line.ends_with(" copied"), "{stdout}");
        }
        assert!(lines.contains(&"runs: 2 rows copied"), "{stdout}");
        assert!(lines.contains(&"stream_position: 1 row copied"), "{stdout}");
        let last = lines.last().unwrap();
        assert!(last.starts_with("moved the state of agent `picogent` from "), "{stdout}");
        assert!(last.contains("in one transaction"), "{stdout}");
        // The old file says where its state went: `picogent run` on it refuses, as it would act a
        // second time beside the agent on PostgreSQL (with the same copy id).
        let old = picogent_output(&["run"], &config_path).await;
        let stderr = String::from_utf8_lossy(&old.stderr);
        assert!(!old.status.success(), "{stderr}");
        assert!(stderr.contains("was moved to postgres://") && stderr.contains("set state.url"), "{stderr}");

        let agent = start_agent(on_postgres(&config, &schema)).await;
        assert!(agent.state.path().is_none(), "the agent runs on PostgreSQL");
        let body = startup_report(agent.http_addr.unwrap()).await;
        let startup = &body["startup"];
        assert_eq!(startup["mode"], "resume", "the recorded position came across, not a first start: {body:#}");
        assert_eq!(startup["from_seq"], recorded, "{body:#}");
        assert_eq!(startup["skipped_events"], 0, "{body:#}");
        // Judged from the moved state, not from the board: the task by its finished run (the board
        // alone shows no summary after it was reopened), the old mention by its claim.
        let found = &startup["reconciliation"];
        assert_eq!(found["tasks"]["open"], 1, "{body:#}");
        assert_eq!(found["tasks"]["worked"], 0, "{body:#}");
        assert_eq!(found["tasks"]["skipped"], json!({"finished_run": 1}), "{body:#}");
        // Both mentions by their claims: the old one's came across, the one made while away was
        // claimed as the replay from the recorded position brought it, before reconciliation.
        let mentions = json!({"window": "15m", "answered": 0, "skipped": {"seen": 2}});
        assert_eq!(found["mentions"], mentions, "{body:#}");

        eventually(Duration::from_secs(20), "the reply to the mention made while away", || async {
            (mine(&thread(&alice, &while_away.id).await) == 1).then_some(())
        })
        .await;
        let live = say(&alice, &chat, "@picogent one more: the release date?").await;
        eventually(Duration::from_secs(20), "the reply to a new mention", || async {
            (mine(&thread(&alice, &live.id).await) == 1).then_some(())
        })
        .await;
        wait_idle(&agent).await;

        assert_eq!(mine(&thread(&alice, &question.id).await), 1, "the old mention answered once");
        assert_eq!(mine(&thread(&alice, &while_away.id).await), 1);
        assert_eq!(mine(&thread(&alice, &live.id).await), 1);
        assert_eq!(mine(&comments(&alice, &task.id).await), 1, "one summary: the task was not worked again");
        let steps = alice.list_steps(&task.id).await.unwrap();
        assert_eq!(steps.len(), 2, "each step once: {steps:#?}");
        assert_eq!(alice.get_task(&task.id).await.unwrap().status, TaskStatus::InProgress, "left as alice set it");
        assert_eq!(runs_for(&agent, &format!("task:{}", task.id)).await.len(), 1);
        let postgres_runs = agent.state.list_runs(50).await.unwrap();
        assert_eq!(postgres_runs.len(), 4, "the two moved runs and one per new mention: {postgres_runs:#?}");
        for run in &sqlite_runs {
            let moved = agent.state.get_run(&run.id).await.unwrap();
            assert_eq!(moved.as_ref(), Some(run), "moved as it was");
        }
        assert!(postgres_runs.iter().all(|run| run.status == RunStatus::Completed), "{postgres_runs:#?}");
        let moved_copy_id = agent.state.get_value("presence.copy_id").await.unwrap();
        assert_eq!(moved_copy_id.as_deref(), Some(copy_id.as_str()), "the same copy, to the tracker");
        agent.shutdown().await.unwrap();
        model.shutdown().await;
        board.shutdown().await.unwrap();
    })
    .await;
}

/// An agent killed in the middle of a run leaves it `running` in its SQLite file (and the last
/// commits in its write-ahead log). Moved to PostgreSQL, the run stays running, and the agent
/// there resumes it: each step once, one summary, one run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_cut_short_on_sqlite_is_resumed_on_postgres() {
    with_schema(|schema| async move {
        let dir = tempfile::tempdir().unwrap();
        let board = start_board(dir.path()).await;
        let model = start_model(250).await;
        let config = agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}));
        let config_path = write_config(dir.path(), &config);
        let mut process = spawn_agent_process(&config_path);
        let alice = client(&board, "tok-alice");
        let task = create_assigned(&alice, "Survive a move", "- one\n- two\n- three").await;
        eventually(Duration::from_secs(20), "a step ticked", || async {
            alice.list_steps(&task.id).await.ok()?.iter().any(|s| s.done).then_some(())
        })
        .await;
        process.kill().unwrap();
        process.wait().unwrap();

        let db = dir.path().join("picogent.db");
        let migrated = sqlite_to_postgres(&db, &schema.url(), "picogent").await.unwrap();
        assert_eq!(migrated.tables.iter().find(|(table, _)| *table == "runs"), Some(&("runs", 1)));
        let moved = State::open_postgres(&schema.url(), "picogent").await.unwrap();
        let unfinished = moved.unfinished_runs().await.unwrap();
        assert_eq!(unfinished.len(), 1, "still running, to be resumed: {unfinished:#?}");
        assert!(unfinished[0].record.is_some(), "with the record it resumes from");
        moved.close().await;

        let agent = start_agent(on_postgres(&config, &schema)).await;
        wait_status(&alice, &task.id, TaskStatus::InReview).await;
        wait_idle(&agent).await;
        let steps = alice.list_steps(&task.id).await.unwrap();
        assert_eq!(steps.len(), 3, "{steps:#?}");
        assert!(steps.iter().all(|s| s.done), "{steps:#?}");
        assert_eq!(mine(&comments(&alice, &task.id).await), 1, "one summary");
        let runs = agent.state.list_runs(10).await.unwrap();
        assert_eq!(runs.len(), 1, "resumed, not started again: {runs:#?}");
        assert_eq!((runs[0].id.as_str(), runs[0].status), (unfinished[0].id.as_str(), RunStatus::Completed));
        agent.shutdown().await.unwrap();
        model.shutdown().await;
        board.shutdown().await.unwrap();
    })
    .await;
}

/// A state file with a row in every table, written through the SQLite store as an agent would.
async fn a_state_file(path: &Path) -> (String, String) {
    let state = State::open(path).await.unwrap();
    assert!(state.record_event("ev-1", 7, "message.new").await.unwrap());
    assert!(state.record_event("ev-2", 9, "task.assigned").await.unwrap());
    state.set_value("presence.copy_id", "0123456789ab").await.unwrap();
    let answered =
        state.start_claimed_run(ClaimKind::Message, "m-1", &key("thread:m-1"), "message.new m-1").await.unwrap();
    let answered = answered.unwrap();
    let finish = FinishRun { turns: 2, outcome: Some("answered".into()), ..FinishRun::new(RunStatus::Completed) };
    assert!(state.finish_run(&answered, &finish).await.unwrap());
    let running = state.start_run(&key("task:t-1"), "task.assigned t-1").await.unwrap();
    state.save_run_record(&running, &json!({"request": "resume from here"})).await.unwrap();
    let (_, queue) = state.for_holder("picogent", false);
    let sent = queue.send_input(&running, InputKind::Steer, "also check the dates", Some("m-2")).await.unwrap();
    assert_eq!(sent, Some(1), "the running run takes the input");
    state.save_session(&key("thread:m-1"), &json!([{"role": "user", "content": "hi"}])).await.unwrap();
    state.add_tokens(time::OffsetDateTime::now_utc().date(), 1234).await.unwrap();
    state.record_reply(&key("thread:m-1"), time::OffsetDateTime::now_utc()).await.unwrap();
    state.record_firing("standup", 1_700_000_000_000, FiringOutcome::Posted, Some(&answered), "moved 1").await.unwrap();
    state.close().await;
    (answered, running)
}

/// Everything copied comes back through the PostgreSQL store as the agent reads it, and the file
/// is left as it was. A second migration into the same schema refuses, naming the tables, and
/// changes nothing; so does one while an agent of that identity runs there. Another identity may
/// still move its state into the same schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_migration_into_the_same_schema_refuses_and_changes_nothing() {
    with_schema(|schema| async move {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("picogent.db");
        let (answered, running) = a_state_file(&db).await;

        let migrated = sqlite_to_postgres(&db, &schema.url(), "picogent").await.unwrap();
        let file = State::open(&db).await.unwrap();
        let moved_to = file.get_value(picogent::state::migrate::MOVED_TO).await.unwrap().expect("the file is marked");
        assert!(moved_to.starts_with(&migrated.target), "{moved_to}");
        file.close().await;
        let expected: Vec<(&str, u64)> = TABLES.into_iter().zip([2, 1, 1, 2, 1, 2, 1, 1, 1, 1]).collect();
        assert_eq!(migrated.tables, expected, "stream_head is not set on a state that processed events");
        assert!(migrated.target.starts_with("postgres://postgres@127.0.0.1:5432/test"), "{}", migrated.target);

        let state = State::open_postgres(&schema.url(), "picogent").await.unwrap();
        assert_eq!(state.stream_position().await.unwrap(), Some(9));
        assert!(state.is_event_processed("ev-1").await.unwrap());
        assert!(state.is_claimed(ClaimKind::Message, "m-1").await.unwrap());
        assert!(state.is_claimed(ClaimKind::Message, "m-2").await.unwrap(), "claimed with the input it steered");
        assert_eq!(state.get_value("presence.copy_id").await.unwrap().as_deref(), Some("0123456789ab"));
        let completed = state.get_run(&answered).await.unwrap().unwrap();
        assert_eq!((completed.status, completed.turns), (RunStatus::Completed, 2));
        let unfinished = state.unfinished_runs().await.unwrap();
        assert_eq!(unfinished.len(), 1);
        assert_eq!((unfinished[0].id.as_str(), unfinished[0].status), (running.as_str(), RunStatus::Running));
        assert_eq!(unfinished[0].record, Some(json!({"request": "resume from here"})));
        let (_, queue) = state.for_holder("picogent", false);
        let inputs = queue.inputs(std::slice::from_ref(&running)).await.unwrap();
        let inputs: Vec<_> =
            inputs.iter().map(|input| (input.n, input.text.as_str(), input.message_id.as_deref())).collect();
        assert_eq!(inputs, [(1, "also check the dates", Some("m-2"))], "what was sent to the running run");
        assert_eq!(state.load_session(&key("thread:m-1")).await.unwrap().unwrap().messages[0]["content"], "hi");
        assert_eq!(state.tokens_today().await.unwrap(), 1234);
        assert_eq!(state.replies_in_last_hour(&key("thread:m-1")).await.unwrap(), 1);
        let firing = state.get_firing("standup", 1_700_000_000_000).await.unwrap().expect("the firing came along");
        assert_eq!((firing.outcome, firing.run_id.as_deref()), (FiringOutcome::Posted, Some(answered.as_str())));
        state.close().await;

        let before = rows_in(&schema, "picogent").await;
        // The same file again, anywhere: it was moved.
        let again = sqlite_to_postgres(&db, &schema.url(), "otherbot").await.unwrap_err();
        assert!(matches!(again, MigrateError::AlreadyMoved { .. }), "{again}");
        assert!(again.to_string().contains("was moved already, to postgres://"), "{again}");
        assert_eq!(rows_in(&schema, "otherbot").await.0, vec![0; TABLES.len()], "nothing copied");
        // Another file of the same agent into the same schema.
        let db = dir.path().join("another.db");
        a_state_file(&db).await;
        let again = sqlite_to_postgres(&db, &schema.url(), "picogent").await.unwrap_err();
        let message = again.to_string();
        assert!(matches!(again, MigrateError::TargetNotEmpty { .. }), "{message}");
        assert!(!again.is_usage());
        assert!(message.contains("already holds rows of agent `picogent`"), "{message}");
        assert!(message.contains(&format!("(in {})", TABLES.join(", "))), "which tables: {message}");
        assert!(message.contains("--agent") && message.contains("search_path"), "what to do: {message}");
        assert_eq!(rows_in(&schema, "picogent").await, before, "nothing changed");

        // An agent of that identity running on the target (it holds the agent's lock there).
        let running_there = PostgresLock::take(&schema.url(), "otherbot", false).await.unwrap();
        let in_use = sqlite_to_postgres(&db, &schema.url(), "otherbot").await.unwrap_err().to_string();
        assert!(in_use.contains("agent `otherbot` is running on the PostgreSQL state"), "{in_use}");
        assert_eq!(rows_in(&schema, "otherbot").await.0, vec![0; TABLES.len()], "nothing copied");
        running_there.release().await;
        let other = sqlite_to_postgres(&db, &schema.url(), "otherbot").await.unwrap();
        assert_eq!(other.total_rows(), migrated.total_rows());
        assert_eq!(rows_in(&schema, "picogent").await, before, "each identity's rows apart");
    })
    .await;
}

/// What is not picogent's state at this version is refused before PostgreSQL is touched, saying
/// what is wrong and what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_that_is_not_picogents_state_is_refused_with_what_to_do() {
    with_schema(|schema| async move {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nowhere.db");
        let text = dir.path().join("notes.txt");
        std::fs::write(&text, "not a database, and long enough to have a header's worth of bytes in it ......")
            .unwrap();
        let foreign = dir.path().join("foreign.db");
        let pool =
            sqlx::sqlite::SqlitePool::connect(&format!("sqlite://{}?mode=rwc", foreign.display())).await.unwrap();
        sqlx::query("CREATE TABLE things (id INTEGER)").execute(&pool).await.unwrap();
        pool.close().await;
        // The reference board's database: sqlx migrations too, but not the state's.
        let board = start_board(dir.path()).await;
        board.shutdown().await.unwrap();
        let older = dir.path().join("older.db");
        a_state_file(&older).await;
        let pool = sqlx::sqlite::SqlitePool::connect(&format!("sqlite://{}", older.display())).await.unwrap();
        sqlx::query("DELETE FROM _sqlx_migrations WHERE version = 4").execute(&pool).await.unwrap();
        pool.close().await;

        let cases: [(&Path, &str); 6] = [
            (&missing, "does not exist: give --from the agent's state.path"),
            (dir.path(), "is not picogent's state file: it is not a file"),
            (&text, "is not picogent's state file: it is not an SQLite database"),
            (&foreign, "it holds no picogent schema"),
            (&dir.path().join("board.db"), "its migration 1 is not picogent's"),
            (&older, "written by an older picogent (migration 4 is not applied): start this version's `picogent run`"),
        ];
        for (path, expected) in cases {
            let error = sqlite_to_postgres(path, &schema.url(), "picogent").await.unwrap_err();
            assert!(error.to_string().contains(expected), "{}: {error}", path.display());
            assert!(!error.is_usage(), "{error}");
        }
        assert!(!dir.path().join("nowhere.db.lock").exists(), "no lock file left for a file that is not there");
        assert_eq!(rows_in(&schema, "picogent").await, (vec![], 0), "PostgreSQL untouched: no table made");

        let not_postgres = sqlite_to_postgres(&older, "sqlite:other.db", "picogent").await.unwrap_err();
        assert!(not_postgres.is_usage() && not_postgres.to_string().contains("--to expects a PostgreSQL URL"));
        let with_password = "postgres://postgres:hunter2@127.0.0.1:5432/test";
        let refused = sqlite_to_postgres(&older, with_password, "picogent").await.unwrap_err().to_string();
        assert!(refused.contains("PGPASSWORD") && !refused.contains("hunter2"), "{refused}");
        let bad_slug = sqlite_to_postgres(&older, &schema.url(), "no spaces").await.unwrap_err();
        assert!(bad_slug.is_usage() && bad_slug.to_string().contains("--agent expects a member slug"));
    })
    .await;
}

/// The binary: a file an agent is running on is refused (exit 1) and PostgreSQL left untouched;
/// a target that is not PostgreSQL, a missing flag or no way to name the agent is bad usage
/// (exit 2); a file moved already is refused (exit 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_refuses_a_running_agents_file_and_bad_usage_with_its_exit_codes() {
    with_schema(|schema| async move {
        let dir = tempfile::tempdir().unwrap();
        let board = start_board(dir.path()).await;
        let model = start_model(0).await;
        let config = agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}));
        let config_path = write_config(dir.path(), &config);
        let db = dir.path().join("picogent.db");
        let from = db.to_str().unwrap();
        let url = schema.url();

        let agent = start_agent(config.clone()).await;
        wait_ready(&agent).await;
        let (code, stdout, stderr) = migrate_command(&["--from", from, "--to", &url, "--agent", "picogent"]).await;
        assert_eq!(code, 1, "{stderr}");
        assert_eq!(stdout, "");
        assert!(stderr.contains("is in use: a picogent run holds its lock"), "{stderr}");
        assert!(stderr.contains("stop that agent first, then migrate"), "{stderr}");
        assert_eq!(rows_in(&schema, "picogent").await, (vec![], 0), "PostgreSQL untouched");
        agent.shutdown().await.unwrap();

        let (code, _, stderr) =
            migrate_command(&["--from", from, "--to", "sqlite:elsewhere.db", "--agent", "picogent"]).await;
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains("--to expects a PostgreSQL URL"), "{stderr}");
        let (code, _, stderr) = migrate_command(&["--from", from, "--agent", "picogent"]).await;
        assert_eq!(code, 2, "no --to: {stderr}");
        let nowhere = dir.path().join("nowhere.json");
        let (code, _, stderr) =
            migrate_command(&["--from", from, "--to", &url, "--config", nowhere.to_str().unwrap()]).await;
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains("or name the agent with --agent"), "{stderr}");

        let (code, stdout, stderr) =
            migrate_command(&["--from", from, "--to", &url, "--config", config_path.to_str().unwrap()]).await;
        assert_eq!(code, 0, "{stderr}");
        assert!(stdout.contains("moved the state of agent `picogent`"), "{stdout}");
        let before = rows_in(&schema, "picogent").await;
        let (code, stdout, stderr) = migrate_command(&["--from", from, "--to", &url, "--agent", "picogent"]).await;
        assert_eq!(code, 1, "{stderr}");
        assert_eq!(stdout, "");
        assert!(stderr.starts_with("error: the state file ") && stderr.contains("was moved already"), "{stderr}");
        assert_eq!(rows_in(&schema, "picogent").await, before, "nothing changed");
        model.shutdown().await;
        board.shutdown().await.unwrap();
    })
    .await;
}
