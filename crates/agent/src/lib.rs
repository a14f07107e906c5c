//! The tool-use loop: send the conversation and the offered tools to the model, run the tool
//! calls it asks for, append the results, and go again until a final text answer or a limit.
//!
//! Invariants:
//! - Every run ends with one [`RunOutcome`] and a final message; none ends silently.
//! - Budgets (`limits.max_turns`, `max_tool_calls`, `max_tokens_per_run`, `run_timeout_ms` — not counting the time a call waits for a person) are
//!   checked before they could be overshot: no request is sent that cannot fit in the remaining
//!   tokens (its `max_output_tokens` is what remains after the counted prompt), no tool call runs
//!   past the call budget. The prompt is counted with o200k before sending; a real server whose
//!   tokenizer counts more can push the total a little past the budget on the last turn, which
//!   then ends the run.
//! - The system prompt and the tool list come first and are byte-identical on every turn of a run
//!   (the tool list in the source's fixed order), so provider-side prompt caching works.
//! - Every tool call the model made gets exactly one tool message, even when it was not run,
//!   so the returned conversation is always valid to send again (a session resumes from it).
//! - An answer cut off (`finish_reason: length`) is blamed on the cap that set its request's
//!   `max_output_tokens` ([`OutputBound`]): the configured output limit or the context window's
//!   room is `CutOff`; only what remained of the run's budget is `BudgetTokens`.
//! - A run that must act (`expects_tool_calls`, a task run) and ends with text without ever
//!   calling a tool is `DidNothing`, never `Completed`.
//!
//! Where things are: `lib.rs` (`run`: one phase per method of `Turns`; `RunOutcome` and
//! `RunOutcome::status`, the one mapping to the stored `RunStatus`; `OutputBound`); `dispatch.rs`
//! (arguments repaired or refused once, `PreparedCall`; cut-off, repeated and extra calls refused
//! by rule; every tool result cleaned); `context.rs` (`fit_history`, `drop_oldest`: a session kept
//! within the context window); `record.rs` (the run record); `limits.rs` (`Limits`, the `limits`
//! section of `agent.json`, its defaults and its checks).

mod context;
mod dispatch;
mod limits;
mod record;

use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use limits::Limits;
pub use record::{CutOffAt, OutputBound, RunOutcome, RunRecord, ToolCallCounts, ToolCallOutcome, ToolCallRecord};

use dispatch::{CallResult, OfferedTools, PreparedCall, TurnContext};
use picogent_llm::{ChatModel, ChatRequest, LlmError, Message, ModelFailure};
use picogent_tools::{ToolContext, ToolSource};

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
    /// What the model and its server allow.
    pub window: ModelWindow,
    /// Gets the record and the conversation so far after every turn, for whoever shows a run
    /// while it runs (the run inspector reads them from the state database).
    pub checkpoint: Option<tokio::sync::watch::Sender<Option<RunOutput>>>,
    /// The run is there to act through its tools (working a task): a text answer from a run that
    /// called no tool at all ends it `DidNothing`, not `Completed`. A run answering a question
    /// may answer in text alone.
    pub expects_tool_calls: bool,
}

/// What the model and its server allow a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelWindow {
    /// The context window (`llm.context_tokens`): no request is sent that does not fit in it.
    pub context_tokens: u64,
    /// The configured cap of one answer (`llm.max_output_tokens`).
    pub output_cap: u32,
    /// `llm.parallel_tool_calls: false`: one call of a turn runs, the others are refused, also
    /// when the server ignored the setting.
    pub one_call_per_turn: bool,
}

impl ModelWindow {
    pub fn from_config(config: &picogent_llm::config::LlmConfig) -> ModelWindow {
        ModelWindow {
            context_tokens: config.context_tokens,
            output_cap: config.max_output_tokens.unwrap_or(picogent_llm::openai::DEFAULT_MAX_OUTPUT_TOKENS),
            one_call_per_turn: config.parallel_tool_calls == Some(false),
        }
    }
}

