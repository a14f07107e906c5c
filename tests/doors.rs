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
