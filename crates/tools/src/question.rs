//! `ask_person`: the model's clarifying question, asked in the run's task or thread of the
//! person it works for, the run `awaiting_input` until they reply ([`crate::person`]).

use std::time::Duration;

use futures::future::BoxFuture;

use serde_json::json;

use crate::person::{PersonAsker, Question, Reply, WaitEnd, reply_words};
use crate::scope::{Judgement, ReachError};
use crate::{CallEffect, ToolContext, ToolDefinition, ToolError, ToolResult, ToolSource};
use picogent_state::WaitKind;
use picogent_tracker::TrackerClient;
use picogent_tracker::model::MessageOut;

pub const ASK_PERSON: &str = "ask_person";

/// The longest question posted.
const MAX_QUESTION_CHARS: usize = 2_000;
/// The most options offered.
const MAX_OPTIONS: usize = 10;

/// The one tool, over the tracker.
#[derive(Debug, Clone)]
pub struct QuestionTool {
    asker: PersonAsker,
    timeout: Duration,
}

impl QuestionTool {
    pub fn new(client: TrackerClient, timeout: Duration) -> QuestionTool {
        QuestionTool { asker: PersonAsker::new(client), timeout }
    }

    pub fn with_poll_interval(mut self, interval: Duration) -> QuestionTool {
        self.asker = self.asker.with_poll_interval(interval);
        self
    }

    fn definition() -> ToolDefinition {
        let schema = json!({
            "type": "object",
            "properties": {
                "question": {"type": "string", "description": "What you need to know, in one or two sentences."},
                "options": {
                    "type": "array", "items": {"type": "string"}, "maxItems": MAX_OPTIONS,
                    "description": "Answers to choose from, if there are a few."
                }
            },
            "required": ["question"],
            "additionalProperties": false
        });
        let schema = crate::definition::object_schema(schema);
        ToolDefinition::new(
            ASK_PERSON,
            "Ask the person you work for a clarifying question, where they asked you (the task's comments or the \
             chat thread), and wait for their reply. Use it only when you cannot go on without their answer; the \
             answer comes back as this tool's result.",
            schema,
        )
        .with_hints(crate::kernel::write(false, false))
    }

    async fn ask(&self, arguments: &serde_json::Value, context: &ToolContext) -> ToolResult {
        let Some(question) = arguments.get("question").and_then(|q| q.as_str()).filter(|q| !q.trim().is_empty()) else {
            let got = arguments.get("question").map_or_else(|| "nothing".to_string(), |value| value.to_string());
            return ToolError::invalid("question", "the question to ask, as text", got).into_result();
        };
        let question = picogent_prompts::clean_text(question, MAX_QUESTION_CHARS);
        let options: Vec<String> = arguments
            .get("options")
            .and_then(|o| o.as_array())
            .map(|options| {
                options
                    .iter()
                    .filter_map(|option| option.as_str())
                    .map(|option| picogent_prompts::clean_text(option, 200))
                    .filter(|option| !option.trim().is_empty())
                    .take(MAX_OPTIONS)
                    .collect()
            })
            .unwrap_or_default();
        let mut text = format!("Question: {question}");
        if !options.is_empty() {
            text.push_str("\nChoose one: ");
            text.push_str(&options.iter().map(|option| format!("`{option}`")).collect::<Vec<_>>().join(", "));
        }
        let minutes = self.timeout.as_secs().div_ceil(60);
        text.push_str(&format!("\nReply here within {minutes} minutes."));
        let ask = Question {
            kind: WaitKind::Question,
            what: question.clone(),
            text,
            person: context.requester.clone(),
            timeout: self.timeout,
        };
        let read = |message: &MessageOut| {
            let words = reply_words(&message.content);
            (!words.is_empty()).then(|| words.to_string())
        };
        match self.asker.ask(context, &ask, read, |_| WaitEnd::Answered).await {
            Reply::Answer { value, by } => {
                let mut result = ToolResult::success(format!("@{by} answered: {value}"));
                result.structured = Some(json!({"answered_by": by, "answer": value}));
                result
            }
            Reply::TimedOut => {
                // Said once where it was asked, as an elicitation's timeout is.
                let told = format!("No answer within {minutes} minutes: I went on without the answer to my question.");
                if let Err(error) = self.asker.tell(context, &told, "timeout").await {
                    tracing::warn!(%error, "cannot tell the thread that a question timed out");
                }
                ToolResult::error(format!(
                    "No answer within {} s. Go on with what you know, and say in your answer what you assumed.",
                    self.timeout.as_secs()
                ))
            }
            Reply::Stopped | Reply::Interrupted => ToolResult::error("The run was stopped while it waited."),
            Reply::Unavailable { reason } => ToolResult::error(format!(
                "The question could not be asked: {reason}. Go on without it, or say in your answer what you need."
            )),
        }
    }
}

impl ToolSource for QuestionTool {
    fn tools(&self) -> Vec<ToolDefinition> {
        vec![QuestionTool::definition()]
    }

    fn effect(&self, name: &str, _arguments: &serde_json::Value, _context: &ToolContext) -> Option<CallEffect> {
        (name == ASK_PERSON).then_some(CallEffect::Routine)
    }

    /// It posts only where the run was asked.
    fn reach<'a>(
        &'a self,
        name: &'a str,
        _arguments: &'a serde_json::Value,
        _context: &'a ToolContext,
    ) -> BoxFuture<'a, Option<Result<Judgement, ReachError>>> {
        Box::pin(async move { (name == ASK_PERSON).then(|| Ok(Judgement::within_run())) })
    }

    fn call<'a>(
        &'a self,
        name: &'a str,
        arguments: serde_json::Value,
        context: &'a ToolContext,
    ) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            if name != ASK_PERSON {
                return ToolResult::error(format!("unknown tool `{name}`"));
            }
            self.ask(&arguments, context).await
        })
    }
}
