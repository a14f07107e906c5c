//! The `schedules` section made typed: each entry checked once, at start, into a [`Job`] whose
//! kind carries only what that kind uses. A mistake is a [`JobProblem`] naming its field.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::{
    DEFAULT_BLOCKED_LABEL, DEFAULT_DUE_WITHIN_DAYS, JobConfig, JobKindName, MAX_CATCH_UP_MS, SchedulesConfig,
};
use crate::timing::{Cadence, CadenceError};

/// The most jobs a configuration may hold: each is a loop, a row of state and a line of metrics.
const MAX_JOBS: usize = 64;
/// The longest name of a job or a session: names go into metric labels, claims and URLs.
const MAX_NAME_CHARS: usize = 64;
/// The most `days` a stale job may wait for: ten years, so date arithmetic never overflows.
const MAX_STALE_DAYS: u32 = 3650;
/// The most `due_within_days` may be: a year ahead is already everything.
const MAX_DUE_WITHIN_DAYS: u32 = 365;

/// One scheduled job, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// Its key under `schedules`: letters, digits, '-' and '_', so it can name a metric label,
    /// a claim and a URL as it is.
    pub name: String,
    pub cadence: Cadence,
    pub kind: JobKind,
    /// How late a firing missed while picogent was down may still run (`catch_up_ms`).
    pub catch_up: Duration,
    pub budget: JobBudget,
}

/// What a job does when it fires, with what that kind needs and nothing else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobKind {
    /// Posts a digest of the project's tasks to its chat.
    Standup { project: String, blocked_labels: Vec<String>, due_within_days: u32 },
    /// Nudges the people whose assigned tasks have been untouched for `days`; in one project, or
    /// in all when `project` is `None`.
    Stale { project: Option<String>, days: u32 },
    /// Runs the prompt file as a model run in the named session; its answer is posted to the
    /// project's chat, or only recorded when `project` is `None`.
    Prompt { prompt: PathBuf, project: Option<String>, session: String },
}

impl JobKind {
    /// The word written in `kind`.
    pub fn name(&self) -> &'static str {
        self.word().word()
    }

    /// The project the job is about or posts to, when it has one.
    pub fn project(&self) -> Option<&str> {
        match self {
            JobKind::Standup { project, .. } => Some(project),
            JobKind::Stale { project, .. } | JobKind::Prompt { project, .. } => project.as_deref(),
        }
    }

    /// What this kind reads from the board before it decides whether there is anything to do, in
    /// one sentence for the inspector.
    pub fn reads(&self) -> &'static str {
        match self {
            JobKind::Standup { .. } => "the project's tasks, to find what moved since the last digest",
            JobKind::Stale { .. } => {
                "the open tasks assigned to people, and the comments of those untouched for `days` days"
            }
            JobKind::Prompt { .. } => "nothing: it always runs its prompt",
        }
    }

    fn word(&self) -> JobKindName {
        match self {
            JobKind::Standup { .. } => JobKindName::Standup,
            JobKind::Stale { .. } => JobKindName::Stale,
            JobKind::Prompt { .. } => JobKindName::Prompt,
        }
    }
}

/// A firing's own budget; `None` takes the agent's (`limits.max_turns`,
/// `limits.max_tokens_per_run`), which this crate does not know.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JobBudget {
    pub max_turns: Option<u32>,
    pub max_tokens: Option<u64>,
}

/// A mistake in the section: the field (`schedules.standup-daily.cron`) and what is wrong with
/// it, saying what to write instead.
pub use picogent_support::setting::Problem as JobProblem;

/// Checks the section, for the configuration's validation: its first mistake, like the other
/// sections' checks.
pub fn check(config: &SchedulesConfig, config_dir: &Path) -> Result<(), JobProblem> {
    jobs(config, config_dir).map(|_| ())
}

/// The jobs of the section, in the order of their names; relative prompt files are taken from
/// `config_dir`, the config file's folder. The first mistake found is the error.
pub fn jobs(config: &SchedulesConfig, config_dir: &Path) -> Result<Vec<Job>, JobProblem> {
    if config.len() > MAX_JOBS {
        return Err(JobProblem {
            field: "schedules".to_string(),
            message: format!("{} jobs, and at most {MAX_JOBS} may be scheduled: remove some", config.len()),
        });
    }
    config.iter().map(|(name, entry)| job(name, entry, config_dir)).collect()
}

