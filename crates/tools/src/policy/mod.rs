//! The one tool policy (`permissions` in agent.json): which tools are offered and may run, and
//! whether a human must approve a destructive call first. [`PolicySource`] wraps a
//! [`ToolSource`] in it; [`governed`] builds the wrapper every user of tools goes through.
//!
//! Invariants:
//! - the policy governs every source it wraps, the tracker's tools included: the runtime, the
//!   `picogent tools` and `picogent mcp` commands all build their tools with [`governed`];
//! - names are matched by globs (`*` any run of characters, `?` one), the disallowed list winning
//!   over the allowed one; the per-server filter of the MCP host uses the same matcher;
//! - a tool is read-only only if its annotations say `readOnlyHint: true` (the MCP host already
//!   rewrote untrusted servers' annotations); a tool is destructive unless it is read-only or says
//!   `destructiveHint: false` — absent means destructive, as in the MCP spec;
//! - `ask` mode asks before a destructive call, and before a call of a tool in `ask_tools` that
//!   its source judges consequential ([`CallEffect`]: `update_task` to `done`, `assign_task` to
//!   someone else; a source that cannot judge, such as an external server, always asks). A call
//!   its source will refuse for its arguments is not asked about: it does nothing;
//! - the question says what the call would do in plain words, posted in the run's conversation;
//!   the agent waits for a human member's `yes` or `no`; no answer within `ask_timeout_ms`, no
//!   conversation, or a tracker error: denied;
//! - a task or chat run's writes stay within its scope (`permissions.scope`, default `run`: its
//!   own task and thread; [`crate::scope`]): the source judges how far a call reaches from
//!   its arguments (a tracker tool names its target; an external tool that may change or delete
//!   things reaches past any run); a call past the scope and not in `cross_scope_tools` is asked
//!   about in `ask` mode and refused otherwise, with the setting that allows it, and the run posts
//!   one notice about it in its task or thread. A context without a run is not scoped;
//! - a denied call is an error result telling the model why; every decision is logged with the
//!   server, original tool name, public name and annotations.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::combined::CombinedSource;
use crate::kernel::refusal;
use crate::scope::{Judgement, ReachError, RunPlace};
use crate::{CallEffect, ToolContext, ToolDefinition, ToolResult, ToolSource};
use crate::{PermissionMode, PermissionsConfig, RunScope};
use picogent_tracker::TrackerClient;
use picogent_tracker::model::SendMessage;

mod approval;

pub use approval::{Approval, ApprovalRequest, Asker, TrackerAsker, parse_answer};

/// Allowed when `allowed` is empty or a pattern in it matches, and no pattern in `disallowed` does.
pub fn allowed_by(allowed: &[String], disallowed: &[String], name: &str) -> bool {
    (allowed.is_empty() || allowed.iter().any(|p| glob_match(p, name)))
        && !disallowed.iter().any(|p| glob_match(p, name))
}

/// Matches `*` (any run of characters) and `?` (one character); everything else is literal.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let text: Vec<char> = text.chars().collect();
    // Two-pointer matching, backtracking to the last `*` seen.
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && (pattern[p] == '?' || pattern[p] == text[t]) {
            p += 1;
            t += 1;
        } else if p < pattern.len() && pattern[p] == '*' {
            star = Some((p, t));
            p += 1;
        } else if let Some((star_p, star_t)) = star {
            p = star_p + 1;
            t = star_t + 1;
            star = Some((star_p, star_t + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
}

/// Whether `pattern` can stand in a tool list of `permissions`: a public tool name or a glob
/// over them. Public names hold only letters, digits, `_` and `-` (the MCP host rewrites the
/// rest), so any other character is a mistake that would match nothing, as is a plain name that
/// is neither a tracker tool nor an MCP one (`mcp__…`). The error says what is wrong.
pub fn check_pattern(pattern: &str) -> Result<(), PatternError> {
    if pattern.trim().is_empty() {
        return Err(PatternError::Empty);
    }
    if let Some(bad) = pattern.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '*' | '?'))) {
        return Err(PatternError::BadCharacter { pattern: pattern.to_string(), character: bad });
    }
    let literal = !pattern.contains(['*', '?']);
    let known = crate::registry::tool_names().contains(&pattern)
        || crate::HOST_TOOLS.contains(&pattern)
        || pattern.starts_with("mcp__");
    if literal && !known {
        return Err(PatternError::UnknownTool { pattern: pattern.to_string() });
    }
    Ok(())
}

