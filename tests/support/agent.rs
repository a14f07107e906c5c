#![allow(dead_code, unreachable_pub)] // each test binary uses a different part; `pub` is for them
//! The long-lived agent under test, over real sockets: the reference board, the offline model
//! endpoint and `picogent run` in process or as a child, all on 127.0.0.1:0, with helpers that
//! read the board as a person would.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use picogent::board::{BoardHandle, BoardOptions};
use picogent::config::Config;
use picogent::offline_model::{OfflineModelHandle, OfflineModelOptions};
use picogent::runtime::{AgentHandle, AgentOptions};
use picogent::secret::Secret;
use picogent::tracker::TrackerClient;
use picogent::tracker::model::*;
use picogent::transport::StreamOptions;
use serde_json::{Value, json};

pub const MCP_TOKEN: &str = "tok-mcp-test";
pub const SEED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/board-seed.json");

pub fn prompts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("prompts")
}

pub async fn start_board(dir: &Path) -> BoardHandle {
    start_board_at(dir, "127.0.0.1:0".parse().unwrap()).await
}

pub async fn start_board_at(dir: &Path, listen: std::net::SocketAddr) -> BoardHandle {
    picogent::board::start(BoardOptions::new(listen, dir.join("board.db"), Some(SEED.into()))).await.unwrap()
}

pub async fn start_model(delay_ms: u64) -> OfflineModelHandle {
    let options = OfflineModelOptions { delay: Duration::from_millis(delay_ms), ..OfflineModelOptions::planner() };
    picogent::offline_model::start(options).await.unwrap()
}

/// An agent config as JSON, so fields not named take their defaults; `extra` is merged on top.
pub fn agent_config(dir: &Path, board: &str, model: &str, slug: &str, extra: Value) -> Config {
    let mut config = json!({
        "slug": slug,
        "name": slug,
        "tracker": {"url": board, "timeout_ms": 5000,
                    "retry": {"max_attempts": 8, "initial_delay_ms": 20, "max_delay_ms": 200, "max_elapsed_ms": 10000, "jitter": true}},
        "llm": {"base_url": model, "model": "offline-planner", "timeout_ms": 20000,
                "retry": {"max_attempts": 3, "initial_delay_ms": 20, "max_delay_ms": 200, "max_elapsed_ms": 5000, "jitter": false}},
        "state": {"path": dir.join(format!("{slug}.db"))},
        "http": {"listen": "127.0.0.1:0"},
        "prompts_dir": prompts_dir(),
        // A short beat: a fresh start waits two of them for another copy of the agent.
        "presence": {"heartbeat_ms": 250},
    });
    merge(&mut config, extra);
    serde_json::from_value(config).unwrap()
}

pub fn merge(target: &mut Value, extra: Value) {
    match (target, extra) {
        (Value::Object(target), Value::Object(extra)) => {
            for (key, value) in extra {
                merge(target.entry(key).or_insert(Value::Null), value);
            }
        }
        (target, extra) => *target = extra,
    }
}

/// `picogent run --config <path>` as a child process, quiet, as the agent member.
pub fn spawn_agent_process(config_path: &Path) -> std::process::Child {
    spawn_agent_process_with(config_path, std::process::Stdio::null())
}

/// [`spawn_agent_process`], with its stderr (the log) going to `stderr`.
pub fn spawn_agent_process_with(config_path: &Path, stderr: impl Into<std::process::Stdio>) -> std::process::Child {
    spawn_agent_process_logging(config_path, stderr, "warn")
}

/// [`spawn_agent_process_with`], its log holding what `filter` (a `RUST_LOG` value) lets through.
pub fn spawn_agent_process_logging(
    config_path: &Path,
    stderr: impl Into<std::process::Stdio>,
    filter: &str,
) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_picogent"))
        .args(["run", "--config"])
        .arg(config_path)
        .env("TEAMBOARD_TOKEN", "tok-picogent")
        .env("RUST_LOG", filter)
        .stdout(std::process::Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap()
}

pub fn fast_stream() -> StreamOptions {
    StreamOptions {
        heartbeat_interval: Duration::from_millis(300),
        initial_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(300),
        ..StreamOptions::new("TEAMBOARD_TOKEN")
    }
}

pub async fn start_agent(config: Config) -> AgentHandle {
    start_agent_with_clock(config, None).await
}

