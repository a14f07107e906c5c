//! Asking a person before a call: the request in plain words, posted where the run was asked,
//! and the answer read from the thread (`ask` mode).

use std::collections::HashSet;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::ToolContext;
use picogent_tracker::TrackerClient;
use picogent_tracker::model::{MemberKind, MessageQuery, SendMessage};
use picogent_tracker::session::SessionKey;

/// A human's answer to a permission request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Approval {
    Approved {
        by: String,
    },
    Refused {
        by: String,
    },
    TimedOut,
    /// The question could not be asked (no conversation, tracker error, run cancelled).
    Unavailable {
        reason: String,
    },
}

/// What is asked: what the call would do, the tool, its arguments and why.
#[derive(Debug, Clone)]
pub struct ApprovalRequest {
    /// What the call would do in plain words ("move task TE-3 to done"), when its source can
    /// tell; the question then leads with it instead of the tool's name.
    pub action: Option<String>,
    pub public_name: String,
    pub server: Option<String>,
    pub original_name: String,
    pub arguments: serde_json::Value,
    pub reason: String,
}

/// The arguments shown in a question at most, so it always fits in one message (a description
/// can be as long as a message).
const MAX_SHOWN_ARGUMENTS_CHARS: usize = 4_000;

impl ApprovalRequest {
    /// The question posted on the tracker, waiting `timeout` for the answer.
    pub fn question(&self, timeout: Duration) -> String {
        let mut arguments =
            serde_json::to_string_pretty(&self.arguments).unwrap_or_else(|_| self.arguments.to_string());
        if let Some((cut, _)) = arguments.char_indices().nth(MAX_SHOWN_ARGUMENTS_CHARS) {
            arguments.truncate(cut);
            arguments.push_str("\n… (cut)");
        }
        let origin = match &self.server {
            Some(server) => format!(" (tool `{}` of MCP server `{server}`)", self.original_name),
            None => String::new(),
        };
        let ask = match &self.action {
            Some(action) => format!("may I {action}?\nTool: `{}`{origin}", self.public_name),
            None => format!("may I run `{}`{origin}?", self.public_name),
        };
        format!(
            "Permission needed: {ask}\nWhy: {}\nArguments:\n```json\n{arguments}\n```\nReply `yes` or `no` within {} seconds (no answer means no).",
            self.reason,
            timeout.as_secs()
        )
    }
}

/// Asks a human whether a call may run.
pub trait Asker: Send + Sync {
    fn ask<'a>(&'a self, request: &'a ApprovalRequest, context: &'a ToolContext) -> BoxFuture<'a, Approval>;
}

/// Asks in the run's task or thread on the tracker, then polls for a human member's `yes`/`no`.
#[derive(Debug, Clone)]
pub struct TrackerAsker {
    client: TrackerClient,
    timeout: Duration,
    poll_interval: Duration,
}

impl TrackerAsker {
    pub fn new(client: TrackerClient, timeout: Duration) -> TrackerAsker {
        TrackerAsker { client, timeout, poll_interval: Duration::from_millis(500) }
    }

    pub fn with_poll_interval(mut self, interval: Duration) -> TrackerAsker {
        self.poll_interval = interval;
        self
    }

    async fn ask_on_tracker(&self, request: &ApprovalRequest, context: &ToolContext) -> Approval {
        let no_place = || Approval::Unavailable { reason: "the run has no task or thread to ask in".to_string() };
        let Some(session) = &context.session else { return no_place() };
        let content = request.question(self.timeout);
        let (mut body, query) = match session {
            SessionKey::Prompt(_) => return no_place(),
            SessionKey::Task(task_id) => (
                SendMessage { content, task_id: Some(task_id.clone()), ..SendMessage::default() },
                MessageQuery { task_id: Some(task_id.clone()), ..MessageQuery::default() },
            ),
            SessionKey::Thread(root_message_id) => (
                SendMessage { content, parent_id: Some(root_message_id.clone()), ..SendMessage::default() },
                MessageQuery { parent_id: Some(root_message_id.clone()), ..MessageQuery::default() },
            ),
        };
        body.content = body.content.trim().to_string();
        let asked = match self.client.send_message(&body, None).await {
            Ok(message) => message,
            Err(error) => return Approval::Unavailable { reason: format!("cannot post the question: {error}") },
        };
        let humans: HashSet<String> = match self.client.list_members().await {
            Ok(members) => members.into_iter().filter(|m| m.kind == MemberKind::Human).map(|m| m.slug).collect(),
            Err(error) => return Approval::Unavailable { reason: format!("cannot list members: {error}") },
        };
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut after = asked.id.clone();
        loop {
            let page = MessageQuery { after: Some(after.clone()), limit: Some(200), ..query.clone() };
            match self.client.list_messages(&page).await {
                Ok(messages) => {
                    for message in &messages {
                        if !humans.contains(&message.author_slug) {
                            continue;
                        }
                        match parse_answer(&message.content) {
                            Some(true) => return Approval::Approved { by: message.author_slug.clone() },
                            Some(false) => return Approval::Refused { by: message.author_slug.clone() },
                            None => {}
                        }
                    }
                    if let Some(last) = messages.last() {
                        after = last.id.clone();
                    }
                }
                Err(error) => tracing::warn!(%error, "cannot read the answers to a permission request; trying again"),
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Approval::TimedOut;
            }
            tokio::select! {
                _ = tokio::time::sleep(self.poll_interval.min(deadline - now)) => {}
                _ = context.cancel.cancelled() => return Approval::Unavailable { reason: "the run was cancelled".to_string() },
            }
        }
    }
}

impl Asker for TrackerAsker {
    fn ask<'a>(&'a self, request: &'a ApprovalRequest, context: &'a ToolContext) -> BoxFuture<'a, Approval> {
        Box::pin(self.ask_on_tracker(request, context))
    }
}

/// `yes` / `no` (and a few synonyms) as the first word, after any `@mentions`.
pub fn parse_answer(content: &str) -> Option<bool> {
    let word = content
        .split_whitespace()
        .find(|w| !w.starts_with('@'))?
        .trim_matches(|c: char| !c.is_alphanumeric())
        .to_lowercase();
    match word.as_str() {
        "yes" | "y" | "approve" | "approved" | "ok" | "allow" => Some(true),
        "no" | "n" | "deny" | "denied" | "refuse" | "refused" => Some(false),
        _ => None,
    }
}
