//! Run records: one row per model run, opened before its first effect and closed when it ends.
//! A row still `running` when the agent starts up belongs to a run a crash cut short.

use std::time::Duration;

use serde::Serialize;
use sqlx::Row;
use sqlx::sqlite::SqliteRow;
use time::OffsetDateTime;

use super::{State, StateError, from_ms, now_ms, to_i64, to_u64};

/// Where a run is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Started and not finished; at start-up this means the run was cut short.
    Running,
    Completed,
    Failed,
    /// Stopped on purpose: a person said stop, the task was unassigned, or MCP `stop_run`.
    Stopped,
    /// Cut short by a shutdown or a crash. Stored as such only when a restart found it `running`
    /// and did not resume it; a run a shutdown cuts short stays `running` so the next start
    /// resumes it.
    Interrupted,
}

impl RunStatus {
    pub const ALL: [RunStatus; 5] =
        [RunStatus::Running, RunStatus::Completed, RunStatus::Failed, RunStatus::Stopped, RunStatus::Interrupted];

    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
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

/// One stored run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunRow {
    pub id: String,
    pub session_key: String,
    /// What started the run, e.g. `task.assigned TE-3`, `message.new <id>`, `manual`.
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
}

impl RunRow {
    /// Wall-clock time from start to finish; `None` while running.
    pub fn duration(&self) -> Option<Duration> {
        let finished = self.finished_at?;
        Some((finished - self.started_at).try_into().unwrap_or(Duration::ZERO))
    }
}

/// The columns [`run_from_row`] reads, as a literal so queries stay `&'static str` (sqlx wants
/// static SQL, which keeps values out of the query text).
macro_rules! run_columns {
    () => {
        "id, session_key, trigger, status, turns, tool_calls, prompt_tokens, completion_tokens, \
         model_duration_ms, tool_duration_ms, outcome, error, started_at_ms, finished_at_ms, record, cost"
    };
}

impl State {
    /// Opens a run record in `running` and returns its id. Call it before the run's first effect.
    pub async fn start_run(&self, session_key: &str, trigger: &str) -> Result<String, StateError> {
        let run_id = uuid::Uuid::new_v4().to_string();
        sqlx::query(
            "INSERT INTO runs (id, session_key, trigger, status, started_at_ms) VALUES (?, ?, ?, 'running', ?)",
        )
        .bind(&run_id)
        .bind(session_key)
        .bind(trigger)
        .bind(now_ms())
        .execute(&self.pool)
        .await?;
        Ok(run_id)
    }

    /// Claims `(kind, key)` and opens a run record for it in one transaction. Returns the run id,
    /// or `None` if the thing was claimed before (nothing is written then). See the module docs
    /// for why the two go together.
    pub async fn start_claimed_run(
        &self,
        kind: super::ClaimKind,
        key: &str,
        session_key: &str,
        trigger: &str,
    ) -> Result<Option<String>, StateError> {
        let now = now_ms();
        let mut transaction = self.pool.begin().await?;
        let claimed = sqlx::query("INSERT OR IGNORE INTO claims (kind, key, claimed_at_ms) VALUES (?, ?, ?)")
            .bind(kind.as_str())
            .bind(key)
            .bind(now)
            .execute(&mut *transaction)
            .await?
            .rows_affected()
            == 1;
        if !claimed {
            return Ok(None);
        }
        let run_id = uuid::Uuid::new_v4().to_string();
        sqlx::query(
            "INSERT INTO runs (id, session_key, trigger, status, started_at_ms) VALUES (?, ?, ?, 'running', ?)",
        )
        .bind(&run_id)
        .bind(session_key)
        .bind(trigger)
        .bind(now)
        .execute(&mut *transaction)
        .await?;
        transaction.commit().await?;
        Ok(Some(run_id))
    }

    /// Stores the run record of a run in progress (a checkpoint), so an interrupted run leaves
    /// its transcript behind.
    pub async fn save_run_record(&self, run_id: &str, record: &serde_json::Value) -> Result<(), StateError> {
        let text = json_text(record)?;
        let updated =
            sqlx::query("UPDATE runs SET record = ? WHERE id = ?").bind(text).bind(run_id).execute(&self.pool).await?;
        if updated.rows_affected() == 0 {
            return Err(StateError::UnknownRun { run_id: run_id.to_string() });
        }
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
        let record = finish.record.as_ref().map(json_text).transpose()?;
        let updated = sqlx::query(
            "UPDATE runs SET status = ?, turns = ?, tool_calls = ?, prompt_tokens = ?, completion_tokens = ?, \
             model_duration_ms = ?, tool_duration_ms = ?, outcome = ?, error = ?, finished_at_ms = ?, \
             record = COALESCE(?, record), cost = ? \
             WHERE id = ? AND status = 'running'",
        )
        .bind(finish.status.as_str())
        .bind(i64::from(finish.turns))
        .bind(i64::from(finish.tool_calls))
        .bind(to_i64("runs.prompt_tokens", finish.prompt_tokens)?)
        .bind(to_i64("runs.completion_tokens", finish.completion_tokens)?)
        .bind(duration_ms("runs.model_duration_ms", finish.model_duration)?)
        .bind(duration_ms("runs.tool_duration_ms", finish.tool_duration)?)
        .bind(finish.outcome.as_deref())
        .bind(finish.error.as_deref())
        .bind(now_ms())
        .bind(record)
        .bind(finish.cost)
        .bind(run_id)
        .execute(&self.pool)
        .await?;
        if updated.rows_affected() == 1 {
            return Ok(true);
        }
        match self.get_run(run_id).await? {
            Some(_) => Ok(false),
            None => Err(StateError::UnknownRun { run_id: run_id.to_string() }),
        }
    }