/// [`start_agent`], its schedules firing by `clock` (a test's `ShiftedClock`) when given.
pub async fn start_agent_with_clock(
    config: Config,
    clock: Option<std::sync::Arc<dyn picogent::schedule::Clock>>,
) -> AgentHandle {
    picogent::runtime::start(agent_options(config, clock)).await.unwrap()
}

/// What [`start_agent_with_clock`] starts the agent with (its member's token, the test MCP token,
/// the fast stream, HTTP on), for a test that wants to see a start refused.
pub fn agent_options(config: Config, clock: Option<std::sync::Arc<dyn picogent::schedule::Clock>>) -> AgentOptions {
    // A coding agent runs in the sandbox where bwrap is installed, as under `picogent run`; its
    // relay is picogent's own `sandbox-relay`, which this test process is not.
    picogent::workspace::sandbox::set_relay_program(std::path::PathBuf::from(env!("CARGO_BIN_EXE_picogent")));
    let token = format!("tok-{}", config.slug);
    AgentOptions {
        config,
        tracker_token: Secret::new(token),
        llm_api_key: None,
        mcp_token: Some(Secret::new(MCP_TOKEN)),
        ui_token: None,
        stream: Some(fast_stream()),
        serve_http: true,
        clock,
    }
}

pub fn client(board: &BoardHandle, token: &str) -> TrackerClient {
    let config: picogent::config::TrackerConfig = serde_json::from_value(json!({"url": board.url()})).unwrap();
    TrackerClient::new(&config, Secret::new(token)).unwrap()
}

/// Polls `check` until it returns `Some`, failing with `what` after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub async fn wait_ready(agent: &AgentHandle) {
    eventually(Duration::from_secs(10), "agent caught up", || async { agent.status.caught_up().then_some(()) }).await;
}

pub async fn wait_idle(agent: &AgentHandle) {
    eventually(Duration::from_secs(20), "agent idle", || async { (agent.status.active_runs() == 0).then_some(()) })
        .await;
}

/// Resolves once the router has handled every input sent to it before this call: the events the
/// stream handed it, and the ends of runs with what follows them (the notice, a follow-up run).
/// The router takes its inputs one at a time, in order, so the answer to a stop of a run that
/// does not exist comes after all of them. Returns at once when the router has ended.
pub async fn router_settled(agent: &AgentHandle) {
    let (reply, answered) = tokio::sync::oneshot::channel();
    let barrier = picogent::router::Input::StopRun { run_id: "no-such-run: a barrier".to_string(), reply };
    if agent.inputs.send(barrier).await.is_ok() {
        let stopped = tokio::time::timeout(Duration::from_secs(20), answered).await.expect("the router answered");
        assert_ne!(stopped, Ok(true), "the barrier stopped no run");
    }
}

/// Waits until no run is active and the router has handled what the last run's end started
/// (a follow-up run, a notice): nothing more is coming unless a new event arrives.
pub async fn wait_settled(agent: &AgentHandle) {
    loop {
        wait_idle(agent).await;
        router_settled(agent).await;
        if agent.status.active_runs() == 0 {
            return;
        }
    }
}

/// The highest seq the board at `board_db` has logged for `member`: what the member's event
/// stream will have delivered once it has caught up.
pub async fn board_head(board_db: &Path, member: &str) -> u64 {
    use sqlx::ConnectOptions;
    let options = sqlx::sqlite::SqliteConnectOptions::new().filename(board_db).read_only(true);
    let mut connection = options.connect().await.unwrap();
    let head: i64 = sqlx::query_scalar("SELECT coalesce(max(seq), 0) FROM events WHERE member_slug = ?")
        .bind(member)
        .fetch_one(&mut connection)
        .await
        .unwrap();
    let _ = sqlx::Connection::close(connection).await;
    u64::try_from(head).unwrap_or(0)
}

/// Waits until the agent has handled every event the board at `board_db` logged for `member` so
/// far (and the reconciliation of its last connection), and every run those started has ended:
/// what a check that something did *not* happen waits for.
pub async fn caught_up_with_board(agent: &AgentHandle, board_db: &Path, member: &str) {
    let head = board_head(board_db, member).await;
    eventually(Duration::from_secs(20), &format!("the agent handled the board's events up to seq {head}"), || async {
        (agent.status.caught_up() && agent.state.last_seq().await.ok()? >= head).then_some(())
    })
    .await;
    wait_settled(agent).await;
}