impl Default for ModelWindow {
    fn default() -> ModelWindow {
        ModelWindow::from_config(&picogent_llm::config::LlmConfig::new("http://127.0.0.1/v1", "model"))
    }
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

/// What a step of the loop decided.
enum Step<T> {
    /// Go on with this.
    Go(T),
    /// Ask the model again at once (after a context trim).
    Again,
    /// The run ends with this outcome.
    End(RunOutcome),
}

/// Runs the loop until a final answer or a limit. Never fails: failures are outcomes.
pub async fn run(setup: RunSetup<'_>, input: RunInput) -> RunOutput {
    let mut run = Turns::new(setup, input);
    let outcome = loop {
        let room = match run.before_turn() {
            Step::Go(room) => room,
            Step::Again => continue,
            Step::End(outcome) => break outcome,
        };
        let answer = match run.ask_model(room.tokens).await {
            Step::Go(answer) => answer,
            Step::Again => continue,
            Step::End(outcome) => break outcome,
        };
        let calls = match run.take_answer(answer, room) {
            Step::Go(calls) => calls,
            Step::Again => continue,
            Step::End(outcome) => break outcome,
        };
        if let Some(outcome) = run.run_tools(calls).await {
            break outcome;
        }
        run.checkpoint();
    };
    run.finish(outcome)
}

/// One run's loop in progress: the conversation so far and its account.
struct Turns<'a> {
    setup: RunSetup<'a>,
    offered: OfferedTools,
    tool_context: ToolContext,
    /// Cancelled when the run ends or is interrupted, so tools still running give up.
    run_cancel: CancellationToken,
    started: Instant,
    deadline: Instant,
    /// The system prompt first; returned without it.
    messages: Vec<Message>,
    /// Where this run's prompt is in `messages`: what comes before it (after the system prompt)
    /// is the stored session, which may be shortened to fit the context window.
    prompt_index: usize,
    record: RunRecord,
    prompt_tokens: picogent_llm::PromptCounter,
    /// Set after a context-length error led to a trim: a second one in the same turn ends the run.
    trimmed_for_this_turn: bool,
    /// The last call that ran (name, arguments), how many times in a row, and in which turn.
    last_call: Option<(String, serde_json::Value, u32, u32)>,
}

