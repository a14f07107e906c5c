//! How a person asks for a run again, in a notice's words: a mention, or for a scheduled job's
//! run (which no mention starts) `picogent schedules run <job>`.

/// How a person asks for a run again, as its notice tells them: a mention (or, for a task, the
/// assignment) for every run but a scheduled job's, whose firing no mention starts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum AskAgain {
    #[default]
    Mention,
    Schedule {
        job: String,
    },
}

impl AskAgain {
    /// "mention me to retry", to go on with "once it is back" and the like.
    pub(crate) fn retry(&self) -> String {
        match self {
            AskAgain::Mention => "mention me to retry".to_string(),
            AskAgain::Schedule { job } => format!("run it again with `picogent schedules run {job}`"),
        }
    }

    /// "mention me again", after "then".
    pub(crate) fn again(&self) -> String {
        match self {
            AskAgain::Mention => "mention me again".to_string(),
            AskAgain::Schedule { job } => format!("run it again with `picogent schedules run {job}`"),
        }
    }

    /// "reassign me or mention me to try again".
    pub(crate) fn try_again(&self) -> String {
        match self {
            AskAgain::Mention => "reassign me or mention me to try again".to_string(),
            AskAgain::Schedule { job } => {
                format!("run it again with `picogent schedules run {job}`, or let the next firing run")
            }
        }
    }

    /// The advice on an answer cut off by the room the context window left.
    pub(crate) fn shorter_or_more_context(&self) -> String {
        match self {
            AskAgain::Mention => "Ask for a shorter answer; if the model's server holds a larger context, an admin \
                                  can raise llm.context_tokens (`picogent check` shows what it holds)."
                .to_string(),
            // Nobody asks a firing anything: its prompt is the job's.
            AskAgain::Schedule { job } => format!(
                "If the model's server holds a larger context, an admin can raise llm.context_tokens (`picogent \
                 check` shows what it holds); then run it again with `picogent schedules run {job}`."
            ),
        }
    }

    /// The advice on an answer cut off at the output limit `setting`.
    pub(crate) fn shorter_or_raise(&self, setting: &str) -> String {
        match self {
            AskAgain::Mention => format!("Ask for a shorter answer, or ask an admin to raise {setting}."),
            AskAgain::Schedule { job } => {
                format!("Ask an admin to raise {setting}, then run it again with `picogent schedules run {job}`.")
            }
        }
    }

    /// What a run that stopped short can do next, when continuing can work.
    pub(crate) fn carry_on(&self) -> String {
        match self {
            AskAgain::Mention => CONTINUE.to_string(),
            AskAgain::Schedule { job } => {
                format!("Raise the job's budget in agent.json, or run it again with `picogent schedules run {job}`.")
            }
        }
    }
}

/// What a run that stopped short can do next, when continuing can work.
const CONTINUE: &str = "Mention me to continue where I stopped, or split the work into smaller tasks.";
