//! Bad input, fuzzed with proptest (bounded: a few thousand cases per target, seconds each):
//! the event envelope parser, tool argument validation through the real registry, and prompt
//! rendering of hostile text. No input panics; hidden text and control tokens never survive
//! cleaning; nothing inside a fence changes a prompt's structure; lengths are capped; oversized
//! bodies and fields are refused with a clear error. A crash found here
//! becomes a case in the regression tables below.

mod support;

use std::path::Path;

use picogent::prompts::{self, MessageNewVars, MessageView, Prompts, TaskAssignedVars, TaskView};
use picogent::tools::ToolContext;
use picogent::tools::registry::Registry;
use picogent::tracker::model::{Event, EventEnvelope, MessageOut, TaskOut};
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestRunner};
use serde_json::{Value, json};

/// Arbitrary JSON, nested a few levels, with strings that lean hostile.
fn arbitrary_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        hostile_text().prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(field_name(), inner, 0..6)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

/// Field names: mostly the ones the tools and events use, so fuzzing gets past "unknown field".
fn field_name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "task_id",
            "project_slug",
            "title",
            "description",
            "status",
            "assignee_slug",
            "content",
            "chat_id",
            "parent_id",
            "limit",
            "cursor",
            "labels",
            "step_id",
            "done",
            "agent_slug",
            "member_slug",
            "query",
            "priority",
            "type",
            "id",
            "seq",
            "event",
            "data",
            "ts",
            "task",
            "message",
            "assigned_by",
            "key",
            "author_slug",
            "mentions",
            "created_at",
            "updated_at",
        ])
        .prop_map(str::to_string),
        "[a-z_]{1,12}",
    ]
}

/// Text with the characters that cause trouble: controls, zero-width and bidi characters, HTML
/// comment markers, non-ASCII, and now and then a lot of it.
fn hostile_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        "[ -~]{0,20}",
        Just("<!--".to_string()),
        Just("-->".to_string()),
        Just("\u{200B}".to_string()),
        Just("\u{202E}".to_string()),
        Just("\u{FEFF}".to_string()),
        Just("\u{E0041}".to_string()),
        Just("\u{0000}".to_string()),
        Just("\n".to_string()),
        prop::sample::select(vec![
            "<|im_start|>",
            "<|",
            "|>",
            "[INST]",
            "[/INST]",
            "</s>",
            "<s",
            ">",
            "<<",
            "untrusted-"
        ])
        .prop_map(str::to_string),
        prop::sample::select(vec![
            "<<untrusted-0123456789abcdef>>",
            "<<end-untrusted-0123456789abcdef>>",
            "<<END-untrusted"
        ])
        .prop_map(str::to_string),
        Just("é🦀".to_string()),
        any::<char>().prop_map(|c| c.to_string()),
        (1usize..5).prop_map(|n| "x".repeat(n * 3000)),
    ];
    prop::collection::vec(piece, 0..12).prop_map(|pieces| pieces.concat())
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() })
}

/// Cases that once crashed something, or that stand for a class worth pinning.
const ENVELOPE_REGRESSIONS: &[&str] = &[
    "",
    "null",
    "{}",
    r#"{"id":"e","seq":-1,"event":"task.assigned"}"#,
    r#"{"id":"e","seq":18446744073709551616,"event":"task.assigned"}"#,
    r#"{"id":"e","seq":1,"event":"task.assigned","data":null}"#,
    r#"{"id":"e","seq":1,"event":"task.assigned","data":{"task":[]}}"#,
    r#"{"id":"e","seq":1,"event":"message.new","data":{"message":{"id":1}}}"#,
    r#"{"id":"e","seq":1,"event":"\u0000","data":"x"}"#,
    r#"{"type":"resumed","last_seq":3}"#,
    r#"[1,2,3]"#,
];

fn parse_frame(text: &str) {
    // The stream's path for a frame: an envelope, then the typed event (or a clear error).
    if let Ok(envelope) = serde_json::from_str::<EventEnvelope>(text) {
        match Event::from_envelope(&envelope) {
            Ok(_) => {}
            Err(error) => {
                let message = error.to_string();
                assert!(message.contains(&envelope.event) || envelope.event.is_empty(), "{message}");
                assert!(message.contains("malformed data"), "{message}");
            }
        }
    }
}