/// One entry, checked in the order a person fixes it: its name, the fields of its kind, its
/// timing, its numbers, and last its prompt file on disk.
fn job(name: &str, entry: &JobConfig, config_dir: &Path) -> Result<Job, JobProblem> {
    let problem = |field: &str, message: String| JobProblem { field: format!("schedules.{name}.{field}"), message };
    if !name_ok(name) {
        return Err(JobProblem {
            field: format!("schedules.{name}"),
            message: format!(
                "{name:?} is not a job name: expected letters, digits, '-' or '_', at most {MAX_NAME_CHARS} characters (the name goes into metric labels, claims and URLs)"
            ),
        });
    }
    let kind = entry.kind;
    let others = [
        ("days", entry.days.is_some(), JobKindName::Stale),
        ("prompt", entry.prompt.is_some(), JobKindName::Prompt),
        ("session", entry.session.is_some(), JobKindName::Prompt),
        ("blocked_labels", entry.blocked_labels.is_some(), JobKindName::Standup),
        ("due_within_days", entry.due_within_days.is_some(), JobKindName::Standup),
    ];
    if let Some((field, _, owner)) = others.iter().find(|(_, set, owner)| *set && *owner != kind) {
        return Err(problem(
            field,
            format!(
                "`{field}` is for {} jobs only, and this is a {} job: remove it (or change `kind`)",
                owner.word(),
                kind.word()
            ),
        ));
    }
    if let Some(project) = &entry.project
        && !slug_ok(project)
    {
        return Err(problem(
            "project",
            format!("{project:?} is not a project slug: expected letters, digits, '-' or '_'"),
        ));
    }
    let kind = match kind {
        JobKindName::Standup => standup(entry).map_err(|(field, message)| problem(field, message))?,
        JobKindName::Stale => stale(entry).map_err(|(field, message)| problem(field, message))?,
        JobKindName::Prompt => prompt(name, entry, config_dir).map_err(|(field, message)| problem(field, message))?,
    };
    let cadence = Cadence::parse(&entry.cron, &entry.timezone).map_err(|error| match error {
        CadenceError::Zone { .. } => problem("timezone", error.to_string()),
        CadenceError::Cron { .. } | CadenceError::Never { .. } => problem("cron", error.to_string()),
    })?;
    if entry.catch_up_ms > MAX_CATCH_UP_MS {
        return Err(problem(
            "catch_up_ms",
            format!(
                "expected at most {MAX_CATCH_UP_MS} (7 days), got {}: a firing missed longer ago is not worth running; 0 never runs a missed firing",
                entry.catch_up_ms
            ),
        ));
    }
    if entry.max_turns == Some(0) {
        return Err(problem("max_turns", "expected at least 1 turn, or leave it out for limits.max_turns".into()));
    }
    if entry.max_tokens == Some(0) {
        return Err(problem(
            "max_tokens",
            "expected at least 1 token, or leave it out for limits.max_tokens_per_run".into(),
        ));
    }
    if let JobKind::Prompt { prompt, .. } = &kind {
        readable_prompt(name, prompt).map_err(|error| problem("prompt", error.to_string()))?;
    }
    Ok(Job {
        name: name.to_string(),
        cadence,
        kind,
        catch_up: Duration::from_millis(entry.catch_up_ms),
        budget: JobBudget { max_turns: entry.max_turns, max_tokens: entry.max_tokens },
    })
}