/// Why a pattern of a `permissions` tool list can never match a tool ([`check_pattern`]): the
/// config check reports it against the list's field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    /// The pattern is empty or only blanks.
    #[error("expected tool names or globs like get_*, not an empty one")]
    Empty,
    /// The pattern holds a character no public tool name has, so it matches nothing.
    #[error(
        "{pattern:?} is not a tool name or glob ({character:?} is not allowed): names hold letters, digits, `_` and `-`, \
         and globs add only `*` (any run of characters) and `?` (one character)"
    )]
    BadCharacter { pattern: String, character: char },
    /// A plain name that is neither a tracker tool nor an MCP one.
    #[error(
        "no tool is named {pattern:?}: `picogent tools list` shows the tracker's tools, and an MCP server's \
         are named mcp__<server>__<tool>"
    )]
    UnknownTool { pattern: String },
}

/// The permission policy in force.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub allowed_tools: Vec<String>,
    pub disallowed_tools: Vec<String>,
    pub mode: PermissionMode,
    /// In `ask` mode, the tools (globs) whose consequential calls ask besides destructive ones.
    pub ask_tools: Vec<String>,
}

impl Default for Policy {
    /// The policy of a config without a `permissions` section.
    fn default() -> Policy {
        Policy::from(&PermissionsConfig::default())
    }
}

impl Policy {
    /// Whether `name` passes `allowed_tools` / `disallowed_tools`.
    pub fn allows(&self, name: &str) -> bool {
        allowed_by(&self.allowed_tools, &self.disallowed_tools, name)
    }

    /// Whether `name` is in `ask_tools`.
    pub fn lists_for_asking(&self, name: &str) -> bool {
        self.ask_tools.iter().any(|pattern| glob_match(pattern, name))
    }

    /// Whether `tool` is offered at all: allowed by name, and read-only in `read_only` mode.
    pub fn offers(&self, tool: &ToolDefinition) -> bool {
        self.allows(&tool.name) && (self.mode != PermissionMode::ReadOnly || tool.is_trusted_read())
    }
}

impl From<&PermissionsConfig> for Policy {
    fn from(config: &PermissionsConfig) -> Policy {
        Policy {
            allowed_tools: config.allowed_tools.clone(),
            disallowed_tools: config.disallowed_tools.clone(),
            mode: config.mode,
            ask_tools: config.ask_tools.clone(),
        }
    }
}

/// How far a run's writes may reach: `permissions.scope` and `permissions.cross_scope_tools`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ScopeRule {
    pub scope: RunScope,
    pub cross_scope_tools: Vec<String>,
}

impl From<&PermissionsConfig> for ScopeRule {
    fn from(config: &PermissionsConfig) -> ScopeRule {
        ScopeRule { scope: config.scope, cross_scope_tools: config.cross_scope_tools.clone() }
    }
}

impl ScopeRule {
    /// Whether a call of `name` reaching `reach` may run.
    pub fn allows(&self, name: &str, reach: RunScope) -> bool {
        reach <= self.scope || self.cross_scope_tools.iter().any(|pattern| glob_match(pattern, name))
    }
}

/// A [`ToolSource`] that offers and runs only what the policy allows.
pub struct PolicySource {
    inner: Arc<dyn ToolSource>,
    policy: Policy,
    asker: Option<Arc<dyn Asker>>,
    scope: ScopeRule,
    /// Where the run's one notice about calls refused for its scope is posted; `None`: nowhere.
    notices: Option<TrackerClient>,
}

