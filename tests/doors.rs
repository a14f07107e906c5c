//! The doors of the agent and the board, tried as an attacker would on loopback: credentials in
//! URLs never start an agent nor show on a page, `/mcp` under `picogent run` refuses a
//! non-loopback address as `picogent mcp --http` does.

#[path = "support/agent.rs"]
mod agent_support;

use std::path::Path;

use agent_support::*;
use serde_json::{Value, json};

/// The secrets the URLs below carry: none may appear in any output.
const URL_USER: &str = "someone-7c1";
const URL_PASSWORD: &str = "s3cret-9d4e";

fn assert_no_url_secret(what: &str, text: &str) {
    for secret in [URL_USER, URL_PASSWORD] {
        assert!(!text.contains(secret), "{what} shows the URL's user info ({secret}): {text}");
    }
}

/// `agent.json` in `dir` for a board and model that need not exist: what is checked here is
/// refused before anything connects.
fn config_with(dir: &Path, extra: Value) -> std::path::PathBuf {
    let config = agent_config(dir, "http://127.0.0.1:9", "http://127.0.0.1:9/v1", "picogent", extra);
    write_config(dir, &config)
}

/// A credential in `llm.base_url`, `tracker.url` or an MCP server's `url` stops `picogent run`
/// and `picogent check` at load: exit code 1, a message naming the field and where the secret
/// goes instead, and neither the user name nor the password anywhere in what they print.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_in_a_url_stops_the_start_without_showing_it() {
    let with_user_info = format!("http://{URL_USER}:{URL_PASSWORD}@127.0.0.1:9");
    let cases = [
        (json!({"llm": {"base_url": format!("{with_user_info}/v1")}}), "llm.base_url", "llm.api_key_env"),
        (
            json!({"llm": {"base_url": format!("http://127.0.0.1:9/v1?password={URL_PASSWORD}")}}),
            "llm.base_url",
            "llm.api_key_env",
        ),
        (json!({"tracker": {"url": with_user_info}}), "tracker.url", "TEAMBOARD_TOKEN"),
        (
            json!({"mcp_servers": {"files": {"url": format!("{with_user_info}/mcp")}}}),
            "mcp_servers.files.url",
            "Authorization",
        ),
    ];
    for (extra, field, instead) in cases {
        let dir = tempfile::tempdir().unwrap();
        let config = config_with(dir.path(), extra);
        for command in ["run", "check"] {
            let output = picogent_output(&[command], &config).await;
            let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
            assert_eq!(output.status.code(), Some(1), "picogent {command} with a credential in {field}: {stderr}");
            let said = format!("{stdout}{stderr}");
            assert!(said.contains(field), "picogent {command} names {field}: {said}");
            assert!(said.contains("holds a credential"), "picogent {command} says what is wrong: {said}");
            assert!(said.contains(instead), "picogent {command} says where the secret goes ({instead}): {said}");
            assert_no_url_secret(&format!("picogent {command} ({field})"), &said);
        }
    }
}

/// An agent whose config was never checked (started in process, as a library user could) still
/// shows no user info: not on the health page, nor anywhere else the inspector shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_health_page_never_shows_user_info() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let model_url = model.url().replacen("http://", &format!("http://{URL_USER}:{URL_PASSWORD}@"), 1);
    let config = agent_config(dir.path(), &board.url(), &model_url, "picogent", json!({}));
    let agent = start_agent(config).await;
    wait_ready(&agent).await;
    let base = format!("http://{}", agent.http_addr.unwrap());
    for path in ["/health", "/", "/readyz", "/metrics"] {
        let response = reqwest::get(format!("{base}{path}")).await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let text = response.text().await.unwrap();
        assert_no_url_secret(path, &text);
        if path == "/health" {
            // The page escapes `/` (`&#x2f;`): the address is what it must show.
            let shown = model.url().trim_start_matches("http://").trim_end_matches("/v1").to_string();
            assert!(text.contains(&shown), "the health page shows the model's address without user info: {text}");
        }
    }
    agent.shutdown().await.unwrap();
    model.shutdown().await;
}

