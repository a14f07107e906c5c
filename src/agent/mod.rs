//! The tool-use loop: send the conversation and the offered tools to the model, run the tool
//! calls it asks for, append the results, and go again until a final text answer or a limit.
//!
//! Invariants:
//! - Every run ends with one [`RunOutcome`] and a final message; none ends silently.
//! - Budgets (`limits.max_turns`, `max_tool_calls`, `max_tokens_per_run`, `run_timeout_ms`) are
//!   checked before they could be overshot: no request is sent that cannot fit in the remaining
//!   tokens (its `max_output_tokens` is what remains after the counted prompt), no tool call runs
//!   past the call budget. The prompt is counted with o200k before sending; a real server whose
//!   tokenizer counts more can push the total a little past the budget on the last turn, which
//!   then ends the run.
//! - The system prompt and the tool list come first and are byte-identical on every turn of a run
//!   (the tool list in the source's fixed order), so provider-side prompt caching works.
//! - Every tool call the model made gets exactly one tool message, even when it was not run,
//!   so the returned conversation is always valid to send again (a session resumes from it).

mod dispatch;
mod record;

use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use record::{RunOutcome, RunRecord, ToolCallCounts, ToolCallOutcome, ToolCallRecord};

use crate::config::Limits;
use crate::llm::{ChatModel, ChatRequest, LlmError, Message};
use crate::tools::{ToolContext, ToolSource};
use dispatch::{CallResult, OfferedTools, TurnContext};

/// A request is only sent if at least this many completion tokens fit in the budget after it.
pub const MIN_COMPLETION_TOKENS: u64 = 16;

/// The text that replaces a tool result dropped to fit the context window.
pub const DROPPED_RESULT_NOTE: &str = "[result dropped to fit the context window]";

/// What a run works with. Everything is passed in; the loop reads no globals.
pub struct RunSetup<'a> {
    pub model: &'a dyn ChatModel,
    pub tools: &'a dyn ToolSource,
    /// The names of the tools offered in this run (a subset of `tools`); a call to any other name
    /// is an unknown-tool error result. Offered in the source's order, whatever the order here.
    pub offered_tools: Vec<String>,
    pub limits: Limits,
    /// Passed to every tool call; its `cancel` is replaced by a token the run cancels when it
    /// stops. An `idempotency_key`, if set, is extended per call (`{key}-t{turn}-c{index}`).
    pub tool_context: ToolContext,
    /// Cancelling it stops the run promptly, during a model request or a tool call.
    pub cancel: CancellationToken,
    /// Extra user inputs (steering), drained at each turn boundary and appended as user messages.
    pub steering: Option<UnboundedReceiver<String>>,
}

/// The conversation a run starts from.
#[derive(Debug, Clone)]
pub struct RunInput {
    pub system_prompt: String,
    /// Earlier messages of the session (no system prompt), as returned by an earlier run.
    pub history: Vec<Message>,
    /// The new user message that starts this run.
    pub prompt: String,
}

/// What a run returns.
#[derive(Debug, Clone)]
pub struct RunOutput {
    pub record: RunRecord,
    /// The session after the run: `history`, the prompt, every turn and tool result, steering
    /// inputs; without the system prompt. Pass it as `history` to resume the session.
    pub conversation: Vec<Message>,
}

/// Why a wait ended early.
enum Interrupt {
    Cancelled,
    Deadline,
}

