//! The router, a run, the scheduler and presence at their own level, faster than the end-to-end
//! tests of `tests/`: the real state (SQLite, a file in a temporary folder), the reference board
//! and the offline model in process on 127.0.0.1:0, and no event stream, no HTTP, no presence
//! unless a test claims it. The router is fed typed inputs on its channel, as the stream would
//! feed it; a run is executed as the router would spawn it; the scheduler reads a clock the test
//! sets. What a person sees is read off the board; what is kept, off the state.
//!
//! Nothing waits for a fixed time: a test waits for the router's answer to a barrier (it takes
//! its inputs one at a time, in order), for the count of active runs to change, for the model to
//! receive a request, for a run's end, for a scheduler's wake to end, or for a presence claim to
//! end (which waits as long as the protocol says, and no more).
//!
//! `router.rs`: what the router makes of events, run ends and stop requests. `run.rs`: one run,
//! from its request to its recorded end. `trigger.rs`: a run's trigger, as text and typed, and
//! what a run claimed from the queue gets back. `scheduler.rs`: the scheduler through its own
//! API, over a clock the test sets: a due firing acts once, an idle one calls no model, what came
//! due while away is caught up once, "run now". `presence.rs`: `claim` and the heartbeat against
//! the board, with short beats: a fresh copy, a restart, a second copy refused, a copy taken over.

mod presence;
mod router;
mod run;
mod scheduler;
mod tree;
mod trigger;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::request::RunServices;
use crate::router::{Input, QueueSetup, Router};
use crate::status::StatusBoard;
use picogent_board::BoardHandle;
use picogent_config::Config;
use picogent_inspector::startup::ReconcileReport;
use picogent_llm::{ChatModel, ChatRequest, ChatResponse, LlmError};
use picogent_offline_model::{OfflineModelHandle, OfflineModelOptions};
use picogent_state::{RunQueue, RunRow, State};
use picogent_support::secret::Secret;
use picogent_tools::ToolSource;
use picogent_tracker::TrackerClient;
use picogent_tracker::model::{CreateTask, MessageOut, MessageQuery, SendMessage, TaskOut};
use picogent_tracker::session::SessionKey;
use picogent_tracker::stream::{LinkStatus, StartMode, StreamItem};

/// How long any one wait may take before the test fails: generous, as a slow machine is no bug;
/// a passing test waits for what it waits for, not this.
const WAIT: Duration = Duration::from_secs(20);

/// Whether the model answers at once, or holds every request until the test opens it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Model {
    Open,
    Held,
}

/// The board, the model, the state and the services every run shares, as `runtime::start`
/// assembles them for a single copy.
struct World {
    board: BoardHandle,
    model: OfflineModelHandle,
    gate: Arc<Gate>,
    services: Arc<RunServices>,
    state: State,
    queue: RunQueue,
    /// The board as alice, a person, sees it.
    alice: TrackerClient,
    _dir: tempfile::TempDir,
}

impl World {
    async fn start(model: Model) -> World {
        World::start_with(model, json!({})).await
    }

    /// A world whose agent config has `extra` merged on top of the defaults below.
    async fn start_with(gate: Model, extra: Value) -> World {
        let dir = tempfile::tempdir().unwrap();
        let board = picogent_board::start_seeded(dir.path()).await.unwrap();
        let model = picogent_offline_model::start(OfflineModelOptions::planner()).await.unwrap();
        let config = Arc::new(config(dir.path(), &board.url(), &model.url(), extra));
        let state = State::open(&config.state.path).await.unwrap();
        let (state, queue) = state.for_holder("router-under-test", false);
        let client = TrackerClient::new(&config.tracker, Secret::new("tok-picogent")).unwrap();
        let registry = picogent_tools::Registry::new(client.clone(), config.limits.max_tool_result_bytes).unwrap();
        let host =
            Arc::new(picogent_mcp::host::McpHost::start(&config.mcp_servers, &config.state, &config.limits).await);
        let sources = vec![Arc::new(registry) as Arc<dyn ToolSource>, host.clone() as Arc<dyn ToolSource>];
        let tools: Arc<dyn ToolSource> = Arc::new(picogent_tools::governed(sources, &config.permissions, &client));
        let gate = Arc::new(Gate {
            inner: picogent_llm::chat_model(&config.llm, None).unwrap(),
            open: watch::channel(gate == Model::Open).0,
            arrived: watch::channel(0).0,
        });
        let metrics = Arc::new(Metrics::default());
        let status = Arc::new(StatusBoard::default());
        let services = Arc::new(RunServices {
            config: config.clone(),
            client: client.clone(),
            state: state.clone(),
            metrics: metrics.clone(),
            status: status.clone(),
            prompts: Arc::new(picogent_prompts::Prompts::load(&config.prompts_dir).unwrap()),
            tools,
            model: gate.clone(),
            shutdown: CancellationToken::new(),
            host,
            post_guard: Arc::new(crate::guard::ReplyCap {
                state: state.clone(),
                client: client.clone(),
                max_per_hour: config.limits.max_replies_per_thread_per_hour,
                lock: Default::default(),
            }),
            coding: None,
            slots: Arc::new(crate::waits::RunSlots::new(
                config.limits.max_concurrent_runs as usize,
                state.clone(),
                metrics,
                status,
            )),
        });
        let alice = tracker_client(&board, "tok-alice");
        World { board, model, gate, services, state, queue, alice, _dir: dir }
    }

