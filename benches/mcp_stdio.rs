//! MCP over stdio, whole processes side by side: `tools/list` and one `tools/call` round trip,
//! timed one by one from this driver (plain blocking pipes, newline-delimited JSON-RPC as the
//! MCP stdio transport defines it). The servers run at the same time and take turns in blocks of
//! 100 round trips, the order rotating every block, so load from elsewhere hits all alike.
//!
//! Configured by `BENCH_MCP_SERVERS`, a JSON array of
//! `{"name", "command": [program, args...], "cwd"?, "env"?, "tool", "arguments"}`, and writes
//! `BENCH_MCP_OUT` (JSON). `BENCH_MCP_COUNT` sets the round trips per operation (default 1000).
//! Run by `bench/run.sh` as `cargo bench --bench mcp_stdio`.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use common::{micros, summarize};
use serde::Deserialize;
use serde_json::{Value, json};

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
        let mut server = Server { spec, child, stdin, stdout, next_id: 1, list: Vec::new(), call: Vec::new() };
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

    /// Sends one request and reads lines until its answer (skipping notifications).
    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
        let mut buffer = String::new();
        loop {
            buffer.clear();
            let n = self.stdout.read_line(&mut buffer).unwrap();
            assert!(n > 0, "{} closed its stdout", self.spec.name);
            let Ok(message) = serde_json::from_str::<Value>(buffer.trim()) else { continue };
            if message.get("id").and_then(Value::as_u64) == Some(id) {
                return message;
            }
        }
    }

    fn list_once(&mut self) -> Duration {
        let started = Instant::now();
        let answer = self.request("tools/list", json!({}));
        let elapsed = started.elapsed();
        assert!(answer["result"]["tools"].is_array(), "{}: bad tools/list answer: {answer}", self.spec.name);
        elapsed
    }

    fn call_once(&mut self) -> Duration {
        let params = json!({"name": self.spec.tool, "arguments": self.spec.arguments});
        let started = Instant::now();
        let answer = self.request("tools/call", params);
        let elapsed = started.elapsed();
        let result = &answer["result"];
        assert!(
            result.is_object() && result["isError"] != json!(true),
            "{}: tools/call failed: {answer}",
            self.spec.name
        );
        elapsed
    }

    fn rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        line.split_whitespace().nth(1)?.parse().ok()
    }
}

fn main() {
    let specs: Vec<ServerSpec> =
        serde_json::from_str(&std::env::var("BENCH_MCP_SERVERS").expect("BENCH_MCP_SERVERS is set")).unwrap();
    let out = std::env::var("BENCH_MCP_OUT").expect("BENCH_MCP_OUT is set");
    let count: usize = std::env::var("BENCH_MCP_COUNT").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    let block = 100.min(count);
    let mut servers: Vec<Server> = specs.into_iter().map(Server::start).collect();
    for server in &mut servers {
        for _ in 0..50 {
            server.list_once();
            server.call_once();
        }
    }
    for block_index in 0..count.div_ceil(block) {
        let n = block.min(count - block_index * block);
        let len = servers.len();
        for offset in 0..len {
            let server = &mut servers[(block_index + offset) % len];
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
        let entry = json!({
            "tool": server.spec.tool,
            "tools_list_us": summarize(&server.list),
            "tools_call_us": summarize(&server.call),
            "rss_kib_after": rss,
        });
        eprintln!("{}: {entry}", server.spec.name);
        results.insert(server.spec.name.clone(), entry);
        drop(server.stdin);
        let _ = server.child.kill();
        let _ = server.child.wait();
    }
    std::fs::write(&out, serde_json::to_string_pretty(&Value::Object(results)).unwrap()).unwrap();
    eprintln!("wrote {out}");
}