pub async fn create_assigned(alice: &TrackerClient, title: &str, description: &str) -> TaskOut {
    alice
        .create_task(
            &CreateTask {
                project_slug: "team".into(),
                title: title.into(),
                description: Some(description.into()),
                assignee_slug: Some("picogent".into()),
                ..CreateTask::default()
            },
            None,
        )
        .await
        .unwrap()
}

pub async fn wait_status(alice: &TrackerClient, task_id: &str, status: TaskStatus) -> TaskOut {
    eventually(Duration::from_secs(30), &format!("task {task_id} in {status}"), || async {
        let task = alice.get_task(task_id).await.ok()?;
        (task.status == status).then_some(task)
    })
    .await
}

pub async fn comments(alice: &TrackerClient, task_id: &str) -> Vec<MessageOut> {
    alice
        .list_messages(&MessageQuery { task_id: Some(task_id.into()), limit: Some(200), ..MessageQuery::default() })
        .await
        .unwrap()
}

pub async fn thread(alice: &TrackerClient, root: &str) -> Vec<MessageOut> {
    alice
        .list_messages(&MessageQuery { parent_id: Some(root.into()), limit: Some(200), ..MessageQuery::default() })
        .await
        .unwrap()
}

pub async fn chat_id(alice: &TrackerClient) -> String {
    alice.get_project("team").await.unwrap().chat_id
}

pub async fn comment(who: &TrackerClient, task_id: &str, text: &str) -> MessageOut {
    who.send_message(
        &SendMessage { content: text.into(), task_id: Some(task_id.into()), ..SendMessage::default() },
        None,
    )
    .await
    .unwrap()
}

pub async fn say(who: &TrackerClient, chat: &str, text: &str) -> MessageOut {
    who.send_message(&SendMessage { content: text.into(), chat_id: Some(chat.into()), ..SendMessage::default() }, None)
        .await
        .unwrap()
}

pub async fn runs_for(agent: &AgentHandle, session: &str) -> Vec<picogent::state::RunRow> {
    agent.state.list_runs(500).await.unwrap().into_iter().filter(|r| r.session_key.to_string() == session).collect()
}

/// The text of every user message of the first chat request the model received.
pub fn first_user_prompt(model: &OfflineModelHandle) -> String {
    let requests = model.requests();
    let first = requests.first().expect("the model got a request");
    first["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Writes `config` as `agent.json` in `dir`, for a `picogent` child process.
pub fn write_config(dir: &Path, config: &Config) -> PathBuf {
    let path = dir.join("agent.json");
    std::fs::write(&path, serde_json::to_string_pretty(config).unwrap()).unwrap();
    path
}

/// Runs `picogent <args> --config <config_path>` as the agent member to its end, off the runtime.
pub async fn picogent_output(args: &[&str], config_path: &Path) -> std::process::Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_picogent"));
    command.args(args).arg("--config").arg(config_path).env("TEAMBOARD_TOKEN", "tok-picogent").env("RUST_LOG", "warn");
    tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap()
}

/// `/readyz` once the first reconciliation has been reported.
pub async fn startup_report(http: std::net::SocketAddr) -> Value {
    eventually(Duration::from_secs(30), "/readyz with the startup's reconciliation", || async {
        let response = reqwest::get(format!("http://{http}/readyz")).await.ok()?;
        let ready = response.status().is_success();
        let body: Value = response.json().await.ok()?;
        (ready && !body["startup"]["reconciliation"].is_null()).then_some(body)
    })
    .await
}

/// The text of an MCP resource (`run://{id}/logs`, `run://{id}/result`, …) as a client reads it.
pub async fn resource_text(mcp: &rmcp::Peer<rmcp::RoleClient>, uri: &str) -> String {
    use rmcp::model::{ReadResourceRequestParams, ResourceContents};
    let result = mcp.read_resource(ReadResourceRequestParams::new(uri)).await.unwrap();
    match &result.contents[0] {
        ResourceContents::TextResourceContents { text, .. } => text.clone(),
        other => panic!("unexpected contents of {uri}: {other:?}"),
    }
}
