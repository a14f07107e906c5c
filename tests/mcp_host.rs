//! The MCP host against servers this project did not write: `mcp-server-time` and
//! `mcp-server-git` (PyPI) over stdio, `@modelcontextprotocol/server-everything` (npm) over stdio
//! and Streamable HTTP; and the permission policy over them.
//!
//! The servers are found through environment variables with defaults inside the worktree; a
//! missing server FAILS the test with the command that installs it:
//!
//! ```sh
//! python3 -m venv .venv-test && .venv-test/bin/pip install -r tests/interop/requirements.txt
//! (cd tests/interop && npm ci)
//! ```
//!
//! Overrides: `MCP_SERVER_TIME`, `MCP_SERVER_GIT` (the executables), `MCP_SERVER_EVERYTHING` (its
//! `dist/index.js`), `NODE` (the node binary).

#[path = "support/agent.rs"]
mod agent_support;
#[path = "support/interop.rs"]
mod interop;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use picogent::agent::{self, RunInput, RunOutcome, RunSetup, ToolCallOutcome};
use picogent::board::BoardOptions;
use picogent::config::{Limits, LlmConfig, McpServerConfig, PermissionMode, TrackerConfig};
use picogent::llm::OpenAiChat;
use picogent::mcp::client::{ServerConnection, ServerStatus};
use picogent::mcp::host::{CommandError, Expansion, McpHost};
use picogent::mcp::results::ArtifactStore;
use picogent::offline_model::script::Script;
use picogent::offline_model::{self, OfflineModelOptions};
use picogent::retry::RetryConfig;
use picogent::secret::Secret;
use picogent::session::SessionKey;
use picogent::tools::ToolResult;
use picogent::tools::policy::{Policy, PolicySource, TrackerAsker};
use picogent::tools::{CombinedSource, Registry, ToolContext, ToolSource};
use picogent::tracker::TrackerClient;
use picogent::tracker::model::{CreateTask, MessageQuery, ReplyMessage, SendMessage};
use serde_json::json;

const INSTALL: &str = "python3 -m venv .venv-test && .venv-test/bin/pip install -r tests/interop/requirements.txt; \
                       (cd tests/interop && npm ci)";
const WAIT: Duration = Duration::from_secs(60);

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The path in `var`, or `default`; it must exist.
fn required(var: &str, default: PathBuf) -> PathBuf {
    interop::ensure_installed();
    let path = std::env::var_os(var).map(PathBuf::from).unwrap_or(default);
    assert!(path.exists(), "{} not found (set {var} or install: {INSTALL})", path.display());
    path
}

fn time_command() -> String {
    required("MCP_SERVER_TIME", root().join(".venv-test/bin/mcp-server-time")).display().to_string()
}

fn git_command() -> String {
    required("MCP_SERVER_GIT", root().join(".venv-test/bin/mcp-server-git")).display().to_string()
}

fn everything_script() -> String {
    required(
        "MCP_SERVER_EVERYTHING",
        root().join("tests/interop/node_modules/@modelcontextprotocol/server-everything/dist/index.js"),
    )
    .display()
    .to_string()
}

fn node() -> String {
    std::env::var("NODE").unwrap_or_else(|_| "node".to_string())
}

fn server(value: serde_json::Value) -> McpServerConfig {
    serde_json::from_value(value).unwrap()
}

fn time_server(trusted: bool) -> McpServerConfig {
    server(json!({"command": time_command(), "args": ["--local-timezone", "UTC"], "trusted": trusted}))
}

fn everything_stdio() -> McpServerConfig {
    server(json!({"command": node(), "args": [everything_script(), "stdio"], "trusted": true}))
}

async fn start(servers: Vec<(&str, McpServerConfig)>, artifacts: &Path, max_inline: usize) -> McpHost {
    let servers: BTreeMap<String, McpServerConfig> = servers.into_iter().map(|(n, c)| (n.to_string(), c)).collect();
    let host = McpHost::start_servers(servers, ArtifactStore::new(artifacts.to_path_buf(), max_inline)).await;
    for server in host.servers() {
        // On a loaded machine a slow first start is retried by the supervisor.
        until(server, &format!("server {} to connect", server.name()), |s| s.status() == ServerStatus::Ready).await;
    }
    host
}

/// Waits (without polling) until `ready` holds for the server's state, or fails after `WAIT`.
async fn until(server: &ServerConnection, what: &str, ready: impl Fn(&ServerConnection) -> bool) {
    let mut changes = server.subscribe();
    let waited = tokio::time::timeout(WAIT, async {
        while !ready(server) {
            changes.changed().await.unwrap();
        }
    })
    .await;
    assert!(waited.is_ok(), "timed out waiting for {what}");
}

fn text(result: &ToolResult) -> String {
    result.text.clone()
}

fn context() -> ToolContext {
    let mut context = ToolContext::new("picogent");
    context.run_id = Some("run-test".to_string());
    context
}