/// `/mcp` is served on `http.listen` when the MCP token is set. On an address that is not
/// loopback, without `mcp.allowed_hosts`, `picogent run` refuses to start, as `picogent mcp
/// --http` does, before it takes any lock or talks to the tracker (there is none here); and
/// without the token the same listener is no reason to refuse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_under_run_on_a_non_loopback_address_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_with(dir.path(), json!({"http": {"listen": "0.0.0.0:0"}}));
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_picogent"));
    command
        .args(["run", "--config"])
        .arg(&config)
        .env("TEAMBOARD_TOKEN", "tok-picogent")
        .env("PICOGENT_MCP_TOKEN", MCP_TOKEN)
        .env("RUST_LOG", "warn");
    let output = tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    for words in ["refusing to listen on 0.0.0.0:0", "mcp.allowed_hosts", "PICOGENT_MCP_TOKEN"] {
        assert!(stderr.contains(words), "the refusal says {words:?}: {stderr}");
    }
    assert!(!stderr.contains(MCP_TOKEN), "the refusal shows no token: {stderr}");
    assert!(!dir.path().join("picogent.db.lock").exists(), "refused before the state was locked");
}

// ---- Limits on every door ----

use std::net::{Ipv4Addr, SocketAddr};
use std::process::Child;
use std::time::Duration;

use picogent::board::{BoardOptions, PageLimits};
use picogent::web::DoorLimits;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const PATIENCE: Duration = Duration::from_secs(30);

fn free_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

/// Kills a child process when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `picogent run` as a child on `listen`, against `board`, with `http` merged into the config's
/// `http` section; waits until `/readyz` says ready.
async fn agent_process(dir: &Path, board: &str, model: &str, listen: SocketAddr, http: Value) -> Killed {
    let mut http_section = json!({"listen": listen.to_string()});
    merge(&mut http_section, http);
    let config = agent_config(dir, board, model, "picogent", json!({"http": http_section}));
    let log = std::fs::File::create(dir.join("agent.log")).unwrap();
    let child = Killed(spawn_agent_process_with(&write_config(dir, &config), log));
    startup_report(listen).await;
    child
}

/// A connection to `addr` from the loopback address `from` (Linux routes all of 127.0.0.0/8 to
/// the loopback): to a listener, each address is a peer of its own, with its own share of the
/// connections (`DoorLimits::max_connections_per_peer`).
async fn connect_from(from: Ipv4Addr, addr: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from((from, 0)))?;
    socket.connect(addr).await
}

/// The `i`th of `peers` loopback addresses other than the tests' own 127.0.0.1.
fn loopback_peer(i: usize, peers: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, 2 + (i % peers) as u8)
}

/// An in-process board with these limits.
async fn board_with(dir: &Path, doors: DoorLimits, pages: PageLimits) -> picogent::board::BoardHandle {
    let options = BoardOptions {
        doors,
        pages,
        ..BoardOptions::new("127.0.0.1:0".parse().unwrap(), dir.join("board.db"), Some(SEED.into()))
    };
    picogent::board::start(options).await.unwrap()
}

/// A client that opens a request, never finishes its headers, says so on `opened`, and waits for
/// the server to close the connection: what the server sent before, or `Err` if it never closed
/// it. With `trickle` it sends a byte of its headers every 200 ms, which buys it nothing: the
/// deadline is for the whole head.
async fn slow_client(
    from: Ipv4Addr,
    addr: SocketAddr,
    trickle: bool,
    opened: tokio::sync::mpsc::Sender<()>,
) -> Result<Vec<u8>, String> {
    let mut stream = connect_from(from, addr).await.map_err(|error| format!("cannot connect: {error}"))?;
    let head = format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\nX-Slow: ");
    let written = stream.write_all(head.as_bytes()).await;
    let _ = opened.send(()).await;
    if written.is_err() {
        // Closed by the server before its head went out: dropped, unanswered.
        return Ok(Vec::new());
    }
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let deadline = tokio::time::sleep(PATIENCE);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            read = stream.read(&mut buf) => match read {
                Ok(0) | Err(_) => return Ok(seen),
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            },
            _ = tick.tick(), if trickle => {
                if stream.write_all(b"a").await.is_err() {
                    return Ok(seen);
                }
            }
            _ = &mut deadline => return Err(format!("still open after {PATIENCE:?}")),
        }
    }
}

