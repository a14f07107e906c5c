//! The MCP server against the reference board, driven by clients this project did not write: the
//! official Python MCP SDK (both protocol eras, stdio and HTTP) and the MCP Inspector's CLI; plus
//! HTTP security, stdout hygiene on stdio, and the running-agent extension (rmcp's own client).
//!
//! The external clients are found through environment variables, with defaults under `.interop/`
//! (see `docs/mcp-server.md`); a missing one fails the test with the command that installs it.

#[path = "support/interop.rs"]
mod interop;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use picogent::board::{self, BoardHandle, BoardOptions};
use picogent::config::TrackerConfig;
use picogent::mcp::server::{
    self as mcp, AgentControl, AgentControlError, AgentStatus, HttpSecurity, McpServer, RunResult, RunSummary, StartRun,
};
use picogent::prompts::Prompts;
use picogent::retry::RetryConfig;
use picogent::secret::Secret;
use picogent::state::RunStatus;
use picogent::tools::{Registry, ToolContext, ToolDefinition, ToolResult, ToolSource};
use picogent::tracker::TrackerClient;
use picogent::tracker::model::{CreateTask, SendMessage};
use rmcp::model::{
    CallToolRequestParams, ClientConfig, ClientRequest, ProgressNotificationParam, ProtocolVersion,
    ReadResourceRequestParams, ServerNotification, SubscriptionFilter,
};
use rmcp::service::{NotificationContext, PeerRequestOptions};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient, ServiceError, ServiceExt};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

/// How long one external client run may take before the test gives up on it.
const CLIENT_DEADLINE: Duration = Duration::from_secs(120);
const MCP_TOKEN: &str = "tok-mcp-interop";

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The Python with the MCP SDK: `MCP_INTEROP_PYTHON`, default `.interop/venv/bin/python`.
fn python() -> PathBuf {
    interop::ensure_installed();
    let path = std::env::var_os("MCP_INTEROP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest_dir().join(".interop/venv/bin/python"));
    assert!(
        path.exists(),
        "no Python with the MCP SDK at {}: run `python3 -m venv .interop/venv && .interop/venv/bin/pip install \
         'mcp>=2,<3'` in the repository, or set MCP_INTEROP_PYTHON to a python that has it",
        path.display()
    );
    path
}

/// The MCP Inspector: `MCP_INTEROP_INSPECTOR`, default `.interop/node_modules/.bin/mcp-inspector`.
fn inspector() -> PathBuf {
    interop::ensure_installed();
    let path = std::env::var_os("MCP_INTEROP_INSPECTOR")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest_dir().join(".interop/node_modules/.bin/mcp-inspector"));
    assert!(
        path.exists(),
        "no MCP Inspector at {}: run `npm install --prefix .interop @modelcontextprotocol/inspector` in the \
         repository, or set MCP_INTEROP_INSPECTOR to its mcp-inspector binary",
        path.display()
    );
    path
}

fn tracker_as(url: &str, token: &str) -> TrackerClient {
    let config = TrackerConfig {
        url: url.to_string(),
        api_prefix: "/api".to_string(),
        token_env: "UNUSED".to_string(),
        timeout_ms: 10_000,
        retry: RetryConfig::default(),
    };
    TrackerClient::new(&config, Secret::new(token)).unwrap()
}

/// A seeded board with one task (a step, a comment), and an `agent.json` pointing at it.
struct Fixture {
    board: BoardHandle,
    dir: tempfile::TempDir,
    task_key: String,
    task_title: String,
    comment_id: String,
}

