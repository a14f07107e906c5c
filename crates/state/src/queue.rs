//! The run queue of replicas sharing a PostgreSQL database, and the inputs sent to a run
//! wherever it runs. Who runs a queued run is `lease.rs`'s business.
//!
//! Invariants:
//! - **One run per session, across replicas.** Queuing a run takes the session's transaction
//!   lock, then checks that no run of the session is queued or running, then claims the thing it
//!   is for and inserts the run, all in one transaction: two replicas (or a follow-up and a new
//!   message) queuing for one session at once get one run and one `Busy`.
//! - **An input reaches a run or comes back.** [`Replicas::send_input`] locks the run's row and
//!   adds the input only while the run is queued or running; a run's end updates that row, so an
//!   input is either added before the end (and the run takes it in, or it goes to a follow-up
//!   run, read after the end) or refused after it (and the caller queues a new run instead).
//! - A steering message is claimed in the transaction that hands it to its run, so it is
//!   answered once whichever replica hears of it again.

use crate::lease::{Replicas, now_ms_sql};
use crate::postgres::INSERT_CLAIM;
use crate::{ClaimKind, StateError, now_ms};

/// What [`Replicas::enqueue`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enqueued {
    /// Queued under this run id.
    Queued(String),
    /// The session has this run queued or running already; nothing was written.
    Busy(String),
    /// The claim was taken before: handled already; nothing was written.
    Handled,
}

/// A run to queue.
#[derive(Debug)]
pub struct QueuedRun<'a> {
    pub session_key: &'a str,
    pub trigger: &'a str,
    /// The request as JSON, for the replica that claims it.
    pub request: &'a str,
    /// A claim (kind, key) taken in the same transaction.
    pub claim: Option<(&'a str, &'a str)>,
    /// Steering inputs that came before it started, in order (text, message id).
    pub inputs: &'a [(String, Option<String>)],
}

/// What can be sent to a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    /// Text for the run's next turn.
    Steer,
    /// Stop the run; the text says why.
    Stop,
}

impl InputKind {
    fn as_str(self) -> &'static str {
        match self {
            InputKind::Steer => "steer",
            InputKind::Stop => "stop",
        }
    }
}

/// One input of a run, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunInput {
    pub run_id: String,
    /// Its place among the run's inputs, from 1.
    pub n: i64,
    pub kind: InputKind,
    pub text: String,
    pub message_id: Option<String>,
}

impl Replicas {
    /// Queues `run` unless its session has a run queued or running, or its claim was taken.
    pub async fn enqueue(&self, run: &QueuedRun<'_>) -> Result<Enqueued, StateError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('picogent session ' || $1 || '/' || $2, 0))")
            .bind(&self.agent)
            .bind(run.session_key)
            .execute(&mut *tx)
            .await?;
        let active: Option<String> = sqlx::query_scalar(
            "SELECT id FROM runs WHERE agent = $1 AND session_key = $2 AND status IN ('queued', 'running') \
             ORDER BY row_order LIMIT 1",
        )
        .bind(&self.agent)
        .bind(run.session_key)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(id) = active {
            return Ok(Enqueued::Busy(id));
        }
        if let Some((kind, key)) = run.claim {
            let claimed = sqlx::query(INSERT_CLAIM)
                .bind(&self.agent)
                .bind(kind)
                .bind(key)
                .bind(now_ms())
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if claimed == 0 {
                return Ok(Enqueued::Handled);
            }
        }
        let id = uuid::Uuid::new_v4().to_string();
        sqlx::query(
            "INSERT INTO runs (agent, id, session_key, trigger, status, started_at_ms, request) \
             VALUES ($1, $2, $3, $4, 'queued', $5, $6)",
        )
        .bind(&self.agent)
        .bind(&id)
        .bind(run.session_key)
        .bind(run.trigger)
        .bind(now_ms())
        .bind(run.request)
        .execute(&mut *tx)
        .await?;
        for (n, (text, message_id)) in run.inputs.iter().enumerate() {
            insert_input(&mut tx, &self.agent, &id, n as i64 + 1, InputKind::Steer, text, message_id.as_deref())
                .await?;
        }
        tx.commit().await?;
        Ok(Enqueued::Queued(id))
    }

