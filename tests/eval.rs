//! `picogent eval` with the offline planner: every scenario passes, checked from the board, and
//! the scorecard (text and JSON) says so with its numbers.

use std::path::Path;
use std::time::Duration;

use picogent::config::LlmConfig;
use picogent::offline_model::OfflineModelOptions;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scenario_passes_with_the_offline_planner() {
    // Answers take 50 ms, as a fast hosted model's would: the stop scenario's comment then
    // reaches a run under way, as it does with any real model.
    let options = OfflineModelOptions { delay: Duration::from_millis(50), ..OfflineModelOptions::planner() };
    let model = picogent::offline_model::start(options).await.unwrap();
    let prompts = Path::new(env!("CARGO_MANIFEST_DIR")).join("prompts");
    let llm = LlmConfig::new(model.url(), "offline-planner");
    let card = picogent::eval::evaluate(llm, None, Some(prompts), Duration::from_secs(60)).await.unwrap();
    let text = card.render();
    assert_eq!(card.passed, card.scenarios.len(), "{text}");
    assert_eq!(card.scenarios.len(), 6, "{text}");
    // A run stopped at once may end before its first model request.
    let ran = card.scenarios.iter().filter(|s| s.name != "stop_command");
    assert!(ran.clone().all(|s| s.turns > 0 && s.tokens > 0), "every other scenario ran the model: {text}");
    let stop = card.scenarios.iter().find(|s| s.name == "stop_command").unwrap();
    assert!(stop.reason.starts_with("stopped, one notice"), "{text}");
    assert!(text.contains("total: 6 of 6 passed"), "{text}");
    assert!(card.tokens > 0 && card.tool_calls > 0);
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
    assert_eq!(card["suite"], "2");
}
