//! The in-process comparisons of `bench/run.sh`: each pair runs alternately in the same process
//! (ours, then the bare baseline, then ours again, with the order swapped every round), so a
//! noisy neighbour slows both sides alike. Writes one JSON document (`BENCH_OUT`, default
//! `target/bench-compare.json`) that `bench/report.py` turns into `bench/RESULTS.md`.
//!
//! Run with `cargo bench --bench compare`; `BENCH_ONLY=dispatch,turn,event,demo,filter,tokens`
//! (any of them) runs only those parts. Not a criterion bench: criterion measures one function
//! at a time, and these figures are ratios of two sides measured side by side.

mod common;

/// The allocator the `picogent` binary ships with (src/main.rs), so the in-process figures are
/// those of the program people run; both sides of each comparison share it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::time::{Duration, Instant};

use common::*;
use futures::{SinkExt, StreamExt};
use picogent::config::{ChatListen, LlmConfig};
use picogent::llm::{OpenAiChat, count_text_tokens, count_tools_json_tokens};
use picogent::router::filter::{MessageFacts, MessageFate, is_stop_command, message_fate};
use picogent::tools::definition::specs;
use picogent::tools::{CHAT_REPLY_TOOLS, Catalog, Registry, TASK_RUN_TOOLS, ToolContext};
use picogent::tracker::model::{Event, MemberKind, ReceivedEvent};
use picogent::transport::{StreamItem, parse_frame};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message as WsMessage;

/// Rounds and calls per round; `BENCH_QUICK=1` shrinks them for a smoke run.
struct Sizes {
    rounds: usize,
    dispatch_batch: usize,
    turn_batch: usize,
    event_samples: usize,
    filter_frames: usize,
}

fn sizes() -> Sizes {
    if std::env::var("BENCH_QUICK").is_ok_and(|v| v == "1") {
        Sizes { rounds: 5, dispatch_batch: 10, turn_batch: 5, event_samples: 20, filter_frames: 20_000 }
    } else {
        Sizes { rounds: 100, dispatch_batch: 50, turn_batch: 20, event_samples: 1000, filter_frames: 100_000 }
    }
}

fn main() {
    let sizes = sizes();
    let out = std::env::var("BENCH_OUT")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/target/bench-compare.json").to_string());
    // `BENCH_ONLY=turn,event` runs only those parts (for profiling one path); `bench/run.sh` runs all.
    let only = std::env::var("BENCH_ONLY").ok();
    let wanted = |part: &str| only.as_deref().is_none_or(|list| list.split(',').any(|p| p.trim() == part));
    let mut document = json!({});
    // The filter figure is "on one core": it runs on this thread, outside the runtime.
    if wanted("filter") {
        document["filter"] = bench_filter(&sizes);
        eprintln!("filter: {}", document["filter"]);
    }
    if wanted("tokens") {
        document["tokens"] = tool_tokens();
        eprintln!("tokens: {}", document["tokens"]);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        if wanted("dispatch") {
            document["dispatch"] = bench_dispatch(&sizes).await;
            eprintln!("dispatch: {}", document["dispatch"]);
        }
        if wanted("turn") {
            document["turn"] = bench_turn(&sizes).await;
            eprintln!("turn: {}", document["turn"]);
        }
        if wanted("event") {
            document["event"] = bench_event(&sizes).await;
            eprintln!("event: {}", document["event"]);
        }
        if wanted("demo") {
            document["demo"] = demo_tokens().await;
            eprintln!("demo: {}", document["demo"]);
        }
    });
    std::fs::write(&out, serde_json::to_string_pretty(&document).unwrap()).unwrap();
    eprintln!("wrote {out}");
}

fn pair(ours: &[f64], baseline: &[f64], unit: &str) -> Value {
    let ours = summarize(ours);
    let baseline = summarize(baseline);
    json!({
        "unit": unit,
        "ours": ours,
        "baseline": baseline,
        "ratio_median": ours.median / baseline.median,
        "ratio_p99": ours.p99 / baseline.p99,
    })
}

// ---- tool dispatch: get_task through the registry vs a bare reqwest GET ----

