//! Script mode: replays a conversation from a fixture (`fixtures/llm/*.json`) turn by turn and
//! checks each request against what the turn expects. A mismatch is answered with HTTP 500 and a
//! clear message, and recorded so a test can assert there was none.
//!
//! Fixture shape:
//!
//! ```json
//! {
//!   "description": "what the script exercises",
//!   "turns": [
//!     {"expect": {"tools_include": ["get_task"]},
//!      "reply": {"tool_calls": [{"name": "get_task", "arguments": {"task_id": "TE-1"}}]}},
//!     {"fault": {"status": 429, "retry_after": 1}},
//!     {"expect": {"last_tool_result_contains": "TE-1", "last_tool_result_is_error": false},
//!      "reply": {"content": "done"}}
//!   ]
//! }
//! ```
//!
//! A turn has exactly one of `reply` (content, tool calls with `arguments` as JSON or
//! `raw_arguments` as text sent verbatim, refusal) or `fault` (an HTTP status, with `retry_after`
//! seconds, or an OpenAI error `code` and `message`, e.g. `context_length_exceeded`).

use std::path::Path;

use serde::Deserialize;

use picogent_llm::{Message, ToolSpec};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    #[serde(default)]
    pub description: String,
    pub turns: Vec<ScriptTurn>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptTurn {
    #[serde(default)]
    pub expect: Expect,
    #[serde(default)]
    pub reply: Option<ScriptReply>,
    #[serde(default)]
    pub fault: Option<ScriptFault>,
}

/// Checks on the request a turn answers. Every field is optional.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// These tools are offered.
    #[serde(default)]
    pub tools_include: Vec<String>,
    /// These tools are not offered.
    #[serde(default)]
    pub tools_exclude: Vec<String>,
    /// The last tool message contains this text.
    #[serde(default)]
    pub last_tool_result_contains: Option<String>,
    /// The last tool message is (or is not) an error result.
    #[serde(default)]
    pub last_tool_result_is_error: Option<bool>,
    /// Some message of the request contains this text.
    #[serde(default)]
    pub messages_contain: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptReply {
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub tool_calls: Vec<ScriptToolCall>,
    #[serde(default)]
    pub refusal: Option<String>,
    /// Sent as the answer's finish reason (`length`: as if cut off by the output limit).
    #[serde(default)]
    pub finish_reason: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptToolCall {
    pub name: String,
    /// The arguments as JSON; sent as its JSON text.
    #[serde(default)]
    pub arguments: Option<serde_json::Value>,
    /// The arguments text sent verbatim, for malformed-JSON cases.
    #[serde(default)]
    pub raw_arguments: Option<String>,
}

impl ScriptToolCall {
    pub fn arguments_text(&self) -> String {
        match (&self.raw_arguments, &self.arguments) {
            (Some(raw), _) => raw.clone(),
            (None, Some(arguments)) => arguments.to_string(),
            (None, None) => "{}".to_string(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptFault {
    pub status: u16,
    /// Seconds, sent as `Retry-After`.
    #[serde(default)]
    pub retry_after: Option<u64>,
    /// The OpenAI error `code`, e.g. `context_length_exceeded`.
    #[serde(default)]
    pub code: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    #[error("cannot read script {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("script {path} is not valid: {message}")]
    Invalid { path: String, message: String },
}

impl Script {
    pub fn from_file(path: &Path) -> Result<Script, ScriptError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ScriptError::Read { path: path.display().to_string(), source })?;
        Script::from_json(&text).map_err(|e| match e {
            ScriptError::Invalid { message, .. } => ScriptError::Invalid { path: path.display().to_string(), message },
            other => other,
        })
    }

    pub fn from_json(text: &str) -> Result<Script, ScriptError> {
        let invalid = |message: String| ScriptError::Invalid { path: "<inline>".to_string(), message };
        let script: Script = serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
        for (index, turn) in script.turns.iter().enumerate() {
            if turn.reply.is_some() == turn.fault.is_some() {
                return Err(invalid(format!("turn {}: expected exactly one of `reply` or `fault`", index + 1)));
            }
        }
        Ok(script)
    }
}

/// What the request fails to meet, one sentence per check; empty when it matches.
pub fn check(expect: &Expect, messages: &[Message], tools: &[ToolSpec]) -> Vec<String> {
    let mut problems = Vec::new();
    let offered = |name: &str| tools.iter().any(|tool| tool.name == name);
    for name in &expect.tools_include {
        if !offered(name) {
            problems.push(format!("tool `{name}` was expected among the offered tools but is missing"));
        }
    }
    for name in &expect.tools_exclude {
        if offered(name) {
            problems.push(format!("tool `{name}` was offered but should not be"));
        }
    }
    let last_tool = messages.iter().rev().find_map(|m| match m {
        Message::Tool { content, is_error, .. } => Some((content.as_str(), *is_error)),
        _ => None,
    });
    if let Some(needle) = &expect.last_tool_result_contains {
        match last_tool {
            Some((content, _)) if content.contains(needle.as_str()) => {}
            Some((content, _)) => problems.push(format!(
                "the last tool result should contain {needle:?} but is {:?}",
                content.chars().take(300).collect::<String>()
            )),
            None => problems.push(format!("a tool result containing {needle:?} was expected, but there is none")),
        }
    }
    if let Some(expected) = expect.last_tool_result_is_error {
        match last_tool {
            Some((_, is_error)) if is_error == expected => {}
            Some((content, _)) => problems.push(format!(
                "the last tool result should {}be an error: {:?}",
                if expected { "" } else { "not " },
                content.chars().take(300).collect::<String>()
            )),
            None => problems.push("a tool result was expected, but there is none".to_string()),
        }
    }
    if let Some(needle) = &expect.messages_contain
        && !messages.iter().any(|m| m.text().contains(needle.as_str()))
    {
        problems.push(format!("no message contains {needle:?}"));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_fixture_parses() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/llm");
        let mut count = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "json") {
                Script::from_file(&path).unwrap();
                count += 1;
            }
        }
        assert!(count > 0);
    }

    #[test]
    fn a_turn_needs_exactly_one_action() {
        let error = Script::from_json(r#"{"turns": [{"expect": {}}]}"#).unwrap_err().to_string();
        assert!(error.contains("turn 1"), "{error}");
    }

    #[test]
    fn reports_each_unmet_expectation() {
        let expect = Expect {
            tools_include: vec!["get_task".into()],
            last_tool_result_is_error: Some(true),
            ..Expect::default()
        };
        let messages =
            [Message::Tool { tool_call_id: "1".into(), name: "x".into(), content: "fine".into(), is_error: false }];
        let problems = check(&expect, &messages, &[]);
        assert_eq!(problems.len(), 2, "{problems:?}");
    }
}
