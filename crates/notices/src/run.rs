//! The short notices of a run that ended outside the model loop, and of a firing that never
//! became a run: each says what happened and what to do, in one or two sentences.

use std::fmt::Display;

use crate::again::AskAgain;

/// A run that failed before its model loop (it could not read what its prompt needs, say).
pub fn could_not_start(error: &dyn Display, ask: &AskAgain) -> String {
    format!("I could not start on this: {error}. I will not retry on my own; {}.", ask.try_again())
}

/// A run someone stopped, and why.
pub fn stopped(reason: &str) -> String {
    format!("Stopped: {reason}.")
}

/// A run stopped before it started (waiting in the queue).
pub fn stopped_before_start(reason: &str) -> String {
    format!("Stopped before it started: {reason}.")
}

/// A direct-mode run whose coding agent did not finish: nothing of its work was pushed.
pub fn coding_agent_failed(failure: &str) -> String {
    format!("I could not finish this: {failure}. Nothing was pushed.")
}

/// A stale check's run that could not nudge at all: the state did not flush before its first post.
pub fn could_not_nudge_stale(error: &dyn Display) -> String {
    format!("I could not nudge the stale tasks: {error}.")
}

/// A stale check's run that nudged none of its tasks: each `failed` names a task and why.
pub fn could_not_nudge(failed: &[String]) -> String {
    format!("I could not nudge {}.", failed.join(", "))
}

/// A firing of the job `job` (of kind `kind`: `standup`, `stale`, `prompt`) that failed before
/// its run, said where the job would have posted.
pub fn firing_failed(kind: &str, job: &str, detail: &str) -> String {
    format!(
        "The scheduled {kind} `{job}` could not run: {detail}. The next firing runs as planned; `picogent schedules run \
         {job}` runs one now."
    )
}