async fn bench_dispatch(sizes: &Sizes) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let alice = client(&board.url(), "tok-alice");
    let task = create_task(&alice, "Dispatch target", None).await;
    let registry = Registry::new(client(&board.url(), "tok-picogent"), 16 * 1024).unwrap();
    let context = ToolContext::new("picogent");
    let bare = reqwest::Client::new();
    let url = format!("{}/api/tasks/{}", board.url(), task.id);

    let ours_call = || async {
        let result = registry.call("get_task", json!({"task_id": task.id}), &context).await;
        assert!(!result.is_error, "get_task failed: {result:?}");
    };
    let bare_call = || async {
        let response = bare.get(&url).bearer_auth("tok-picogent").send().await.unwrap();
        assert!(response.status().is_success());
        let body = response.bytes().await.unwrap();
        std::hint::black_box(body);
    };
    for _ in 0..20 {
        ours_call().await;
        bare_call().await;
    }
    let (mut ours, mut baseline) = (Vec::new(), Vec::new());
    for round in 0..sizes.rounds {
        for side in order(round) {
            let started = Instant::now();
            for _ in 0..sizes.dispatch_batch {
                if side == 0 { ours_call().await } else { bare_call().await }
            }
            let per_call = micros(started.elapsed()) / sizes.dispatch_batch as f64;
            if side == 0 { ours.push(per_call) } else { baseline.push(per_call) }
        }
    }
    board.shutdown().await.unwrap();
    pair(&ours, &baseline, "µs per call")
}

/// Which side goes first in a round: alternates, so neither always runs on a warmer cache.
fn order(round: usize) -> [u8; 2] {
    if round.is_multiple_of(2) { [0, 1] } else { [1, 0] }
}

// ---- one loop turn vs a bare async-openai request with the same body ----

async fn bench_turn(sizes: &Sizes) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(Duration::ZERO).await;
    let registry = Registry::new(client(&board.url(), "tok-picogent"), 16 * 1024).unwrap();
    let llm_config: LlmConfig =
        serde_json::from_value(json!({"base_url": model.url(), "model": "offline-planner", "timeout_ms": 20000}))
            .unwrap();
    let chat = OpenAiChat::new(&llm_config, None).unwrap();
    let system_prompt = std::fs::read_to_string(prompts_dir().join("system.md")).unwrap();
    // No `Task:` or `Message id:` line: the planner answers with text at once, so the run is
    // exactly one turn (one request, no tool calls).
    let prompt = "Say hello to the team.".to_string();
    let one_turn = || async {
        let output = one_turn_run(&chat, &registry, &system_prompt, &prompt).await;
        assert_eq!(output.record.turns, 1, "{:?}", output.record);
    };
    one_turn().await;
    // The body the loop sent, replayed verbatim through async-openai's own client.
    let body: async_openai::types::chat::CreateChatCompletionRequest =
        serde_json::from_value(model.requests().last().unwrap().clone()).unwrap();
    let openai =
        async_openai::Client::with_config(async_openai::config::OpenAIConfig::new().with_api_base(model.url()));
    let bare_call = || async {
        let response = openai.chat().create(body.clone()).await.unwrap();
        std::hint::black_box(response);
    };
    for _ in 0..10 {
        one_turn().await;
        bare_call().await;
    }
    let (mut ours, mut baseline) = (Vec::new(), Vec::new());
    for round in 0..sizes.rounds {
        for side in order(round) {
            let started = Instant::now();
            for _ in 0..sizes.turn_batch {
                if side == 0 { one_turn().await } else { bare_call().await }
            }
            let per_call = micros(started.elapsed()) / sizes.turn_batch as f64;
            if side == 0 { ours.push(per_call) } else { baseline.push(per_call) }
        }
    }
    let mut result = pair(&ours, &baseline, "µs per turn");
    result["request_body_bytes"] = json!(serde_json::to_vec(&body).unwrap().len());
    model.shutdown().await;
    board.shutdown().await.unwrap();
    result
}

// ---- event → first model request vs a loopback WebSocket echo of the same frame ----

