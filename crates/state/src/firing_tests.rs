//! Scheduled firings on both stores: the firing log, the watermark, the firing's claim (alone and
//! with its run in the queue) and what retention keeps of them; then the move of all three from a
//! SQLite file into PostgreSQL (`state migrate`).

use time::OffsetDateTime;

use super::tests::{Place, count, days_ago, execute, key, on_both_stores, on_postgres, on_sqlite, test_postgres};
use super::*;

const AGENT: &str = "picogent";

on_both_stores!(
    a_firing_is_recorded_replaced_and_read_back,
    firings_after_a_time_come_oldest_first_and_limited,
    last_firings_come_newest_first,
    the_firing_of_a_run_is_found_by_its_id,
    the_watermark_only_moves_forward,
    concurrent_advances_leave_the_latest_watermark,
    a_firing_is_claimed_once_alone_or_with_its_run,
    an_unknown_outcome_or_watermark_reads_back_as_corrupt,
    pruning_firings_keeps_the_newest_of_each_job_and_those_of_running_runs,
    firing_claims_go_only_once_their_jobs_watermark_passed_them,
    a_whole_pass_prunes_firings_and_their_claims,
);

const JOB: &str = "standup-daily";

/// Sets the time the firing of `job` at `fire_at_ms` was last written to `at`.
async fn age_firing(state: &State, job: &str, fire_at_ms: i64, at: OffsetDateTime) {
    let sql = "UPDATE schedule_firings SET updated_at_ms = $1 WHERE fire_at_ms = $2 AND job = $3".to_string();
    assert_eq!(execute(state, sql, &[to_ms(at), fire_at_ms], &[job]).await, 1, "no firing {job}@{fire_at_ms}");
}

/// The scheduled times of `rows`, in their order.
fn times(rows: Vec<FiringRow>) -> Vec<i64> {
    rows.into_iter().map(|row| row.fire_at_ms).collect()
}

#[test]
fn outcomes_are_written_and_read_as_their_words() {
    for outcome in FiringOutcome::ALL {
        assert_eq!(outcome.as_str().parse::<FiringOutcome>(), Ok(outcome));
        assert_eq!(outcome.to_string(), outcome.as_str());
    }
    let error = "done".parse::<FiringOutcome>().unwrap_err();
    assert_eq!(error, UnknownFiringOutcome("done".to_string()));
    assert!(error.to_string().starts_with("unknown firing outcome \"done\""), "{error}");
    assert_eq!(firing_claim_key(JOB, 1_767_254_400_000), "standup-daily@1767254400000");
}

async fn a_firing_is_recorded_replaced_and_read_back(place: Place) {
    let state = place.open().await;
    assert_eq!(state.get_firing(JOB, 1_000).await.unwrap(), None);
    let before = now_ms();
    state.record_firing(JOB, 1_000, FiringOutcome::Queued, Some("run-1"), "").await.unwrap();
    let queued = state.get_firing(JOB, 1_000).await.unwrap().expect("recorded");
    assert_eq!(
        (queued.job.as_str(), queued.fire_at_ms, queued.outcome, queued.run_id.as_deref(), queued.detail.as_str()),
        (JOB, 1_000, FiringOutcome::Queued, Some("run-1"), "")
    );
    assert!(queued.updated_at_ms >= before);

    // The run's end replaces the whole record.
    state.record_firing(JOB, 1_000, FiringOutcome::Posted, Some("run-1"), "3 tasks moved").await.unwrap();
    let posted = state.get_firing(JOB, 1_000).await.unwrap().unwrap();
    assert_eq!((posted.outcome, posted.detail.as_str()), (FiringOutcome::Posted, "3 tasks moved"));
    state.record_firing(JOB, 1_000, FiringOutcome::Skipped, None, "missed while away").await.unwrap();
    assert_eq!(state.get_firing(JOB, 1_000).await.unwrap().unwrap().run_id, None, "replaced, run id and all");
    assert_eq!(count(&state, "schedule_firings").await, 1);

    // Another job's firing at the same time is its own, and both survive a reopen.
    state.record_firing("weekly-report", 1_000, FiringOutcome::Idle, None, "").await.unwrap();
    state.close().await;
    let state = place.open().await;
    assert_eq!(state.get_firing(JOB, 1_000).await.unwrap().unwrap().outcome, FiringOutcome::Skipped);
    assert_eq!(state.get_firing("weekly-report", 1_000).await.unwrap().unwrap().outcome, FiringOutcome::Idle);

    // `queued` written only where there is no record: a run that ended first keeps its outcome.
    state.record_firing(JOB, 2_000, FiringOutcome::Posted, Some("run-2"), "done").await.unwrap();
    state.record_firing_if_absent(JOB, 2_000, FiringOutcome::Queued, Some("run-2"), "").await.unwrap();
    assert_eq!(state.get_firing(JOB, 2_000).await.unwrap().unwrap().outcome, FiringOutcome::Posted);
    state.record_firing_if_absent(JOB, 3_000, FiringOutcome::Queued, Some("run-3"), "").await.unwrap();
    assert_eq!(state.get_firing(JOB, 3_000).await.unwrap().unwrap().outcome, FiringOutcome::Queued);
}

