//! A one-shot check of the model endpoint for `picogent check`: `GET {base_url}/models`.

use std::time::Duration;

use crate::config::LlmConfig;
use crate::secret::Secret;

/// Asks the endpoint for its models; says whether the configured one is listed.
pub async fn probe(config: &LlmConfig, api_key: Option<Secret>) -> Result<String, String> {
    let base = config.base_url.trim_end_matches('/');
    let http = reqwest::Client::builder()
        .timeout(Duration::from_millis(config.timeout_ms.min(10_000)))
        .build()
        .map_err(|e| e.to_string())?;
    let mut request = http.get(format!("{base}/models"));
    if let Some(key) = &api_key {
        request = request.bearer_auth(key.expose());
    }
    let response = request
        .send()
        .await
        .map_err(|e| format!("cannot reach {base}: {} (is llm.base_url right, and the server up?)", e.without_url()))?;
    let status = response.status();
    if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
        return Err(format!("{base} refused the API key (HTTP {status}): check the variable named by llm.api_key_env"));
    }
    if !status.is_success() {
        return Err(format!("{base}/models answered HTTP {status}"));
    }
    let body: serde_json::Value = response.json().await.unwrap_or_default();
    let listed = body["data"]
        .as_array()
        .is_some_and(|models| models.iter().any(|m| m["id"].as_str() == Some(config.model.as_str())));
    Ok(if listed {
        format!("{base} serves {}", config.model)
    } else {
        format!("{base} answers (model {} not in its list; some servers list none)", config.model)
    })
}