    /// Starts the router over this world's services and queue, as `runtime::start` does.
    fn start_router(&self) -> RouterUnderTest {
        let (inputs, received) = mpsc::channel::<Input>(1024);
        let wake = inputs.clone();
        self.services.slots.connect_router(move || {
            let _ = wake.try_send(Input::SlotFreed);
        });
        let router = self.router(inputs.clone());
        let task = tokio::spawn(router.run(received));
        RouterUnderTest { inputs, task, status: self.services.status.clone() }
    }

    /// A router over this world's services and queue, as `runtime::start` makes it, not started:
    /// for a test that asks it one thing.
    fn router(&self, inputs: mpsc::Sender<Input>) -> Router {
        let setup = QueueSetup {
            run_lease: Duration::from_secs(60),
            poll: None,
            host: "localhost".to_string(),
            http: None,
            started_at_ms: 0,
            outage: Default::default(),
        };
        let shutdown = self.services.shutdown.clone();
        Router::new(self.services.clone(), inputs, shutdown, self.queue.clone(), setup)
    }

    fn metrics(&self) -> &Metrics {
        &self.services.metrics
    }

    /// Every run of `session` the state holds, oldest first.
    async fn runs_of(&self, session: &SessionKey) -> Vec<RunRow> {
        let mut runs: Vec<RunRow> =
            self.state.list_runs(500).await.unwrap().into_iter().filter(|run| &run.session_key == session).collect();
        runs.sort_by_key(|run| run.started_at);
        runs
    }

    /// Alice says `text` in the project's chat: a new thread.
    async fn alice_says(&self, text: &str) -> MessageOut {
        let chat_id = self.alice.get_project("team").await.unwrap().chat_id;
        let message = SendMessage { content: text.into(), chat_id: Some(chat_id), ..SendMessage::default() };
        self.alice.send_message(&message, None).await.unwrap()
    }

    /// A task alice assigns to the agent, with two steps to work, as the board answers its creation.
    async fn assigned_task(&self, title: &str) -> TaskOut {
        let task = CreateTask {
            project_slug: "team".into(),
            title: title.into(),
            description: Some("Docs for 1.0\n- write the guide\n- proofread it".into()),
            assignee_slug: Some("picogent".into()),
            ..CreateTask::default()
        };
        self.alice.create_task(&task, None).await.unwrap()
    }

    /// The messages of the thread under `root`, as the board lists them.
    async fn thread(&self, root: &str) -> Vec<MessageOut> {
        let query = MessageQuery { parent_id: Some(root.into()), limit: Some(200), ..MessageQuery::default() };
        self.alice.list_messages(&query).await.unwrap()
    }

    /// The comments on the task `task_id`, as the board lists them.
    async fn comments(&self, task_id: &str) -> Vec<MessageOut> {
        let query = MessageQuery { task_id: Some(task_id.into()), limit: Some(200), ..MessageQuery::default() };
        self.alice.list_messages(&query).await.unwrap()
    }

    /// Resolves once the model has received `n` requests (held or not).
    async fn model_received(&self, n: usize) {
        let mut arrived = self.gate.arrived.subscribe();
        tokio::time::timeout(WAIT, arrived.wait_for(|arrived| *arrived >= n))
            .await
            .unwrap_or_else(|_| panic!("the model never received request {n}"))
            .unwrap();
    }

    /// Lets every held model request, and every later one, through.
    fn open_model(&self) {
        self.gate.open.send_replace(true);
    }

    async fn shut_down(self, router: Option<RouterUnderTest>) {
        self.services.shutdown.cancel();
        if let Some(router) = router {
            tokio::time::timeout(WAIT, router.task).await.expect("the router ended").unwrap();
        }
        self.services.host.shutdown().await;
        self.state.close().await;
        self.model.shutdown().await;
        self.board.shutdown().await.unwrap();
    }
}

