//! The state's tests. Those about what the state keeps and gives back are written once, as
//! `async fn name(place: Place)`, and run against both stores by `on_both_stores!` (as
//! `on_sqlite::name` and `on_postgres::name`); each gets a fresh SQLite file or a fresh schema in
//! the test PostgreSQL (`tests/support/postgres.rs`: what it needs, and how a test fails when it
//! is down). Tests of one store's own mechanics (SQLite's log and file errors, PostgreSQL's
//! agents side by side and its errors) follow, each for its store.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use time::OffsetDateTime;
use time::macros::date;

use super::*;

#[path = "../../../tests/support/postgres.rs"]
pub(super) mod test_postgres;
use test_postgres::TestSchema;

/// The agent the shared tests act as.
const AGENT: &str = "picogent";

/// Where one test's state lives, to open (and open again, as after a restart) as often as the
/// test needs.
#[derive(Clone)]
pub(super) enum Place {
    Sqlite(Arc<tempfile::TempDir>),
    Postgres(TestSchema),
}

impl Place {
    pub(super) async fn open(&self) -> State {
        self.open_as(AGENT).await
    }

    /// The state of the agent `agent` here: in PostgreSQL another agent's rows in the same
    /// tables; in SQLite a file of its own, as each agent has.
    async fn open_as(&self, agent: &str) -> State {
        match self {
            Place::Sqlite(dir) => State::open(&dir.path().join(format!("{agent}.db"))).await.unwrap(),
            Place::Postgres(schema) => State::open_postgres(&schema.url(), agent).await.unwrap(),
        }
    }
}

pub(super) async fn on_sqlite<F, Fut>(test: F)
where
    F: FnOnce(Place) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    test(Place::Sqlite(Arc::new(tempfile::tempdir().unwrap()))).await
}

pub(super) async fn on_postgres<F, Fut>(test: F)
where
    F: FnOnce(Place) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    test_postgres::with_schema(|schema| test(Place::Postgres(schema))).await
}

