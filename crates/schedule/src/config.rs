//! The `schedules` section of `agent.json`: jobs by name, each a cron pattern in a time zone and
//! what to do when it fires. This crate owns it; the configuration embeds it and calls the
//! crate's `check` when it validates.
//!
//! ```json
//! "schedules": {
//!   "standup-daily": { "cron": "0 9 * * 1-5", "timezone": "Europe/Berlin", "kind": "standup", "project": "billing" },
//!   "nudge": { "cron": "0 10 * * 1", "kind": "stale", "days": 5 },
//!   "weekly-report": { "cron": "0 16 * * 5", "kind": "prompt", "prompt": "prompts/weekly.md", "project": "billing" }
//! }
//! ```
//!
//! Every field of every kind sits flat in one struct that refuses unknown fields (no serde
//! `flatten`, which would let a typo through); which fields a kind takes is checked when the
//! section becomes typed jobs (the `jobs` module), with an error naming the field and its kind.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// `schedules`: the jobs by name. Empty (the default): nothing is scheduled.
pub type SchedulesConfig = BTreeMap<String, JobConfig>;

/// One scheduled job as written in `agent.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobConfig {
    /// When it fires: 5 fields, minute hour day month weekday, like `0 9 * * 1-5` (09:00 Monday
    /// to Friday), or a nickname like `@daily`. No seconds: a job fires at most once a minute.
    pub cron: String,
    /// The IANA time zone the pattern is read in (`Europe/Berlin`), so 09:00 stays 09:00 across
    /// daylight-saving changes.
    #[serde(default = "default_timezone")]
    pub timezone: String,
    /// What it does: `standup`, `stale` or `prompt`.
    #[serde(deserialize_with = "picogent_support::choice::one_of")]
    pub kind: JobKindName,
    /// The project's slug. `standup`: required, its chat gets the digest. `stale`: only its tasks
    /// (all projects when absent). `prompt`: where the answer is posted (absent: the answer is
    /// only recorded).
    #[serde(default)]
    pub project: Option<String>,
    /// `stale` only, required: tasks untouched for this many days are nudged (at least 1).
    #[serde(default)]
    pub days: Option<u32>,
    /// `prompt` only, required: the prompt file, relative to the config file's folder.
    #[serde(default)]
    pub prompt: Option<PathBuf>,
    /// `prompt` only: the named session the runs continue (default: the job's name), so each
    /// run remembers the last; letters, digits, '-' and '_'.
    #[serde(default)]
    pub session: Option<String>,
    /// `standup` only: the labels that mean a task is blocked (default `["blocked"]`).
    #[serde(default)]
    pub blocked_labels: Option<Vec<String>>,
    /// `standup` only: a task with a label `due:YYYY-MM-DD` at most this many days ahead (or
    /// overdue) is listed as due (default 2).
    #[serde(default)]
    pub due_within_days: Option<u32>,
    /// A firing missed while picogent was down runs once at start if it is at most this late, in
    /// milliseconds (at most 7 days); 0: a missed firing never runs. Default: one hour.
    #[serde(default = "default_catch_up_ms")]
    pub catch_up_ms: u64,
    /// The firing's own turn budget; absent: `limits.max_turns`.
    #[serde(default)]
    pub max_turns: Option<u32>,
    /// The firing's own token budget; absent: `limits.max_tokens_per_run`.
    #[serde(default)]
    pub max_tokens: Option<u64>,
}

/// The kinds of job, as written in `kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobKindName {
    /// Posts a digest of the project's tasks to its chat.
    Standup,
    /// Nudges the people whose assigned tasks have not moved for `days`.
    Stale,
    /// Runs a prompt file as a model run in a named session.
    Prompt,
}

impl JobKindName {
    /// The word written in `kind`.
    pub fn word(self) -> &'static str {
        match self {
            JobKindName::Standup => "standup",
            JobKindName::Stale => "stale",
            JobKindName::Prompt => "prompt",
        }
    }
}

/// The default of `timezone`.
const DEFAULT_TIMEZONE: &str = "UTC";
/// The default of `catch_up_ms`: a firing missed by an hour's restart still runs.
const DEFAULT_CATCH_UP_MS: u64 = 3_600_000;
/// The most `catch_up_ms` may be: a firing missed longer ago than a week is news no one needs.
pub const MAX_CATCH_UP_MS: u64 = 7 * 24 * 3_600_000;
/// The default of `blocked_labels`.
pub(crate) const DEFAULT_BLOCKED_LABEL: &str = "blocked";
/// The default of `due_within_days`.
pub(crate) const DEFAULT_DUE_WITHIN_DAYS: u32 = 2;

fn default_timezone() -> String {
    DEFAULT_TIMEZONE.to_string()
}

fn default_catch_up_ms() -> u64 {
    DEFAULT_CATCH_UP_MS
}
