//! A failure of the model service in words: its cause, what to change, and the setting behind a
//! request parameter the server refused.

use picogent_llm::ModelFailure;
use picogent_llm::config::LlmConfig;

use crate::again::AskAgain;

/// What went wrong with the model service, for people.
pub(crate) fn model_failure_cause(failure: &ModelFailure) -> String {
    match failure {
        ModelFailure::Unreachable => "I could not finish: the model server cannot be reached.".to_string(),
        ModelFailure::Timeout => "I could not finish: the model server did not answer in time.".to_string(),
        ModelFailure::Unauthorized => "I could not finish: the model server refused my API key.".to_string(),
        ModelFailure::ModelNotFound => {
            "I could not finish: the model server does not know the configured model.".to_string()
        }
        ModelFailure::ParameterRefused { parameter } => {
            format!("I could not finish: the model server refused the request parameter `{parameter}`.")
        }
        ModelFailure::ToolsUnsupported => {
            "I could not finish: the configured model does not support tool calls.".to_string()
        }
        ModelFailure::ContextLength => {
            "I could not finish: the conversation no longer fits the model's context window.".to_string()
        }
        ModelFailure::RateLimited => "I could not finish: the model server kept rate limiting me.".to_string(),
        ModelFailure::ServerError => "I could not finish: the model server failed.".to_string(),
        ModelFailure::Rejected => "I could not finish: the model server refused the request.".to_string(),
    }
}

/// What to do about it, naming the setting to change and its value now.
pub(crate) fn model_failure_advice(failure: &ModelFailure, llm: &LlmConfig, ask: &AskAgain) -> String {
    match failure {
        ModelFailure::Unreachable => format!(
            "Check llm.base_url (now {}) and that the server is up; {} once it is back.",
            picogent_llm::probe::display_url(&llm.base_url),
            ask.retry()
        ),
        ModelFailure::Timeout => format!(
            "The server may be overloaded; {}, or raise llm.timeout_ms (now {}), or turn on llm.stream (now {}).",
            ask.retry(),
            llm.timeout_ms,
            llm.stream
        ),
        ModelFailure::Unauthorized => match &llm.api_key_env {
            Some(name) => format!(
                "Check the key in the environment variable named by llm.api_key_env (now {name}), then {}.",
                ask.again()
            ),
            None => format!(
                "Set llm.api_key_env (now unset, so no key is sent) to the variable holding the server's key, then {}.",
                ask.again()
            ),
        },
        ModelFailure::ModelNotFound => {
            format!("Check llm.model (now {}) against the server's models, then {}.", llm.model, ask.again())
        }
        ModelFailure::ParameterRefused { parameter } => format!(
            "Change the setting that sends it ({}) in agent.json, then {}.",
            setting_of(parameter, llm),
            ask.again()
        ),
        ModelFailure::ToolsUnsupported => format!(
            "Choose a model with tool calling in llm.model (now {}), or a tool-capable chat template on a local \
             server.",
            llm.model
        ),
        ModelFailure::ContextLength => format!(
            "Set llm.context_tokens (now {}) to the model's real context window (or use a model with a larger \
             one), then {}.",
            llm.context_tokens,
            ask.again()
        ),
        ModelFailure::RateLimited | ModelFailure::ServerError => format!(
            "The model endpoint may be down or overloaded (I tried {} times, llm.retry.max_attempts); {} once it \
             is back.",
            llm.retry.max_attempts,
            ask.retry()
        ),
        ModelFailure::Rejected => "Check the llm settings in agent.json (`picogent check` tests them).".to_string(),
    }
}

/// The agent.json setting behind a request parameter on `llm.api`'s format, what to set it to,
/// and its value now.
pub(crate) fn setting_of(parameter: &str, llm: &LlmConfig) -> String {
    use picogent_llm::config::Api;
    let now = |value: String| format!(" (now {value})");
    let parallel = || {
        format!(
            "llm.parallel_tool_calls: leave it unset{}",
            now(llm.parallel_tool_calls.map_or("unset".to_string(), |p| p.to_string()))
        )
    };
    match (llm.api, parameter) {
        (_, "temperature") => format!(
            "llm.temperature: leave it unset{}",
            now(llm.temperature.map_or("unset".to_string(), |t| t.to_string()))
        ),
        (Api::Openai, "parallel_tool_calls") => parallel(),
        // The Messages API sends `tool_choice` only to say `parallel_tool_calls: false`
        // (`disable_parallel_tool_use`).
        (Api::Anthropic, "tool_choice") => parallel(),
        (Api::Openai, "max_completion_tokens") => "llm.max_tokens_field: \"max_tokens\"".to_string(),
        (Api::Openai, "max_tokens") => "llm.max_tokens_field: \"max_completion_tokens\"".to_string(),
        // Always sent on the Messages API, whatever `llm.max_tokens_field` says; refused when it
        // is more than the model writes.
        (Api::Anthropic, "max_tokens") => format!(
            "llm.max_output_tokens: lower it to what the model allows{}",
            now(llm.max_output_tokens.unwrap_or(picogent_llm::config::DEFAULT_MAX_OUTPUT_TOKENS).to_string())
        ),
        (_, "stream") => format!("llm.stream: false{}", now(llm.stream.to_string())),
        (_, "tools" | "tool_choice") => format!("llm.model: a model with tool calling{}", now(llm.model.clone())),
        (_, "model") => format!("llm.model: a model the server serves{}", now(llm.model.clone())),
        _ => "the llm section".to_string(),
    }
}
