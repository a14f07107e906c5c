//! The one notice a failed (or did-nothing) run leaves where it was asked: what happened, the
//! setting that held it with its value now, and what to do next.

use picogent_agent::{RunOutcome, RunRecord};
use picogent_llm::Message;
use picogent_llm::config::LlmConfig;
use picogent_llm::probe::ModelCheck;

use crate::again::AskAgain;
use crate::budget::TokenBudget;
use crate::model::{model_failure_advice, model_failure_cause};

/// What a notice names besides the run's record: the settings the run was held to, as they are
/// now, and what the start-up probe found of the model.
pub struct NoticeContext<'a> {
    pub llm: &'a LlmConfig,
    /// The limits the run ran within: `limits`, with a scheduled job's own budget applied.
    pub limits: RunLimits,
    pub token_budget: TokenBudget,
    /// `None` when no probe was sent (only `picogent run` sends one).
    pub model_check: Option<ModelCheck>,
    /// The settings that set the run's turn and token limits when they are not `limits`': a
    /// scheduled job's `schedules.<job>.max_turns` and `.max_tokens`.
    pub own_budget: OwnBudget,
    /// How the person asks for the run again.
    pub ask_again: AskAgain,
}

/// The limits of one run a notice names, as the run ran within them: `limits.max_turns`,
/// `limits.max_tool_calls` and `limits.run_timeout_ms` (the first with a scheduled job's own
/// `max_turns` applied). Its tokens are the [`TokenBudget`]'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLimits {
    pub max_turns: u32,
    pub max_tool_calls: u32,
    pub run_timeout_ms: u64,
}

/// The settings of a run's own turn and token limits, when a scheduled job set them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnBudget {
    pub turns: Option<String>,
    pub tokens: Option<String>,
}

impl OwnBudget {
    fn turns(&self) -> &str {
        self.turns.as_deref().unwrap_or("limits.max_turns")
    }

    fn tokens(&self) -> &str {
        self.tokens.as_deref().unwrap_or("limits.max_tokens_per_run")
    }
}

/// The one comment a failed run leaves: what happened, naming the setting that held it with its
/// value now, and what to do. Never a stack trace. `conversation` is what the model read: a
/// cut-off answer is quoted only when it is not the request given back.
pub fn failure_notice(record: &RunRecord, conversation: &[Message], context: &NoticeContext<'_>) -> String {
    let (limits, llm, ask) = (&context.limits, context.llm, &context.ask_again);
    let output_cap = picogent_agent::ModelWindow::from_config(llm).output_cap;
    // Only where continuing can work: a run that could not send even its first request would
    // fail the same way again.
    let continues = record.turns > 0;
    let (what, what_to_do) = match record.outcome {
        RunOutcome::BudgetTurns => (
            format!(
                "I stopped after {} model turns, the limit for one run (`{}`, now {}), before finishing.",
                record.turns,
                context.own_budget.turns(),
                limits.max_turns
            ),
            if continues { ask.carry_on() } else { format!("Ask an admin to raise {}.", context.own_budget.turns()) },
        ),
        RunOutcome::BudgetToolCalls => (
            format!(
                "I stopped after {} tool calls, the limit for one run (`limits.max_tool_calls`, now {}), before \
                 finishing.",
                record.tool_calls, limits.max_tool_calls
            ),
            if continues { ask.carry_on() } else { "Ask an admin to raise limits.max_tool_calls.".to_string() },
        ),
        RunOutcome::BudgetTokens => {
            let budget = &context.token_budget;
            match record.cut_off {
                Some(at) => (
                    format!(
                        "My answer was cut off at {} tokens before it was complete: that was all this run had left \
                         of {}.",
                        at.tokens,
                        budget.words(context.own_budget.tokens())
                    ),
                    format!("{}{}", ask.carry_on(), quoted_partial(record, conversation)),
                ),
                None => (
                    format!(
                        "I stopped after using {} tokens: the next request would not fit in what was left of {}.",
                        record.total_tokens(),
                        budget.words(context.own_budget.tokens())
                    ),
                    if continues {
                        ask.carry_on()
                    } else {
                        format!(
                            "The request alone is larger than that: ask an admin to raise {}.",
                            budget.setting(context.own_budget.tokens())
                        )
                    },
                ),
            }
        }
        RunOutcome::Deadline => (
            format!(
                "I ran out of time before finishing: one run may take {} s (`limits.run_timeout_ms`, now {}).",
                limits.run_timeout_ms / 1000,
                limits.run_timeout_ms
            ),
            if continues {
                ask.carry_on()
            } else {
                "Ask an admin to raise limits.run_timeout_ms (or llm.timeout_ms, if the model is slow).".to_string()
            },
        ),
        RunOutcome::ModelError => match &record.model_failure {
            Some(failure) => (model_failure_cause(failure), model_failure_advice(failure, llm, ask)),
            None => (
                "I could not finish: the model service failed.".to_string(),
                format!("The model endpoint may be down or refusing requests; {} once it is back.", ask.retry()),
            ),
        },
        RunOutcome::EmptyAnswer => (
            format!("I could not finish: the model (`llm.model`, now {}) returned an empty answer.", llm.model),
            format!("Rephrase the request and {}.", ask.again()),
        ),
        RunOutcome::Refusal => (
            format!("I could not finish: the model (`llm.model`, now {}) declined to answer.", llm.model),
            format!("Rephrase the request and {}.", ask.again()),
        ),
        RunOutcome::CutOff => {
            let had = quoted_partial(record, conversation);
            match record.cut_off {
                Some(at) if at.bound == picogent_agent::OutputBound::ContextWindow => (
                    format!(
                        "My answer was cut off at {} tokens before it was complete: that was all the room the \
                         context window (`llm.context_tokens`, now {}) left after the request, less than the output \
                         limit (`llm.max_output_tokens`, now {output_cap}).",
                        at.tokens, llm.context_tokens
                    ),
                    format!("{}{had}", ask.shorter_or_more_context()),
                ),
                _ => (
                    format!(
                        "My answer was cut off at the output limit (`llm.max_output_tokens`, now {output_cap}) \
                         before it was complete."
                    ),
                    format!("{}{had}", ask.shorter_or_raise("llm.max_output_tokens")),
                ),
            }
        }
        RunOutcome::DidNothing => {
            let (what, found) = did_nothing_notice(record, llm, context.model_check.as_ref());
            (what, format!("{found}{}", quoted(record, conversation, "What the model said")))
        }
        RunOutcome::Completed | RunOutcome::Cancelled => (record.outcome.describe(record), String::new()),
    };
    format!("{what} {what_to_do}").trim().to_string()
}

