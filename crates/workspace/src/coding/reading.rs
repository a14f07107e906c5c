//! Reading a coding agent's output as it comes: its progress, its final message, and whether it
//! reported a failure, from each CLI's own stream (stream-json lines of Qwen Code, Claude Code and
//! Gemini CLI, Codex CLI's and OpenCode's JSON events) or its last lines of text.

use crate::config::OutputFormat;

/// What is read from the output as it comes.
pub(super) struct Reading {
    format: OutputFormat,
    last_lines: Vec<String>,
    result: Option<String>,
    error: Option<String>,
    /// An error event no end of the turn has followed yet (Codex CLI's `error`, which a retry
    /// that succeeds follows with `turn.completed`).
    unresolved: Option<String>,
    pub(super) progress: Vec<String>,
    pub(super) stderr_tail: String,
    /// The last line of `last_lines` is an answer's text still coming in pieces (Gemini CLI's
    /// `delta` messages).
    delta_open: bool,
    /// The last `error` event's message (Gemini CLI's), for a `result` that fails without one.
    error_event: Option<String>,
}

impl Reading {
    pub(super) fn new(format: OutputFormat) -> Reading {
        Reading {
            format,
            last_lines: Vec::new(),
            result: None,
            error: None,
            unresolved: None,
            progress: Vec::new(),
            stderr_tail: String::new(),
            delta_open: false,
            error_event: None,
        }
    }

    pub(super) fn stdout(&mut self, line: &str) {
        if line.trim().is_empty() {
            return;
        }
        if self.format == OutputFormat::Jsonl
            && let Ok(event) = serde_json::from_str::<serde_json::Value>(line)
        {
            self.event(&event);
            return;
        }
        self.last_lines.push(line.to_string());
        if self.last_lines.len() > 8 {
            self.last_lines.remove(0);
        }
    }

    pub(super) fn stderr(&mut self, line: &str) {
        self.stderr_tail.push_str(line);
        self.stderr_tail.push('\n');
        if self.stderr_tail.len() > 4096 {
            let cut = self.stderr_tail.len() - 2048;
            let cut = (cut..self.stderr_tail.len()).find(|&i| self.stderr_tail.is_char_boundary(i)).unwrap_or(0);
            self.stderr_tail.drain(..cut);
        }
    }

