//! MCP over stdio, whole processes side by side: `tools/list` and one `tools/call` round trip,
//! timed one by one from this driver (plain blocking pipes, newline-delimited JSON-RPC as the
//! MCP stdio transport defines it). The servers run at the same time and take turns in blocks of
//! 100 round trips, the order rotating every block, so load from elsewhere hits all alike.
//!
//! The clock runs from writing the request to reading the line that carries its `id`; only that
//! envelope is decoded while it runs. The whole answer is parsed and checked after the clock
//! stops: a client's own parsing of a large answer (a DOM of 22 KB takes this driver ~280 µs) is
//! the client's cost, and timing it would charge a server for every tool it offers.
//!
//! Configured by `BENCH_MCP_SERVERS`, a JSON array of
//! `{"name", "command": [program, args...], "cwd"?, "env"?, "tool", "arguments"}`, and writes
//! `BENCH_MCP_OUT` (JSON). `BENCH_MCP_COUNT` sets the round trips per operation (default 1000).
//! `BENCH_MCP_BOARD` (`{"url", "path", "token"}`, optional) adds a bare HTTP GET of `path` over one
//! kept-alive connection, taking its turn in the same blocks: the floor under any server's
//! `tools/call` that reads the board.
//!
//! With `BENCH_MCP_BOARD` set, two floor servers take their turns too: this same binary, started
//! again with `BENCH_MCP_FLOOR`, answering `tools/call` with that board GET and nothing an MCP
//! library would add (see [`floor`]). `floor-std` uses blocking std I/O; `floor-tokio` uses
//! picogent's runtime and HTTP client (tokio's current-thread runtime on the pipes, reqwest).
//! They show how fast any stdio server doing that GET can be on this machine.
//! Run by `bench/run.sh` as `cargo bench --bench mcp_stdio`.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use common::{micros, summarize};
use serde::Deserialize;
use serde_json::{Value, json};

/// picogent's allocator, for the floor servers this binary also runs.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Deserialize)]
struct ServerSpec {
    name: String,
    command: Vec<String>,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    env: std::collections::BTreeMap<String, String>,
    tool: String,
    #[serde(default)]
    arguments: Value,
}

struct Server {
    spec: ServerSpec,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
    list: Vec<f64>,
    call: Vec<f64>,
    /// The last answers, for their sizes in the results.
    list_answer: Option<Value>,
    call_answer: Option<Value>,
}

/// All the timed part decodes of an answer: which request it answers.
#[derive(Deserialize)]
struct Envelope {
    #[serde(default)]
    id: Option<u64>,
}

/// A bare HTTP/1.1 GET over one kept-alive connection, the way a server's tool reads the board.
struct BoardGet {
    stream: BufReader<TcpStream>,
    request: Vec<u8>,
    get: Vec<f64>,
    body_bytes: usize,
}

#[derive(Debug, Deserialize)]
struct BoardSpec {
    url: String,
    path: String,
    token: String,
}

impl BoardGet {
    fn connect(spec: &BoardSpec) -> BoardGet {
        let host = spec.url.trim_start_matches("http://").trim_end_matches('/');
        let stream = TcpStream::connect(host).unwrap_or_else(|e| panic!("cannot connect to the board at {host}: {e}"));
        stream.set_nodelay(true).unwrap();
        let request = format!(
            "GET {} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {}\r\nAccept: application/json\r\n\r\n",
            spec.path, spec.token
        );
        BoardGet { stream: BufReader::new(stream), request: request.into_bytes(), get: Vec::new(), body_bytes: 0 }
    }

    /// One GET: time from writing the request to having the whole body.
    fn get_once(&mut self) -> Duration {
        let started = Instant::now();
        let body = self.get();
        let elapsed = started.elapsed();
        self.body_bytes = body.len();
        elapsed
    }

