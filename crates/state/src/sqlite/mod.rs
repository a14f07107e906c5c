//! The state in one SQLite file (`state.path`): the file is the agent's, so no row names the
//! agent; `<state.path>.lock` (taken by the runtime) keeps a second copy off it. Opened as
//! `picogent_support::sqlite` opens every database: WAL, `synchronous = NORMAL`, the log checkpointed in the
//! background. Schema: `crates/state/migrations/state/`. The run queue's SQL is `queue.rs`'s, the
//! scheduled firings' `firings.rs`'s.

use std::path::{Path, PathBuf};

use sqlx::sqlite::SqlitePool;

#[cfg(any(test, feature = "test-support"))]
use crate::store::NewRun;
use crate::store::{FiringColumns, FiringWrite, RunColumns, RunEnd, Store, run_columns};
use crate::{ClaimKind, StateError};
use picogent_tracker::session::SessionKey;

mod firings;
mod queue;

/// The schema, `crates/state/migrations/state/`; `migrate/mod.rs` holds a state file's applied migrations against it.
pub(super) static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/state");

/// The SQLite store: a pool on the file and the file's path (for `sync`).
#[derive(Clone, Debug)]
pub(super) struct SqliteStore {
    pool: SqlitePool,
    path: PathBuf,
}

impl SqliteStore {
    /// Runs one pruning `DELETE` whose only parameter is the cutoff in milliseconds (`?` is the cutoff);
    /// how many rows went.
    async fn delete_older(&self, sql: &'static str, before_ms: i64) -> Result<u64, StateError> {
        Ok(sqlx::query(sql).bind(before_ms).execute(&self.pool).await?.rows_affected())
    }

    /// Opens the database at `path`, creating the file if it is missing, and brings its schema
    /// up to date. The folder must exist.
    pub(super) async fn open(path: &Path) -> Result<SqliteStore, StateError> {
        let open_error = |source: sqlx::Error| {
            // SQLite's primary result code 26 is SQLITE_NOTADB: the file is someone else's.
            let not_a_database = matches!(&source, sqlx::Error::Database(e) if e.code().as_deref() == Some("26"));
            let hint = if not_a_database {
                "the file is not an SQLite database: move it aside, or point `state.path` in agent.json at a new file"
            } else {
                "check that its folder exists and is writable, or point `state.path` in agent.json somewhere that is"
            };
            StateError::Open { path: path.to_path_buf(), source, hint }
        };
        // Commits are NORMAL: one survives a crash of the process but not a power cut until
        // `sync`; see the state's invariants for who calls it and when.
        let pool = picogent_support::sqlite::open(path, 4, &MIGRATOR).await.map_err(|error| match error {
            picogent_support::sqlite::OpenError::Private(source) => StateError::Private(source),
            picogent_support::sqlite::OpenError::Connect(source) => open_error(source),
            picogent_support::sqlite::OpenError::Migrate(source) => {
                StateError::Migrate { path: path.to_path_buf(), source }
            }
        })?;
        Ok(SqliteStore { pool, path: path.to_path_buf() })
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    #[cfg(test)]
    pub(super) fn pool(&self) -> &SqlitePool {
        &self.pool
    }
}

#[cfg(any(test, feature = "test-support"))]
const INSERT_RUN: &str =
    "INSERT INTO runs (id, session_key, trigger, status, started_at_ms) VALUES (?, ?, ?, 'running', ?)";
const INSERT_CLAIM: &str = "INSERT OR IGNORE INTO claims (kind, key, claimed_at_ms) VALUES (?, ?, ?)";
const SET_VALUE: &str = "INSERT INTO named_values (name, value, updated_at_ms) VALUES (?, ?, ?) \
     ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at_ms = excluded.updated_at_ms";

impl Store for SqliteStore {
    async fn record_event(&self, id: &str, seq: i64, name: &str, at_ms: i64) -> Result<bool, StateError> {
        // One statement: the trigger `processed_events_advance` moves the resume point with the
        // insert (a duplicate's seq is behind it already).
        let inserted =
            sqlx::query("INSERT OR IGNORE INTO processed_events (id, seq, name, processed_at_ms) VALUES (?, ?, ?, ?)")
                .bind(id)
                .bind(seq)
                .bind(name)
                .bind(at_ms)
                .execute(&self.pool)
                .await?
                .rows_affected();
        Ok(inserted == 1)
    }

