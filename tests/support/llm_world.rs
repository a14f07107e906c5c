//! The world the agent-loop tests run in: the reference board on 127.0.0.1:0 (seeded from
//! `fixtures/board-seed.json`) and the real tool registry acting as the agent `picogent`. A
//! human, `alice`, sets the scene and reads the result through the REST client.
#![allow(unreachable_pub)] // `pub` is for the tests that include it, not an API

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use picogent::board::{BoardHandle, BoardOptions};
use picogent::config::TrackerConfig;
use picogent::retry::RetryConfig;
use picogent::secret::Secret;
use picogent::tools::{Registry, TASK_RUN_TOOLS, ToolContext, ToolDefinition, ToolResult, ToolSource};
use picogent::tracker::TrackerClient;
use picogent::tracker::model::{CreateTask, MessageOut, MessageQuery, SendMessage, StepOut, TaskOut};
use tokio::sync::Notify;

pub const AGENT: &str = "picogent";

fn tracker_config(url: &str) -> TrackerConfig {
    TrackerConfig {
        url: url.to_string(),
        api_prefix: "/api".to_string(),
        token_env: "TEAMBOARD_TOKEN".to_string(),
        timeout_ms: 10_000,
        retry: RetryConfig {
            max_attempts: 3,
            initial_delay_ms: 10,
            max_delay_ms: 50,
            max_elapsed_ms: 2_000,
            jitter: false,
        },
    }
}

pub struct World {
    board: BoardHandle,
    _dir: tempfile::TempDir,
    registry: Registry,
    alice: TrackerClient,
}

impl World {
    pub async fn start() -> World {
        let dir = tempfile::tempdir().unwrap();
        let seed = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/board-seed.json");
        let board =
            picogent::board::start(BoardOptions::loopback(dir.path().join("board.db"), Some(seed))).await.unwrap();
        let config = tracker_config(&board.url());
        let agent = TrackerClient::new(&config, Secret::new("tok-picogent")).unwrap();
        let registry = Registry::new(agent, 8 * 1024).unwrap();
        let alice = TrackerClient::new(&config, Secret::new("tok-alice")).unwrap();
        World { board, _dir: dir, registry, alice }
    }

    /// The registry as the loop sees it.
    pub fn tools(&self) -> Arc<dyn ToolSource> {
        Arc::new(self.registry.clone())
    }

    /// The tools a task run is offered.
    pub fn tool_names(&self) -> Vec<String> {
        TASK_RUN_TOOLS.iter().map(|name| name.to_string()).collect()
    }

    pub fn agent_slug(&self) -> &str {
        AGENT
    }

    /// Alice creates a task in project `team` assigned to the agent; returns its key.
    pub async fn create_task(&self, description: &str) -> String {
        let body = CreateTask {
            project_slug: "team".to_string(),
            title: "A task for the agent".to_string(),
            description: (!description.is_empty()).then(|| description.to_string()),
            assignee_slug: Some(AGENT.to_string()),
            ..CreateTask::default()
        };
        self.alice.create_task(&body, None).await.unwrap().key
    }

    pub async fn task(&self, key: &str) -> TaskOut {
        self.alice.get_task(key).await.unwrap()
    }

    pub async fn steps(&self, key: &str) -> Vec<StepOut> {
        self.alice.list_steps(key).await.unwrap()
    }

    pub async fn comments(&self, key: &str) -> Vec<MessageOut> {
        let task = self.task(key).await;
        self.alice.list_messages(&MessageQuery { task_id: Some(task.id), ..MessageQuery::default() }).await.unwrap()
    }

    /// Alice posts in the project chat; returns the message.
    pub async fn post_in_chat(&self, content: &str) -> MessageOut {
        let chat_id = self.alice.get_project("team").await.unwrap().chat_id;
        let body = SendMessage { content: content.to_string(), chat_id: Some(chat_id), ..SendMessage::default() };
        self.alice.send_message(&body, None).await.unwrap()
    }

    pub async fn thread(&self, parent_id: &str) -> Vec<MessageOut> {
        let query = MessageQuery { parent_id: Some(parent_id.to_string()), ..MessageQuery::default() };
        self.alice.list_messages(&query).await.unwrap()
    }

    pub async fn shutdown(self) {
        self.board.shutdown().await.unwrap();
    }
}

/// A tool source that holds every call at a gate until `release` (or until `hold` calls have
/// arrived, when all are let through at once): proof that calls ran concurrently without timing.
pub struct Gate {
    pub inner: Arc<dyn ToolSource>,
    pub hold: usize,
    arrived: std::sync::Mutex<usize>,
    open: Notify,
}

impl Gate {
    pub fn new(inner: Arc<dyn ToolSource>, hold: usize) -> Gate {
        Gate { inner, hold, arrived: std::sync::Mutex::new(0), open: Notify::new() }
    }
}

impl ToolSource for Gate {
    fn tools(&self) -> Vec<ToolDefinition> {
        self.inner.tools()
    }

    fn call<'a>(
        &'a self,
        name: &'a str,
        arguments: serde_json::Value,
        context: &'a ToolContext,
    ) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            let notified = self.open.notified();
            let all_here = {
                let mut arrived = self.arrived.lock().unwrap();
                *arrived += 1;
                *arrived >= self.hold
            };
            if all_here {
                self.open.notify_waiters();
            } else {
                // Calls run one after the other would wait here forever; the bound makes such a
                // failure a clear test failure instead of a hang.
                if tokio::time::timeout(Duration::from_secs(10), notified).await.is_err() {
                    return ToolResult::error(
                        "gate: the other calls never arrived (the calls did not run concurrently)",
                    );
                }
            }
            self.inner.call(name, arguments, context).await
        })
    }
}