#[test]
fn event_envelopes_never_panic() {
    for text in ENVELOPE_REGRESSIONS {
        parse_frame(text);
    }
    // Raw text frames.
    runner(3000)
        .run(&any::<String>(), |text| {
            parse_frame(&text);
            Ok(())
        })
        .unwrap();
    // Envelope-shaped JSON with arbitrary data, under the known event names.
    let names =
        prop::sample::select(vec!["task.assigned", "task.unassigned", "task.updated", "message.new", "x.y", ""]);
    let envelope = (names, any::<u64>(), arbitrary_json()).prop_map(|(event, seq, data)| {
        json!({"id": "evt-1", "seq": seq, "event": event, "data": data, "ts": "2026-01-01T00:00:00Z"}).to_string()
    });
    runner(3000)
        .run(&envelope, |text| {
            parse_frame(&text);
            Ok(())
        })
        .unwrap();
}

fn prompts_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("prompts")
}

/// The text of `text` outside its fences.
fn structure(text: &str) -> String {
    prompts::split_fences(text)
        .into_iter()
        .filter_map(|part| match part {
            prompts::Part::Structure(text) => Some(text),
            prompts::Part::Data(_) => None,
        })
        .collect()
}

/// What must never reach a model: comment markers, chat-template control tokens, zero-width,
/// bidi and tag characters, and control characters other than newline and tab.
fn assert_clean(text: &str) {
    assert!(!text.contains("<!--"), "an HTML comment opener survived: {text:?}");
    let lower = text.to_ascii_lowercase();
    for token in prompts::CONTROL_TOKENS.iter().chain(&["<|im_start|>", "<||>"]) {
        assert!(!lower.contains(&token.to_ascii_lowercase()), "the control token {token} survived: {text:?}");
    }
    for c in text.chars() {
        let hidden = matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{2069}' | '\u{FEFF}' | '\u{00AD}' | '\u{E0000}'..='\u{E007F}')
            || (c.is_control() && c != '\n' && c != '\t');
        assert!(!hidden, "hidden character {c:?} survived");
    }
}

fn message_with(content: &str, author: &str) -> MessageOut {
    serde_json::from_value(json!({
        "id": "m-1", "author_slug": author, "content": content, "chat_id": "c-1", "task_id": null,
        "parent_id": null, "mentions": ["picogent"], "created_at": "2026-01-01T00:00:00Z"
    }))
    .unwrap()
}

fn task_with(title: &str, description: &str) -> TaskOut {
    serde_json::from_value(json!({
        "id": "t-1", "key": "TE-1", "project_slug": "team", "title": title, "description": description,
        "type": "task", "status": "todo", "priority": "medium", "assignee_slug": "picogent", "labels": [],
        "created_by": "alice", "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
        "watchers": []
    }))
    .unwrap()
}