    /// One GET: the body of a 200 answer.
    fn get(&mut self) -> Vec<u8> {
        self.stream.get_mut().write_all(&self.request).unwrap();
        let mut line = String::new();
        let mut content_length = None;
        let mut status = None;
        loop {
            line.clear();
            let n = self.stream.read_line(&mut line).unwrap();
            assert!(n > 0, "the board closed the connection");
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if status.is_none() {
                status = header.split_whitespace().nth(1).map(str::to_string);
            } else if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                content_length = value.trim().parse::<usize>().ok();
            }
        }
        let length = content_length.expect("the board answers with a Content-Length");
        let mut body = vec![0; length];
        self.stream.read_exact(&mut body).unwrap();
        assert_eq!(status.as_deref(), Some("200"), "the board refused the GET: {}", String::from_utf8_lossy(&body));
        body
    }
}

impl Server {
    fn start(spec: ServerSpec) -> Server {
        let (program, args) = spec.command.split_first().expect("a command");
        let mut command = Command::new(program);
        command.args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null());
        if let Some(cwd) = &spec.cwd {
            command.current_dir(cwd);
        }
        command.envs(&spec.env);
        let mut child = command.spawn().unwrap_or_else(|e| panic!("cannot start {}: {e}", spec.name));
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut server = Server {
            spec,
            child,
            stdin,
            stdout,
            next_id: 1,
            list: Vec::new(),
            call: Vec::new(),
            list_answer: None,
            call_answer: None,
        };
        let started = Instant::now();
        let answer = server.request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "picogent-bench", "version": "0.1.0"}}),
        );
        assert!(answer.get("result").is_some(), "{} refused initialize: {answer}", server.spec.name);
        server.notify("notifications/initialized");
        eprintln!("{}: initialized in {:?}", server.spec.name, started.elapsed());
        server
    }

    fn notify(&mut self, method: &str) {
        let line = json!({"jsonrpc": "2.0", "method": method}).to_string();
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Sends one request and parses its answer, untimed (set-up).
    fn request(&mut self, method: &str, params: Value) -> Value {
        let (_, answer) = self.round_trip(method, params);
        serde_json::from_str(&answer).unwrap()
    }

    /// Sends one request and reads lines until its answer (skipping notifications); answers the
    /// time from writing to having the answer's line, and that line.
    fn round_trip(&mut self, method: &str, params: Value) -> (Duration, String) {
        let id = self.next_id;
        self.next_id += 1;
        let mut line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        line.push('\n');
        let mut buffer = String::with_capacity(64 * 1024);
        let started = Instant::now();
        self.stdin.write_all(line.as_bytes()).unwrap();
        self.stdin.flush().unwrap();
        loop {
            buffer.clear();
            let n = self.stdout.read_line(&mut buffer).unwrap();
            assert!(n > 0, "{} closed its stdout", self.spec.name);
            let Ok(envelope) = serde_json::from_str::<Envelope>(buffer.trim()) else { continue };
            if envelope.id == Some(id) {
                return (started.elapsed(), buffer);
            }
        }
    }

    fn list_once(&mut self) -> Duration {
        let (elapsed, answer) = self.round_trip("tools/list", json!({}));
        let answer: Value = serde_json::from_str(&answer).unwrap();
        assert!(answer["result"]["tools"].is_array(), "{}: bad tools/list answer: {answer}", self.spec.name);
        self.list_answer = Some(answer);
        elapsed
    }

    fn call_once(&mut self) -> Duration {
        let params = json!({"name": self.spec.tool, "arguments": self.spec.arguments});
        let (elapsed, answer) = self.round_trip("tools/call", params);
        let answer: Value = serde_json::from_str(&answer).unwrap();
        let result = &answer["result"];
        assert!(
            result.is_object() && result["isError"] != json!(true),
            "{}: tools/call failed: {answer}",
            self.spec.name
        );
        self.call_answer = Some(answer);
        elapsed
    }

    fn rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        line.split_whitespace().nth(1)?.parse().ok()
    }
}