    /// One stream-json event: an assistant message's tool calls are its progress; the `result`
    /// event is its final message, and tells whether it failed. Gemini CLI's events are flatter:
    /// `message` (its text, in `delta` pieces), `tool_use`, `error`, and a `result` with a
    /// `status` but no text.
    fn event(&mut self, event: &serde_json::Value) {
        let kind = event.get("type").and_then(|kind| kind.as_str());
        if kind != Some("message") {
            self.delta_open = false;
        }
        match kind {
            Some("message") if event.get("role").and_then(|role| role.as_str()) == Some("assistant") => {
                let text = event.get("content").and_then(|text| text.as_str()).unwrap_or("");
                let delta = event.get("delta").and_then(|delta| delta.as_bool()) == Some(true);
                match self.last_lines.last_mut() {
                    Some(last) if delta && self.delta_open => push_capped(last, text),
                    _ => self.last_lines = vec![text.to_string()],
                }
                self.delta_open = delta;
            }
            // Gemini CLI's (`tool_name`, `parameters`), or OpenCode's (`part.tool`, its input).
            Some("tool_use") => {
                let name = event.get("tool_name").or_else(|| event.pointer("/part/tool"));
                let name = name.and_then(|name| name.as_str()).unwrap_or("tool");
                let arguments = event.get("parameters").or_else(|| event.pointer("/part/state/input"));
                self.progress.push(progress_line(name, arguments));
            }
            // OpenCode's text, one whole part each.
            Some("text") => {
                if let Some(text) = event.pointer("/part/text").and_then(|text| text.as_str()) {
                    self.last_lines = vec![text.to_string()];
                }
            }
            // Gemini CLI's `error` (its `result` follows and decides), Codex CLI's (a failure
            // unless `turn.completed` follows, as after a retry that worked), and OpenCode's (its
            // words in `error.data.message`; nothing follows it).
            Some("error") => {
                let said = event.get("message").or_else(|| event.pointer("/error/data/message"));
                let said = said.or_else(|| event.pointer("/error/name")).and_then(|message| message.as_str());
                self.error_event = said.map(short);
                self.unresolved = Some(format!("it reported an error: {}", codex_said(said.unwrap_or("an error"))));
            }
            Some("assistant") => {
                let parts = event.pointer("/message/content").and_then(|content| content.as_array());
                for part in parts.into_iter().flatten() {
                    match part.get("type").and_then(|kind| kind.as_str()) {
                        Some("tool_use") => {
                            let name = part.get("name").and_then(|name| name.as_str()).unwrap_or("tool");
                            self.progress.push(progress_line(name, part.get("input")));
                        }
                        Some("text") => {
                            if let Some(text) = part.get("text").and_then(|text| text.as_str()) {
                                self.last_lines = vec![text.to_string()];
                            }
                        }
                        _ => {}
                    }
                }
            }
            Some("result") => {
                let result = event.get("result").and_then(|result| result.as_str()).unwrap_or("").to_string();
                let is_error = event.get("is_error").and_then(|flag| flag.as_bool()).unwrap_or(false);
                let subtype = event.get("subtype").and_then(|subtype| subtype.as_str()).unwrap_or("success");
                let status = event.get("status").and_then(|status| status.as_str()).unwrap_or("success");
                if is_error || subtype != "success" || result.starts_with("[API Error") {
                    let said = if result.is_empty() { subtype.to_string() } else { short(&result) };
                    self.error = Some(format!("it reported an error: {said}"));
                } else if status != "success" {
                    let message = event.pointer("/error/message").and_then(|message| message.as_str()).map(short);
                    let said = message.or_else(|| self.error_event.clone()).unwrap_or_else(|| short(status));
                    self.error = Some(format!("it reported an error: {said}"));
                }
                self.result = Some(result);
                self.unresolved = None;
            }
            // Codex CLI's `exec --json` events.
            Some("item.completed") => self.codex_item(event.get("item").unwrap_or(&serde_json::Value::Null)),
            Some("turn.failed") => {
                let said = event.pointer("/error/message").and_then(|message| message.as_str());
                self.error = Some(format!("it reported an error: {}", codex_said(said.unwrap_or("the turn failed"))));
            }
            Some("turn.completed") => self.unresolved = None,
            _ => {}
        }
    }

    /// One finished item of Codex CLI's: its commands, file changes and tool calls are its
    /// progress, its last message its final one. (An `error` item is a warning: the turn goes on.)
    fn codex_item(&mut self, item: &serde_json::Value) {
        let text = |key: &str| item.get(key).and_then(|value| value.as_str());
        match text("type") {
            Some("agent_message") => self.result = text("text").map(str::to_string),
            Some("command_execution") => {
                self.progress.push(format!("command {}", short(text("command").unwrap_or(""))))
            }
            Some("file_change") => {
                let changes = item.get("changes").and_then(|changes| changes.as_array());
                let paths = changes.into_iter().flatten().filter_map(|change| change.get("path")?.as_str());
                self.progress.push(format!("edit {}", short(&paths.collect::<Vec<_>>().join(" "))));
            }
            Some("mcp_tool_call") => {
                self.progress.push(format!("{} {}", text("server").unwrap_or("mcp"), text("tool").unwrap_or("")))
            }
            _ => {}
        }
    }

    /// What it reported that makes the run a failure, if anything.
    pub(super) fn failure(&self) -> Option<String> {
        self.error.clone().or_else(|| self.unresolved.clone())
    }

    pub(super) fn final_message(&self) -> String {
        match &self.result {
            Some(result) if !result.is_empty() => result.clone(),
            _ => self.last_lines.join("\n"),
        }
    }
}

