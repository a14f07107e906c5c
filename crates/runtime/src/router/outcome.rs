//! The router's words for what became of what it heard, as types: where it heard it, and the
//! outcome of an event, of a message or of a task reconciliation found. Their `as_str` are the labels of
//! `/metrics` and the reasons of the startup report, which never change.

use super::filter::MessageFate;

/// Where the router heard of a message or an assignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Source {
    /// The event stream.
    Event,
    /// A REST reconciliation after a (re)connect: asked while nobody heard it.
    Reconciled,
    /// The end of the last task an assigned task waited for (`router/tree.rs`).
    Unblocked,
}

impl Source {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Source::Event => "event",
            Source::Reconciled => "reconciled",
            Source::Unblocked => "unblocked",
        }
    }
}

/// What became of a message: the `fate` of `picogent_events_total{event="message.new"}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum MessageOutcome {
    /// A run was queued to answer it.
    Run,
    /// It was handed to its session's run.
    Steered,
    /// Claimed before: taken in already.
    Duplicate,
    /// A stop, obeyed.
    Stop,
    /// A stop with nothing to stop.
    StopIdle,
    /// A bot's message past the thread's reply cap (the loop guard).
    ReplyCap,
    /// No run could be queued (the budget, a shutdown); the person was told where it applies.
    Refused,
    /// The state database did not take it; the person was told.
    StateError,
    /// Not for the agent to answer, and why.
    NotAnswered(MessageFate),
}

impl MessageOutcome {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            MessageOutcome::Run => "run",
            MessageOutcome::Steered => "steered",
            MessageOutcome::Duplicate => "duplicate",
            MessageOutcome::Stop => "stop",
            MessageOutcome::StopIdle => "stop_idle",
            MessageOutcome::ReplyCap => "reply_cap",
            MessageOutcome::Refused => "refused",
            MessageOutcome::StateError => "state_error",
            MessageOutcome::NotAnswered(fate) => fate.as_str(),
        }
    }

    /// Whether it is being answered (by a run of its own or the session's).
    pub(super) fn answered(self) -> bool {
        matches!(self, MessageOutcome::Run | MessageOutcome::Steered)
    }
}

/// What became of a task a reconciliation found: worked, or why not (the startup report's
/// reasons for skipping it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TaskOutcome {
    Worked,
    /// Its session has a run, queued or running.
    Running,
    /// A run of it ended already.
    FinishedRun,
    StateError,
    /// No run could be queued.
    Refused,
    /// `task_listen` says assignments are not worked.
    NotListening,
    /// It waits for other tasks that are not done (`blocked_by:` labels).
    Blocked,
}

impl TaskOutcome {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            TaskOutcome::Worked => "worked",
            TaskOutcome::Running => "running",
            TaskOutcome::FinishedRun => "finished_run",
            TaskOutcome::StateError => "state_error",
            TaskOutcome::Refused => "refused",
            TaskOutcome::NotListening => "not_listening",
            TaskOutcome::Blocked => "blocked",
        }
    }
}

/// What became of a task event, or of an event before it was typed: the `fate` of
/// `picogent_events_total` other than a message's (a [`MessageOutcome`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EventFate {
    /// Recorded before: dropped.
    Duplicate,
    /// The state database did not record it: skipped until reconciliation.
    StateError,
    /// Not for the agent to act on.
    Ignored,
    /// An assignment a run already covers (reconciliation saw it first).
    AlreadyWorked,
    /// An assignment worked by a run.
    Run,
    /// An unassignment that stopped the task's run.
    Stop,
    /// An assignment a reconciliation found and works.
    Reconciled,
    /// A run the daily spend guard refused.
    SpendGuard,
    /// An assignment of a task that waits for other tasks not done yet: no run.
    Blocked,
    /// A task now done whose end started a task it held.
    Unblocked,
    /// A sub-task now done, rolled up on its parent (a step ticked, the summary once all are).
    RolledUp,
    /// A sub-task handed back by its assignee (rejected), said on its parent.
    HandedBack,
}

impl EventFate {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            EventFate::Duplicate => "duplicate",
            EventFate::StateError => "state_error",
            EventFate::Ignored => "ignored",
            EventFate::AlreadyWorked => "already_worked",
            EventFate::Run => "run",
            EventFate::Stop => "stop",
            EventFate::Reconciled => "reconciled",
            EventFate::SpendGuard => "spend_guard",
            EventFate::Blocked => "blocked",
            EventFate::Unblocked => "unblocked",
            EventFate::RolledUp => "rolled_up",
            EventFate::HandedBack => "handed_back",
        }
    }
}
