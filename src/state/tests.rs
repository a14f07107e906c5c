use std::time::Duration;

use serde_json::json;
use time::OffsetDateTime;
use time::macros::date;

use super::*;

async fn open_in(dir: &tempfile::TempDir) -> State {
    State::open(&dir.path().join("state.db")).await.unwrap()
}

#[tokio::test]
async fn open_creates_the_file_in_wal_mode() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fresh.db");
    assert!(!path.exists());
    let state = State::open(&path).await.unwrap();
    assert!(path.exists());
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode").fetch_one(&state.pool).await.unwrap();
    assert_eq!(mode, "wal");
    assert_eq!(state.last_seq().await.unwrap(), 0);
}

#[tokio::test]
async fn the_log_is_checkpointed_in_the_background_not_in_a_commit() {
    let dir = tempfile::tempdir().unwrap();
    let state = open_in(&dir).await;
    let per_commit: i64 = sqlx::query_scalar("PRAGMA wal_autocheckpoint").fetch_one(&state.pool).await.unwrap();
    assert_eq!(per_commit, 0, "no commit checkpoints");
    let database = dir.path().join("state.db");
    let size = || std::fs::metadata(&database).unwrap().len();
    // Give the first background checkpoint (of the migrations) time to pass, then write.
    tokio::time::sleep(crate::sqlite::CHECKPOINT_EVERY * 2).await;
    let before = size();
    let big = json!([{"role": "user", "content": "x".repeat(200_000)}]);
    state.save_session("task:t1", &big).await.unwrap();
    assert_eq!(size(), before, "the commit went to the log only");
    let deadline = std::time::Instant::now() + crate::sqlite::CHECKPOINT_EVERY * 5;
    while size() == before {
        assert!(std::time::Instant::now() < deadline, "no background checkpoint copied the log into the file");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    state.close().await;
}

#[tokio::test]
async fn commits_are_normal_and_sync_flushes_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let state = open_in(&dir).await;
    // 1 = NORMAL: no flush per commit; `sync` is the flush.
    let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous").fetch_one(&state.pool).await.unwrap();
    assert_eq!(synchronous, 1);
    assert!(state.record_event("ev-1", 1, "task.assigned").await.unwrap());
    assert!(dir.path().join("state.db-wal").exists(), "the commit went to the write-ahead log");
    state.sync().await.unwrap();
    state.sync().await.unwrap();
    // With the log checkpointed away there is nothing to flush, and that is not an error.
    state.close().await;
    let _ = std::fs::remove_file(dir.path().join("state.db-wal"));
    let state = open_in(&dir).await;
    state.sync().await.unwrap();
    assert!(state.is_event_processed("ev-1").await.unwrap());
}

#[tokio::test]
async fn open_in_a_missing_folder_names_the_path_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-such-folder").join("state.db");
    let error = State::open(&path).await.unwrap_err();
    assert!(matches!(error, StateError::Open { .. }), "{error:?}");
    let message = error.to_string();
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("state.path"), "{message}");
}

#[tokio::test]
async fn a_file_that_is_not_a_database_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.db");
    std::fs::write(&path, "this is a text file, not SQLite, and it is long enough to have a header").unwrap();
    let message = State::open(&path).await.unwrap_err().to_string();
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("not an SQLite database"), "{message}");
}

#[tokio::test]
async fn record_event_drops_duplicates_by_id() {
    let dir = tempfile::tempdir().unwrap();
    let state = open_in(&dir).await;
    assert!(state.record_event("ev-1", 1, "task.assigned").await.unwrap());
    assert!(!state.record_event("ev-1", 1, "task.assigned").await.unwrap());
    assert!(state.record_event("ev-2", 2, "message.new").await.unwrap());
    assert!(state.is_event_processed("ev-1").await.unwrap());
    assert!(!state.is_event_processed("ev-3").await.unwrap());
}

