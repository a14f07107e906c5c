//! Retention over real sockets: the reference board prunes its event log and its expired
//! idempotency keys on a schedule, the agent prunes its state database on a schedule, and what a
//! person on the board sees does not change — each mention answered once, nothing lost — however
//! short the retention.

#[path = "support/agent.rs"]
mod agent_support;
#[path = "support/interop.rs"]
mod interop;
mod support;

use std::path::Path;
use std::time::Duration;

use agent_support::{chat_id, eventually, say, start_agent, start_model, thread, wait_idle, wait_ready};
use picogent::board::{self, BoardHandle, BoardOptions, Retention};
use picogent::runtime::AgentHandle;
use picogent::state::ClaimKind;
use picogent::tracker::model::*;
use serde_json::json;
use sqlx::sqlite::SqlitePool;
use support::{EventStream, TestBoard};

/// Retention short enough that every pass finds something old.
fn seconds_retention() -> Retention {
    Retention { events: Duration::from_millis(300), interval: Duration::from_millis(100) }
}

async fn open_pool(db: &Path) -> SqlitePool {
    SqlitePool::connect(&format!("sqlite://{}", db.display())).await.unwrap()
}

async fn agent_events_logged(pool: &SqlitePool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM events WHERE member_slug = 'picogent'").fetch_one(pool).await.unwrap()
}

/// A counter of the agent's `/metrics`, by its full name with labels.
fn metric(agent: &AgentHandle, name: &str) -> u64 {
    let text = agent.metrics.render(0, false, false);
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no metric {name} in:\n{text}"))
}

fn pruned(agent: &AgentHandle, table: &str) -> u64 {
    metric(agent, &format!("picogent_pruned_rows_total{{table=\"{table}\"}}"))
}

async fn replies_of(alice: &picogent::tracker::TrackerClient, message: &MessageOut) -> usize {
    thread(alice, &message.id).await.iter().filter(|m| m.author_slug == "picogent").count()
}

#[tokio::test]
async fn the_board_prunes_old_events_but_each_members_newest_and_numbers_on() {
    let board = TestBoard::start_with_retention(seconds_retention()).await;
    let alice = board.client("alice");
    let chat = alice.get_project("team").await.unwrap().chat_id;
    for n in 0..3 {
        let body = SendMessage { content: format!("standup {n}"), chat_id: Some(chat.clone()), ..Default::default() };
        alice.send_message(&body, None).await.unwrap();
    }
    let pool = open_pool(&board.db).await;
    assert_eq!(agent_events_logged(&pool).await, 3, "a chat message is an event for every member");
    eventually(Duration::from_secs(10), "old events pruned", || async {
        (agent_events_logged(&pool).await == 1).then_some(())
    })
    .await;

    // A client resuming from the start gets what is kept: a gap, then the newest event.
    let mut stream = EventStream::connect(&board, "picogent").await;
    let (replayed, last_seq) = stream.resume(0).await;
    assert_eq!(replayed.iter().map(|e| e.seq).collect::<Vec<_>>(), [3]);
    assert_eq!(last_seq, 3);
    // The next event is numbered after the pruned ones: no seq is ever used twice.
    let body = SendMessage { content: "after pruning".into(), chat_id: Some(chat), ..Default::default() };
    alice.send_message(&body, None).await.unwrap();
    let live = stream.next_event().await;
    assert_eq!((live.event.as_str(), live.seq), (EVENT_MESSAGE_NEW, 4));
    stream.close().await;
    pool.close().await;
}

