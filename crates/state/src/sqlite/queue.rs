//! The run queue, the stream's lease and the heartbeats in the SQLite file; what each guarantees
//! is at the top of `queue.rs`. A file is one process's (its lock keeps a second copy off it), so
//! the clock is that process's, and each write transaction begins `IMMEDIATE`: it holds the
//! file's write lock from its first read, so what it read still holds when it writes.

use super::{INSERT_CLAIM, SqliteStore};
use crate::queue::{Beat, ClaimedColumns, Enqueued, FORGET_REPLICA_AFTER_MS, QueuedRun, ReplicaSeen, STREAM};
use crate::store::{InputColumns, QueueStore};
use crate::{ClaimKind, InputKind, StateError, now_ms};
use picogent_tracker::session::SessionKey;

/// The queued runs that may start, and the running ones whose lease ran out on another holder
/// (`?1`), oldest first, at most `?3`; `?2` is now.
const CLAIMABLE: &str = "SELECT id FROM runs r WHERE (status = 'queued' AND NOT EXISTS ( \
         SELECT 1 FROM runs o WHERE o.session_key = r.session_key AND o.status IN ('queued', 'running') \
         AND o.rowid < r.rowid)) \
     OR (status = 'running' AND COALESCE(lease_until_ms, 0) < ?2 AND (holder IS NULL OR holder <> ?1)) \
     ORDER BY rowid LIMIT ?3";

impl SqliteStore {
    async fn write(&self) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>, StateError> {
        Ok(self.pool.begin_with("BEGIN IMMEDIATE").await?)
    }
}

impl QueueStore for SqliteStore {
    async fn enqueue(&self, run: &QueuedRun<'_>, id: &str, at_ms: i64) -> Result<Enqueued, StateError> {
        let session_key = run.session_key.as_string();
        let mut tx = self.write().await?;
        if !run.behind {
            let active: Option<String> = sqlx::query_scalar(
                "SELECT id FROM runs WHERE session_key = ? AND status IN ('queued', 'running') ORDER BY rowid LIMIT 1",
            )
            .bind(&session_key)
            .fetch_optional(&mut *tx)
            .await?;
            if let Some(id) = active {
                return Ok(Enqueued::Busy(id));
            }
        }
        if let Some((kind, key)) = run.claim {
            let claimed = sqlx::query(INSERT_CLAIM)
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
            "INSERT INTO runs (id, session_key, trigger, status, started_at_ms, request) VALUES (?, ?, ?, 'queued', ?, ?)",
        )
        .bind(id)
        .bind(&session_key)
        .bind(run.trigger)
        .bind(at_ms)
        .bind(run.request)
        .execute(&mut *tx)
        .await?;
        for (n, (text, message_id)) in run.inputs.iter().enumerate() {
            insert_input(&mut tx, id, n as i64 + 1, InputKind::Steer, text, message_id.as_deref(), at_ms).await?;
        }
        tx.commit().await?;
        Ok(Enqueued::Queued(id.to_string()))
    }

    async fn session_runs(&self, session_key: &SessionKey) -> Result<Vec<(String, String)>, StateError> {
        Ok(sqlx::query_as(
            "SELECT id, status FROM runs WHERE session_key = ? AND status IN ('queued', 'running') ORDER BY rowid",
        )
        .bind(session_key.as_string())
        .fetch_all(&self.pool)
        .await?)
    }

