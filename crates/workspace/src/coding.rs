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
use crate::config::{CodingAgent, Sandboxing};
use crate::workspace::Workspace;
use reading::Reading;

mod reading;

pub use reading::completed_todos;

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
}
