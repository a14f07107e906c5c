//! Access: the board, the MCP HTTP endpoint and the agent's HTTP endpoint refuse missing and
//! wrong tokens; `/metrics` and `/healthz` expose no secrets; the board's page and the run
//! inspector answer only their own host names and take changes only from their own origin (DNS
//! rebinding); and the logs of `picogent board`, `picogent run` and `picogent mcp --http`, at
//! `RUST_LOG=trace`, never contain a token.

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use picogent::tracker::model::*;
use serde_json::json;
use support::fault_harness::{AGENT_MCP_TOKEN, agent_config_json, eventually, start_agent_in_process};

const SEED_TOKENS: [&str; 4] = ["tok-picogent", "tok-alice", "tok-bob", "tok-otherbot"];
const MCP_TOKEN: &str = "mcp-secret-7f3a";

fn free_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

async fn wait_listening(addr: SocketAddr, child: &mut Child) {
    eventually(Duration::from_secs(20), &format!("a listener on {addr}"), || {
        let exited = child.try_wait().unwrap();
        async move {
            assert!(exited.is_none(), "the process exited early: {exited:?}");
            tokio::net::TcpStream::connect(addr).await.ok().map(|_| ())
        }
    })
    .await;
}

/// A file for a child's stderr: a pipe nobody reads while the child runs would fill up at
/// `RUST_LOG=trace` and block it.
fn log_file(dir: &Path, name: &str) -> (std::path::PathBuf, Stdio) {
    let path = dir.join(name);
    let file = std::fs::File::create(&path).unwrap();
    (path, Stdio::from(file))
}

/// Stops a child (SIGTERM, then SIGKILL) and returns everything it wrote to its log.
fn stop_and_read_log(mut child: Child, log: &Path) -> String {
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    std::fs::read_to_string(log).unwrap()
}