impl Fixture {
    async fn start() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let seed = manifest_dir().join("fixtures/board-seed.json");
        let board = board::start(BoardOptions::loopback(dir.path().join("board.db"), Some(seed))).await.unwrap();
        let alice = tracker_as(&board.url(), "tok-alice");
        let task_title = "Write the interop notes".to_string();
        let task = alice
            .create_task(
                &CreateTask {
                    project_slug: "team".into(),
                    title: task_title.clone(),
                    description: Some("Cover stdio and HTTP.".into()),
                    assignee_slug: Some("picogent".into()),
                    ..Default::default()
                },
                None,
            )
            .await
            .unwrap();
        alice.add_step(&task.key, "Draft the outline", None).await.unwrap();
        let comment = alice
            .send_message(
                &SendMessage {
                    content: "@picogent keep it short please".into(),
                    task_id: Some(task.id.clone()),
                    ..Default::default()
                },
                None,
            )
            .await
            .unwrap();
        let config = json!({
            "slug": "picogent",
            "name": "Picogent",
            "tracker": {"url": board.url(), "token_env": "TEAMBOARD_TOKEN"},
            "llm": {"base_url": "http://127.0.0.1:9/v1", "model": "offline-planner"},
            "state": {"path": dir.path().join("picogent.db")},
            "prompts_dir": manifest_dir().join("prompts"),
        });
        std::fs::write(dir.path().join("agent.json"), serde_json::to_string_pretty(&config).unwrap()).unwrap();
        Fixture { board, dir, task_key: task.key, task_title, comment_id: comment.id }
    }

    fn config_path(&self) -> PathBuf {
        self.dir.path().join("agent.json")
    }

    /// `picogent mcp ...` with the tokens in its environment.
    fn picogent(&self) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_picogent"));
        command
            .current_dir(self.dir.path())
            .env("TEAMBOARD_TOKEN", "tok-picogent")
            .env("PICOGENT_MCP_TOKEN", MCP_TOKEN)
            .env("NO_COLOR", "1")
            .kill_on_drop(true);
        command
    }

    fn tracker(&self) -> TrackerClient {
        tracker_as(&self.board.url(), "tok-picogent")
    }

    fn prompts(&self) -> Arc<Prompts> {
        Arc::new(Prompts::load(&manifest_dir().join("prompts")).unwrap())
    }
}

/// Runs the Python SDK script; answers its `REPORT` line, failing with its output otherwise.
async fn run_python_client(fixture: &Fixture, mode: &str, transport: &[&str]) -> Value {
    let script = manifest_dir().join("tests/interop/python_client.py");
    let mut command = tokio::process::Command::new(python());
    command
        .arg(&script)
        .args(["--mode", mode, "--task", &fixture.task_key, "--project", "team", "--message", &fixture.comment_id])
        .args(transport)
        .current_dir(fixture.dir.path())
        .env("TEAMBOARD_TOKEN", "tok-picogent")
        .env("PICOGENT_MCP_TOKEN", MCP_TOKEN)
        .env("NO_COLOR", "1")
        .kill_on_drop(true);
    let output =
        tokio::time::timeout(CLIENT_DEADLINE, command.output()).await.expect("python client timed out").unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "python client ({mode}, {transport:?}) failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let report = stdout
        .lines()
        .find_map(|line| line.strip_prefix("REPORT "))
        .unwrap_or_else(|| panic!("no REPORT line\nstdout:\n{stdout}\nstderr:\n{stderr}"));
    serde_json::from_str(report).unwrap()
}