/// Opens `n` slow clients on `addr`, spread over `peers` loopback addresses, and returns their
/// tasks once every one has sent its unfinished headers.
async fn open_slow_clients(
    addr: SocketAddr,
    n: usize,
    peers: usize,
) -> Vec<tokio::task::JoinHandle<Result<Vec<u8>, String>>> {
    let (opened, mut all_opened) = tokio::sync::mpsc::channel(n);
    let clients: Vec<_> =
        (0..n).map(|i| tokio::spawn(slow_client(loopback_peer(i, peers), addr, i % 2 == 0, opened.clone()))).collect();
    drop(opened);
    for _ in 0..n {
        all_opened.recv().await.expect("every slow client opens its request");
    }
    clients
}

/// Each slow client was closed by the server, and got no answer.
async fn assert_all_dropped(what: &str, clients: Vec<tokio::task::JoinHandle<Result<Vec<u8>, String>>>) {
    for client in clients {
        let seen = client.await.unwrap().unwrap_or_else(|error| panic!("a slow client of {what}: {error}"));
        let seen = String::from_utf8_lossy(&seen);
        assert!(!seen.contains(" 200 "), "a slow client of {what} was answered: {seen}");
    }
}

/// 300 clients that never finish their headers on the agent's listener (`picogent run`, the
/// binary) and 100 on the board's: each is dropped once its header deadline passes, and
/// meanwhile the agent answers `/healthz` and a real mention on the board, and the board its API.
/// They come from four addresses, so each address stays within its share of the connections
/// and the header deadline is what drops them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_dropped_and_the_agent_keeps_answering_meanwhile() {
    let dir = tempfile::tempdir().unwrap();
    let doors = DoorLimits { header_timeout: Duration::from_secs(3), ..DoorLimits::default() };
    let board = board_with(dir.path(), doors, PageLimits::default()).await;
    let model = start_model(0).await;
    let listen = free_port();
    let _agent =
        agent_process(dir.path(), &board.url(), &model.url(), listen, json!({"header_timeout_ms": 3000})).await;

    let on_agent = open_slow_clients(listen, 300, 4).await;
    let on_board = open_slow_clients(board.addr(), 100, 4).await;
    let http = reqwest::Client::new();
    let healthz = http.get(format!("http://{listen}/healthz")).send().await.unwrap();
    assert_eq!(healthz.status(), 200, "/healthz with 300 slow clients on the listener");
    let alice = client(&board, "tok-alice");
    assert!(alice.list_members().await.is_ok(), "the board's API with 100 slow clients on it");
    let chat = chat_id(&alice).await;
    let question = say(&alice, &chat, "@picogent are you there?").await;
    eventually(PATIENCE, "the agent's reply to a mention", || async {
        thread(&alice, &question.id).await.iter().any(|message| message.author_slug == "picogent").then_some(())
    })
    .await;

    assert_all_dropped("the agent", on_agent).await;
    assert_all_dropped("the board", on_board).await;
    let healthz = http.get(format!("http://{listen}/healthz")).send().await.unwrap();
    assert_eq!(healthz.status(), 200, "/healthz after");
    model.shutdown().await;
}

/// One client (127.0.0.2) opens 520 connections to the agent's listener (512 places) and never
/// finishes their headers: it keeps its share (a quarter), the rest are closed at once, and
/// `/healthz` from another address is answered at once, not after the header deadline (10 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_holding_half_open_connections_cannot_keep_healthz_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let listen = free_port();
    let _agent = agent_process(dir.path(), &board.url(), &model.url(), listen, json!({})).await;

    let flood = open_slow_clients(listen, 520, 1).await;
    let healthz = tokio::time::timeout(Duration::from_secs(5), reqwest::get(format!("http://{listen}/healthz")))
        .await
        .expect("/healthz answered while one client holds half-open connections")
        .unwrap();
    assert_eq!(healthz.status(), 200);
    assert_all_dropped("the flood", flood).await;
    model.shutdown().await;
}

/// A live stream refused: its status, its `Retry-After`, and its body.
#[derive(Debug)]
struct Refused {
    status: u16,
    retry_after: Option<String>,
    body: String,
}

/// Opens the live stream `path` on `addr` over a connection of its own, as a browser's
/// `EventSource` does: the open connection once its first fragment came, or what refused it.
async fn open_live(addr: SocketAddr, path: &str, cookie: Option<&str>) -> Result<TcpStream, Refused> {
    open_live_from(Ipv4Addr::LOCALHOST, addr, path, cookie).await
}