async fn firings_after_a_time_come_oldest_first_and_limited(place: Place) {
    let state = place.open().await;
    for at in [300, 100, 500, 200, 400] {
        state.record_firing(JOB, at, FiringOutcome::Posted, None, "").await.unwrap();
    }
    state.record_firing("other", 350, FiringOutcome::Posted, None, "").await.unwrap();

    assert_eq!(times(state.firings_after(JOB, 200, 10).await.unwrap()), [300, 400, 500], "after, not at");
    assert_eq!(times(state.firings_after(JOB, 0, 2).await.unwrap()), [100, 200]);
    assert_eq!(times(state.firings_after(JOB, 500, 10).await.unwrap()), Vec::<i64>::new());
    assert_eq!(times(state.firings_after("nobody", 0, 10).await.unwrap()), Vec::<i64>::new());
}

async fn last_firings_come_newest_first(place: Place) {
    let state = place.open().await;
    assert!(state.last_firings(JOB, 3).await.unwrap().is_empty());
    for at in [300, 100, 500, 200, 400] {
        state.record_firing(JOB, at, FiringOutcome::Posted, None, "").await.unwrap();
    }
    state.record_firing("other", 900, FiringOutcome::Posted, None, "").await.unwrap();
    assert_eq!(times(state.last_firings(JOB, 2).await.unwrap()), [500, 400]);
    assert_eq!(times(state.last_firings(JOB, 10).await.unwrap()), [500, 400, 300, 200, 100]);
}

async fn the_firing_of_a_run_is_found_by_its_id(place: Place) {
    let state = place.open().await;
    state.record_firing(JOB, 100, FiringOutcome::Posted, Some("run-1"), "").await.unwrap();
    state.record_firing(JOB, 200, FiringOutcome::Queued, Some("run-2"), "").await.unwrap();
    state.record_firing("other", 200, FiringOutcome::Skipped, None, "busy").await.unwrap();

    let found = state.firing_of_run("run-2").await.unwrap().expect("queued for run-2");
    assert_eq!((found.job.as_str(), found.fire_at_ms), (JOB, 200));
    assert_eq!(state.firing_of_run("run-1").await.unwrap().unwrap().fire_at_ms, 100);
    assert_eq!(state.firing_of_run("run-3").await.unwrap(), None, "a run no firing queued");
}

