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

// ---- retention ----

/// Moves a row's time back by `age`, as if it had been written that long ago.
async fn age_row(state: &State, table: &str, time_column: &str, key_column: &str, key: &str, age: time::Duration) {
    let at = to_ms(OffsetDateTime::now_utc() - age);
    let sql = format!("UPDATE {table} SET {time_column} = ? WHERE {key_column} = ?");
    // Test-only SQL from fixed table and column names above.
    let updated =
        sqlx::query(sqlx::AssertSqlSafe(sql)).bind(at).bind(key).execute(&state.pool).await.unwrap().rows_affected();
    assert!(updated > 0, "no row {key} in {table}");
}

async fn age_run(state: &State, run_id: &str, age: time::Duration) {
    age_row(state, "runs", "started_at_ms", "id", run_id, age + time::Duration::MINUTE).await;
    let finished: Option<i64> = sqlx::query_scalar("SELECT finished_at_ms FROM runs WHERE id = ?")
        .bind(run_id)
        .fetch_one(&state.pool)
        .await
        .unwrap();
    if finished.is_some() {
        age_row(state, "runs", "finished_at_ms", "id", run_id, age).await;
    }
}

async fn count(state: &State, table: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT COUNT(*) FROM {table}")))
        .fetch_one(&state.pool)
        .await
        .unwrap()
}

fn days_ago(days: i64) -> OffsetDateTime {
    OffsetDateTime::now_utc() - time::Duration::days(days)
}

#[tokio::test]
async fn pruning_events_keeps_recent_ones_and_the_resume_point() {
    let dir = tempfile::tempdir().unwrap();
    let state = open_in(&dir).await;
    state.record_event("old", 7, "task.assigned").await.unwrap();
    state.record_event("new", 5, "message.new").await.unwrap();
    age_row(&state, "processed_events", "processed_at_ms", "id", "old", time::Duration::days(8)).await;

    assert_eq!(state.prune_events(days_ago(7)).await.unwrap(), 1);
    assert!(!state.is_event_processed("old").await.unwrap());
    assert!(state.is_event_processed("new").await.unwrap(), "a recent event stays: it still stops duplicates");
    assert!(!state.record_event("new", 5, "message.new").await.unwrap());
    assert_eq!(state.last_seq().await.unwrap(), 7, "the resume point is the pruned event's seq still");
    assert_eq!(state.prune_events(days_ago(7)).await.unwrap(), 0);
}

#[tokio::test]
async fn message_claims_go_only_when_the_caller_allows_and_only_old_ones() {
    let dir = tempfile::tempdir().unwrap();
    let state = open_in(&dir).await;
    state.claim(ClaimKind::Message, "m-old").await.unwrap();
    state.claim(ClaimKind::Message, "m-new").await.unwrap();
    age_row(&state, "claims", "claimed_at_ms", "key", "m-old", time::Duration::days(31)).await;
    let plan = PrunePlan {
        now: OffsetDateTime::now_utc(),
        events_before: days_ago(7),
        claims_before: days_ago(30),
        message_claims_before: None,
        runs_before: days_ago(90),
        sessions_before: days_ago(30),
    };

    assert_eq!(state.prune(&plan).await.unwrap().claims, 0, "not settled: every message claim stays");
    assert!(state.is_claimed(ClaimKind::Message, "m-old").await.unwrap());
    let pruned = state.prune(&PrunePlan { message_claims_before: Some(days_ago(30)), ..plan }).await.unwrap();
    assert_eq!(pruned.claims, 1);
    assert!(!state.is_claimed(ClaimKind::Message, "m-old").await.unwrap());
    assert!(state.is_claimed(ClaimKind::Message, "m-new").await.unwrap(), "a recent claim stays");
    assert_eq!(state.prune_message_claims(days_ago(30)).await.unwrap(), 0);
}

