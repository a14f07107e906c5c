//! Asking a person before a call: the request in plain words, posted where the run was asked,
//! and the answer read from the thread (`ask` mode), the run `awaiting_input` meanwhile.

use std::time::Duration;

use futures::future::BoxFuture;

use crate::ToolContext;
use crate::person::{PersonAsker, Question, Reply, WaitEnd};
use picogent_state::WaitKind;
use picogent_tracker::TrackerClient;
use picogent_tracker::model::MessageOut;

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

/// Asks in the run's task or thread on the tracker, mentioning the person who asked for the run,
/// then reads their `yes`/`no` ([`crate::person`]: the run is `awaiting_input` meanwhile). Only
/// that person's answer counts; where the run has no requester who is a person (a task a bot
/// assigned, a prompt), any human member's.
#[derive(Debug, Clone)]
pub struct TrackerAsker {
    asker: PersonAsker,
    timeout: Duration,
}

impl TrackerAsker {
    pub fn new(client: TrackerClient, timeout: Duration) -> TrackerAsker {
        TrackerAsker { asker: PersonAsker::new(client), timeout }
    }

    pub fn with_poll_interval(mut self, interval: Duration) -> TrackerAsker {
        self.asker = self.asker.with_poll_interval(interval);
        self
    }

    async fn ask_on_tracker(&self, request: &ApprovalRequest, context: &ToolContext) -> Approval {
        let what = match &request.action {
            Some(action) => format!("may I {action}?"),
            None => format!("may I run `{}`?", request.public_name),
        };
        let question = Question {
            kind: WaitKind::Approval,
            what,
            text: request.question(self.timeout),
            person: context.requester.clone(),
            timeout: self.timeout,
        };
        let read = |message: &MessageOut| parse_answer(&message.content);
        let ended = |yes: &bool| if *yes { WaitEnd::Answered } else { WaitEnd::Declined };
        match self.asker.ask(context, &question, read, ended).await {
            Reply::Answer { value: true, by } => Approval::Approved { by },
            Reply::Answer { value: false, by } => Approval::Refused { by },
            Reply::TimedOut => Approval::TimedOut,
            Reply::Stopped | Reply::Interrupted => {
                Approval::Unavailable { reason: "the run was cancelled".to_string() }
            }
            Reply::Unavailable { reason } => Approval::Unavailable { reason },
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