async fn the_watermark_only_moves_forward(place: Place) {
    let state = place.open().await;
    assert_eq!(state.schedule_through(JOB).await.unwrap(), None, "never considered");
    state.advance_schedule_through(JOB, 1_000).await.unwrap();
    assert_eq!(state.schedule_through(JOB).await.unwrap(), Some(1_000));
    state.advance_schedule_through(JOB, 500).await.unwrap();
    assert_eq!(state.schedule_through(JOB).await.unwrap(), Some(1_000), "never backward");
    state.advance_schedule_through(JOB, 1_000).await.unwrap();
    state.advance_schedule_through(JOB, 2_000).await.unwrap();
    assert_eq!(state.schedule_through(JOB).await.unwrap(), Some(2_000));
    // Compared as numbers, not as text ("999" > "2000" as text).
    state.advance_schedule_through(JOB, 999).await.unwrap();
    assert_eq!(state.schedule_through(JOB).await.unwrap(), Some(2_000));
    assert_eq!(state.schedule_through("other").await.unwrap(), None, "per job");
    assert_eq!(state.get_value("schedule.through.standup-daily").await.unwrap().as_deref(), Some("2000"));
    // How far a digest read the board is a watermark of its own, and moves the same way.
    assert_eq!(state.schedule_seen(JOB).await.unwrap(), None);
    state.advance_schedule_seen(JOB, 7_000).await.unwrap();
    state.advance_schedule_seen(JOB, 6_000).await.unwrap();
    assert_eq!(state.schedule_seen(JOB).await.unwrap(), Some(7_000));
    assert_eq!(state.schedule_through(JOB).await.unwrap(), Some(2_000), "apart from the firings' watermark");
    state.close().await;
    assert_eq!(place.open().await.schedule_through(JOB).await.unwrap(), Some(2_000), "kept across a restart");
}

async fn concurrent_advances_leave_the_latest_watermark(place: Place) {
    // Handles of their own, as replicas are (in PostgreSQL each has its pool).
    let mut replicas = Vec::new();
    for _ in 0..4 {
        replicas.push(place.open().await);
    }
    for round in 0..5_i64 {
        let advances = replicas.iter().enumerate().map(|(n, state)| {
            let through = round * 100 + [40, 10, 30, 20][n];
            async move { state.advance_schedule_through(JOB, through).await }
        });
        for advanced in futures::future::join_all(advances).await {
            advanced.unwrap();
        }
        assert_eq!(replicas[0].schedule_through(JOB).await.unwrap(), Some(round * 100 + 40), "round {round}");
    }
}

async fn a_firing_is_claimed_once_alone_or_with_its_run(place: Place) {
    let state = place.open().await;
    let first = firing_claim_key(JOB, 1_000);
    assert!(state.claim(ClaimKind::Firing, &first).await.unwrap());
    assert!(!state.claim(ClaimKind::Firing, &first).await.unwrap(), "a second replica finds it taken");
    assert!(state.is_claimed(ClaimKind::Firing, &first).await.unwrap());
    assert!(!state.is_claimed(ClaimKind::Message, &first).await.unwrap(), "the kind is part of the claim");

    // Queued with its run in one transaction: the second asker writes nothing.
    let (_, queue) = state.for_holder("r1", false);
    let second = firing_claim_key(JOB, 2_000);
    let (one, two) = (key("thread:digest-1"), key("thread:digest-2"));
    assert!(matches!(queue.enqueue(&firing_run(&one, &second)).await.unwrap(), Enqueued::Queued(_)));
    assert_eq!(queue.enqueue(&firing_run(&two, &second)).await.unwrap(), Enqueued::Handled);
    assert_eq!(queue.queued().await.unwrap().len(), 1);
    assert!(!state.claim(ClaimKind::Firing, &second).await.unwrap());
}

/// A firing's run, queued with the firing's claim.
fn firing_run<'a>(session_key: &'a SessionKey, claim_key: &'a str) -> QueuedRun<'a> {
    QueuedRun {
        session_key,
        trigger: "schedule standup-daily",
        request: "{}",
        claim: Some((ClaimKind::Firing, claim_key)),
        inputs: &[],
        behind: false,
    }
}

