use super::frame::preview;
use super::start::Start;
use super::*;
use crate::model::Event;

const TASK: &str = r#"{"id": "t1", "key": "TE-3", "project_slug": "team", "title": "Fix it", "status": "todo"}"#;

#[test]
fn frames_are_sorted_into_events_status_and_junk() {
    let assigned = format!(
        r#"{{"id": "e1", "seq": 4, "event": "task.assigned", "data": {{"task": {TASK}, "assigned_by": "alice"}}, "ts": "2026-11-30T10:00:00Z"}}"#
    );
    match parse_frame(&assigned).into_item() {
        Some(StreamItem::Event(ReceivedEvent { id, seq, event: Event::TaskAssigned(data), .. })) => {
            assert_eq!((id.as_str(), seq), ("e1", 4));
            assert_eq!(data.task.key, "TE-3");
            assert_eq!(data.assigned_by, "alice");
        }
        other => panic!("expected task.assigned, got {other:?}"),
    }
    assert_eq!(
        parse_frame(r#"{"type": "resumed", "last_seq": 12}"#).into_item(),
        Some(StreamItem::Status(LinkStatus::CaughtUp { last_seq: 12 }))
    );

    let skipped = [
        ("pong", r#"{"type": "pong"}"#.to_string()),
        ("unknown control", r#"{"type": "hello"}"#.to_string()),
        ("not json", "not json at all".to_string()),
        ("json but not an event", r#"{"hello": "world"}"#.to_string()),
        ("seq of the wrong type", r#"{"id": "e", "seq": "four", "event": "task.assigned"}"#.to_string()),
        ("unknown event", r#"{"id": "e2", "seq": 5, "event": "task.teleported", "data": {}}"#.to_string()),
        (
            "known event, malformed data",
            r#"{"id": "e3", "seq": 6, "event": "message.new", "data": {"x": 1}}"#.to_string(),
        ),
        ("empty", String::new()),
        ("a lone quote", "\"".to_string()),
    ];
    for (case, frame) in skipped {
        assert_eq!(parse_frame(&frame).into_item(), None, "{case}");
    }
    // Skipped events still count towards the seqs due next: no gap is seen where they were.
    for (frame, seq) in [
        (r#"{"id": "e2", "seq": 5, "event": "task.teleported", "data": {}}"#, 5),
        (r#"{"id": "e3", "seq": 6, "event": "message.new", "data": {"x": 1}}"#, 6),
    ] {
        assert!(matches!(parse_frame(frame), Frame::Numbered { seq: found, event: None } if found == seq), "{frame}");
    }
}

#[test]
fn preview_cuts_long_frames_on_a_character_boundary() {
    let long = "é".repeat(500);
    let shown = preview(&long);
    assert!(shown.starts_with(&"é".repeat(200)));
    assert!(shown.contains("(1000 bytes)"), "{shown}");
    assert_eq!(preview("short"), "short");
}

#[test]
fn the_request_carries_the_token_in_a_sensitive_header_only() {
    let request = build_request("ws://127.0.0.1:1/api/ws", "Bearer tok-secret", "TEAMBOARD_TOKEN").unwrap();
    let value = request.headers().get(header::AUTHORIZATION).unwrap();
    assert_eq!(value.to_str().unwrap(), "Bearer tok-secret");
    assert!(value.is_sensitive());
    assert!(!request.uri().to_string().contains("tok-secret"));
    assert!(!format!("{:?}", request.headers()).contains("tok-secret"));
}

#[test]
fn a_bad_url_or_token_is_a_clear_error() {
    let error = build_request("not a url", "Bearer x", "TEAMBOARD_TOKEN").unwrap_err();
    assert!(matches!(error, StreamError::InvalidUrl { .. }), "{error:?}");
    let error = build_request("ws://127.0.0.1:1/ws", "Bearer a\nb", "MY_TOKEN").unwrap_err();
    let message = error.to_string();
    assert!(message.contains("MY_TOKEN") && !message.contains("a\nb"), "{message}");
}

#[test]
fn client_frames_are_the_contract_shapes() {
    assert_eq!(client_frame(&ClientFrame::Ping), Message::text(r#"{"type":"ping"}"#));
    assert_eq!(
        client_frame(&ClientFrame::Resume { after_seq: 9 }),
        Message::text(r#"{"type":"resume","after_seq":9}"#)
    );
}

fn assigned_frame(id: &str, seq: u64) -> Message {
    Message::text(format!(
        r#"{{"id": "{id}", "seq": {seq}, "event": "task.assigned", "data": {{"task": {TASK}, "assigned_by": "alice"}}, "ts": "2026-11-30T10:00:00Z"}}"#
    ))
}

#[test]
fn at_the_head_the_replay_is_counted_not_passed_on_and_never_a_gap() {
    let mut cursor = Cursor { next_seq: 1, reading_history: true, skipped: 0 };
    let mut accept_gap = None;
    // The log was pruned at its start: its first event is seq 5. Before `resumed`, every event
    // is the past.
    for seq in [5, 6, 7] {
        let items = read_message(assigned_frame(&format!("e{seq}"), seq), &mut cursor, 0, &mut accept_gap);
        assert!(items.is_ok_and(|items| items.is_empty()), "seq {seq} was passed on");
    }
    assert_eq!(cursor.skipped, 3);
    let resumed = Message::text(r#"{"type": "resumed", "last_seq": 7}"#);
    let items = read_message(resumed, &mut cursor, 0, &mut accept_gap).ok().unwrap();
    assert_eq!(items, vec![StreamItem::Status(LinkStatus::CaughtUp { last_seq: 7 })]);
    assert_eq!(caught_up_at(&items), Some(7));
    assert!(!cursor.reading_history);
    assert_eq!(cursor.next_seq, 8);
    // Live events follow, checked for gaps as ever.
    let items = read_message(assigned_frame("e8", 8), &mut cursor, 0, &mut accept_gap).ok().unwrap();
    assert!(matches!(items.as_slice(), [StreamItem::Event(event)] if event.seq == 8));
    assert!(matches!(
        read_message(assigned_frame("e10", 10), &mut cursor, 0, &mut accept_gap),
        Err(SessionEnd::Gap { due: 9, got: 10 })
    ));
}

/// A resume point that may have nothing recorded.
struct Position(Option<u64>);

impl ResumePosition for Position {
    type Error = std::convert::Infallible;

    fn last_processed_seq(&self) -> BoxFuture<'_, Result<u64, Self::Error>> {
        let seq = self.0.unwrap_or(0);
        Box::pin(async move { Ok(seq) })
    }

    fn recorded_position(&self) -> BoxFuture<'_, Result<Option<u64>, Self::Error>> {
        let seq = self.0;
        Box::pin(async move { Ok(seq) })
    }
}

#[tokio::test]
async fn where_a_connection_begins() {
    use StartMode::*;
    use StreamStart::*;
    // (option, the process's first connection, recorded) -> (mode, after_seq)
    let table = [
        (Recorded, true, None, Head, 0),
        (Recorded, false, None, Head, 0),
        (Recorded, true, Some(40), Resume, 40),
        (Recorded, false, Some(40), Resume, 40),
        (StreamStart::FromStart, true, None, StartMode::FromStart, 0),
        (StreamStart::FromStart, true, Some(40), StartMode::FromStart, 0),
        (StreamStart::FromStart, false, Some(40), Resume, 40),
        (StreamStart::FromStart, false, None, StartMode::FromStart, 0),
    ];
    for (option, first_connection, recorded, mode, after_seq) in table {
        let start = plan_start(option, first_connection, &Position(recorded)).await.unwrap();
        assert_eq!(start, Start { mode, after_seq }, "{option:?}, first {first_connection}, recorded {recorded:?}");
    }
    // A counter kept by a consumer always has a position.
    let counter = Arc::new(AtomicU64::new(3));
    assert_eq!(plan_start(Recorded, true, &counter).await.unwrap(), Start { mode: Resume, after_seq: 3 });
}