fn main() {
    if let Ok(kind) = std::env::var("BENCH_MCP_FLOOR") {
        return floor::serve(&kind);
    }
    let mut specs: Vec<ServerSpec> =
        serde_json::from_str(&std::env::var("BENCH_MCP_SERVERS").expect("BENCH_MCP_SERVERS is set")).unwrap();
    let out = std::env::var("BENCH_MCP_OUT").expect("BENCH_MCP_OUT is set");
    let count: usize = std::env::var("BENCH_MCP_COUNT").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    let board_spec: Option<BoardSpec> =
        std::env::var("BENCH_MCP_BOARD").ok().map(|spec| serde_json::from_str(&spec).expect("BENCH_MCP_BOARD"));
    if board_spec.is_some() {
        specs.extend(floor::specs());
    }
    let block = 100.min(count);
    let mut servers: Vec<Server> = specs.into_iter().map(Server::start).collect();
    let mut board = board_spec.as_ref().map(BoardGet::connect);
    for server in &mut servers {
        for _ in 0..50 {
            server.list_once();
            server.call_once();
        }
    }
    if let Some(board) = &mut board {
        for _ in 0..50 {
            board.get_once();
        }
    }
    // The board's GET takes its turn after the servers, as one more participant.
    let participants = servers.len() + usize::from(board.is_some());
    for block_index in 0..count.div_ceil(block) {
        let n = block.min(count - block_index * block);
        for offset in 0..participants {
            let turn = (block_index + offset) % participants;
            let Some(server) = servers.get_mut(turn) else {
                let board = board.as_mut().expect("the board is the last participant");
                for _ in 0..n {
                    let get = board.get_once();
                    board.get.push(micros(get));
                }
                continue;
            };
            for _ in 0..n {
                let list = server.list_once();
                server.list.push(micros(list));
            }
            for _ in 0..n {
                let call = server.call_once();
                server.call.push(micros(call));
            }
        }
    }
    let mut results = serde_json::Map::new();
    for mut server in servers {
        let rss = server.rss_kib();
        let bytes = |answer: &Option<Value>| answer.as_ref().map(|answer| answer.to_string().len());
        let n_tools = server.list_answer.as_ref().and_then(|answer| answer["result"]["tools"].as_array()).map(Vec::len);
        let entry = json!({
            "tool": server.spec.tool,
            "tools_list_us": summarize(&server.list),
            "tools_call_us": summarize(&server.call),
            "tools_listed": n_tools,
            "list_answer_bytes": bytes(&server.list_answer),
            "call_answer_bytes": bytes(&server.call_answer),
            "rss_kib_after": rss,
        });
        eprintln!("{}: {entry}", server.spec.name);
        results.insert(server.spec.name.clone(), entry);
        drop(server.stdin);
        let _ = server.child.kill();
        let _ = server.child.wait();
    }
    if let (Some(board), Some(spec)) = (board, board_spec) {
        let entry = json!({"path": spec.path, "get_us": summarize(&board.get), "body_bytes": board.body_bytes});
        eprintln!("board GET: {entry}");
        results.insert("board-get".to_string(), entry);
    }
    std::fs::write(&out, serde_json::to_string_pretty(&Value::Object(results)).unwrap()).unwrap();
    eprintln!("wrote {out}");
}

/// The floor servers: the least a stdio server must do to answer `get_task` from the board. Each
/// line is parsed (id and method, with serde_json), `tools/call` makes the board GET of
/// `BENCH_MCP_BOARD` and answers its body as text, and the answer is written as one line. Nothing
/// else: no MCP library, no argument validation, no result formatting, no retries, no timeouts.
mod floor {
    use super::*;

    /// The floor servers as participants, started from this same binary.
    pub(crate) fn specs() -> Vec<ServerSpec> {
        let exe = std::env::current_exe().expect("the bench binary's path");
        ["std", "tokio"]
            .into_iter()
            .map(|kind| ServerSpec {
                name: format!("floor-{kind}"),
                command: vec![exe.to_string_lossy().into_owned()],
                cwd: None,
                env: [("BENCH_MCP_FLOOR".to_string(), kind.to_string())].into(),
                tool: "get_task".to_string(),
                arguments: json!({}),
            })
            .collect()
    }