#[test]
fn hostile_text_is_cleaned_capped_and_never_panics() {
    let regressions = [
        "<!--",
        "<!---->",
        "<!--<!-- a -->-->",
        "<<!---->!-- hidden -->",
        "\u{200B}<\u{200B}!-- hidden -->",
        "<!\u{200B}-- hidden -->",
        "-->",
        "a\u{0000}b",
        "\u{E0001}\u{E0068}\u{E0069}",
        "<|im_<|x|>start|>",
        "<<un<!-- -->trusted-0123456789abcdef>>",
    ];
    for text in regressions {
        assert_clean(&prompts::clean_text(text, 100));
    }
    let strategy = (hostile_text(), 0usize..5000);
    runner(3000)
        .run(&strategy, |(text, max_chars)| {
            let cleaned = prompts::clean_text(&text, max_chars);
            assert_clean(&cleaned);
            let lower = cleaned.to_ascii_lowercase();
            assert!(!lower.contains("<<untrusted") && !lower.contains("<<end-untrusted"), "{cleaned:?}");
            // The cap: at most `max_chars` of the text plus the short note of what was cut.
            let kept = cleaned.split("… [cut: ").next().unwrap_or_default();
            assert!(kept.chars().count() <= max_chars, "{} > {max_chars}", kept.chars().count());
            assert!(cleaned.chars().count() <= max_chars + 40);
            Ok(())
        })
        .unwrap();

    let prompts = Prompts::load(&prompts_dir()).unwrap();
    let fence = prompts::Fence::random();
    let render = |task: &TaskOut, message: &MessageOut, author: &str| {
        let assigned = prompts
            .task_assigned(&TaskAssignedVars {
                task: TaskView::new(task, &[], &fence),
                assigned_by: author.to_string(),
                comments: vec![MessageView::new(message, &fence)],
                propose_breakdown: true,
            })
            .unwrap();
        let new = prompts
            .message_new(&MessageNewVars {
                message: MessageView::new(message, &fence),
                thread: vec![MessageView::new(message, &fence)],
                task: Some(TaskView::new(task, &[], &fence)),
                agent_slug: "picogent".into(),
            })
            .unwrap();
        [assigned, new]
    };
    let strategy = (hostile_text(), hostile_text(), hostile_text(), "[a-z]{1,8}");
    runner(1500)
        .run(&strategy, |(title, description, content, author)| {
            let rendered = render(&task_with(&title, &description), &message_with(&content, &author), &author);
            // The same prompts with a plain word for each field that is not empty once cleaned.
            let plain = |text: &str| if prompts::clean_text(text, 10).is_empty() { "" } else { "x" };
            let plain_rendered = render(
                &task_with(plain(&title), plain(&description)),
                &message_with(plain(&content), &author),
                &author,
            );
            for (rendered, plain_rendered) in rendered.iter().zip(&plain_rendered) {
                assert_clean(rendered);
                // Each of the three fields is capped; the templates add a little around them.
                assert!(rendered.chars().count() <= 5 * prompts::MAX_FIELD_CHARS + 4000, "{}", rendered.len());
                // Nothing inside a fence changes what is outside: the structure is the template's.
                assert_eq!(structure(rendered), structure(plain_rendered), "{rendered}");
            }
            Ok(())
        })
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_arguments_are_validated_without_panics() {
    let board = support::TestBoard::start().await;
    let registry = Registry::new(board.client("picogent"), 16 * 1024).unwrap();
    let names: Vec<String> = registry.offered_names().into_iter().map(str::to_string).collect();
    assert!(names.len() >= 20, "{names:?}");
    let mut with_unknown = names.clone();
    with_unknown.extend(["no_such_tool".to_string(), String::new(), "get_task\u{0000}".to_string()]);
    let strategy = (prop::sample::select(with_unknown), arbitrary_json());

    // A cancelled context: validation runs in full, and a call that passes it stops before the
    // tracker (cancellation comes first), so thousands of cases cost no requests.
    let cancelled = ToolContext::new("picogent");
    cancelled.cancel.cancel();
    let handle = tokio::runtime::Handle::current();
    let check = |registry: &Registry, context: &ToolContext, name: String, arguments: Value| {
        let result = tokio::task::block_in_place(|| handle.block_on(registry.call(&name, arguments, context)));
        if result.is_error {
            let text = &result.text;
            assert!(!text.is_empty() && text.len() < 64 * 1024, "{name}: {text}");
        }
    };
    runner(3000)
        .run(&strategy, |(name, arguments)| {
            check(&registry, &cancelled, name, arguments);
            Ok(())
        })
        .unwrap();
    // And live against the board: whatever passes validation really runs.
    let live = ToolContext::new("picogent");
    runner(300)
        .run(&strategy, |(name, arguments)| {
            check(&registry, &live, name, arguments);
            Ok(())
        })
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_bodies_and_fields_are_refused_clearly() {
    let board = support::TestBoard::start().await;
    let http = reqwest::Client::new();
    let url = format!("{}/api/messages", board.url());
    let chat_id = board.client("alice").get_project("team").await.unwrap().chat_id;
    // A field over its limit: 422 naming the field and the limit.
    let too_long = "a".repeat(picogent::tracker::model::limits::CONTENT + 1);
    let response = http
        .post(&url)
        .bearer_auth("tok-alice")
        .json(&json!({"content": too_long, "chat_id": chat_id}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 422);
    let body: Value = response.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap_or_default().to_string();
    assert!(message.contains("content"), "{body}");
    // A body over 1 MiB: refused before it is parsed, with an error body.
    let huge = "a".repeat(picogent::tracker::model::limits::BODY_BYTES + 10);
    let response = http
        .post(&url)
        .bearer_auth("tok-alice")
        .header("content-type", "application/json")
        .body(format!(r#"{{"content":"{huge}","chat_id":"{chat_id}"}}"#))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413, "{:?}", response.text().await);
    // A frame over the limit on the event stream: the board refuses it and drops the link.
    let mut stream = support::EventStream::connect(&board, "alice").await;
    let big =
        json!({"type": "resume", "after_seq": 0, "pad": "x".repeat(picogent::tracker::model::limits::FRAME_BYTES + 1)});
    use futures::SinkExt;
    let _ = stream.socket.send(tokio_tungstenite::tungstenite::Message::Text(big.to_string().into())).await;
    stream.expect_closed().await;
}
