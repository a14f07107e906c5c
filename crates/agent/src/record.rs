//! The run record: what one run did and spent, serializable so the runtime can persist it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use picogent_state::RunStatus;

/// How a run ended. Every run ends with exactly one of these and a short final message; a run
/// never ends silently.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunOutcome {
    /// The model gave a final text answer.
    Completed,
    /// `limits.max_turns` model turns were used.
    BudgetTurns,
    /// `limits.max_tool_calls` tool calls were made.
    BudgetToolCalls,
    /// The next request could not fit in `limits.max_tokens_per_run`.
    BudgetTokens,
    /// `limits.run_timeout_ms` of wall-clock time passed.
    Deadline,
    /// The caller's cancellation token fired.
    Cancelled,
    /// The model server failed for good (retries spent, a refused request, a context that would
    /// not fit even after dropping old tool results).
    ModelError,
    /// The model answered with neither text nor tool calls.
    EmptyAnswer,
    /// The model declined to answer.
    Refusal,
    /// The answer was cut off (`finish_reason: length`) by the configured output limit or by the
    /// room the context window left: not a clean completion; the final message holds what there
    /// was. Cut off by what remained of the run's token budget, it is `BudgetTokens`.
    CutOff,
    /// A run that had to work on the board (a task run) ended with a text answer and no tool
    /// call at all: nothing was done, whatever the text says, so it is not `Completed`.
    DidNothing,
}

impl RunOutcome {
    /// The word stored and shown for it (`budget_turns`, `model_error`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            RunOutcome::Completed => "completed",
            RunOutcome::BudgetTurns => "budget_turns",
            RunOutcome::BudgetToolCalls => "budget_tool_calls",
            RunOutcome::BudgetTokens => "budget_tokens",
            RunOutcome::Deadline => "deadline",
            RunOutcome::Cancelled => "cancelled",
            RunOutcome::ModelError => "model_error",
            RunOutcome::EmptyAnswer => "empty_answer",
            RunOutcome::Refusal => "refusal",
            RunOutcome::CutOff => "cut_off",
            RunOutcome::DidNothing => "did_nothing",
        }
    }

    /// Where the run's life ends for this outcome: the one mapping from how the loop ended to
    /// the status a run is stored and counted with.
    pub fn status(self) -> RunStatus {
        match self {
            RunOutcome::Completed => RunStatus::Completed,
            RunOutcome::Cancelled => RunStatus::Stopped,
            RunOutcome::BudgetTurns
            | RunOutcome::BudgetToolCalls
            | RunOutcome::BudgetTokens
            | RunOutcome::Deadline
            | RunOutcome::ModelError
            | RunOutcome::EmptyAnswer
            | RunOutcome::Refusal
            | RunOutcome::CutOff => RunStatus::Failed,
            RunOutcome::DidNothing => RunStatus::DidNothing,
        }
    }

    /// A short sentence saying why the run did not complete, kept as its final message. The
    /// notice people read (`picogent_notices::failure_notice`) adds the setting and its value.
    pub fn describe(self, record: &RunRecord) -> String {
        let cut_off = |what: &str| match record.cut_off {
            Some(at) => format!("My answer was cut off at {} tokens, {what}, before it was complete.", at.tokens),
            None => format!("My answer was cut off, {what}, before it was complete."),
        };
        match self {
            RunOutcome::Completed => "done".to_string(),
            RunOutcome::BudgetTurns => {
                format!("I stopped after {} model turns, the limit for one run, before finishing.", record.turns)
            }
            RunOutcome::BudgetToolCalls => {
                format!("I stopped after {} tool calls, the limit for one run, before finishing.", record.tool_calls)
            }
            RunOutcome::BudgetTokens if record.cut_off.is_some() => {
                cut_off("all that was left of the run's token budget")
            }
            RunOutcome::BudgetTokens => format!(
                "I stopped after using {} tokens: the next request would not fit in what was left of the run's token \
                 budget.",
                record.total_tokens()
            ),
            RunOutcome::Deadline => "I ran out of time for this run before finishing.".to_string(),
            RunOutcome::Cancelled => "This run was cancelled before it finished.".to_string(),
            RunOutcome::ModelError => "I could not finish: the model service failed.".to_string(),
            RunOutcome::EmptyAnswer => "I could not finish: the model returned an empty answer.".to_string(),
            RunOutcome::Refusal => "I could not finish: the model declined to answer.".to_string(),
            RunOutcome::CutOff => match record.cut_off.map(|at| at.bound) {
                Some(OutputBound::ContextWindow) => cut_off("all the room the context window left after the request"),
                _ => cut_off("the output limit"),
            },
            RunOutcome::DidNothing => {
                "I did not work this: the model answered in text without calling any tool.".to_string()
            }
        }
    }
}