/// What every Python run must have seen, whatever the era and transport.
fn assert_python_report(fixture: &Fixture, report: &Value, mode: &str) {
    let expected_version = if mode == "default" { "2026-07-28" } else { "2025-11-25" };
    assert_eq!(report["protocol_version"], expected_version, "{report:#}");
    assert!(report["sdk_version"].as_str().unwrap().starts_with("2."), "the 2.x SDK: {report:#}");
    if mode == "default" {
        assert!(report["listen_honored"].is_object(), "subscriptions/listen acknowledged: {report:#}");
    }
    let tools: Vec<&str> = report["tools"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    assert!(tools.len() >= 20, "the registry's tools, all of them: {tools:?}");
    assert!(!tools.contains(&"start_run"), "no agent tools without a running agent: {tools:?}");
    assert_eq!(report["get_task_read_only"], true, "annotations pass through");
    assert_eq!(report["get_task_schema_properties"], json!(["task_id"]), "schemas pass through");
    assert!(report["get_task_text"].as_str().unwrap().contains(&fixture.task_title), "{report:#}");
    assert_eq!(report["get_task_structured_key"], fixture.task_key.as_str());
    let progress = report["progress"].as_array().unwrap();
    assert!(progress.len() >= 2, "progress at start and end: {progress:?}");
    assert_eq!(report["failing_call_is_error"], true);
    assert!(report["failing_call_text"].as_str().unwrap().contains("NOPE-404"), "{report:#}");
    assert_eq!(report["unknown_tool_error"], -32602);
    assert_eq!(report["task_resource_key"], fixture.task_key.as_str());
    assert!(report["task_resource_steps"].as_array().unwrap().contains(&json!("Draft the outline")));
    assert_eq!(report["task_messages"], json!(["@picogent keep it short please"]));
    assert_eq!(report["project_resource_slug"], "team");
    let expected_code = if mode == "default" { -32602 } else { -32002 };
    assert_eq!(report["missing_resource_error"]["code"], expected_code, "{report:#}");
    assert_eq!(report["missing_resource_error"]["data"]["uri"], "task://NOPE-404");
    let work_task = report["work_task"].as_str().unwrap();
    assert!(work_task.contains(&format!("Task: {}", fixture.task_key)), "{work_task}");
    assert!(work_task.contains("Draft the outline"), "steps filled in: {work_task}");
    assert!(work_task.contains("keep it short please"), "comments filled in: {work_task}");
    let reply_to = report["reply_to"].as_str().unwrap();
    assert!(reply_to.contains(&format!("Message id: {}", fixture.comment_id)), "{reply_to}");
    assert!(reply_to.contains("@alice wrote to you (@picogent)"), "{reply_to}");
    assert!(reply_to.contains(&fixture.task_title), "the task is filled in: {reply_to}");
    let standup = report["standup"].as_str().unwrap();
    // The title is what people wrote: inside a fence.
    let line = format!("{} [todo] <<untrusted-", fixture.task_key);
    assert!(standup.lines().any(|l| l.contains(&line) && l.contains(&fixture.task_title)), "{standup}");
    assert_eq!(report["prompt_missing_argument_error"], -32602);
}

#[tokio::test]
async fn python_sdk_over_stdio_in_both_protocol_eras() {
    let fixture = Fixture::start().await;
    let binary = env!("CARGO_BIN_EXE_picogent");
    let config = fixture.config_path();
    let config = config.to_str().unwrap();
    for mode in ["default", "legacy"] {
        let transport = ["--transport", "stdio", "--", binary, "mcp", "--stdio", "--config", config];
        let report = run_python_client(&fixture, mode, &transport).await;
        assert_python_report(&fixture, &report, mode);
    }
}

/// Starts `picogent mcp --http 127.0.0.1:0` and answers the child and its endpoint URL, read from
/// its JSON log line on stderr.
async fn spawn_http_server(fixture: &Fixture) -> (tokio::process::Child, String) {
    let mut child = fixture
        .picogent()
        .args(["--log-format", "json", "mcp", "--http", "127.0.0.1:0", "--config"])
        .arg(fixture.config_path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let url = tokio::time::timeout(CLIENT_DEADLINE, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let Ok(entry) = serde_json::from_str::<Value>(&line) else { continue };
            if let Some(url) = entry["fields"]["url"].as_str() {
                return url.to_string();
            }
        }
        panic!("picogent mcp --http exited without serving");
    })
    .await
    .expect("picogent mcp --http did not start");
    // Keep draining stderr so the child never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, url)
}

#[tokio::test]
async fn python_sdk_over_http_in_both_protocol_eras() {
    let fixture = Fixture::start().await;
    let (mut child, url) = spawn_http_server(&fixture).await;
    for mode in ["default", "legacy"] {
        let transport = ["--transport", "http", "--url", url.as_str(), "--token-env", "PICOGENT_MCP_TOKEN"];
        let report = run_python_client(&fixture, mode, &transport).await;
        assert_python_report(&fixture, &report, mode);
    }
    child.start_kill().unwrap();
    child.wait().await.unwrap();
}

fn discover_body() -> Value {
    json!({
        "jsonrpc": "2.0", "id": 1, "method": "server/discover",
        "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": {}
        }}
    })
}

/// One request of the HTTP security table and the status it must get.
struct SecurityCase {
    authorization: Option<String>,
    origin: Option<&'static str>,
    host: Option<String>,
    expected: u16,
}

