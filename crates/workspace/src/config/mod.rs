//! The `workspaces` section of `agent.json`: the repositories tasks are worked in, where their
//! workspaces live, the hooks around them, and the coding agents that can work there. This crate
//! owns it; the configuration embeds it.
//!
//! ```json
//! "workspaces": {
//!   "root": "/var/lib/picogent/workspaces",
//!   "repositories": { "billing": { "url": "/srv/git/billing.git", "base": "main", "projects": ["billing"] } },
//!   "agents": { "qwen": { "preset": "qwen-code" } },
//!   "agent": "qwen"
//! }
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use picogent_support::secret::{self, UrlCredential};

use crate::names;
pub mod presets;

use presets::Preset;

/// `workspaces`: off (no repository) unless a repository is named.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkspacesConfig {
    /// Where the workspaces (one folder per task) and the repositories' mirrors live.
    pub root: PathBuf,
    /// Repositories by name.
    pub repositories: BTreeMap<String, Repository>,
    /// Coding agents by name.
    pub agents: BTreeMap<String, CodingAgentConfig>,
    /// The coding agent `run_coding_agent` uses when the model names none; with one agent
    /// configured, that one.
    pub agent: Option<String>,
    /// Runs of a task that has a repository run the coding agent directly, with the task as its
    /// instructions, instead of the model planning and delegating.
    pub direct: bool,
    /// Shell commands run around the workspace's life, each within `hooks.timeout_ms`.
    pub hooks: Hooks,
    /// How long a workspace stays after its task is done (for a follow-up), in milliseconds.
    pub retention_ms: u64,
    /// How much disk all workspaces and mirrors may take, in MiB: no new workspace is made past it
    /// (workspaces of done tasks are removed first).
    pub max_disk_mb: u64,
    /// Local folders repositories may be cloned from or pushed to (a repository whose `url` or
    /// `push` is a local path outside them is refused at start). Empty: any.
    pub allowed_paths: Vec<PathBuf>,
    /// URL templates for the task's summary: `{repository}`, `{branch}` and `{commit}` are filled in.
    pub links: Links,
    /// The largest file a push may carry, in bytes: a coding agent's larger file is not committed
    /// and the push is refused, naming it.
    pub max_file_bytes: u64,
}

impl Default for WorkspacesConfig {
    fn default() -> Self {
        WorkspacesConfig {
            root: PathBuf::from("workspaces"),
            repositories: BTreeMap::new(),
            agents: BTreeMap::new(),
            agent: None,
            direct: false,
            hooks: Hooks::default(),
            retention_ms: 7 * 24 * 3_600_000,
            max_disk_mb: 10 * 1024,
            allowed_paths: Vec::new(),
            links: Links::default(),
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
        }
    }
}

/// One repository tasks are worked in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Repository {
    /// Where to clone it from: a git URL or a local path.
    pub url: String,
    /// The branch workspaces start from. Nothing is ever pushed to it.
    #[serde(default = "default_base")]
    pub base: String,
    /// Where branches are pushed; `None`: `url`.
    #[serde(default)]
    pub push: Option<String>,
    /// The projects (slugs) whose tasks it serves.
    #[serde(default)]
    pub projects: Vec<String>,
    /// Task labels that pick it, whatever the project.
    #[serde(default)]
    pub labels: Vec<String>,
}

fn default_base() -> String {
    "main".to_string()
}

impl Repository {
    pub fn push_url(&self) -> &str {
        self.push.as_deref().unwrap_or(&self.url)
    }
}

/// Shell commands run in the workspace at points of its life; their output goes into the run's
/// record. They are the operator's, from this file: a task's text never reaches them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Hooks {
    /// Once, when the workspace is made (install dependencies, say). A failure removes it again.
    pub after_create: Option<String>,
    /// Before each run of the coding agent. A failure refuses the run.
    pub before_run: Option<String>,
    /// After each run of the coding agent (a failure is reported, not fatal).
    pub after_run: Option<String>,
    /// Before the workspace is removed (a failure is reported; it is removed anyway).
    pub before_remove: Option<String>,
    pub timeout_ms: u64,
}

impl Default for Hooks {
    fn default() -> Self {
        Hooks { after_create: None, before_run: None, after_run: None, before_remove: None, timeout_ms: 300_000 }
    }
}

/// URL templates for links on the task.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Links {
    /// For example `https://git.example.com/{repository}/tree/{branch}`.
    pub branch: Option<String>,
    /// For example `https://git.example.com/{repository}/commit/{commit}`.
    pub commit: Option<String>,
}

/// How a coding agent's output is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputFormat {
    /// Plain lines; the last non-empty ones are its final message.
    #[default]
    Text,
    /// One JSON object a line (a CLI's `stream-json`); its result and progress are read from them.
    Jsonl,
}