/// What capped an answer that was cut off (`finish_reason: length`): the request asked for the
/// least of the three.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputBound {
    /// The configured cap of one answer, `llm.max_output_tokens`.
    OutputLimit,
    /// What the context window (`llm.context_tokens`) left after the request.
    ContextWindow,
    /// What remained of the run's token budget.
    TokenBudget,
}

/// Where an answer was cut off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CutOffAt {
    /// The output cap the request asked for.
    pub tokens: u32,
    pub bound: OutputBound,
}

/// What became of one tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolCallOutcome {
    Ok,
    /// The tool ran and reported an error.
    Error,
    /// The arguments were not a JSON object; the tool was not run.
    InvalidArguments,
    /// The name is not an offered tool; nothing was run.
    UnknownTool,
    /// Not run by a rule of the loop: cut off by the output limit, the same call repeated past
    /// `limits.max_identical_calls`, or a second call of a turn with `parallel_tool_calls: false`.
    Refused,
    /// Not run: the tool-call budget was spent, or the run was stopped first. Not counted in
    /// [`RunRecord::tool_calls`].
    NotRun,
}

impl ToolCallOutcome {
    /// The word stored and counted for it.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolCallOutcome::Ok => "ok",
            ToolCallOutcome::Error => "error",
            ToolCallOutcome::InvalidArguments => "invalid_arguments",
            ToolCallOutcome::UnknownTool => "unknown_tool",
            ToolCallOutcome::Refused => "refused",
            ToolCallOutcome::NotRun => "not_run",
        }
    }
}

/// One tool call as it happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallRecord {
    /// The model's id of the call.
    pub id: String,
    pub name: String,
    /// The model turn (1-based) that asked for it.
    pub turn: u32,
    pub outcome: ToolCallOutcome,
    /// Microseconds from the start of the run to the start and the end of the call; overlapping
    /// intervals show calls that ran concurrently.
    pub started_us: u64,
    pub ended_us: u64,
    /// The arguments as the model wrote them, when the conversation holds other text for them
    /// (repaired from a code fence or stray text, or replaced by `{}` because they were not JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_arguments: Option<String>,
}

/// Counts of one tool's calls by outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallCounts {
    pub ok: u32,
    pub error: u32,
    pub invalid_arguments: u32,
    pub unknown_tool: u32,
    #[serde(default)]
    pub refused: u32,
    pub not_run: u32,
}

/// The account of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub outcome: RunOutcome,
    /// The answer on `Completed`; otherwise a short sentence saying why the run stopped.
    pub final_message: String,
    /// More about a failure (the model error, the budget numbers); never holds secrets.
    pub detail: Option<String>,
    /// Model requests answered.
    pub turns: u32,
    /// Tool calls made (run, or refused for bad arguments or an unknown name); `NotRun` excluded.
    pub tool_calls: u32,
    pub tool_calls_by_name: BTreeMap<String, ToolCallCounts>,
    pub calls: Vec<ToolCallRecord>,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Of `prompt_tokens`, read from the model server's prompt cache.
    #[serde(default)]
    pub cached_tokens: u64,
    /// Of `prompt_tokens`, written to the prompt cache.
    #[serde(default)]
    pub cache_write_tokens: u64,
    /// True if some server answer had no `usage` and its tokens were counted here (o200k).
    pub tokens_estimated: bool,
    /// Wall-clock time waiting for the model (retries and their backoff included).
    pub model_time_ms: u64,
    /// Wall-clock time running tools (concurrent calls count once).
    pub tool_time_ms: u64,
    pub wall_time_ms: u64,
    /// One note per context-length recovery: which tool results were dropped.
    pub context_trims: Vec<String>,
    /// Extra user inputs taken from the steering channel.
    pub steering_inputs: u32,
    /// Why the model stopped writing its last answer (`length`: cut off by the output limit).
    #[serde(default)]
    pub finish_reason: Option<picogent_llm::FinishReason>,
    /// Why the model service failed the run, when it did (`ModelError`).
    #[serde(default)]
    pub model_failure: Option<picogent_llm::ModelFailure>,
    /// Where the last answer was cut off, when it was (`CutOff`, or `BudgetTokens` mid-answer).
    #[serde(default)]
    pub cut_off: Option<CutOffAt>,
}