/// Why the policy refused a call. The call's result is an error with this text: the model
/// reads it and is told whether to retry or to do without.
#[derive(Debug, thiserror::Error)]
enum Refusal {
    /// The tool is not allowed by `permissions.allowed_tools` / `disallowed_tools`.
    #[error(
        "permission denied: the tool `{name}` is not allowed by this agent's tool policy; do not retry it, use another way or say you cannot"
    )]
    NotAllowed { name: String },
    /// The source could not judge how far the call reaches, so the run's scope cannot be checked.
    #[error("permission denied: {0}")]
    ScopeUnchecked(#[source] ReachError),
    /// The call reaches outside the run's scope, in `ask` mode, and no human can be asked.
    #[error("permission denied: `{name}` reaches outside this run and no human can be asked")]
    OutsideScopeNoAsker { name: String },
    /// The call reaches outside the run's scope, and `judgement` says how far and what the run
    /// may do instead.
    #[error(
        "refused: outside this run's scope: `{name}` would {}{}, and this run may only {}. Do not retry \
         it or look for another way to do it; say in your answer what you did not do. A person can allow \
         it with {}.",
        .judgement.what, .judgement.note, .judgement.run, widening(.judgement.reach, .name)
    )]
    OutsideScope { name: String, judgement: Judgement },
    /// The tool may change things, and the agent runs in `read_only` mode.
    #[error("permission denied: the agent runs in read-only mode and `{name}` may change things; do not retry it")]
    ReadOnlyMode { name: String },
    /// The call needs a human's approval in `ask` mode, and no human can be asked.
    #[error("permission denied: `{name}` needs a human's approval and none can be asked")]
    NoAsker { name: String },
    /// The human asked answered no.
    #[error("permission denied: {by} answered no to running `{name}`; do not retry it")]
    AnsweredNo { name: String, by: String },
    /// Nobody answered the question in time.
    #[error("permission denied: nobody approved running `{name}` in time; do not retry it now")]
    NotApprovedInTime { name: String },
    /// The question could not be asked; `reason` says why.
    #[error("permission denied: approval for `{name}` could not be asked ({reason})")]
    ApprovalUnavailable { name: String, reason: String },
}

/// The setting that would let a call reaching `reach` run, as a person writes it.
fn widening(reach: RunScope, name: &str) -> String {
    format!("permissions.scope: \"{}\" in agent.json, or `{name}` in permissions.cross_scope_tools", reach.as_str())
}

impl PolicySource {
    /// `asker` is needed only in `ask` mode; without one, destructive calls are denied there.
    /// Runs are held to the `run` scope; [`PolicySource::with_scope`] sets another.
    pub fn new(inner: Arc<dyn ToolSource>, policy: Policy, asker: Option<Arc<dyn Asker>>) -> PolicySource {
        PolicySource { inner, policy, asker, scope: ScopeRule::default(), notices: None }
    }

    /// The scope runs are held to, and the client that posts the one notice per run about the
    /// calls refused for it.
    pub fn with_scope(mut self, scope: ScopeRule, notices: Option<TrackerClient>) -> PolicySource {
        self.scope = scope;
        self.notices = notices;
        self
    }

    /// How far the call reaches: the source judges its own tools; an external tool that may
    /// change or delete things reaches past any run. `Err`: it could not be judged.
    async fn judge(
        &self,
        name: &str,
        tool: &ToolDefinition,
        arguments: &serde_json::Value,
        context: &ToolContext,
    ) -> Result<Judgement, ReachError> {
        if let Some(judged) = self.inner.reach(name, arguments, context).await {
            return judged;
        }
        let Some(place) = RunPlace::of(context) else { return Ok(Judgement::within_run()) };
        if !tool.is_destructive() {
            return Ok(Judgement::within_run());
        }
        let (server, original) = tool.origin();
        let what = match server {
            Some(server) => {
                format!("run `{original}` of MCP server `{server}`, a tool that may change or delete things")
            }
            None => format!("run `{name}`, a tool that may change or delete things"),
        };
        Ok(Judgement::beyond_run(RunScope::Any, what, &place))
    }

    /// Posts the run's one notice about a call refused for its scope, in the run's task or
    /// thread, once per run (the idempotency key holds it to one across a resume too).
    async fn notify(&self, name: &str, judgement: &Judgement, context: &ToolContext) {
        let Some(client) = &self.notices else { return };
        let Some(place) = RunPlace::of(context) else { return };
        if !context.scope_notice.first() {
            return;
        }
        let content = format!(
            "I did not do something this run was asked to: `{name}` would {}{}, and a run may only {} by default. \
             To allow such changes, set {}. Any other call outside this run is refused too, without another notice.",
            judgement.what,
            judgement.note,
            judgement.run,
            widening(judgement.reach, name)
        );
        let (task_id, parent_id) = match place {
            RunPlace::Task(task) => (Some(task), None),
            RunPlace::Thread(root) => (None, Some(root)),
        };
        let body = SendMessage { content, chat_id: None, task_id, parent_id, mentions: None, reply_to: None };
        let key = context.run_id.as_ref().map(|run| format!("{run}-scope-notice"));
        if let Err(error) = client.send_message(&body, key.as_deref()).await {
            tracing::warn!(%error, "cannot post the notice about a call outside the run's scope");
        }
    }