#[tokio::test]
async fn notice_claims_stay_while_their_run_runs_or_their_day_is_recent() {
    let dir = tempfile::tempdir().unwrap();
    let state = open_in(&dir).await;
    let running = state.start_run("task:t1", "manual").await.unwrap();
    let finished = state.start_run("task:t2", "manual").await.unwrap();
    state.finish_run(&finished, &FinishRun::new(RunStatus::Failed)).await.unwrap();
    let today = OffsetDateTime::now_utc().date();
    let days: Vec<String> = [0, 1, 2, 3, 40].iter().map(|n| (today - time::Duration::days(*n)).to_string()).collect();
    for key in [running.as_str(), finished.as_str(), "run-long-gone"] {
        state.claim(ClaimKind::RunNotice, key).await.unwrap();
    }
    for day in &days {
        state.claim(ClaimKind::SpendNotice, day).await.unwrap();
    }
    state.claim(ClaimKind::Message, "m1").await.unwrap();
    sqlx::query("UPDATE claims SET claimed_at_ms = ?").bind(to_ms(days_ago(60))).execute(&state.pool).await.unwrap();

    // Past days 3 and 40, the finished run and the unknown one go; the message claim is not a
    // notice claim.
    assert_eq!(state.prune_notice_claims(days_ago(30), today).await.unwrap(), 4);
    assert!(state.is_claimed(ClaimKind::RunNotice, &running).await.unwrap(), "a running run may end again");
    assert!(!state.is_claimed(ClaimKind::RunNotice, &finished).await.unwrap());
    assert!(!state.is_claimed(ClaimKind::RunNotice, "run-long-gone").await.unwrap());
    for (day, kept) in days.iter().zip([true, true, true, false, false]) {
        assert_eq!(state.is_claimed(ClaimKind::SpendNotice, day).await.unwrap(), kept, "{day}");
    }
    assert!(state.is_claimed(ClaimKind::Message, "m1").await.unwrap());
    // A claim younger than the cutoff stays whatever it is.
    state.claim(ClaimKind::RunNotice, "fresh").await.unwrap();
    assert_eq!(state.prune_notice_claims(days_ago(30), today).await.unwrap(), 0);
}

#[tokio::test]
async fn pruning_runs_keeps_running_ones_and_the_newest_of_each_session() {
    let dir = tempfile::tempdir().unwrap();
    let state = open_in(&dir).await;
    let record = json!({"transcript": ["long"]});
    let finish = |status| FinishRun { record: Some(record.clone()), ..FinishRun::new(status) };
    let mut old = Vec::new();
    // task:a — two old completed runs: the older goes, the newer stays without its transcript.
    for _ in 0..2 {
        let id = state.start_run("task:a", "task.assigned TE-1").await.unwrap();
        state.finish_run(&id, &finish(RunStatus::Completed)).await.unwrap();
        old.push(id);
    }
    // task:b — an old stopped run, then an old interrupted one: both stay (the newest run, and
    // the newest that finished its work, which reconciliation asks about).
    let stopped = state.start_run("task:b", "task.assigned TE-2").await.unwrap();
    state.finish_run(&stopped, &finish(RunStatus::Stopped)).await.unwrap();
    let interrupted = state.start_run("task:b", "task.assigned TE-2").await.unwrap();
    state.save_run_record(&interrupted, &record).await.unwrap();
    state.mark_interrupted(&interrupted, "restarted").await.unwrap();
    // task:c — an old completed run and a running one started long ago: the running one is
    // untouched, transcript and all; the completed one is the session's newest finished work.
    let earlier = state.start_run("task:c", "task.assigned TE-3").await.unwrap();
    state.finish_run(&earlier, &finish(RunStatus::Completed)).await.unwrap();
    let running = state.start_run("task:c", "task.assigned TE-3").await.unwrap();
    state.save_run_record(&running, &record).await.unwrap();
    // thread:d — a recent failed run and a recent completed one: nothing is old enough.
    let recent: Vec<String> = {
        let mut ids = Vec::new();
        for status in [RunStatus::Failed, RunStatus::Completed] {
            let id = state.start_run("thread:d", "message.new d").await.unwrap();
            state.finish_run(&id, &finish(status)).await.unwrap();
            ids.push(id);
        }
        ids
    };
    for (n, id) in [&old[0], &old[1], &stopped, &interrupted, &earlier, &running].into_iter().enumerate() {
        // Oldest first, so the order of starts is kept.
        age_run(&state, id, time::Duration::days(200 - n as i64)).await;
    }

    let (deleted, dropped) = state.prune_runs(days_ago(90)).await.unwrap();
    assert_eq!(deleted, 1, "the older run of task:a");
    assert!(state.get_run(&old[0]).await.unwrap().is_none());
    assert_eq!(dropped, 4, "the transcripts of the runs kept as the memory of their session");
    for id in [&old[1], &stopped, &interrupted, &earlier] {
        let kept = state.get_run(id).await.unwrap().expect("kept");
        assert_eq!(kept.record, None, "{id}");
    }
    let running = state.get_run(&running).await.unwrap().unwrap();
    assert_eq!((running.status, running.record), (RunStatus::Running, Some(record.clone())));
    assert_eq!(state.unfinished_runs().await.unwrap().len(), 1);
    for id in &recent {
        assert_eq!(state.get_run(id).await.unwrap().unwrap().record, Some(record.clone()), "recent runs stay whole");
    }
    // What reconciliation and the assignment check ask is answered as before.
    for session in ["task:a", "task:b", "task:c", "thread:d"] {
        assert!(state.has_finished_run_for(session).await.unwrap(), "{session}");
    }
    assert!(state.has_run_since("task:a", days_ago(300)).await.unwrap());
    assert_eq!(state.prune_runs(days_ago(90)).await.unwrap(), (0, 0), "a second pass finds nothing");
}

