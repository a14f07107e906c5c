use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;

use super::*;

#[test]
fn backoff_doubles_is_capped_and_never_collapses_to_zero() {
    let initial = Duration::from_millis(250);
    let max = Duration::from_secs(30);
    let mut rng = StdRng::seed_from_u64(7);
    for failed_attempts in 0..40u32 {
        let ceiling = (initial * 2u32.saturating_pow(failed_attempts.min(31))).min(max);
        for _ in 0..50 {
            let delay = backoff_delay(failed_attempts, initial, max, &mut rng);
            assert!(delay >= ceiling / 2, "attempt {failed_attempts}: {delay:?} below half of {ceiling:?}");
            assert!(delay <= ceiling, "attempt {failed_attempts}: {delay:?} above {ceiling:?}");
        }
    }
    // The jitter really varies the delay.
    let delays: std::collections::HashSet<_> = (0..20).map(|_| backoff_delay(5, initial, max, &mut rng)).collect();
    assert!(delays.len() > 1);
}

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
