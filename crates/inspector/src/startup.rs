//! What the agent took up when it started: how the event stream began and what the first
//! reconciliation found and did. The runtime fills it in; shown in `/readyz`'s body, logged once
//! at info, and worded for the health page (`view::startup_view`).

use std::collections::BTreeMap;

use serde::Serialize;

use picogent_tracker::stream::StartMode;

/// How the agent started, filled in as it happens.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StartupReport {
    /// `head` (a first start: past events not acted on), `resume` or `from_start`.
    pub mode: StartMode,
    /// The seq the stream began after: the tracker's head, the recorded position, or 0.
    pub from_seq: u64,
    /// Past events read at the head and not acted on.
    pub skipped_events: u64,
    /// What the first reconciliation found; `null` until it has run.
    pub reconciliation: Option<ReconcileReport>,
}

/// What one reconciliation found through REST and what became of it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ReconcileReport {
    pub tasks: TaskCounts,
    pub mentions: MentionCounts,
    /// What could not be read (the tracker failed even after retries), in words.
    pub errors: Vec<String>,
}

/// Tasks open and assigned to the agent (`todo`, `in_progress`): tasks in review or done, or
/// assigned to someone else, are not listed at all.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TaskCounts {
    /// Open tasks assigned to the agent that the tracker listed.
    pub open: u64,
    /// Runs started (or queued) for them.
    pub worked: u64,
    /// The rest, by reason: `summarised` (the board shows the agent's comment after the task's
    /// last change), `finished_run`, `unfinished_run` (resumed from the state file instead),
    /// `running`, `board_error`, `state_error`, `refused` (the spend guard, a shutdown), or
    /// `blocked` (it waits for tasks not done yet, its `blocked_by:` labels).
    pub skipped: BTreeMap<String, u64>,
}

/// Messages mentioning the agent.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct MentionCounts {
    /// `startup.answer_mentions_since`: older mentions are not answered.
    pub window: String,
    /// Runs started for them, or input handed to a run of their thread.
    pub answered: u64,
    /// The rest, by reason: `old` (older than the window; counted on the pages read, which stop
    /// at the first old one, so at most a page of them), `handled` (the board shows the agent's
    /// message after it where it answers), `seen` (handled before, by the state file),
    /// `board_error`, and the router's own fates (`own_message`, `not_addressed`, `reply_cap`,
    /// `duplicate`, `refused`, …).
    pub skipped: BTreeMap<String, u64>,
}

impl TaskCounts {
    pub fn skip(&mut self, reason: &str) {
        *self.skipped.entry(reason.to_string()).or_default() += 1;
    }
}

impl MentionCounts {
    pub fn skip(&mut self, reason: &str) {
        *self.skipped.entry(reason.to_string()).or_default() += 1;
    }
}

/// `reason=count` pairs for a log line.
pub fn counts_line(counts: &BTreeMap<String, u64>) -> String {
    let pairs: Vec<String> = counts.iter().map(|(reason, count)| format!("{reason}={count}")).collect();
    if pairs.is_empty() { "none".to_string() } else { pairs.join(" ") }
}
