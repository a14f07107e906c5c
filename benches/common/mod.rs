//! Shared set-up of the benchmarks: the reference board, the offline model endpoint and the agent
//! on 127.0.0.1:0, as the end-to-end tests start them, plus small statistics helpers.
// Each bench binary uses a different part; `pub` here is for the benches, not an API.
#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use picogent::board::{BoardHandle, BoardOptions};
use picogent::config::Config;
use picogent::offline_model::{OfflineModelHandle, OfflineModelOptions};
use picogent::runtime::{AgentHandle, AgentOptions};
use picogent::secret::Secret;
use picogent::tracker::TrackerClient;
use picogent::tracker::model::{CreateTask, TaskOut};
use picogent::transport::StreamOptions;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

pub const SEED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/board-seed.json");

pub fn prompts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("prompts")
}

pub async fn start_board(dir: &Path) -> BoardHandle {
    let listen: SocketAddr = "127.0.0.1:0".parse().unwrap();
    picogent::board::start(BoardOptions::new(listen, dir.join("board.db"), Some(SEED.into()))).await.unwrap()
}

pub async fn start_model(delay: Duration) -> OfflineModelHandle {
    picogent::offline_model::start(OfflineModelOptions { delay, ..OfflineModelOptions::planner() }).await.unwrap()
}

pub fn client(board_url: &str, token: &str) -> TrackerClient {
    let config: picogent::config::TrackerConfig = serde_json::from_value(json!({"url": board_url})).unwrap();
    TrackerClient::new(&config, Secret::new(token)).unwrap()
}

/// An agent config as JSON (fields not named take their defaults); `extra` is merged on top.
pub fn agent_config(dir: &Path, board: &str, model: &str, extra: Value) -> Config {
    let mut config = json!({
        "slug": "picogent",
        "name": "picogent",
        "tracker": {"url": board, "timeout_ms": 5000},
        "llm": {"base_url": model, "model": "offline-planner", "timeout_ms": 20000},
        "state": {"path": dir.join("picogent.db")},
        "http": {"listen": "127.0.0.1:0"},
        "prompts_dir": prompts_dir(),
        // A short beat: a fresh start waits two of them for another copy of the agent.
        "presence": {"heartbeat_ms": 250},
    });
    merge(&mut config, extra);
    serde_json::from_value(config).unwrap()
}

fn merge(target: &mut Value, extra: Value) {
    match (target, extra) {
        (Value::Object(target), Value::Object(extra)) => {
            for (key, value) in extra {
                merge(target.entry(key).or_insert(Value::Null), value);
            }
        }
        (target, extra) => *target = extra,
    }
}

pub async fn start_agent(config: Config) -> AgentHandle {
    picogent::runtime::start(AgentOptions {
        config,
        tracker_token: Secret::new("tok-picogent"),
        llm_api_key: None,
        mcp_token: None,
        ui_token: None,
        stream: Some(StreamOptions::new("TEAMBOARD_TOKEN")),
        serve_http: false,
        clock: None,
    })
    .await
    .unwrap()
}

pub async fn create_task(alice: &TrackerClient, title: &str, assignee: Option<&str>) -> TaskOut {
    alice
        .create_task(
            &CreateTask {
                project_slug: "team".into(),
                title: title.into(),
                description: Some("Bench task\n- first step\n- second step".into()),
                assignee_slug: assignee.map(str::to_string),
                ..CreateTask::default()
            },
            None,
        )
        .await
        .unwrap()
}

/// Polls `check` every millisecond until it holds, panicking after `timeout`.
pub async fn wait_until(timeout: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// A TCP relay in front of `target` that reports the instant each chunk from a client arrives:
/// the agent's model requests pass through it, so the first chunk after an event is the moment
/// the request reached the model endpoint's socket.
pub async fn arrival_relay(target: SocketAddr) -> (SocketAddr, mpsc::UnboundedReceiver<Instant>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (arrivals, receiver) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((inbound, _)) = listener.accept().await {
            let arrivals = arrivals.clone();
            tokio::spawn(async move {
                let Ok(outbound) = TcpStream::connect(target).await else { return };
                let _ = inbound.set_nodelay(true);
                let _ = outbound.set_nodelay(true);
                let (mut in_read, mut in_write) = inbound.into_split();
                let (mut out_read, mut out_write) = outbound.into_split();
                let upstream = async move {
                    let mut buffer = vec![0u8; 64 * 1024];
                    loop {
                        let n = match in_read.read(&mut buffer).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        let _ = arrivals.send(Instant::now());
                        if out_write.write_all(&buffer[..n]).await.is_err() {
                            break;
                        }
                    }
                    let _ = out_write.shutdown().await;
                };
                let downstream = async move {
                    let _ = tokio::io::copy(&mut out_read, &mut in_write).await;
                    let _ = in_write.shutdown().await;
                };
                tokio::join!(upstream, downstream);
            });
        }
    });
    (address, receiver)
}

/// Median, quartiles, p99 and count of a sample, in the sample's unit.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Summary {
    pub median: f64,
    pub p25: f64,
    pub p75: f64,
    pub p99: f64,
    pub n: usize,
}

pub fn summarize(samples: &[f64]) -> Summary {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let at = |q: f64| {
        if sorted.is_empty() {
            return f64::NAN;
        }
        let index = ((sorted.len() - 1) as f64 * q).round() as usize;
        sorted[index]
    };
    Summary { median: at(0.5), p25: at(0.25), p75: at(0.75), p99: at(0.99), n: sorted.len() }
}

pub fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

/// One run of the agent loop as both turn benches measure it: the task-run tools offered, default
/// limits, and a prompt the offline planner answers with text at once (one request, no tool call).
pub async fn one_turn_run(
    model: &picogent::llm::OpenAiChat,
    tools: &picogent::tools::Registry,
    system_prompt: &str,
    prompt: &str,
) -> picogent::agent::RunOutput {
    picogent::agent::run(
        picogent::agent::RunSetup {
            model,
            tools,
            offered_tools: picogent::tools::TASK_RUN_TOOLS.iter().map(|s| s.to_string()).collect(),
            limits: picogent::config::Limits::default(),
            tool_context: picogent::tools::ToolContext::new("picogent"),
            cancel: tokio_util::sync::CancellationToken::new(),
            steering: None,
            window: picogent::agent::ModelWindow::default(),
            checkpoint: None,
            expects_tool_calls: true,
        },
        picogent::agent::RunInput {
            system_prompt: system_prompt.to_string(),
            history: Vec::new(),
            prompt: prompt.to_string(),
        },
    )
    .await
}
