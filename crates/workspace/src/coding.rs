//! One run of a coding agent CLI in a workspace: its command line filled in (each placeholder
//! inside one argument, never a shell), an environment of only what its entry names, its output
//! streamed line by line to the caller and kept up to `max_output_bytes`, a wall-clock timeout,
//! and a stop that kills its process group.
//!
//! How it ended is judged from what the CLI says, not only its exit code: a stream-json `result`
//! line (Qwen Code, Claude Code) with `is_error` or an `[API Error…]` result, or with a `status`
//! other than `success` (Gemini CLI), is a failure though the CLI exits 0, and so is Codex CLI's
//! `turn.failed` (or an `error` no `turn.completed` follows), OpenCode's `error`, and a result
//! file whose status is not one of its `done` values (mini-swe-agent past its step limit).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::child::{self, Capped, Group};
use crate::config::{CodingAgent, OutputFormat, Sandboxing};
use crate::workspace::Workspace;

/// What a run of a coding agent is given.
pub struct Invocation<'a> {
    pub agent: &'a CodingAgent,
    pub workspace: &'a Workspace,
    pub instructions: &'a str,
    /// The model it is told to use (`{model}`) and where (`{base_url}`).
    pub model: &'a str,
    pub base_url: &'a str,
}

/// How a run of a coding agent ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum AgentEnd {
    /// It finished its work.
    Finished,
    /// It ended without finishing: a non-zero exit, an error it reported, a status not `done`.
    Failed { reason: String },
    /// It ran past its `timeout_ms` and was killed.
    TimedOut { after_ms: u64 },
    /// The run was stopped (`@picogent stop`, the task unassigned) and it was killed.
    Stopped,
    /// It could not be started.
    NotStarted { reason: String },
}

/// What the model gets back, and the run's record keeps.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentReport {
    pub agent: String,
    pub end: AgentEnd,
    /// Its exit, as the system said (`exit 0`, `killed by a signal`); `None` if it never ran.
    pub exit: Option<String>,
    /// What it said last: the stream's `result`, or its last lines.
    pub final_message: String,
    /// The steps it reported (its tool calls, where its output shows them).
    pub progress: Vec<String>,
    /// Its output as kept (`max_output_bytes`), with a line saying how much more there was.
    pub output: String,
    pub duration_ms: u64,
    /// Why it ran without the sandbox, when it did (its entry says so, or bwrap is missing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unsandboxed: Option<String>,
}

impl AgentReport {
    pub fn finished(&self) -> bool {
        self.end == AgentEnd::Finished
    }

    /// Why it did not finish, in a sentence naming the agent; `None` when it finished.
    pub fn failure(&self) -> Option<String> {
        let name = &self.agent;
        match &self.end {
            AgentEnd::Finished => None,
            AgentEnd::Failed { reason } => Some(format!("the coding agent {name} failed: {reason}")),
            AgentEnd::TimedOut { after_ms } => Some(format!(
                "the coding agent {name} ran past its timeout ({}s, workspaces.agents.{name}.timeout_ms) and was stopped",
                after_ms / 1000
            )),
            AgentEnd::Stopped => Some(format!("the coding agent {name} was stopped")),
            AgentEnd::NotStarted { reason } => Some(format!("the coding agent {name} could not start: {reason}")),
        }
    }
}

