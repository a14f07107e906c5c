//! The run queue, the stream's lease and the heartbeats, on both stores: the queue a single copy
//! uses in its SQLite file is the one replicas share in PostgreSQL. Each test plays two or three
//! holders of one agent's queue as handles on one place; the tests of what only replicas share
//! (spend, replies, a conversation fenced by its holder) are PostgreSQL's, at the end.

use std::time::Duration;

use time::OffsetDateTime;

use super::tests::{Place, key, on_both_stores, on_postgres, on_sqlite, test_postgres};
use super::*;

const AGENT: &str = "picogent";

on_both_stores!(
    one_holder_holds_the_stream_until_it_lets_go_or_its_lease_runs_out,
    of_holders_asking_at_once_exactly_one_gets_the_stream,
    a_queued_run_goes_to_one_holder_and_back_to_the_queue_when_its_lease_lapses,
    one_run_per_session_and_each_thing_once,
    a_run_queued_behind_its_session_waits_until_the_sessions_runs_ended,
    an_input_reaches_a_run_before_its_end_or_is_refused_after_it,
    a_copy_that_holds_the_state_to_itself_resumes_what_it_left_running,
    holders_see_each_others_heartbeats,
);

async fn holders_on(place: &Place, ids: &[&str]) -> Vec<(State, RunQueue)> {
    let state = place.open().await;
    ids.iter().map(|id| state.for_holder(id, true)).collect()
}

fn queued<'a>(session_key: &'a SessionKey, claim: Option<(ClaimKind, &'a str)>) -> QueuedRun<'a> {
    QueuedRun { session_key, trigger: "test", request: "{}", claim, inputs: &[], behind: false }
}

async fn one_holder_holds_the_stream_until_it_lets_go_or_its_lease_runs_out(place: Place) {
    let holders = holders_on(&place, &["r1", "r2"]).await;
    let (r1, r2) = (&holders[0].1, &holders[1].1);
    let lease = Duration::from_millis(400);
    let first = r1.acquire_stream(lease).await.unwrap().expect("free: r1 takes it");
    assert_eq!(r2.acquire_stream(lease).await.unwrap(), None, "held by r1");
    assert!(r1.renew_stream(lease).await.unwrap());
    assert!(!r2.renew_stream(lease).await.unwrap(), "only the holder renews");
    assert_eq!(r1.stream_holder().await.unwrap(), Some(("r1".to_string(), first)));
    // r1 stops renewing: once the lease ran out by the store's clock, r2 takes it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let second = r2.acquire_stream(lease).await.unwrap().expect("ran out: r2 takes it");
    assert!(second > first, "a new holder gets a higher fencing number");
    assert!(!r1.renew_stream(lease).await.unwrap(), "r1 learns it lost the lease");
    // A clean stop hands it over at once, and the fencing number still grows.
    r2.release_stream().await.unwrap();
    assert_eq!(r2.stream_holder().await.unwrap(), None);
    let third = r1.acquire_stream(lease).await.unwrap().expect("let go: r1 takes it");
    assert!(third > second);
}

async fn of_holders_asking_at_once_exactly_one_gets_the_stream(place: Place) {
    let holders = holders_on(&place, &["r1", "r2", "r3", "r4", "r5"]).await;
    let asks = holders.iter().map(|(_, holder)| holder.acquire_stream(Duration::from_secs(30)));
    let got = futures::future::join_all(asks).await.into_iter().filter(|answer| matches!(answer, Ok(Some(_))));
    assert_eq!(got.count(), 1);
}

async fn a_queued_run_goes_to_one_holder_and_back_to_the_queue_when_its_lease_lapses(place: Place) {
    let holders = holders_on(&place, &["r1", "r2", "r3"]).await;
    let (r1, r2, r3) = (&holders[0].1, &holders[1].1, &holders[2].1);
    for n in 0..6 {
        let session = key(&format!("thread:{n}"));
        assert!(matches!(r1.enqueue(&queued(&session, None)).await.unwrap(), Enqueued::Queued(_)));
    }
    let lease = Duration::from_millis(300);
    let claims = futures::future::join_all([r1, r2, r3].map(|holder| holder.claim_runs(4, lease))).await;
    let claims: Vec<Vec<String>> =
        claims.into_iter().map(|claimed| claimed.unwrap().into_iter().map(|run| run.id).collect()).collect();
    let mut ids: Vec<&String> = claims.iter().flatten().collect();
    assert_eq!(ids.len(), 6, "every run claimed");
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 6, "and each by one holder only");
    // r2 dies: nobody renews its runs; r1 renews its own, r3 lets go at its shutdown.
    let r1_runs = claims[0].clone();
    assert_eq!(r3.release_runs().await.unwrap() as usize, claims[2].len());
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(r1.renew_runs(&r1_runs, Duration::from_secs(30)).await.unwrap().len(), r1_runs.len());
    // r1's leases lapsed too, but nobody took its runs, so it still holds them and renews
    // them; claiming, it takes the others' runs and never its own back.
    let again = r1.claim_runs(10, Duration::from_secs(30)).await.unwrap();
    assert!(again.iter().all(|run| run.attempts == 2), "taken again, to resume: {again:?}");
    assert_eq!(again.len(), 6 - r1_runs.len(), "r2's and r3's runs, not its own");
    assert!(r1.claim_runs(10, Duration::from_secs(30)).await.unwrap().is_empty(), "nothing left");
    // r2 comes back from a pause: its runs are r1's now.
    let taken: Vec<String> = again.iter().map(|run| run.id.clone()).collect();
    assert!(r2.renew_runs(&taken, lease).await.unwrap().is_empty(), "r2 learns it lost them");
}