/// [`open_live`] from the loopback address `from`.
async fn open_live_from(
    from: Ipv4Addr,
    addr: SocketAddr,
    path: &str,
    cookie: Option<&str>,
) -> Result<TcpStream, Refused> {
    let mut stream = connect_from(from, addr).await.unwrap();
    let cookie = cookie.map(|cookie| format!("Cookie: {cookie}\r\n")).unwrap_or_default();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n{cookie}\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        let n = tokio::time::timeout(PATIENCE, stream.read(&mut buf)).await.expect("an answer").unwrap();
        assert!(n > 0, "the connection closed before an answer: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
        if let Some(at) = seen.windows(4).position(|window| window == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&seen[..head_end]).to_lowercase();
    let status: u16 = head.split_whitespace().nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
    if status == 200 {
        while !String::from_utf8_lossy(&seen[head_end..]).contains("data:") {
            let n = tokio::time::timeout(PATIENCE, stream.read(&mut buf)).await.expect("a first fragment").unwrap();
            assert!(n > 0, "the stream ended before its first fragment");
            seen.extend_from_slice(&buf[..n]);
        }
        return Ok(stream);
    }
    let retry_after = head.lines().find_map(|line| line.strip_prefix("retry-after:")).map(|v| v.trim().to_string());
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while seen.len() < head_end + length {
        let n = tokio::time::timeout(PATIENCE, stream.read(&mut buf)).await.expect("the body").unwrap();
        if n == 0 {
            break;
        }
        seen.extend_from_slice(&buf[..n]);
    }
    Err(Refused { status, retry_after, body: String::from_utf8_lossy(&seen[head_end..]).to_string() })
}

/// Opens `n` live streams of `path` at once, from ten loopback addresses (each within its share
/// of the listener's connections); the served ones and the refused ones.
async fn open_many(addr: SocketAddr, path: &str, cookie: Option<&str>, n: usize) -> (Vec<TcpStream>, Vec<Refused>) {
    let opening: Vec<_> = (0..n)
        .map(|i| {
            let (path, cookie) = (path.to_string(), cookie.map(str::to_string));
            tokio::spawn(async move { open_live_from(loopback_peer(i, 10), addr, &path, cookie.as_deref()).await })
        })
        .collect();
    let (mut served, mut refused) = (Vec::new(), Vec::new());
    for opened in opening {
        match opened.await.unwrap() {
            Ok(stream) => served.push(stream),
            Err(refusal) => refused.push(refusal),
        }
    }
    (served, refused)
}

fn assert_refused_for_the_cap(refused: &[Refused], cap: usize) {
    for refusal in refused {
        assert_eq!(refusal.status, 503, "{refusal:?}");
        assert_eq!(refusal.retry_after.as_deref(), Some("30"), "{refusal:?}");
        assert!(
            refusal.body.contains(&format!("its cap is {cap}")) && refusal.body.contains("the page works without them"),
            "the refusal says why and that the page still works: {refusal:?}"
        );
    }
}

/// The resident memory of process `pid`, in kB.
fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|line| line.starts_with("VmRSS:")).expect("VmRSS in /proc/<pid>/status");
    line.split_whitespace().nth(1).and_then(|kb| kb.parse().ok()).unwrap()
}