impl Default for RunRecord {
    fn default() -> RunRecord {
        RunRecord::new()
    }
}

impl RunRecord {
    /// An empty record, as a run begins.
    pub fn new() -> RunRecord {
        RunRecord {
            outcome: RunOutcome::Completed,
            final_message: String::new(),
            detail: None,
            turns: 0,
            tool_calls: 0,
            tool_calls_by_name: BTreeMap::new(),
            calls: Vec::new(),
            prompt_tokens: 0,
            completion_tokens: 0,
            cached_tokens: 0,
            cache_write_tokens: 0,
            tokens_estimated: false,
            model_time_ms: 0,
            tool_time_ms: 0,
            wall_time_ms: 0,
            context_trims: Vec::new(),
            steering_inputs: 0,
            finish_reason: None,
            model_failure: None,
            cut_off: None,
        }
    }

    pub fn total_tokens(&self) -> u64 {
        self.prompt_tokens + self.completion_tokens
    }

    /// The run's tokens as one request's usage: what [`picogent_llm::config::Price::cost`] prices.
    pub fn usage(&self) -> picogent_llm::Usage {
        picogent_llm::Usage {
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            cached_tokens: self.cached_tokens,
            cache_write_tokens: self.cache_write_tokens,
            estimated: self.tokens_estimated,
        }
    }

    /// Adds one answer's tokens.
    pub fn add_usage(&mut self, usage: &picogent_llm::Usage) {
        self.prompt_tokens += usage.prompt_tokens;
        self.completion_tokens += usage.completion_tokens;
        self.cached_tokens += usage.cached_tokens;
        self.cache_write_tokens += usage.cache_write_tokens;
        self.tokens_estimated |= usage.estimated;
    }

    pub fn add_call(&mut self, call: ToolCallRecord) {
        let counts = self.tool_calls_by_name.entry(call.name.clone()).or_default();
        match call.outcome {
            ToolCallOutcome::Ok => counts.ok += 1,
            ToolCallOutcome::Error => counts.error += 1,
            ToolCallOutcome::InvalidArguments => counts.invalid_arguments += 1,
            ToolCallOutcome::UnknownTool => counts.unknown_tool += 1,
            ToolCallOutcome::Refused => counts.refused += 1,
            ToolCallOutcome::NotRun => counts.not_run += 1,
        }
        if call.outcome != ToolCallOutcome::NotRun {
            self.tool_calls += 1;
        }
        self.calls.push(call);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_the_serialised_names() {
        let outcomes = [
            RunOutcome::Completed,
            RunOutcome::BudgetTurns,
            RunOutcome::BudgetToolCalls,
            RunOutcome::BudgetTokens,
            RunOutcome::Deadline,
            RunOutcome::Cancelled,
            RunOutcome::ModelError,
            RunOutcome::EmptyAnswer,
            RunOutcome::Refusal,
            RunOutcome::CutOff,
            RunOutcome::DidNothing,
        ];
        for outcome in outcomes {
            assert_eq!(serde_json::to_value(outcome).unwrap(), outcome.as_str());
        }
        let calls = [
            ToolCallOutcome::Ok,
            ToolCallOutcome::Error,
            ToolCallOutcome::InvalidArguments,
            ToolCallOutcome::UnknownTool,
            ToolCallOutcome::Refused,
            ToolCallOutcome::NotRun,
        ];
        for outcome in calls {
            assert_eq!(serde_json::to_value(outcome).unwrap(), outcome.as_str());
        }
    }
}
