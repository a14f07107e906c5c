//! docs/running.md's backup and restore, run as written, on both stores: the agent works a task,
//! its state is backed up, it works another, the backup is restored, and the agent knows only the
//! first task's run. SQLite: the file copied while the agent is stopped. PostgreSQL: `pg_dump` of
//! the agent's schema while it runs, `pg_restore --clean --if-exists` while it is stopped.

#[path = "support/agent.rs"]
mod agent_support;
#[path = "support/postgres.rs"]
mod test_postgres;

use std::process::Command;

use agent_support::*;
use picogent::config::Config;
use picogent::tracker::TrackerClient;
use picogent::tracker::model::*;
use serde_json::json;
use test_postgres::with_schema;

/// Assigns a task, waits until it is worked, and gives back the run's id.
async fn work_one(agent: &picogent::runtime::AgentHandle, alice: &TrackerClient, title: &str) -> String {
    let task = create_assigned(alice, title, "- write\n- check").await;
    wait_status(alice, &task.id, TaskStatus::InReview).await;
    wait_idle(agent).await;
    runs_for(agent, &format!("task:{}", task.id)).await.remove(0).id
}

/// The runs the agent started on `config` remembers.
async fn runs_known(config: &Config) -> Vec<String> {
    let agent = start_agent(config.clone()).await;
    let runs = agent.state.list_runs(100).await.unwrap().into_iter().map(|run| run.id).collect();
    agent.shutdown().await.unwrap();
    runs
}

fn run(command: &mut Command) {
    let out = command.output().unwrap_or_else(|error| panic!("{command:?}: {error}"));
    assert!(out.status.success(), "{command:?}: {}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_state_copied_while_stopped_is_restored() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let config = agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}));
    let alice = client(&board, "tok-alice");
    let db = config.state.path.clone();

    let agent = start_agent(config.clone()).await;
    wait_ready(&agent).await;
    let first = work_one(&agent, &alice, "First task").await;
    agent.shutdown().await.unwrap();
    let wal = db.with_extension("db-wal");
    assert!(std::fs::metadata(&wal).map_or(true, |meta| meta.len() == 0), "a clean stop leaves no log to copy");
    let backup = dir.path().join("backup.db");
    std::fs::copy(&db, &backup).unwrap();

    let agent = start_agent(config.clone()).await;
    wait_ready(&agent).await;
    let second = work_one(&agent, &alice, "Second task").await;
    agent.shutdown().await.unwrap();

    // Restored as the docs say: the copy in place, the log beside it removed.
    std::fs::copy(&backup, &db).unwrap();
    for beside in ["db-wal", "db-shm"] {
        let _ = std::fs::remove_file(db.with_extension(beside));
    }
    let known = runs_known(&config).await;
    assert!(known.contains(&first) && !known.contains(&second), "{known:?}");
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_state_dumped_while_running_is_restored() {
    with_schema(|schema| async move {
        let dir = tempfile::tempdir().unwrap();
        let board = start_board(dir.path()).await;
        let model = start_model(0).await;
        let mut config = agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}));
        config.state.postgres_url = Some(schema.url());
        let alice = client(&board, "tok-alice");
        let server = test_postgres::server_url();
        let dump = dir.path().join("picogent.dump");

        let agent = start_agent(config.clone()).await;
        wait_ready(&agent).await;
        let first = work_one(&agent, &alice, "First task").await;
        // While it runs: one consistent snapshot of the agent's schema.
        run(Command::new("pg_dump")
            .args(["--format=custom", "--schema", &schema.name, "--file"])
            .arg(&dump)
            .arg(&server));
        let second = work_one(&agent, &alice, "Second task").await;
        agent.shutdown().await.unwrap();

        run(Command::new("pg_restore").args(["--clean", "--if-exists", "--dbname", &server]).arg(&dump));
        let known = runs_known(&config).await;
        assert!(known.contains(&first) && !known.contains(&second), "{known:?}");
        model.shutdown().await;
        board.shutdown().await.unwrap();
    })
    .await;
}