/// 1,000 live streams at once on the agent's listener (`picogent run`, the binary): the first
/// `http.max_live_streams` (64 by default) are served, the rest get 503 with `Retry-After` and
/// words saying the page still works; meanwhile the agent answers `/healthz` and a mention. Once
/// they close, new streams are served again, and the agent's memory is back near where it was
/// idle (a bound on resources: within 20 MB of it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_live_streams_leave_the_agent_answering_and_memory_comes_back() {
    const CAP: usize = 64;
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let listen = free_port();
    let agent = agent_process(dir.path(), &board.url(), &model.url(), listen, json!({})).await;
    let pid = agent.0.id();
    let alice = client(&board, "tok-alice");
    let chat = chat_id(&alice).await;
    let answered = |question: String| {
        let alice = &alice;
        eventually(PATIENCE, "the agent's reply to a mention", move || {
            let question = question.clone();
            async move { thread(alice, &question).await.iter().any(|m| m.author_slug == "picogent").then_some(()) }
        })
    };
    // Warm up what any use allocates once (templates, a run, the state's pages), then measure.
    let question = say(&alice, &chat, "@picogent warm up").await;
    answered(question.id).await;
    drop(open_live(listen, "/runs/live", None).await.expect("a stream is served"));
    let idle = rss_kb(pid);

    let (served, refused) = open_many(listen, "/runs/live", None, 1_000).await;
    assert_eq!(served.len(), CAP, "the cap of live streams is served");
    assert_eq!(refused.len(), 1_000 - CAP);
    assert_refused_for_the_cap(&refused, CAP);
    let with_streams = rss_kb(pid);
    let healthz = reqwest::get(format!("http://{listen}/healthz")).await.unwrap();
    assert_eq!(healthz.status(), 200, "/healthz with the streams open");
    let page = reqwest::get(format!("http://{listen}/runs")).await.unwrap();
    assert_eq!(page.status(), 200, "the page itself is served at the cap");
    let question = say(&alice, &chat, "@picogent still there?").await;
    answered(question.id).await;
    let one_more = open_live(listen, "/runs/live", None).await;
    assert!(one_more.is_err(), "at the cap, one more stream is refused");

    drop(served);
    let again = eventually(PATIENCE, "a live stream served again once the others closed", || async {
        open_live(listen, "/runs/live", None).await.ok()
    })
    .await;
    drop(again);
    let after = eventually(PATIENCE, "memory back near idle", || async {
        let now = rss_kb(pid);
        (now <= idle + 20 * 1024).then_some(now)
    })
    .await;
    eprintln!("doors: agent RSS idle {idle} kB, with {CAP} streams and 1000 asked {with_streams} kB, after {after} kB");
    model.shutdown().await;
}

/// The board's page has its own cap of live streams: past it 503, and places come back when
/// streams close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_boards_live_streams_are_capped_and_given_back() {
    let dir = tempfile::tempdir().unwrap();
    let pages = PageLimits { max_live_streams: 8, ..PageLimits::default() };
    let board = board_with(dir.path(), DoorLimits::default(), pages).await;
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let signed_in = http
        .post(format!("{}/signin", board.url()))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("member=alice")
        .send()
        .await
        .unwrap();
    let cookie = signed_in.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
    let (served, refused) = open_many(board.addr(), "/projects/team/live", Some(&cookie), 40).await;
    assert_eq!(served.len(), 8);
    assert_eq!(refused.len(), 32);
    assert_refused_for_the_cap(&refused, 8);
    let page = http.get(format!("{}/projects/team", board.url())).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(page.status(), 200, "the page itself is served at the cap");
    drop(served);
    eventually(PATIENCE, "a board stream served again", || async {
        open_live(board.addr(), "/projects/team/live", Some(&cookie)).await.ok()
    })
    .await;
}

/// A client that follows no redirect, so each answer is seen as sent.
fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

/// A form post of `body` to `url`, from `origin` when given, with `cookie` when given.
async fn post_form(
    http: &reqwest::Client,
    url: &str,
    body: &str,
    origin: Option<&str>,
    cookie: Option<&str>,
) -> reqwest::Response {
    let mut request = http.post(url).header("content-type", "application/x-www-form-urlencoded").body(body.to_string());
    if let Some(origin) = origin {
        request = request.header("origin", origin);
    }
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    request.send().await.unwrap()
}

/// The cookie a sign-in answer sets, as a `Cookie` header's value.
fn cookie_of(answer: &reqwest::Response) -> String {
    let set = answer.headers().get("set-cookie").expect("a cookie is set").to_str().unwrap();
    set.split(';').next().unwrap().to_string()
}