/// A running router and its input channel.
struct RouterUnderTest {
    inputs: mpsc::Sender<Input>,
    task: tokio::task::JoinHandle<()>,
    status: Arc<StatusBoard>,
}

impl RouterUnderTest {
    async fn send(&self, input: Input) {
        self.inputs.send(input).await.unwrap();
    }

    /// Stops the run `run_id` as MCP's `stop_run` does; whether a run was stopped.
    async fn stop_run(&self, run_id: &str) -> bool {
        let (reply, answered) = tokio::sync::oneshot::channel();
        self.send(Input::StopRun { run_id: run_id.to_string(), reply }).await;
        tokio::time::timeout(WAIT, answered).await.expect("the router answered the stop").unwrap()
    }

    /// Resolves once the router has handled every input sent before: it takes them one at a time
    /// and in order, so its answer to a stop of no run comes after all of them.
    async fn handled(&self) {
        assert!(!self.stop_run("no-such-run: a barrier").await, "the barrier stopped no run");
    }

    /// Tells the router its event stream began and caught up, as after a (re)connect, and returns
    /// what the REST reconciliation that follows found and did.
    async fn catch_up(&self) -> ReconcileReport {
        let began = LinkStatus::Began { mode: StartMode::Resume, from_seq: 0, skipped: 0 };
        self.send(Input::from(StreamItem::Status(began))).await;
        self.send(Input::from(StreamItem::Status(LinkStatus::CaughtUp { last_seq: 0 }))).await;
        self.handled().await;
        // The reconciliation runs beside the router and hands it what it found; the status board
        // shows the report once the router has taken it all up, and tells nobody: look until then.
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Some(report) = self.status.startup().and_then(|startup| startup.reconciliation) {
                return report;
            }
            assert!(tokio::time::Instant::now() < deadline, "no reconciliation after {WAIT:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Resolves once no run is active and the router has handled what the last run's end led to
    /// (its notice, a follow-up run): nothing more happens until a new input arrives.
    async fn settled(&self) {
        loop {
            self.handled().await;
            let mut changes = self.status.subscribe();
            while self.status.active_runs() > 0 {
                // A lagged receiver missed changes, which is a change too: look again.
                let changed = tokio::time::timeout(WAIT, changes.recv()).await;
                assert!(changed.is_ok(), "runs still active after {WAIT:?}");
            }
            self.handled().await;
            if self.status.active_runs() == 0 {
                return;
            }
        }
    }
}

/// The offline model behind a gate the test holds: every request is counted as it arrives, and
/// waits until the gate is open. A run held at its model request is a run in progress, for as
/// long as the test needs it to be.
struct Gate {
    inner: Arc<dyn ChatModel>,
    open: watch::Sender<bool>,
    arrived: watch::Sender<usize>,
}

impl ChatModel for Gate {
    fn complete<'a>(&'a self, request: &'a ChatRequest<'a>) -> BoxFuture<'a, Result<ChatResponse, LlmError>> {
        Box::pin(async move {
            self.arrived.send_modify(|arrived| *arrived += 1);
            let mut open = self.open.subscribe();
            // The sender lives as long as the gate: this ends only when it opens.
            let _ = open.wait_for(|open| *open).await;
            self.inner.complete(request).await
        })
    }
}

/// The agent `picogent` on `board`, thinking with the model at `model`, with fast retries;
/// fields not named take their defaults; `extra` is merged on top.
fn config(dir: &Path, board: &str, model: &str, extra: Value) -> Config {
    let mut config = json!({
        "slug": "picogent",
        "name": "picogent",
        "tracker": {"url": board, "timeout_ms": 5000,
                    "retry": {"max_attempts": 3, "initial_delay_ms": 20, "max_delay_ms": 100, "max_elapsed_ms": 2000, "jitter": false}},
        "llm": {"base_url": model, "model": "offline-planner", "timeout_ms": 20000,
                "retry": {"max_attempts": 2, "initial_delay_ms": 20, "max_delay_ms": 100, "max_elapsed_ms": 2000, "jitter": false}},
        "state": {"path": dir.join("state.db")},
        "prompts_dir": Path::new(env!("CARGO_MANIFEST_DIR")).join("../../prompts"),
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

fn tracker_client(board: &BoardHandle, token: &str) -> TrackerClient {
    let config: picogent_config::TrackerConfig = serde_json::from_value(json!({"url": board.url()})).unwrap();
    TrackerClient::new(&config, Secret::new(token)).unwrap()
}