    async fn decide(&self, name: &str, arguments: &serde_json::Value, context: &ToolContext) -> Result<(), Refusal> {
        let Some(tool) = self.inner.tool(name) else {
            // Unknown names go through: the inner source answers with its own "unknown tool" error.
            return Ok(());
        };
        let (server, original) = tool.origin();
        let read_only = tool.is_read_only();
        let destructive = tool.is_destructive();
        // One readable line at debug: `tool reply_message (writes) allowed: auto mode`, the
        // MCP server and its own name for the tool when it comes from one.
        let kind = if read_only {
            "reads"
        } else if destructive {
            "may change or delete"
        } else {
            "writes"
        };
        let from = match &server {
            Some(server) if *original != *name => format!(", {original} of MCP server {server}"),
            Some(server) => format!(", of MCP server {server}"),
            None => String::new(),
        };
        let log = |decision: &str, why: &str| {
            tracing::debug!("tool {name} ({kind}{from}) {decision}: {why}");
        };
        if !self.policy.allows(name) {
            log("denied", "not allowed by permissions.allowed_tools / disallowed_tools");
            return Err(Refusal::NotAllowed { name: name.to_string() });
        }
        if self.policy.mode != PermissionMode::ReadOnly && RunPlace::of(context).is_some() {
            let judgement = match self.judge(name, &tool, arguments, context).await {
                Ok(judgement) => judgement,
                Err(error) => {
                    log("denied", "the run's scope could not be checked");
                    return Err(Refusal::ScopeUnchecked(error));
                }
            };
            if !self.scope.allows(name, judgement.reach) {
                let setting = widening(judgement.reach, name);
                if self.policy.mode == PermissionMode::Ask {
                    let Some(asker) = &self.asker else {
                        log("denied", "outside the run's scope, in ask mode without a way to ask");
                        return Err(Refusal::OutsideScopeNoAsker { name: name.to_string() });
                    };
                    let request = ApprovalRequest {
                        action: Some(judgement.what.clone()),
                        public_name: name.to_string(),
                        server: server.map(str::to_string),
                        original_name: original.to_string(),
                        arguments: arguments.clone(),
                        reason: format!(
                            "this is outside what this run may change{} (it may {}); {setting} would allow it without asking",
                            judgement.note, judgement.run
                        ),
                    };
                    let approval = asker.ask(&request, context).await;
                    let (decision, why) = approval_log(&approval);
                    log(decision, &format!("outside the run's scope: {why}"));
                    return approval_verdict(approval, name);
                }
                log("denied", &format!("outside the run's scope (permissions.scope: {})", self.scope.scope.as_str()));
                self.notify(name, &judgement, context).await;
                return Err(Refusal::OutsideScope { name: name.to_string(), judgement });
            }
        }
        match self.policy.mode {
            PermissionMode::Auto => {
                log("allowed", "auto mode");
                Ok(())
            }
            PermissionMode::ReadOnly if tool.is_trusted_read() => {
                log("allowed", "read-only tool in read_only mode");
                Ok(())
            }
            PermissionMode::ReadOnly => {
                log("denied", "not read-only in read_only mode");
                Err(Refusal::ReadOnlyMode { name: name.to_string() })
            }
            PermissionMode::Ask => {
                let listed = self.policy.lists_for_asking(name);
                if !destructive && !listed {
                    log("allowed", "neither destructive nor in permissions.ask_tools, in ask mode");
                    return Ok(());
                }
                let effect = self.inner.effect(name, arguments, context);
                let action = match effect {
                    Some(CallEffect::Refused) => {
                        log("allowed", "the tool refuses these arguments without acting; nothing to ask");
                        return Ok(());
                    }
                    Some(CallEffect::Routine) if !destructive => {
                        log("allowed", "in permissions.ask_tools, but this call is routine");
                        return Ok(());
                    }
                    Some(CallEffect::Consequential(action)) => Some(action),
                    Some(CallEffect::Routine) | None => None,
                };
                let Some(asker) = &self.asker else {
                    log("denied", "ask mode without a way to ask");
                    return Err(Refusal::NoAsker { name: name.to_string() });
                };
                let reason = if destructive {
                    match tool.description.as_str() {
                        "" => "the tool may change or delete things".to_string(),
                        d => format!("the tool may change or delete things; it is described as: {d}"),
                    }
                } else {
                    format!("I ask before this kind of change (`{name}` is in permissions.ask_tools)")
                };
                let request = ApprovalRequest {
                    action,
                    public_name: name.to_string(),
                    server: server.map(str::to_string),
                    original_name: original.to_string(),
                    arguments: arguments.clone(),
                    reason,
                };
                let approval = asker.ask(&request, context).await;
                let (decision, why) = approval_log(&approval);
                log(decision, &why);
                approval_verdict(approval, name)
            }
        }
    }
}

