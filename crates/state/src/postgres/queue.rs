//! The run queue, the stream's lease and the heartbeats in PostgreSQL, shared by an agent's
//! replicas; what each guarantees is at the top of `queue.rs`. Every lease is timed by the
//! database's clock (`clock_timestamp()`).

use super::{INSERT_CLAIM, PostgresStore};
use crate::queue::{Beat, ClaimedColumns, Enqueued, FORGET_REPLICA_AFTER_MS, QueuedRun, ReplicaSeen, STREAM};
use crate::store::{InputColumns, QueueStore};
use crate::{ClaimKind, InputKind, StateError};
use picogent_tracker::session::SessionKey;

/// The database's clock in Unix milliseconds, as SQL.
macro_rules! now_ms_sql {
    () => {
        "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT"
    };
}

impl QueueStore for PostgresStore {
    async fn enqueue(&self, run: &QueuedRun<'_>, id: &str, at_ms: i64) -> Result<Enqueued, StateError> {
        let session_key = run.session_key.as_string();
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('picogent session ' || $1 || '/' || $2, 0))")
            .bind(&self.agent)
            .bind(&session_key)
            .execute(&mut *tx)
            .await?;
        if !run.behind {
            let active: Option<String> = sqlx::query_scalar(
                "SELECT id FROM runs WHERE agent = $1 AND session_key = $2 AND status IN ('queued', 'running') \
                 ORDER BY row_order LIMIT 1",
            )
            .bind(&self.agent)
            .bind(&session_key)
            .fetch_optional(&mut *tx)
            .await?;
            if let Some(id) = active {
                return Ok(Enqueued::Busy(id));
            }
        }
        if let Some((kind, key)) = run.claim {
            let claimed = sqlx::query(INSERT_CLAIM)
                .bind(&self.agent)
                .bind(kind.as_str())
                .bind(key)
                .bind(at_ms)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if claimed == 0 {
                return Ok(Enqueued::Handled);
            }
        }
        sqlx::query(
            "INSERT INTO runs (agent, id, session_key, trigger, status, started_at_ms, request) \
             VALUES ($1, $2, $3, $4, 'queued', $5, $6)",
        )
        .bind(&self.agent)
        .bind(id)
        .bind(&session_key)
        .bind(run.trigger)
        .bind(at_ms)
        .bind(run.request)
        .execute(&mut *tx)
        .await?;
        for (n, (text, message_id)) in run.inputs.iter().enumerate() {
            insert_input(&mut tx, &self.agent, id, n as i64 + 1, InputKind::Steer, text, message_id.as_deref(), at_ms)
                .await?;
        }
        tx.commit().await?;
        Ok(Enqueued::Queued(id.to_string()))
    }

    async fn session_runs(&self, session_key: &SessionKey) -> Result<Vec<(String, String)>, StateError> {
        Ok(sqlx::query_as(
            "SELECT id, status FROM runs WHERE agent = $1 AND session_key = $2 AND status IN ('queued', 'running') \
             ORDER BY row_order",
        )
        .bind(&self.agent)
        .bind(session_key.as_string())
        .fetch_all(&self.pool)
        .await?)
    }

    async fn queued_runs(&self) -> Result<Vec<(String, String, String)>, StateError> {
        Ok(sqlx::query_as(
            "SELECT id, session_key, trigger FROM runs WHERE agent = $1 AND status = 'queued' ORDER BY row_order",
        )
        .bind(&self.agent)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn send_input(
        &self,
        run_id: &str,
        kind: InputKind,
        text: &str,
        message_id: Option<&str>,
        at_ms: i64,
    ) -> Result<Option<i64>, StateError> {
        let mut tx = self.pool.begin().await?;
        let status: Option<String> =
            sqlx::query_scalar("SELECT status FROM runs WHERE agent = $1 AND id = $2 FOR UPDATE")
                .bind(&self.agent)
                .bind(run_id)
                .fetch_optional(&mut *tx)
                .await?;
        if !matches!(status.as_deref(), Some("queued" | "running")) {
            return Ok(None);
        }
        let n: i64 =
            sqlx::query_scalar("SELECT COALESCE(MAX(n), 0) + 1 FROM run_inputs WHERE agent = $1 AND run_id = $2")
                .bind(&self.agent)
                .bind(run_id)
                .fetch_one(&mut *tx)
                .await?;
        insert_input(&mut tx, &self.agent, run_id, n, kind, text, message_id, at_ms).await?;
        if let Some(message_id) = message_id {
            sqlx::query(INSERT_CLAIM)
                .bind(&self.agent)
                .bind(ClaimKind::Message.as_str())
                .bind(message_id)
                .bind(at_ms)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(Some(n))
    }

    async fn inputs(&self, run_ids: &[String]) -> Result<Vec<InputColumns>, StateError> {
        Ok(sqlx::query_as(
            "SELECT run_id, n, kind, text, message_id FROM run_inputs WHERE agent = $1 AND run_id = ANY($2) \
             ORDER BY run_id, n",
        )
        .bind(&self.agent)
        .bind(run_ids)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn stop_queued(&self, run_id: &str, reason: &str) -> Result<Option<String>, StateError> {
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

    async fn drop_claimed(&self, holder: &str, run_id: &str, reason: &str, at_ms: i64) -> Result<(), StateError> {
        sqlx::query(
            "UPDATE runs SET status = 'interrupted', outcome = $3, finished_at_ms = $4 \
             WHERE agent = $1 AND id = $2 AND holder = $5 AND status = 'running'",
        )
        .bind(&self.agent)
        .bind(run_id)
        .bind(reason)
        .bind(at_ms)
        .bind(holder)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn claim_runs(&self, holder: &str, slots: i64, lease_ms: i64) -> Result<Vec<ClaimedColumns>, StateError> {
        Ok(sqlx::query_as(concat!(
            "UPDATE runs SET status = 'running', holder = $2, lease_until_ms = ",
            now_ms_sql!(),
            " + $3, attempts = attempts + 1, waiting = NULL \
             WHERE agent = $1 AND id IN ( \
                 SELECT id FROM runs r WHERE agent = $1 AND ((status = 'queued' AND NOT EXISTS ( \
                         SELECT 1 FROM runs o WHERE o.agent = $1 AND o.session_key = r.session_key \
                         AND o.status IN ('queued', 'running') AND o.row_order < r.row_order)) \
                     OR (status = 'running' AND COALESCE(lease_until_ms, 0) < ",
            now_ms_sql!(),
            " AND holder IS DISTINCT FROM $2)) \
                 ORDER BY row_order LIMIT $4 FOR UPDATE SKIP LOCKED) \
             RETURNING id, session_key, trigger, request, attempts"
        ))
        .bind(&self.agent)
        .bind(holder)
        .bind(lease_ms)
        .bind(slots)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn renew_runs(&self, holder: &str, ids: &[String], lease_ms: i64) -> Result<Vec<String>, StateError> {
        Ok(sqlx::query_scalar(concat!(
            "UPDATE runs SET lease_until_ms = CASE WHEN status = 'running' THEN ",
            now_ms_sql!(),
            " + $3 ELSE lease_until_ms END WHERE agent = $1 AND holder = $2 AND id = ANY($4) RETURNING id"
        ))
        .bind(&self.agent)
        .bind(holder)
        .bind(lease_ms)
        .bind(ids)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn hand_back(&self, holder: &str, run_id: &str) -> Result<(), StateError> {
        sqlx::query("UPDATE runs SET holder = NULL, lease_until_ms = 0 WHERE agent = $1 AND id = $2 AND holder = $3")
            .bind(&self.agent)
            .bind(run_id)
            .bind(holder)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn release_runs(&self, holder: Option<&str>) -> Result<u64, StateError> {
        Ok(sqlx::query(
            "UPDATE runs SET lease_until_ms = 0 WHERE agent = $1 AND status = 'running' \
             AND ($2::text IS NULL OR holder = $2)",
        )
        .bind(&self.agent)
        .bind(holder)
        .execute(&self.pool)
        .await?
        .rows_affected())
    }

    async fn acquire_stream(&self, holder: &str, lease_ms: i64) -> Result<Option<i64>, StateError> {
        Ok(sqlx::query_scalar(concat!(
            "INSERT INTO leases (agent, name, holder, expires_at_ms, fencing) VALUES ($1, $2, $3, ",
            now_ms_sql!(),
            " + $4, 1) ON CONFLICT (agent, name) DO UPDATE SET holder = excluded.holder, \
             expires_at_ms = excluded.expires_at_ms, \
             fencing = leases.fencing + CASE WHEN leases.holder = excluded.holder THEN 0 ELSE 1 END \
             WHERE leases.holder = excluded.holder OR leases.expires_at_ms < ",
            now_ms_sql!(),
            " RETURNING fencing"
        ))
        .bind(&self.agent)
        .bind(STREAM)
        .bind(holder)
        .bind(lease_ms)
        .fetch_optional(&self.pool)
        .await?)
    }

    async fn renew_stream(&self, holder: &str, lease_ms: i64) -> Result<bool, StateError> {
        let renewed = sqlx::query(concat!(
            "UPDATE leases SET expires_at_ms = ",
            now_ms_sql!(),
            " + $4 WHERE agent = $1 AND name = $2 AND holder = $3"
        ))
        .bind(&self.agent)
        .bind(STREAM)
        .bind(holder)
        .bind(lease_ms)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(renewed == 1)
    }

    async fn release_stream(&self, holder: &str) -> Result<(), StateError> {
        sqlx::query("UPDATE leases SET expires_at_ms = 0 WHERE agent = $1 AND name = $2 AND holder = $3")
            .bind(&self.agent)
            .bind(STREAM)
            .bind(holder)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn stream_holder(&self) -> Result<Option<(String, i64)>, StateError> {
        Ok(sqlx::query_as(concat!(
            "SELECT holder, fencing FROM leases WHERE agent = $1 AND name = $2 AND expires_at_ms >= ",
            now_ms_sql!()
        ))
        .bind(&self.agent)
        .bind(STREAM)
        .fetch_optional(&self.pool)
        .await?)
    }

    async fn beat(&self, holder: &str, beat: &Beat<'_>) -> Result<(), StateError> {
        sqlx::query(concat!(
            "INSERT INTO replicas (agent, id, host, http, started_at_ms, seen_at_ms, holds_stream, runs, slots) \
             VALUES ($1, $2, $3, $4, $5, ",
            now_ms_sql!(),
            ", $6, $7, $8) ON CONFLICT (agent, id) DO UPDATE SET seen_at_ms = excluded.seen_at_ms, \
             holds_stream = excluded.holds_stream, runs = excluded.runs, slots = excluded.slots"
        ))
        .bind(&self.agent)
        .bind(holder)
        .bind(beat.host)
        .bind(beat.http)
        .bind(beat.started_at_ms)
        .bind(beat.holds_stream)
        .bind(beat.runs)
        .bind(beat.slots)
        .execute(&self.pool)
        .await?;
        sqlx::query(concat!("DELETE FROM replicas WHERE agent = $1 AND seen_at_ms < ", now_ms_sql!(), " - $2"))
            .bind(&self.agent)
            .bind(FORGET_REPLICA_AFTER_MS)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn others(&self, holder: &str, within_ms: i64) -> Result<Vec<ReplicaSeen>, StateError> {
        Ok(sqlx::query_as(concat!(
            "SELECT id, host, http, holds_stream, runs, slots, ",
            now_ms_sql!(),
            " - seen_at_ms AS seen_ms_ago FROM replicas WHERE agent = $1 AND id <> $2 AND seen_at_ms >= ",
            now_ms_sql!(),
            " - $3 ORDER BY id"
        ))
        .bind(&self.agent)
        .bind(holder)
        .bind(within_ms)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn leave(&self, holder: &str) -> Result<(), StateError> {
        sqlx::query("DELETE FROM replicas WHERE agent = $1 AND id = $2")
            .bind(&self.agent)
            .bind(holder)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

#[allow(clippy::too_many_arguments)]
async fn insert_input(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    agent: &str,
    run_id: &str,
    n: i64,
    kind: InputKind,
    text: &str,
    message_id: Option<&str>,
    at_ms: i64,
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
    .bind(at_ms)
    .execute(&mut **tx)
    .await?;
    Ok(())
}