/// One coding agent as written in `agent.json`: a preset, a command line, or a preset with some
/// of it replaced.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CodingAgentConfig {
    /// A ready-made entry (`qwen-code`, `mini-swe-agent`, `claude-code`, `gemini-cli`, `codex`,
    /// `opencode`), whose fields this entry may replace.
    pub preset: Option<String>,
    /// The command line, one argument each; placeholders are filled per argument (no shell):
    /// `{workspace}`, `{instructions}`, `{instructions_file}`, `{task_key}`, `{model}`, `{base_url}`,
    /// `{api_root}` (`{base_url}` without its `/v1`).
    pub command: Option<Vec<String>>,
    /// Its environment, besides `PATH`, `HOME` and `LANG`: nothing else of picogent's reaches it.
    /// A value may hold the placeholders above and `${NAME}`, a variable of picogent's own
    /// environment (how a key is passed: `"OPENAI_API_KEY": "${CODING_KEY}"`).
    pub env: Option<BTreeMap<String, String>>,
    pub output: Option<OutputFormat>,
    /// The model it is told to use; `None`: picogent's own (`llm.model`).
    pub model: Option<String>,
    /// The OpenAI-compatible endpoint it is told to use; `None`: picogent's own (`llm.base_url`).
    pub base_url: Option<String>,
    /// Wall-clock limit of one run of it, in milliseconds.
    pub timeout_ms: Option<u64>,
    /// How much of its output is kept (the run's record, the inspector); the rest is counted.
    pub max_output_bytes: Option<u64>,
    /// Run it inside bubblewrap (`bwrap`): the workspace and its home writable, the system's
    /// programs and libraries and the CLI's own installation read-only, nothing else of the host.
    /// Unset: sandboxed wherever `bwrap` is installed. `false` runs it without, on purpose.
    pub sandbox: Option<bool>,
    /// Folders (or files) the sandbox shows the agent read-only besides the system's and the
    /// CLI's own installation, which are found from its program.
    pub sandbox_read: Option<Vec<PathBuf>>,
    /// Files written into its home (`{home}`) before each run, by name (`name`, or `folder/name`
    /// in a folder of the home): settings a CLI reads.
    pub files: Option<BTreeMap<String, String>>,
    /// Where it writes its outcome, when its exit code does not tell.
    pub result: Option<ResultFile>,
}

/// A file a coding agent writes its outcome to: the value at `pointer` (a JSON pointer) is one of
/// `done` when it finished its work.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResultFile {
    /// With the placeholders of `command`.
    pub path: String,
    pub pointer: String,
    pub done: Vec<String>,
}

/// A coding agent with its preset applied and its defaults filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct CodingAgent {
    pub name: String,
    /// The preset it is made from, if any.
    pub preset: Option<Preset>,
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub output: OutputFormat,
    pub model: Option<String>,
    pub base_url: Option<String>,
    pub timeout_ms: u64,
    pub max_output_bytes: u64,
    pub sandbox: Sandboxing,
    pub sandbox_read: Vec<PathBuf>,
    pub files: BTreeMap<String, String>,
    pub result: Option<ResultFile>,
}

pub const DEFAULT_AGENT_TIMEOUT_MS: u64 = 30 * 60_000;
pub const DEFAULT_MAX_OUTPUT_BYTES: u64 = 1024 * 1024;
pub const DEFAULT_MAX_FILE_BYTES: u64 = 5 * 1024 * 1024;

/// Whether a coding agent runs in the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sandboxing {
    /// `sandbox: true`: in it, or not at all.
    On,
    /// `sandbox: false`: without it, on purpose.
    Off,
    /// Unset: in it wherever `bwrap` is installed; without it (and said so) elsewhere.
    WhereInstalled,
}