#[tokio::test]
async fn last_seq_is_the_highest_and_never_moves_back() {
    let dir = tempfile::tempdir().unwrap();
    let state = open_in(&dir).await;
    state.record_event("a", 5, "task.assigned").await.unwrap();
    state.record_event("b", 3, "task.assigned").await.unwrap();
    assert_eq!(state.last_seq().await.unwrap(), 5);
    state.record_event("c", 9, "task.updated").await.unwrap();
    assert_eq!(state.last_seq().await.unwrap(), 9);
}

#[tokio::test]
async fn last_seq_survives_reopen_and_pruning() {
    let dir = tempfile::tempdir().unwrap();
    let state = open_in(&dir).await;
    state.record_event("a", 41, "task.assigned").await.unwrap();
    state.record_event("b", 42, "message.new").await.unwrap();
    state.close().await;

    let state = open_in(&dir).await;
    assert_eq!(state.last_seq().await.unwrap(), 42);
    assert!(!state.record_event("b", 42, "message.new").await.unwrap(), "a replay after restart is a duplicate");
    let pruned = state.prune_events(OffsetDateTime::now_utc() + time::Duration::MINUTE).await.unwrap();
    assert_eq!(pruned, 2);
    assert_eq!(state.last_seq().await.unwrap(), 42);
}

#[tokio::test]
async fn claims_are_once_only_and_can_be_released() {
    let dir = tempfile::tempdir().unwrap();
    let state = open_in(&dir).await;
    assert!(state.claim(ClaimKind::Message, "TE-3").await.unwrap());
    assert!(!state.claim(ClaimKind::Message, "TE-3").await.unwrap());
    assert!(state.claim(ClaimKind::RunNotice, "TE-3").await.unwrap(), "kinds are separate");
    assert!(state.is_claimed(ClaimKind::Message, "TE-3").await.unwrap());
    assert!(state.release(ClaimKind::Message, "TE-3").await.unwrap());
    assert!(!state.release(ClaimKind::Message, "TE-3").await.unwrap());
    assert!(state.claim(ClaimKind::Message, "TE-3").await.unwrap());
}

#[tokio::test]
async fn concurrent_claims_have_exactly_one_winner() {
    let dir = tempfile::tempdir().unwrap();
    let state = open_in(&dir).await;
    let attempts: Vec<_> = (0..8)
        .map(|_| {
            let state = state.clone();
            tokio::spawn(async move { state.claim(ClaimKind::RunNotice, "run-1").await.unwrap() })
        })
        .collect();
    let mut winners = 0;
    for attempt in attempts {
        winners += usize::from(attempt.await.unwrap());
    }
    assert_eq!(winners, 1);
}

#[tokio::test]
async fn claims_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let state = open_in(&dir).await;
    state.claim(ClaimKind::RunNotice, "run-7").await.unwrap();
    state.close().await;
    let state = open_in(&dir).await;
    assert!(!state.claim(ClaimKind::RunNotice, "run-7").await.unwrap());
}

#[tokio::test]
async fn sessions_round_trip_and_replace_whole() {
    let dir = tempfile::tempdir().unwrap();
    let state = open_in(&dir).await;
    let key = crate::session::SessionKey::Task("task-1".into()).as_string();
    assert_eq!(key, "task:task-1");
    assert!(state.load_session(&key).await.unwrap().is_none());

    let first = json!([{"role": "user", "content": "do TE-3"}]);
    state.save_session(&key, &first).await.unwrap();
    let loaded = state.load_session(&key).await.unwrap().unwrap();
    assert_eq!(loaded.messages, first);
    assert_eq!(loaded.key, key);

    let second = json!([
        {"role": "user", "content": "do TE-3"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "name": "get_task", "arguments": "{}"}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ünïcode ✓"}
    ]);
    state.save_session(&key, &second).await.unwrap();
    state.close().await;

    let state = open_in(&dir).await;
    let loaded = state.load_session(&key).await.unwrap().unwrap();
    assert_eq!(loaded.messages, second);
    assert!(loaded.updated_at <= OffsetDateTime::now_utc());
    assert!(state.delete_session(&key).await.unwrap());
    assert!(state.load_session(&key).await.unwrap().is_none());
}