async fn one_run_per_session_and_each_thing_once(place: Place) {
    let holders = holders_on(&place, &["r1", "r2"]).await;
    let (r1, r2) = (&holders[0].1, &holders[1].1);
    let session = key("thread:a");
    let run = queued(&session, None);
    let asks = [r1, r2, r1, r2].map(|holder| holder.enqueue(&run));
    let answers: Vec<Enqueued> = futures::future::join_all(asks).await.into_iter().map(Result::unwrap).collect();
    let queued_ids: Vec<&String> =
        answers.iter().filter_map(|answer| if let Enqueued::Queued(id) = answer { Some(id) } else { None }).collect();
    assert_eq!(queued_ids.len(), 1, "{answers:?}");
    assert!(answers.iter().all(|answer| match answer {
        Enqueued::Busy(id) => id == queued_ids[0],
        _ => true,
    }));
    // A claim taken before: handled, nothing written.
    assert!(matches!(
        r1.enqueue(&queued(&key("thread:b"), Some((ClaimKind::Message, "m1")))).await.unwrap(),
        Enqueued::Queued(_)
    ));
    assert_eq!(
        r2.enqueue(&queued(&key("thread:c"), Some((ClaimKind::Message, "m1")))).await.unwrap(),
        Enqueued::Handled
    );
    assert!(r2.active_run(&key("thread:c")).await.unwrap().is_none());
    let waiting: Vec<String> = r1.queued().await.unwrap().into_iter().map(|run| run.session_key.to_string()).collect();
    assert_eq!(waiting, ["thread:a", "thread:b"], "the queue in order");
}

async fn a_run_queued_behind_its_session_waits_until_the_sessions_runs_ended(place: Place) {
    let holders = holders_on(&place, &["r1", "r2"]).await;
    let ((state1, r1), r2) = (&holders[0], &holders[1].1);
    let Enqueued::Queued(first) = r1.enqueue(&queued(&key("thread:q"), None)).await.unwrap() else { panic!() };
    assert_eq!(r1.claim_runs(5, Duration::from_secs(30)).await.unwrap()[0].id, first);
    let session = key("thread:q");
    let behind = QueuedRun { behind: true, ..queued(&session, Some((ClaimKind::Message, "m2"))) };
    let Enqueued::Queued(second) = r2.enqueue(&behind).await.unwrap() else { panic!("queued behind") };
    let Enqueued::Queued(third) = r2.enqueue(&behind_of(&key("thread:q"), "m3")).await.unwrap() else { panic!() };
    let Enqueued::Queued(other) = r2.enqueue(&queued(&key("thread:other"), None)).await.unwrap() else { panic!() };
    let runs: Vec<String> = r2.session_runs(&key("thread:q")).await.unwrap().into_iter().map(|(id, _)| id).collect();
    assert_eq!(runs, [first.clone(), second.clone(), third.clone()], "oldest first");
    // While the first runs, neither run behind it is taken; another session's run is.
    let claimed = r2.claim_runs(5, Duration::from_secs(30)).await.unwrap();
    assert_eq!(claimed.iter().map(|run| &run.id).collect::<Vec<_>>(), [&other]);
    assert!(state1.finish_run(&first, &FinishRun::new(RunStatus::Completed)).await.unwrap());
    // Then one at a time, in order.
    let claimed = r2.claim_runs(5, Duration::from_secs(30)).await.unwrap();
    assert_eq!(claimed.iter().map(|run| &run.id).collect::<Vec<_>>(), [&second]);
    assert!(r2.claim_runs(5, Duration::from_secs(30)).await.unwrap().is_empty(), "the third waits for the second");
}