#[tokio::test]
async fn http_needs_the_token_and_a_local_origin_and_host() {
    let fixture = Fixture::start().await;
    let (mut child, url) = spawn_http_server(&fixture).await;
    let port = url.trim_start_matches("http://127.0.0.1:").trim_end_matches("/mcp").to_string();
    let http = reqwest::Client::new();
    let bearer = Some(format!("Bearer {MCP_TOKEN}"));
    let case = |authorization: Option<String>, origin: Option<&'static str>, host: Option<String>, expected: u16| {
        SecurityCase { authorization, origin, host, expected }
    };
    let cases = [
        case(None, None, None, 401),
        case(Some("Bearer wrong-token".into()), None, None, 401),
        case(Some(MCP_TOKEN.into()), None, None, 401), // not a bearer credential
        case(bearer.clone(), None, None, 200),
        case(bearer.clone(), Some("http://evil.example"), None, 403),
        case(bearer.clone(), Some("http://localhost:6274"), None, 200),
        case(bearer.clone(), None, Some(format!("evil.example:{port}")), 403),
        case(bearer.clone(), None, Some(format!("localhost:{port}")), 200),
    ];
    for SecurityCase { authorization, origin, host, expected } in cases {
        let mut request = http
            .post(&url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2026-07-28")
            .header("Mcp-Method", "server/discover")
            .json(&discover_body());
        if let Some(authorization) = &authorization {
            request = request.header("Authorization", authorization);
        }
        if let Some(origin) = origin {
            request = request.header("Origin", origin);
        }
        if let Some(host) = &host {
            request = request.header("Host", host);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let body = response.text().await.unwrap();
        assert_eq!(status, expected, "authorization {authorization:?}, origin {origin:?}, host {host:?}: {body}");
        assert!(!body.contains(MCP_TOKEN), "the token never comes back: {body}");
        if expected == 200 {
            assert!(body.contains("2026-07-28"), "a discover result: {body}");
        }
    }
    // A 2025-11-25 client gets a session.
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}});
    let response = http
        .post(&url)
        .header("Authorization", format!("Bearer {MCP_TOKEN}"))
        .header("Accept", "application/json, text/event-stream")
        .json(&initialize)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert!(response.headers().get("mcp-session-id").is_some(), "{:?}", response.headers());
    assert!(response.text().await.unwrap().contains("\"protocolVersion\":\"2025-11-25\""));
    child.start_kill().unwrap();
    child.wait().await.unwrap();
}

#[tokio::test]
async fn configured_origins_and_hosts_are_allowed_too() {
    // server/discover never reaches the tracker, so none runs here.
    let tracker = tracker_as("http://127.0.0.1:9", "tok-unused");
    let registry = Registry::new(tracker.clone(), 8 * 1024).unwrap();
    let prompts = Arc::new(Prompts::load(&manifest_dir().join("prompts")).unwrap());
    let server = McpServer::new(Arc::new(registry), tracker, prompts, "picogent");
    let security = HttpSecurity::new(
        Secret::new(MCP_TOKEN),
        vec!["https://app.example.com:443".into()],
        vec!["agent.example.com".into()],
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let cancel = CancellationToken::new();
    tokio::spawn({
        let cancel = cancel.clone();
        async move { mcp::serve_http(server, listener, &security, cancel).await.unwrap() }
    });
    let http = reqwest::Client::new();
    let cases = [
        (Some("https://app.example.com"), None, 200),
        (Some("https://app.example.com:8443"), None, 403),
        (Some("http://app.example.com"), None, 403),
        (None, Some("agent.example.com"), 200),
        (None, Some("other.example.com"), 403),
    ];
    for (origin, host, expected) in cases {
        let mut request = http
            .post(&url)
            .header("Authorization", format!("Bearer {MCP_TOKEN}"))
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2026-07-28")
            .header("Mcp-Method", "server/discover")
            .json(&discover_body());
        if let Some(origin) = origin {
            request = request.header("Origin", origin);
        }
        if let Some(host) = host {
            request = request.header("Host", host);
        }
        let status = request.send().await.unwrap().status().as_u16();
        assert_eq!(status, expected, "origin {origin:?}, host {host:?}");
    }
    cancel.cancel();
}

/// Sends `requests` to `picogent mcp --stdio` (debug logging on), closes stdin, and answers every
/// stdout line and the stderr text once the process has exited.
async fn stdio_session(fixture: &Fixture, requests: &[Value]) -> (Vec<String>, String) {
    let mut child = fixture
        .picogent()
        .args(["mcp", "--stdio", "--config"])
        .arg(fixture.config_path())
        .env("RUST_LOG", "debug")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let stderr = child.stderr.take().unwrap();
    let stderr = tokio::spawn(async move {
        let mut text = String::new();
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            text.push_str(&line);
            text.push('\n');
        }
        text
    });
    let expected_answers = requests.iter().filter(|request| request.get("id").is_some()).count();
    let mut lines = Vec::new();
    tokio::time::timeout(CLIENT_DEADLINE, async {
        for request in requests {
            stdin.write_all(format!("{request}\n").as_bytes()).await.unwrap();
            stdin.flush().await.unwrap();
            // One request at a time, so the session's lifecycle is settled before the next.
            if request.get("id").is_some() {
                loop {
                    let line = stdout.next_line().await.unwrap().expect("stdout closed early");
                    let is_answer =
                        serde_json::from_str::<Value>(&line).is_ok_and(|m| m.get("id") == request.get("id"));
                    lines.push(line);
                    if is_answer {
                        break;
                    }
                }
            }
        }
        drop(stdin);
        while let Some(line) = stdout.next_line().await.unwrap() {
            lines.push(line);
        }
        child.wait().await.unwrap();
    })
    .await
    .expect("the stdio session did not finish");
    let answers =
        lines.iter().filter(|line| serde_json::from_str::<Value>(line).is_ok_and(|m| m.get("id").is_some())).count();
    assert_eq!(answers, expected_answers, "{lines:#?}");
    (lines, stderr.await.unwrap())
}