/// Runs the loop until a final answer or a limit. Never fails: failures are outcomes.
pub async fn run(setup: RunSetup<'_>, input: RunInput) -> RunOutput {
    let started = Instant::now();
    let deadline = started + Duration::from_millis(setup.limits.run_timeout_ms);
    let run_cancel = setup.cancel.child_token();
    let mut tool_context = setup.tool_context.clone();
    tool_context.cancel = run_cancel.clone();
    let offered = OfferedTools::new(setup.tools.tools(), &setup.offered_tools);
    let mut steering = setup.steering;

    let mut messages = Vec::with_capacity(input.history.len() + 2);
    messages.push(Message::system(input.system_prompt));
    messages.extend(input.history);
    messages.push(Message::user(input.prompt));

    let mut record = RunRecord::new();
    let limits = &setup.limits;
    let mut trimmed_for_this_turn = false;
    let mut prompt_tokens = crate::llm::PromptCounter::new(offered.tokens);

    let outcome = loop {
        if let Some(receiver) = steering.as_mut() {
            while let Ok(text) = receiver.try_recv() {
                messages.push(Message::user(text));
                record.steering_inputs += 1;
            }
        }
        if setup.cancel.is_cancelled() {
            break RunOutcome::Cancelled;
        }
        if Instant::now() >= deadline {
            break RunOutcome::Deadline;
        }
        if record.turns >= limits.max_turns {
            break RunOutcome::BudgetTurns;
        }
        let prompt_estimate = prompt_tokens.estimate(&messages);
        let remaining_tokens = limits.max_tokens_per_run.saturating_sub(record.total_tokens());
        if prompt_estimate + MIN_COMPLETION_TOKENS > remaining_tokens {
            record.detail = Some(format!(
                "the next request needs about {prompt_estimate} prompt tokens plus {MIN_COMPLETION_TOKENS} for the \
                 answer; {remaining_tokens} of {} remain",
                limits.max_tokens_per_run
            ));
            break RunOutcome::BudgetTokens;
        }
        let max_output_tokens = u32::try_from(remaining_tokens - prompt_estimate).unwrap_or(u32::MAX);
        let request =
            ChatRequest { messages: &messages, tools: &offered.specs, max_output_tokens: Some(max_output_tokens) };

        let model_started = Instant::now();
        let answer = tokio::select! {
            _ = setup.cancel.cancelled() => Err(Interrupt::Cancelled),
            _ = tokio::time::sleep_until(deadline) => Err(Interrupt::Deadline),
            answer = setup.model.complete(&request) => Ok(answer),
        };
        record.model_time_ms += millis(model_started.elapsed());
        let answer = match answer {
            Err(Interrupt::Cancelled) => break RunOutcome::Cancelled,
            Err(Interrupt::Deadline) => break RunOutcome::Deadline,
            Ok(Err(LlmError::ContextLength { message })) if !trimmed_for_this_turn => {
                trimmed_for_this_turn = true;
                match drop_old_tool_results(&mut messages) {
                    Some(note) => {
                        prompt_tokens.reset();
                        tracing::info!(%note, "context length exceeded; retrying once with old tool results dropped");
                        record.context_trims.push(note);
                        continue;
                    }
                    None => {
                        record.detail =
                            Some(format!("context length exceeded and nothing could be dropped: {message}"));
                        break RunOutcome::ModelError;
                    }
                }
            }
            Ok(Err(error)) => {
                record.detail = Some(error.to_string());
                break RunOutcome::ModelError;
            }
            Ok(Ok(answer)) => answer,
        };
        trimmed_for_this_turn = false;
        record.turns += 1;
        record.prompt_tokens += answer.usage.prompt_tokens;
        record.completion_tokens += answer.usage.completion_tokens;
        record.tokens_estimated |= answer.usage.estimated;
        let turn = record.turns;
        let content = answer.content.filter(|text| !text.trim().is_empty());
        messages.push(Message::Assistant {
            content: content.clone(),
            tool_calls: answer.tool_calls.clone(),
            refusal: answer.refusal.clone(),
        });

        if answer.tool_calls.is_empty() {
            match (content, answer.refusal) {
                (_, Some(refusal)) => {
                    record.detail = Some(format!("the model declined: {refusal}"));
                    break RunOutcome::Refusal;
                }
                (Some(text), None) => {
                    record.final_message = text;
                    break RunOutcome::Completed;
                }
                (None, None) if answer.finish_reason == crate::llm::FinishReason::ContentFilter => {
                    record.detail = Some("the answer was withheld by the server's content filter".to_string());
                    break RunOutcome::Refusal;
                }
                (None, None) if answer.finish_reason == crate::llm::FinishReason::Length => {
                    // The answer was cut at the output cap, which is what remained of the budget.
                    record.detail = Some(format!(
                        "the answer was cut at {max_output_tokens} output tokens, what remained of the budget"
                    ));
                    break RunOutcome::BudgetTokens;
                }
                (None, None) => {
                    record.detail = Some(format!("finish reason {:?}", answer.finish_reason));
                    break RunOutcome::EmptyAnswer;
                }
            }
        }

        let remaining_calls = limits.max_tool_calls.saturating_sub(record.tool_calls) as usize;
        let (to_run, over_budget) = answer.tool_calls.split_at(remaining_calls.min(answer.tool_calls.len()));
        let mut results: Vec<Option<CallResult>> = vec![None; to_run.len()];
        let context = TurnContext {
            source: setup.tools,
            offered: &offered,
            tool_context: &tool_context,
            run_start: started,
            turn,
            max_result_bytes: limits.max_tool_result_bytes,
        };
        let tools_started = Instant::now();
        let interrupted = tokio::select! {
            _ = setup.cancel.cancelled() => Some(RunOutcome::Cancelled),
            _ = tokio::time::sleep_until(deadline) => Some(RunOutcome::Deadline),
            _ = dispatch::run_calls(&context, to_run, &mut results) => None,
        };
        if interrupted.is_some() {
            // Tools still running see the cancellation and give up.
            run_cancel.cancel();
        }
        record.tool_time_ms += millis(tools_started.elapsed());
        let now_us = dispatch::micros_since(started);
        for (call, result) in to_run.iter().zip(results) {
            let (call_record, message) =
                result.unwrap_or_else(|| dispatch::not_run(call, turn, now_us, "the run was stopped before it ran"));
            record.add_call(call_record);
            messages.push(message);
        }
        let budget_note = format!("the run's budget of {} tool calls is spent", limits.max_tool_calls);
        for call in over_budget {
            let (call_record, message) = dispatch::not_run(call, turn, now_us, &budget_note);
            record.add_call(call_record);
            messages.push(message);
        }
        if let Some(outcome) = interrupted {
            break outcome;
        }
        if !over_budget.is_empty() {
            record.detail = Some(format!(
                "turn {turn} asked for {} tool calls; {} ran within the budget of {}",
                answer.tool_calls.len(),
                to_run.len(),
                limits.max_tool_calls
            ));
            break RunOutcome::BudgetToolCalls;
        }
    };

    run_cancel.cancel();
    record.outcome = outcome;
    if outcome != RunOutcome::Completed {
        record.final_message = outcome.describe(&record);
    }
    record.wall_time_ms = millis(started.elapsed());
    tracing::info!(
        outcome = ?record.outcome,
        turns = record.turns,
        tool_calls = record.tool_calls,
        tokens = record.total_tokens(),
        "run finished"
    );
    messages.remove(0);
    RunOutput { record, conversation: messages }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Replaces the oldest tool results with a short note, keeping the system prompt, every user
/// message (the original request included), and the last two assistant turns with their results.
/// Returns a note of what was dropped, or `None` if nothing could be.
fn drop_old_tool_results(messages: &mut [Message]) -> Option<String> {
    let assistant_positions: Vec<usize> = messages
        .iter()
        .enumerate()
        .filter(|(_, message)| matches!(message, Message::Assistant { .. }))
        .map(|(index, _)| index)
        .collect();
    let keep_from = match assistant_positions.len() {
        0..=1 => return None,
        n => assistant_positions[n - 2],
    };
    let mut dropped: Vec<String> = Vec::new();
    for message in &mut messages[..keep_from] {
        if let Message::Tool { name, content, .. } = message
            && content != DROPPED_RESULT_NOTE
        {
            *content = DROPPED_RESULT_NOTE.to_string();
            dropped.push(name.clone());
        }
    }
    (!dropped.is_empty()).then(|| {
        format!("dropped {} old tool results to fit the context window: {}", dropped.len(), dropped.join(", "))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ToolCall;

    fn turn(id: &str) -> [Message; 2] {
        [
            Message::Assistant {
                content: None,
                tool_calls: vec![ToolCall { id: id.into(), name: "get_task".into(), arguments: "{}".into() }],
                refusal: None,
            },
            Message::Tool { tool_call_id: id.into(), name: "get_task".into(), content: "big".into(), is_error: false },
        ]
    }

    #[test]
    fn trimming_keeps_the_last_two_turns_and_the_request() {
        let mut messages = vec![Message::system("s"), Message::user("Task: TE-1")];
        for id in ["a", "b", "c"] {
            messages.extend(turn(id));
        }
        let note = drop_old_tool_results(&mut messages).unwrap();
        assert!(note.contains("dropped 1 old tool results"), "{note}");
        assert_eq!(messages[3].text(), DROPPED_RESULT_NOTE);
        assert_eq!(messages[5].text(), "big");
        assert_eq!(messages[7].text(), "big");
        assert_eq!(messages[1].text(), "Task: TE-1");
        assert!(drop_old_tool_results(&mut messages).is_none(), "nothing left to drop");
    }
}