#[tokio::test]
async fn run_lifecycle_from_start_to_finish() {
    let dir = tempfile::tempdir().unwrap();
    let state = open_in(&dir).await;
    let run_id = state.start_run("task:t1", "task.assigned TE-3").await.unwrap();
    let running = state.get_run(&run_id).await.unwrap().unwrap();
    assert_eq!(running.status, RunStatus::Running);
    assert_eq!(running.trigger, "task.assigned TE-3");
    assert!(running.finished_at.is_none());
    assert!(running.duration().is_none());
    assert!(!state.has_finished_run_for("task:t1").await.unwrap());

    state.save_run_record(&run_id, &json!({"transcript": ["turn 1"]})).await.unwrap();
    let finish = FinishRun {
        turns: 3,
        tool_calls: 5,
        prompt_tokens: 1200,
        completion_tokens: 300,
        model_duration: Duration::from_millis(1500),
        tool_duration: Duration::from_millis(250),
        outcome: Some("moved TE-3 to in_review".to_string()),
        ..FinishRun::new(RunStatus::Completed)
    };
    assert!(state.finish_run(&run_id, &finish).await.unwrap());
    assert!(!state.finish_run(&run_id, &FinishRun::new(RunStatus::Failed)).await.unwrap(), "the first ending stands");

    let done = state.get_run(&run_id).await.unwrap().unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!((done.turns, done.tool_calls), (3, 5));
    assert_eq!((done.prompt_tokens, done.completion_tokens), (1200, 300));
    assert_eq!((done.model_duration_ms, done.tool_duration_ms), (1500, 250));
    assert_eq!(done.outcome.as_deref(), Some("moved TE-3 to in_review"));
    assert_eq!(done.record, Some(json!({"transcript": ["turn 1"]})), "a finish without a record keeps the checkpoint");
    assert!(done.finished_at.is_some());
    assert!(state.has_finished_run_for("task:t1").await.unwrap());

    let serialized = serde_json::to_value(&done).unwrap();
    assert_eq!(serialized["status"], "completed");
    assert!(serialized["started_at"].as_str().unwrap().ends_with('Z'), "{serialized}");
}

#[tokio::test]
async fn finishing_an_unknown_or_running_run_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let state = open_in(&dir).await;
    let error = state.finish_run("nope", &FinishRun::new(RunStatus::Failed)).await.unwrap_err();
    assert!(matches!(error, StateError::UnknownRun { .. }), "{error:?}");
    let run_id = state.start_run("task:t1", "manual").await.unwrap();
    assert!(state.finish_run(&run_id, &FinishRun::new(RunStatus::Running)).await.is_err());
    assert!(matches!(state.save_run_record("nope", &json!({})).await.unwrap_err(), StateError::UnknownRun { .. }));
}

#[tokio::test]
async fn unfinished_runs_are_found_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let state = open_in(&dir).await;
    let cut_short = state.start_run("thread:m1", "message.new m1").await.unwrap();
    let finished = state.start_run("task:t2", "task.assigned TE-4").await.unwrap();
    state.finish_run(&finished, &FinishRun::new(RunStatus::Failed)).await.unwrap();
    state.save_run_record(&cut_short, &json!({"turn": 2})).await.unwrap();
    state.close().await;

    let state = open_in(&dir).await;
    let unfinished = state.unfinished_runs().await.unwrap();
    assert_eq!(unfinished.len(), 1);
    assert_eq!(unfinished[0].id, cut_short);
    assert_eq!(unfinished[0].record, Some(json!({"turn": 2})));
    assert!(state.mark_interrupted(&cut_short, "picogent restarted while the run was going").await.unwrap());
    assert!(!state.mark_interrupted(&cut_short, "again").await.unwrap());
    assert!(state.unfinished_runs().await.unwrap().is_empty());
    let interrupted = state.get_run(&cut_short).await.unwrap().unwrap();
    assert_eq!(interrupted.status, RunStatus::Interrupted);
    assert!(!state.has_finished_run_for("thread:m1").await.unwrap(), "an interrupted run is not finished work");
}

