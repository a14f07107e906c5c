//! The tracker client's retries against real faults: a fault proxy in front of the real board
//! answers 503/429, drops connections and holds answers past the client's timeout. Counting
//! requests at the proxy shows what was retried and what was not.

mod support;

use std::time::Duration;

use picogent::tracker::model::{CreateTask, MessageQuery, SendMessage};
use picogent::tracker::{TrackerClient, TrackerError};
use support::fault_proxy::{Fault, FaultProxy};
use support::{TestBoard, client_at, fast_retry};

/// The client's timeout; the proxy's slow answers take far longer.
const TIMEOUT_MS: u64 = 2_000;
const SLOW: Duration = Duration::from_secs(20);

async fn board_and_proxy() -> (TestBoard, FaultProxy) {
    let board = TestBoard::start().await;
    let proxy = FaultProxy::start(board.handle.addr()).await;
    (board, proxy)
}

/// A client acting as `member`, talking through the proxy.
fn through(proxy: &FaultProxy, board: &TestBoard, member: &str, max_attempts: u32) -> TrackerClient {
    client_at(&proxy.url(), board.token(member), TIMEOUT_MS, fast_retry(max_attempts))
}

fn answer(status: u16, retry_after: Option<&str>) -> Fault {
    Fault::Answer { status, retry_after: retry_after.map(str::to_string) }
}

#[tokio::test]
async fn reads_succeed_after_transient_faults() {
    let (board, proxy) = board_and_proxy().await;
    let client = through(&proxy, &board, "alice", 5);
    let cases: Vec<(&str, Vec<Fault>)> = vec![
        ("503 with Retry-After", vec![answer(503, Some("0.01"))]),
        ("429 with Retry-After", vec![answer(429, Some("0.01"))]),
        ("429 without Retry-After", vec![answer(429, None)]),
        ("502 then 504", vec![answer(502, None), answer(504, None)]),
        ("a dropped connection", vec![Fault::DropRequest]),
        ("an answer past the timeout", vec![Fault::DelayAnswer(SLOW)]),
    ];
    for (name, faults) in cases {
        proxy.reset();
        let n_faults = faults.len();
        proxy.push(faults);
        let projects = client.list_projects().await.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(projects[0].slug, "team", "{name}");
        let seen = proxy.seen();
        assert_eq!(seen.len(), n_faults + 1, "{name}: {seen:?}");
        assert!(seen.iter().all(|r| r.method == "GET" && r.target == "/api/projects"), "{name}: {seen:?}");
        assert_eq!(seen.last().unwrap().fault, Fault::Pass, "{name}");
    }
}

#[tokio::test]
async fn a_retried_send_message_creates_one_message() {
    let (board, proxy) = board_and_proxy().await;
    let alice_direct = board.client("alice");
    let chat_id = alice_direct.get_project("team").await.unwrap().chat_id;
    let client = through(&proxy, &board, "alice", 5);

    // The first attempt reaches the board, which stores the message; the answer is lost (the
    // connection is dropped, or held past the timeout). The retry carries the same key.
    for (index, fault) in [Fault::DropAnswer, Fault::DelayAnswer(SLOW)].into_iter().enumerate() {
        proxy.reset();
        proxy.push([fault.clone()]);
        let content = format!("exactly once {index}");
        let body = SendMessage { content: content.clone(), chat_id: Some(chat_id.clone()), ..Default::default() };
        let sent = client.send_message(&body, None).await.unwrap_or_else(|e| panic!("{fault:?}: {e}"));
        let seen = proxy.seen();
        assert_eq!(seen.len(), 2, "{fault:?}: {seen:?}");
        let key = seen[0].idempotency_key.clone().expect("a POST carries an Idempotency-Key");
        assert_eq!(seen[1].idempotency_key.as_deref(), Some(key.as_str()), "the retry reuses the key");

        let query = MessageQuery { chat_id: Some(chat_id.clone()), limit: Some(200), ..Default::default() };
        let stored: Vec<_> =
            alice_direct.list_messages(&query).await.unwrap().into_iter().filter(|m| m.content == content).collect();
        assert_eq!(stored.len(), 1, "{fault:?}");
        assert_eq!(stored[0].id, sent.id);
    }
}

#[tokio::test]
async fn final_errors_are_not_retried() {
    let (board, proxy) = board_and_proxy().await;
    let client = through(&proxy, &board, "alice", 5);

    // 404 and 422 from the board itself.
    proxy.reset();
    assert!(matches!(client.get_task("TE-404").await, Err(TrackerError::NotFound { .. })));
    assert_eq!(proxy.request_count(), 1);

    proxy.reset();
    let too_long = CreateTask { project_slug: "team".into(), title: "t".repeat(201), ..Default::default() };
    assert!(matches!(client.create_task(&too_long, None).await, Err(TrackerError::Invalid { .. })));
    assert_eq!(proxy.request_count(), 1);

    // 400 injected by the proxy.
    proxy.reset();
    proxy.push([answer(400, None)]);
    let error = client.list_projects().await.unwrap_err();
    assert_eq!(error.status(), Some(422), "{error:?}");
    assert_eq!(proxy.request_count(), 1);

    // A 500 is retried like a 503 (every request is safe to repeat), and the retry gets through.
    proxy.reset();
    proxy.push([answer(500, None)]);
    client.list_projects().await.unwrap();
    assert_eq!(proxy.request_count(), 2);

    // 401 from the board.
    proxy.reset();
    let stranger = client_at(&proxy.url(), "tok-nobody", TIMEOUT_MS, fast_retry(5));
    assert!(matches!(stranger.list_members().await, Err(TrackerError::Unauthorized { .. })));
    assert_eq!(proxy.request_count(), 1);
}

#[tokio::test]
async fn attempts_stop_at_max_attempts() {
    let (board, proxy) = board_and_proxy().await;
    for max_attempts in [1, 3] {
        proxy.reset();
        proxy.push(std::iter::repeat_n(answer(503, Some("0")), 10));
        let client = through(&proxy, &board, "alice", max_attempts);
        match client.list_projects().await {
            Err(TrackerError::Server { status: 503, .. }) => {}
            other => panic!("expected the last 503, got {other:?}"),
        }
        assert_eq!(proxy.request_count(), max_attempts as usize);
    }
    // Dropped connections are retried up to the limit as well, then reported as transport errors.
    proxy.reset();
    proxy.push(std::iter::repeat_n(Fault::DropRequest, 10));
    let client = through(&proxy, &board, "alice", 4);
    assert!(matches!(client.list_projects().await, Err(TrackerError::Transport { .. })));
    assert_eq!(proxy.request_count(), 4);
}