    #[derive(Deserialize)]
    struct Request {
        #[serde(default)]
        id: Option<Value>,
        method: String,
    }

    /// A request's id and method; `None` for a notification.
    fn parse(line: &str) -> Option<(Value, String)> {
        let request: Request = serde_json::from_str(line).expect("a JSON-RPC line");
        Some((request.id?, request.method))
    }

    /// The answer line to a request; `body` is the board's answer to a `tools/call`'s GET. The
    /// `tools/call` answer is written straight, with serde_json escaping the id and the text.
    fn answer(id: Value, method: &str, body: Option<Vec<u8>>) -> Vec<u8> {
        let result = match method {
            "initialize" => json!({"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                                   "serverInfo": {"name": "floor", "version": "0"}}),
            "tools/list" => json!({"tools": [{"name": "get_task", "description": "One task.",
                                   "inputSchema": {"type": "object", "properties": {"task_id": {"type": "string"}}}}]}),
            "tools/call" => {
                let body = String::from_utf8(body.expect("the GET's body")).expect("the board answers UTF-8");
                let mut line = Vec::with_capacity(body.len() + 128);
                line.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
                serde_json::to_writer(&mut line, &id).unwrap();
                line.extend_from_slice(b",\"result\":{\"content\":[{\"type\":\"text\",\"text\":");
                serde_json::to_writer(&mut line, &body).unwrap();
                line.extend_from_slice(b"}],\"isError\":false}}\n");
                return line;
            }
            other => panic!("the floor server has no {other}"),
        };
        let mut line = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "result": result})).unwrap();
        line.push(b'\n');
        line
    }

    pub(crate) fn serve(kind: &str) {
        let spec: BoardSpec =
            serde_json::from_str(&std::env::var("BENCH_MCP_BOARD").expect("BENCH_MCP_BOARD is set")).unwrap();
        match kind {
            "std" => serve_std(&spec),
            "tokio" => serve_tokio(&spec),
            other => panic!("BENCH_MCP_FLOOR is std or tokio, not {other}"),
        }
    }

    fn serve_std(spec: &BoardSpec) {
        let mut board = BoardGet::connect(spec);
        let mut stdout = std::io::stdout().lock();
        for line in std::io::stdin().lock().lines() {
            let Some((id, method)) = parse(&line.unwrap()) else { continue };
            let body = (method == "tools/call").then(|| board.get());
            stdout.write_all(&answer(id, &method, body)).unwrap();
            stdout.flush().unwrap();
        }
    }

    /// On the pipes as `picogent mcp --stdio` opens them (`rmcp::transport::stdio_pipes`:
    /// non-blocking, on tokio's reactor), one thread, reqwest with one kept-alive connection:
    /// picogent's I/O stack without the rest.
    fn serve_tokio(spec: &BoardSpec) {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let (stdin, mut stdout) = rmcp::transport::stdio_pipes();
            let mut lines = tokio::io::BufReader::new(stdin).lines();
            let client = reqwest::Client::new();
            let url: reqwest::Url =
                format!("{}{}", spec.url.trim_end_matches('/'), spec.path).parse().expect("the board's URL");
            while let Some(line) = lines.next_line().await.unwrap() {
                let Some((id, method)) = parse(&line) else { continue };
                let mut body = None;
                if method == "tools/call" {
                    let response = client.get(url.clone()).bearer_auth(&spec.token).send().await.unwrap();
                    assert_eq!(response.status(), 200, "the board refused the GET");
                    body = Some(response.bytes().await.unwrap().to_vec());
                }
                stdout.write_all(&answer(id, &method, body)).await.unwrap();
                stdout.flush().await.unwrap();
            }
        });
    }
}