/// A field of the entry and what is wrong with it.
type FieldProblem = (&'static str, String);

fn standup(entry: &JobConfig) -> Result<JobKind, FieldProblem> {
    let Some(project) = entry.project.clone() else {
        return Err((
            "project",
            "a standup job needs the project whose chat gets the digest: add \"project\": \"<slug>\"".into(),
        ));
    };
    let blocked_labels = entry.blocked_labels.clone().unwrap_or_else(|| vec![DEFAULT_BLOCKED_LABEL.to_string()]);
    if blocked_labels.iter().any(|label| label.trim().is_empty()) {
        return Err(("blocked_labels", "expected labels that are not empty, like [\"blocked\"]".into()));
    }
    let due_within_days = entry.due_within_days.unwrap_or(DEFAULT_DUE_WITHIN_DAYS);
    if due_within_days > MAX_DUE_WITHIN_DAYS {
        return Err(("due_within_days", format!("expected at most {MAX_DUE_WITHIN_DAYS} days, got {due_within_days}")));
    }
    Ok(JobKind::Standup { project, blocked_labels, due_within_days })
}

fn stale(entry: &JobConfig) -> Result<JobKind, FieldProblem> {
    match entry.days {
        None => Err((
            "days",
            "a stale job needs `days`: tasks untouched for this many days are nudged, like \"days\": 5".into(),
        )),
        Some(days) if !(1..=MAX_STALE_DAYS).contains(&days) => Err((
            "days",
            format!(
                "expected from 1 to {MAX_STALE_DAYS} days, got {days}: tasks untouched for this many days are nudged"
            ),
        )),
        Some(days) => Ok(JobKind::Stale { project: entry.project.clone(), days }),
    }
}

fn prompt(name: &str, entry: &JobConfig, config_dir: &Path) -> Result<JobKind, FieldProblem> {
    let Some(file) = &entry.prompt else {
        return Err((
            "prompt",
            "a prompt job needs `prompt`: the prompt file it runs, relative to the config file's folder, like \"prompt\": \"prompts/weekly.md\"".into(),
        ));
    };
    let session = entry.session.clone().unwrap_or_else(|| name.to_string());
    if !name_ok(&session) {
        return Err((
            "session",
            format!(
                "{session:?} is not a session name: expected letters, digits, '-' or '_', at most {MAX_NAME_CHARS} characters"
            ),
        ));
    }
    let joined = config_dir.join(file);
    // `absolute` leaves links alone: the file is read where the operator put it, each time.
    let prompt = std::path::absolute(&joined).unwrap_or(joined);
    Ok(JobKind::Prompt { prompt, project: entry.project.clone(), session })
}

/// Why a prompt job's file cannot be its prompt; the message names the job and the path, since
/// the path was resolved from the config file's folder.
#[derive(Debug, thiserror::Error)]
enum PromptFileError {
    #[error("the prompt file of job {job:?}, {}, is a folder: expected a file", .path.display())]
    Folder { job: String, path: PathBuf },
    #[error("the prompt file of job {job:?}, {}, is empty: write the prompt in it", .path.display())]
    Empty { job: String, path: PathBuf },
    #[error("the prompt file of job {job:?}, {}, is not UTF-8 text", .path.display())]
    NotText { job: String, path: PathBuf },
    #[error(
        "cannot read the prompt file of job {job:?}, {}: {source} (a relative path is taken from the config file's folder)",
        .path.display()
    )]
    Unreadable { job: String, path: PathBuf, source: std::io::Error },
}

/// The prompt file is a file of UTF-8 text with something in it.
fn readable_prompt(name: &str, path: &Path) -> Result<(), PromptFileError> {
    let (job, path) = (name.to_string(), path.to_path_buf());
    if path.is_dir() {
        return Err(PromptFileError::Folder { job, path });
    }
    match std::fs::read_to_string(&path) {
        Ok(text) if text.trim().is_empty() => Err(PromptFileError::Empty { job, path }),
        Ok(_) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::InvalidData => Err(PromptFileError::NotText { job, path }),
        Err(source) => Err(PromptFileError::Unreadable { job, path, source }),
    }
}

/// A job's or a session's name: letters, digits, '-' and '_', at most [`MAX_NAME_CHARS`].
fn name_ok(name: &str) -> bool {
    slug_ok(name) && name.chars().count() <= MAX_NAME_CHARS
}

/// The tracker's slugs: letters, digits, '-' and '_' (the tracker crate's `slug_ok`, which this
/// crate does not depend on for one line).
fn slug_ok(text: &str) -> bool {
    !text.is_empty() && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}