    /// The run of `session_key` that is queued or running, if any.
    pub async fn active_run(&self, session_key: &str) -> Result<Option<(String, String)>, StateError> {
        Ok(sqlx::query_as(
            "SELECT id, status FROM runs WHERE agent = $1 AND session_key = $2 AND status IN ('queued', 'running') \
             ORDER BY row_order LIMIT 1",
        )
        .bind(&self.agent)
        .bind(session_key)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Sends an input to the run `run_id` if it is still queued or running (and claims the
    /// message it came from with it); `false`, writing nothing, once the run has ended.
    pub async fn send_input(
        &self,
        run_id: &str,
        kind: InputKind,
        text: &str,
        message_id: Option<&str>,
    ) -> Result<bool, StateError> {
        let mut tx = self.pool.begin().await?;
        let status: Option<String> =
            sqlx::query_scalar("SELECT status FROM runs WHERE agent = $1 AND id = $2 FOR UPDATE")
                .bind(&self.agent)
                .bind(run_id)
                .fetch_optional(&mut *tx)
                .await?;
        if !matches!(status.as_deref(), Some("queued" | "running")) {
            return Ok(false);
        }
        let n: i64 =
            sqlx::query_scalar("SELECT COALESCE(MAX(n), 0) + 1 FROM run_inputs WHERE agent = $1 AND run_id = $2")
                .bind(&self.agent)
                .bind(run_id)
                .fetch_one(&mut *tx)
                .await?;
        insert_input(&mut tx, &self.agent, run_id, n, kind, text, message_id).await?;
        if let Some(message_id) = message_id {
            sqlx::query(INSERT_CLAIM)
                .bind(&self.agent)
                .bind(ClaimKind::Message.as_str())
                .bind(message_id)
                .bind(now_ms())
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    /// The inputs of the runs `run_ids`, in order per run.
    pub async fn inputs(&self, run_ids: &[String]) -> Result<Vec<RunInput>, StateError> {
        if run_ids.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<(String, i64, String, String, Option<String>)> = sqlx::query_as(
            "SELECT run_id, n, kind, text, message_id FROM run_inputs WHERE agent = $1 AND run_id = ANY($2) \
             ORDER BY run_id, n",
        )
        .bind(&self.agent)
        .bind(run_ids)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(run_id, n, kind, text, message_id)| RunInput {
                run_id,
                n,
                kind: if kind == "stop" { InputKind::Stop } else { InputKind::Steer },
                text,
                message_id,
            })
            .collect())
    }

    /// Stops a run that is still queued, before any replica took it: `stopped`, with `reason`.
    /// Returns the request it was queued with (JSON; empty when it has none), or `None` when it
    /// is not queued (running somewhere: send it a stop instead).
    pub async fn stop_queued(&self, run_id: &str, reason: &str) -> Result<Option<String>, StateError> {
        Ok(sqlx::query_scalar(concat!(
            "UPDATE runs SET status = 'stopped', outcome = $3, finished_at_ms = ",
            now_ms_sql!(),
            " WHERE agent = $1 AND id = $2 AND status = 'queued' RETURNING COALESCE(request, '')"
        ))
        .bind(&self.agent)
        .bind(run_id)
        .bind(reason)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Gives up a run this replica claimed but cannot run (its task or thread is gone): closed
    /// as `interrupted` with `reason`.
    pub async fn drop_claimed(&self, run_id: &str, reason: &str) -> Result<(), StateError> {
        sqlx::query(
            "UPDATE runs SET status = 'interrupted', outcome = $3, finished_at_ms = $4 \
             WHERE agent = $1 AND id = $2 AND holder = $5 AND status = 'running'",
        )
        .bind(&self.agent)
        .bind(run_id)
        .bind(reason)
        .bind(now_ms())
        .bind(&self.id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}

async fn insert_input(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    agent: &str,
    run_id: &str,
    n: i64,
    kind: InputKind,
    text: &str,
    message_id: Option<&str>,
) -> Result<(), StateError> {
    sqlx::query(
        "INSERT INTO run_inputs (agent, run_id, n, kind, text, message_id, at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(agent)
    .bind(run_id)
    .bind(n)
    .bind(kind.as_str())
    .bind(text)
    .bind(message_id)
    .bind(now_ms())
    .execute(&mut **tx)
    .await?;
    Ok(())
}