fn behind_of<'a>(session_key: &'a SessionKey, message_id: &'a str) -> QueuedRun<'a> {
    QueuedRun { behind: true, ..queued(session_key, Some((ClaimKind::Message, message_id))) }
}

async fn an_input_reaches_a_run_before_its_end_or_is_refused_after_it(place: Place) {
    let holders = holders_on(&place, &["r1", "r2"]).await;
    let (state1, r1) = &holders[0];
    let r2 = &holders[1].1;
    let Enqueued::Queued(id) = r1.enqueue(&queued(&key("task:t1"), None)).await.unwrap() else { panic!() };
    assert_eq!(r2.send_input(&id, InputKind::Steer, "also check the docs", Some("m7")).await.unwrap(), Some(1));
    assert!(state1.is_claimed(ClaimKind::Message, "m7").await.unwrap(), "claimed with its delivery");
    let claimed = r1.claim_runs(1, Duration::from_secs(30)).await.unwrap();
    assert_eq!(claimed[0].id, id);
    assert_eq!(r2.send_input(&id, InputKind::Stop, "@alice asked me to stop", None).await.unwrap(), Some(2));
    let inputs = r1.inputs(std::slice::from_ref(&id)).await.unwrap();
    let kinds: Vec<(i64, InputKind)> = inputs.iter().map(|input| (input.n, input.kind)).collect();
    assert_eq!(kinds, [(1, InputKind::Steer), (2, InputKind::Stop)]);
    // Only the holder ends it.
    let (state2, _) = &holders[1];
    let finish = FinishRun::new(RunStatus::Stopped);
    assert!(!state2.finish_run(&id, &finish).await.unwrap(), "r2 does not hold it");
    assert!(state1.finish_run(&id, &finish).await.unwrap());
    assert_eq!(r2.send_input(&id, InputKind::Steer, "too late", Some("m8")).await.unwrap(), None, "ended: refused");
    assert!(!state1.is_claimed(ClaimKind::Message, "m8").await.unwrap(), "and nothing written");
    // A queued run is stopped where it waits.
    let Enqueued::Queued(waiting) = r1.enqueue(&queued(&key("task:t2"), None)).await.unwrap() else { panic!() };
    assert_eq!(r2.stop_queued(&waiting, "the task was unassigned").await.unwrap().as_deref(), Some("{}"));
    assert_eq!(r2.stop_queued(&waiting, "again").await.unwrap(), None, "stopped once");
    assert!(r1.claim_runs(5, Duration::from_secs(30)).await.unwrap().is_empty());
    assert_eq!(state1.get_run(&waiting).await.unwrap().unwrap().status, RunStatus::Stopped);
}

async fn a_copy_that_holds_the_state_to_itself_resumes_what_it_left_running(place: Place) {
    let state = place.open().await;
    let (_, before) = state.for_holder("before-the-crash", false);
    let Enqueued::Queued(id) = before.enqueue(&queued(&key("task:t9"), None)).await.unwrap() else { panic!() };
    assert_eq!(before.claim_runs(1, Duration::from_secs(600)).await.unwrap().len(), 1);
    // The process dies holding a long lease; the next start finds the run still leased.
    let (_, after) = state.for_holder("after-the-restart", false);
    assert!(after.claim_runs(1, Duration::from_secs(600)).await.unwrap().is_empty(), "leased to the dead one");
    assert_eq!(after.release_all().await.unwrap(), 1);
    let resumed = after.claim_runs(1, Duration::from_secs(600)).await.unwrap();
    assert_eq!((resumed[0].id.as_str(), resumed[0].attempts), (id.as_str(), 2), "resumed under its own id");
}

async fn holders_see_each_others_heartbeats(place: Place) {
    let holders = holders_on(&place, &["r1", "r2"]).await;
    let (r1, r2) = (&holders[0].1, &holders[1].1);
    let beat = |holds_stream| Beat {
        host: "box",
        http: Some("127.0.0.1:9464"),
        started_at_ms: 1,
        holds_stream,
        runs: 2,
        slots: 4,
    };
    r1.beat(&beat(true)).await.unwrap();
    r2.beat(&beat(false)).await.unwrap();
    let seen = r2.others(Duration::from_secs(10)).await.unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!((seen[0].id.as_str(), seen[0].holds_stream, seen[0].runs), ("r1", true, 2));
    r1.leave().await.unwrap();
    assert!(r2.others(Duration::from_secs(10)).await.unwrap().is_empty());
}

