//! Run records: one row per model run, opened before its first effect and closed when it ends.
//! A row still `running` when the agent starts up belongs to a run a crash cut short.

use std::time::Duration;

use picogent_tracker::session::SessionKey;
use serde::Serialize;
use time::OffsetDateTime;

#[cfg(any(test, feature = "test-support"))]
use crate::store::NewRun;
use crate::store::{RunColumns, RunEnd};
use crate::{Spend, State, StateError, from_ms, now_ms, to_i64, to_ms, to_u64};

/// Where a run is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Waiting in the run queue of replicas sharing PostgreSQL for one of them to take it.
    Queued,
    /// Started and not finished; at start-up this means the run was cut short.
    Running,
    Completed,
    Failed,
    /// Ended without doing anything: a task run whose model answered in text and called no
    /// tool. Not a success, and counted apart from other failures: it says the model does not
    /// work tasks (one that cannot call tools, or a base model).
    DidNothing,
    /// Stopped on purpose: a person said stop, the task was unassigned, or MCP `stop_run`.
    Stopped,
    /// Cut short by a shutdown or a crash. Stored as such only when a restart found it `running`
    /// and did not resume it; a run a shutdown cuts short stays `running` so the next start
    /// resumes it.
    Interrupted,
}

impl RunStatus {
    pub const ALL: [RunStatus; 7] = [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::DidNothing,
        RunStatus::Stopped,
        RunStatus::Interrupted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::DidNothing => "did_nothing",
            RunStatus::Stopped => "stopped",
            RunStatus::Interrupted => "interrupted",
        }
    }

    pub fn parse(text: &str) -> Option<RunStatus> {
        RunStatus::ALL.into_iter().find(|status| status.as_str() == text)
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a run ended, written by [`State::finish_run`].
#[derive(Debug, Clone, PartialEq)]
pub struct FinishRun {
    /// Any status but `Running`.
    pub status: RunStatus,
    pub turns: u32,
    pub tool_calls: u32,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Time spent waiting for the model.
    pub model_duration: Duration,
    /// Time spent in tool calls.
    pub tool_duration: Duration,
    /// What the run achieved or why it stopped, in a sentence.
    pub outcome: Option<String>,
    /// The error that ended a failed run.
    pub error: Option<String>,
    /// The full run record and transcript; `None` keeps what [`State::save_run_record`] stored.
    pub record: Option<serde_json::Value>,
    /// What the run cost, when the model has a price.
    pub cost: Option<f64>,
}

impl FinishRun {
    /// An ending with `status` and every count zero.
    pub fn new(status: RunStatus) -> FinishRun {
        FinishRun {
            status,
            turns: 0,
            tool_calls: 0,
            prompt_tokens: 0,
            completion_tokens: 0,
            model_duration: Duration::ZERO,
            tool_duration: Duration::ZERO,
            outcome: None,
            error: None,
            record: None,
            cost: None,
        }
    }
}

/// What a person is asked for while a run waits on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitKind {
    /// `ask` mode: may the call run?
    Approval,
    /// An MCP server asks for input during a tool call.
    Elicitation,
    /// The model asks a clarifying question.
    Question,
    /// The model proposes a plan of sub-tasks, made only on a yes.
    Plan,
}

impl WaitKind {
    pub const ALL: [WaitKind; 4] = [WaitKind::Approval, WaitKind::Elicitation, WaitKind::Question, WaitKind::Plan];

    pub fn as_str(self) -> &'static str {
        match self {
            WaitKind::Approval => "approval",
            WaitKind::Elicitation => "elicitation",
            WaitKind::Question => "question",
            WaitKind::Plan => "plan",
        }
    }
}

/// What a running run waits for from a person (its status is then `awaiting_input`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Waiting {
    pub kind: WaitKind,
    /// What is asked, in a sentence ("may I move task TE-3 to done?").
    pub what: String,
    /// The person asked, when one is (their slug).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub person: Option<String>,
    /// The message that asks, on the tracker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asked_message_id: Option<String>,
    /// Since when (Unix ms).
    pub since_ms: i64,
    /// Until when it waits (Unix ms); past it the wait ends as timed out.
    pub until_ms: i64,
    /// The people's replies read since the question that did not answer it (another person's,
    /// a stop, words that do not answer): how many, and the last of them. `None` until one was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passed_over: Option<PassedOver>,
}

/// The replies a waiting run read and passed over ([`Waiting::passed_over`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct PassedOver {
    pub count: u32,
    /// The last one's message on the tracker, and its author's slug.
    pub last_message_id: String,
    pub last_by: String,
}