#[tokio::test]
async fn stdio_stdout_carries_only_protocol_in_both_eras() {
    let fixture = Fixture::start().await;
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    let legacy = vec![
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "get_task", "arguments": {"task_id": "NOPE-1"}}}),
        json!({"jsonrpc": "2.0", "id": 4, "method": "resources/read", "params": {"uri": "task://NOPE-1"}}),
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "get_task", "arguments": {"task_id": fixture.task_key}}}),
    ];
    let modern = vec![
        json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": meta}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "resources/read", "params": {"uri": "task://NOPE-1", "_meta": meta}}),
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "get_task", "arguments": {"task_id": fixture.task_key}, "_meta": meta}}),
    ];
    for (era, requests) in [("2025-11-25", legacy), ("2026-07-28", modern)] {
        let (lines, stderr) = stdio_session(&fixture, &requests).await;
        for line in &lines {
            let message: Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{era}: stdout line is not JSON ({e}): {line:?}"));
            assert_eq!(message["jsonrpc"], "2.0", "{era}: not JSON-RPC: {line}");
        }
        assert!(stderr.contains("DEBUG") || stderr.contains("INFO"), "{era}: logs go to stderr: {stderr}");
        let answer = |id: i64| -> Value {
            lines.iter().map(|line| serde_json::from_str::<Value>(line).unwrap()).find(|m| m["id"] == id).unwrap()
        };
        let missing_code = if era == "2026-07-28" { -32602 } else { -32002 };
        let read_id = if era == "2026-07-28" { 3 } else { 4 };
        assert_eq!(answer(read_id)["error"]["code"], missing_code, "{era}: {lines:#?}");
        let call_id = if era == "2026-07-28" { 4 } else { 5 };
        assert_eq!(answer(call_id)["result"]["structuredContent"]["key"], fixture.task_key.as_str(), "{era}");
        if era == "2026-07-28" {
            assert_eq!(answer(call_id)["result"]["resultType"], "complete", "{era}");
            assert!(answer(2)["result"]["ttlMs"].is_u64(), "{era}: lists carry ttlMs: {}", answer(2));
            assert_eq!(answer(2)["result"]["cacheScope"], "private", "{era}");
        } else {
            assert_eq!(answer(3)["result"]["isError"], true, "{era}");
            assert!(answer(5)["result"].get("resultType").is_none(), "{era}: no resultType for legacy peers");
        }
    }
}