/// A tool call as progress: its name and what it works on (a file's path, a command).
fn progress_line(name: &str, arguments: Option<&serde_json::Value>) -> String {
    let target = ["file_path", "filePath", "path", "command"]
        .iter()
        .find_map(|key| arguments.and_then(|arguments| arguments.get(*key)).and_then(|v| v.as_str()));
    match target {
        Some(target) => format!("{name} {}", short(target)),
        None => name.to_string(),
    }
}

/// Appends a piece of an answer's text, keeping at most 64 KiB of it.
fn push_capped(text: &mut String, piece: &str) {
    const MAX: usize = 64 * 1024;
    for character in piece.chars() {
        if text.len() + character.len_utf8() > MAX {
            return;
        }
        text.push(character);
    }
}

/// The to-do items a stream-json line reports completed: the CLI's to-do tool (Qwen Code's and
/// Claude Code's `todo_write`/`TodoWrite`, Gemini CLI's `write_todos`, OpenCode's `todowrite`)
/// called with items whose `status` is `completed`. Anything else, or a line that is not JSON,
/// reports none.
pub fn completed_todos(line: &str) -> Vec<String> {
    const TODO_TOOLS: [&str; 4] = ["todo_write", "TodoWrite", "write_todos", "todowrite"];
    let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else { return Vec::new() };
    let is_todo_tool =
        |name: Option<&serde_json::Value>| name.and_then(|n| n.as_str()).is_some_and(|n| TODO_TOOLS.contains(&n));
    let lists: Vec<&serde_json::Value> = match event.get("type").and_then(|kind| kind.as_str()) {
        Some("assistant") => {
            let parts = event.pointer("/message/content").and_then(|content| content.as_array());
            let calls = parts.into_iter().flatten().filter(|part| {
                part.get("type").and_then(|kind| kind.as_str()) == Some("tool_use") && is_todo_tool(part.get("name"))
            });
            calls.filter_map(|call| call.pointer("/input/todos")).collect()
        }
        // Gemini CLI's: `{"type":"tool_use","tool_name":"write_todos","parameters":{"todos":[…]}}`.
        Some("tool_use") if is_todo_tool(event.get("tool_name")) => {
            event.pointer("/parameters/todos").into_iter().collect()
        }
        // OpenCode's: `{"type":"tool_use","part":{"tool":"todowrite","state":{"input":{"todos":[…]}}}}`.
        Some("tool_use") if is_todo_tool(event.pointer("/part/tool")) => {
            event.pointer("/part/state/input/todos").into_iter().collect()
        }
        _ => return Vec::new(),
    };
    let items = lists.into_iter().filter_map(|todos| todos.as_array()).flatten();
    items
        .filter(|item| item.get("status").and_then(|status| status.as_str()) == Some("completed"))
        .filter_map(|item| {
            ["content", "description", "title"].iter().find_map(|key| item.get(*key).and_then(|text| text.as_str()))
        })
        .map(|text| text.trim().to_string())
        .filter(|text| !text.is_empty())
        .collect()
}

/// What Codex CLI said of an error, shortened: the endpoint's `error.message` when it passes on
/// the endpoint's error body whole.
fn codex_said(said: &str) -> String {
    let body = serde_json::from_str::<serde_json::Value>(said).ok();
    let message = body.as_ref().and_then(|body| body.pointer("/error/message")).and_then(|message| message.as_str());
    short(message.unwrap_or(said))
}