#[tokio::test]
async fn pruning_sessions_keeps_recent_ones_and_those_of_running_runs() {
    let dir = tempfile::tempdir().unwrap();
    let state = open_in(&dir).await;
    let messages = json!([{"role": "user", "content": "hi"}]);
    for key in ["thread:old", "thread:new", "task:busy"] {
        state.save_session(key, &messages).await.unwrap();
    }
    state.start_run("task:busy", "task.assigned TE-9").await.unwrap();
    for key in ["thread:old", "task:busy"] {
        age_row(&state, "sessions", "updated_at_ms", "key", key, time::Duration::days(31)).await;
    }

    assert_eq!(state.prune_sessions(days_ago(30)).await.unwrap(), 1);
    assert!(state.load_session("thread:old").await.unwrap().is_none(), "the next message there starts fresh");
    assert!(state.load_session("thread:new").await.unwrap().is_some());
    assert!(state.load_session("task:busy").await.unwrap().is_some(), "its run will save it again");
}

#[tokio::test]
async fn pruning_replies_never_reaches_into_the_caps_hour() {
    let dir = tempfile::tempdir().unwrap();
    let state = open_in(&dir).await;
    let now = OffsetDateTime::now_utc();
    // Written directly: `record_reply` itself drops rows older than a day.
    for (thread, at) in [("thread:a", now - time::Duration::DAY * 2), ("thread:a", now - time::Duration::minutes(20))] {
        sqlx::query("INSERT INTO replies (thread_key, at_ms) VALUES (?, ?)")
            .bind(thread)
            .bind(to_ms(at))
            .execute(&state.pool)
            .await
            .unwrap();
    }
    // Even a cutoff of "now" keeps the last hour, which the cap counts.
    assert_eq!(state.prune_replies(now).await.unwrap(), 1);
    assert_eq!(state.replies_in_last_hour("thread:a").await.unwrap(), 1);
}

#[tokio::test]
async fn pruning_spend_forgets_old_days_only() {
    let dir = tempfile::tempdir().unwrap();
    let state = open_in(&dir).await;
    state.add_tokens(date!(2025 - 01 - 01), 10).await.unwrap();
    state.add_tokens(date!(2026 - 11 - 29), 20).await.unwrap();
    state.add_tokens(date!(2026 - 11 - 30), 30).await.unwrap();
    assert_eq!(state.prune_spend(date!(2026 - 11 - 30)).await.unwrap(), 2);
    assert_eq!(state.tokens_on(date!(2026 - 11 - 30)).await.unwrap(), 30);
    assert_eq!(state.tokens_on(date!(2025 - 01 - 01)).await.unwrap(), 0);
}

#[tokio::test]
async fn a_whole_pass_counts_by_table_and_leaves_the_resume_point() {
    let dir = tempfile::tempdir().unwrap();
    let state = open_in(&dir).await;
    state.record_event("e1", 41, "message.new").await.unwrap();
    state.record_event("e2", 42, "message.new").await.unwrap();
    state.claim(ClaimKind::Message, "m1").await.unwrap();
    let run = state.start_claimed_run(ClaimKind::Message, "m2", "thread:m2", "message.new m2").await.unwrap().unwrap();
    state
        .finish_run(&run, &FinishRun { record: Some(json!({})), ..FinishRun::new(RunStatus::Completed) })
        .await
        .unwrap();
    state.save_session("thread:m2", &json!([])).await.unwrap();
    state.add_tokens(OffsetDateTime::now_utc().date() - time::Duration::days(500), 5).await.unwrap();
    // Everything is "old" against cutoffs a minute ahead.
    let ahead = OffsetDateTime::now_utc() + time::Duration::MINUTE;
    let plan = PrunePlan {
        now: OffsetDateTime::now_utc(),
        events_before: ahead,
        claims_before: ahead,
        message_claims_before: Some(ahead),
        runs_before: ahead,
        sessions_before: ahead,
    };
    let pruned = state.prune(&plan).await.unwrap();
    assert_eq!(
        pruned,
        Pruned { events: 2, claims: 2, runs: 0, run_records: 1, sessions: 1, replies: 0, spend_days: 1 },
        "{:?}",
        pruned.by_table()
    );
    assert_eq!(pruned.total(), 7);
    assert_eq!(state.last_seq().await.unwrap(), 42);
    assert_eq!(count(&state, "stream_position").await, 1);
    assert_eq!(count(&state, "runs").await, 1, "the newest run of the session stays");
    assert_eq!(state.prune(&plan).await.unwrap().total(), 0);
}
