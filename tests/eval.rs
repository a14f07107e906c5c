//! `picogent eval` with the offline planner: every scenario passes, checked from the board, and
//! the scorecard (text and JSON) says so with its numbers. A model whose runs fail scores nothing
//! for the notices they leave; the lines come as the scenarios end, and a time limit or Ctrl-C
//! ends the eval with the scorecard so far.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use picogent::config::LlmConfig;
use picogent::eval::EvalOptions;
use picogent::offline_model::OfflineModelOptions;
use tokio_util::sync::CancellationToken;

/// The suite on chat completions, then through the Messages API (`llm.api: "anthropic"`), which
/// the offline model answers at `/v1/messages`. One after the other: two suites at once, each
/// with its coding agent, load a 2-core machine more than the suite is about.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scenario_passes_with_the_offline_planner_on_both_apis() {
    every_scenario_passes(picogent::config::Api::Openai).await;
    every_scenario_passes(picogent::config::Api::Anthropic).await;
}

async fn every_scenario_passes(api: picogent::config::Api) {
    // Answers take 50 ms, as a fast hosted model's would: the stop scenario's comment then
    // reaches a run under way, as it does with any real model.
    let options = OfflineModelOptions { delay: Duration::from_millis(50), ..OfflineModelOptions::planner() };
    let model = picogent::offline_model::start(options).await.unwrap();
    let prompts = Path::new(env!("CARGO_MANIFEST_DIR")).join("prompts");
    let llm = LlmConfig { api, ..LlmConfig::new(model.url(), "offline-planner") };
    let options = EvalOptions {
        llm,
        api_key: None,
        prompts_dir: Some(prompts),
        timeout: Duration::from_secs(120),
        stop: CancellationToken::new(),
    };
    let mut seen = Vec::new();
    relay_is_picogent();
    let card = picogent::eval::evaluate(options, |score| seen.push(score.name)).await.unwrap();
    let text = card.render();
    assert_eq!(card.passed, card.scenarios.len(), "{text}");
    assert_eq!(card.scenarios.len(), 8, "{text}");
    // A run stopped at once may end before its first model request.
    let ran = card.scenarios.iter().filter(|s| s.name != "stop_command");
    assert!(ran.clone().all(|s| s.turns > 0 && s.tokens > 0), "every other scenario ran the model: {text}");
    let stop = card.scenarios.iter().find(|s| s.name == "stop_command").unwrap();
    assert!(stop.reason.starts_with("stopped, one notice"), "{text}");
    assert!(text.contains("total: 8 of 8 passed"), "{text}");
    let tree = card.scenarios.iter().find(|s| s.name == "breakdown_and_review").unwrap();
    assert!(tree.reason.contains("review rounds:") && tree.reason.contains(" 2"), "one part sent back once: {text}");
    assert!(card.all_passed() && card.not_played.is_empty() && card.cut_short.is_none(), "{text}");
    let names: Vec<&str> = card.scenarios.iter().map(|s| s.name).collect();
    assert_eq!(seen, names, "each score was handed on as its scenario ended, in order");
    assert!(card.tokens > 0 && card.tool_calls > 0);
    let endpoint = match api {
        picogent::config::Api::Openai => "/v1/chat/completions",
        picogent::config::Api::Anthropic => "/v1/messages",
    };
    let paths = model.request_paths();
    assert!(!paths.is_empty() && paths.iter().all(|path| path == endpoint), "{paths:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_prints_json_and_fails_when_a_scenario_fails() {
    // A model that answers everything in one sentence and calls no tool: the task scenarios fail
    // (no steps, no review), the questions pass, and the exit code says so.
    let script = picogent::offline_model::script::Script::from_json(
        &serde_json::json!({"turns": (0..40).map(|_| serde_json::json!({"reply": {"content": "Done."}})).collect::<Vec<_>>()})
            .to_string(),
    )
    .unwrap();
    let model = picogent::offline_model::start(OfflineModelOptions::script(script)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = serde_json::json!({
        "slug": "picogent", "name": "Picogent",
        "tracker": {"url": "http://127.0.0.1:1"},
        "llm": {"base_url": model.url(), "model": "says-done"},
        "prompts_dir": Path::new(env!("CARGO_MANIFEST_DIR")).join("prompts"),
    });
    let config_path = dir.path().join("agent.json");
    std::fs::write(&config_path, config.to_string()).unwrap();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_picogent"))
            .args(["eval", "--json", "--timeout-secs", "30", "--config"])
            .arg(&config_path)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", String::from_utf8_lossy(&output.stderr));
    let card: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let passed = |name: &str| {
        card["scenarios"].as_array().unwrap().iter().find(|s| s["name"] == name).unwrap()["passed"].as_bool().unwrap()
    };
    assert!(!passed("work_task"), "{card:#}");
    assert!(passed("answer_question"), "a plain-text answer is still posted: {card:#}");
    assert_eq!(card["model"], "says-done");
    assert_eq!(card["suite"], "5");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_notice_never_counts_as_an_answer() {
    // Every answer is cut off at the output limit: each run fails, and its one post in the thread
    // is the failure notice. The question and the follow-up each got one post, and score nothing.
    let cut_off = serde_json::json!({"reply": {"content": "The open tasks are", "finish_reason": "length"}});
    let script = picogent::offline_model::script::Script::from_json(
        &serde_json::json!({"turns": (0..60).map(|_| cut_off.clone()).collect::<Vec<_>>()}).to_string(),
    )
    .unwrap();
    let model = picogent::offline_model::start(OfflineModelOptions::script(script)).await.unwrap();
    let options = EvalOptions {
        llm: LlmConfig::new(model.url(), "cut-off"),
        api_key: None,
        prompts_dir: Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("prompts")),
        timeout: Duration::from_secs(120),
        stop: CancellationToken::new(),
    };
    relay_is_picogent();
    let card = picogent::eval::evaluate(options, |_| {}).await.unwrap();
    let text = card.render();
    for name in ["answer_question", "follow_up_in_thread", "work_task", "steering_comment"] {
        let score = card.scenarios.iter().find(|s| s.name == name).unwrap();
        assert!(!score.passed, "{name}: {text}");
    }
    for name in ["answer_question", "follow_up_in_thread"] {
        let score = card.scenarios.iter().find(|s| s.name == name).unwrap();
        // The thread held exactly one post by the agent (the count passed), and it was the notice.
        assert!(
            score.reason.contains("ended failed (cut_off)") && score.reason.contains("failure notice, not an answer"),
            "{name}: {text}"
        );
    }
    assert!(card.turns > 0, "the model was asked: {text}");
    model.shutdown().await;
}

/// A loopback proxy in front of the model that forwards every request but holds, unanswered,
/// those whose body contains `hold`: the eval then cannot get past that scenario.
struct HoldingProxy {
    url: String,
    held: Arc<tokio::sync::Notify>,
}

async fn holding_proxy(upstream: String, hold: &'static str) -> HoldingProxy {
    let held = Arc::new(tokio::sync::Notify::new());
    let app = axum::Router::new().fallback({
        let held = held.clone();
        move |uri: axum::http::Uri, body: axum::body::Bytes| {
            let (upstream, held) = (upstream.clone(), held.clone());
            async move {
                if String::from_utf8_lossy(&body).contains(hold) {
                    held.notify_one();
                    std::future::pending::<()>().await;
                }
                let url = format!("{}{}", upstream.trim_end_matches("/v1"), uri.path());
                let response = reqwest::Client::new()
                    .post(url)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await
                    .unwrap();
                let status = response.status().as_u16();
                let bytes = response.bytes().await.unwrap();
                axum::response::Response::builder()
                    .status(status)
                    .header("content-type", "application/json")
                    .body(axum::body::Body::from(bytes))
                    .unwrap()
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    HoldingProxy { url: format!("http://{addr}/v1"), held }
}

/// The planner behind a proxy that holds the question scenario's requests, and a config for it.
async fn eval_that_cannot_finish(dir: &Path) -> (picogent::offline_model::OfflineModelHandle, HoldingProxy, PathBuf) {
    let model = picogent::offline_model::start(OfflineModelOptions::planner()).await.unwrap();
    let proxy = holding_proxy(model.url(), "how many tasks are open").await;
    let config = serde_json::json!({
        "slug": "picogent", "name": "Picogent",
        "tracker": {"url": "http://127.0.0.1:1"},
        "llm": {"base_url": proxy.url, "model": "offline-planner"},
        "prompts_dir": Path::new(env!("CARGO_MANIFEST_DIR")).join("prompts"),
    });
    let config_path = dir.join("agent.json");
    std::fs::write(&config_path, config.to_string()).unwrap();
    (model, proxy, config_path)
}

fn spawn_eval(config_path: &Path, args: &[&str]) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_picogent"))
        .arg("eval")
        .args(args)
        .arg("--config")
        .arg(config_path)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_line_comes_as_its_scenario_ends_and_the_time_limit_ends_it_with_the_scorecard_so_far() {
    let dir = tempfile::tempdir().unwrap();
    let (model, _proxy, config_path) = eval_that_cannot_finish(dir.path()).await;
    let mut eval = spawn_eval(&config_path, &["--timeout-secs", "20"]);
    let stdout = eval.stdout.take().unwrap();
    let (lines_tx, lines) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)) {
            let _ = lines_tx.send(line.unwrap());
        }
    });
    let next = |lines: &std::sync::mpsc::Receiver<String>| lines.recv_timeout(Duration::from_secs(60)).unwrap();
    let lines = tokio::task::spawn_blocking(move || {
        assert!(next(&lines).starts_with("picogent eval (suite 5) of offline-planner"));
        let first = next(&lines);
        // The question is held until the time runs out: the eval is still going.
        assert!(eval.try_wait().unwrap().is_none(), "the line came before the end: {first}");
        let status = eval.wait().unwrap();
        let rest: Vec<String> = lines.iter().collect();
        (first, rest, status)
    });
    let (first, rest, status) = lines.await.unwrap();
    reader.join().unwrap();
    assert!(first.starts_with("pass work_task"), "{first}");
    assert_eq!(status.code(), Some(1), "{first}\n{rest:#?}");
    let [question, total] = rest.as_slice() else { panic!("two more lines expected: {rest:#?}") };
    assert!(question.starts_with("FAIL answer_question") && question.contains("time limit of 20 s"), "{question}");
    assert!(
        total.starts_with("total: 1 of 8 passed")
            && total.contains(
                "not played: follow_up_in_thread, steering_comment, stop_command, injection_attempt, coding_task, breakdown_and_review (the time limit of \
                 20 s (--timeout-secs) ran out)"
            ),
        "{total}"
    );
    model.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_ends_the_eval_with_the_scorecard_so_far_and_a_failing_exit() {
    let dir = tempfile::tempdir().unwrap();
    let (model, proxy, config_path) = eval_that_cannot_finish(dir.path()).await;
    let eval = spawn_eval(&config_path, &["--json", "--timeout-secs", "600"]);
    // The question's first request is held: work_task is over, the question under way.
    proxy.held.notified().await;
    let interrupted = std::process::Command::new("kill").arg("-INT").arg(eval.id().to_string()).status().unwrap();
    assert!(interrupted.success());
    let output = tokio::task::spawn_blocking(move || eval.wait_with_output().unwrap()).await.unwrap();
    assert_eq!(output.status.code(), Some(130));
    let card: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(card["cut_short"], "interrupted", "{card:#}");
    let played: Vec<&str> = card["scenarios"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(played, ["work_task"], "{card:#}");
    assert_eq!(card["scenarios"][0]["passed"], true, "{card:#}");
    assert_eq!(
        card["not_played"],
        serde_json::json!([
            "answer_question",
            "follow_up_in_thread",
            "steering_comment",
            "stop_command",
            "injection_attempt",
            "coding_task",
            "breakdown_and_review"
        ])
    );
    model.shutdown().await;
}

/// The eval's coding scenario runs its coding agent in the sandbox where bwrap is installed, as
/// `picogent eval` does; the relay inside is picogent's `sandbox-relay`, which this test process
/// is not.
fn relay_is_picogent() {
    picogent::workspace::sandbox::set_relay_program(std::path::PathBuf::from(env!("CARGO_BIN_EXE_picogent")));
}
