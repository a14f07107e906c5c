//! The replicas' soak: three `picogent run` replicas of one agent identity on one PostgreSQL
//! state (`replicas.enabled`), against the reference board and the offline planner answering each
//! request after a second. Two humans give it 50 tasks and 100 mentions; meanwhile the replica
//! holding the event stream is killed with SIGKILL in the middle of its runs, and later the next
//! holder too (each comes back as a new replica), and then all three are restarted one at a time
//! (SIGTERM, wait, start again). Checked afterwards from the board's database and the state in
//! PostgreSQL: every task worked once, every mention answered once, no duplicate message, runs
//! executed on more than one replica, runs of the killed replicas resumed by others, and each
//! stream takeover within the bound.

mod support;
#[path = "support/postgres.rs"]
mod test_postgres;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use picogent::offline_model::Faults;
use picogent::state::RunQueue;
use serde_json::{Value, json};
use sqlx::Connection;
use sqlx::postgres::PgConnection;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};
use support::fault_harness::AgentProcess;
use support::work_check::{Progress, check_board, check_runs, human, human_traffic, outcome};

macro_rules! report_line {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

const TASKS: usize = 50;
const MENTIONS: usize = 100;
const REPLICAS: usize = 3;
/// How long the humans take to send everything.
const SENDING: Duration = Duration::from_secs(40);
/// A bound on each wait of the scenario besides the work (a replica ready, the stream held, all
/// caught up), each counted from its own start.
const DEADLINE: Duration = Duration::from_secs(300);
/// The work fails when the board shows no progress for this long (a stall, not a slow machine:
/// the longest pause the scenario makes on purpose is a few seconds).
const STALL: Duration = Duration::from_secs(120);
/// The stream's lease; a standby takes over within about this plus a poll.
const STREAM_LEASE_MS: u64 = 3_000;
/// The bound the issue sets on a takeover (the default lease, 6 s, keeps within it too).
const TAKEOVER_BOUND: Duration = Duration::from_secs(10);

struct Replica {
    process: AgentProcess,
    http: SocketAddr,
}

fn replica_config(dir: &Path, n: usize, board: &str, model: &str, state_url: &str) -> (PathBuf, SocketAddr) {
    let http = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let config = json!({
        "slug": "picogent",
        "name": "picogent",
        "tracker": {"url": board, "timeout_ms": 5000,
                    "retry": {"max_attempts": 8, "initial_delay_ms": 20, "max_delay_ms": 300, "max_elapsed_ms": 10000, "jitter": true}},
        "llm": {"base_url": model, "model": "offline-planner", "timeout_ms": 20000,
                "retry": {"max_attempts": 4, "initial_delay_ms": 20, "max_delay_ms": 200, "max_elapsed_ms": 5000, "jitter": true}},
        "limits": {"max_concurrent_runs": 4, "max_turns": 20, "max_tool_calls": 40,
                   "max_replies_per_thread_per_hour": 20, "shutdown_grace_ms": 3000},
        "state": {"url": state_url},
        "replicas": {"enabled": true, "stream_lease_ms": STREAM_LEASE_MS, "run_lease_ms": 4000, "poll_ms": 200},
        "http": {"listen": http.to_string()},
        "prompts_dir": Path::new(env!("CARGO_MANIFEST_DIR")).join("prompts"),
        "presence": {"heartbeat_ms": 500},
    });
    let path = dir.join(format!("replica-{n}.json"));
    std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
    (path, http)
}

async fn readyz(http: SocketAddr) -> Option<(bool, Value)> {
    let response = reqwest::get(format!("http://{http}/readyz")).await.ok()?;
    let ok = response.status().is_success();
    Some((ok, response.json().await.ok()?))
}

/// Waits until the replica answers `/readyz` with 200; its replica id.
async fn ready_id(replica: &Replica) -> String {
    let started = Instant::now();
    loop {
        if let Some((true, body)) = readyz(replica.http).await
            && let Some(id) = body["replica"]["id"].as_str()
        {
            return id.to_string();
        }
        assert!(started.elapsed() < DEADLINE, "a replica never became ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The replica whose stream lease has not run out, by the database's clock, as the agent's own
/// lease code reads it (through a handle that never takes a lease).
async fn stream_holder(observer: &RunQueue) -> Option<String> {
    observer.stream_holder().await.unwrap().map(|(holder, _)| holder)
}

async fn observer(schema: &test_postgres::TestSchema) -> RunQueue {
    let state = picogent::state::State::open_postgres(&schema.url(), "picogent").await.unwrap();
    state.for_holder("observer", true).1
}

/// SIGKILLs the replica holding the stream; returns how long until another held it, and how many
/// runs the killed one held.
async fn kill_the_holder(replicas: &mut [Replica], pg: &mut PgConnection, observer: &RunQueue) -> (Duration, i64) {
    let started = Instant::now();
    let holder = loop {
        if let Some(holder) = stream_holder(observer).await {
            break holder;
        }
        assert!(started.elapsed() < DEADLINE, "no replica holds the stream");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut index = None;
    for (i, replica) in replicas.iter().enumerate() {
        if let Some((_, body)) = readyz(replica.http).await
            && body["replica"]["id"] == holder.as_str()
        {
            index = Some(i);
        }
    }
    let index = index.expect("the holder is one of the replicas");
    let runs: i64 = sqlx::query_scalar("SELECT count(*) FROM runs WHERE holder = $1 AND status = 'running'")
        .bind(&holder)
        .fetch_one(&mut *pg)
        .await
        .unwrap();
    let killed = Instant::now();
    replicas[index].process.kill();
    let took = loop {
        if stream_holder(observer).await.is_some_and(|now| now != holder) {
            break killed.elapsed();
        }
        assert!(killed.elapsed() < Duration::from_secs(60), "nobody took the stream over");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // It comes back as a new replica (a new process has a new id).
    replicas[index].process.restart();
    (took, runs)
}

async fn open_read_only(path: &Path) -> SqlitePool {
    let options = SqliteConnectOptions::new().filename(path).read_only(true);
    SqlitePoolOptions::new().max_connections(1).connect_with(options).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_lose_nothing_and_repeat_nothing_through_kills_and_a_rolling_restart() {
    let _one_at_a_time = ONE_SOAK_AT_A_TIME.lock().await;
    test_postgres::with_schema(|schema| async move { soak(schema, Faults::default()).await }).await;
}

/// The same soak with a model that answers mentions in plain text, as many real models do: every
/// reply is then the answer picogent posts for the run (once, under the run's key), also for runs
/// a killed replica left and another resumed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_with_plain_text_answers_lose_nothing_and_repeat_nothing() {
    let _one_at_a_time = ONE_SOAK_AT_A_TIME.lock().await;
    let faults = Faults { plain_text_replies: true, ..Faults::default() };
    test_postgres::with_schema(|schema| async move { soak(schema, faults).await }).await;
}

/// One soak at a time: two at once would run six replicas on two cores.
static ONE_SOAK_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn soak(schema: test_postgres::TestSchema, faults: Faults) {
    let started = Instant::now();
    let board = support::TestBoard::start().await;
    let dir = tempfile::tempdir().unwrap();
    let model = picogent::offline_model::start(picogent::offline_model::OfflineModelOptions {
        delay: Duration::from_secs(1),
        faults,
        ..picogent::offline_model::OfflineModelOptions::planner()
    })
    .await
    .unwrap();
    let mut replicas: Vec<Replica> = (0..REPLICAS)
        .map(|n| {
            let (config, http) = replica_config(dir.path(), n, &board.url(), &model.url(), &schema.url());
            let log = dir.path().join(format!("replica-{n}.log"));
            Replica { process: AgentProcess::start(&config, "tok-picogent", &log), http }
        })
        .collect();
    for replica in &replicas {
        ready_id(replica).await;
    }
    let mut pg = schema.connection().await;
    let observer = observer(&schema).await;

    let alice = human(&board.url(), "tok-alice");
    let bob = human(&board.url(), "tok-bob");
    let chat_id = alice.get_project("team").await.unwrap().chat_id;
    let senders = [
        tokio::spawn(human_traffic(alice, "alice", chat_id.clone(), TASKS / 2, MENTIONS / 2, SENDING)),
        tokio::spawn(human_traffic(bob, "bob", chat_id, TASKS - TASKS / 2, MENTIONS - MENTIONS / 2, SENDING)),
    ];
    let sending = Instant::now();
    // The stream's holder dies twice while the work comes in, each time with runs in hand.
    let mut takeovers = Vec::new();
    let mut killed_with_runs = Vec::new();
    for at in [10, 22] {
        tokio::time::sleep_until((sending + Duration::from_secs(at)).into()).await;
        let (took, runs) = kill_the_holder(&mut replicas, &mut pg, &observer).await;
        takeovers.push(took);
        killed_with_runs.push(runs);
    }
    // Then a rolling restart: one replica at a time, each ready again before the next goes.
    tokio::time::sleep_until((sending + Duration::from_secs(32)).into()).await;
    let mut graceful_exits = 0;
    for replica in &mut replicas {
        let exit = replica.process.relaunch();
        if exit.is_some_and(|status| status.success()) {
            graceful_exits += 1;
        }
        ready_id(replica).await;
    }
    for sender in senders {
        sender.await.unwrap();
    }

    let board_pool = open_read_only(&board.db).await;
    let mut progress = Progress::new();
    loop {
        let now = outcome(&board_pool).await;
        if now.finished(TASKS, MENTIONS) {
            break;
        }
        for replica in &mut replicas {
            assert!(replica.process.is_running(), "a replica exited");
        }
        if progress.still_for(&now) > STALL {
            let _ = dir.keep();
            panic!("the work stopped moving for {STALL:?}: {now:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // What follows the work has a deadline of its own, counted from here.
    let settling = Instant::now();
    // Caught up: every event the board logged for the agent was handled, and nothing is left
    // queued or running (what a repeat would need).
    loop {
        let board_last: i64 =
            sqlx::query_scalar("SELECT coalesce(max(seq), 0) FROM events WHERE member_slug = 'picogent'")
                .fetch_one(&board_pool)
                .await
                .unwrap();
        let agent_last: i64 =
            sqlx::query_scalar("SELECT coalesce(max(last_seq), 0) FROM stream_position WHERE agent = 'picogent'")
                .fetch_one(&mut pg)
                .await
                .unwrap();
        let open: i64 = sqlx::query_scalar("SELECT count(*) FROM runs WHERE status IN ('queued', 'running')")
            .fetch_one(&mut pg)
            .await
            .unwrap();
        if agent_last >= board_last && open == 0 {
            break;
        }
        assert!(
            settling.elapsed() < DEADLINE,
            "not caught up: board seq {board_last}, agent {agent_last}, {open} runs still open"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for replica in &mut replicas {
        let exit = replica.process.terminate();
        assert!(exit.is_some_and(|status| status.success()), "a replica did not stop gracefully: {exit:?}");
    }
    let elapsed = started.elapsed();

    let mut check = check_board(&board_pool, TASKS, MENTIONS).await;
    // Runs: one per task and one per mention, each completed once, wherever it ran.
    let runs: Vec<(String, String, Option<String>, i64)> =
        sqlx::query_as("SELECT session_key, status, holder, attempts FROM runs").fetch_all(&mut pg).await.unwrap();
    check_runs(
        &mut check,
        runs.iter().map(|(session, status, _, _)| (session.as_str(), status.as_str())),
        TASKS + MENTIONS,
    );
    let holders: std::collections::BTreeSet<&str> =
        runs.iter().filter_map(|(_, _, holder, _)| holder.as_deref()).collect();
    let resumed = runs.iter().filter(|(_, _, _, attempts)| *attempts > 1).count();
    let mut sorted = takeovers.clone();
    sorted.sort();
    let median = sorted[sorted.len() / 2];
    let max = *sorted.last().unwrap();

    report_line!(
        "replicas soak: {TASKS} tasks, {MENTIONS} mentions, {REPLICAS} replicas in {:.1} s",
        elapsed.as_secs_f64()
    );
    report_line!(
        "replicas soak: {} runs on {} replicas (processes), {} resumed on another replica after a SIGKILL",
        runs.len(),
        holders.len(),
        resumed
    );
    report_line!(
        "replicas soak: stream holder SIGKILLed twice, holding {killed_with_runs:?} runs; takeovers {:?} (median {:.1} s, max {:.1} s, bound {} s)",
        takeovers.iter().map(|t| format!("{:.1} s", t.as_secs_f64())).collect::<Vec<_>>(),
        median.as_secs_f64(),
        max.as_secs_f64(),
        TAKEOVER_BOUND.as_secs()
    );
    report_line!("replicas soak: rolling restart of {REPLICAS} replicas, {graceful_exits} graceful exits");
    report_line!(
        "replicas soak: tasks worked {}, mentions answered {}; duplicates = {}, losses = {}",
        check.tasks_worked,
        check.mentions_answered,
        check.duplicates.len(),
        check.losses.len()
    );
    assert!(check.duplicates.is_empty(), "duplicates: {:#?}", check.duplicates);
    assert!(check.losses.is_empty(), "losses: {:#?}", check.losses);
    assert_eq!(check.tasks_worked, TASKS as i64);
    assert_eq!(check.mentions_answered, MENTIONS as i64);
    assert!(holders.len() > 1, "runs ran on one replica only: {holders:?}");
    assert!(killed_with_runs.iter().any(|runs| *runs > 0), "no kill happened mid-run: {killed_with_runs:?}");
    assert!(resumed > 0, "no run of a killed replica was resumed elsewhere");
    assert!(max <= TAKEOVER_BOUND, "a stream takeover took {max:?}");
    assert_eq!(graceful_exits, REPLICAS, "every replica stopped gracefully in the rolling restart");
    let _ = pg.close().await;
    model.shutdown().await;
}