/// The notice of a task run whose model answered in text and called no tool: the model did not
/// work the task (and, when its text ran into the output limit, that it called no tool is the
/// cause, not the length), what the start-up probe found of it, and what to change. The model's
/// words are quoted after it, cleaned and bounded (the whole answer is on the run's page).
fn did_nothing_notice(record: &RunRecord, llm: &LlmConfig, check: Option<&ModelCheck>) -> (String, String) {
    use picogent_llm::probe::Verdict;
    let what = match record.cut_off {
        Some(at) => format!(
            "I did not work this task: the model (`llm.model`, now {}) made no tool call; it wrote text until it \
             was cut off at {} tokens, so nothing was done on the task.",
            llm.model, at.tokens
        ),
        None => format!(
            "I did not work this task: the model (`llm.model`, now {}) answered in text without calling any tool, \
             so nothing was done on the task.",
            llm.model
        ),
    };
    let ask_admin = "Ask an admin to set llm.model to a model with tool calling, then reassign me or mention me \
                     to try again.";
    let found = match check {
        Some(check) if check.verdict == Verdict::CallsTools => format!(
            "At start-up it did call a test tool (the probe of `picogent check`), so it can call tools but did not \
             here; a larger or instruction-tuned model follows a task more reliably. Mention me to try again, or \
             {}",
            ask_admin.replacen("Ask", "ask", 1)
        ),
        Some(check) if check.verdict != Verdict::Probing => match &check.fix {
            Some(fix) => format!(
                "The start-up probe of the model (as `picogent check` sends it) found: {}. To fix: {fix}; then \
                 reassign me or mention me to try again.",
                check.detail
            ),
            None => format!("The start-up probe of the model found: {}. {ask_admin}", check.detail),
        },
        _ => format!("Run `picogent check` to see whether the model can call tools. {ask_admin}"),
    };
    (what, found)
}

/// " What I had: «…»" for a cut-off answer of the model's own words; a note instead when it
/// only gave the request back; nothing when there was no text.
fn quoted_partial(record: &RunRecord, conversation: &[Message]) -> String {
    quoted(record, conversation, "What I had")
}

/// " {label}: «…»": the model's last words, on one line, without fence markers, at most 600
/// characters (the rest is on the run's page); a note instead when they only gave the request
/// back; nothing when there were none.
fn quoted(record: &RunRecord, conversation: &[Message], label: &str) -> String {
    // A `CutOff` run keeps its partial answer as its final message; otherwise it is the last
    // answer in the conversation.
    let text = match record.outcome {
        RunOutcome::CutOff | RunOutcome::DidNothing if !record.final_message.is_empty() => record.final_message.clone(),
        _ => conversation
            .iter()
            .rev()
            .find_map(|message| match message {
                Message::Assistant { content, .. } => Some(content.clone().unwrap_or_default()),
                _ => None,
            })
            .unwrap_or_default(),
    };
    let text = picogent_tracker::markers::without_markers(&text);
    let partial = crate::words::one_line(&text, 600);
    if partial.is_empty() {
        String::new()
    } else if repeats_input(&text, conversation) {
        format!(" {label} only repeated the request back, so it is not quoted.")
    } else {
        let cut = text.split_whitespace().map(|word| word.chars().count() + 1).sum::<usize>() > 601;
        let rest = if cut { " (the whole of it is on the run's page)" } else { "" };
        format!(" {label}: «{partial}»{rest}")
    }
}

/// Whether `answer` mostly repeats what the model was given (a base model continuing its prompt
/// instead of answering): a third or more of its 40-character stretches, taken every 20
/// characters with whitespace collapsed, appear word for word in the system prompt, the user's
/// messages or the tool results. Quoting such an answer would post the request back onto the
/// board — with any hidden or hostile text it carried.
fn repeats_input(answer: &str, conversation: &[Message]) -> bool {
    const STRETCH: usize = 40;
    const STEP: usize = 20;
    let flat = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
    let input: String = conversation
        .iter()
        .filter_map(|message| match message {
            Message::System { content } | Message::User { content } | Message::Tool { content, .. } => {
                Some(flat(content))
            }
            Message::Assistant { .. } => None,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let answer: Vec<char> = flat(answer).chars().collect();
    if answer.len() < STRETCH {
        return false;
    }
    let stretches: Vec<String> =
        (0..=answer.len() - STRETCH).step_by(STEP).map(|at| answer[at..at + STRETCH].iter().collect()).collect();
    let repeated = stretches.iter().filter(|stretch| input.contains(stretch.as_str())).count();
    repeated * 3 >= stretches.len()
}