impl CodingAgentConfig {
    /// This entry with its preset applied and its defaults filled in; `Err` names what is wrong.
    pub fn resolve(&self, name: &str) -> Result<CodingAgent, AgentError> {
        let preset = match &self.preset {
            Some(word) => Some(Preset::named(word).ok_or_else(|| AgentError::UnknownPreset(word.clone()))?),
            None => None,
        };
        let command = match (&self.command, preset) {
            (Some(command), _) => command.clone(),
            (None, Some(preset)) => preset.command(),
            (None, None) => return Err(AgentError::NoCommand),
        };
        if command.first().is_none_or(|program| program.trim().is_empty()) {
            return Err(AgentError::NoProgram);
        }
        let mut env = preset.map(Preset::env).unwrap_or_default();
        env.extend(self.env.clone().unwrap_or_default());
        for key in env.keys() {
            if key.is_empty() || key.contains('=') || key.contains('\0') {
                return Err(AgentError::BadVariable(key.clone()));
            }
        }
        let mut files = preset.map(Preset::files).unwrap_or_default();
        files.extend(self.files.clone().unwrap_or_default());
        if let Some(file) = files.keys().find(|file| !home_file_name_ok(file)) {
            return Err(AgentError::BadFileName(file.clone()));
        }
        Ok(CodingAgent {
            name: name.to_string(),
            preset,
            command,
            env,
            output: self.output.or(preset.map(Preset::output)).unwrap_or_default(),
            model: self.model.clone(),
            base_url: self.base_url.clone(),
            timeout_ms: self.timeout_ms.unwrap_or(DEFAULT_AGENT_TIMEOUT_MS),
            max_output_bytes: self.max_output_bytes.unwrap_or(DEFAULT_MAX_OUTPUT_BYTES),
            sandbox: match self.sandbox {
                Some(true) => Sandboxing::On,
                Some(false) => Sandboxing::Off,
                None => Sandboxing::WhereInstalled,
            },
            sandbox_read: self.sandbox_read.clone().unwrap_or_default(),
            files,
            result: self.result.clone().or_else(|| preset.and_then(Preset::result)),
        })
    }
}

/// A name of a file written into an agent's home: a file's name, or a folder's and a file's
/// (`.gemini/settings.json`), each letters, digits, `.`, `-` and `_`, neither `.` nor `..`, not
/// starting with `-`.
fn home_file_name_ok(name: &str) -> bool {
    let part_ok = |part: &str| {
        !part.is_empty()
            && part.len() <= 64
            && part != "."
            && part != ".."
            && !part.starts_with('-')
            && part.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
    };
    match name.split_once('/') {
        Some((folder, file)) => part_ok(folder) && part_ok(file),
        None => part_ok(name),
    }
}

/// What is wrong with a coding agent's entry, or with the name of one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentError {
    #[error("{0:?} is not a known preset; the presets are {presets}", presets = Preset::NAMES.join(", "))]
    UnknownPreset(String),
    #[error("expected a `command` (one argument each) or a `preset`")]
    NoCommand,
    #[error("expected a `command` whose first argument is the program")]
    NoProgram,
    #[error("{0:?} is not an environment variable name")]
    BadVariable(String),
    #[error(
        "{0:?} is not a file name, or a folder's and a file's (`.gemini/settings.json`): files are written into the \
         agent's home"
    )]
    BadFileName(String),
    #[error("no coding agent named and no `workspaces.agent` set; the agents are {known}")]
    NoneNamed { known: String },
    #[error("no coding agent {name:?}; the agents are {known}")]
    Unknown { name: String, known: String },
}

/// What is wrong with a repository's `url` or `push`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    #[error("expected a git URL or a local path")]
    Empty,
    #[error("{0:?} starts with '-': git would read it as an option")]
    LooksLikeAnOption(String),
    #[error("{0:?}: expected an absolute path for a local repository")]
    Relative(String),
    #[error("{0:?}: a local path may not hold '..'")]
    ParentDir(String),
    #[error("{0:?} is outside `workspaces.allowed_paths`; add its folder there or use another repository")]
    NotAllowed(String),
    #[error(
        "{0} holds a credential (a password or token in the URL); remove it and give git its credentials from \
         the environment (an ssh agent, or a credential helper in picogent's git settings)"
    )]
    Credential(String),
}

pub use picogent_support::setting::Problem;

impl WorkspacesConfig {
    /// Whether any repository is configured (without one, no run is offered the coding tools).
    pub fn enabled(&self) -> bool {
        !self.repositories.is_empty()
    }

    /// The coding agent named `name`, or the default one when `name` is `None`.
    pub fn coding_agent(&self, name: Option<&str>) -> Result<CodingAgent, AgentError> {
        let name = match name.or(self.agent.as_deref()) {
            Some(name) => name.to_string(),
            None if self.agents.len() == 1 => self.agents.keys().next().cloned().unwrap_or_default(),
            None => {
                return Err(AgentError::NoneNamed { known: self.agent_names() });
            }
        };
        match self.agents.get(&name) {
            Some(entry) => entry.resolve(&name),
            None => Err(AgentError::Unknown { name, known: self.agent_names() }),
        }
    }

    fn agent_names(&self) -> String {
        if self.agents.is_empty() {
            return "none (add one under `workspaces.agents`)".to_string();
        }
        self.agents.keys().map(|name| format!("{name:?}")).collect::<Vec<_>>().join(", ")
    }

