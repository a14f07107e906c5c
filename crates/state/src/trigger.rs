//! What started a run ([`Trigger`]), as a queued run keeps it: typed in its stored request, and
//! as its text in the run's row, which people and tools read. The text reads back ([`FromStr`]),
//! for a row written before the request kept the typed value.
//!
//! Invariant: `Display` and `FromStr` are each other's inverse, and `FromStr` takes only a text
//! `Display` writes ([`UnknownTrigger`] otherwise).

use std::str::FromStr;

/// What started a run. It is kept twice with a queued run: typed in its stored request, so the
/// run claimed again gets back the very trigger it was queued with, and as its text
/// (`task.assigned TE-4`, [`Display`](std::fmt::Display)) in the run's row, which the run
/// inspector, MCP's `run://` and `picogent runs list --trigger` read (they go by its first word).
/// [`FromStr`] reads the text back, for a row written before the request kept it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Trigger {
    /// The task of key `task_key` was assigned to the agent (heard or reconciled).
    Assigned { task_key: String },
    /// The message `message_id` addressed the agent.
    Message { message_id: String },
    /// An MCP client asked for a run of the task `task_key`.
    StartRun { task_key: String },
    /// An MCP client asked for a run of a prompt.
    StartPrompt,
    /// Input came too late for the run `run_id`, and this run answers it.
    FollowUp { run_id: String },
    /// A scheduled job fired (or a person asked for a firing now).
    Scheduled { job: String, fire_at_ms: i64, manual: bool },
}

/// The text's suffix of a firing a person asked for now.
const RUN_NOW: &str = " (run now)";

impl std::fmt::Display for Trigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Trigger::Assigned { task_key } => write!(f, "task.assigned {task_key}"),
            Trigger::Message { message_id } => write!(f, "message.new {message_id}"),
            Trigger::StartRun { task_key } => write!(f, "start_run {task_key}"),
            Trigger::StartPrompt => f.write_str("start_run prompt"),
            Trigger::FollowUp { run_id } => write!(f, "follow-up of {run_id}"),
            Trigger::Scheduled { job, fire_at_ms, manual } => {
                // A time RFC 3339 cannot write (before year 0, after 9999) is written as its
                // milliseconds, and read back so.
                let at = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(*fire_at_ms) * 1_000_000)
                    .ok()
                    .and_then(|at| at.format(&time::format_description::well_known::Rfc3339).ok())
                    .unwrap_or_else(|| fire_at_ms.to_string());
                let how = if *manual { RUN_NOW } else { "" };
                write!(f, "schedule {job} {at}{how}")
            }
        }
    }
}

/// A recorded trigger's text that names no trigger this version writes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} names no trigger this version knows")]
pub struct UnknownTrigger {
    pub text: String,
}

impl FromStr for Trigger {
    type Err = UnknownTrigger;

    /// The trigger whose [`Display`](std::fmt::Display) text is `text`, and only for a text
    /// `Display` writes: a time written another way (`+02:00`, milliseconds RFC 3339 could
    /// write) is unknown. Keys, ids and job names are never empty, and `start_run prompt` is the
    /// prompt's (no task key is `prompt`).
    fn from_str(text: &str) -> Result<Trigger, UnknownTrigger> {
        let unknown = || UnknownTrigger { text: text.to_string() };
        let (word, rest) = text.split_once(' ').ok_or_else(unknown)?;
        if rest.is_empty() {
            return Err(unknown());
        }
        let rest = rest.to_string();
        let trigger = match word {
            "task.assigned" => Trigger::Assigned { task_key: rest },
            "message.new" => Trigger::Message { message_id: rest },
            "start_run" if rest == "prompt" => Trigger::StartPrompt,
            "start_run" => Trigger::StartRun { task_key: rest },
            "follow-up" => match rest.strip_prefix("of ") {
                Some(run_id) if !run_id.is_empty() => Trigger::FollowUp { run_id: run_id.to_string() },
                _ => return Err(unknown()),
            },
            "schedule" => {
                let (at, manual) = match rest.strip_suffix(RUN_NOW) {
                    Some(at) => (at, true),
                    None => (rest.as_str(), false),
                };
                // The job's name comes first and may hold spaces; the time holds none.
                let (job, at) = at.rsplit_once(' ').filter(|(job, _)| !job.is_empty()).ok_or_else(unknown)?;
                let fire_at_ms = fire_at_ms(at).ok_or_else(unknown)?;
                Trigger::Scheduled { job: job.to_string(), fire_at_ms, manual }
            }
            _ => return Err(unknown()),
        };
        if trigger.to_string() != text {
            return Err(unknown());
        }
        Ok(trigger)
    }
}

/// A firing's time as [`Trigger`]'s text writes it: RFC 3339, or milliseconds where that cannot
/// write it.
fn fire_at_ms(at: &str) -> Option<i64> {
    match time::OffsetDateTime::parse(at, &time::format_description::well_known::Rfc3339) {
        Ok(at) => i64::try_from(at.unix_timestamp_nanos() / 1_000_000).ok(),
        Err(_) => at.parse().ok(),
    }
}

#[cfg(test)]
#[path = "trigger_tests.rs"]
mod tests;