/// One stored run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunRow {
    pub id: String,
    pub session_key: SessionKey,
    /// What started the run ([`Trigger`](crate::Trigger) as text), e.g. `task.assigned TE-3`.
    pub trigger: String,
    pub status: RunStatus,
    pub turns: u32,
    pub tool_calls: u32,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub model_duration_ms: u64,
    pub tool_duration_ms: u64,
    pub outcome: Option<String>,
    pub error: Option<String>,
    #[serde(serialize_with = "rfc3339")]
    pub started_at: OffsetDateTime,
    #[serde(serialize_with = "rfc3339_option")]
    pub finished_at: Option<OffsetDateTime>,
    /// The full run record and transcript, as the model loop stored it.
    pub record: Option<serde_json::Value>,
    /// What the run cost, when the model has a price.
    pub cost: Option<f64>,
    /// What it waits for from a person, while it is running and waits.
    pub waiting: Option<Waiting>,
}

/// One run's summary: its row without the record. The one shape a run is shown in outside the
/// inspector's pages: MCP's `run://list` and `run://{id}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSummary {
    pub id: String,
    /// The session (task or chat thread) the run belongs to.
    pub session: SessionKey,
    /// What started the run, e.g. `task.assigned TE-3` or `start_run TE-3`.
    pub trigger: String,
    pub status: RunStatus,
    pub turns: u32,
    pub tool_calls: u32,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub model_duration_ms: u64,
    pub tool_duration_ms: u64,
    /// What the run achieved or why it stopped, in a sentence.
    pub outcome: Option<String>,
    /// The error that ended a failed run.
    pub error: Option<String>,
    #[serde(serialize_with = "rfc3339")]
    pub started_at: OffsetDateTime,
    #[serde(serialize_with = "rfc3339_option")]
    pub finished_at: Option<OffsetDateTime>,
    /// What the run cost, when the model has a price (`llm.price`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    /// What it waits for from a person: its status is shown as `awaiting_input` then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<Waiting>,
}

impl RunRow {
    /// The run without its record.
    pub fn summary(&self) -> RunSummary {
        RunSummary {
            id: self.id.clone(),
            session: self.session_key.clone(),
            trigger: self.trigger.clone(),
            status: self.status,
            turns: self.turns,
            tool_calls: self.tool_calls,
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            model_duration_ms: self.model_duration_ms,
            tool_duration_ms: self.tool_duration_ms,
            outcome: self.outcome.clone(),
            error: self.error.clone(),
            started_at: self.started_at,
            finished_at: self.finished_at,
            cost: self.cost,
            waiting: self.waiting.clone(),
        }
    }

    /// Its status as people see it: `awaiting_input` while it waits for a person, else its
    /// stored status.
    pub fn shown_status(&self) -> &'static str {
        if self.status == RunStatus::Running && self.waiting.is_some() { AWAITING_INPUT } else { self.status.as_str() }
    }

    /// The run's record read into its type `T`: `None` when it has none; one that does not fit
    /// `T` is damaged, an error naming the run (never read as no record).
    pub fn record_as<T: serde::de::DeserializeOwned>(&self) -> Result<Option<T>, StateError> {
        let Some(record) = &self.record else { return Ok(None) };
        T::deserialize(record).map(Some).map_err(|cause| StateError::DamagedRecord { run_id: self.id.clone(), cause })
    }

    /// Wall-clock time from start to finish; `None` while running.
    pub fn duration(&self) -> Option<Duration> {
        let finished = self.finished_at?;
        Some((finished - self.started_at).try_into().unwrap_or(Duration::ZERO))
    }
}

impl State {
    #[cfg(any(test, feature = "test-support"))]
    /// Opens a run record in `running` and returns its id. Call it before the run's first effect.
    pub async fn start_run(&self, session_key: &SessionKey, trigger: &str) -> Result<String, StateError> {
        let run_id = uuid::Uuid::new_v4().to_string();
        let run = NewRun { id: &run_id, session_key, trigger, started_at_ms: now_ms() };
        on_store!(self, start_run(&run))?;
        Ok(run_id)
    }

    #[cfg(any(test, feature = "test-support"))]
    /// Claims `(kind, key)` and opens a run record for it in one transaction. Returns the run id,
    /// or `None` if the thing was claimed before (nothing is written then). See the module docs
    /// for why the two go together.
    pub async fn start_claimed_run(
        &self,
        kind: crate::ClaimKind,
        key: &str,
        session_key: &SessionKey,
        trigger: &str,
    ) -> Result<Option<String>, StateError> {
        let run_id = uuid::Uuid::new_v4().to_string();
        let run = NewRun { id: &run_id, session_key, trigger, started_at_ms: now_ms() };
        let started = on_store!(self, start_claimed_run(kind, key, &run))?;
        Ok(started.then_some(run_id))
    }