async fn an_unknown_outcome_or_watermark_reads_back_as_corrupt(place: Place) {
    let state = place.open().await;
    state.record_firing(JOB, 100, FiringOutcome::Posted, Some("run-1"), "").await.unwrap();
    let sql = "UPDATE schedule_firings SET outcome = $1".to_string();
    assert_eq!(execute(&state, sql, &[], &["exploded"]).await, 1);
    let corrupt = |error: StateError| match error {
        StateError::Corrupt { field, message } => format!("{field}: {message}"),
        other => panic!("not a corrupt row: {other}"),
    };
    let message = corrupt(state.get_firing(JOB, 100).await.unwrap_err());
    assert!(message.starts_with("schedule_firings.outcome: unknown firing outcome \"exploded\""), "{message}");
    corrupt(state.last_firings(JOB, 5).await.unwrap_err());
    corrupt(state.firings_after(JOB, 0, 5).await.unwrap_err());
    corrupt(state.firing_of_run("run-1").await.unwrap_err());

    state.set_value("schedule.through.standup-daily", "yesterday").await.unwrap();
    let message = corrupt(state.schedule_through(JOB).await.unwrap_err());
    assert!(message.contains("\"yesterday\""), "{message}");
}

async fn pruning_firings_keeps_the_newest_of_each_job_and_those_of_running_runs(place: Place) {
    let state = place.open().await;
    let long_ago = days_ago(100);
    // standup-daily: three old firings; the newest stays, whatever its age.
    for at in [100, 200, 300] {
        state.record_firing(JOB, at, FiringOutcome::Posted, None, "").await.unwrap();
        age_firing(&state, JOB, at, long_ago).await;
    }
    // weekly: its one old firing is its newest.
    state.record_firing("weekly", 100, FiringOutcome::Failed, None, "model down").await.unwrap();
    age_firing(&state, "weekly", 100, long_ago).await;
    // busy: an old firing whose run still runs, and a newer one; and a recent firing that stays.
    let running = state.start_run(&key("thread:busy"), "schedule busy").await.unwrap();
    state.record_firing("busy", 100, FiringOutcome::Queued, Some(&running), "").await.unwrap();
    age_firing(&state, "busy", 100, long_ago).await;
    state.record_firing("busy", 150, FiringOutcome::Posted, None, "").await.unwrap();
    age_firing(&state, "busy", 150, long_ago).await;
    state.record_firing("busy", 200, FiringOutcome::Posted, None, "").await.unwrap();

    assert_eq!(state.prune_firings(days_ago(90)).await.unwrap(), 3, "100 and 200 of standup-daily, 150 of busy");
    assert_eq!(times(state.last_firings(JOB, 10).await.unwrap()), [300], "the job's newest firing stays");
    assert_eq!(times(state.last_firings("weekly", 10).await.unwrap()), [100]);
    assert_eq!(times(state.last_firings("busy", 10).await.unwrap()), [200, 100], "its run may still post");
    assert_eq!(state.firing_of_run(&running).await.unwrap().unwrap().fire_at_ms, 100);
    assert_eq!(state.prune_firings(days_ago(90)).await.unwrap(), 0, "a second pass finds nothing");
}

async fn firing_claims_go_only_once_their_jobs_watermark_passed_them(place: Place) {
    let state = place.open().await;
    // Jobs `a` and `a@b`: a name may hold `@`, and neither's watermark reaches the other's claims.
    let keys = [
        firing_claim_key("a", 100),
        firing_claim_key("a", 200),
        firing_claim_key("a", 300),
        firing_claim_key("a@b", 150),
        firing_claim_key("a@b", 50),
        firing_claim_key("never-advanced", 100),
    ];
    for key in &keys {
        state.claim(ClaimKind::Firing, key).await.unwrap();
    }
    state.claim(ClaimKind::Message, "a@100").await.unwrap();
    execute(&state, "UPDATE claims SET claimed_at_ms = $1".to_string(), &[to_ms(days_ago(60))], &[]).await;
    state.advance_schedule_through("a", 200).await.unwrap();
    state.advance_schedule_through("a@b", 100).await.unwrap();

    assert_eq!(state.prune_firing_claims(days_ago(30)).await.unwrap(), 3, "a@100, a@200 and a@b@50");
    let kept: Vec<bool> = {
        let mut kept = Vec::new();
        for key in &keys {
            kept.push(state.is_claimed(ClaimKind::Firing, key).await.unwrap());
        }
        kept
    };
    assert_eq!(kept, [false, false, true, true, false, true], "{keys:?}");
    assert!(state.is_claimed(ClaimKind::Message, "a@100").await.unwrap(), "another kind's claim stays");

    // A claim younger than the cutoff stays, even behind the watermark.
    state.claim(ClaimKind::Firing, &firing_claim_key("a", 10)).await.unwrap();
    assert_eq!(state.prune_firing_claims(days_ago(30)).await.unwrap(), 0);
    assert!(state.is_claimed(ClaimKind::Firing, &firing_claim_key("a", 10)).await.unwrap());
    // The watermark moves past the rest of `a`'s old claims: they may go now.
    state.advance_schedule_through("a", 300).await.unwrap();
    assert_eq!(state.prune_firing_claims(days_ago(30)).await.unwrap(), 1);
}