    /// Closes a run found `running` at start-up as `interrupted`, keeping its counts and record.
    /// Returns `true` if this call closed it.
    pub async fn mark_interrupted(&self, run_id: &str, reason: &str) -> Result<bool, StateError> {
        let updated = sqlx::query(
            "UPDATE runs SET status = 'interrupted', outcome = ?, finished_at_ms = ? WHERE id = ? AND status = 'running'",
        )
        .bind(reason)
        .bind(now_ms())
        .bind(run_id)
        .execute(&self.pool)
        .await?;
        Ok(updated.rows_affected() == 1)
    }

    pub async fn get_run(&self, run_id: &str) -> Result<Option<RunRow>, StateError> {
        let row = sqlx::query(concat!("SELECT ", run_columns!(), " FROM runs WHERE id = ?"))
            .bind(run_id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(run_from_row).transpose()
    }

    /// The latest `limit` runs, newest first.
    pub async fn list_runs(&self, limit: u32) -> Result<Vec<RunRow>, StateError> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            run_columns!(),
            " FROM runs ORDER BY started_at_ms DESC, rowid DESC LIMIT ?"
        ))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(run_from_row).collect()
    }

    /// Runs still `running`, oldest first. At start-up these are runs a crash or a kill cut
    /// short: candidates to resume, or to close with [`State::mark_interrupted`].
    pub async fn unfinished_runs(&self) -> Result<Vec<RunRow>, StateError> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            run_columns!(),
            " FROM runs WHERE status = 'running' ORDER BY started_at_ms, rowid"
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(run_from_row).collect()
    }

    /// Whether any run of `session_key` has ended `completed`, `failed` or `stopped` (an
    /// interrupted run does not count: its work may be unfinished).
    pub async fn has_finished_run_for(&self, session_key: &str) -> Result<bool, StateError> {
        let found: Option<i64> = sqlx::query_scalar(
            "SELECT 1 FROM runs WHERE session_key = ? AND status IN ('completed', 'failed', 'stopped') LIMIT 1",
        )
        .bind(session_key)
        .fetch_optional(&self.pool)
        .await?;
        Ok(found.is_some())
    }

    /// Whether a run of `session_key` started at or after `since`: such a run already covers
    /// whatever happened at `since` (an assignment that reconciliation saw before its event came).
    pub async fn has_run_since(&self, session_key: &str, since: OffsetDateTime) -> Result<bool, StateError> {
        let since_ms = (since.unix_timestamp_nanos() / 1_000_000) as i64;
        let found: Option<i64> =
            sqlx::query_scalar("SELECT 1 FROM runs WHERE session_key = ? AND started_at_ms >= ? LIMIT 1")
                .bind(session_key)
                .bind(since_ms)
                .fetch_optional(&self.pool)
                .await?;
        Ok(found.is_some())
    }
}

fn run_from_row(row: &SqliteRow) -> Result<RunRow, StateError> {
    let status_text: String = row.try_get("status")?;
    let status = RunStatus::parse(&status_text).ok_or_else(|| StateError::Corrupt {
        field: "runs.status",
        message: format!("unknown status {status_text:?}"),
    })?;
    let record: Option<String> = row.try_get("record")?;
    let record = record
        .map(|text| serde_json::from_str(&text))
        .transpose()
        .map_err(|e| StateError::Corrupt { field: "runs.record", message: e.to_string() })?;
    let finished_at: Option<i64> = row.try_get("finished_at_ms")?;
    Ok(RunRow {
        id: row.try_get("id")?,
        session_key: row.try_get("session_key")?,
        trigger: row.try_get("trigger")?,
        status,
        turns: to_u32("runs.turns", row.try_get("turns")?)?,
        tool_calls: to_u32("runs.tool_calls", row.try_get("tool_calls")?)?,
        prompt_tokens: to_u64("runs.prompt_tokens", row.try_get("prompt_tokens")?)?,
        completion_tokens: to_u64("runs.completion_tokens", row.try_get("completion_tokens")?)?,
        model_duration_ms: to_u64("runs.model_duration_ms", row.try_get("model_duration_ms")?)?,
        tool_duration_ms: to_u64("runs.tool_duration_ms", row.try_get("tool_duration_ms")?)?,
        outcome: row.try_get("outcome")?,
        error: row.try_get("error")?,
        started_at: from_ms(row.try_get("started_at_ms")?)?,
        finished_at: finished_at.map(from_ms).transpose()?,
        record,
        cost: row.try_get("cost")?,
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

fn rfc3339<S: serde::Serializer>(at: &OffsetDateTime, serializer: S) -> Result<S::Ok, S::Error> {
    let text = at.format(&time::format_description::well_known::Rfc3339).map_err(serde::ser::Error::custom)?;
    serializer.serialize_str(&text)
}

fn rfc3339_option<S: serde::Serializer>(at: &Option<OffsetDateTime>, serializer: S) -> Result<S::Ok, S::Error> {
    match at {
        Some(at) => rfc3339(at, serializer),
        None => serializer.serialize_none(),
    }
}