#[tokio::test]
async fn mcp_inspector_cli_lists_tools_and_calls_one() {
    let fixture = Fixture::start().await;
    let inspector = inspector();
    let run = |method_args: Vec<String>| {
        let mut command = tokio::process::Command::new(&inspector);
        command
            .arg("--cli")
            .arg(env!("CARGO_BIN_EXE_picogent"))
            .args(["mcp", "--stdio"])
            .args(method_args)
            // The inspector's own `--config` would swallow ours, so agent.json is found in the cwd.
            .current_dir(fixture.dir.path())
            .env("TEAMBOARD_TOKEN", "tok-picogent")
            .env("NO_COLOR", "1")
            .kill_on_drop(true);
        async move {
            let output =
                tokio::time::timeout(CLIENT_DEADLINE, command.output()).await.expect("inspector timed out").unwrap();
            let stdout = String::from_utf8_lossy(&output.stdout).to_string();
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(output.status.success(), "inspector failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
            let start = stdout.find('{').unwrap_or_else(|| panic!("no JSON in inspector output: {stdout}"));
            serde_json::from_str::<Value>(&stdout[start..]).unwrap_or_else(|e| panic!("{e}: {stdout}"))
        }
    };
    let listed = run(vec!["--method".into(), "tools/list".into()]).await;
    let names: Vec<&str> = listed["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"get_task") && names.contains(&"add_step"), "{names:?}");
    let called = run(vec![
        "--method".into(),
        "tools/call".into(),
        "--tool-name".into(),
        "get_task".into(),
        "--tool-arg".into(),
        format!("task_id={}", fixture.task_key),
    ])
    .await;
    assert_ne!(called["isError"], true, "{called:#}");
    assert_eq!(called["structuredContent"]["key"], fixture.task_key.as_str(), "{called:#}");
    assert!(called["content"][0]["text"].as_str().unwrap().contains(&fixture.task_title), "{called:#}");
}

// ---- the running-agent extension, with a small in-test AgentControl ----

/// Runs kept in memory; each start or stop fires the change channel, as the runtime's will.
struct TestAgent {
    runs: Mutex<BTreeMap<String, RunSummary>>,
    changes: broadcast::Sender<()>,
}

impl TestAgent {
    fn new() -> Arc<TestAgent> {
        Arc::new(TestAgent { runs: Mutex::new(BTreeMap::new()), changes: broadcast::channel(16).0 })
    }

    /// Waits until `count` listeners have subscribed to run changes: a change made before a
    /// session subscribed would not be announced to it.
    async fn wait_for_listeners(&self, count: usize) {
        tokio::time::timeout(CLIENT_DEADLINE, async {
            while self.changes.receiver_count() < count {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the server subscribed to run changes");
    }
}

/// A run just started, every count zero.
fn started_run(run_id: &str, trigger: String) -> RunSummary {
    RunSummary {
        id: run_id.to_string(),
        session: picogent::tracker::session::SessionKey::Prompt(format!("session-{run_id}")),
        trigger,
        status: RunStatus::Running,
        turns: 0,
        tool_calls: 0,
        prompt_tokens: 0,
        completion_tokens: 0,
        model_duration_ms: 0,
        tool_duration_ms: 0,
        outcome: None,
        error: None,
        started_at: time::OffsetDateTime::now_utc(),
        finished_at: None,
        cost: None,
        waiting: None,
    }
}

impl AgentControl for TestAgent {
    fn status(&self) -> BoxFuture<'_, AgentStatus> {
        let running = self.runs.lock().unwrap().values().filter(|run| run.status == RunStatus::Running).count();
        Box::pin(async move {
            AgentStatus {
                connected: true,
                caught_up: true,
                active_runs: running,
                tokens_today: 0,
                max_tokens_per_day: 0,
                tools: Vec::new(),
            }
        })
    }

    fn list_runs(&self) -> BoxFuture<'_, Vec<RunSummary>> {
        let runs = self.runs.lock().unwrap().values().cloned().collect();
        Box::pin(async move { runs })
    }

    fn get_run<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<RunSummary, AgentControlError>> {
        let run = self.runs.lock().unwrap().get(run_id).cloned();
        Box::pin(async move { run.ok_or_else(|| AgentControlError::NotFound { run_id: run_id.to_string() }) })
    }

    fn run_log<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<String, AgentControlError>> {
        Box::pin(async move {
            let run = self.get_run(run_id).await?;
            Ok(format!("run {run_id} started for {}\n", run.trigger))
        })
    }

    fn coding_output<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<String, AgentControlError>> {
        Box::pin(async move {
            self.get_run(run_id).await?;
            Ok(String::new())
        })
    }

    fn run_result<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<RunResult, AgentControlError>> {
        Box::pin(async move {
            let run = self.get_run(run_id).await?;
            Ok(RunResult {
                id: run.id,
                status: run.status,
                finished: run.finished_at.is_some(),
                outcome: None,
                final_message: None,
                error: None,
                work: None,
            })
        })
    }

    fn start_run(&self, request: StartRun) -> BoxFuture<'_, Result<String, AgentControlError>> {
        let trigger = match request {
            StartRun::Task { task_key, .. } => format!("task {task_key}"),
            StartRun::NewTask { title, .. } => format!("new task {title}"),
            StartRun::Prompt { prompt } => format!("prompt {prompt}"),
        };
        let mut runs = self.runs.lock().unwrap();
        let run_id = format!("run-{}", runs.len() + 1);
        runs.insert(run_id.clone(), started_run(&run_id, trigger));
        let _ = self.changes.send(());
        Box::pin(async move { Ok(run_id) })
    }

    fn stop_run<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<bool, AgentControlError>> {
        let stopped = match self.runs.lock().unwrap().get_mut(run_id) {
            None => Err(AgentControlError::NotFound { run_id: run_id.to_string() }),
            Some(run) if run.status == RunStatus::Running => {
                run.status = RunStatus::Stopped;
                Ok(true)
            }
            Some(_) => Ok(false),
        };
        if stopped == Ok(true) {
            let _ = self.changes.send(());
        }
        Box::pin(async move { stopped })
    }

    fn subscribe(&self) -> broadcast::Receiver<()> {
        self.changes.subscribe()
    }
}

/// The registry plus one tool that waits until its call is cancelled, to see cancellation reach
/// `ToolContext.cancel` and progress flow while a call runs.
struct WithWaitingTool {
    registry: Registry,
    cancelled: mpsc::UnboundedSender<()>,
}

impl ToolSource for WithWaitingTool {
    fn tools(&self) -> Vec<ToolDefinition> {
        let mut tools = ToolSource::tools(&self.registry);
        let schema = json!({"type": "object", "properties": {}});
        tools.push(ToolDefinition::new(
            "wait_until_cancelled",
            "Waits until the call is cancelled.",
            Arc::new(schema.as_object().unwrap().clone()),
        ));
        tools
    }

    fn call<'a>(&'a self, name: &'a str, arguments: Value, context: &'a ToolContext) -> BoxFuture<'a, ToolResult> {
        if name != "wait_until_cancelled" {
            return ToolSource::call(&self.registry, name, arguments, context);
        }
        Box::pin(async move {
            context.cancel.cancelled().await;
            let _ = self.cancelled.send(());
            ToolResult::error("cancelled")
        })
    }
}