/// How an answer to a permission request is logged: the decision and why.
fn approval_log(approval: &Approval) -> (&'static str, String) {
    match approval {
        Approval::Approved { by } => ("approved", format!("approved by {by}")),
        Approval::Refused { by } => ("refused", format!("refused by {by}")),
        Approval::TimedOut => ("timed_out", "no answer in time".to_string()),
        Approval::Unavailable { reason } => ("denied", reason.clone()),
    }
}

/// Whether the call may run, or what the model reads about why not.
fn approval_verdict(approval: Approval, name: &str) -> Result<(), Refusal> {
    let name = name.to_string();
    match approval {
        Approval::Approved { .. } => Ok(()),
        Approval::Refused { by } => Err(Refusal::AnsweredNo { name, by }),
        Approval::TimedOut => Err(Refusal::NotApprovedInTime { name }),
        Approval::Unavailable { reason } => Err(Refusal::ApprovalUnavailable { name, reason }),
    }
}

impl ToolSource for PolicySource {
    fn tools(&self) -> Vec<ToolDefinition> {
        self.inner.tools().into_iter().filter(|tool| self.policy.offers(tool)).collect()
    }

    fn effect(&self, name: &str, arguments: &serde_json::Value, context: &ToolContext) -> Option<CallEffect> {
        self.inner.effect(name, arguments, context)
    }

    fn tool(&self, name: &str) -> Option<ToolDefinition> {
        self.inner.tool(name).filter(|tool| self.policy.offers(tool))
    }

    fn reach<'a>(
        &'a self,
        name: &'a str,
        arguments: &'a serde_json::Value,
        context: &'a ToolContext,
    ) -> BoxFuture<'a, Option<Result<Judgement, ReachError>>> {
        self.inner.reach(name, arguments, context)
    }

    fn call<'a>(
        &'a self,
        name: &'a str,
        arguments: serde_json::Value,
        context: &'a ToolContext,
    ) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            match self.decide(name, &arguments, context).await {
                Ok(()) => self.inner.call(name, arguments, context).await,
                Err(why) => refusal(why.to_string()),
            }
        })
    }
}

/// Tools ready for use: `sources` combined in this order (the registry first, then the MCP host,
/// if any), under `permissions`; in `ask` mode a [`TrackerAsker`] posts through `client`.
pub fn governed(
    sources: Vec<Arc<dyn ToolSource>>,
    permissions: &PermissionsConfig,
    client: &TrackerClient,
) -> PolicySource {
    let asker: Option<Arc<dyn Asker>> = match permissions.mode {
        PermissionMode::Ask => {
            Some(Arc::new(TrackerAsker::new(client.clone(), Duration::from_millis(permissions.ask_timeout_ms))))
        }
        _ => None,
    };
    PolicySource::new(Arc::new(CombinedSource::new(sources)), Policy::from(permissions), asker)
        .with_scope(ScopeRule::from(permissions), Some(client.clone()))
}