    /// Stores the run record of a run in progress (a checkpoint), so an interrupted run leaves
    /// its transcript behind.
    pub async fn save_run_record(&self, run_id: &str, record: &serde_json::Value) -> Result<(), StateError> {
        let text = json_text(record)?;
        if !on_store!(self, save_run_record(run_id, &text))? {
            return Err(StateError::UnknownRun { run_id: run_id.to_string() });
        }
        Ok(())
    }

    /// Records what the running run `run_id` waits for from a person, or (`None`) that it waits
    /// no more. A run that is no longer running is left as it is.
    pub async fn set_waiting(&self, run_id: &str, waiting: Option<&Waiting>) -> Result<(), StateError> {
        let text = waiting
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| StateError::Unstorable { field: "runs.waiting", message: e.to_string() })?;
        on_store!(self, set_waiting(run_id, text.as_deref()))?;
        Ok(())
    }

    /// Closes a running run. Returns `true` if this call closed it and `false` if it was already
    /// closed (the first ending stands).
    pub async fn finish_run(&self, run_id: &str, finish: &FinishRun) -> Result<bool, StateError> {
        if finish.status == RunStatus::Running {
            return Err(StateError::Unstorable {
                field: "runs.status",
                message: "a run cannot be finished as running".to_string(),
            });
        }
        let end = RunEnd {
            status: finish.status,
            turns: i64::from(finish.turns),
            tool_calls: i64::from(finish.tool_calls),
            prompt_tokens: to_i64("runs.prompt_tokens", finish.prompt_tokens)?,
            completion_tokens: to_i64("runs.completion_tokens", finish.completion_tokens)?,
            model_duration_ms: duration_ms("runs.model_duration_ms", finish.model_duration)?,
            tool_duration_ms: duration_ms("runs.tool_duration_ms", finish.tool_duration)?,
            outcome: finish.outcome.as_deref(),
            error: finish.error.as_deref(),
            finished_at_ms: now_ms(),
            record: finish.record.as_ref().map(json_text).transpose()?,
            cost: finish.cost,
            holder: self.replica.as_deref(),
        };
        if on_store!(self, finish_run(run_id, &end))? {
            return Ok(true);
        }
        match self.get_run(run_id).await? {
            Some(_) => Ok(false),
            None => Err(StateError::UnknownRun { run_id: run_id.to_string() }),
        }
    }

    #[cfg(any(test, feature = "test-support"))]
    /// Closes a run found `running` at start-up as `interrupted`, keeping its counts and record.
    /// Returns `true` if this call closed it.
    pub async fn mark_interrupted(&self, run_id: &str, reason: &str) -> Result<bool, StateError> {
        on_store!(self, mark_interrupted(run_id, reason, now_ms()))
    }

    pub async fn get_run(&self, run_id: &str) -> Result<Option<RunRow>, StateError> {
        on_store!(self, get_run(run_id))?.map(run_from_columns).transpose()
    }

    /// The latest `limit` runs, newest first.
    pub async fn list_runs(&self, limit: u32) -> Result<Vec<RunRow>, StateError> {
        on_store!(self, list_runs(i64::from(limit)))?.into_iter().map(run_from_columns).collect()
    }

    /// The latest `limit` runs of `session_key`, newest first (a task's runs, for its tree's page).
    pub async fn runs_of(&self, session_key: &SessionKey, limit: u32) -> Result<Vec<RunRow>, StateError> {
        on_store!(self, runs_of_session(session_key, i64::from(limit)))?.into_iter().map(run_from_columns).collect()
    }

    /// The ids of at most `limit` runs whose id begins with `prefix` (`picogent runs show` with a
    /// short id), sorted.
    pub async fn run_ids_starting_with(&self, prefix: &str, limit: u32) -> Result<Vec<String>, StateError> {
        let mut ids = on_store!(self, run_ids_starting_with(prefix, i64::from(limit)))?;
        ids.sort();
        Ok(ids)
    }

    /// Runs still `running`, oldest first. At start-up these are runs a crash or a kill cut
    /// short: candidates to resume, or to close with [`State::mark_interrupted`].
    pub async fn unfinished_runs(&self) -> Result<Vec<RunRow>, StateError> {
        on_store!(self, unfinished_runs())?.into_iter().map(run_from_columns).collect()
    }

    /// Whether any run of `session_key` has ended `completed`, `failed`, `did_nothing` or
    /// `stopped` (an interrupted run does not count: its work may be unfinished).
    pub async fn has_finished_run_for(&self, session_key: &SessionKey) -> Result<bool, StateError> {
        on_store!(self, has_finished_run_for(session_key))
    }

    /// What the runs of these sessions spent together (a tree of tasks' budget,
    /// `limits.max_tokens_per_tree`); a session with no runs adds nothing.
    pub async fn spend_of(&self, sessions: &[SessionKey]) -> Result<Spend, StateError> {
        let mut total = Spend::default();
        for session in sessions {
            let (tokens, cost) = on_store!(self, spend_of_session(session))?;
            total.tokens += to_u64("runs.prompt_tokens", tokens)?;
            total.cost += cost;
        }
        Ok(total)
    }

    /// Whether a run of `session_key` started at or after `since`: such a run already covers
    /// whatever happened at `since` (an assignment that reconciliation saw before its event came).
    pub async fn has_run_since(&self, session_key: &SessionKey, since: OffsetDateTime) -> Result<bool, StateError> {
        on_store!(self, has_run_since(session_key, to_ms(since)))
    }
}