impl<'a> Turns<'a> {
    fn new(mut setup: RunSetup<'a>, input: RunInput) -> Turns<'a> {
        let started = Instant::now();
        let run_cancel = setup.cancel.child_token();
        let mut tool_context = setup.tool_context.clone();
        tool_context.cancel = run_cancel.clone();
        let offered =
            OfferedTools::new(setup.tools.tools(), &std::mem::take(&mut setup.offered_tools), &tool_context.fence);
        let mut record = RunRecord::new();
        let mut history = input.history;
        let fixed = picogent_llm::count_text_tokens(&input.system_prompt)
            + picogent_llm::count_text_tokens(&input.prompt)
            + offered.tokens;
        if let Some(note) = context::fit_history(&mut history, history_budget(&setup, fixed)) {
            tracing::info!(%note, "the stored session was shortened to fit");
            record.context_trims.push(note);
        }
        let mut messages = Vec::with_capacity(history.len() + 2);
        messages.push(Message::system(input.system_prompt));
        messages.extend(history);
        let prompt_index = messages.len();
        messages.push(Message::user(input.prompt));
        Turns {
            deadline: started + Duration::from_millis(setup.limits.run_timeout_ms),
            prompt_tokens: picogent_llm::PromptCounter::new(offered.tokens),
            setup,
            offered,
            tool_context,
            run_cancel,
            started,
            messages,
            prompt_index,
            record,
            trimmed_for_this_turn: false,
            last_call: None,
        }
    }

    /// Takes in steering and checks every budget before a request; gives the output cap the
    /// request may ask for, and what set it.
    fn before_turn(&mut self) -> Step<CutOffAt> {
        if let Some(receiver) = self.setup.steering.as_mut() {
            while let Ok(text) = receiver.try_recv() {
                // Steering was worded before this run's fence was known (`prompts::fence_pending`).
                self.messages.push(Message::user(self.tool_context.fence.settle(&text)));
                self.record.steering_inputs += 1;
            }
            // The tools' post guard names what a post answers from what the loop took in.
            self.tool_context.steering_taken = self.record.steering_inputs;
        }
        let limits = &self.setup.limits;
        if self.setup.cancel.is_cancelled() {
            return Step::End(RunOutcome::Cancelled);
        }
        if self.tool_context.wait_clock.has_passed(self.deadline) {
            return Step::End(RunOutcome::Deadline);
        }
        if self.record.turns >= limits.max_turns {
            return Step::End(RunOutcome::BudgetTurns);
        }
        let prompt_estimate = self.prompt_tokens.estimate(&self.messages);
        let context = self.setup.window.context_tokens;
        if prompt_estimate + MIN_COMPLETION_TOKENS > context {
            let detail = format!(
                "the next request needs about {prompt_estimate} tokens, more than the model's context window \
                 (llm.context_tokens {context}), and nothing more can be dropped"
            );
            return self.make_room("the next request would not fit the context window; shortened", detail);
        }
        let remaining_tokens = limits.max_tokens_per_run.saturating_sub(self.record.total_tokens());
        if prompt_estimate + MIN_COMPLETION_TOKENS > remaining_tokens {
            self.record.detail = Some(format!(
                "the next request needs about {prompt_estimate} prompt tokens plus {MIN_COMPLETION_TOKENS} for the \
                 answer; {remaining_tokens} of {} remain",
                limits.max_tokens_per_run
            ));
            return Step::End(RunOutcome::BudgetTokens);
        }
        Step::Go(output_room(
            self.setup.window.output_cap,
            context - prompt_estimate,
            remaining_tokens - prompt_estimate,
        ))
    }

    /// The request does not fit the context window: drops old tool results of this run, then
    /// older messages of the stored session, and asks again; ends the run with `detail` when
    /// nothing is left to drop.
    fn make_room<T>(&mut self, what: &str, detail: String) -> Step<T> {
        let note = drop_old_tool_results(&mut self.messages)
            .or_else(|| context::drop_oldest(&mut self.messages, &mut self.prompt_index));
        match note {
            Some(note) => {
                self.prompt_tokens.reset();
                tracing::info!(%note, "{what}");
                self.record.context_trims.push(note);
                Step::Again
            }
            None => {
                self.record.detail = Some(detail);
                self.record.model_failure = Some(ModelFailure::ContextLength);
                Step::End(RunOutcome::ModelError)
            }
        }
    }

    /// Sends one request; a context-length error is met once per turn by dropping old tool
    /// results and asking again.
    async fn ask_model(&mut self, max_output_tokens: u32) -> Step<picogent_llm::ChatResponse> {
        let request = ChatRequest {
            messages: &self.messages,
            tools: &self.offered.specs,
            max_output_tokens: Some(max_output_tokens),
        };
        let model_started = Instant::now();
        let answer = tokio::select! {
            _ = self.setup.cancel.cancelled() => Err(Interrupt::Cancelled),
            _ = self.tool_context.wait_clock.passed(self.deadline) => Err(Interrupt::Deadline),
            answer = self.setup.model.complete(&request) => Ok(answer),
        };
        self.record.model_time_ms += millis(model_started.elapsed());
        match answer {
            Err(Interrupt::Cancelled) => Step::End(RunOutcome::Cancelled),
            Err(Interrupt::Deadline) => Step::End(RunOutcome::Deadline),
            Ok(Err(LlmError::ContextLength { message })) if !self.trimmed_for_this_turn => {
                self.trimmed_for_this_turn = true;
                let detail = format!("context length exceeded and nothing could be dropped: {message}");
                self.make_room("context length exceeded; retrying once with older context dropped", detail)
            }
            Ok(Err(error)) => {
                self.record.detail = Some(error.to_string());
                self.record.model_failure = Some(error.kind());
                Step::End(RunOutcome::ModelError)
            }
            Ok(Ok(answer)) => {
                self.trimmed_for_this_turn = false;
                Step::Go(answer)
            }
        }
    }

    /// Counts the answer and adds it to the conversation (its tool calls with valid JSON
    /// arguments); an answer without tool calls ends the run, with its text as the final message
    /// or a reason why there is none.
    fn take_answer(&mut self, answer: picogent_llm::ChatResponse, room: CutOffAt) -> Step<Vec<PreparedCall>> {
        let record = &mut self.record;
        record.turns += 1;
        record.add_usage(&answer.usage);
        record.finish_reason = Some(answer.finish_reason);
        let content = answer.content.filter(|text| !text.trim().is_empty());
        let mut calls: Vec<PreparedCall> =
            answer.tool_calls.into_iter().map(|call| PreparedCall::new(call, &self.offered)).collect();
        self.refuse_by_rule(&mut calls, answer.finish_reason);
        self.messages.push(Message::Assistant {
            content: content.clone(),
            tool_calls: calls.iter().map(|prepared| prepared.call.clone()).collect(),
            refusal: answer.refusal.clone(),
        });
        if !calls.is_empty() {
            return Step::Go(calls);
        }
        let record = &mut self.record;
        let cut_off = answer.finish_reason == picogent_llm::FinishReason::Length;
        // Cut off by what remained of the run's budget, the budget ended the run; by the
        // configured cap or the context window's room, the answer was too long for one request.
        let cut_outcome = match room.bound {
            OutputBound::TokenBudget => RunOutcome::BudgetTokens,
            OutputBound::OutputLimit | OutputBound::ContextWindow => RunOutcome::CutOff,
        };
        let tokens = room.tokens;
        let cut_where = match room.bound {
            OutputBound::OutputLimit => format!("the output limit of {tokens} tokens (llm.max_output_tokens)"),
            OutputBound::ContextWindow => format!(
                "{tokens} tokens, the room the context window (llm.context_tokens {}) left after the request",
                self.setup.window.context_tokens
            ),
            OutputBound::TokenBudget => format!("{tokens} tokens, what remained of the run's token budget"),
        };
        let outcome = match (content, answer.refusal) {
            (_, Some(refusal)) => {
                record.detail = Some(format!("the model declined: {refusal}"));
                RunOutcome::Refusal
            }
            // A task run whose model wrote text until it was cut off, and called no tool: the
            // cause is that no tool was called, not the length.
            (Some(text), None) if cut_off && self.setup.expects_tool_calls && record.calls.is_empty() => {
                record.final_message = text;
                record.detail = Some(format!(
                    "the model called no tool in a run that works a task, and its text was cut off at {cut_where}"
                ));
                record.cut_off = Some(room);
                RunOutcome::DidNothing
            }
            (Some(text), None) if cut_off => {
                record.final_message = text;
                record.detail = Some(format!("the answer was cut off at {cut_where}"));
                record.cut_off = Some(room);
                cut_outcome
            }
            (Some(text), None) if self.setup.expects_tool_calls && record.calls.is_empty() => {
                record.final_message = text;
                record.detail = Some(
                    "the model answered in text and called no tool in a run that works a task, so nothing was \
                     done on the board"
                        .to_string(),
                );
                RunOutcome::DidNothing
            }
            (Some(text), None) => {
                record.final_message = text;
                RunOutcome::Completed
            }
            (None, None) if answer.finish_reason == picogent_llm::FinishReason::ContentFilter => {
                record.detail = Some("the answer was withheld by the server's content filter".to_string());
                RunOutcome::Refusal
            }
            (None, None) if cut_off => {
                record.detail = Some(format!("the answer was cut off at {cut_where} before any text"));
                record.cut_off = Some(room);
                cut_outcome
            }
            (None, None) => {
                record.detail = Some(format!("finish reason {:?}", answer.finish_reason));
                RunOutcome::EmptyAnswer
            }
        };
        Step::End(outcome)
    }

    /// The rules a call must pass besides its arguments: a call cut off by the output limit is
    /// never run; with one call per turn, the rest wait; a call repeated too often is not run again.
    fn refuse_by_rule(&mut self, calls: &mut [PreparedCall], finish_reason: picogent_llm::FinishReason) {
        if finish_reason == picogent_llm::FinishReason::Length
            && let Some(last) = calls.last_mut()
        {
            last.refuse(
                "this call was cut off by the output limit before it was complete, so it was not run; call it \
                 again, with shorter arguments if they were long"
                    .to_string(),
            );
        }
        if self.setup.window.one_call_per_turn {
            for call in calls.iter_mut().skip(1) {
                call.refuse(
                    "only one tool call runs per turn (llm.parallel_tool_calls is false); this one was not run: \
                     call it again on its own"
                        .to_string(),
                );
            }
        }
        let turn = self.record.turns;
        let max = self.setup.limits.max_identical_calls;
        for call in calls.iter_mut() {
            let Some(arguments) = call.arguments().cloned() else { continue };
            let name = call.call.name.clone();
            let repeats = match &mut self.last_call {
                Some((last_name, last_arguments, count, at)) if *last_name == name && *last_arguments == arguments => {
                    if *count >= max {
                        call.refuse(format!(
                            "you called `{name}` with these same arguments {count} times in a row; it was not run \
                             again. Its result is in the conversation above (turn {at}): use it, or do something else"
                        ));
                        continue;
                    }
                    *count += 1;
                    *at = turn;
                    *count
                }
                _ => 1,
            };
            if repeats == 1 {
                self.last_call = Some((name, arguments, 1, turn));
            }
        }
    }

    /// Runs the turn's calls within the call budget; every call gets its one tool message.
    /// Returns the outcome if the run ends here.
    async fn run_tools(&mut self, calls: Vec<PreparedCall>) -> Option<RunOutcome> {
        let limits = &self.setup.limits;
        let turn = self.record.turns;
        let remaining_calls = limits.max_tool_calls.saturating_sub(self.record.tool_calls) as usize;
        let (to_run, over_budget) = calls.split_at(remaining_calls.min(calls.len()));
        let mut results: Vec<Option<CallResult>> = vec![None; to_run.len()];
        let context = TurnContext {
            source: self.setup.tools,
            offered: &self.offered,
            tool_context: &self.tool_context,
            run_start: self.started,
            turn,
            max_result_bytes: limits.max_tool_result_bytes,
        };
        let tools_started = Instant::now();
        let interrupted = tokio::select! {
            _ = self.setup.cancel.cancelled() => Some(RunOutcome::Cancelled),
            // Not while a call waits for a person: that time is not the run's (`person::WaitClock`).
            _ = self.tool_context.wait_clock.passed(self.deadline) => Some(RunOutcome::Deadline),
            _ = dispatch::run_calls(&context, to_run, &mut results) => None,
        };
        if interrupted.is_some() {
            // Tools still running see the cancellation and give up.
            self.run_cancel.cancel();
        }
        self.record.tool_time_ms += millis(tools_started.elapsed());
        let now_us = dispatch::micros_since(self.started);
        for (prepared, result) in to_run.iter().zip(results) {
            let (call_record, message) = result.unwrap_or_else(|| {
                dispatch::not_run(&prepared.call, turn, now_us, "the run was stopped before it ran")
            });
            self.record.add_call(call_record);
            self.messages.push(message);
        }
        let budget_note = format!("the run's budget of {} tool calls is spent", limits.max_tool_calls);
        for prepared in over_budget {
            let (call_record, message) = dispatch::not_run(&prepared.call, turn, now_us, &budget_note);
            self.record.add_call(call_record);
            self.messages.push(message);
        }
        if interrupted.is_some() {
            return interrupted;
        }
        if over_budget.is_empty() {
            return None;
        }
        self.record.detail = Some(format!(
            "turn {turn} asked for {} tool calls; {} ran within the budget of {}",
            calls.len(),
            to_run.len(),
            limits.max_tool_calls
        ));
        Some(RunOutcome::BudgetToolCalls)
    }

    /// Hands the run so far to the checkpoint, if anyone watches.
    fn checkpoint(&self) {
        if let Some(checkpoint) = &self.setup.checkpoint {
            let conversation = self.messages[1..].to_vec();
            let _ = checkpoint.send(Some(RunOutput { record: self.record.clone(), conversation }));
        }
    }

    fn finish(mut self, outcome: RunOutcome) -> RunOutput {
        self.run_cancel.cancel();
        let record = &mut self.record;
        record.outcome = outcome;
        // The model's own words are kept where it wrote some: the notice quotes them, the page shows them.
        if !matches!(outcome, RunOutcome::Completed | RunOutcome::CutOff | RunOutcome::DidNothing) {
            record.final_message = outcome.describe(record);
        }
        record.wall_time_ms = millis(self.started.elapsed());
        log_end(record);
        self.messages.remove(0);
        RunOutput { record: self.record, conversation: self.messages }
    }
}

/// The output cap of the next request: the least of the configured cap, the room the context
/// window leaves after the prompt, and what remains of the run's token budget after it; on a
/// tie, the one a person would change first (the configured cap, then the window).
fn output_room(output_cap: u32, context_room: u64, budget_room: u64) -> CutOffAt {
    let cap = u64::from(output_cap);
    let (tokens, bound) = if cap <= context_room && cap <= budget_room {
        (cap, OutputBound::OutputLimit)
    } else if context_room <= budget_room {
        (context_room, OutputBound::ContextWindow)
    } else {
        (budget_room, OutputBound::TokenBudget)
    };
    CutOffAt { tokens: u32::try_from(tokens).unwrap_or(u32::MAX), bound }
}

/// The one line of a run's end: info when it completed or was stopped, a warning when it
/// failed, an error when the model service failed it.
fn log_end(record: &RunRecord) {
    let outcome = record.outcome.as_str();
    let detail = record.detail.as_deref().unwrap_or("");
    let (turns, tool_calls, tokens) = (record.turns, record.tool_calls, record.total_tokens());
    match record.outcome {
        RunOutcome::Completed | RunOutcome::Cancelled => {
            tracing::info!(outcome, turns, tool_calls, tokens, "run finished")
        }
        RunOutcome::ModelError => {
            tracing::error!(outcome, turns, tool_calls, tokens, "run failed: the model service failed: {detail}")
        }
        _ => tracing::warn!(outcome, turns, tool_calls, tokens, "run failed ({outcome}): {detail}"),
    }
}

/// How many tokens the stored session may take in a request: what the context window leaves
/// after the fixed part (system prompt, tools, this run's prompt) and room for an answer, and
/// never more than an eighth of the run's token budget, since every turn sends it again.
fn history_budget(setup: &RunSetup<'_>, fixed: u64) -> u64 {
    let window = setup.window;
    let answer_room = u64::from(window.output_cap).min(window.context_tokens / 4);
    let room = window.context_tokens.saturating_sub(fixed + answer_room);
    room.min(setup.limits.max_tokens_per_run / 8)
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
    use picogent_llm::ToolCall;

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

    #[test]
    fn the_output_cap_defaults_to_a_few_thousand_tokens_and_is_never_zero() {
        // What the loop asks a request for when the file sets nothing (loading the file, its
        // overrides and its zero are the config crate's tests).
        let mut llm = picogent_llm::config::LlmConfig::new("http://127.0.0.1:8790/v1", "offline-planner");
        assert_eq!(llm.max_output_tokens, None);
        let window = ModelWindow::from_config(&llm);
        assert_eq!(window.output_cap, picogent_llm::config::DEFAULT_MAX_OUTPUT_TOKENS);
        assert_eq!(picogent_llm::config::DEFAULT_MAX_OUTPUT_TOKENS, 2048);
        // A small local window keeps its own cap.
        llm.context_tokens = 4096;
        assert_eq!(ModelWindow::from_config(&llm).output_cap, 2048);
        assert_eq!(window, ModelWindow::default());
    }

    #[test]
    fn every_budget_must_be_above_zero_and_a_money_budget_positive() {
        assert_eq!(Limits::default().check(), Ok(()));
        let zero_turns = Limits { max_turns: 0, ..Limits::default() };
        assert_eq!(
            zero_turns.check(),
            picogent_support::setting::problem("limits.max_turns", "expected a number greater than 0")
        );
        let free = Limits { max_cost_per_day: Some(0.0), ..Limits::default() };
        assert_eq!(free.check().unwrap_err().field, "limits.max_cost_per_day");
    }
}