/// Tools for a person at the other end (`picogent mcp`, `picogent tools call`): the same
/// policy, except that `ask` mode does not ask on the tracker — the person calling is the human
/// who decides (an MCP host asks its user before each call), and there is no run's conversation
/// to ask in.
pub fn governed_for_person(sources: Vec<Arc<dyn ToolSource>>, permissions: &PermissionsConfig) -> PolicySource {
    let mut policy = Policy::from(permissions);
    if policy.mode == PermissionMode::Ask {
        policy.mode = PermissionMode::Auto;
    }
    // A person's call carries no run (no session), so the run's scope never applies to it.
    PolicySource::new(Arc::new(CombinedSource::new(sources)), policy, None)
        .with_scope(ScopeRule { scope: RunScope::Any, cross_scope_tools: Vec::new() }, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match() {
        let cases = [
            ("get_*", "get_task", true),
            ("get_*", "list_tasks", false),
            ("*_task", "take_task", true),
            ("?et_task", "get_task", true),
            ("get_task", "get_task", true),
            ("get_task", "get_tasks", false),
            ("*", "anything", true),
            ("*step*", "complete_step", true),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
        ];
        for (pattern, name, expected) in cases {
            assert_eq!(glob_match(pattern, name), expected, "{pattern} vs {name}");
        }
    }

    #[test]
    fn globs_match_stars_and_question_marks() {
        assert!(glob_match("mcp__git__*", "mcp__git__git_status"));
        assert!(glob_match("*status", "mcp__git__git_status"));
        assert!(glob_match("get_?ask", "get_task"));
        assert!(!glob_match("mcp__git__*", "mcp__time__get_current_time"));
        assert!(glob_match("*", ""));
        assert!(!glob_match("a", "ab"));
        assert!(glob_match("a*b*c", "aXXbYYc"));
    }

    #[test]
    fn disallowed_wins_over_allowed() {
        let allowed = vec!["mcp__*".to_string()];
        let disallowed = vec!["mcp__git__*".to_string()];
        assert!(allowed_by(&allowed, &disallowed, "mcp__time__x"));
        assert!(!allowed_by(&allowed, &disallowed, "mcp__git__x"));
        assert!(!allowed_by(&allowed, &disallowed, "send_message"));
        assert!(allowed_by(&[], &[], "anything"));
    }

    #[test]
    fn policy_disallowed_wins() {
        let policy = Policy {
            allowed_tools: vec!["get_*".into(), "list_tasks".into()],
            disallowed_tools: vec!["get_member".into()],
            mode: PermissionMode::Auto,
            ask_tools: vec![],
        };
        assert!(policy.allows("get_task"));
        assert!(policy.allows("list_tasks"));
        assert!(!policy.allows("get_member"));
        assert!(!policy.allows("create_task"));
    }

    #[test]
    fn patterns_are_checked_for_what_can_never_match() {
        for good in
            ["update_task", "mcp__git__*", "*_task", "get_?ask", "mcp__every-thing__x", "read_mcp_resource", "*"]
        {
            assert_eq!(check_pattern(good), Ok(()), "{good}");
        }
        let cases = [
            ("", "not an empty one"),
            ("  ", "not an empty one"),
            ("update task", "' ' is not allowed"),
            ("mcp__git__[a-z]*", "'[' is not allowed"),
            ("mcp.git.*", "'.' is not allowed"),
            ("update_tasks", "no tool is named \"update_tasks\""),
        ];
        for (bad, why) in cases {
            let error = check_pattern(bad).unwrap_err().to_string();
            assert!(error.contains(why), "{bad:?}: {error}");
        }
    }

    #[test]
    fn a_question_leads_with_what_the_call_would_do_and_always_fits_a_message() {
        let request = ApprovalRequest {
            action: Some("move task TE-3 to done".to_string()),
            public_name: "update_task".to_string(),
            server: None,
            original_name: "update_task".to_string(),
            arguments: serde_json::json!({"task_id": "TE-3", "status": "done"}),
            reason: "I ask before this kind of change".to_string(),
        };
        let question = request.question(Duration::from_secs(300));
        assert!(question.starts_with("Permission needed: may I move task TE-3 to done?\nTool: `update_task`\n"));
        assert!(
            question.contains("\"status\": \"done\"") && question.ends_with("within 300 seconds (no answer means no).")
        );
        let long = ApprovalRequest {
            action: None,
            arguments: serde_json::json!({"description": "é".repeat(picogent_tracker::model::limits::DESCRIPTION)}),
            server: Some("git".to_string()),
            original_name: "git_commit".to_string(),
            public_name: "mcp__git__git_commit".to_string(),
            ..request
        };
        let question = long.question(Duration::from_secs(300));
        assert!(question.starts_with(
            "Permission needed: may I run `mcp__git__git_commit` (tool `git_commit` of MCP server `git`)?"
        ));
        assert!(question.contains("… (cut)"), "{}", question.chars().take(200).collect::<String>());
        assert!(question.chars().count() < picogent_tracker::model::limits::CONTENT, "{}", question.len());
    }

    #[test]
    fn answers_are_read_from_the_first_word() {
        assert_eq!(parse_answer("yes"), Some(true));
        assert_eq!(parse_answer("@picogent Yes, go ahead."), Some(true));
        assert_eq!(parse_answer("no!"), Some(false));
        assert_eq!(parse_answer("maybe later"), None);
        assert_eq!(parse_answer(""), None);
    }
}