/// Runs each named `async fn(Place)` as two tests, one on each store: `on_sqlite::name` and
/// `on_postgres::name` in the module that invokes it (which has `on_sqlite` and `on_postgres` in
/// scope). The queue's and the firings' tests use it too.
macro_rules! on_both_stores {
    ($($test:ident),* $(,)?) => {
        mod on_sqlite {
            $( #[tokio::test] async fn $test() { super::on_sqlite(super::$test).await } )*
        }
        mod on_postgres {
            $( #[tokio::test] async fn $test() { super::on_postgres(super::$test).await } )*
        }
    };
}
pub(super) use on_both_stores;

on_both_stores!(
    record_event_drops_duplicates_by_id,
    last_seq_is_the_highest_and_never_moves_back,
    last_seq_survives_reopen_and_pruning,
    concurrent_events_move_the_resume_point_to_the_highest,
    claims_are_once_only_and_can_be_released,
    concurrent_claims_have_exactly_one_winner,
    claims_survive_reopen,
    sessions_round_trip_and_replace_whole,
    run_lifecycle_from_start_to_finish,
    finishing_an_unknown_or_running_run_is_an_error,
    unfinished_runs_are_found_after_reopen,
    every_end_status_is_stored_and_read_back,
    list_runs_is_newest_first_and_limited,
    runs_are_found_by_the_start_of_their_id,
    runs_started_in_the_same_millisecond_keep_their_order,
    has_run_since_and_finished_runs_are_per_session,
    spend_adds_up_per_day,
    spend_and_run_costs_add_up,
    spend_of_sessions_adds_their_runs_only,
    concurrent_spend_from_two_handles_adds_up,
    replies_are_counted_per_thread_within_the_hour,
    a_claimed_run_starts_once_and_is_found_unfinished_after_a_crash,
    concurrent_claimed_runs_start_exactly_one,
    values_round_trip_and_persist,
    value_or_insert_keeps_the_first_of_concurrent_callers,
    sync_succeeds_and_keeps_everything,
    a_fresh_state_has_no_position_until_an_event_or_a_head_is_recorded,
    pruning_events_keeps_recent_ones_and_the_resume_point,
    message_claims_go_only_when_the_caller_allows_and_only_old_ones,
    notice_claims_stay_while_their_run_runs_or_their_day_is_recent,
    pruning_runs_keeps_running_ones_and_the_newest_of_each_session,
    pruning_sessions_keeps_recent_ones_and_those_of_running_runs,
    pruning_replies_never_reaches_into_the_caps_hour,
    pruning_spend_forgets_old_days_only,
    a_whole_pass_counts_by_table_and_leaves_the_resume_point,
);

/// The session key written `text` (`task:t1`, `thread:m1`).
pub(crate) fn key(text: &str) -> SessionKey {
    SessionKey::parse(text).expect("a session key")
}

fn sqlite_pool(state: &State) -> &sqlx::SqlitePool {
    match &state.store {
        Backend::Sqlite(store) => store.pool(),
        Backend::Postgres(_) => panic!("not a SQLite state"),
    }
}

async fn open_in(dir: &tempfile::TempDir) -> State {
    State::open(&dir.path().join("state.db")).await.unwrap()
}

async fn record_event_drops_duplicates_by_id(place: Place) {
    let state = place.open().await;
    assert!(state.record_event("ev-1", 1, "task.assigned").await.unwrap());
    assert!(!state.record_event("ev-1", 1, "task.assigned").await.unwrap());
    assert!(state.record_event("ev-2", 2, "message.new").await.unwrap());
    assert!(state.is_event_processed("ev-1").await.unwrap());
    assert!(!state.is_event_processed("ev-3").await.unwrap());
}

async fn last_seq_is_the_highest_and_never_moves_back(place: Place) {
    let state = place.open().await;
    state.record_event("a", 5, "task.assigned").await.unwrap();
    state.record_event("b", 3, "task.assigned").await.unwrap();
    assert_eq!(state.last_seq().await.unwrap(), 5);
    state.record_event("c", 9, "task.updated").await.unwrap();
    assert_eq!(state.last_seq().await.unwrap(), 9);
}

async fn last_seq_survives_reopen_and_pruning(place: Place) {
    let state = place.open().await;
    state.record_event("a", 41, "task.assigned").await.unwrap();
    state.record_event("b", 42, "message.new").await.unwrap();
    state.close().await;

    let state = place.open().await;
    assert_eq!(state.last_seq().await.unwrap(), 42);
    assert!(!state.record_event("b", 42, "message.new").await.unwrap(), "a replay after restart is a duplicate");
    let pruned = state.prune_events(OffsetDateTime::now_utc() + time::Duration::MINUTE).await.unwrap();
    assert_eq!(pruned, 2);
    assert_eq!(state.last_seq().await.unwrap(), 42);
}

async fn claims_are_once_only_and_can_be_released(place: Place) {
    let state = place.open().await;
    assert!(state.claim(ClaimKind::Message, "TE-3").await.unwrap());
    assert!(!state.claim(ClaimKind::Message, "TE-3").await.unwrap());
    assert!(state.claim(ClaimKind::RunNotice, "TE-3").await.unwrap(), "kinds are separate");
    assert!(state.is_claimed(ClaimKind::Message, "TE-3").await.unwrap());
    assert!(state.release(ClaimKind::Message, "TE-3").await.unwrap());
    assert!(!state.release(ClaimKind::Message, "TE-3").await.unwrap());
    assert!(state.claim(ClaimKind::Message, "TE-3").await.unwrap());
}

async fn concurrent_claims_have_exactly_one_winner(place: Place) {
    let state = place.open().await;
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

async fn claims_survive_reopen(place: Place) {
    let state = place.open().await;
    state.claim(ClaimKind::RunNotice, "run-7").await.unwrap();
    state.close().await;
    let state = place.open().await;
    assert!(!state.claim(ClaimKind::RunNotice, "run-7").await.unwrap());
}

async fn sessions_round_trip_and_replace_whole(place: Place) {
    let state = place.open().await;
    let key = SessionKey::Task("task-1".into());
    assert_eq!(key.as_string(), "task:task-1");
    assert!(state.load_session(&key).await.unwrap().is_none());

    let first = json!([{"role": "user", "content": "do TE-3"}]);
    state.save_session(&key, &first).await.unwrap();
    let loaded = state.load_session(&key).await.unwrap().unwrap();
    assert_eq!(loaded.messages, first);
    assert_eq!(loaded.key, key);

    let second = json!([
        {"role": "user", "content": "do TE-3"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "name": "get_task", "arguments": "{}"}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ünïcode ✓, a NUL \u{0} and quotes '\" kept"},
        {"role": "user", "content": "x".repeat(300_000)}
    ]);
    state.save_session(&key, &second).await.unwrap();
    state.close().await;

    let state = place.open().await;
    let loaded = state.load_session(&key).await.unwrap().unwrap();
    assert_eq!(loaded.messages, second);
    assert!(loaded.updated_at <= OffsetDateTime::now_utc());
    assert!(state.delete_session(&key).await.unwrap());
    assert!(state.load_session(&key).await.unwrap().is_none());
}

async fn run_lifecycle_from_start_to_finish(place: Place) {
    let state = place.open().await;
    let run_id = state.start_run(&key("task:t1"), "task.assigned TE-3").await.unwrap();
    let running = state.get_run(&run_id).await.unwrap().unwrap();
    assert_eq!(running.status, RunStatus::Running);
    assert_eq!(running.trigger, "task.assigned TE-3");
    assert!(running.finished_at.is_none());
    assert!(running.duration().is_none());
    assert!(!state.has_finished_run_for(&key("task:t1")).await.unwrap());

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
    assert!(state.has_finished_run_for(&key("task:t1")).await.unwrap());

    let serialized = serde_json::to_value(&done).unwrap();
    assert_eq!(serialized["status"], "completed");
    assert!(serialized["started_at"].as_str().unwrap().ends_with('Z'), "{serialized}");
}

async fn finishing_an_unknown_or_running_run_is_an_error(place: Place) {
    let state = place.open().await;
    let error = state.finish_run("nope", &FinishRun::new(RunStatus::Failed)).await.unwrap_err();
    assert!(matches!(error, StateError::UnknownRun { .. }), "{error:?}");
    let run_id = state.start_run(&key("task:t1"), "manual").await.unwrap();
    assert!(state.finish_run(&run_id, &FinishRun::new(RunStatus::Running)).await.is_err());
    assert!(matches!(state.save_run_record("nope", &json!({})).await.unwrap_err(), StateError::UnknownRun { .. }));
}

async fn unfinished_runs_are_found_after_reopen(place: Place) {
    let state = place.open().await;
    let cut_short = state.start_run(&key("thread:m1"), "message.new m1").await.unwrap();
    let finished = state.start_run(&key("task:t2"), "task.assigned TE-4").await.unwrap();
    state.finish_run(&finished, &FinishRun::new(RunStatus::Failed)).await.unwrap();
    state.save_run_record(&cut_short, &json!({"turn": 2})).await.unwrap();
    state.close().await;

    let state = place.open().await;
    let unfinished = state.unfinished_runs().await.unwrap();
    assert_eq!(unfinished.len(), 1);
    assert_eq!(unfinished[0].id, cut_short);
    assert_eq!(unfinished[0].record, Some(json!({"turn": 2})));
    assert!(state.mark_interrupted(&cut_short, "picogent restarted while the run was going").await.unwrap());
    assert!(!state.mark_interrupted(&cut_short, "again").await.unwrap());
    assert!(state.unfinished_runs().await.unwrap().is_empty());
    let interrupted = state.get_run(&cut_short).await.unwrap().unwrap();
    assert_eq!(interrupted.status, RunStatus::Interrupted);
    assert!(!state.has_finished_run_for(&key("thread:m1")).await.unwrap(), "an interrupted run is not finished work");
}

/// A run's record is read into its type; one that does not fit it is damaged, an error that
/// names the run, never taken for no record.
#[tokio::test]
async fn a_record_that_does_not_fit_its_type_is_an_error_naming_the_run() {
    #[derive(Debug, PartialEq, serde::Deserialize)]
    struct Start {
        history_len: usize,
    }
    let dir = tempfile::tempdir().unwrap();
    let state = open_in(&dir).await;
    let fits = state.start_run(&key("task:t1"), "task.assigned TE-3").await.unwrap();
    state.save_run_record(&fits, &json!({"history_len": 2, "transcript": []})).await.unwrap();
    let run = state.get_run(&fits).await.unwrap().unwrap();
    assert_eq!(run.record_as::<Start>().unwrap(), Some(Start { history_len: 2 }));

    let none = state.start_run(&key("task:t2"), "task.assigned TE-4").await.unwrap();
    assert_eq!(state.get_run(&none).await.unwrap().unwrap().record_as::<Start>().unwrap(), None);

    let damaged = state.start_run(&key("task:t3"), "task.assigned TE-5").await.unwrap();
    state.save_run_record(&damaged, &json!({"history_len": "two"})).await.unwrap();
    let error = state.get_run(&damaged).await.unwrap().unwrap().record_as::<Start>().unwrap_err();
    assert!(matches!(&error, StateError::DamagedRecord { run_id, .. } if *run_id == damaged), "{error:?}");
    assert!(error.to_string().contains(&damaged), "{error}");
}

/// Every status a run can end with is stored and read back; all but `interrupted` are finished
/// work, `did_nothing` too (reconciliation does not take its task up again at every start).
async fn every_end_status_is_stored_and_read_back(place: Place) {
    let state = place.open().await;
    let ends = RunStatus::ALL.into_iter().filter(|status| !matches!(status, RunStatus::Queued | RunStatus::Running));
    for status in ends {
        let session = key(&format!("task:{status}"));
        let run_id = state.start_run(&session, "task.assigned TE-9").await.unwrap();
        assert!(state.finish_run(&run_id, &FinishRun::new(status)).await.unwrap(), "{status}");
        assert_eq!(state.get_run(&run_id).await.unwrap().unwrap().status, status);
        let finished_work = status != RunStatus::Interrupted;
        assert_eq!(state.has_finished_run_for(&session).await.unwrap(), finished_work, "{status}");
    }
}

async fn list_runs_is_newest_first_and_limited(place: Place) {
    let state = place.open().await;
    let mut ids = Vec::new();
    for n in 0..4 {
        ids.push(state.start_run(&key(&format!("task:t{n}")), "manual").await.unwrap());
    }
    let listed: Vec<String> = state.list_runs(3).await.unwrap().into_iter().map(|run| run.id).collect();
    let expected: Vec<String> = ids.iter().rev().take(3).cloned().collect();
    assert_eq!(listed, expected);
    // A session's own runs, newest first, and no other session's.
    let again = state.start_run(&key("task:t1"), "manual").await.unwrap();
    let of_t1: Vec<String> = state.runs_of(&key("task:t1"), 5).await.unwrap().into_iter().map(|run| run.id).collect();
    assert_eq!(of_t1, [again.clone(), ids[1].clone()]);
    let newest: Vec<String> = state.runs_of(&key("task:t1"), 1).await.unwrap().into_iter().map(|run| run.id).collect();
    assert_eq!(newest, [again]);
    assert!(state.runs_of(&key("task:none"), 5).await.unwrap().is_empty());
}

async fn runs_are_found_by_the_start_of_their_id(place: Place) {
    let state = place.open().await;
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(state.start_run(&key(&format!("task:t{n}")), "manual").await.unwrap());
    }
    let short: String = ids[1].chars().take(8).collect();
    assert_eq!(state.run_ids_starting_with(&short, 10).await.unwrap(), vec![ids[1].clone()]);
    assert_eq!(state.run_ids_starting_with(&ids[2], 10).await.unwrap(), vec![ids[2].clone()], "a whole id");
    let mut all = ids.clone();
    all.sort();
    assert_eq!(state.run_ids_starting_with("", 10).await.unwrap(), all, "every id begins with nothing");
    assert_eq!(state.run_ids_starting_with("", 2).await.unwrap().len(), 2, "at most the limit");
    // Wildcards of LIKE are plain characters here.
    for pattern in ["%", "_", "________"] {
        assert!(state.run_ids_starting_with(pattern, 10).await.unwrap().is_empty(), "{pattern}");
    }
    assert!(state.run_ids_starting_with(&format!("{short}x"), 10).await.unwrap().is_empty());
}

async fn spend_adds_up_per_day(place: Place) {
    let state = place.open().await;
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

async fn replies_are_counted_per_thread_within_the_hour(place: Place) {
    let state = place.open().await;
    let now = OffsetDateTime::now_utc();
    state.record_reply(&key("thread:m1"), now - time::Duration::minutes(90)).await.unwrap();
    state.record_reply(&key("thread:m1"), now - time::Duration::minutes(30)).await.unwrap();
    state.record_reply(&key("thread:m1"), now).await.unwrap();
    state.record_reply(&key("thread:m2"), now).await.unwrap();
    assert_eq!(state.replies_in_last_hour(&key("thread:m1")).await.unwrap(), 2);
    assert_eq!(state.replies_in_last_hour(&key("thread:m2")).await.unwrap(), 1);
    assert_eq!(state.replies_in_last_hour(&key("thread:m3")).await.unwrap(), 0);
    assert_eq!(state.replies_since(&key("thread:m1"), now - time::Duration::HOUR * 2).await.unwrap(), 3);
}

async fn a_claimed_run_starts_once_and_is_found_unfinished_after_a_crash(place: Place) {
    let state = place.open().await;
    let session = SessionKey::Task("t3".into());
    let run_id = state
        .start_claimed_run(ClaimKind::Message, "t3", &session, "task.assigned TE-3")
        .await
        .unwrap()
        .expect("the first claim starts a run");
    // The replayed event and the reconciliation both find it taken, and start nothing.
    assert_eq!(state.start_claimed_run(ClaimKind::Message, "t3", &session, "replay").await.unwrap(), None);
    assert!(!state.claim(ClaimKind::Message, "t3").await.unwrap());
    state.close().await;

    let state = place.open().await;
    let unfinished = state.unfinished_runs().await.unwrap();
    assert_eq!(unfinished.len(), 1);
    assert_eq!(unfinished[0].id, run_id);
    assert_eq!(unfinished[0].trigger, "task.assigned TE-3");
    assert_eq!(state.list_runs(10).await.unwrap().len(), 1, "the refused claim wrote no run");
}

async fn concurrent_events_move_the_resume_point_to_the_highest(place: Place) {
    let state = place.open().await;
    let recorded: Vec<_> = (1..=40u64)
        .map(|seq| {
            let state = state.clone();
            tokio::spawn(async move { state.record_event(&format!("ev-{seq}"), seq, "message.new").await.unwrap() })
        })
        .collect();
    for new in recorded {
        assert!(new.await.unwrap());
    }
    assert_eq!(state.last_seq().await.unwrap(), 40);
    assert!(!state.record_event("ev-7", 7, "message.new").await.unwrap());
    assert_eq!(state.last_seq().await.unwrap(), 40, "a duplicate moves nothing");
}

async fn runs_started_in_the_same_millisecond_keep_their_order(place: Place) {
    let state = place.open().await;
    let mut ids = Vec::new();
    for n in 0..5 {
        ids.push(state.start_run(&key(&format!("task:t{n}")), "manual").await.unwrap());
    }
    let unfinished: Vec<String> = state.unfinished_runs().await.unwrap().into_iter().map(|run| run.id).collect();
    assert_eq!(unfinished, ids, "oldest first, in the order they were started");
    let listed: Vec<String> = state.list_runs(10).await.unwrap().into_iter().map(|run| run.id).collect();
    assert_eq!(listed, ids.iter().rev().cloned().collect::<Vec<_>>(), "newest first");
}

async fn has_run_since_and_finished_runs_are_per_session(place: Place) {
    let state = place.open().await;
    let before = OffsetDateTime::now_utc() - time::Duration::SECOND;
    let run_id = state.start_run(&key("task:t1"), "task.assigned TE-1").await.unwrap();
    assert!(state.has_run_since(&key("task:t1"), before).await.unwrap());
    assert!(!state.has_run_since(&key("task:t1"), OffsetDateTime::now_utc() + time::Duration::MINUTE).await.unwrap());
    assert!(!state.has_run_since(&key("task:t2"), before).await.unwrap(), "another session");
    state.finish_run(&run_id, &FinishRun::new(RunStatus::Stopped)).await.unwrap();
    assert!(state.has_finished_run_for(&key("task:t1")).await.unwrap());
    assert!(!state.has_finished_run_for(&key("task:t2")).await.unwrap());
}

async fn spend_and_run_costs_add_up(place: Place) {
    let state = place.open().await;
    let day = date!(2026 - 12 - 02);
    let first = state.add_spend(day, Spend { tokens: 1_000, cost: 0.25 }).await.unwrap();
    assert_eq!(first, Spend { tokens: 1_000, cost: 0.25 });
    let total = state.add_spend(day, Spend { tokens: 500, cost: 0.5 }).await.unwrap();
    assert_eq!(total, Spend { tokens: 1_500, cost: 0.75 });
    state.close().await;
    let state = place.open().await;
    assert_eq!(state.spend_on(day).await.unwrap(), Spend { tokens: 1_500, cost: 0.75 }, "read back after a restart");

    let run_id = state.start_run(&key("task:t1"), "manual").await.unwrap();
    assert_eq!(state.get_run(&run_id).await.unwrap().unwrap().cost, None);
    state.finish_run(&run_id, &FinishRun { cost: Some(0.125), ..FinishRun::new(RunStatus::Completed) }).await.unwrap();
    assert_eq!(state.get_run(&run_id).await.unwrap().unwrap().cost, Some(0.125));
}

async fn spend_of_sessions_adds_their_runs_only(place: Place) {
    let state = place.open().await;
    let tree = [key("task:parent"), key("task:sub1"), key("task:sub2")];
    assert_eq!(state.spend_of(&tree).await.unwrap(), Spend::default(), "no runs yet");
    for (session, tokens, cost) in
        [("task:parent", 1_000, 0.5), ("task:sub1", 300, 0.25), ("task:sub1", 200, 0.0), ("task:other", 9_000, 4.0)]
    {
        let run_id = state.start_run(&key(session), "manual").await.unwrap();
        let finish = FinishRun {
            prompt_tokens: tokens - 50,
            completion_tokens: 50,
            cost: (cost > 0.0).then_some(cost),
            ..FinishRun::new(RunStatus::Completed)
        };
        state.finish_run(&run_id, &finish).await.unwrap();
    }
    assert_eq!(state.spend_of(&tree).await.unwrap(), Spend { tokens: 1_500, cost: 0.75 });
    assert_eq!(state.spend_of(&[]).await.unwrap(), Spend::default());
}

async fn concurrent_spend_from_two_handles_adds_up(place: Place) {
    // Two handles on one agent's state: each add is one statement, so none is lost.
    let (first, second) = (place.open().await, place.open().await);
    let day = date!(2026 - 12 - 03);
    let adds: Vec<_> = (0..20)
        .flat_map(|_| [first.clone(), second.clone()])
        .map(|state| tokio::spawn(async move { state.add_tokens(day, 10).await.unwrap() }))
        .collect();
    let mut totals = Vec::new();
    for add in adds {
        totals.push(add.await.unwrap());
    }
    totals.sort_unstable();
    assert_eq!(totals, (1..=40).map(|n| n * 10).collect::<Vec<u64>>(), "every add saw the ones before it");
    assert_eq!(place.open().await.tokens_on(day).await.unwrap(), 400);
}

async fn concurrent_claimed_runs_start_exactly_one(place: Place) {
    let state = place.open().await;
    let attempts: Vec<_> = (0..8)
        .map(|n| {
            let state = state.clone();
            tokio::spawn(async move {
                state
                    .start_claimed_run(ClaimKind::Message, "m-1", &key("thread:m-1"), &format!("try {n}"))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut started = Vec::new();
    for attempt in attempts {
        started.extend(attempt.await.unwrap());
    }
    assert_eq!(started.len(), 1, "{started:?}");
    let runs = state.list_runs(10).await.unwrap();
    assert_eq!(runs.len(), 1, "the refused claims wrote no run");
    assert_eq!(runs[0].id, started[0]);
}

async fn value_or_insert_keeps_the_first_of_concurrent_callers(place: Place) {
    let state = place.open().await;
    let ids = ["a", "b", "c", "d"];
    let answers = futures::future::join_all(ids.map(|id| state.value_or_insert("copy", id))).await;
    let answers: Vec<String> = answers.into_iter().map(Result::unwrap).collect();
    assert!(answers.iter().all(|answer| answer == &answers[0]), "{answers:?}");
    assert_eq!(state.get_value("copy").await.unwrap().as_deref(), Some(answers[0].as_str()));
    assert_eq!(state.value_or_insert("copy", "z").await.unwrap(), answers[0]);
}

async fn values_round_trip_and_persist(place: Place) {
    let state = place.open().await;
    assert_eq!(state.get_value("cursor").await.unwrap(), None);
    state.set_value("cursor", "m1").await.unwrap();
    state.set_value("cursor", "m2").await.unwrap();
    state.close().await;
    let state = place.open().await;
    assert_eq!(state.get_value("cursor").await.unwrap().as_deref(), Some("m2"));
}

async fn sync_succeeds_and_keeps_everything(place: Place) {
    let state = place.open().await;
    state.sync().await.unwrap();
    assert!(state.record_event("ev-1", 1, "task.assigned").await.unwrap());
    state.sync().await.unwrap();
    state.sync().await.unwrap();
    state.close().await;
    assert!(place.open().await.is_event_processed("ev-1").await.unwrap());
}

async fn a_fresh_state_has_no_position_until_an_event_or_a_head_is_recorded(place: Place) {
    let state = place.open().await;
    assert_eq!(state.stream_position().await.unwrap(), None);
    // The head of an empty log is a position too.
    state.record_stream_head(0).await.unwrap();
    assert_eq!(state.stream_position().await.unwrap(), Some(0));
    state.record_stream_head(40).await.unwrap();
    assert_eq!(state.stream_position().await.unwrap(), Some(40));
    // Events past the head move it on; a head behind it never moves it back.
    assert!(state.record_event("e41", 41, "message.new").await.unwrap());
    state.record_stream_head(7).await.unwrap();
    state.close().await;
    let state = place.open().await;
    assert_eq!(state.stream_position().await.unwrap(), Some(41));

    let other = place.open_as("other").await;
    assert_eq!(other.stream_position().await.unwrap(), None, "another agent's state starts fresh");
    assert!(other.record_event("e1", 1, "task.assigned").await.unwrap());
    assert_eq!(other.stream_position().await.unwrap(), Some(1));
}

// ---- retention ----

/// Runs test-only SQL on whichever store holds `state`: `$1`, `$2`… are the `numbers`, then the
/// `texts` (both databases take that placeholder). Returns the rows affected.
pub(super) async fn execute(state: &State, sql: String, numbers: &[i64], texts: &[&str]) -> u64 {
    // Test-only SQL, built from the fixed table and column names of the tests below.
    let sql = sqlx::AssertSqlSafe(sql);
    match &state.store {
        Backend::Sqlite(store) => {
            let mut query = sqlx::query(sql);
            for number in numbers {
                query = query.bind(*number);
            }
            for text in texts {
                query = query.bind(*text);
            }
            query.execute(store.pool()).await.unwrap().rows_affected()
        }
        Backend::Postgres(store) => {
            let mut query = sqlx::query(sql);
            for number in numbers {
                query = query.bind(*number);
            }
            for text in texts {
                query = query.bind(*text);
            }
            query.execute(store.pool()).await.unwrap().rows_affected()
        }
    }
}

/// Moves a row's time back by `age`, as if it had been written that long ago.
async fn age_row(state: &State, table: &str, time_column: &str, key_column: &str, key: &str, age: time::Duration) {
    let at = to_ms(OffsetDateTime::now_utc() - age);
    let sql = format!("UPDATE {table} SET {time_column} = $1 WHERE {key_column} = $2");
    assert!(execute(state, sql, &[at], &[key]).await > 0, "no row {key} in {table}");
}

async fn age_run(state: &State, run_id: &str, age: time::Duration) {
    age_row(state, "runs", "started_at_ms", "id", run_id, age + time::Duration::MINUTE).await;
    if state.get_run(run_id).await.unwrap().unwrap().finished_at.is_some() {
        age_row(state, "runs", "finished_at_ms", "id", run_id, age).await;
    }
}

pub(super) async fn count(state: &State, table: &str) -> i64 {
    let sql = sqlx::AssertSqlSafe(format!("SELECT COUNT(*) FROM {table}"));
    match &state.store {
        Backend::Sqlite(store) => sqlx::query_scalar(sql).fetch_one(store.pool()).await.unwrap(),
        Backend::Postgres(store) => sqlx::query_scalar(sql).fetch_one(store.pool()).await.unwrap(),
    }
}

pub(super) fn days_ago(days: i64) -> OffsetDateTime {
    OffsetDateTime::now_utc() - time::Duration::days(days)
}

async fn pruning_events_keeps_recent_ones_and_the_resume_point(place: Place) {
    let state = place.open().await;
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

async fn message_claims_go_only_when_the_caller_allows_and_only_old_ones(place: Place) {
    let state = place.open().await;
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

async fn notice_claims_stay_while_their_run_runs_or_their_day_is_recent(place: Place) {
    let state = place.open().await;
    let running = state.start_run(&key("task:t1"), "manual").await.unwrap();
    let finished = state.start_run(&key("task:t2"), "manual").await.unwrap();
    state.finish_run(&finished, &FinishRun::new(RunStatus::Failed)).await.unwrap();
    let today = OffsetDateTime::now_utc().date();
    let days: Vec<String> = [0, 1, 2, 3, 40].iter().map(|n| (today - time::Duration::days(*n)).to_string()).collect();
    for key in [running.as_str(), finished.as_str(), "run-long-gone"] {
        state.claim(ClaimKind::RunNotice, key).await.unwrap();
    }
    for day in &days {
        state.claim(ClaimKind::SpendNotice, &format!("{day}/task:t1")).await.unwrap();
        state.claim(ClaimKind::LimitNotice, &format!("{day}T10/reply_cap/thread:m1")).await.unwrap();
    }
    state.claim(ClaimKind::Message, "m1").await.unwrap();
    execute(&state, "UPDATE claims SET claimed_at_ms = $1".to_string(), &[to_ms(days_ago(60))], &[]).await;

    // Past days 3 and 40, the finished run and the unknown one go; the message claim is not a
    // notice claim.
    assert_eq!(state.prune_notice_claims(days_ago(30), today).await.unwrap(), 6);
    assert!(state.is_claimed(ClaimKind::RunNotice, &running).await.unwrap(), "a running run may end again");
    assert!(!state.is_claimed(ClaimKind::RunNotice, &finished).await.unwrap());
    assert!(!state.is_claimed(ClaimKind::RunNotice, "run-long-gone").await.unwrap());
    for (day, kept) in days.iter().zip([true, true, true, false, false]) {
        assert_eq!(state.is_claimed(ClaimKind::SpendNotice, &format!("{day}/task:t1")).await.unwrap(), kept, "{day}");
        let limit = format!("{day}T10/reply_cap/thread:m1");
        assert_eq!(state.is_claimed(ClaimKind::LimitNotice, &limit).await.unwrap(), kept, "{day}");
    }
    assert!(state.is_claimed(ClaimKind::Message, "m1").await.unwrap());
    // A claim younger than the cutoff stays whatever it is.
    state.claim(ClaimKind::RunNotice, "fresh").await.unwrap();
    assert_eq!(state.prune_notice_claims(days_ago(30), today).await.unwrap(), 0);
}

async fn pruning_runs_keeps_running_ones_and_the_newest_of_each_session(place: Place) {
    let state = place.open().await;
    let record = json!({"transcript": ["long"]});
    let finish = |status| FinishRun { record: Some(record.clone()), ..FinishRun::new(status) };
    let mut old = Vec::new();
    // task:a — two old completed runs: the older goes, the newer stays without its transcript.
    for _ in 0..2 {
        let id = state.start_run(&key("task:a"), "task.assigned TE-1").await.unwrap();
        state.finish_run(&id, &finish(RunStatus::Completed)).await.unwrap();
        old.push(id);
    }
    // task:b — an old stopped run, then an old interrupted one: both stay (the newest run, and
    // the newest that finished its work, which reconciliation asks about).
    let stopped = state.start_run(&key("task:b"), "task.assigned TE-2").await.unwrap();
    state.finish_run(&stopped, &finish(RunStatus::Stopped)).await.unwrap();
    let interrupted = state.start_run(&key("task:b"), "task.assigned TE-2").await.unwrap();
    state.save_run_record(&interrupted, &record).await.unwrap();
    state.mark_interrupted(&interrupted, "restarted").await.unwrap();
    // task:c — an old completed run and a running one started long ago: the running one is
    // untouched, transcript and all; the completed one is the session's newest finished work.
    let earlier = state.start_run(&key("task:c"), "task.assigned TE-3").await.unwrap();
    state.finish_run(&earlier, &finish(RunStatus::Completed)).await.unwrap();
    let running = state.start_run(&key("task:c"), "task.assigned TE-3").await.unwrap();
    state.save_run_record(&running, &record).await.unwrap();
    // thread:d — a recent failed run and a recent completed one: nothing is old enough.
    let recent: Vec<String> = {
        let mut ids = Vec::new();
        for status in [RunStatus::Failed, RunStatus::Completed] {
            let id = state.start_run(&key("thread:d"), "message.new d").await.unwrap();
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
        assert!(state.has_finished_run_for(&key(session)).await.unwrap(), "{session}");
    }
    assert!(state.has_run_since(&key("task:a"), days_ago(300)).await.unwrap());
    assert_eq!(state.prune_runs(days_ago(90)).await.unwrap(), (0, 0), "a second pass finds nothing");
}

async fn pruning_sessions_keeps_recent_ones_and_those_of_running_runs(place: Place) {
    let state = place.open().await;
    let messages = json!([{"role": "user", "content": "hi"}]);
    for session in ["thread:old", "thread:new", "task:busy"] {
        state.save_session(&key(session), &messages).await.unwrap();
    }
    state.start_run(&key("task:busy"), "task.assigned TE-9").await.unwrap();
    for session in ["thread:old", "task:busy"] {
        age_row(&state, "sessions", "updated_at_ms", "key", session, time::Duration::days(31)).await;
    }

    assert_eq!(state.prune_sessions(days_ago(30)).await.unwrap(), 1);
    assert!(state.load_session(&key("thread:old")).await.unwrap().is_none(), "the next message there starts fresh");
    assert!(state.load_session(&key("thread:new")).await.unwrap().is_some());
    assert!(state.load_session(&key("task:busy")).await.unwrap().is_some(), "its run will save it again");
}

async fn pruning_replies_never_reaches_into_the_caps_hour(place: Place) {
    let state = place.open().await;
    let now = OffsetDateTime::now_utc();
    // The recent one first: `record_reply` drops rows a day older than the one it records.
    state.record_reply(&key("thread:a"), now - time::Duration::minutes(20)).await.unwrap();
    state.record_reply(&key("thread:a"), now - time::Duration::DAY * 2).await.unwrap();
    assert_eq!(count(&state, "replies").await, 2);
    // Even a cutoff of "now" keeps the last hour, which the cap counts.
    assert_eq!(state.prune_replies(now).await.unwrap(), 1);
    assert_eq!(state.replies_in_last_hour(&key("thread:a")).await.unwrap(), 1);
}

async fn pruning_spend_forgets_old_days_only(place: Place) {
    let state = place.open().await;
    state.add_tokens(date!(2025 - 01 - 01), 10).await.unwrap();
    state.add_tokens(date!(2026 - 11 - 29), 20).await.unwrap();
    state.add_tokens(date!(2026 - 11 - 30), 30).await.unwrap();
    assert_eq!(state.prune_spend(date!(2026 - 11 - 30)).await.unwrap(), 2);
    assert_eq!(state.tokens_on(date!(2026 - 11 - 30)).await.unwrap(), 30);
    assert_eq!(state.tokens_on(date!(2025 - 01 - 01)).await.unwrap(), 0);
}

async fn a_whole_pass_counts_by_table_and_leaves_the_resume_point(place: Place) {
    let state = place.open().await;
    state.record_event("e1", 41, "message.new").await.unwrap();
    state.record_event("e2", 42, "message.new").await.unwrap();
    state.claim(ClaimKind::Message, "m1").await.unwrap();
    let run =
        state.start_claimed_run(ClaimKind::Message, "m2", &key("thread:m2"), "message.new m2").await.unwrap().unwrap();
    state
        .finish_run(&run, &FinishRun { record: Some(json!({})), ..FinishRun::new(RunStatus::Completed) })
        .await
        .unwrap();
    state.save_session(&key("thread:m2"), &json!([])).await.unwrap();
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
        Pruned { events: 2, claims: 2, runs: 0, run_records: 1, firings: 0, sessions: 1, replies: 0, spend_days: 1 },
        "{:?}",
        pruned.by_table()
    );
    assert_eq!(pruned.total(), 7);
    assert_eq!(state.last_seq().await.unwrap(), 42);
    assert_eq!(count(&state, "stream_position").await, 1);
    assert_eq!(count(&state, "runs").await, 1, "the newest run of the session stays");
    assert_eq!(state.prune(&plan).await.unwrap().total(), 0);
}

// ---- SQLite only: the file, its log, its errors ----

/// A state file written before runs could end `did_nothing` (migration 5 rebuilds the table to
/// allow it) keeps every run, with its columns and row order, and takes the new status.
#[tokio::test]
async fn a_state_file_from_before_did_nothing_keeps_its_runs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let options = sqlx::sqlite::SqliteConnectOptions::new().filename(&path).create_if_missing(true);
    let pool = sqlx::SqlitePool::connect_with(options).await.unwrap();
    super::sqlite::MIGRATOR.run_to(4, &pool).await.unwrap();
    for (id, status, started) in [("b", "failed", 20), ("a", "running", 20), ("c", "completed", 10)] {
        sqlx::query(
            "INSERT INTO runs (id, session_key, trigger, status, turns, outcome, started_at_ms, record, cost) \
             VALUES (?, 'task:t1', 'manual', ?, 2, 'why', ?, '{\"k\":1}', 0.5)",
        )
        .bind(id)
        .bind(status)
        .bind(started)
        .execute(&pool)
        .await
        .unwrap();
    }
    let refused = sqlx::query("UPDATE runs SET status = 'did_nothing' WHERE id = 'a'").execute(&pool).await;
    assert!(refused.is_err(), "the old schema refuses the new status");
    pool.close().await;

    let state = State::open(&path).await.unwrap();
    let runs = state.list_runs(10).await.unwrap();
    let ids: Vec<&str> = runs.iter().map(|run| run.id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c"], "newest first, ties in the order they were written");
    let failed = &runs[1];
    assert_eq!((failed.status, failed.turns, failed.outcome.as_deref()), (RunStatus::Failed, 2, Some("why")));
    assert_eq!((failed.record.clone(), failed.cost), (Some(json!({"k": 1})), Some(0.5)));
    assert_eq!(state.unfinished_runs().await.unwrap().len(), 1);
    assert!(state.finish_run("a", &FinishRun::new(RunStatus::DidNothing)).await.unwrap());
    assert_eq!(state.get_run("a").await.unwrap().unwrap().status, RunStatus::DidNothing);
}

#[tokio::test]
async fn open_creates_the_file_in_wal_mode() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fresh.db");
    assert!(!path.exists());
    let state = State::open(&path).await.unwrap();
    assert!(path.exists());
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode").fetch_one(sqlite_pool(&state)).await.unwrap();
    assert_eq!(mode, "wal");
    assert_eq!(state.last_seq().await.unwrap(), 0);
}

#[tokio::test]
async fn the_log_is_checkpointed_in_the_background_not_in_a_commit() {
    let dir = tempfile::tempdir().unwrap();
    let state = open_in(&dir).await;
    let per_commit: i64 = sqlx::query_scalar("PRAGMA wal_autocheckpoint").fetch_one(sqlite_pool(&state)).await.unwrap();
    assert_eq!(per_commit, 0, "no commit checkpoints");
    let database = dir.path().join("state.db");
    let size = || std::fs::metadata(&database).unwrap().len();
    // Give the first background checkpoint (of the migrations) time to pass, then write.
    tokio::time::sleep(picogent_support::sqlite::CHECKPOINT_EVERY * 2).await;
    let before = size();
    let big = json!([{"role": "user", "content": "x".repeat(200_000)}]);
    state.save_session(&key("task:t1"), &big).await.unwrap();
    assert_eq!(size(), before, "the commit went to the log only");
    let deadline = std::time::Instant::now() + picogent_support::sqlite::CHECKPOINT_EVERY * 5;
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
    let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous").fetch_one(sqlite_pool(&state)).await.unwrap();
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

// ---- PostgreSQL only: agents side by side, the schema, its errors ----

fn postgres_store(state: &State) -> &postgres::PostgresStore {
    match &state.store {
        Backend::Postgres(store) => store,
        Backend::Sqlite(_) => panic!("not a PostgreSQL state"),
    }
}

#[tokio::test]
async fn agents_in_one_postgres_database_see_only_their_own_rows() {
    test_postgres::with_schema(|schema| async move {
        let place = Place::Postgres(schema);
        let (mine, theirs) = (place.open_as("picogent").await, place.open_as("otherbot").await);
        let day = date!(2026 - 12 - 04);
        assert!(mine.record_event("ev-1", 7, "task.assigned").await.unwrap());
        assert!(theirs.record_event("ev-1", 3, "task.assigned").await.unwrap(), "the same event id, another agent");
        assert_eq!((mine.last_seq().await.unwrap(), theirs.last_seq().await.unwrap()), (7, 3));
        assert!(mine.claim(ClaimKind::Message, "m-1").await.unwrap());
        assert!(theirs.claim(ClaimKind::Message, "m-1").await.unwrap(), "a claim is the claiming agent's");
        mine.save_session(&key("task:t1"), &json!(["mine"])).await.unwrap();
        assert!(theirs.load_session(&key("task:t1")).await.unwrap().is_none());
        let run_id = mine.start_run(&key("task:t1"), "manual").await.unwrap();
        assert!(theirs.get_run(&run_id).await.unwrap().is_none());
        assert!(theirs.list_runs(10).await.unwrap().is_empty());
        assert!(theirs.unfinished_runs().await.unwrap().is_empty());
        assert!(!theirs.has_run_since(&key("task:t1"), OffsetDateTime::UNIX_EPOCH).await.unwrap());
        assert!(!theirs.mark_interrupted(&run_id, "not theirs").await.unwrap(), "nor can it close it");
        assert!(matches!(
            theirs.finish_run(&run_id, &FinishRun::new(RunStatus::Failed)).await.unwrap_err(),
            StateError::UnknownRun { .. }
        ));
        mine.add_tokens(day, 100).await.unwrap();
        assert_eq!(theirs.tokens_on(day).await.unwrap(), 0);
        mine.record_reply(&key("thread:m1"), OffsetDateTime::now_utc()).await.unwrap();
        assert_eq!(theirs.replies_in_last_hour(&key("thread:m1")).await.unwrap(), 0);
        mine.set_value("cursor", "m9").await.unwrap();
        assert_eq!(theirs.get_value("cursor").await.unwrap(), None);
        assert_eq!(mine.prune_events(OffsetDateTime::now_utc() + time::Duration::MINUTE).await.unwrap(), 1);
        assert!(theirs.is_event_processed("ev-1").await.unwrap(), "pruning is per agent too");

        // Reopened under the same identity, everything is there again.
        mine.close().await;
        let mine = place.open_as("picogent").await;
        assert_eq!(mine.last_seq().await.unwrap(), 7);
        assert!(!mine.claim(ClaimKind::Message, "m-1").await.unwrap());
        assert_eq!(mine.load_session(&key("task:t1")).await.unwrap().unwrap().messages, json!(["mine"]));
        assert_eq!(mine.unfinished_runs().await.unwrap().len(), 1);
        assert_eq!(mine.tokens_on(day).await.unwrap(), 100);
        assert_eq!(mine.get_value("cursor").await.unwrap().as_deref(), Some("m9"));
    })
    .await;
}

#[tokio::test]
async fn postgres_commits_are_synchronous_so_sync_has_nothing_to_flush() {
    test_postgres::with_schema(|schema| async move {
        let state = State::open_postgres(&schema.url(), AGENT).await.unwrap();
        assert_eq!(state.path(), None);
        let pool = postgres_store(&state).pool();
        let setting: String = sqlx::query_scalar("SHOW synchronous_commit").fetch_one(pool).await.unwrap();
        assert_eq!(setting, "on");
        let schema_in_use: String = sqlx::query_scalar("SELECT current_schema()::text").fetch_one(pool).await.unwrap();
        assert_eq!(schema_in_use, schema.name, "the URL's search_path is honoured");
    })
    .await;
}

/// Every table and column the SQLite store keeps exists in PostgreSQL, which adds the agent's
/// identity (and an insertion order for runs, SQLite's rowid): a migration added to one store
/// and not the other fails here.
#[tokio::test]
async fn both_stores_keep_the_same_tables_and_columns() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = open_in(&dir).await;
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT m.name, c.name FROM sqlite_master m, pragma_table_info(m.name) c \
         WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%' AND m.name != '_sqlx_migrations'",
    )
    .fetch_all(sqlite_pool(&sqlite))
    .await
    .unwrap();
    // The one column SQLite needs that PostgreSQL keys by agent instead.
    let mut expected: Vec<(String, String)> =
        rows.into_iter().filter(|(table, column)| !(table == "stream_position" && column == "singleton")).collect();
    let tables: std::collections::BTreeSet<String> = expected.iter().map(|(table, _)| table.clone()).collect();
    for table in &tables {
        expected.push((table.clone(), "agent".to_string()));
    }
    expected.push(("runs".to_string(), "row_order".to_string()));
    expected.sort();
    test_postgres::with_schema(move |schema| async move {
        let state = State::open_postgres(&schema.url(), AGENT).await.unwrap();
        let mut found: Vec<(String, String)> = sqlx::query_as(
            "SELECT table_name::text, column_name::text FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name != '_sqlx_migrations'",
        )
        .fetch_all(postgres_store(&state).pool())
        .await
        .unwrap();
        found.sort();
        assert_eq!(found, expected);
    })
    .await;
}

#[tokio::test]
async fn a_postgres_that_does_not_answer_is_a_clear_error_without_the_password() {
    // A port nothing listens on: the connection is refused at once.
    let unused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = unused.local_addr().unwrap().port();
    drop(unused);
    let url = format!("postgres://picogent:sekret@127.0.0.1:{port}/agents");
    let started = std::time::Instant::now();
    let error = State::open_postgres(&url, AGENT).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5), "said at once, not after the pool's retries");
    assert!(matches!(error, StateError::PostgresConnect { .. }), "{error:?}");
    let message = error.to_string();
    assert!(message.contains(&format!("postgres://picogent@127.0.0.1:{port}/agents")), "names where: {message}");
    assert!(message.contains("state.url") && message.contains("PGPASSWORD"), "says what to do: {message}");
    assert!(!message.contains("sekret"), "never the password: {message}");
}

#[tokio::test]
async fn a_url_postgres_cannot_read_is_a_clear_error() {
    let error = State::open_postgres("postgres://picogent@127.0.0.1:notaport/agents", AGENT).await.unwrap_err();
    assert!(matches!(error, StateError::PostgresUrl { .. }), "{error:?}");
    assert!(error.to_string().contains("state.url"), "{error}");
    for (url, expected) in [
        ("postgres://picogent:sekret@127.0.0.1/agents", "PGPASSWORD"),
        ("postgres://picogent@127.0.0.1/agents?password=sekret", "PGPASSWORD"),
        ("postgres://picogent@127.0.0.1:notaport/agents", "postgres://"),
    ] {
        let message = crate::check_postgres_url(url).unwrap_err().to_string();
        assert!(message.contains(expected), "{url}: {message}");
        assert!(!message.contains("sekret"), "{url}: {message}");
    }
    crate::check_postgres_url("postgres://picogent@db.internal:5433/agents?sslmode=disable").unwrap();
}

#[tokio::test]
async fn one_copy_per_agent_holds_the_postgres_lock() {
    test_postgres::with_schema(|schema| async move {
        let url = schema.url();
        let first = PostgresLock::take(&url, "picogent", false).await.unwrap();
        let error = PostgresLock::take(&url, "picogent", false).await.unwrap_err();
        assert!(matches!(error, StateError::PostgresLocked { .. }), "{error:?}");
        let message = error.to_string();
        assert!(message.contains("another picogent run") && message.contains("`picogent`"), "{message}");
        assert!(message.contains("one copy per agent"), "says what to do: {message}");
        let other = PostgresLock::take(&url, "otherbot", false).await.expect("another agent has its own lock");
        first.release().await;
        let again = PostgresLock::take(&url, "picogent", false).await.expect("released, it can be taken again");
        again.release().await;
        other.release().await;
    })
    .await;
}

#[tokio::test]
async fn the_postgres_lock_is_per_schema() {
    let (first, second) = (TestSchema::create().await, TestSchema::create().await);
    let held = PostgresLock::take(&first.url(), AGENT, false).await.unwrap();
    let beside = PostgresLock::take(&second.url(), AGENT, false).await;
    held.release().await;
    first.drop_schema().await;
    second.drop_schema().await;
    beside.expect("the same slug in another schema is another agent").release().await;
}

/// `?sslmode=require` connects over TLS when the server speaks it (Debian's PostgreSQL does, with
/// its own certificate), and fails saying so when it does not.
#[tokio::test]
async fn postgres_over_tls_when_the_url_asks_for_it() {
    test_postgres::with_schema(|schema| async move {
        let mut probe = schema.connection().await;
        let server_tls: String = sqlx::query_scalar("SHOW ssl").fetch_one(&mut probe).await.unwrap();
        let url = format!("{}&sslmode=require", schema.url());
        match State::open_postgres(&url, AGENT).await {
            Ok(state) => {
                assert_eq!(server_tls, "on");
                let over_tls: bool = sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
                    .fetch_one(postgres_store(&state).pool())
                    .await
                    .unwrap();
                assert!(over_tls, "the connection is encrypted");
                assert!(state.record_event("ev-1", 1, "task.assigned").await.unwrap());
            }
            Err(error) => {
                assert_eq!(server_tls, "off", "a server with TLS on must take sslmode=require: {error}");
                assert!(error.to_string().contains("TLS"), "{error}");
            }
        }
    })
    .await;
}
