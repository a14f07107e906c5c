//! The README's llama.cpp worked example, run as it is written: the command lines of its marked
//! `sh` blocks from the root of the clone (the install script, then `llama-server` with the
//! `.interop/` paths the README names), the marked `llm` section as the `llm` of an agent.json, and
//! `picogent check` and `picogent run` with it against the reference board, read as the README
//! says they read. The marked Anthropic `llm` section is read as the `llm` of an agent.json too
//! (no server needed).
//!
//! The blocks are found by the HTML comment before each (`<!-- readme-example: NAME -->`). One
//! thing is changed, in one way: the README's port `8080` becomes a free port, in the command
//! lines and the `llm` section alike, so the test never meets another server on 8080.

#[path = "support/agent.rs"]
mod agent_support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use agent_support::*;
use picogent::state::State;
use serde_json::{Value, json};

const README_PORT: &str = "8080";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The body of the fenced block right after `<!-- readme-example: name -->`, and its language.
fn block(readme: &str, name: &str) -> (String, String) {
    let marker = format!("<!-- readme-example: {name} -->");
    assert_eq!(readme.matches(&marker).count(), 1, "README.md has {marker} once");
    let (_, after) = readme.split_once(&marker).unwrap();
    let after = after.trim_start();
    assert!(after.starts_with("```"), "a fenced block follows {marker}");
    let (fence, rest) = after.split_once('\n').unwrap();
    let (body, _) = rest.split_once("\n```").unwrap_or_else(|| panic!("the block after {marker} is not closed"));
    (fence.trim_start_matches('`').to_string(), body.to_string())
}

/// The command lines of an `sh` block, with `\` continuations joined.
fn command_lines(readme: &str, name: &str) -> Vec<String> {
    let (language, body) = block(readme, name);
    assert_eq!(language, "sh", "{name}");
    let mut lines = Vec::new();
    let mut current = String::new();
    for line in body.lines() {
        match line.trim_end().strip_suffix('\\') {
            Some(start) => current.push_str(start),
            None => {
                current.push_str(line);
                let command = std::mem::take(&mut current);
                if !command.trim().is_empty() && !command.trim_start().starts_with('#') {
                    lines.push(command.split_whitespace().collect::<Vec<_>>().join(" "));
                }
            }
        }
    }
    lines
}

