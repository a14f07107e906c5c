//! Criterion benchmarks of the in-process paths, each beside its bare baseline:
//! `get_task` through the registry vs a bare reqwest GET, one loop turn vs a bare async-openai
//! request with the same body, and parse + filter of `message.new` chatter.
//!
//! `cargo bench --bench paths`. The side-by-side ratios with their targets are measured by
//! `benches/compare.rs` (run by `bench/run.sh`), which alternates the two sides.

mod common;

/// The allocator the `picogent` binary ships with (src/main.rs), so the in-process figures are
/// those of the program people run; both sides of each comparison share it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::time::Duration;

use common::*;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use picogent::config::{ChatListen, LlmConfig};
use picogent::llm::OpenAiChat;
use picogent::router::filter::{MessageFacts, MessageFate, message_fate};
use picogent::tools::{Registry, ToolContext};
use picogent::tracker::model::{Event, MemberKind, ReceivedEvent};
use picogent::transport::{StreamItem, parse_frame};
use serde_json::json;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn dispatch(c: &mut Criterion) {
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    let (board, task_id, registry) = runtime.block_on(async {
        let board = start_board(dir.path()).await;
        let task = create_task(&client(&board.url(), "tok-alice"), "Dispatch target", None).await;
        let registry = Registry::new(client(&board.url(), "tok-picogent"), 16 * 1024).unwrap();
        (board, task.id, registry)
    });
    let context = ToolContext::new("picogent");
    let bare = reqwest::Client::new();
    let url = format!("{}/api/tasks/{}", board.url(), task_id);
    let mut group = c.benchmark_group("dispatch");
    group.bench_function("registry_get_task", |b| {
        b.to_async(&runtime).iter(|| async {
            let result = registry.call("get_task", json!({"task_id": task_id}), &context).await;
            assert!(!result.is_error);
        })
    });
    group.bench_function("bare_reqwest_get", |b| {
        b.to_async(&runtime).iter(|| async {
            let response = bare.get(&url).bearer_auth("tok-picogent").send().await.unwrap();
            std::hint::black_box(response.bytes().await.unwrap());
        })
    });
    group.finish();
    runtime.block_on(board.shutdown()).unwrap();
}

fn loop_turn(c: &mut Criterion) {
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    let (board, model, registry) = runtime.block_on(async {
        let board = start_board(dir.path()).await;
        let model = start_model(Duration::ZERO).await;
        let registry = Registry::new(client(&board.url(), "tok-picogent"), 16 * 1024).unwrap();
        (board, model, registry)
    });
    let llm_config: LlmConfig =
        serde_json::from_value(json!({"base_url": model.url(), "model": "offline-planner"})).unwrap();
    let chat = OpenAiChat::new(&llm_config, None).unwrap();
    let system_prompt = std::fs::read_to_string(prompts_dir().join("system.md")).unwrap();
    let one_turn = || async {
        let output = one_turn_run(&chat, &registry, &system_prompt, "Say hello.").await;
        assert_eq!(output.record.turns, 1);
    };
    runtime.block_on(one_turn());
    let body: async_openai::types::chat::CreateChatCompletionRequest =
        serde_json::from_value(model.requests().last().unwrap().clone()).unwrap();
    let openai =
        async_openai::Client::with_config(async_openai::config::OpenAIConfig::new().with_api_base(model.url()));
    let mut group = c.benchmark_group("turn");
    group.bench_function("agent_loop_one_turn", |b| b.to_async(&runtime).iter(&one_turn));
    group.bench_function("bare_async_openai", |b| {
        b.to_async(&runtime).iter(|| async { std::hint::black_box(openai.chat().create(body.clone()).await.unwrap()) })
    });
    group.finish();
    runtime.block_on(async {
        model.shutdown().await;
        board.shutdown().await.unwrap();
    });
}

fn parse_filter(c: &mut Criterion) {
    let message = json!({
        "id": "7f8c0001-1b2a-4c3d-9e8f-0a1b2c3d4e5f", "author_slug": "alice",
        "content": "Standup note: the deploy of the release branch went fine, @bob can you check the logs?",
        "chat_id": "c1d2e3f4-0000-4000-8000-000000000001", "task_id": null, "parent_id": null,
        "mentions": ["bob"], "created_at": "2026-11-30T04:00:00Z",
    });
    let frame = json!({"id": "ev-1", "seq": 1, "event": "message.new", "data": {"message": message},
                       "ts": "2026-11-30T04:00:00Z"})
    .to_string();
    let mut group = c.benchmark_group("events");
    group.throughput(Throughput::Elements(1));
    group.bench_function("parse_filter_message_new", |b| {
        b.iter(|| {
            let Some(StreamItem::Event(ReceivedEvent { event: Event::MessageNew(data), .. })) =
                parse_frame(&frame).into_item()
            else {
                panic!("not a message.new")
            };
            let facts = MessageFacts { author_kind: Some(MemberKind::Human), replies_to_agent: false };
            let fate = message_fate(&data.message, facts, "picogent", ChatListen::Mentions, &[]);
            assert_eq!(fate, MessageFate::NotAddressed);
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(Duration::from_secs(5));
    targets = dispatch, loop_turn, parse_filter
}
criterion_main!(benches);
