//! The cap on one answer of the model ([`MAX_ANSWER_BYTES`]), whole and streamed, on both APIs
//! and in the start-up check: a server on loopback that sends an endless answer gets a clear
//! error naming the cap, and the client stops reading. The server writes until the client goes
//! away (a write fails) or the test's own bound; it must see the client go away first.

use std::time::Duration;

use picogent_llm::config::{Api, LlmConfig};
use picogent_llm::probe::{Verdict, check_model};
use picogent_llm::{ChatRequest, LlmError, MAX_ANSWER_BYTES, Message, chat_model};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The most the test server writes, whatever the client does: twice the cap.
const SERVER_BOUND: usize = 2 * MAX_ANSWER_BYTES;
/// A generous bound on one case, not a timing assertion.
const CASE_DEADLINE: Duration = Duration::from_secs(60);

/// An answer with no end: `head` (the status line, the headers and the start of the body),
/// then `repeated` again and again.
struct Endless {
    head: String,
    repeated: String,
}

/// What the server saw of the client.
#[derive(Debug)]
struct Seen {
    written: usize,
    /// A write failed before the bound: the client closed the connection.
    client_left: bool,
}

/// Serves `answer` to the first connection on a loopback port; answers the base URL and the
/// server's task, which ends with what it saw.
async fn serve_endless(answer: Endless) -> (String, JoinHandle<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let (socket, _) = listener.accept().await.unwrap();
        let (mut reader, mut writer) = socket.into_split();
        // The answer starts once the request's head is in (an answer before the request is one
        // the client refuses); the rest of the request is read and thrown away.
        let mut request = Vec::new();
        let mut piece = [0u8; 4096];
        while !request.windows(4).any(|window| window == b"\r\n\r\n") {
            match reader.read(&mut piece).await {
                Ok(read) if read > 0 => request.extend_from_slice(&piece[..read]),
                _ => return Seen { written: 0, client_left: true },
            }
        }
        tokio::spawn(async move {
            let mut sink = vec![0u8; 16 * 1024];
            while matches!(reader.read(&mut sink).await, Ok(read) if read > 0) {}
        });
        let mut written = 0;
        if writer.write_all(answer.head.as_bytes()).await.is_err() {
            return Seen { written, client_left: true };
        }
        written += answer.head.len();
        while written < SERVER_BOUND {
            if writer.write_all(answer.repeated.as_bytes()).await.is_err() {
                return Seen { written, client_left: true };
            }
            written += answer.repeated.len();
        }
        Seen { written, client_left: false }
    });
    (base_url, server)
}

fn head(content_type: &str, extra_header: &str, body_start: &str) -> String {
    format!("HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\n{extra_header}connection: close\r\n\r\n{body_start}")
}

fn text(bytes: usize) -> String {
    "x".repeat(bytes)
}

/// The endless answer of each case, and how the client is set up for it.
fn cases() -> Vec<(&'static str, Api, bool, Endless)> {
    let openai_event =
        format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{}\"}}}}]}}\n\n", text(1000));
    let anthropic_start = "data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1}}}\n\n\
                           data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n";
    let anthropic_event = format!(
        "data: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{}\"}}}}\n\n",
        text(1000)
    );
    vec![
        (
            "openai, streamed: content that never ends",
            Api::Openai,
            true,
            Endless { head: head("text/event-stream", "", ""), repeated: openai_event },
        ),
        (
            "openai, streamed: one line that never ends",
            Api::Openai,
            true,
            Endless {
                head: head("text/event-stream", "", "data: {\"choices\":[{\"delta\":{\"content\":\""),
                repeated: text(64 * 1024),
            },
        ),
        (
            "anthropic, streamed: content that never ends",
            Api::Anthropic,
            true,
            Endless { head: head("text/event-stream", "", anthropic_start), repeated: anthropic_event },
        ),
        (
            "openai, whole: a body that never ends",
            Api::Openai,
            false,
            Endless {
                head: head(
                    "application/json",
                    "",
                    "{\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"",
                ),
                repeated: text(64 * 1024),
            },
        ),
        (
            "anthropic, whole: a body that never ends",
            Api::Anthropic,
            false,
            Endless {
                head: head("application/json", "", "{\"content\":[{\"type\":\"text\",\"text\":\""),
                repeated: text(64 * 1024),
            },
        ),
        (
            "openai, whole: a body announced as 1 GiB",
            Api::Openai,
            false,
            Endless {
                head: head("application/json", "content-length: 1073741824\r\n", "{\"choices\":["),
                repeated: text(64 * 1024),
            },
        ),
    ]
}

fn config(base_url: &str, api: Api, stream: bool) -> LlmConfig {
    let mut config = LlmConfig::new(base_url, "endless");
    config.api = api;
    config.stream = stream;
    // One attempt: the error is the subject, not the retries.
    config.retry.max_attempts = 1;
    config
}

/// Waits for the server's task: it ends when the client goes away, or at its bound.
async fn seen(server: JoinHandle<Seen>, case: &str) -> Seen {
    let seen = tokio::time::timeout(CASE_DEADLINE, server)
        .await
        .unwrap_or_else(|_| panic!("{case}: the server was still writing after {CASE_DEADLINE:?}"))
        .unwrap();
    assert!(seen.client_left, "{case}: the client read on to the server's bound: {seen:?}");
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_answer_is_refused_at_the_cap_and_reading_stops() {
    for (case, api, stream, answer) in cases() {
        let started = std::time::Instant::now();
        let (base_url, server) = serve_endless(answer).await;
        let chat = chat_model(&config(&base_url, api, stream), None).unwrap();
        let messages = [Message::user("hello")];
        let request = ChatRequest { messages: &messages, tools: &[], max_output_tokens: None };
        let answered = tokio::time::timeout(CASE_DEADLINE, chat.complete(&request))
            .await
            .unwrap_or_else(|_| panic!("{case}: no answer within {CASE_DEADLINE:?}"));
        let error = answered.expect_err(case);
        assert!(
            matches!(error, LlmError::AnswerTooLarge { limit_bytes } if limit_bytes == MAX_ANSWER_BYTES),
            "{case}: {error:?}"
        );
        assert!(error.to_string().contains(&MAX_ANSWER_BYTES.to_string()), "{case}: {error}");
        // The model client is kept: the connection must close with the answer, not with the client.
        let seen = seen(server, case).await;
        println!(
            "{case}: the server wrote {} bytes before the client went away ({:?})",
            seen.written,
            started.elapsed()
        );
        drop(chat);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_start_up_check_refuses_an_endless_answer_naming_the_cap() {
    let case = "the start-up check";
    let answer = Endless {
        head: head(
            "application/json",
            "",
            "{\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"",
        ),
        repeated: text(64 * 1024),
    };
    let (base_url, server) = serve_endless(answer).await;
    let check = tokio::time::timeout(CASE_DEADLINE, check_model(&config(&base_url, Api::Openai, false), None))
        .await
        .expect("the check answers");
    assert_eq!(check.verdict, Verdict::Failed, "{check:?}");
    assert!(check.detail.contains(&MAX_ANSWER_BYTES.to_string()), "{check:?}");
    seen(server, case).await;
}