fn assert_no_token(what: &str, text: &str, extra: &[&str]) {
    for token in SEED_TOKENS.iter().chain(extra) {
        if let Some(line) = text.lines().find(|line| line.contains(token)) {
            // The line, masked, says where the leak is without printing the secret.
            let masked: String = line.replace(token, "<TOKEN>").chars().take(600).collect();
            panic!("{what} contains the token {}…: {masked}", &token[..4]);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn board_refuses_missing_and_wrong_tokens() {
    let board = support::TestBoard::start().await;
    let http = reqwest::Client::new();
    let api = format!("{}/api", board.url());
    let wrong_headers: [Option<&str>; 5] =
        [None, Some("Bearer tok-nobody"), Some("Bearer "), Some("Basic dG9rLWFsaWNlOg=="), Some("tok-alice")];
    let requests = [
        ("GET", "/members"),
        ("GET", "/projects"),
        ("GET", "/tasks"),
        ("POST", "/tasks"),
        ("POST", "/messages"),
        ("GET", "/messages"),
        ("PATCH", "/tasks/TE-1"),
    ];
    for (method, path) in requests {
        for header in wrong_headers {
            let mut request =
                http.request(method.parse().unwrap(), format!("{api}{path}")).json(&json!({"title": "x"}));
            if let Some(header) = header {
                request = request.header("authorization", header);
            }
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 401, "{method} {path} with {header:?}");
            let body = response.text().await.unwrap();
            assert_no_token(&format!("the 401 body of {method} {path}"), &body, &[]);
        }
    }
    // The event stream: no token, a wrong one in the header or in `?token=`.
    let ws = format!("ws://{}/api/ws", board.handle.addr());
    for url in [ws.clone(), format!("{ws}?token=tok-nobody")] {
        let error = tokio_tungstenite::connect_async(url.as_str()).await.unwrap_err();
        match error {
            tokio_tungstenite::tungstenite::Error::Http(response) => assert_eq!(response.status(), 401, "{url}"),
            other => panic!("{url}: {other:?}"),
        }
    }
    // The right token gets in.
    let response = http.get(format!("{api}/members")).bearer_auth("tok-alice").send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_no_token("the member list", &response.text().await.unwrap(), &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_http_exposes_no_secrets_and_serves_nothing_else() {
    let board = support::TestBoard::start().await;
    let model = picogent::offline_model::start(picogent::offline_model::OfflineModelOptions::planner()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let agent =
        start_agent_in_process(agent_config_json(dir.path(), &board.url(), &model.url(), "picogent", json!({}))).await;
    eventually(Duration::from_secs(10), "agent caught up", || async { agent.status.caught_up().then_some(()) }).await;
    // Some work first, so the metrics have something in them.
    let alice = board.client("alice");
    let chat_id = alice.get_project("team").await.unwrap().chat_id;
    let question = alice
        .send_message(
            &SendMessage { content: "@picogent hello".into(), chat_id: Some(chat_id), ..SendMessage::default() },
            None,
        )
        .await
        .unwrap();
    eventually(Duration::from_secs(20), "a reply", || async {
        let query = MessageQuery { parent_id: Some(question.id.clone()), ..MessageQuery::default() };
        alice.list_messages(&query).await.ok()?.iter().any(|m| m.author_slug == "picogent").then_some(())
    })
    .await;
    let base = format!("http://{}", agent.http_addr.unwrap());
    let http = reqwest::Client::new();
    for path in ["/healthz", "/readyz", "/metrics"] {
        let response = http.get(format!("{base}{path}")).send().await.unwrap();
        assert!(response.status().is_success(), "{path}: {}", response.status());
        assert_no_token(path, &response.text().await.unwrap(), &[]);
    }
    // `/mcp` wants its own bearer token: none, a wrong one, or the tracker token are refused.
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "access-test", "version": "0"}}});
    let mcp = |header: Option<String>| {
        let mut request =
            http.post(format!("{base}/mcp")).header("accept", "application/json, text/event-stream").json(&initialize);
        if let Some(header) = header {
            request = request.header("authorization", header);
        }
        request.send()
    };
    for header in [
        None,
        Some("Bearer tok-nobody".to_string()),
        Some("Bearer tok-picogent".to_string()),
        Some(format!("Bearer {AGENT_MCP_TOKEN}x")),
        Some(format!("Basic {AGENT_MCP_TOKEN}")),
    ] {
        let response = mcp(header.clone()).await.unwrap();
        assert_eq!(response.status(), 401, "/mcp with {header:?}");
        assert_no_token("the /mcp 401 body", &response.text().await.unwrap(), &[AGENT_MCP_TOKEN]);
    }
    let response = mcp(Some(format!("Bearer {AGENT_MCP_TOKEN}"))).await.unwrap();
    assert!(response.status().is_success(), "/mcp with the right token: {}", response.status());
    // The run inspector (`/`, open on this loopback listener) shows no token either.
    for path in ["/healthz", "/readyz", "/metrics", "/", "/runs", "/events", "/health"] {
        let text = http.get(format!("{base}{path}")).send().await.unwrap().text().await.unwrap();
        assert_no_token(path, &text, &[AGENT_MCP_TOKEN, "tok-picogent"]);
    }
    // Nothing else is served: no token gets anywhere, a wrong one neither.
    for header in [None, Some("Bearer tok-nobody"), Some("Bearer tok-picogent")] {
        for (method, path) in [("GET", "/admin"), ("POST", "/runs"), ("POST", "/metrics")] {
            let mut request = http.request(method.parse().unwrap(), format!("{base}{path}"));
            if let Some(header) = header {
                request = request.header("authorization", header);
            }
            let response = request.send().await.unwrap();
            assert!(
                matches!(response.status().as_u16(), 401 | 404 | 405),
                "{method} {path} with {header:?}: {}",
                response.status()
            );
        }
    }
    agent.shutdown().await.unwrap();
    model.shutdown().await;
}

/// Writes an agent.json for `slug` and returns its path.
fn write_config(dir: &Path, board: &str, model: &str) -> std::path::PathBuf {
    let config = agent_config_json(dir, board, model, "picogent", json!({}));
    let path = dir.join("agent.json");
    std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_http_refuses_missing_and_wrong_tokens_and_logs_no_token() {
    let board = support::TestBoard::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &board.url(), "http://127.0.0.1:9/v1");
    let addr = free_port();
    let (log, stderr) = log_file(dir.path(), "mcp.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_picogent"))
        .args(["mcp", "--http", &addr.to_string(), "--config"])
        .arg(&config)
        .env("TEAMBOARD_TOKEN", "tok-picogent")
        .env("PICOGENT_MCP_TOKEN", MCP_TOKEN)
        .env("RUST_LOG", "trace")
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    wait_listening(addr, &mut child).await;
    let http = reqwest::Client::new();
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "access-test", "version": "0"}}});
    let send = |header: Option<String>| {
        let mut request = http
            .post(format!("http://{addr}/mcp"))
            .header("accept", "application/json, text/event-stream")
            .json(&initialize);
        if let Some(header) = header {
            request = request.header("authorization", header);
        }
        request.send()
    };
    for header in [
        None,
        Some("Bearer wrong".to_string()),
        Some(format!("Bearer {MCP_TOKEN}x")),
        Some("Bearer tok-picogent".to_string()),
        Some(format!("Basic {MCP_TOKEN}")),
    ] {
        let response = send(header.clone()).await.unwrap();
        assert_eq!(response.status(), 401, "{header:?}");
        let body = response.text().await.unwrap();
        assert_no_token("the MCP 401 body", &body, &[MCP_TOKEN]);
    }
    let response = send(Some(format!("Bearer {MCP_TOKEN}"))).await.unwrap();
    assert!(response.status().is_success(), "the right token: {}", response.status());
    let stderr = stop_and_read_log(child, &log);
    assert!(stderr.contains("TRACE") || stderr.contains("DEBUG"), "trace logging was on: {stderr}");
    assert_no_token("picogent mcp's trace log", &stderr, &[MCP_TOKEN]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_logs_of_board_and_agent_carry_no_token() {
    let dir = tempfile::tempdir().unwrap();
    let board_addr = free_port();
    let (board_log_path, board_stderr) = log_file(dir.path(), "board.log");
    let mut board = Command::new(env!("CARGO_BIN_EXE_picogent"))
        .args(["board", "--listen", &board_addr.to_string(), "--db"])
        .arg(dir.path().join("board.db"))
        .arg("--seed")
        .arg(support::seed_path())
        .env("RUST_LOG", "trace")
        .stdout(Stdio::null())
        .stderr(board_stderr)
        .spawn()
        .unwrap();
    wait_listening(board_addr, &mut board).await;
    let board_url = format!("http://{board_addr}");
    let model = picogent::offline_model::start(picogent::offline_model::OfflineModelOptions::planner()).await.unwrap();
    let config = write_config(dir.path(), &board_url, &model.url());
    let (agent_log_path, agent_stderr) = log_file(dir.path(), "agent.log");
    let mut agent = Command::new(env!("CARGO_BIN_EXE_picogent"))
        .args(["run", "--config"])
        .arg(&config)
        .env("TEAMBOARD_TOKEN", "tok-picogent")
        .env("PICOGENT_MCP_TOKEN", MCP_TOKEN)
        .env("RUST_LOG", "trace")
        .stdout(Stdio::null())
        .stderr(agent_stderr)
        .spawn()
        .unwrap();

    // Work through both: a task, a mention, and refused attempts with wrong tokens.
    let alice = support::client_at(&board_url, "tok-alice", 5000, support::fast_retry(5));
    let task = alice
        .create_task(
            &CreateTask {
                project_slug: "team".into(),
                title: "Log check".into(),
                description: Some("- one\n- two".into()),
                assignee_slug: Some("picogent".into()),
                ..CreateTask::default()
            },
            None,
        )
        .await
        .unwrap();
    let chat_id = alice.get_project("team").await.unwrap().chat_id;
    let question = alice
        .send_message(
            &SendMessage { content: "@picogent status?".into(), chat_id: Some(chat_id), ..SendMessage::default() },
            None,
        )
        .await
        .unwrap();
    let stranger = support::client_at(&board_url, "tok-bob-wrong", 5000, support::fast_retry(1));
    assert!(stranger.list_members().await.is_err());
    eventually(Duration::from_secs(40), "task worked and mention answered", || {
        let exited = agent.try_wait().unwrap();
        let (alice, task, question) = (&alice, &task, &question);
        async move {
            assert!(exited.is_none(), "the agent exited: {exited:?}");
            let task = alice.get_task(&task.id).await.ok()?;
            let query = MessageQuery { parent_id: Some(question.id.clone()), ..MessageQuery::default() };
            let replied = alice.list_messages(&query).await.ok()?.iter().any(|m| m.author_slug == "picogent");
            (task.status == TaskStatus::InReview && replied).then_some(())
        }
    })
    .await;

    let agent_log = stop_and_read_log(agent, &agent_log_path);
    let board_log = stop_and_read_log(board, &board_log_path);
    model.shutdown().await;
    for (what, log) in [("picogent run", &agent_log), ("picogent board", &board_log)] {
        assert!(log.contains("TRACE"), "{what} logged at trace: {} bytes", log.len());
        assert_no_token(&format!("{what}'s trace log"), log, &["tok-bob-wrong", MCP_TOKEN]);
    }
}

/// A form post: a path and its url-encoded body.
type Post<'a> = &'a [(&'a str, &'a str)];

/// A page that rebinds its own name to 127.0.0.1 makes the browser send `Host` with that name:
/// the board's page (`picogent board`, the binary) and the run inspector (an agent on loopback)
/// answer it with an empty 421, GET or POST, sign nobody in, and refuse a change whose `Origin`
/// is another site's with an empty 403. Their own names (the listener's address, `localhost`,
/// and the names configured: `--allowed-host`, `http.allowed_hosts`) are served, and so are the
/// board's API and the agent's probes, whatever the name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pages_give_a_rebinding_host_and_a_foreign_origin_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let board_addr = free_port();
    let (board_log, board_stderr) = log_file(dir.path(), "board.log");
    let mut board = Command::new(env!("CARGO_BIN_EXE_picogent"))
        .args(["board", "--listen", &board_addr.to_string(), "--allowed-host", "board.example.test", "--db"])
        .arg(dir.path().join("board.db"))
        .arg("--seed")
        .arg(support::seed_path())
        .stdout(Stdio::null())
        .stderr(board_stderr)
        .spawn()
        .unwrap();
    wait_listening(board_addr, &mut board).await;
    let board_url = format!("http://{board_addr}");
    let model = picogent::offline_model::start(picogent::offline_model::OfflineModelOptions::planner()).await.unwrap();
    let extra = json!({"http": {"allowed_hosts": ["agent.example.test"]}});
    let agent =
        start_agent_in_process(agent_config_json(dir.path(), &board_url, &model.url(), "picogent", extra)).await;
    let agent_addr = agent.http_addr.unwrap();
    let inspector_url = format!("http://{agent_addr}");
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let rebinding = "rebind.attacker.example";

    // Each page: its base URL, pages to GET, and a form to POST (a path and its body).
    let pages: [(&str, &[&str], Post); 2] = [
        (
            &board_url,
            &["/", "/signin", "/projects/team", "/tasks/TE-1", "/assets/live.js"],
            &[("/signin", "member=alice")],
        ),
        (&inspector_url, &["/", "/runs", "/events", "/health", "/runs/live", "/login"], &[("/login", "token=x")]),
    ];
    for (base, gets, posts) in pages {
        for path in gets {
            let answer = http.get(format!("{base}{path}")).header("host", rebinding).send().await.unwrap();
            assert_eq!(answer.status(), 421, "GET {base}{path} for {rebinding}");
            assert!(answer.headers().get("set-cookie").is_none(), "GET {path}");
            assert_eq!(answer.text().await.unwrap(), "", "GET {base}{path}: nothing else");
        }
        for (path, form) in posts {
            let post = |host: &str, origin: Option<&str>| {
                let mut request = http
                    .post(format!("{base}{path}"))
                    .header("host", host)
                    .header("content-type", "application/x-www-form-urlencoded")
                    .body(form.to_string());
                if let Some(origin) = origin {
                    request = request.header("origin", origin);
                }
                request.send()
            };
            let answer = post(rebinding, Some("http://rebind.attacker.example")).await.unwrap();
            assert_eq!(answer.status(), 421, "POST {base}{path} for {rebinding}");
            assert!(answer.headers().get("set-cookie").is_none(), "POST {path} signed someone in");
            assert_eq!(answer.text().await.unwrap(), "", "POST {base}{path}: nothing else");
            // The right name, but posted by another site's page.
            let own_host = base.trim_start_matches("http://");
            let answer = post(own_host, Some("http://rebind.attacker.example")).await.unwrap();
            assert_eq!(answer.status(), 403, "POST {base}{path} from another origin");
            assert!(answer.headers().get("set-cookie").is_none(), "POST {path} from another origin");
            assert_eq!(answer.text().await.unwrap(), "", "POST {base}{path} from another origin: nothing else");
            // Its own origin, and a client that is no browser (no Origin), are served.
            for origin in [Some(base), None] {
                let answer = post(own_host, origin).await.unwrap();
                assert_eq!(answer.status(), 303, "POST {base}{path} with Origin {origin:?}");
            }
        }
    }
    // Their own names, with any port, and the names configured.
    let (board_port, agent_port) = (board_addr.port(), agent_addr.port());
    for (url, host) in [
        (format!("{board_url}/signin"), format!("localhost:{board_port}")),
        (format!("{board_url}/signin"), format!("127.0.0.1:{board_port}")),
        (format!("{board_url}/signin"), "board.example.test".to_string()),
        (format!("{inspector_url}/runs"), format!("localhost:{agent_port}")),
        (format!("{inspector_url}/runs"), format!("127.0.0.1:{agent_port}")),
        (format!("{inspector_url}/runs"), format!("agent.example.test:{agent_port}")),
    ] {
        let answer = http.get(&url).header("host", &host).send().await.unwrap();
        assert_eq!(answer.status(), 200, "{url} as {host}");
    }
    // What is not a page answers any name: the board's API (its token guards it), the probes.
    let api = http.get(format!("{board_url}/api/members")).header("host", rebinding).bearer_auth("tok-alice");
    assert_eq!(api.send().await.unwrap().status(), 200, "the board's API");
    for path in ["/healthz", "/metrics"] {
        let answer = http.get(format!("{inspector_url}{path}")).header("host", rebinding).send().await.unwrap();
        assert_eq!(answer.status(), 200, "{path}");
    }
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    let log = stop_and_read_log(board, &board_log);
    assert!(log.contains("DNS rebinding"), "the board says why it refused: {log}");
}