/// `text` with the README's port replaced by `port`; it must be there to replace.
fn on_port(text: &str, port: u16) -> String {
    assert!(text.contains(&format!(":{README_PORT}")) || text.contains(&format!("--port {README_PORT}")), "{text}");
    text.replace(README_PORT, &port.to_string())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A command line of the README started from the clone's root with bash; killed when dropped.
struct Server {
    child: Child,
    log: PathBuf,
}

impl Server {
    async fn start(command: &str, port: u16, dir: &Path) -> Server {
        let log = dir.join(format!("llama-server-{port}.log"));
        let child = Command::new("bash")
            .arg("-c")
            .arg(format!("exec {command}"))
            .current_dir(root())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let server = std::sync::Mutex::new(Server { child, log });
        let http = reqwest::Client::new();
        eventually(Duration::from_secs(60), "llama-server answers /health", || async {
            {
                let mut server = server.lock().unwrap();
                if let Ok(Some(status)) = server.child.try_wait() {
                    let log = std::fs::read_to_string(&server.log).unwrap_or_default();
                    panic!("`{command}` exited with {status}:\n{log}");
                }
            }
            let response = http.get(format!("http://127.0.0.1:{port}/health")).send().await.ok()?;
            response.status().is_success().then_some(())
        })
        .await;
        server.into_inner().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An agent.json for the board whose `llm` is the README's section, as it is written.
fn config_with(dir: &Path, board: &str, llm: &Value) -> PathBuf {
    let config = agent_config(dir, board, "http://127.0.0.1:1/v1", "picogent", json!({}));
    let mut config = serde_json::to_value(&config).unwrap();
    config["llm"] = llm.clone();
    let path = dir.join("agent.json");
    std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
    path
}

fn report_line<'a>(report: &'a str, what: &str) -> &'a str {
    report
        .lines()
        .find(|l| l.get(4..).unwrap_or_default().trim_start().starts_with(what))
        .unwrap_or_else(|| panic!("no {what} line:\n{report}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_llama_cpp_worked_example_runs_as_written() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let dir = tempfile::tempdir().unwrap();

    // The install line, as written, from the clone's root; then the server line.
    let lines = command_lines(&readme, "llama-server");
    let (server_line, setup): (Vec<&String>, Vec<&String>) =
        lines.iter().partition(|line| line.starts_with(".interop/llama-server"));
    let [server_line] = server_line.as_slice() else { panic!("one llama-server line: {lines:#?}") };
    assert_eq!(setup, [&"bash tests/interop/install_llama.sh".to_string()], "{lines:#?}");
    for line in setup {
        let output = Command::new("bash").arg("-c").arg(line).current_dir(root()).output().unwrap();
        assert!(output.status.success(), "`{line}` failed:\n{}", String::from_utf8_lossy(&output.stderr));
    }
    for linked in [
        ".interop/llama-server",
        ".interop/gemma3-270m.gguf",
        ".interop/llama-templates/Qwen-Qwen2.5-7B-Instruct.jinja",
    ] {
        assert!(root().join(linked).exists(), "the install made {linked}, which the README names");
    }
    let port = free_port();
    let server = Server::start(&on_port(server_line, port), port, dir.path()).await;

    // The `llm` section as written.
    let (language, snippet) = block(&readme, "llm");
    assert_eq!(language, "json");
    let section: Value = serde_json::from_str(&format!("{{{}}}", on_port(&snippet, port))).unwrap();
    let llm = &section["llm"];
    assert_eq!(llm["max_output_tokens"], 256, "the README caps the output: {snippet}");
    let board = start_board(dir.path()).await;
    let config_path = config_with(dir.path(), &board.url(), llm);

    // `picogent check` reads as the README says: the model's own template drops the tools.
    let output = picogent_output(&["check"], &config_path).await;
    let report = String::from_utf8_lossy(&output.stdout).to_string();
    assert_eq!(output.status.code(), Some(1), "{report}");
    assert!(report_line(&report, "model endpoint").contains("serves gemma3-270m"), "{report}");
    let tools = report_line(&report, "server tools");
    assert!(tools.starts_with("FAIL") && tools.contains("its chat template does not take tools"), "{report}");
    assert!(!tools.contains("--jinja"), "the server runs with --jinja already: {report}");
    assert!(report_line(&report, "server context").starts_with("ok"), "{report}");
    assert!(report_line(&report, "model tool call").starts_with("FAIL"), "{report}");
    for what in ["config", "prompts", "state", "tracker REST", "tracker events"] {
        assert!(report_line(&report, what).starts_with("ok"), "{what}: {report}");
    }

    // `picogent run` with it: a person's mention gets one post in its thread, from answers no
    // longer than the cap.
    let mut agent = spawn_agent_process(&config_path);
    let alice = client(&board, "tok-alice");
    let question = say(&alice, &chat_id(&alice).await, "@picogent what is open on the board?").await;
    let posts = eventually(Duration::from_secs(300), "the agent's post in the thread", || async {
        let posts: Vec<_> =
            thread(&alice, &question.id).await.into_iter().filter(|m| m.author_slug == "picogent").collect();
        (!posts.is_empty()).then_some(posts)
    })
    .await;
    assert!(!posts[0].content.trim().is_empty());
    let stopped = Command::new("kill").arg("-TERM").arg(agent.id().to_string()).status().unwrap();
    assert!(stopped.success());
    let status = tokio::task::spawn_blocking(move || agent.wait().unwrap()).await.unwrap();
    assert!(status.success(), "{status:?}");
    let posts: Vec<_> =
        thread(&alice, &question.id).await.into_iter().filter(|m| m.author_slug == "picogent").collect();
    assert_eq!(posts.len(), 1, "one post, nothing twice: {posts:#?}");
    let config = picogent::config::Config::load_with_env(&config_path, []).unwrap();
    let state = State::open(&config.state.path).await.unwrap();
    let runs = state.list_runs(10).await.unwrap();
    assert_eq!(runs.len(), 1, "{runs:#?}");
    assert!(runs[0].turns >= 1 && runs[0].completion_tokens <= 256 * u64::from(runs[0].turns), "{runs:#?}");
    state.close().await;
    drop(server);

    // Started again with the tool-capable template the README names, the server takes tools.
    let lines = command_lines(&readme, "llama-server-tools");
    let [tools_line] = lines.as_slice() else { panic!("one command line: {lines:#?}") };
    assert!(tools_line.contains("--chat-template-file .interop/llama-templates/Qwen-Qwen2.5-7B-Instruct.jinja"));
    let port = free_port();
    let _server = Server::start(&on_port(tools_line, port), port, dir.path()).await;
    let section: Value = serde_json::from_str(&format!("{{{}}}", on_port(&snippet, port))).unwrap();
    let config_path = config_with(dir.path(), &board.url(), &section["llm"]);
    let output = picogent_output(&["check"], &config_path).await;
    let report = String::from_utf8_lossy(&output.stdout).to_string();
    let tools = report_line(&report, "server tools");
    assert!(tools.starts_with("ok") && tools.contains("takes tools"), "{report}");
    board.shutdown().await.unwrap();
}

/// The README's Anthropic `llm` section, as it is written, is a valid `llm` of an agent.json:
/// the Messages API with its key's variable, prompt caching on by default, and the cache's rates
/// in the price.
#[test]
fn the_anthropic_example_is_a_valid_llm_section() {
    use picogent::config::{Api, LlmConfig};
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let (language, snippet) = block(&readme, "llm-anthropic");
    assert_eq!(language, "json");
    let section: Value = serde_json::from_str(&format!("{{{snippet}}}")).unwrap();
    let llm: LlmConfig = serde_json::from_value(section["llm"].clone()).unwrap();
    assert_eq!(llm.api, Api::Anthropic);
    assert_eq!(llm.base_url, "https://api.anthropic.com/v1");
    assert_eq!(llm.api_key_env.as_deref(), Some("ANTHROPIC_API_KEY"));
    assert!(llm.prompt_cache, "on by default");
    let price = llm.price.expect("a price");
    assert!(price.cache_read_per_million.is_some() && price.cache_write_per_million.is_some(), "{price:?}");
    // As the whole file's `llm`, through the loading and the checks `picogent run` does.
    let dir = tempfile::tempdir().unwrap();
    let path = config_with(dir.path(), "http://127.0.0.1:1", &section["llm"]);
    let config = picogent::config::Config::load_with_env(&path, []).unwrap();
    assert_eq!(config.llm, llm);
}