#[tokio::test]
async fn idempotency_keys_are_kept_a_day_then_forgotten_on_schedule() {
    let board = TestBoard::start_with_retention(seconds_retention()).await;
    let alice = board.client("alice");
    let chat = alice.get_project("team").await.unwrap().chat_id;
    let message = |text: &str| SendMessage { content: text.into(), chat_id: Some(chat.clone()), ..Default::default() };
    let old = alice.send_message(&message("old"), Some("key-old")).await.unwrap();
    let fresh = alice.send_message(&message("fresh"), Some("key-fresh")).await.unwrap();
    let pool = open_pool(&board.db).await;
    // The first answer to `key-old` was stored a day and a second ago.
    sqlx::query("UPDATE idempotency SET created_at = created_at - 86401 WHERE key = 'key-old'")
        .execute(&pool)
        .await
        .unwrap();
    let keys = |key: &'static str| {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM idempotency WHERE key = ?")
                .bind(key)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    eventually(Duration::from_secs(10), "the expired key pruned", || async {
        (keys("key-old").await == 0).then_some(())
    })
    .await;
    assert_eq!(keys("key-fresh").await, 1, "a key younger than 24 hours stays");
    assert_eq!(alice.send_message(&message("fresh"), Some("key-fresh")).await.unwrap().id, fresh.id, "still replayed");
    assert_ne!(alice.send_message(&message("old"), Some("key-old")).await.unwrap().id, old.id, "acts anew");
    pool.close().await;
}

/// The agent with a heartbeat slow enough that a busy test machine never makes it reconnect on
/// its own: here every reconciliation is one the test caused (a board restart closes the link at
/// once).
async fn start_agent_steady(config: picogent::config::Config) -> AgentHandle {
    picogent::runtime::start(picogent::runtime::AgentOptions {
        config,
        tracker_token: picogent::secret::Secret::new("tok-picogent"),
        llm_api_key: None,
        mcp_token: None,
        ui_token: None,
        stream: Some(picogent::transport::StreamOptions {
            heartbeat_interval: Duration::from_secs(10),
            ..agent_support::fast_stream()
        }),
        serve_http: false,
        clock: None,
    })
    .await
    .unwrap()
}