    /// The repository a task is worked in: the first whose labels the task carries, else the first
    /// serving its project.
    pub fn repository_for(&self, project_slug: &str, labels: &[String]) -> Option<(&str, &Repository)> {
        let by_label =
            self.repositories.iter().find(|(_, repo)| repo.labels.iter().any(|label| labels.contains(label)));
        by_label
            .or_else(|| self.repositories.iter().find(|(_, repo)| repo.projects.iter().any(|p| p == project_slug)))
            .map(|(name, repo)| (name.as_str(), repo))
    }

    /// Checks what types alone cannot; the problem names its field.
    pub fn check(&self) -> Result<(), Problem> {
        let problem = |field: String, message: String| Err(Problem { field, message });
        if !self.enabled() {
            return Ok(());
        }
        if self.root.as_os_str().is_empty() {
            return problem("workspaces.root".into(), "expected a folder for the workspaces".into());
        }
        if self.hooks.timeout_ms == 0 {
            return problem("workspaces.hooks.timeout_ms".into(), "expected a timeout above 0".into());
        }
        if self.max_disk_mb == 0 {
            return problem("workspaces.max_disk_mb".into(), "expected a size above 0".into());
        }
        if self.max_file_bytes == 0 {
            return problem("workspaces.max_file_bytes".into(), "expected a size above 0".into());
        }
        for (name, repo) in &self.repositories {
            let field = |what: &str| format!("workspaces.repositories.{name}.{what}");
            if !names::repository_name_ok(name) {
                return problem(
                    format!("workspaces.repositories.{name}"),
                    "expected a repository name of letters, digits, '-' or '_'".into(),
                );
            }
            if let Err(error) = names::check_ref_name(&repo.base) {
                return problem(field("base"), error.to_string());
            }
            for (what, url) in [("url", repo.url.as_str()), ("push", repo.push_url())] {
                if let Err(error) = self.check_source(url) {
                    return problem(field(what), error.to_string());
                }
            }
        }
        for (name, entry) in &self.agents {
            if !names::repository_name_ok(name) {
                return problem(
                    format!("workspaces.agents.{name}"),
                    "expected an agent name of letters, digits, '-' or '_'".into(),
                );
            }
            if let Err(error) = entry.resolve(name) {
                return problem(format!("workspaces.agents.{name}"), error.to_string());
            }
        }
        if let Some(agent) = &self.agent
            && !self.agents.contains_key(agent)
        {
            return problem("workspaces.agent".into(), format!("no coding agent {agent:?} under `workspaces.agents`"));
        }
        if self.direct && self.agent.is_none() && self.agents.len() != 1 {
            return problem(
                "workspaces.direct".into(),
                "direct mode needs one coding agent: set `workspaces.agent`".into(),
            );
        }
        Ok(())
    }

    /// A repository's URL or push target: a URL git understands, or a local path inside
    /// `allowed_paths`.
    fn check_source(&self, url: &str) -> Result<(), SourceError> {
        if url.trim().is_empty() {
            return Err(SourceError::Empty);
        }
        if url.starts_with('-') {
            return Err(SourceError::LooksLikeAnOption(url.to_string()));
        }
        if url.contains("://") {
            // A user name is how ssh logs in (`ssh://git@host/…`); over http(s) it is a token.
            let over_http = url.starts_with("http://") || url.starts_with("https://");
            return match secret::url_credential(url) {
                Some(UrlCredential::Password) => Err(SourceError::Credential(secret::shown_url(url))),
                Some(UrlCredential::UserName) if over_http => Err(SourceError::Credential(secret::shown_url(url))),
                _ => Ok(()),
            };
        }
        if names::scp_like(url) {
            return Ok(());
        }
        let path = std::path::Path::new(url);
        if !path.is_absolute() {
            return Err(SourceError::Relative(url.to_string()));
        }
        if path.components().any(|part| part == std::path::Component::ParentDir) {
            return Err(SourceError::ParentDir(url.to_string()));
        }
        if !self.allowed_paths.is_empty() && !self.allowed_paths.iter().any(|allowed| path.starts_with(allowed)) {
            return Err(SourceError::NotAllowed(url.to_string()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::home_file_name_ok;

    #[test]
    fn a_home_file_is_a_name_or_a_folders_and_a_name_never_a_way_out() {
        for name in ["qwen-settings.json", ".gemini/settings.json", "mini.yaml", "a_b/c-d.e"] {
            assert!(home_file_name_ok(name), "{name}");
        }
        for name in
            ["", "..", ".", "../x", "a/../b", "/etc/passwd", "a/b/c", "a/", "/a", "-x", "a/-x", "a b", "a\\b", "é"]
        {
            assert!(!home_file_name_ok(name), "{name}");
        }
    }
}