async fn bench_event(sizes: &Sizes) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(Duration::ZERO).await;
    let (relay, mut arrivals) = arrival_relay(model.address()).await;
    // One turn per run: the planner's later turns would only add background load between samples.
    let config =
        agent_config(dir.path(), &board.url(), &format!("http://{relay}/v1"), json!({"limits": {"max_turns": 1}}));
    let agent = start_agent(config).await;
    wait_until(Duration::from_secs(20), "agent caught up", || agent.status.caught_up()).await;
    let alice = client(&board.url(), "tok-alice");

    // A second connection as the agent's member sees the same frames at the same moment the
    // agent's own connection does: its arrival is "frame in".
    let ws_url = format!("ws://{}/api/ws?token=tok-picogent", board.addr());
    let (mut observer, _) = tokio_tungstenite::connect_async(&ws_url).await.unwrap();
    // The observer reads in a task of its own and stamps each assignment frame as it arrives, so
    // "frame in" does not wait for the sample loop (which is still awaiting the task's creation
    // when the board sends the frame to both connections).
    let (frames_tx, mut frames) = tokio::sync::mpsc::unbounded_channel::<(String, Instant)>();
    tokio::spawn(async move {
        while let Some(Ok(message)) = observer.next().await {
            let at = Instant::now();
            if let WsMessage::Text(text) = message
                && text.contains("\"task.assigned\"")
                && frames_tx.send((text.as_str().to_string(), at)).is_err()
            {
                break;
            }
        }
    });

    let echo = echo_server().await;
    let (mut echo_socket, _) = tokio_tungstenite::connect_async(format!("ws://{echo}/")).await.unwrap();

    let (mut ours, mut baseline) = (Vec::new(), Vec::new());
    let mut observer_late = 0;
    let warmup = 5;
    for sample in 0..sizes.event_samples + warmup {
        wait_until(Duration::from_secs(30), "agent idle", || agent.status.active_runs() == 0).await;
        while arrivals.try_recv().is_ok() {}
        // Let the acknowledgement and the finished run's writes settle before the next event.
        tokio::time::sleep(Duration::from_millis(5)).await;
        while arrivals.try_recv().is_ok() {}
        while frames.try_recv().is_ok() {}
        create_task(&alice, &format!("Event sample {sample}"), Some("picogent")).await;
        let (frame, frame_in) = tokio::time::timeout(Duration::from_secs(10), frames.recv())
            .await
            .expect("the observer got the frame")
            .expect("the observer is reading");
        // The first request after the assignment was sent. The agent's connection and the
        // observer's get the frame at the same moment; should the agent still be ahead (the
        // observer's task woken later), the sample counts as 0 and is reported.
        let first_request = tokio::time::timeout(Duration::from_secs(10), arrivals.recv())
            .await
            .expect("the model got a request")
            .expect("the relay is running");
        let observer_was_late = first_request < frame_in;
        // The echo round trip of the very same frame, measured right after.
        let started = Instant::now();
        echo_socket.send(WsMessage::text(frame)).await.unwrap();
        let _ = echo_socket.next().await.unwrap().unwrap();
        let echo_time = started.elapsed();
        if sample >= warmup {
            observer_late += usize::from(observer_was_late);
            ours.push(micros(first_request.saturating_duration_since(frame_in)));
            baseline.push(micros(echo_time));
        }
    }
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
    let mut result = pair(&ours, &baseline, "µs");
    result["observer_late_samples"] = json!(observer_late);
    result
}

async fn echo_server() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = stream.set_nodelay(true);
                let Ok(mut socket) = tokio_tungstenite::accept_async(stream).await else { return };
                while let Some(Ok(message)) = socket.next().await {
                    if message.is_text() && socket.send(message).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    address
}

// ---- parse + filter of message.new events that do not concern the agent ----