/// Runs the coding agent; each line of its output (stdout and stderr) goes to `on_line` as it
/// comes. Never fails: how it ended is in the report.
pub async fn run(
    invocation: &Invocation<'_>,
    on_line: &(dyn Fn(&str) + Send + Sync),
    cancel: &CancellationToken,
) -> AgentReport {
    let started = Instant::now();
    let agent = invocation.agent;
    let mut kept = Capped::new(agent.max_output_bytes);
    let mut reading = Reading::new(agent.output);
    let unsandboxed = match agent.sandbox {
        Sandboxing::Off => Some(format!("its entry says sandbox: false (workspaces.agents.{}.sandbox)", agent.name)),
        Sandboxing::WhereInstalled if !crate::sandbox::available() => {
            Some("bwrap (Debian: bubblewrap) is not installed".to_string())
        }
        _ => None,
    };
    let report = |end: AgentEnd, exit: Option<String>, reading: Reading, kept: &Capped| AgentReport {
        agent: agent.name.clone(),
        end,
        exit,
        final_message: reading.final_message(),
        progress: reading.progress,
        output: kept.shown(),
        duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        unsandboxed: unsandboxed.clone(),
    };
    let Prepared { program, args, env, sandbox } = match prepare(invocation) {
        Ok(prepared) => prepared,
        Err(error) => return report(AgentEnd::NotStarted { reason: error.to_string() }, None, reading, &kept),
    };
    let relay = CancellationToken::new();
    let _relay_ends_with_this_run = relay.clone().drop_guard();
    if let Some(sandbox) = &sandbox
        && let Err(error) = sandbox.relay_outside(relay.clone())
    {
        return report(AgentEnd::NotStarted { reason: error.to_string() }, None, reading, &kept);
    }
    // A coding agent an earlier picogent started here and was killed before it could stop it.
    let home = &invocation.workspace.home;
    let pid_file = home.join(PID_FILE);
    let recorded = crate::files::read_bounded(&pid_file, 64).ok();
    if let Some(pgid) = recorded.and_then(|text| String::from_utf8_lossy(&text).trim().parse().ok()) {
        let killed = child::kill_left_over(pgid, &invocation.workspace.path);
        if killed > 0 {
            tracing::warn!(killed, "killed what a coding agent of an earlier picogent left running in this workspace");
        }
    }
    let mut command = child::command(&program, &args, &invocation.workspace.path, home, &env);
    if sandbox.is_none() {
        // Without the sandbox, at least no capability: as root too, it cannot read picogent's
        // memory or `/proc` files (picogent is not dumpable).
        child::without_privileges(&mut command);
    }
    let mut group = match Group::spawn(command) {
        Ok(group) => group,
        Err(error) => {
            let reason = format!("cannot run {program:?}: {error} (is it installed and on PATH?)");
            return report(AgentEnd::NotStarted { reason }, None, reading, &kept);
        }
    };
    if let Some(pgid) = group.pgid() {
        let _ = crate::files::write_fresh(home, PID_FILE, pgid.to_string().as_bytes());
    }
    let report = |end, exit, reading, kept: &Capped| {
        let _ = std::fs::remove_file(&pid_file);
        report(end, exit, reading, kept)
    };
    let mut rx = group.lines();
    let timeout = Duration::from_millis(agent.timeout_ms);
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let cut_short = loop {
        tokio::select! {
            line = rx.recv() => match line {
                Some((is_stdout, line)) => {
                    on_line(&line);
                    kept.push_line(&line);
                    if is_stdout {
                        reading.stdout(&line);
                    } else {
                        reading.stderr(&line);
                    }
                }
                None => break None,
            },
            () = &mut deadline => break Some(AgentEnd::TimedOut { after_ms: agent.timeout_ms }),
            () = cancel.cancelled() => break Some(AgentEnd::Stopped),
        }
    };
    if let Some(end) = cut_short {
        group.stop().await;
        return report(end, Some("killed".to_string()), reading, &kept);
    }
    let status = tokio::select! {
        status = group.child.wait() => status,
        () = &mut deadline => {
            group.stop().await;
            return report(AgentEnd::TimedOut { after_ms: agent.timeout_ms }, Some("killed".into()), reading, &kept);
        }
        () = cancel.cancelled() => {
            group.stop().await;
            return report(AgentEnd::Stopped, Some("killed".into()), reading, &kept);
        }
    };
    // Whatever it left running in its group goes now.
    drop(group);
    let (exit, success) = match status {
        Ok(status) => (
            status.code().map_or_else(|| "killed by a signal".to_string(), |code| format!("exit {code}")),
            status.success(),
        ),
        Err(error) => (format!("unknown ({error})"), false),
    };
    let end = if !success {
        let said = reading.failure().unwrap_or_else(|| crate::git::last_lines(&reading.stderr_tail, 3));
        AgentEnd::Failed { reason: if said.is_empty() { exit.clone() } else { format!("{exit}: {said}") } }
    } else if let Some(error) = reading.failure() {
        AgentEnd::Failed { reason: error }
    } else if let Some(reason) = result_file_failure(invocation) {
        AgentEnd::Failed { reason }
    } else {
        AgentEnd::Finished
    };
    report(end, Some(exit), reading, &kept)
}

/// Where the process group of the coding agent running in a workspace is noted, in its home.
const PID_FILE: &str = "coding-agent.pgid";

/// The most of a result file that is read.
const MAX_RESULT_BYTES: u64 = 32 * 1024 * 1024;

