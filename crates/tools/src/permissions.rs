//! The `permissions` section of `agent.json`: the policy over every tool ([`crate::policy`]) and
//! how far a run's writes reach ([`crate::scope`]). The tools own it; the configuration embeds it.

use serde::{Deserialize, Serialize};

/// The permission policy over every tool, the tracker's included (`tools::policy`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PermissionsConfig {
    /// Public tool names or globs (`*`, `?`) that may run; empty means all.
    pub allowed_tools: Vec<String>,
    /// Public tool names or globs that never run; wins over `allowed_tools`.
    pub disallowed_tools: Vec<String>,
    #[serde(deserialize_with = "picogent_support::choice::one_of")]
    pub mode: PermissionMode,
    /// In `ask` mode, how long to wait for a human's yes or no before the call is denied.
    pub ask_timeout_ms: u64,
    /// In `ask` mode, public tool names or globs whose consequential calls need a human's yes, in
    /// addition to every tool annotated as destructive. A tracker tool judges which of its calls
    /// are consequential (`update_task` to `done`, `assign_task` to someone else); a listed tool
    /// that cannot tell (an external one) always asks. Empty: the annotations alone decide.
    pub ask_tools: Vec<String>,
    /// What a task or chat run may change (`tools::scope`): `run` (the default) its own task and
    /// thread, `project` anything in its own project, `any` anything the tools can reach.
    pub scope: RunScope,
    /// Public tool names or globs whose calls may reach past `scope` (for example `add_step` to
    /// let runs add steps to any task). Empty: none.
    pub cross_scope_tools: Vec<String>,
}

impl Default for PermissionsConfig {
    fn default() -> Self {
        PermissionsConfig {
            allowed_tools: Vec::new(),
            disallowed_tools: Vec::new(),
            mode: PermissionMode::Auto,
            ask_timeout_ms: 300_000,
            ask_tools: default_ask_tools(),
            scope: RunScope::Run,
            cross_scope_tools: Vec::new(),
        }
    }
}

/// `permissions.scope`: how far a run's writes may reach. Ordered: each allows what the one
/// before it does, and more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunScope {
    /// Its own task (status, steps, comments, assignment back to its creator) or its own thread.
    #[default]
    Run,
    /// Anything in the project of its task or chat.
    Project,
    /// Anything the tools can reach (the behaviour before scopes).
    Any,
}

impl RunScope {
    pub fn as_str(self) -> &'static str {
        match self {
            RunScope::Run => "run",
            RunScope::Project => "project",
            RunScope::Any => "any",
        }
    }
}

/// The tracker tools that reassign, reject or close a task, or rewrite what it asks for. None of
/// the 23 deletes anything; `take_task` cannot take a task from someone else (the tracker refuses).
pub fn default_ask_tools() -> Vec<String> {
    ["update_task", "assign_task", "reject_task"].map(str::to_string).to_vec()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PermissionMode {
    /// Every allowed tool runs.
    #[default]
    Auto,
    /// Only read-only tools run.
    ReadOnly,
    /// A destructive tool, or a consequential call of a tool in `ask_tools`, runs only after a
    /// human member answers `yes` in the conversation.
    Ask,
}