/// Anonymous sign-ins flood the board's page (`picogent board`, the binary, keeping at most 20
/// sessions): past 30 in a minute they get 429 with `Retry-After` and words saying what to do,
/// and make no session; the person who was signed in and uses their page stays signed in, and
/// the sessions that go are the ones used longest ago, one by one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sign_in_flood_signs_nobody_out() {
    let dir = tempfile::tempdir().unwrap();
    let addr = free_port();
    let log = std::fs::File::create(dir.path().join("board.log")).unwrap();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_picogent"))
        .args(["board", "--listen", &addr.to_string(), "--max-sessions", "20", "--sign-ins-per-minute", "30", "--db"])
        .arg(dir.path().join("board.db"))
        .args(["--seed", SEED])
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let _board = Killed(child);
    let base = format!("http://{addr}");
    eventually(PATIENCE, "the board listening", || async { TcpStream::connect(addr).await.ok() }).await;
    let http = no_redirects();
    let alice = cookie_of(&post_form(&http, &format!("{base}/signin"), "member=alice", None, None).await);
    let alice_sees_her_page = || async {
        let page = http.get(format!("{base}/projects/team")).header("cookie", &alice).send().await.unwrap();
        page.status() == 200
    };

    let (mut flood_sessions, mut refusals) = (Vec::new(), Vec::new());
    for _round in 0..40 {
        for _ in 0..5 {
            let answer = post_form(&http, &format!("{base}/signin"), "member=bob", None, None).await;
            match answer.status().as_u16() {
                303 => flood_sessions.push(cookie_of(&answer)),
                429 => {
                    assert!(answer.headers().get("set-cookie").is_none(), "a refused sign-in makes no session");
                    let retry_after = answer.headers().get("retry-after").map(|v| v.to_str().unwrap().to_string());
                    refusals.push((retry_after, answer.text().await.unwrap()));
                }
                other => panic!("a sign-in answered {other}"),
            }
        }
        assert!(alice_sees_her_page().await, "alice stays signed in through the flood");
    }
    // Alice's own sign-in was one of the minute's 30 (more only if this took over a minute).
    assert!((29..=58).contains(&flood_sessions.len()), "sign-ins let through: {}", flood_sessions.len());
    assert_eq!(refusals.len(), 200 - flood_sessions.len());
    for (retry_after, page) in &refusals {
        let seconds: u64 = retry_after.as_deref().expect("Retry-After").parse().unwrap();
        assert!((1..=60).contains(&seconds), "{seconds}");
        for words in ["too many sign-ins", "at most 30 a minute", "whoever is signed in stays signed in"] {
            assert!(page.contains(words), "the refusal says {words:?}: {page}");
        }
    }
    // Past 20 kept, the sessions used longest ago went, one by one: the flood's first ones.
    let works = |cookie: String| {
        let http = &http;
        let base = &base;
        async move {
            let page = http.get(format!("{base}/projects/team")).header("cookie", cookie).send().await.unwrap();
            page.status() == 200
        }
    };
    assert!(!works(flood_sessions[0].clone()).await, "the oldest flood session was put out");
    assert!(works(flood_sessions.last().unwrap().clone()).await, "the newest is kept");
    assert!(alice_sees_her_page().await);
}

/// Every form of the board's page and the inspector's token form and sign-out, posted by another
/// site's page (a foreign `Origin`), get an empty 403 and change nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_form_post_from_another_origin_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let board = board_with(dir.path(), DoorLimits::default(), PageLimits::default()).await;
    let http = no_redirects();
    let base = board.url();
    let cookie = cookie_of(&post_form(&http, &format!("{base}/signin"), "member=alice", None, None).await);
    let alice = client(&board, "tok-alice");
    let task = picogent::tracker::model::CreateTask {
        project_slug: "team".into(),
        title: "a real task".into(),
        ..Default::default()
    };
    let task = alice.create_task(&task, None).await.unwrap();
    let before = (alice.get_task(&task.id).await.unwrap(), comments(&alice, &task.id).await.len());
    let forms = [
        ("/signin", "member=bob"),
        ("/signout", ""),
        ("/projects/team/tasks", "title=planted"),
        ("/projects/team/chat", "content=planted"),
        (&format!("/tasks/{}/assign", task.key), "assignee=bob"),
        (&format!("/tasks/{}/comments", task.key), "content=planted"),
    ];
    for (path, body) in forms {
        let answer = post_form(&http, &format!("{base}{path}"), body, Some("http://evil.example"), Some(&cookie)).await;
        assert_eq!(answer.status(), 403, "POST {path} from another origin");
        assert!(answer.headers().get("set-cookie").is_none(), "POST {path}");
        assert_eq!(answer.text().await.unwrap(), "", "POST {path}: nothing else");
    }
    let after = (alice.get_task(&task.id).await.unwrap(), comments(&alice, &task.id).await.len());
    assert_eq!(after.0.assignee_slug, before.0.assignee_slug);
    assert_eq!(after.1, before.1, "no comment landed");
    let page = http.get(format!("{base}/projects/team")).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(page.status(), 200, "the foreign sign-out ended nothing");
    assert!(!page.text().await.unwrap().contains("planted"), "no task was planted");
    let chat = chat_id(&alice).await;
    let messages = alice
        .list_messages(&picogent::tracker::model::MessageQuery { chat_id: Some(chat), ..Default::default() })
        .await
        .unwrap();
    assert!(messages.iter().all(|m| !m.content.contains("planted")), "no chat message landed");
}