/// The status a run waiting for a person is shown with ([`RunRow::shown_status`]).
pub const AWAITING_INPUT: &str = "awaiting_input";

fn run_from_columns(row: RunColumns) -> Result<RunRow, StateError> {
    let status = RunStatus::parse(&row.status).ok_or_else(|| StateError::Corrupt {
        field: "runs.status",
        message: format!("unknown status {:?}", row.status),
    })?;
    let session_key = row.session_key.parse().map_err(|error: picogent_tracker::session::UnknownSessionKey| {
        StateError::Corrupt { field: "runs.session_key", message: error.to_string() }
    })?;
    let record = row
        .record
        .map(|text| serde_json::from_str(&text))
        .transpose()
        .map_err(|e| StateError::Corrupt { field: "runs.record", message: e.to_string() })?;
    Ok(RunRow {
        id: row.id,
        session_key,
        trigger: row.trigger,
        status,
        turns: to_u32("runs.turns", row.turns)?,
        tool_calls: to_u32("runs.tool_calls", row.tool_calls)?,
        prompt_tokens: to_u64("runs.prompt_tokens", row.prompt_tokens)?,
        completion_tokens: to_u64("runs.completion_tokens", row.completion_tokens)?,
        model_duration_ms: to_u64("runs.model_duration_ms", row.model_duration_ms)?,
        tool_duration_ms: to_u64("runs.tool_duration_ms", row.tool_duration_ms)?,
        outcome: row.outcome,
        error: row.error,
        started_at: from_ms(row.started_at_ms)?,
        finished_at: row.finished_at_ms.map(from_ms).transpose()?,
        record,
        cost: row.cost,
        // Only a running run waits; an unreadable note is shown as no wait, not a failed read.
        waiting: row.waiting.filter(|_| status == RunStatus::Running).and_then(|text| serde_json::from_str(&text).ok()),
    })
}

fn json_text(value: &serde_json::Value) -> Result<String, StateError> {
    serde_json::to_string(value).map_err(|e| StateError::Unstorable { field: "runs.record", message: e.to_string() })
}

fn duration_ms(field: &'static str, duration: Duration) -> Result<i64, StateError> {
    i64::try_from(duration.as_millis())
        .map_err(|_| StateError::Unstorable { field, message: format!("{duration:?} is too long") })
}

fn to_u32(field: &'static str, value: i64) -> Result<u32, StateError> {
    u32::try_from(value).map_err(|_| StateError::Corrupt { field, message: format!("{value} is out of range") })
}

/// RFC 3339; a time that format cannot express (outside years 0–9999) is an empty string rather
/// than a failed read of the whole run.
fn rfc3339<S: serde::Serializer>(at: &OffsetDateTime, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&at.format(&time::format_description::well_known::Rfc3339).unwrap_or_default())
}

/// RFC 3339, or `null` for no time (or one that format cannot express).
fn rfc3339_option<S: serde::Serializer>(at: &Option<OffsetDateTime>, serializer: S) -> Result<S::Ok, S::Error> {
    match at.and_then(|at| at.format(&time::format_description::well_known::Rfc3339).ok()) {
        Some(text) => serializer.serialize_str(&text),
        None => serializer.serialize_none(),
    }
}