/// The path in an artifact line `[... at <path>]`.
fn artifact_path(text: &str) -> PathBuf {
    let after = text.split(" at ").nth(1).unwrap_or_else(|| panic!("no artifact path in {text}"));
    PathBuf::from(after.split(']').next().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_server_over_stdio_lists_prefixed_tools_and_answers_calls() {
    let dir = tempfile::tempdir().unwrap();
    let host = start(vec![("time", time_server(false))], dir.path(), 8192).await;
    // 2026-07-28 is tried first; a server that predates it gets 2025-11-25.
    let protocol = host.server("time").unwrap().snapshot().protocol_version.unwrap();
    assert!(protocol == "2026-07-28" || protocol == "2025-11-25", "{protocol}");
    let tools = host.tools();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert!(names.contains(&"mcp__time__get_current_time"), "{names:?}");
    assert!(names.contains(&"mcp__time__convert_time"), "{names:?}");
    // Untrusted: its `readOnlyHint: true` is believed for the run's scope (get_current_time and
    // convert_time only read), but not for running beside other reads or in read_only mode.
    assert!(tools.iter().all(|t| t.is_read_only() && !t.is_trusted_read()), "{tools:?}");
    // The time server declares resources but lists none: no resource tools.
    assert!(!names.contains(&"list_mcp_resources"), "{names:?}");
    let schema = &tools.iter().find(|t| t.name == "mcp__time__get_current_time").unwrap().input_schema;
    assert!(schema.get("properties").and_then(|p| p.get("timezone")).is_some(), "{schema:?}");

    let result = host.call("mcp__time__get_current_time", json!({"timezone": "Europe/Paris"}), &context()).await;
    let answer = text(&result);
    assert!(!result.is_error, "{answer}");
    assert!(answer.contains("Europe/Paris") && answer.contains("datetime"), "{answer}");

    let bad = host.call("mcp__time__get_current_time", json!({"timezone": "Not/AZone"}), &context()).await;
    assert!(bad.is_error, "{}", text(&bad));
    let unknown = host.call("mcp__time__nope", json!({}), &context()).await;
    assert!(text(&unknown).contains("unknown tool"), "{}", text(&unknown));
    host.shutdown().await;

    // Trusted, the same server's `readOnlyHint: true` is believed for everything.
    let trusted = start(vec![("time", time_server(true))], dir.path(), 8192).await;
    let tools = trusted.tools();
    let current = tools.iter().find(|t| t.name == "mcp__time__get_current_time").unwrap();
    assert!(current.is_read_only() && current.is_trusted_read(), "{current:?}");
    trusted.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_server_over_stdio_with_per_server_tool_filter() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    let git = |args: &[&str]| {
        let status = std::process::Command::new("git").args(args).current_dir(&repo).status().unwrap();
        assert!(status.success(), "git {args:?}");
    };
    git(&["init", "-q"]);
    std::fs::write(repo.join("hello.txt"), "hello\n").unwrap();
    git(&["add", "hello.txt"]);
    git(&["-c", "user.name=T", "-c", "user.email=t@example.com", "commit", "-qm", "first commit"]);
    std::fs::write(repo.join("new.txt"), "new\n").unwrap();

    let config = server(json!({
        "command": git_command(),
        "args": ["--repository", repo.display().to_string()],
        "tools": {"disallowed": ["git_commit", "git_reset", "git_add", "git_create_branch", "git_checkout"]}
    }));
    let host = start(vec![("git", config)], &dir.path().join("artifacts"), 8192).await;
    let names: Vec<String> = host.tools().iter().map(|t| t.name.to_string()).collect();
    assert!(names.contains(&"mcp__git__git_status".to_string()), "{names:?}");
    assert!(names.contains(&"mcp__git__git_log".to_string()), "{names:?}");
    assert!(!names.iter().any(|n| n == "mcp__git__git_commit" || n == "mcp__git__git_add"), "{names:?}");

    let status = host.call("mcp__git__git_status", json!({"repo_path": repo.display().to_string()}), &context()).await;
    assert!(text(&status).contains("new.txt"), "{}", text(&status));
    let log = host.call("mcp__git__git_log", json!({"repo_path": repo.display().to_string()}), &context()).await;
    assert!(text(&log).contains("first commit"), "{}", text(&log));
    let filtered = host.call("mcp__git__git_commit", json!({"repo_path": "x", "message": "m"}), &context()).await;
    assert!(filtered.is_error);
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_over_stdio_results_artifacts_resources_prompts_and_list_changes() {
    let dir = tempfile::tempdir().unwrap();
    let artifacts = dir.path().join("artifacts");
    // Cargo gives the test process CARGO_* variables: they stand for picogent's own secrets.
    let mut config = everything_stdio();
    config.env.insert("GIVEN_TOKEN".to_string(), "given-${CARGO_PKG_NAME}".to_string());
    let host = start(vec![("everything", config)], &artifacts, 8192).await;
    // The child sees its `env` (expanded) and a minimal environment, not picogent's secrets.
    let env = text(&host.call("mcp__everything__get-env", json!({}), &context()).await);
    assert!(env.contains("given-picogent") && env.contains("PATH"), "{env}");
    assert!(!env.contains("CARGO_MANIFEST_DIR"), "{env}");
    // server-everything predates 2026-07-28: the host fell back.
    assert_eq!(host.server("everything").unwrap().snapshot().protocol_version.as_deref(), Some("2025-11-25"));
    let tools = host.tools();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    for expected in
        ["mcp__everything__echo", "mcp__everything__get-tiny-image", "list_mcp_resources", "read_mcp_resource"]
    {
        assert!(names.contains(&expected), "{expected} missing from {names:?}");
    }
    // Trusted: the server's annotations are believed.
    let annotated = tools.iter().find(|t| t.name == "mcp__everything__gzip-file-as-resource").unwrap();
    assert_eq!(annotated.hints.destructive, Some(false));

    // A small result stays inline.
    let echo = host.call("mcp__everything__echo", json!({"message": "hi there"}), &context()).await;
    assert!(text(&echo).contains("hi there"), "{}", text(&echo));

    // A large one becomes an artifact: the model gets id, size, path and the first lines.
    let big = "0123456789".repeat(3000);
    let large = host.call("mcp__everything__echo", json!({"message": big}), &context()).await;
    let large_text = text(&large);
    assert!(large_text.len() < 8192, "{} bytes inline", large_text.len());
    assert!(large_text.contains("saved as artifact art-"), "{large_text}");
    let saved = artifact_path(&large_text);
    assert!(saved.starts_with(artifacts.join("run-test/everything/echo")), "{}", saved.display());
    assert!(std::fs::read_to_string(&saved).unwrap().contains(&big));

    // An image becomes an artifact, never base64 in the context.
    let image = host.call("mcp__everything__get-tiny-image", json!({}), &context()).await;
    let image_text = text(&image);
    assert!(image_text.contains("image saved as artifact") && image_text.contains("image/png"), "{image_text}");
    let png = std::fs::read(artifact_path(image_text.lines().find(|l| l.contains("image saved")).unwrap())).unwrap();
    assert_eq!(&png[..4], b"\x89PNG");
    assert!(image_text.len() < 2000, "{image_text}");

    // Structured content is formatted JSON.
    let weather =
        host.call("mcp__everything__get-structured-content", json!({"location": "Chicago"}), &context()).await;
    assert!(text(&weather).contains("structured content:\n{\n"), "{}", text(&weather));

    // Resource links are a line with URI and MIME type.
    let links = host.call("mcp__everything__get-resource-links", json!({"count": 2}), &context()).await;
    assert!(text(&links).contains("[resource link] demo://resource/"), "{}", text(&links));
    assert!(text(&links).contains("MIME type"), "{}", text(&links));

    // Resources.
    let listed = host.call("list_mcp_resources", json!({"server": "everything"}), &context()).await;
    let first_uri = text(&listed)
        .lines()
        .find_map(|line| line.split_whitespace().find_map(|w| w.strip_prefix("uri=")).map(str::to_string))
        .unwrap_or_else(|| panic!("no resources listed: {}", text(&listed)));
    let read = host.call("read_mcp_resource", json!({"server": "everything", "uri": first_uri}), &context()).await;
    assert!(!read.is_error, "{}", text(&read));
    assert!(text(&read).contains(&first_uri), "{}", text(&read));

    // Instructions.
    let instructions = host.instructions();
    assert_eq!(instructions.len(), 1);
    assert_eq!(instructions[0].0, "everything");
    assert!(!instructions[0].1.is_empty());
    let sections = host.instruction_sections(&picogent::prompts::Fence::random());
    assert!(sections[0].title.contains("`everything`"), "{}", sections[0].title);
    assert!(!sections[0].body.is_empty());

    // Prompt commands: required arguments checked, quoted values allowed.
    let prompt = |expanded: Option<Result<Expansion, CommandError>>| match expanded.unwrap().unwrap() {
        Expansion::Prompt(text) => text,
        other => panic!("not a prompt: {other:?}"),
    };
    let expanded = host.expand_command(r#"/mcp__everything__args-prompt city="New York" state=NY"#).await;
    assert_eq!(prompt(expanded), "What's weather in New York, NY?");
    let json_args = host.expand_command(r#"@picogent /mcp__everything__args-prompt {"city": "Paris"}"#).await;
    assert_eq!(prompt(json_args), "What's weather in Paris?");
    let missing = host.expand_command("/mcp__everything__args-prompt state=NY").await.unwrap().unwrap_err().to_string();
    assert!(missing.contains("missing required argument(s) city"), "{missing}");
    let unknown = host.expand_command("/mcp__everything__nope").await.unwrap().unwrap_err().to_string();
    assert!(unknown.contains("unknown command /mcp__everything__nope; available: /mcp__everything__"), "{unknown}");
    assert!(host.expand_command("hello /mcp__everything__args-prompt").await.is_none());

    // List changes: a new session resource is announced and the list refreshes.
    let server = host.server("everything").unwrap();
    let before = server.snapshot().resources.len();
    let data = "data:text/plain;base64,aGVsbG8gd29ybGQ=";
    let gz = host
        .call(
            "mcp__everything__gzip-file-as-resource",
            json!({"name": "hello.txt.gz", "data": data, "outputType": "resourceLink"}),
            &context(),
        )
        .await;
    assert!(!gz.is_error, "{}", text(&gz));
    until(server, "the resource list to refresh", |s| {
        s.snapshot().resources.iter().any(|r| r.uri.contains("hello.txt.gz")) && s.snapshot().resources.len() > before
    })
    .await;
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_over_streamable_http() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut child = tokio::process::Command::new(node())
        .args([everything_script(), "streamableHttp".to_string()])
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        assert!(tokio::time::Instant::now() < deadline, "server-everything did not listen on {port}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let config = server(json!({
        "url": format!("http://127.0.0.1:{port}/mcp"),
        "headers": {"Authorization": "Bearer ${CARGO_PKG_NAME}", "X-Picogent-Test": "yes"},
        "timeout_ms": 3000
    }));
    let host = start(vec![("remote", config)], dir.path(), 8192).await;
    let names: Vec<String> = host.tools().iter().map(|t| t.name.to_string()).collect();
    assert!(names.contains(&"mcp__remote__echo".to_string()), "{names:?}");
    let echo = host.call("mcp__remote__echo", json!({"message": "over http"}), &context()).await;
    assert!(text(&echo).contains("over http"), "{}", text(&echo));
    let image = host.call("mcp__remote__get-tiny-image", json!({}), &context()).await;
    assert!(text(&image).contains("image saved as artifact"), "{}", text(&image));

    // Progress notifications are kept for the run record.
    let quick = host
        .call("mcp__remote__trigger-long-running-operation", json!({"duration": 0.4, "steps": 2}), &context())
        .await;
    assert!(text(&quick).contains("completed"), "{}", text(&quick));
    let progress = host.server("remote").unwrap().progress();
    assert!(progress.iter().any(|p| p.total == Some(2.0)), "{progress:?}");

    // A call that outlives the server's timeout is an error result (and cancelled on the server).
    let slow =
        host.call("mcp__remote__trigger-long-running-operation", json!({"duration": 30, "steps": 1}), &context()).await;
    assert!(slow.is_error);
    assert!(text(&slow).contains("did not answer within 3000 ms"), "{}", text(&slow));
    // The connection is still usable afterwards.
    let again = host.call("mcp__remote__echo", json!({"message": "still here"}), &context()).await;
    assert!(text(&again).contains("still here"), "{}", text(&again));
    host.shutdown().await;
    child.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_is_restarted_and_answers_errors_meanwhile() {
    let dir = tempfile::tempdir().unwrap();
    let host = start(vec![("time", time_server(false))], dir.path(), 8192).await;
    let server = host.server("time").unwrap();
    let pid = server.pid().expect("a stdio server has a pid");
    assert_eq!(server.connections(), 1);
    let killed = std::process::Command::new("kill").args(["-9", &pid.to_string()]).status().unwrap();
    assert!(killed.success());

    until(server, "the server to be noticed gone", |s| s.status() != ServerStatus::Ready).await;
    let meanwhile = host.call("mcp__time__get_current_time", json!({"timezone": "UTC"}), &context()).await;
    if server.connections() == 1 {
        assert!(meanwhile.is_error, "{}", text(&meanwhile));
        assert!(text(&meanwhile).contains("unavailable"), "{}", text(&meanwhile));
    }

    until(server, "the server to be restarted", |s| s.status() == ServerStatus::Ready && s.connections() == 2).await;
    assert_ne!(server.pid(), Some(pid));
    let after = host.call("mcp__time__get_current_time", json!({"timezone": "UTC"}), &context()).await;
    assert!(!after.is_error, "{}", text(&after));
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_denies_by_glob_and_in_read_only_mode() {
    let dir = tempfile::tempdir().unwrap();
    let host: Arc<dyn ToolSource> =
        Arc::new(start(vec![("time", time_server(false)), ("everything", everything_stdio())], dir.path(), 8192).await);
    let combined: Arc<dyn ToolSource> = Arc::new(CombinedSource::new([host.clone()]));

    let by_glob = PolicySource::new(
        combined.clone(),
        Policy {
            allowed_tools: vec![],
            disallowed_tools: vec!["mcp__time__*".to_string()],
            mode: PermissionMode::Auto,
            ask_tools: vec![],
        },
        None,
    );
    assert!(!by_glob.tools().iter().any(|t| t.name.starts_with("mcp__time__")));
    let denied = by_glob.call("mcp__time__get_current_time", json!({"timezone": "UTC"}), &context()).await;
    assert!(denied.is_error);
    assert!(text(&denied).contains("not allowed"), "{}", text(&denied));
    let allowed = by_glob.call("mcp__everything__echo", json!({"message": "ok"}), &context()).await;
    assert!(text(&allowed).contains("ok"), "{}", text(&allowed));

    let read_only = PolicySource::new(
        combined,
        Policy { allowed_tools: vec![], disallowed_tools: vec![], mode: PermissionMode::ReadOnly, ask_tools: vec![] },
        None,
    );
    let offered: Vec<String> = read_only.tools().iter().map(|t| t.name.to_string()).collect();
    // The untrusted time server's reads are not reads on trust in read_only mode; the trusted
    // server's read-only tools are.
    assert!(!offered.iter().any(|n| n.starts_with("mcp__time__")), "{offered:?}");
    assert!(offered.contains(&"list_mcp_resources".to_string()), "{offered:?}");
    let refused = read_only.call("mcp__time__get_current_time", json!({"timezone": "UTC"}), &context()).await;
    assert!(text(&refused).contains("read-only mode"), "{}", text(&refused));
    let listed = read_only.call("list_mcp_resources", json!({}), &context()).await;
    assert!(!listed.is_error, "{}", text(&listed));
}

// ---- ask mode through real threads on the reference board ----

fn tracker_client(url: &str, token: &str) -> TrackerClient {
    let config = TrackerConfig {
        url: url.to_string(),
        api_prefix: "/api".to_string(),
        token_env: "TEAMBOARD_TOKEN".to_string(),
        timeout_ms: 5_000,
        retry: RetryConfig::default(),
    };
    TrackerClient::new(&config, Secret::new(token)).unwrap()
}

/// Waits until the agent's permission request appears in the conversation; returns its text.
async fn request_posted(alice: &TrackerClient, query: &MessageQuery) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let messages = alice.list_messages(query).await.unwrap();
        if let Some(request) =
            messages.iter().find(|m| m.author_slug == "picogent" && m.content.contains("Permission needed"))
        {
            return request.content.clone();
        }
        assert!(tokio::time::Instant::now() < deadline, "the agent never asked");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_mode_approved_refused_and_timed_out_through_board_threads() {
    let dir = tempfile::tempdir().unwrap();
    let seed = root().join("fixtures/board-seed.json");
    let board = picogent::board::start(BoardOptions::loopback(dir.path().join("board.db"), Some(seed))).await.unwrap();
    let agent = tracker_client(&board.url(), "tok-picogent");
    let alice = tracker_client(&board.url(), "tok-alice");
    let otherbot = tracker_client(&board.url(), "tok-otherbot");

    // Untrusted time server: its tools are reads (readOnlyHint), asked here because `ask_tools`
    // lists them. Trusted everything: its read-only tools run without asking.
    let host: Arc<dyn ToolSource> =
        Arc::new(start(vec![("time", time_server(false)), ("everything", everything_stdio())], dir.path(), 8192).await);
    let registry: Arc<dyn ToolSource> = Arc::new(Registry::new(agent.clone(), 8192).unwrap());
    let combined: Arc<dyn ToolSource> = Arc::new(CombinedSource::new([registry, host]));
    let policy_with = |timeout_ms: u64| {
        let asker = TrackerAsker::new(agent.clone(), Duration::from_millis(timeout_ms))
            .with_poll_interval(Duration::from_millis(100));
        Arc::new(PolicySource::new(
            combined.clone(),
            Policy {
                allowed_tools: vec![],
                disallowed_tools: vec!["send_message".to_string()],
                mode: PermissionMode::Ask,
                ask_tools: vec!["mcp__time__*".to_string()],
            },
            Some(Arc::new(asker)),
        ))
    };
    let policy = policy_with(60_000);

    // The tracker's own tools are governed too.
    assert!(!policy.tools().iter().any(|t| t.name == "send_message"));
    let denied = policy.call("send_message", json!({"content": "x"}), &context()).await;
    assert!(text(&denied).contains("not allowed"), "{}", text(&denied));
    // A read-only tool of a trusted server runs without asking.
    let quick = policy
        .call("mcp__everything__trigger-long-running-operation", json!({"duration": 0.1, "steps": 1}), &context())
        .await;
    assert!(text(&quick).contains("completed"), "{}", text(&quick));

    // Approved in a chat thread.
    let project = alice.get_project("team").await.unwrap();
    let root_message = alice
        .send_message(
            &SendMessage {
                content: "@picogent what time is it in Paris?".to_string(),
                chat_id: Some(project.chat_id.clone()),
                task_id: None,
                parent_id: None,
                mentions: None,
                reply_to: None,
            },
            None,
        )
        .await
        .unwrap();
    let mut in_thread = context();
    in_thread.session = Some(SessionKey::Thread(root_message.id.clone()));
    let call = tokio::spawn({
        let policy = policy.clone();
        async move { policy.call("mcp__time__get_current_time", json!({"timezone": "Europe/Paris"}), &in_thread).await }
    });
    let thread = MessageQuery { parent_id: Some(root_message.id.clone()), ..MessageQuery::default() };
    let asked = request_posted(&alice, &thread).await;
    assert!(asked.contains("mcp__time__get_current_time") && asked.contains("Europe/Paris"), "{asked}");
    let reply = |text: &str| ReplyMessage { content: text.to_string(), mentions: None, reply_to: None };
    alice.reply_message(&root_message.id, &reply("@picogent yes, go ahead"), None).await.unwrap();
    let approved = call.await.unwrap();
    assert!(!approved.is_error, "{}", text(&approved));
    assert!(text(&approved).contains("Europe/Paris"), "{}", text(&approved));

    // Refused in a task's comments: another bot's "yes" does not count, alice's "no" does.
    let task = alice
        .create_task(
            &CreateTask {
                project_slug: "team".to_string(),
                title: "Check the clock".to_string(),
                ..CreateTask::default()
            },
            None,
        )
        .await
        .unwrap();
    let mut in_task = context();
    in_task.session = Some(SessionKey::Task(task.id.clone()));
    let call = tokio::spawn({
        let policy = policy.clone();
        async move { policy.call("mcp__time__get_current_time", json!({"timezone": "UTC"}), &in_task).await }
    });
    let comments = MessageQuery { task_id: Some(task.id.clone()), ..MessageQuery::default() };
    request_posted(&alice, &comments).await;
    let comment = |content: &str| SendMessage {
        content: content.to_string(),
        chat_id: None,
        task_id: Some(task.id.clone()),
        parent_id: None,
        mentions: None,
        reply_to: None,
    };
    otherbot.send_message(&comment("yes"), None).await.unwrap();
    alice.send_message(&comment("no"), None).await.unwrap();
    let refused = call.await.unwrap();
    assert!(refused.is_error);
    assert!(text(&refused).contains("alice answered no"), "{}", text(&refused));

    // Nobody answers: denied when the ask timeout passes.
    let short = policy_with(1_500);
    let mut in_thread = context();
    in_thread.session = Some(SessionKey::Thread(root_message.id.clone()));
    let timed_out = short.call("mcp__time__get_current_time", json!({"timezone": "UTC"}), &in_thread).await;
    assert!(timed_out.is_error);
    assert!(text(&timed_out).contains("nobody approved"), "{}", text(&timed_out));

    // No conversation to ask in: denied, with the reason.
    let nowhere = policy.call("mcp__time__get_current_time", json!({"timezone": "UTC"}), &context()).await;
    assert!(text(&nowhere).contains("no task or thread"), "{}", text(&nowhere));
    board.shutdown().await.unwrap();
}

// ---- through the LLM loop, with the scripted offline model ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_loop_calls_an_mcp_tool_with_the_scripted_offline_model() {
    let dir = tempfile::tempdir().unwrap();
    let script = Script::from_file(&root().join("fixtures/mcp/time_call.json")).unwrap();
    let model = offline_model::start(OfflineModelOptions::script(script)).await.unwrap();
    let llm = LlmConfig {
        temperature: Some(0.0),
        max_output_tokens: Some(2_000),
        timeout_ms: 10_000,
        parallel_tool_calls: Some(true),
        ..LlmConfig::new(model.url(), "offline-script")
    };
    let chat = OpenAiChat::new(&llm, None).unwrap();
    let host: Arc<dyn ToolSource> = Arc::new(start(vec![("time", time_server(false))], dir.path(), 8192).await);
    let tools = PolicySource::new(
        Arc::new(CombinedSource::new([host])),
        Policy { allowed_tools: vec![], disallowed_tools: vec![], mode: PermissionMode::Auto, ask_tools: vec![] },
        None,
    );
    let offered: Vec<String> = tools.tools().iter().map(|t| t.name.to_string()).collect();
    let setup = RunSetup {
        model: &chat,
        tools: &tools,
        offered_tools: offered,
        limits: Limits { run_timeout_ms: 60_000, ..Limits::default() },
        tool_context: context(),
        cancel: tokio_util::sync::CancellationToken::new(),
        steering: None,
        window: picogent::agent::ModelWindow::default(),
        checkpoint: None,
        expects_tool_calls: false,
    };
    let input = RunInput {
        system_prompt: "You are picogent.".to_string(),
        history: vec![],
        prompt: "What time is it in Paris?".to_string(),
    };
    let record = agent::run(setup, input).await.record;
    assert_eq!(record.outcome, RunOutcome::Completed, "{record:#?}");
    assert_eq!(record.calls.len(), 1, "{record:#?}");
    assert_eq!(record.calls[0].name, "mcp__time__get_current_time");
    assert_eq!(record.calls[0].outcome, ToolCallOutcome::Ok, "{record:#?}");
    assert!(record.final_message.contains("Europe/Paris"), "{}", record.final_message);
    assert_eq!(model.mismatches(), Vec::<String>::new(), "the script saw unexpected requests");
    model.shutdown().await;
}

// ---- list changes on the 2026-07-28 listen stream, and cancellation reaching the server ----

/// Waits until `path` holds `count` lines equal to `line`.
async fn recorded(path: &Path, line: &str, count: usize) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let recorded = std::fs::read_to_string(path).unwrap_or_default();
        if recorded.lines().filter(|l| *l == line).count() >= count {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the server never recorded {line:?} {count} times: {recorded:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_list_changes_refresh_and_timeouts_cancel_on_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let python = required("MCP_PYTHON", root().join(".venv-test/bin/python"));
    let marker = dir.path().join("cancelled.txt");
    let config = server(json!({
        "command": python.display().to_string(),
        "args": [root().join("fixtures/mcp/probe_server.py").display().to_string(), marker.display().to_string()],
        "trusted": true,
        "timeout_ms": 2000
    }));
    let host = start(vec![("probe", config)], dir.path(), 8192).await;
    let server = host.server("probe").unwrap();
    let names = |host: &McpHost| host.tools().iter().map(|t| t.name.to_string()).collect::<Vec<_>>();
    assert!(names(&host).contains(&"mcp__probe__hang".to_string()), "{:?}", names(&host));
    assert!(!names(&host).contains(&"mcp__probe__extra".to_string()));

    let added = host.call("mcp__probe__add_extra_tool", json!({}), &context()).await;
    assert!(text(&added).contains("added"), "{}", text(&added));
    until(server, "the tool list to refresh", |s| s.snapshot().tools.iter().any(|t| t.name == "extra")).await;
    let extra = host.call("mcp__probe__extra", json!({}), &context()).await;
    assert!(text(&extra).contains("extra tool ran"), "{}", text(&extra));

    // The server's timeout: the call fails and the server is told to stop.
    let hung = host.call("mcp__probe__hang", json!({}), &context()).await;
    assert!(text(&hung).contains("did not answer within 2000 ms"), "{}", text(&hung));
    recorded(&marker, "cancelled", 1).await;

    // The run stops: the call gives up at once and the server is told too.
    let run = context();
    let cancel = run.cancel.clone();
    let host = Arc::new(host);
    let call = tokio::spawn({
        let host = host.clone();
        async move { host.call("mcp__probe__hang", json!({}), &run).await }
    });
    recorded(&marker, "started", 2).await;
    cancel.cancel();
    let stopped = call.await.unwrap();
    assert!(text(&stopped).contains("cancelled because the run stopped"), "{}", text(&stopped));
    recorded(&marker, "cancelled", 2).await;
    host.shutdown().await;
}

// ---- bounds: a result past `max_result_bytes`, a line no call can be told from, artifacts' quotas ----

fn python() -> String {
    required("MCP_PYTHON", root().join(".venv-test/bin/python")).display().to_string()
}

/// `fixtures/mcp/bounds_server.py` over stdio; `extra` is merged into its config. Its timeout is
/// ten minutes: a call that waited for it instead of failing at once would outlast [`WAIT`].
fn bounds_stdio(extra: serde_json::Value) -> McpServerConfig {
    let mut config = json!({
        "command": python(),
        "args": [root().join("fixtures/mcp/bounds_server.py").display().to_string(), "stdio"],
        "trusted": true,
        "timeout_ms": 600_000
    });
    for (key, value) in extra.as_object().unwrap() {
        config[key] = value.clone();
    }
    server(config)
}

/// One call that must end (with a result or an error) within [`WAIT`], though the server's
/// timeout is far longer.
async fn call_at_once(host: &McpHost, name: &str, arguments: serde_json::Value, context: &ToolContext) -> ToolResult {
    tokio::time::timeout(WAIT, host.call(name, arguments, context))
        .await
        .unwrap_or_else(|_| panic!("{name} waited for the server's timeout instead of ending at once"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_over_max_result_bytes_fails_at_once_and_the_connection_stays() {
    let dir = tempfile::tempdir().unwrap();
    let host = start(vec![("big", bounds_stdio(json!({})))], dir.path(), 8192).await;
    let server = host.server("big").unwrap();
    assert_eq!(server.config().max_result_bytes, 4 * 1024 * 1024, "the default");

    let refused = call_at_once(&host, "mcp__big__blob", json!({"mib": 50}), &context()).await;
    assert!(refused.is_error, "{}", text(&refused));
    let message = text(&refused);
    assert!(message.contains("over its limit of 4194304 bytes"), "{message}");
    assert!(message.contains("mcp_servers.big.max_result_bytes"), "names the setting: {message}");
    assert!(message.contains("ask for less"), "says what to do: {message}");
    assert!(message.len() < 1_000, "none of the result reaches the model: {} bytes", message.len());
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none(), "nothing was saved");

    // The same connection answers the next call: nothing was restarted.
    let next = call_at_once(&host, "mcp__big__echo", json!({"text": "still here"}), &context()).await;
    assert_eq!(text(&next), "still here");
    assert_eq!(server.connections(), 1);
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limit_is_the_setting_not_the_transports_own() {
    // rmcp's stdio transport drops lines over 16 MiB; a larger setting is honoured all the same.
    let dir = tempfile::tempdir().unwrap();
    let config = bounds_stdio(json!({"max_result_bytes": 32 * 1024 * 1024}));
    let host = start(vec![("big", config)], dir.path(), 8192).await;
    let saved = call_at_once(&host, "mcp__big__blob", json!({"mib": 20}), &context()).await;
    assert!(!saved.is_error, "{}", text(&saved));
    assert!(text(&saved).contains("saved as artifact"), "{}", text(&saved));
    let artifact = artifact_path(&text(&saved));
    assert_eq!(std::fs::metadata(&artifact).unwrap().len(), 20 * 1024 * 1024);
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_over_the_limit_that_answers_no_call_it_can_tell_restarts_the_server_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = server(json!({
        "command": python(),
        "args": [root().join("fixtures/mcp/raw_lines_server.py").display().to_string()],
        "trusted": true,
        "timeout_ms": 600_000,
        "max_result_bytes": 1024 * 1024
    }));
    let host = start(vec![("raw", config)], dir.path(), 8192).await;
    let server = host.server("raw").unwrap();
    // The server answers with no `id`: before, the call waited its whole timeout.
    let failed = call_at_once(&host, "mcp__raw__unroutable", json!({"mib": 20}), &context()).await;
    assert!(failed.is_error, "{}", text(&failed));
    let message = text(&failed);
    assert!(message.contains("over its limit of 1048576 bytes"), "{message}");
    assert!(message.contains("mcp_servers.raw.max_result_bytes"), "{message}");
    assert!(message.contains("restarted"), "{message}");

    until(server, "the server to be restarted", |s| s.status() == ServerStatus::Ready && s.connections() == 2).await;
    let next = call_at_once(&host, "mcp__raw__echo", json!({"text": "back"}), &context()).await;
    assert_eq!(text(&next), "back", "{}", text(&next));
    host.shutdown().await;
}

/// `fixtures/mcp/bounds_server.py` over Streamable HTTP on a free port, answering POSTs as `mode`
/// (`sse` or `json`); the child is killed when dropped.
async fn bounds_http(mode: &str) -> (tokio::process::Child, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = tokio::process::Command::new(python())
        .args([root().join("fixtures/mcp/bounds_server.py").display().to_string(), "http".into(), port.to_string()])
        .arg(mode)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        assert!(tokio::time::Instant::now() < deadline, "bounds_server.py did not listen on {port}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (child, port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_streamable_http_a_result_over_the_limit_fails_at_once_too() {
    let dir = tempfile::tempdir().unwrap();
    for mode in ["json", "sse"] {
        let (mut child, port) = bounds_http(mode).await;
        let config =
            server(json!({"url": format!("http://127.0.0.1:{port}/mcp"), "trusted": true, "timeout_ms": 600_000}));
        let host = start(vec![("remote", config)], dir.path(), 8192).await;
        let refused = call_at_once(&host, "mcp__remote__blob", json!({"mib": 50}), &context()).await;
        assert!(refused.is_error, "{mode}: {}", text(&refused));
        let message = text(&refused);
        assert!(message.contains("mcp_servers.remote.max_result_bytes"), "{mode}: {message}");
        assert!(message.len() < 1_000, "{mode}: none of the result reaches the model");
        let next = call_at_once(&host, "mcp__remote__echo", json!({"text": "still here"}), &context()).await;
        assert_eq!(text(&next), "still here", "{mode}");
        assert_eq!(host.server("remote").unwrap().connections(), 1, "{mode}");
        host.shutdown().await;
        child.kill().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn artifacts_past_their_quota_are_refused_with_a_readable_result() {
    let dir = tempfile::tempdir().unwrap();
    let artifacts = dir.path().join("artifacts");
    let servers = BTreeMap::from([("big".to_string(), bounds_stdio(json!({})))]);
    let store = ArtifactStore::new(artifacts.clone(), 8192).with_quotas(5 * 1024 * 1024 / 2, 7 * 1024 * 1024 / 2);
    let host = McpHost::start_servers(servers, store).await;
    until(host.server("big").unwrap(), "the server to connect", |s| s.status() == ServerStatus::Ready).await;

    let mut saved = Vec::new();
    for _ in 0..2 {
        let image = call_at_once(&host, "mcp__big__image", json!({"kib": 1024}), &context()).await;
        assert!(text(&image).contains("image saved as artifact"), "{}", text(&image));
        saved.push(artifact_path(&text(&image)));
    }
    // The run's third MiB would pass its quota of 2.5 MiB: not saved, and the model reads why.
    let refused = call_at_once(&host, "mcp__big__image", json!({"kib": 1024}), &context()).await;
    let message = text(&refused);
    assert!(message.contains("image (image/png, 1048576 bytes) omitted: it was not saved"), "{message}");
    assert!(message.contains("limits.max_artifact_bytes_per_run"), "{message}");
    let text_refused = call_at_once(&host, "mcp__big__blob", json!({"mib": 1}), &context()).await;
    assert!(text(&text_refused).contains("the rest was not saved"), "{}", text(&text_refused));

    // Another run has its own quota, until the folder's (3.5 MiB) is reached.
    let mut other = context();
    other.run_id = Some("run-other".to_string());
    let image = call_at_once(&host, "mcp__big__image", json!({"kib": 1024}), &other).await;
    assert!(text(&image).contains("image saved as artifact"), "{}", text(&image));
    let image = call_at_once(&host, "mcp__big__image", json!({"kib": 1024}), &other).await;
    assert!(text(&image).contains("limits.max_artifact_bytes;"), "{}", text(&image));

    // What was saved is private: 0600 files in 0700 folders.
    use std::os::unix::fs::MetadataExt;
    let mode = |path: &Path| std::fs::metadata(path).unwrap().mode() & 0o777;
    for path in &saved {
        assert_eq!(mode(path), 0o600, "{}", path.display());
        for folder in path.ancestors().skip(1).take_while(|folder| folder.starts_with(&artifacts)) {
            assert_eq!(mode(folder), 0o700, "{}", folder.display());
        }
    }
    host.shutdown().await;
}

/// Peak resident memory of process `pid` (`VmHWM`), in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|line| line.starts_with("VmHWM:")).expect("VmHWM in /proc/PID/status");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_50_mib_result_fails_at_once_in_a_running_agent_with_bounded_memory_and_the_next_call_works() {
    use agent_support::{agent_config, client, comments, create_assigned, eventually, start_board, write_config};
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let script = Script::from_json(
        &json!({
            "description": "A 50 MiB result, refused at once, then a call that works.",
            "turns": [
                {"expect": {"tools_include": ["mcp__big__blob", "mcp__big__echo"]},
                 "reply": {"tool_calls": [{"name": "mcp__big__blob", "arguments": {"mib": 50}}]}},
                {"expect": {"last_tool_result_is_error": true, "last_tool_result_contains": "mcp_servers.big.max_result_bytes"},
                 "reply": {"tool_calls": [{"name": "mcp__big__echo", "arguments": {"text": "still here"}}]}},
                {"expect": {"last_tool_result_is_error": false, "last_tool_result_contains": "still here"},
                 "reply": {"content": "The blob was over the limit; the next call still works."}}
            ]
        })
        .to_string(),
    )
    .unwrap();
    let model = offline_model::start(OfflineModelOptions::script(script)).await.unwrap();
    // Ten minutes of timeout: a call that waited for it would leave no answer within the wait below.
    let server = serde_json::to_value(bounds_stdio(json!({}))).unwrap();
    let config =
        agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({"mcp_servers": {"big": server}}));
    let log = std::fs::File::create(dir.path().join("agent.log")).unwrap();
    let mut agent = agent_support::spawn_agent_process_with(&write_config(dir.path(), &config), log);
    let alice = client(&board, "tok-alice");

    let task = create_assigned(&alice, "Fetch the big blob", "Call the blob tool, then echo.").await;
    let answer = eventually(WAIT, "the run's answer on the task", || async {
        comments(&alice, &task.id)
            .await
            .into_iter()
            .find(|m| m.author_slug == "picogent" && m.content.contains("still works"))
    })
    .await;
    let peak = peak_rss_kib(agent.id());
    agent.kill().unwrap();
    agent.wait().unwrap();
    let log = std::fs::read_to_string(dir.path().join("agent.log")).unwrap_or_default();
    assert_eq!(model.mismatches(), Vec::<String>::new(), "the model saw other requests than the script's; log:\n{log}");
    assert!(answer.content.contains("over the limit"), "{}", answer.content);
    // The agent read no more of the 50 MiB than the limit (4 MiB) and the line it was cut at.
    assert!(peak < 100 * 1024, "the agent's peak resident memory was {peak} KiB");
    model.shutdown().await;
    board.shutdown().await.unwrap();
}