/// The inspector off loopback (`http.ui_token_env`'s token): a session of its token form ends
/// at its sign-out (on the server: its cookie, replayed, opens nothing) and after
/// `http.session_lifetime_ms`, however used; a foreign `Origin` can neither sign in nor out;
/// and guesses at the token are capped per minute with 429.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspector_sessions_end_at_sign_out_and_when_too_old() {
    const UI_TOKEN: &str = "ui-token-4b7e";
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let http_section = json!({"http": {"listen": "0.0.0.0:0", "session_lifetime_ms": 3000}});
    let config = agent_config(dir.path(), &board.url(), &model.url(), "picogent", http_section);
    let agent = picogent::runtime::start(picogent::runtime::AgentOptions {
        config,
        tracker_token: picogent::secret::Secret::new("tok-picogent"),
        llm_api_key: None,
        mcp_token: None,
        ui_token: Some(picogent::secret::Secret::new(UI_TOKEN)),
        stream: Some(fast_stream()),
        serve_http: true,
        clock: None,
    })
    .await
    .unwrap();
    let base = format!("http://127.0.0.1:{}", agent.http_addr.unwrap().port());
    let http = no_redirects();
    let runs = |cookie: String| {
        let (http, base) = (&http, &base);
        async move { http.get(format!("{base}/runs")).header("cookie", cookie).send().await.unwrap() }
    };
    let login = |origin: Option<String>| {
        let (http, base) = (&http, &base);
        async move { post_form(http, &format!("{base}/login"), &format!("token={UI_TOKEN}"), origin.as_deref(), None).await }
    };

    // Another site's page cannot sign in, even with the token.
    let foreign = login(Some("http://evil.example".to_string())).await;
    assert_eq!(foreign.status(), 403);
    assert!(foreign.headers().get("set-cookie").is_none());
    // Signed in, the pages carry a sign-out button; another site cannot press it.
    let signed_in = login(Some(base.clone())).await;
    assert_eq!(signed_in.status(), 303);
    let cookie = cookie_of(&signed_in);
    let page = runs(cookie.clone()).await;
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains(r#"action="/logout""#), "a sign-out button");
    let foreign = post_form(&http, &format!("{base}/logout"), "", Some("http://evil.example"), Some(&cookie)).await;
    assert_eq!(foreign.status(), 403);
    assert_eq!(runs(cookie.clone()).await.status(), 200, "still signed in after another site's try");
    // Signing out clears the cookie and ends the session on the server.
    let out = post_form(&http, &format!("{base}/logout"), "", None, Some(&cookie)).await;
    assert_eq!(out.status(), 303);
    assert_eq!(out.headers()["location"], "/login");
    assert!(out.headers()["set-cookie"].to_str().unwrap().contains("Max-Age=0"), "the cookie is cleared");
    assert_eq!(runs(cookie).await.status(), 401, "the old cookie, replayed, opens nothing");

    // A session in use still ends once it is older than http.session_lifetime_ms.
    let cookie = cookie_of(&login(None).await);
    assert_eq!(runs(cookie.clone()).await.status(), 200);
    eventually(PATIENCE, "the session past its lifetime", || {
        let cookie = cookie.clone();
        let runs = &runs;
        async move { (runs(cookie).await.status() == 401).then_some(()) }
    })
    .await;

    // Guesses at the token: past 30 attempts in a minute (right or wrong), 429.
    let mut refused = None;
    for _ in 0..40 {
        let answer = post_form(&http, &format!("{base}/login"), "token=guess", None, None).await;
        match answer.status().as_u16() {
            401 => continue,
            429 => {
                refused = Some((answer.headers().get("retry-after").cloned(), answer.text().await.unwrap()));
                break;
            }
            other => panic!("a guess answered {other}"),
        }
    }
    let (retry_after, page) = refused.expect("guesses past the rate are refused");
    assert!(retry_after.is_some(), "with Retry-After");
    assert!(page.contains("too many sign-ins to this inspector"), "{page}");
    let right = login(None).await;
    assert_eq!(right.status(), 429, "the right token waits too: the rate counts attempts, not failures");
    agent.shutdown().await.unwrap();
    model.shutdown().await;
}