async fn a_whole_pass_prunes_firings_and_their_claims(place: Place) {
    let state = place.open().await;
    for at in [100, 200] {
        state.claim(ClaimKind::Firing, &firing_claim_key(JOB, at)).await.unwrap();
        state.record_firing(JOB, at, FiringOutcome::Posted, None, "").await.unwrap();
    }
    state.advance_schedule_through(JOB, 200).await.unwrap();
    let ahead = OffsetDateTime::now_utc() + time::Duration::MINUTE;
    let plan = PrunePlan {
        now: OffsetDateTime::now_utc(),
        events_before: ahead,
        claims_before: ahead,
        message_claims_before: None,
        runs_before: ahead,
        sessions_before: ahead,
    };
    let pruned = state.prune(&plan).await.unwrap();
    assert_eq!((pruned.claims, pruned.firings), (2, 1), "{:?}", pruned.by_table());
    assert!(pruned.by_table().contains(&("schedule_firings", 1)));
    assert_eq!(times(state.last_firings(JOB, 10).await.unwrap()), [200]);
    assert_eq!(state.schedule_through(JOB).await.unwrap(), Some(200), "the watermark is never pruned");
    assert_eq!(state.prune(&plan).await.unwrap().total(), 0);
}

// ---- the move into PostgreSQL ----

/// `state migrate` brings the firing log, the firing claims and the watermarks along, so the
/// agent on PostgreSQL fires nothing a second time and shows what it fired.
#[tokio::test]
async fn a_migration_moves_firings_claims_and_watermarks() {
    test_postgres::with_schema(|schema| async move {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("picogent.db");
        let file = State::open(&path).await.unwrap();
        file.record_firing(JOB, 100, FiringOutcome::Posted, Some("run-1"), "3 tasks moved").await.unwrap();
        file.record_firing(JOB, 200, FiringOutcome::Skipped, None, "missed while away").await.unwrap();
        file.claim(ClaimKind::Firing, &firing_claim_key(JOB, 200)).await.unwrap();
        file.advance_schedule_through(JOB, 200).await.unwrap();
        let written = file.last_firings(JOB, 10).await.unwrap();
        file.close().await;

        let migrated = migrate::sqlite_to_postgres(&path, &schema.url(), AGENT).await.unwrap();
        assert_eq!(migrated.tables.last(), Some(&("schedule_firings", 2)), "{:?}", migrated.tables);

        let moved = State::open_postgres(&schema.url(), AGENT).await.unwrap();
        assert_eq!(moved.last_firings(JOB, 10).await.unwrap(), written, "row for row");
        assert_eq!(moved.firing_of_run("run-1").await.unwrap().unwrap().detail, "3 tasks moved");
        assert_eq!(moved.schedule_through(JOB).await.unwrap(), Some(200));
        assert!(!moved.claim(ClaimKind::Firing, &firing_claim_key(JOB, 200)).await.unwrap(), "fired once only");
        moved.close().await;

        // A second move into the same schema is refused, naming the firing log among the tables.
        let again = dir.path().join("again.db");
        let other = State::open(&again).await.unwrap();
        other.record_firing(JOB, 300, FiringOutcome::Idle, None, "").await.unwrap();
        other.close().await;
        let refused = migrate::sqlite_to_postgres(&again, &schema.url(), AGENT).await.unwrap_err().to_string();
        assert!(refused.contains("schedule_firings"), "{refused}");
    })
    .await;
}