#[tokio::test]
async fn list_runs_is_newest_first_and_limited() {
    let dir = tempfile::tempdir().unwrap();
    let state = open_in(&dir).await;
    let mut ids = Vec::new();
    for n in 0..4 {
        ids.push(state.start_run(&format!("task:t{n}"), "manual").await.unwrap());
    }
    let listed: Vec<String> = state.list_runs(3).await.unwrap().into_iter().map(|run| run.id).collect();
    let expected: Vec<String> = ids.iter().rev().take(3).cloned().collect();
    assert_eq!(listed, expected);
}

#[tokio::test]
async fn spend_adds_up_per_day() {
    let dir = tempfile::tempdir().unwrap();
    let state = open_in(&dir).await;
    assert_eq!(state.add_tokens(date!(2026 - 11 - 29), 700).await.unwrap(), 700);
    assert_eq!(state.add_tokens(date!(2026 - 11 - 30), 100).await.unwrap(), 100);
    assert_eq!(state.add_tokens(date!(2026 - 11 - 30), 250).await.unwrap(), 350);
    assert_eq!(state.tokens_on(date!(2026 - 11 - 29)).await.unwrap(), 700);
    assert_eq!(state.tokens_on(date!(2026 - 12 - 01)).await.unwrap(), 0);

    let today = OffsetDateTime::now_utc().date();
    let before = state.tokens_today().await.unwrap();
    state.add_tokens(today, 42).await.unwrap();
    assert_eq!(state.tokens_today().await.unwrap(), before + 42);
}

#[tokio::test]
async fn replies_are_counted_per_thread_within_the_hour() {
    let dir = tempfile::tempdir().unwrap();
    let state = open_in(&dir).await;
    let now = OffsetDateTime::now_utc();
    state.record_reply("thread:m1", now - time::Duration::minutes(90)).await.unwrap();
    state.record_reply("thread:m1", now - time::Duration::minutes(30)).await.unwrap();
    state.record_reply("thread:m1", now).await.unwrap();
    state.record_reply("thread:m2", now).await.unwrap();
    assert_eq!(state.replies_in_last_hour("thread:m1").await.unwrap(), 2);
    assert_eq!(state.replies_in_last_hour("thread:m2").await.unwrap(), 1);
    assert_eq!(state.replies_in_last_hour("thread:m3").await.unwrap(), 0);
    assert_eq!(state.replies_since("thread:m1", now - time::Duration::HOUR * 2).await.unwrap(), 3);
}

#[tokio::test]
async fn a_claimed_run_starts_once_and_is_found_unfinished_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let state = open_in(&dir).await;
    let session = crate::session::SessionKey::Task("t3".into()).as_string();
    let run_id = state
        .start_claimed_run(ClaimKind::Message, "t3", &session, "task.assigned TE-3")
        .await
        .unwrap()
        .expect("the first claim starts a run");
    // The replayed event and the reconciliation both find it taken, and start nothing.
    assert_eq!(state.start_claimed_run(ClaimKind::Message, "t3", &session, "replay").await.unwrap(), None);
    assert!(!state.claim(ClaimKind::Message, "t3").await.unwrap());
    state.close().await;

    let state = open_in(&dir).await;
    let unfinished = state.unfinished_runs().await.unwrap();
    assert_eq!(unfinished.len(), 1);
    assert_eq!(unfinished[0].id, run_id);
    assert_eq!(unfinished[0].trigger, "task.assigned TE-3");
    assert_eq!(state.list_runs(10).await.unwrap().len(), 1, "the refused claim wrote no run");
}