    #[cfg(any(test, feature = "test-support"))]
    async fn is_event_processed(&self, id: &str) -> Result<bool, StateError> {
        let found: Option<i64> = sqlx::query_scalar("SELECT 1 FROM processed_events WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(found.is_some())
    }

    async fn last_seq(&self) -> Result<i64, StateError> {
        Ok(sqlx::query_scalar("SELECT last_seq FROM stream_position WHERE singleton = 1").fetch_one(&self.pool).await?)
    }

    async fn prune_events(&self, before_ms: i64) -> Result<u64, StateError> {
        self.delete_older("DELETE FROM processed_events WHERE processed_at_ms < ?", before_ms).await
    }

    async fn claim(&self, kind: ClaimKind, key: &str, at_ms: i64) -> Result<bool, StateError> {
        let inserted = sqlx::query(INSERT_CLAIM)
            .bind(kind.as_str())
            .bind(key)
            .bind(at_ms)
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(inserted == 1)
    }

    async fn is_claimed(&self, kind: ClaimKind, key: &str) -> Result<bool, StateError> {
        let found: Option<i64> = sqlx::query_scalar("SELECT 1 FROM claims WHERE kind = ? AND key = ?")
            .bind(kind.as_str())
            .bind(key)
            .fetch_optional(&self.pool)
            .await?;
        Ok(found.is_some())
    }

    async fn release(&self, kind: ClaimKind, key: &str) -> Result<bool, StateError> {
        let deleted = sqlx::query("DELETE FROM claims WHERE kind = ? AND key = ?")
            .bind(kind.as_str())
            .bind(key)
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(deleted == 1)
    }

    async fn load_session(&self, key: &str) -> Result<Option<(String, i64)>, StateError> {
        Ok(sqlx::query_as("SELECT messages, updated_at_ms FROM sessions WHERE key = ?")
            .bind(key)
            .fetch_optional(&self.pool)
            .await?)
    }

    async fn save_session(&self, key: &str, messages: &str, at_ms: i64) -> Result<(), StateError> {
        sqlx::query(
            "INSERT INTO sessions (key, messages, updated_at_ms) VALUES (?, ?, ?) \
             ON CONFLICT (key) DO UPDATE SET messages = excluded.messages, updated_at_ms = excluded.updated_at_ms",
        )
        .bind(key)
        .bind(messages)
        .bind(at_ms)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    #[cfg(any(test, feature = "test-support"))]
    async fn delete_session(&self, key: &str) -> Result<bool, StateError> {
        let deleted =
            sqlx::query("DELETE FROM sessions WHERE key = ?").bind(key).execute(&self.pool).await?.rows_affected();
        Ok(deleted == 1)
    }

    async fn add_spend(&self, day: &str, tokens: i64, cost: f64) -> Result<(i64, f64), StateError> {
        Ok(sqlx::query_as(
            "INSERT INTO daily_spend (day, tokens, cost) VALUES (?, ?, ?) \
             ON CONFLICT (day) DO UPDATE SET tokens = tokens + excluded.tokens, cost = cost + excluded.cost \
             RETURNING tokens, cost",
        )
        .bind(day)
        .bind(tokens)
        .bind(cost)
        .fetch_one(&self.pool)
        .await?)
    }

    async fn spend_on(&self, day: &str) -> Result<Option<(i64, f64)>, StateError> {
        Ok(sqlx::query_as("SELECT tokens, cost FROM daily_spend WHERE day = ?")
            .bind(day)
            .fetch_optional(&self.pool)
            .await?)
    }

    async fn record_reply(&self, thread_key: &str, at_ms: i64, forget_before_ms: i64) -> Result<(), StateError> {
        let mut transaction = self.pool.begin().await?;
        sqlx::query("INSERT INTO replies (thread_key, at_ms) VALUES (?, ?)")
            .bind(thread_key)
            .bind(at_ms)
            .execute(&mut *transaction)
            .await?;
        sqlx::query("DELETE FROM replies WHERE at_ms < ?").bind(forget_before_ms).execute(&mut *transaction).await?;
        transaction.commit().await?;
        Ok(())
    }

    async fn record_reply_under(
        &self,
        thread_key: &str,
        at_ms: i64,
        since_ms: i64,
        max: i64,
        forget_before_ms: i64,
    ) -> Result<Option<i64>, StateError> {
        // One process per file: its callers are serialised already (`runtime::guard`).
        let count = self.replies_since(thread_key, since_ms).await?;
        if count >= max {
            return Ok(Some(count));
        }
        self.record_reply(thread_key, at_ms, forget_before_ms).await?;
        Ok(None)
    }

    async fn replies_since(&self, thread_key: &str, since_ms: i64) -> Result<i64, StateError> {
        Ok(sqlx::query_scalar("SELECT COUNT(*) FROM replies WHERE thread_key = ? AND at_ms >= ?")
            .bind(thread_key)
            .bind(since_ms)
            .fetch_one(&self.pool)
            .await?)
    }

    #[cfg(any(test, feature = "test-support"))]
    async fn start_run(&self, run: &NewRun<'_>) -> Result<(), StateError> {
        sqlx::query(INSERT_RUN)
            .bind(run.id)
            .bind(run.session_key.as_string())
            .bind(run.trigger)
            .bind(run.started_at_ms)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    #[cfg(any(test, feature = "test-support"))]
    async fn start_claimed_run(&self, kind: ClaimKind, key: &str, run: &NewRun<'_>) -> Result<bool, StateError> {
        let mut transaction = self.pool.begin().await?;
        let claimed = sqlx::query(INSERT_CLAIM)
            .bind(kind.as_str())
            .bind(key)
            .bind(run.started_at_ms)
            .execute(&mut *transaction)
            .await?
            .rows_affected()
            == 1;
        if !claimed {
            return Ok(false);
        }
        sqlx::query(INSERT_RUN)
            .bind(run.id)
            .bind(run.session_key.as_string())
            .bind(run.trigger)
            .bind(run.started_at_ms)
            .execute(&mut *transaction)
            .await?;
        transaction.commit().await?;
        Ok(true)
    }

    async fn save_run_record(&self, run_id: &str, record: &str) -> Result<bool, StateError> {
        let updated = sqlx::query("UPDATE runs SET record = ? WHERE id = ?")
            .bind(record)
            .bind(run_id)
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(updated == 1)
    }

    async fn set_waiting(&self, run_id: &str, waiting: Option<&str>) -> Result<bool, StateError> {
        let updated = sqlx::query("UPDATE runs SET waiting = ? WHERE id = ? AND status = 'running'")
            .bind(waiting)
            .bind(run_id)
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(updated == 1)
    }

    async fn finish_run(&self, run_id: &str, end: &RunEnd<'_>) -> Result<bool, StateError> {
        let updated = sqlx::query(
            "UPDATE runs SET status = ?, turns = ?, tool_calls = ?, prompt_tokens = ?, completion_tokens = ?, \
             model_duration_ms = ?, tool_duration_ms = ?, outcome = ?, error = ?, finished_at_ms = ?, \
             record = COALESCE(?, record), cost = ?, waiting = NULL \
             WHERE id = ? AND status = 'running' AND (? IS NULL OR holder = ?)",
        )
        .bind(end.status.as_str())
        .bind(end.turns)
        .bind(end.tool_calls)
        .bind(end.prompt_tokens)
        .bind(end.completion_tokens)
        .bind(end.model_duration_ms)
        .bind(end.tool_duration_ms)
        .bind(end.outcome)
        .bind(end.error)
        .bind(end.finished_at_ms)
        .bind(end.record.as_deref())
        .bind(end.cost)
        .bind(run_id)
        .bind(end.holder)
        .bind(end.holder)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(updated == 1)
    }

    #[cfg(any(test, feature = "test-support"))]
    async fn mark_interrupted(&self, run_id: &str, reason: &str, at_ms: i64) -> Result<bool, StateError> {
        let updated = sqlx::query(
            "UPDATE runs SET status = 'interrupted', outcome = ?, finished_at_ms = ? WHERE id = ? AND status = 'running'",
        )
        .bind(reason)
        .bind(at_ms)
        .bind(run_id)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(updated == 1)
    }

    async fn get_run(&self, run_id: &str) -> Result<Option<RunColumns>, StateError> {
        Ok(sqlx::query_as(concat!("SELECT ", run_columns!(), " FROM runs WHERE id = ?"))
            .bind(run_id)
            .fetch_optional(&self.pool)
            .await?)
    }

    async fn list_runs(&self, limit: i64) -> Result<Vec<RunColumns>, StateError> {
        Ok(sqlx::query_as(concat!(
            "SELECT ",
            run_columns!(),
            " FROM runs ORDER BY started_at_ms DESC, rowid DESC LIMIT ?"
        ))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn runs_of_session(&self, session_key: &SessionKey, limit: i64) -> Result<Vec<RunColumns>, StateError> {
        Ok(sqlx::query_as(concat!(
            "SELECT ",
            run_columns!(),
            " FROM runs WHERE session_key = ? ORDER BY started_at_ms DESC, rowid DESC LIMIT ?"
        ))
        .bind(session_key.as_string())
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn run_ids_starting_with(&self, prefix: &str, limit: i64) -> Result<Vec<String>, StateError> {
        Ok(sqlx::query_scalar("SELECT id FROM runs WHERE substr(id, 1, length(?1)) = ?1 LIMIT ?2")
            .bind(prefix)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?)
    }

    async fn unfinished_runs(&self) -> Result<Vec<RunColumns>, StateError> {
        Ok(sqlx::query_as(concat!(
            "SELECT ",
            run_columns!(),
            " FROM runs WHERE status = 'running' ORDER BY started_at_ms, rowid"
        ))
        .fetch_all(&self.pool)
        .await?)
    }

    async fn has_finished_run_for(&self, session_key: &SessionKey) -> Result<bool, StateError> {
        let found: Option<i64> = sqlx::query_scalar(
            "SELECT 1 FROM runs WHERE session_key = ? \
             AND status IN ('completed', 'failed', 'did_nothing', 'stopped') LIMIT 1",
        )
        .bind(session_key.as_string())
        .fetch_optional(&self.pool)
        .await?;
        Ok(found.is_some())
    }

    async fn has_run_since(&self, session_key: &SessionKey, since_ms: i64) -> Result<bool, StateError> {
        let found: Option<i64> =
            sqlx::query_scalar("SELECT 1 FROM runs WHERE session_key = ? AND started_at_ms >= ? LIMIT 1")
                .bind(session_key.as_string())
                .bind(since_ms)
                .fetch_optional(&self.pool)
                .await?;
        Ok(found.is_some())
    }

    async fn spend_of_session(&self, session_key: &SessionKey) -> Result<(i64, f64), StateError> {
        Ok(sqlx::query_as(
            "SELECT coalesce(sum(prompt_tokens + completion_tokens), 0), coalesce(sum(cost), 0.0) \
             FROM runs WHERE session_key = ?",
        )
        .bind(session_key.as_string())
        .fetch_one(&self.pool)
        .await?)
    }

    async fn get_value(&self, name: &str) -> Result<Option<String>, StateError> {
        Ok(sqlx::query_scalar("SELECT value FROM named_values WHERE name = ?")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?)
    }

    async fn set_value(&self, name: &str, value: &str, at_ms: i64) -> Result<(), StateError> {
        sqlx::query(SET_VALUE).bind(name).bind(value).bind(at_ms).execute(&self.pool).await?;
        Ok(())
    }

    async fn value_or_insert(&self, name: &str, value: &str, at_ms: i64) -> Result<String, StateError> {
        Ok(sqlx::query_scalar(
            "INSERT INTO named_values (name, value, updated_at_ms) VALUES (?1, ?2, ?3) \
             ON CONFLICT (name) DO UPDATE SET value = value RETURNING value",
        )
        .bind(name)
        .bind(value)
        .bind(at_ms)
        .fetch_one(&self.pool)
        .await?)
    }

    async fn raise_value(&self, name: &str, value: i64, at_ms: i64) -> Result<(), StateError> {
        firings::raise_value(&self.pool, name, value, at_ms).await
    }

    async fn record_firing(&self, firing: &FiringWrite<'_>) -> Result<(), StateError> {
        firings::record(&self.pool, firing).await
    }

    async fn get_firing(&self, job: &str, fire_at_ms: i64) -> Result<Option<FiringColumns>, StateError> {
        firings::get(&self.pool, job, fire_at_ms).await
    }

    async fn firings_after(&self, job: &str, after_ms: i64, limit: i64) -> Result<Vec<FiringColumns>, StateError> {
        firings::after(&self.pool, job, after_ms, limit).await
    }

    async fn last_firings(&self, job: &str, limit: i64) -> Result<Vec<FiringColumns>, StateError> {
        firings::last(&self.pool, job, limit).await
    }

    async fn firing_of_run(&self, run_id: &str) -> Result<Option<FiringColumns>, StateError> {
        firings::of_run(&self.pool, run_id).await
    }

    async fn record_stream_head(&self, seq: i64, value_name: &str, at_ms: i64) -> Result<(), StateError> {
        let mut transaction = self.pool.begin().await?;
        sqlx::query("UPDATE stream_position SET last_seq = MAX(last_seq, ?) WHERE singleton = 1")
            .bind(seq)
            .execute(&mut *transaction)
            .await?;
        sqlx::query(SET_VALUE).bind(value_name).bind(seq.to_string()).bind(at_ms).execute(&mut *transaction).await?;
        transaction.commit().await?;
        Ok(())
    }

    async fn prune_notice_claims(&self, before_ms: i64, oldest_day_asked: &str) -> Result<u64, StateError> {
        let deleted = sqlx::query(
            "DELETE FROM claims WHERE claimed_at_ms < ?1 AND ( \
               (kind = 'run_notice' AND key NOT IN (SELECT id FROM runs WHERE status = 'running')) \
               OR (kind IN ('spend_notice', 'limit_notice') AND key < ?2))",
        )
        .bind(before_ms)
        .bind(oldest_day_asked)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(deleted)
    }

    async fn prune_message_claims(&self, before_ms: i64) -> Result<u64, StateError> {
        self.delete_older("DELETE FROM claims WHERE kind = 'message' AND claimed_at_ms < ?", before_ms).await
    }

    async fn prune_runs(&self, before_ms: i64) -> Result<(u64, u64), StateError> {
        let mut transaction = self.pool.begin().await?;
        let deleted = sqlx::query(
            "WITH ranked AS ( \
               SELECT rowid AS row_id, \
                 ROW_NUMBER() OVER (PARTITION BY session_key ORDER BY started_at_ms DESC, rowid DESC) AS newest, \
                 ROW_NUMBER() OVER ( \
                   PARTITION BY session_key, status IN ('completed', 'failed', 'did_nothing', 'stopped') \
                   ORDER BY started_at_ms DESC, rowid DESC) AS newest_alike, \
                 status IN ('completed', 'failed', 'did_nothing', 'stopped') AS finished_work \
               FROM runs) \
             DELETE FROM runs WHERE status NOT IN ('queued', 'running') AND COALESCE(finished_at_ms, started_at_ms) < ?1 \
               AND rowid IN (SELECT row_id FROM ranked WHERE newest > 1 AND NOT (finished_work AND newest_alike = 1))",
        )
        .bind(before_ms)
        .execute(&mut *transaction)
        .await?
        .rows_affected();
        let dropped = sqlx::query(
            "UPDATE runs SET record = NULL \
             WHERE status NOT IN ('queued', 'running') AND record IS NOT NULL \
               AND COALESCE(finished_at_ms, started_at_ms) < ?1",
        )
        .bind(before_ms)
        .execute(&mut *transaction)
        .await?
        .rows_affected();
        // The inputs of runs that ended: read once, at the end, for a follow-up run.
        sqlx::query(
            "DELETE FROM run_inputs WHERE at_ms < ?1 \
               AND run_id NOT IN (SELECT id FROM runs WHERE status IN ('queued', 'running'))",
        )
        .bind(before_ms)
        .execute(&mut *transaction)
        .await?;
        transaction.commit().await?;
        Ok((deleted, dropped))
    }

    async fn prune_firing_claims(&self, before_ms: i64, watermark_prefix: &str) -> Result<u64, StateError> {
        firings::prune_claims(&self.pool, before_ms, watermark_prefix).await
    }

    async fn prune_firings(&self, before_ms: i64) -> Result<u64, StateError> {
        firings::prune(&self.pool, before_ms).await
    }

    async fn prune_sessions(&self, before_ms: i64) -> Result<u64, StateError> {
        self.delete_older(
            "DELETE FROM sessions WHERE updated_at_ms < ? \
               AND key NOT IN (SELECT session_key FROM runs WHERE status IN ('queued', 'running'))",
            before_ms,
        )
        .await
    }

    async fn prune_replies(&self, before_ms: i64) -> Result<u64, StateError> {
        self.delete_older("DELETE FROM replies WHERE at_ms < ?", before_ms).await
    }

    async fn prune_spend(&self, before_day: &str) -> Result<u64, StateError> {
        let deleted = sqlx::query("DELETE FROM daily_spend WHERE day < ?")
            .bind(before_day)
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(deleted)
    }

    /// Flushes the write-ahead log to the disk (what `synchronous = FULL` does at each commit).
    /// Cheap when nothing was committed since the last flush.
    async fn sync(&self) -> Result<(), StateError> {
        let mut wal = self.path.clone().into_os_string();
        wal.push("-wal");
        let wal = PathBuf::from(wal);
        let directory = self.path.parent().map(Path::to_path_buf);
        let synced = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            match std::fs::File::open(&wal) {
                Ok(file) => file.sync_data()?,
                // No log yet: every commit is in the main file, which checkpoints flush.
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(error) => return Err(error),
            }
            // The log's directory entry too, for a log created since the last checkpoint.
            if let Some(directory) = directory.filter(|d| !d.as_os_str().is_empty()) {
                std::fs::File::open(directory)?.sync_all()?;
            }
            Ok(())
        })
        .await;
        match synced {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(StateError::Sync { message: error.to_string() }),
            Err(error) => Err(StateError::Sync { message: error.to_string() }),
        }
    }

    async fn close(&self) {
        self.pool.close().await;
    }
}