fn agent_config_with_retention(dir: &Path, board: &BoardHandle, model_url: &str) -> picogent::config::Config {
    agent_support::agent_config(
        dir,
        &board.url(),
        model_url,
        "picogent",
        json!({"retention": {"events_ms": 200, "claims_ms": 200, "runs_ms": 200, "sessions_ms": 200, "interval_ms": 100}}),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mention_whose_claim_is_past_retention_is_not_answered_again_by_reconciliation() {
    let dir = tempfile::tempdir().unwrap();
    let board = agent_support::start_board(dir.path()).await;
    let addr = board.addr();
    let model = start_model(0).await;
    let alice = agent_support::client(&board, "tok-alice");
    let chat = chat_id(&alice).await;
    // Before the first start: a recent mention, which the first start's reconciliation takes up.
    let history = say(&alice, &chat, "@picogent this was before your time").await;
    // Reconciliation lists mentions of the last 10 s; claims may otherwise go after 200 ms.
    let mut config = agent_config_with_retention(dir.path(), &board, &model.url());
    config.startup.answer_mentions_since = picogent::config::TextDuration(Duration::from_secs(10));
    let agent = start_agent_steady(config).await;
    wait_ready(&agent).await;

    let question = say(&alice, &chat, "@picogent how many tasks are open?").await;
    eventually(Duration::from_secs(20), "the reply", || async {
        (replies_of(&alice, &question).await == 1).then_some(())
    })
    .await;
    wait_idle(&agent).await;
    // Pruning runs and removes the processed events, the conversation and the run's transcript,
    // but not the question's claim: the question is inside reconciliation's mention window, so
    // the next reconciliation will list it.
    eventually(Duration::from_secs(10), "events, sessions and transcripts pruned", || async {
        (pruned(&agent, "processed_events") > 0 && pruned(&agent, "sessions") > 0 && pruned(&agent, "run_records") > 0)
            .then_some(())
    })
    .await;
    let passes = metric(&agent, "picogent_prune_passes_total");
    eventually(Duration::from_secs(10), "three more passes", || async {
        (metric(&agent, "picogent_prune_passes_total") >= passes + 3).then_some(())
    })
    .await;
    assert_eq!(metric(&agent, "picogent_reconnects_total"), 0, "no reconciliation since the question");
    assert!(agent.state.is_claimed(ClaimKind::Message, &question.id).await.unwrap(), "the claim outlives retention");

    // A reconnect: reconciliation lists the question again, and its claim stops a second answer.
    board.shutdown().await.unwrap();
    let board = agent_support::start_board_at(dir.path(), addr).await;
    eventually(Duration::from_secs(20), "reconnected and reconciled", || async {
        (metric(&agent, "picogent_reconnects_total") >= 1 && agent.status.caught_up()).then_some(())
    })
    .await;
    wait_idle(&agent).await;
    assert_eq!(replies_of(&alice, &question).await, 1, "answered once, though reconciliation found it again");
    // Once the question is older than the window, reconciliation cannot list it: the claim may go.
    eventually(Duration::from_secs(30), "the claim pruned", || async {
        let claimed = agent.state.is_claimed(ClaimKind::Message, &question.id).await.unwrap();
        (!claimed && pruned(&agent, "claims") > 0).then_some(())
    })
    .await;
    // Another reconnect finds nothing new to answer.
    board.shutdown().await.unwrap();
    let board = agent_support::start_board_at(dir.path(), addr).await;
    eventually(Duration::from_secs(20), "reconnected twice", || async {
        (metric(&agent, "picogent_reconnects_total") >= 2 && agent.status.caught_up()).then_some(())
    })
    .await;
    let passes = metric(&agent, "picogent_prune_passes_total");
    eventually(Duration::from_secs(10), "three more passes", || async {
        (metric(&agent, "picogent_prune_passes_total") >= passes + 3).then_some(())
    })
    .await;
    wait_idle(&agent).await;
    assert_eq!(replies_of(&alice, &question).await, 1, "answered once");
    // Whether the first start answers what came before it is the start-up's business; never twice.
    assert!(replies_of(&alice, &history).await <= 1, "the first mention answered twice");
    assert!(agent.state.last_seq().await.unwrap() >= 2, "the resume point is never pruned");
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_the_board_pruned_while_the_agent_was_away_are_covered_by_reconciliation() {
    let dir = tempfile::tempdir().unwrap();
    let options = BoardOptions {
        retention: seconds_retention(),
        ..BoardOptions::loopback(dir.path().join("board.db"), Some(agent_support::SEED.into()))
    };
    let board = board::start(options).await.unwrap();
    let model = start_model(0).await;
    let alice = agent_support::client(&board, "tok-alice");
    let chat = chat_id(&alice).await;
    // So the mention cursor exists when the agent comes back (its first start moves it here).
    say(&alice, &chat, "@picogent this was before your time").await;
    let config = agent_support::agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}));
    let agent = start_agent(config.clone()).await;
    wait_ready(&agent).await;
    agent.shutdown().await.unwrap();

    // While the agent is away, two mentions; the board's retention takes the first one's event
    // out of the log (the second, the newest, stays).
    let away = say(&alice, &chat, "@picogent asked while you were away").await;
    let later = say(&alice, &chat, "@picogent and one more").await;
    let pool = open_pool(&dir.path().join("board.db")).await;
    eventually(Duration::from_secs(10), "the first event pruned", || async {
        let left: i64 =
            sqlx::query_scalar("SELECT count(*) FROM events WHERE member_slug = 'picogent' AND data LIKE ?")
                .bind(format!("%{}%", away.id))
                .fetch_one(&pool)
                .await
                .unwrap();
        (left == 0).then_some(())
    })
    .await;
    pool.close().await;

    let agent = start_agent(config).await;
    for message in [&away, &later] {
        eventually(Duration::from_secs(30), "both answered", || async {
            (replies_of(&alice, message).await >= 1).then_some(())
        })
        .await;
    }
    eventually(Duration::from_secs(10), "the gap gone on without", || async {
        (metric(&agent, "picogent_event_gaps_total") >= 1).then_some(())
    })
    .await;
    wait_idle(&agent).await;
    assert_eq!((replies_of(&alice, &away).await, replies_of(&alice, &later).await), (1, 1));
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_artifacts_are_pruned_with_it_and_artifacts_of_runs_it_does_not_know_stay() {
    use picogent::offline_model::{self, OfflineModelOptions, script::Script};
    interop::ensure_installed();
    let dir = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join(".venv-test/bin/python");
    assert!(python.exists(), "{} is missing: run bash tests/interop/install.sh", python.display());
    let board = agent_support::start_board(dir.path()).await;
    let script = Script::from_json(
        &json!({"turns": [
            {"expect": {"tools_include": ["mcp__big__image"]},
             "reply": {"tool_calls": [{"name": "mcp__big__image", "arguments": {"kib": 64}}]}},
            {"expect": {"last_tool_result_contains": "image saved as artifact"}, "reply": {"content": "Saved the image."}}
        ]})
        .to_string(),
    )
    .unwrap();
    let model = offline_model::start(OfflineModelOptions::script(script)).await.unwrap();
    let mut config = agent_config_with_retention(dir.path(), &board, &model.url());
    config.mcp_servers.insert(
        "big".to_string(),
        serde_json::from_value(json!({
            "command": python.display().to_string(),
            "args": [root.join("fixtures/mcp/bounds_server.py").display().to_string(), "stdio"],
            "trusted": true
        }))
        .unwrap(),
    );
    // Another agent keeping its state in the same folder: its run is not this state's to prune.
    let foreign = dir.path().join("artifacts/0d9c6c52-0000-4000-8000-000000000000/x/y/art-1.bin");
    std::fs::create_dir_all(foreign.parent().unwrap()).unwrap();
    std::fs::write(&foreign, b"theirs").unwrap();
    let agent = start_agent_steady(config).await;
    wait_ready(&agent).await;
    let alice = agent_support::client(&board, "tok-alice");

    let task = agent_support::create_assigned(&alice, "Draw something", "Save an image.").await;
    eventually(Duration::from_secs(60), "the run's answer", || async {
        let comments = agent_support::comments(&alice, &task.id).await;
        comments.iter().any(|m| m.author_slug == "picogent" && m.content.contains("Saved the image")).then_some(())
    })
    .await;
    assert_eq!(model.mismatches(), Vec::<String>::new());
    // Where the artifact was saved, as the model read it.
    let requests = model.requests();
    let result = requests.last().unwrap()["messages"].as_array().unwrap().last().unwrap()["content"].to_string();
    let run = agent_support::runs_for(&agent, &format!("task:{}", task.id)).await.remove(0);
    let folder = dir.path().join("artifacts").join(&run.id);
    assert!(result.contains(&folder.display().to_string()), "the artifact is under its run's folder: {result}");

    // Past retention.runs_ms the run's artifacts go (the run's row stays: the newest of its task).
    eventually(Duration::from_secs(20), "the run's artifacts pruned", || async {
        (!folder.exists() && metric(&agent, "picogent_pruned_artifact_runs_total") == 1).then_some(())
    })
    .await;
    assert!(agent.state.get_run(&run.id).await.unwrap().is_some(), "the row stays, its transcript dropped");
    let passes = metric(&agent, "picogent_prune_passes_total");
    eventually(Duration::from_secs(10), "three more passes", || async {
        (metric(&agent, "picogent_prune_passes_total") >= passes + 3).then_some(())
    })
    .await;
    assert!(foreign.exists(), "a run this state does not know keeps its artifacts");
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[test]
fn a_bad_board_retention_flag_says_what_is_expected() {
    for (flag, value) in [("--event-retention-ms", "0"), ("--prune-interval-ms", "1h")] {
        let output =
            std::process::Command::new(env!("CARGO_BIN_EXE_picogent")).args(["board", flag, value]).output().unwrap();
        assert!(!output.status.success(), "{flag} {value} was taken");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(flag) && stderr.contains("whole number greater than 0"), "{stderr}");
    }
}