/// `message.new` frames as the board sends them: people chatting in the project chat without
/// mentioning the agent, some in threads the agent is not part of.
pub fn chatter_frames(count: usize) -> Vec<String> {
    (0..count)
        .map(|i| {
            let author = if i % 2 == 0 { "alice" } else { "bob" };
            let message = json!({
                "id": format!("7f8c{i:04}-1b2a-4c3d-9e8f-0a1b2c3d4e5f"),
                "author_slug": author,
                "content": format!("Standup note {i}: the deploy of the release branch went fine, @bob can you check the logs?"),
                "chat_id": "c1d2e3f4-0000-4000-8000-000000000001",
                "task_id": null,
                "parent_id": null,
                "mentions": ["bob"],
                "created_at": "2026-11-30T04:00:00Z",
            });
            json!({"id": format!("ev-{i}"), "seq": i + 1, "event": "message.new", "data": {"message": message}, "ts": "2026-11-30T04:00:00Z"})
                .to_string()
        })
        .collect()
}

/// Parses each frame as the stream does and decides its fate as the router does; counts those
/// left alone. Returns that count so the work cannot be optimised away.
pub fn parse_and_filter(frames: &[String]) -> usize {
    let mut ignored = 0;
    for frame in frames {
        let Some(StreamItem::Event(ReceivedEvent { event: Event::MessageNew(data), .. })) =
            parse_frame(frame).into_item()
        else {
            continue;
        };
        let message = data.message;
        if is_stop_command(&message.content, "picogent") {
            continue;
        }
        let facts = MessageFacts { author_kind: Some(MemberKind::Human), replies_to_agent: false };
        if message_fate(&message, facts, "picogent", ChatListen::Mentions, &[]) != MessageFate::Answer {
            ignored += 1;
        }
    }
    ignored
}

fn bench_filter(sizes: &Sizes) -> Value {
    let frames = chatter_frames(sizes.filter_frames);
    assert_eq!(parse_and_filter(&frames[..100]), 100);
    let mut rates = Vec::new();
    for _ in 0..sizes.rounds.min(15) {
        let started = Instant::now();
        let ignored = parse_and_filter(std::hint::black_box(&frames));
        assert_eq!(ignored, frames.len());
        rates.push(frames.len() as f64 / started.elapsed().as_secs_f64());
    }
    json!({"unit": "events/s", "ours": summarize(&rates), "frame_bytes": frames[0].len()})
}

// ---- tokens of the tool definitions ----

fn tool_tokens() -> Value {
    let catalog = Catalog::new().unwrap();
    let all = catalog.definitions();
    let task_run = catalog.subset(TASK_RUN_TOOLS).unwrap().definitions();
    let chat_reply = catalog.subset(CHAT_REPLY_TOOLS).unwrap().definitions();
    json!({
        "all": {"tools": all.len(), "tokens": count_tools_json_tokens(&specs(&all))},
        "task_run": {"tools": task_run.len(), "tokens": count_tools_json_tokens(&specs(&task_run))},
        "chat_reply": {"tools": chat_reply.len(), "tokens": count_tools_json_tokens(&specs(&chat_reply))},
    })
}

// ---- tokens of the demo's task run ----

async fn demo_tokens() -> Value {
    let demo = picogent::demo::start(None).await.unwrap();
    demo.play(Duration::from_secs(60)).await.unwrap();
    let runs = demo.agent.state.list_runs(100).await.unwrap();
    let requests = demo.model.requests();
    let wire_tokens: u64 = requests.iter().map(|body| count_text_tokens(&serde_json::to_string(body).unwrap())).sum();
    let runs_json: Vec<Value> = runs
        .iter()
        .map(|run| {
            json!({"trigger": run.trigger, "turns": run.turns, "tool_calls": run.tool_calls,
                   "prompt_tokens": run.prompt_tokens, "completion_tokens": run.completion_tokens})
        })
        .collect();
    let task_run = runs.iter().find(|run| run.trigger.starts_with("task.assigned"));
    let result = json!({
        "task_run_prompt_tokens": task_run.map(|r| r.prompt_tokens),
        "task_run_completion_tokens": task_run.map(|r| r.completion_tokens),
        "task_run_turns": task_run.map(|r| r.turns),
        "runs": runs_json,
        "model_requests": requests.len(),
        "wire_tokens_all_requests": wire_tokens,
    });
    demo.shutdown().await.unwrap();
    result
}