async fn replicas_on(schema: &test_postgres::TestSchema, ids: &[&str]) -> Vec<(State, RunQueue)> {
    let state = State::open_postgres(&schema.url(), AGENT).await.unwrap();
    ids.iter().map(|id| state.for_holder(id, true)).collect()
}

#[tokio::test]
async fn replicas_count_one_daily_spend() {
    test_postgres::with_schema(|schema| async move {
        let replicas = replicas_on(&schema, &["r1", "r2"]).await;
        let (state1, state2) = (&replicas[0].0, &replicas[1].0);
        let today = OffsetDateTime::now_utc().date();
        assert_eq!(state1.spend_today().await.unwrap().tokens, 0);
        state2.add_spend(today, Spend { tokens: 700, cost: 0.5 }).await.unwrap();
        state1.add_spend(today, Spend { tokens: 300, cost: 0.25 }).await.unwrap();
        assert_eq!(state1.spend_today().await.unwrap(), Spend { tokens: 1000, cost: 0.75 }, "r2's spend counts");
        assert_eq!(state2.spend_today().await.unwrap().tokens, 1000, "and r1's");
        // The reply log is one too.
        state2.record_reply(&key("thread:x"), OffsetDateTime::now_utc()).await.unwrap();
        assert_eq!(state1.replies_in_last_hour(&key("thread:x")).await.unwrap(), 1);
    })
    .await;
}

#[tokio::test]
async fn the_reply_cap_is_one_count_across_replicas_posting_at_once() {
    test_postgres::with_schema(|schema| async move {
        let replicas = replicas_on(&schema, &["r1", "r2", "r3"]).await;
        let busy = key("thread:busy");
        let posts = (0..12).map(|n| replicas[n % 3].0.record_reply_within_hour(&busy, 5));
        let answers: Vec<Option<u32>> =
            futures::future::join_all(posts).await.into_iter().map(Result::unwrap).collect();
        assert_eq!(answers.iter().filter(|answer| answer.is_none()).count(), 5, "{answers:?}");
        assert!(answers.iter().flatten().all(|count| *count == 5), "{answers:?}");
        assert_eq!(replicas[0].0.replies_in_last_hour(&key("thread:busy")).await.unwrap(), 5);
    })
    .await;
}

#[tokio::test]
async fn a_replica_that_lost_its_run_saves_neither_its_conversation_nor_its_end() {
    test_postgres::with_schema(|schema| async move {
        let replicas = replicas_on(&schema, &["r1", "r2"]).await;
        let ((state1, r1), (state2, r2)) = (&replicas[0], &replicas[1]);
        let Enqueued::Queued(id) = r1.enqueue(&queued(&key("thread:s"), None)).await.unwrap() else { panic!() };
        assert_eq!(r1.claim_runs(1, Duration::from_millis(200)).await.unwrap().len(), 1);
        let said = |text: &str| serde_json::json!([{"role": "user", "content": text}]);
        assert!(state1.save_session_of_run(&id, &key("thread:s"), &said("r1, turn 1")).await.unwrap());
        // r1 pauses past its lease; r2 resumes the run and ends it.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(r2.claim_runs(1, Duration::from_secs(30)).await.unwrap()[0].id, id);
        assert!(state2.save_session_of_run(&id, &key("thread:s"), &said("r2's answer")).await.unwrap());
        // r1 wakes and finishes what it had: neither its conversation nor its end is written.
        assert!(!state1.save_session_of_run(&id, &key("thread:s"), &said("r1's stale answer")).await.unwrap());
        assert!(!state1.finish_run(&id, &FinishRun::new(RunStatus::Completed)).await.unwrap());
        let stored = state1.load_session(&key("thread:s")).await.unwrap().unwrap();
        assert_eq!(stored.messages, said("r2's answer"));
        assert!(state2.finish_run(&id, &FinishRun::new(RunStatus::Completed)).await.unwrap());
        // Once the run ended, no replica writes its conversation any more.
        assert!(!state2.save_session_of_run(&id, &key("thread:s"), &said("late")).await.unwrap());
        // A single copy is not fenced.
        let single = State::open_postgres(&schema.url(), "other").await.unwrap();
        assert!(single.save_session_of_run("no-such-run", &key("thread:s"), &said("mine")).await.unwrap());
    })
    .await;
}