/// What a coding agent is started with, placeholders filled.
struct Prepared {
    program: String,
    args: Vec<String>,
    env: BTreeMap<String, String>,
    /// The sandbox it runs in; its relay to the model runs while the agent does.
    sandbox: Option<crate::sandbox::Sandbox>,
}

/// Why a coding agent could not be started.
#[derive(Debug, thiserror::Error)]
enum PrepareError {
    #[error("cannot make its home: {0}")]
    Home(crate::files::FileError),
    #[error("cannot write its instructions: {0}")]
    Instructions(crate::files::FileError),
    #[error("cannot write {name}: {source}")]
    File { name: String, source: crate::files::FileError },
    #[error("the environment variable {0} is not set (its entry passes ${{{0}}})")]
    Unset(String),
    #[error(transparent)]
    Sandbox(#[from] crate::sandbox::SandboxError),
}

/// The program, its arguments and its environment, placeholders filled; the instructions file
/// and the entry's files written into its home.
fn prepare(invocation: &Invocation<'_>) -> Result<Prepared, PrepareError> {
    let agent = invocation.agent;
    let workspace = invocation.workspace;
    crate::files::ensure_dir(&workspace.home).map_err(PrepareError::Home)?;
    let instructions_file = workspace.home.join("instructions.md");
    crate::files::write_fresh(&workspace.home, "instructions.md", invocation.instructions.as_bytes())
        .map_err(PrepareError::Instructions)?;
    for (name, content) in &agent.files {
        // `folder/name` (checked with the entry): the folder made in the home, never through a link.
        let (folder, file) = match name.split_once('/') {
            Some((folder, file)) => (workspace.home.join(folder), file),
            None => (workspace.home.clone(), name.as_str()),
        };
        crate::files::ensure_dir(&folder)
            .and_then(|()| crate::files::write_fresh(&folder, file, content.as_bytes()))
            .map_err(|source| PrepareError::File { name: name.clone(), source })?;
    }
    let sandbox = match crate::sandbox::wanted(agent.sandbox) {
        true => Some(crate::sandbox::Sandbox::new(workspace, invocation.base_url, agent)?),
        false => None,
    };
    // The endpoint as the agent reaches it (the sandbox's relay), and its root without `/v1`
    // (`{api_root}`: a client that adds `/v1/…` itself).
    let base_url = sandbox.as_ref().map_or(invocation.base_url, |sandbox| sandbox.base_url());
    let vars = BTreeMap::from([
        ("workspace", workspace.path.to_string_lossy().into_owned()),
        ("home", workspace.home.to_string_lossy().into_owned()),
        ("instructions", invocation.instructions.to_string()),
        ("instructions_file", instructions_file.to_string_lossy().into_owned()),
        ("task_key", workspace.key.to_string()),
        ("model", invocation.model.to_string()),
        ("base_url", base_url.to_string()),
        ("api_root", api_root(base_url).to_string()),
    ]);
    // An outcome an earlier run left is not this run's.
    if let Some(result) = &agent.result {
        let path = std::path::PathBuf::from(fill(&result.path, &vars));
        if std::fs::symlink_metadata(&path).is_ok_and(|meta| !meta.is_dir()) {
            let _ = std::fs::remove_file(&path);
        }
    }
    let mut words: Vec<String> = agent.command.iter().map(|word| fill(word, &vars)).collect();
    let mut env = BTreeMap::new();
    for (name, value) in &agent.env {
        env.insert(name.clone(), from_environment(&fill(value, &vars))?);
    }
    if let Some(sandbox) = &sandbox {
        words = sandbox.wrap(words, workspace);
    }
    let program = words.remove(0);
    Ok(Prepared { program, args: words, env, sandbox })
}

/// `{name}` placeholders replaced by their values, in one pass (a value is never read again).
fn fill(template: &str, vars: &BTreeMap<&str, String>) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find('}').and_then(|close| vars.get(&after[..close]).map(|value| (close, value))) {
            Some((close, value)) => {
                out.push_str(value);
                rest = &after[close + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// `${NAME}` and `${NAME:-default}` replaced from picogent's environment; an unset `${NAME}`
/// without a default is an error naming it.
fn from_environment(value: &str) -> Result<String, PrepareError> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(open) = rest.find("${") {
        out.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        let Some(close) = after.find('}') else {
            out.push_str(&rest[open..]);
            return Ok(out);
        };
        let (name, default) = match after[..close].split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (&after[..close], None),
        };
        match (std::env::var(name), default) {
            (Ok(found), _) if !found.is_empty() => out.push_str(&found),
            (_, Some(default)) => out.push_str(default),
            _ => return Err(PrepareError::Unset(name.to_string())),
        }
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// A result file whose status is not `done`: why.
fn result_file_failure(invocation: &Invocation<'_>) -> Option<String> {
    let spec = invocation.agent.result.as_ref()?;
    let vars = BTreeMap::from([
        ("home", invocation.workspace.home.to_string_lossy().into_owned()),
        ("workspace", invocation.workspace.path.to_string_lossy().into_owned()),
    ]);
    let path = fill(&spec.path, &vars);
    let text = match crate::files::read_bounded(Path::new(&path), MAX_RESULT_BYTES) {
        Ok(text) => text,
        Err(crate::files::FileError::Io { source, .. }) => {
            return Some(format!("it wrote no result file {path}: {source}"));
        }
        Err(error) => return Some(format!("its result file cannot be read: {error}")),
    };
    let value: serde_json::Value = match serde_json::from_slice(&text) {
        Ok(value) => value,
        Err(error) => return Some(format!("its result file {path} is not JSON: {error}")),
    };
    let status = value.pointer(&spec.pointer).map(|status| match status {
        serde_json::Value::String(text) => text.clone(),
        other => other.to_string(),
    });
    match status {
        Some(status) if spec.done.contains(&status) => None,
        Some(status) => Some(format!("it ended {status}")),
        None => Some(format!("its result file {path} has nothing at {}", spec.pointer)),
    }
}

/// What is read from the output as it comes.
struct Reading {
    format: OutputFormat,
    last_lines: Vec<String>,
    result: Option<String>,
    error: Option<String>,
    /// An error event no end of the turn has followed yet (Codex CLI's `error`, which a retry
    /// that succeeds follows with `turn.completed`).
    unresolved: Option<String>,
    progress: Vec<String>,
    stderr_tail: String,
    /// The last line of `last_lines` is an answer's text still coming in pieces (Gemini CLI's
    /// `delta` messages).
    delta_open: bool,
    /// The last `error` event's message (Gemini CLI's), for a `result` that fails without one.
    error_event: Option<String>,
}

impl Reading {
    fn new(format: OutputFormat) -> Reading {
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

    fn stdout(&mut self, line: &str) {
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

    fn stderr(&mut self, line: &str) {
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
    fn failure(&self) -> Option<String> {
        self.error.clone().or_else(|| self.unresolved.clone())
    }

    fn final_message(&self) -> String {
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

/// An endpoint's root: `base_url` without a last `/v1` (a client that adds `/v1/messages` itself
/// is given this).
fn api_root(base_url: &str) -> &str {
    let trimmed = base_url.strip_suffix('/').unwrap_or(base_url);
    trimmed.strip_suffix("/v1").unwrap_or(trimmed)
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
    fn placeholders_are_filled_inside_one_argument_and_values_are_not_read_again() {
        let vars =
            BTreeMap::from([("instructions", "{model} $(rm -rf /); `id`".to_string()), ("model", "m".to_string())]);
        assert_eq!(fill("-p={instructions}", &vars), "-p={model} $(rm -rf /); `id`");
        assert_eq!(fill("{unknown} {model}", &vars), "{unknown} m");
        assert_eq!(api_root("http://127.0.0.1:8080/v1"), "http://127.0.0.1:8080");
        assert_eq!(api_root("http://127.0.0.1:8080/v1/"), "http://127.0.0.1:8080");
        assert_eq!(api_root("https://models.example/api"), "https://models.example/api");
        assert_eq!(fill("{", &vars), "{");
    }

    #[test]
    fn environment_values_come_from_picogents_environment_only_where_the_entry_names_them() {
        // SAFETY: the variable is this test's own.
        unsafe { std::env::set_var("PICOGENT_CODING_TEST_KEY", "k-1") };
        assert_eq!(from_environment("${PICOGENT_CODING_TEST_KEY}").unwrap(), "k-1");
        assert_eq!(from_environment("x-${PICOGENT_CODING_TEST_UNSET:-none}").unwrap(), "x-none");
        let error = from_environment("${PICOGENT_CODING_TEST_UNSET}").unwrap_err().to_string();
        assert!(error.contains("PICOGENT_CODING_TEST_UNSET is not set"), "{error}");
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