    async fn queued_runs(&self) -> Result<Vec<(String, String, String)>, StateError> {
        Ok(sqlx::query_as("SELECT id, session_key, trigger FROM runs WHERE status = 'queued' ORDER BY rowid")
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
        let mut tx = self.write().await?;
        let status: Option<String> =
            sqlx::query_scalar("SELECT status FROM runs WHERE id = ?").bind(run_id).fetch_optional(&mut *tx).await?;
        if !matches!(status.as_deref(), Some("queued" | "running")) {
            return Ok(None);
        }
        let n: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(n), 0) + 1 FROM run_inputs WHERE run_id = ?")
            .bind(run_id)
            .fetch_one(&mut *tx)
            .await?;
        insert_input(&mut tx, run_id, n, kind, text, message_id, at_ms).await?;
        if let Some(message_id) = message_id {
            sqlx::query(INSERT_CLAIM)
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
        let mut inputs = Vec::new();
        let mut ids: Vec<&String> = run_ids.iter().collect();
        ids.sort();
        ids.dedup();
        for run_id in ids {
            let rows: Vec<InputColumns> =
                sqlx::query_as("SELECT run_id, n, kind, text, message_id FROM run_inputs WHERE run_id = ? ORDER BY n")
                    .bind(run_id)
                    .fetch_all(&self.pool)
                    .await?;
            inputs.extend(rows);
        }
        Ok(inputs)
    }

    async fn stop_queued(&self, run_id: &str, reason: &str) -> Result<Option<String>, StateError> {
        Ok(sqlx::query_scalar(
            "UPDATE runs SET status = 'stopped', outcome = ?, finished_at_ms = ? \
             WHERE id = ? AND status = 'queued' RETURNING COALESCE(request, '')",
        )
        .bind(reason)
        .bind(now_ms())
        .bind(run_id)
        .fetch_optional(&self.pool)
        .await?)
    }

    async fn drop_claimed(&self, holder: &str, run_id: &str, reason: &str, at_ms: i64) -> Result<(), StateError> {
        sqlx::query(
            "UPDATE runs SET status = 'interrupted', outcome = ?, finished_at_ms = ? \
             WHERE id = ? AND holder = ? AND status = 'running'",
        )
        .bind(reason)
        .bind(at_ms)
        .bind(run_id)
        .bind(holder)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn claim_runs(&self, holder: &str, slots: i64, lease_ms: i64) -> Result<Vec<ClaimedColumns>, StateError> {
        let mut tx = self.write().await?;
        let now = now_ms();
        let ids: Vec<String> =
            sqlx::query_scalar(CLAIMABLE).bind(holder).bind(now).bind(slots).fetch_all(&mut *tx).await?;
        let mut claimed = Vec::with_capacity(ids.len());
        for id in ids {
            let run: ClaimedColumns = sqlx::query_as(
                "UPDATE runs SET status = 'running', holder = ?, lease_until_ms = ?, attempts = attempts + 1, waiting = NULL \
                 WHERE id = ? RETURNING id, session_key, trigger, request, attempts",
            )
            .bind(holder)
            .bind(now.saturating_add(lease_ms))
            .bind(&id)
            .fetch_one(&mut *tx)
            .await?;
            claimed.push(run);
        }
        tx.commit().await?;
        Ok(claimed)
    }

    async fn renew_runs(&self, holder: &str, ids: &[String], lease_ms: i64) -> Result<Vec<String>, StateError> {
        let mut tx = self.write().await?;
        let until = now_ms().saturating_add(lease_ms);
        let mut held = Vec::with_capacity(ids.len());
        for id in ids {
            let renewed: Option<String> = sqlx::query_scalar(
                "UPDATE runs SET lease_until_ms = CASE WHEN status = 'running' THEN ? ELSE lease_until_ms END \
                 WHERE holder = ? AND id = ? RETURNING id",
            )
            .bind(until)
            .bind(holder)
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
            held.extend(renewed);
        }
        tx.commit().await?;
        Ok(held)
    }

    async fn hand_back(&self, holder: &str, run_id: &str) -> Result<(), StateError> {
        sqlx::query("UPDATE runs SET holder = NULL, lease_until_ms = 0 WHERE id = ? AND holder = ?")
            .bind(run_id)
            .bind(holder)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn release_runs(&self, holder: Option<&str>) -> Result<u64, StateError> {
        Ok(sqlx::query("UPDATE runs SET lease_until_ms = 0 WHERE status = 'running' AND (?1 IS NULL OR holder = ?1)")
            .bind(holder)
            .execute(&self.pool)
            .await?
            .rows_affected())
    }

    async fn acquire_stream(&self, holder: &str, lease_ms: i64) -> Result<Option<i64>, StateError> {
        let now = now_ms();
        Ok(sqlx::query_scalar(
            "INSERT INTO leases (name, holder, expires_at_ms, fencing) VALUES (?1, ?2, ?3 + ?4, 1) \
             ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at_ms = excluded.expires_at_ms, \
             fencing = leases.fencing + CASE WHEN leases.holder = excluded.holder THEN 0 ELSE 1 END \
             WHERE leases.holder = excluded.holder OR leases.expires_at_ms < ?3 RETURNING fencing",
        )
        .bind(STREAM)
        .bind(holder)
        .bind(now)
        .bind(lease_ms)
        .fetch_optional(&self.pool)
        .await?)
    }

    async fn renew_stream(&self, holder: &str, lease_ms: i64) -> Result<bool, StateError> {
        let renewed = sqlx::query("UPDATE leases SET expires_at_ms = ? WHERE name = ? AND holder = ?")
            .bind(now_ms().saturating_add(lease_ms))
            .bind(STREAM)
            .bind(holder)
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(renewed == 1)
    }

    async fn release_stream(&self, holder: &str) -> Result<(), StateError> {
        sqlx::query("UPDATE leases SET expires_at_ms = 0 WHERE name = ? AND holder = ?")
            .bind(STREAM)
            .bind(holder)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn stream_holder(&self) -> Result<Option<(String, i64)>, StateError> {
        Ok(sqlx::query_as("SELECT holder, fencing FROM leases WHERE name = ? AND expires_at_ms >= ?")
            .bind(STREAM)
            .bind(now_ms())
            .fetch_optional(&self.pool)
            .await?)
    }

    async fn beat(&self, holder: &str, beat: &Beat<'_>) -> Result<(), StateError> {
        let now = now_ms();
        let mut tx = self.write().await?;
        sqlx::query(
            "INSERT INTO replicas (id, host, http, started_at_ms, seen_at_ms, holds_stream, runs, slots) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET seen_at_ms = excluded.seen_at_ms, \
             holds_stream = excluded.holds_stream, runs = excluded.runs, slots = excluded.slots",
        )
        .bind(holder)
        .bind(beat.host)
        .bind(beat.http)
        .bind(beat.started_at_ms)
        .bind(now)
        .bind(beat.holds_stream)
        .bind(beat.runs)
        .bind(beat.slots)
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM replicas WHERE seen_at_ms < ?")
            .bind(now - FORGET_REPLICA_AFTER_MS)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn others(&self, holder: &str, within_ms: i64) -> Result<Vec<ReplicaSeen>, StateError> {
        let now = now_ms();
        Ok(sqlx::query_as(
            "SELECT id, host, http, holds_stream, runs, slots, ?1 - seen_at_ms AS seen_ms_ago FROM replicas \
             WHERE id <> ?2 AND seen_at_ms >= ?1 - ?3 ORDER BY id",
        )
        .bind(now)
        .bind(holder)
        .bind(within_ms)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn leave(&self, holder: &str) -> Result<(), StateError> {
        sqlx::query("DELETE FROM replicas WHERE id = ?").bind(holder).execute(&self.pool).await?;
        Ok(())
    }
}

async fn insert_input(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    run_id: &str,
    n: i64,
    kind: InputKind,
    text: &str,
    message_id: Option<&str>,
    at_ms: i64,
) -> Result<(), StateError> {
    sqlx::query("INSERT INTO run_inputs (run_id, n, kind, text, message_id, at_ms) VALUES (?, ?, ?, ?, ?, ?)")
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