/// At most 200 characters of `text`, on one line.
fn short(text: &str) -> String {
    let line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(200) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_todo_items_a_cli_reports_completed_are_read_from_its_stream() {
        let line = r#"{"type":"assistant","message":{"content":[{"type":"text","text":"ok"},{"type":"tool_use","name":"todo_write","input":{"todos":[{"id":"1","content":" Fix the parser ","status":"completed"},{"id":"2","content":"Add a test","status":"in_progress"}]}}]}}"#;
        assert_eq!(completed_todos(line), ["Fix the parser"]);
        let other_tool = r#"{"type":"assistant","message":{"content":[{"type":"tool_use","name":"edit","input":{"todos":[{"content":"x","status":"completed"}]}}]}}"#;
        assert!(completed_todos(other_tool).is_empty());
        for line in [
            "not json",
            "{}",
            r#"{"type":"assistant","message":{"content":[{"type":"tool_use","name":"TodoWrite","input":{"todos":"none"}}]}}"#,
        ] {
            assert!(completed_todos(line).is_empty(), "{line}");
        }
    }

    #[test]
    fn a_stream_json_result_that_reports_an_error_is_a_failure_though_the_exit_is_0() {
        let mut reading = Reading::new(OutputFormat::Jsonl);
        reading.stdout(r#"{"type":"assistant","message":{"content":[{"type":"tool_use","name":"edit","input":{"file_path":"/w/src/date.py"}}]}}"#);
        reading.stdout(r#"{"type":"result","subtype":"success","result":"[API Error: 401 bad key]"}"#);
        assert_eq!(reading.progress, ["edit /w/src/date.py"]);
        assert_eq!(reading.error.as_deref(), Some("it reported an error: [API Error: 401 bad key]"));
        let mut fine = Reading::new(OutputFormat::Jsonl);
        fine.stdout(r#"{"type":"result","subtype":"success","result":"Updated src/date.py."}"#);
        assert_eq!((fine.error.clone(), fine.final_message()), (None, "Updated src/date.py.".to_string()));
    }

    #[test]
    fn gemini_clis_stream_is_read_its_text_joined_and_a_result_with_an_error_status_is_a_failure() {
        let mut reading = Reading::new(OutputFormat::Jsonl);
        reading.stdout(r#"{"type":"message","role":"assistant","content":"Reading ","delta":true}"#);
        reading.stdout(
            r#"{"type":"tool_use","tool_name":"read_file","tool_id":"c1","parameters":{"file_path":"/w/src/date.py"}}"#,
        );
        reading.stdout(r#"{"type":"message","role":"assistant","content":"Updated ","delta":true}"#);
        reading.stdout(r#"{"type":"message","role":"assistant","content":"src/date.py.","delta":true}"#);
        reading.stdout(r#"{"type":"result","status":"success","stats":{}}"#);
        assert_eq!(reading.progress, ["read_file /w/src/date.py"]);
        assert_eq!((reading.error.clone(), reading.final_message()), (None, "Updated src/date.py.".to_string()));
        let mut failed = Reading::new(OutputFormat::Jsonl);
        failed.stdout(r#"{"type":"result","status":"error","error":{"type":"Error","message":"[API Error: quota]"}}"#);
        assert_eq!(failed.error.as_deref(), Some("it reported an error: [API Error: quota]"));
        let mut empty = Reading::new(OutputFormat::Jsonl);
        empty.stdout(r#"{"type":"error","severity":"error","message":"Model stream ended with empty response."}"#);
        empty.stdout(r#"{"type":"result","status":"error"}"#);
        assert_eq!(empty.error.as_deref(), Some("it reported an error: Model stream ended with empty response."));
        let todos = r#"{"type":"tool_use","tool_name":"write_todos","parameters":{"todos":[{"description":"Fix it","status":"completed"},{"description":"Test","status":"pending"}]}}"#;
        assert_eq!(completed_todos(todos), ["Fix it"]);
    }

    #[test]
    fn codex_events_give_the_progress_and_the_final_message_and_a_failed_turn_is_a_failure() {
        let mut reading = Reading::new(OutputFormat::Jsonl);
        reading.stdout(
            r#"{"type":"item.completed","item":{"id":"item_0","type":"error","message":"Model metadata not found"}}"#,
        );
        reading.stdout(r#"{"type":"item.completed","item":{"type":"command_execution","command":"sed -i s/a/b/ src/date.py","exit_code":0}}"#);
        reading.stdout(r#"{"type":"item.completed","item":{"type":"file_change","changes":[{"path":"src/date.py","kind":"update"}]}}"#);
        reading.stdout(r#"{"type":"error","message":"Reconnecting... 1/5"}"#);
        reading.stdout(r#"{"type":"item.completed","item":{"type":"agent_message","text":"Updated src/date.py."}}"#);
        reading.stdout(r#"{"type":"turn.completed","usage":{"input_tokens":1,"output_tokens":1}}"#);
        assert_eq!(reading.progress, ["command sed -i s/a/b/ src/date.py", "edit src/date.py"]);
        assert_eq!((reading.failure(), reading.final_message()), (None, "Updated src/date.py.".to_string()));
        let mut failed = Reading::new(OutputFormat::Jsonl);
        failed.stdout(r#"{"type":"error","message":"unexpected status 401"}"#);
        assert_eq!(failed.failure().as_deref(), Some("it reported an error: unexpected status 401"));
        failed.stdout(r#"{"type":"turn.failed","error":{"message":"stream disconnected before completion"}}"#);
        assert_eq!(failed.failure().as_deref(), Some("it reported an error: stream disconnected before completion"));
        // The endpoint's error body, passed on whole, is told by its message.
        let mut refused = Reading::new(OutputFormat::Jsonl);
        refused.stdout(r#"{"type":"turn.failed","error":{"message":"{\"error\":{\"message\":\"model not found\",\"type\":\"invalid_request_error\"}}"}}"#);
        assert_eq!(refused.failure().as_deref(), Some("it reported an error: model not found"));
    }

    #[test]
    fn opencode_events_give_the_progress_and_the_final_message_and_an_error_is_a_failure() {
        let mut reading = Reading::new(OutputFormat::Jsonl);
        reading.stdout(r#"{"type":"step_start","part":{"type":"step-start"}}"#);
        reading.stdout(r#"{"type":"text","part":{"type":"text","text":"Reading it first."}}"#);
        reading.stdout(r#"{"type":"tool_use","part":{"type":"tool","tool":"read","callID":"c1","state":{"status":"completed","input":{"filePath":"/w/src/date.py"},"output":"1: x"}}}"#);
        reading.stdout(r#"{"type":"tool_use","part":{"type":"tool","tool":"bash","state":{"status":"completed","input":{"command":"cat src/date.py","description":"show it"}}}}"#);
        reading.stdout(r#"{"type":"step_finish","part":{"type":"step-finish","reason":"tool-calls"}}"#);
        reading.stdout(r#"{"type":"text","part":{"type":"text","text":"Updated src/date.py."}}"#);
        reading.stdout(r#"{"type":"step_finish","part":{"type":"step-finish","reason":"stop"}}"#);
        assert_eq!(reading.progress, ["read /w/src/date.py", "bash cat src/date.py"]);
        let todos = r#"{"type":"tool_use","part":{"type":"tool","tool":"todowrite","state":{"status":"completed","input":{"todos":[{"content":"Fix it","status":"completed","priority":"high"},{"content":"Test","status":"pending"}]}}}}"#;
        assert_eq!(completed_todos(todos), ["Fix it"]);
        assert_eq!((reading.failure(), reading.final_message()), (None, "Updated src/date.py.".to_string()));
        let mut failed = Reading::new(OutputFormat::Jsonl);
        failed.stdout(r#"{"type":"error","error":{"name":"APIError","data":{"message":"no model named m","statusCode":404,"isRetryable":false}}}"#);
        assert_eq!(failed.failure().as_deref(), Some("it reported an error: no model named m"));
        let mut unnamed = Reading::new(OutputFormat::Jsonl);
        unnamed.stdout(r#"{"type":"error","error":{"name":"UnknownError","data":{}}}"#);
        assert_eq!(unnamed.failure().as_deref(), Some("it reported an error: UnknownError"));
    }
}