/// Serves `server` in-process at `/mcp` on a loopback port; answers the URL.
async fn serve_in_process(server: McpServer, cancel: CancellationToken) -> String {
    let security = HttpSecurity::new(Secret::new(MCP_TOKEN), vec![], vec![]);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { mcp::serve_http(server, listener, &security, cancel).await.unwrap() });
    url
}

/// A legacy (2025-11-25) client that forwards list-changed notifications and progress.
#[derive(Clone)]
struct LegacyClient {
    list_changed: mpsc::UnboundedSender<()>,
    progress: mpsc::UnboundedSender<ProgressNotificationParam>,
}

impl ClientHandler for LegacyClient {
    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.list_changed.send(());
    }

    async fn on_progress(&self, params: ProgressNotificationParam, _context: NotificationContext<RoleClient>) {
        let _ = self.progress.send(params);
    }
}

fn call(name: &str, arguments: Value) -> CallToolRequestParams {
    CallToolRequestParams::new(name.to_string()).with_arguments(arguments.as_object().unwrap().clone())
}

#[tokio::test]
async fn agent_extension_serves_runs_and_announces_changes() {
    let fixture = Fixture::start().await;
    let agent = TestAgent::new();
    let (cancelled_tx, mut cancelled_rx) = mpsc::unbounded_channel();
    let registry = Registry::new(fixture.tracker(), 8 * 1024).unwrap();
    let tools = Arc::new(WithWaitingTool { registry, cancelled: cancelled_tx });
    let server = McpServer::new(tools, fixture.tracker(), fixture.prompts(), "picogent")
        .with_agent(agent.clone())
        .with_progress_interval(Duration::from_millis(20));
    let cancel = CancellationToken::new();
    let url = serve_in_process(server, cancel.clone()).await;
    let transport = || {
        StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(url.clone()).auth_header(MCP_TOKEN),
        )
    };

    // A 2025-11-25 client: list-changed arrives on its session.
    let (list_changed_tx, mut list_changed) = mpsc::unbounded_channel();
    let (progress_tx, mut progress) = mpsc::unbounded_channel();
    let legacy =
        LegacyClient { list_changed: list_changed_tx, progress: progress_tx }.serve(transport()).await.unwrap();
    assert_eq!(legacy.peer_info().unwrap().protocol_version, ProtocolVersion::V_2025_11_25);
    let tools = legacy.list_all_tools().await.unwrap();
    for name in ["start_run", "stop_run", "report_run", "get_task"] {
        assert!(tools.iter().any(|tool| tool.name == name), "{name} offered");
    }
    let uris: Vec<String> = legacy.list_all_resources().await.unwrap().into_iter().map(|r| r.uri).collect();
    assert!(uris.contains(&"agent://status".to_string()) && uris.contains(&"run://list".to_string()), "{uris:?}");
    let templates: Vec<String> =
        legacy.list_all_resource_templates().await.unwrap().into_iter().map(|t| t.uri_template).collect();
    for template in ["run://{id}", "run://{id}/log", "run://{id}/result"] {
        assert!(templates.contains(&template.to_string()), "{templates:?}");
    }

    agent.wait_for_listeners(1).await;
    let started = legacy.call_tool(call("start_run", json!({"task_key": fixture.task_key}))).await.unwrap();
    assert_ne!(started.is_error, Some(true), "{started:?}");
    let run_id = started.structured_content.as_ref().unwrap()["run_id"].as_str().unwrap().to_string();
    tokio::time::timeout(CLIENT_DEADLINE, list_changed.recv()).await.expect("list_changed after start_run").unwrap();
    let uris: Vec<String> = legacy.list_all_resources().await.unwrap().into_iter().map(|r| r.uri).collect();
    assert!(uris.contains(&format!("run://{run_id}")), "{uris:?}");
    let read = legacy.read_resource(ReadResourceRequestParams::new(format!("run://{run_id}/log"))).await.unwrap();
    assert!(format!("{:?}", read.contents).contains(&format!("task {}", fixture.task_key)), "{read:?}");
    let report = legacy.call_tool(call("report_run", json!({"run_id": run_id}))).await.unwrap();
    assert_eq!(report.structured_content.as_ref().unwrap()["run"]["status"], "running", "{report:?}");
    let bad = legacy.call_tool(call("start_run", json!({}))).await.unwrap();
    assert_eq!(bad.is_error, Some(true), "start_run needs a task or a prompt: {bad:?}");
    let missing = legacy.read_resource(ReadResourceRequestParams::new("run://run-999")).await.unwrap_err();
    assert!(matches!(&missing, ServiceError::McpError(e) if e.code.0 == -32002), "{missing:?}");

    // A 2026-07-28 client: list-changed arrives on its subscriptions/listen stream.
    let modern = ClientConfig::default()
        .serve_with_lifecycle(
            transport(),
            ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] },
        )
        .await
        .unwrap();
    let mut subscription = modern.listen(SubscriptionFilter::builder().resources_list_changed().build()).await.unwrap();
    assert_eq!(subscription.acknowledged().resources_list_changed, Some(true));
    agent.wait_for_listeners(2).await;
    let stopped = modern.call_tool(call("stop_run", json!({"run_id": run_id}))).await.unwrap();
    assert_eq!(stopped.structured_content.as_ref().unwrap()["stopping"], true, "{stopped:?}");
    let notification =
        tokio::time::timeout(CLIENT_DEADLINE, subscription.next()).await.expect("a notification").unwrap();
    assert!(matches!(notification, Some(ServerNotification::ResourceListChangedNotification(_))), "{notification:?}");
    tokio::time::timeout(CLIENT_DEADLINE, list_changed.recv()).await.expect("legacy list_changed after stop").unwrap();
    let status = modern.read_resource(ReadResourceRequestParams::new("agent://status")).await.unwrap();
    assert!(format!("{:?}", status.contents).contains("active_runs"), "{status:?}");
    let missing = modern.read_resource(ReadResourceRequestParams::new("run://run-999/result")).await.unwrap_err();
    assert!(matches!(&missing, ServiceError::McpError(e) if e.code.0 == -32602), "{missing:?}");

    // A long call reports progress while it runs, and a client's cancellation reaches the tool.
    while progress.try_recv().is_ok() {}
    let request =
        ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(call("wait_until_cancelled", json!({}))));
    let handle = legacy.send_request_with_option(request, PeerRequestOptions::no_options()).await.unwrap();
    let mut ticks = 0;
    while ticks < 3 {
        let update =
            tokio::time::timeout(CLIENT_DEADLINE, progress.recv()).await.expect("progress while running").unwrap();
        if update.message.as_deref() == Some("wait_until_cancelled still running") {
            ticks += 1;
        }
    }
    handle.cancel(Some("test cancels".into())).await.unwrap();
    tokio::time::timeout(CLIENT_DEADLINE, cancelled_rx.recv()).await.expect("the tool saw the cancellation").unwrap();

    legacy.cancel().await.unwrap();
    subscription.cancel().await.unwrap();
    modern.cancel().await.unwrap();
    cancel.cancel();
}
