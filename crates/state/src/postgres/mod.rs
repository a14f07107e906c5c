//! The state in a PostgreSQL database (`state.url = "postgres://…"`): the tables of SQLite, each
//! row keyed by the agent's identity (its slug, the `agent` column), so one database holds
//! several agents and every query names the one it is for. Schema:
//! `crates/state/migrations/state-postgres/` (the migrator's own table, `_sqlx_migrations`, lives in the same
//! schema; `?options=-c search_path=…` in the URL picks another schema).
//!
//! Durability: every connection runs with `synchronous_commit = on`, so a commit has reached the
//! server's disk when it returns and `sync` has nothing left to do. The runtime holds a
//! [`PostgresLock`] while it runs: one copy of each agent, or its replicas sharing the lock. The run
//! queue, the stream's lease and the heartbeats are `queue.rs`'s; the scheduled firings' SQL is
//! `firings.rs`'s, retention's `prune.rs`'s.

use std::str::FromStr;
use std::time::Duration;

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};

#[cfg(any(test, feature = "test-support"))]
use crate::store::NewRun;
use crate::store::{FiringColumns, FiringWrite, RunColumns, RunEnd, Store, run_columns};
use crate::{ClaimKind, StateError};
use picogent_tracker::session::SessionKey;

mod firings;
mod lock;
mod prune;
mod queue;

pub use lock::{LockSpec, PostgresLock};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/state-postgres");

/// How long the first connection may take before the database counts as not answering.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a query waits for a connection from the pool.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// The PostgreSQL store: a pool on the database, and whose rows it reads and writes.
#[derive(Clone, Debug)]
pub(super) struct PostgresStore {
    pool: PgPool,
    /// The agent's identity, the `agent` column of every row this store touches.
    agent: String,
    /// The database, as it may be shown (no password).
    url: String,
}

/// `url` as it may be shown: user, host, port and database, never a password.
fn shown(options: &PgConnectOptions) -> String {
    format!(
        "postgres://{}@{}:{}/{}",
        options.get_username(),
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap_or_default()
    )
}

/// Inserts or replaces the conversation `$2` of the agent `$1`.
const SAVE_SESSION: &str = "INSERT INTO sessions (agent, key, messages, updated_at_ms) VALUES ($1, $2, $3, $4) \
     ON CONFLICT (agent, key) DO UPDATE SET messages = excluded.messages, updated_at_ms = excluded.updated_at_ms";

impl PostgresStore {
    /// Connects to the database at `url` for the agent `agent`, and brings its schema up to date.
    pub(super) async fn open(url: &str, agent: &str) -> Result<PostgresStore, StateError> {
        let options = PgConnectOptions::from_str(url)
            .map_err(|cause| StateError::PostgresUrl { cause })?
            .options([("synchronous_commit", "on")]);
        let url = shown(&options);
        let connect_error = |cause: sqlx::Error| StateError::PostgresConnect { url: url.clone(), cause };
        // One connection first, so a database that is down or refuses us is said at once and in
        // its own words; the pool would retry a refused connection until its timeout and then
        // report only that it timed out.
        let first = tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(&options))
            .await
            .map_err(|_| connect_error(timed_out()))?
            .map_err(connect_error)?;
        let _ = first.close().await;
        // A query that waits for a connection gives up after a few seconds: in an outage every
        // poller (a replica's tick, the stream's lease) learns it at once instead of stalling
        // for sqlx's default 30 s.
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options)
            .await
            .map_err(connect_error)?;
        if let Err(cause) = MIGRATOR.run(&pool).await {
            pool.close().await;
            return Err(StateError::PostgresMigrate { url, cause });
        }
        Ok(PostgresStore { pool, agent: agent.to_string(), url })
    }

    /// The database and the agent, as they may be shown.
    pub(super) fn location(&self) -> String {
        format!("{} (agent {})", self.url, self.agent)
    }

    /// The pool, for the tests and for `migrate/`, which writes the tables in one transaction.
    pub(super) fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Records a reply and forgets those before `forget_before_ms`, in `transaction`.
    async fn insert_reply(
        &self,
        transaction: &mut sqlx::Transaction<'_, sqlx::Postgres>,
        thread_key: &str,
        at_ms: i64,
        forget_before_ms: i64,
    ) -> Result<(), StateError> {
        sqlx::query("INSERT INTO replies (agent, thread_key, at_ms) VALUES ($1, $2, $3)")
            .bind(&self.agent)
            .bind(thread_key)
            .bind(at_ms)
            .execute(&mut **transaction)
            .await?;
        sqlx::query("DELETE FROM replies WHERE agent = $1 AND at_ms < $2")
            .bind(&self.agent)
            .bind(forget_before_ms)
            .execute(&mut **transaction)
            .await?;
        Ok(())
    }

    /// Saves the conversation under `key` only while the replica `holder` still holds the running
    /// run `run_id`: a replica that lost its run (paused past its lease, and the run resumed on
    /// another) does not overwrite what the new holder saves. The run's row is locked for the
    /// check, so a claim cannot move it in between. Returns whether it was saved.
    pub(super) async fn save_session_of_run(
        &self,
        key: &str,
        messages: &str,
        at_ms: i64,
        run_id: &str,
        holder: &str,
    ) -> Result<bool, StateError> {
        let mut transaction = self.pool.begin().await?;
        let holds: Option<i32> = sqlx::query_scalar(
            "SELECT 1 FROM runs WHERE agent = $1 AND id = $2 AND status = 'running' AND holder = $3 FOR UPDATE",
        )
        .bind(&self.agent)
        .bind(run_id)
        .bind(holder)
        .fetch_optional(&mut *transaction)
        .await?;
        if holds.is_none() {
            return Ok(false);
        }
        sqlx::query(SAVE_SESSION)
            .bind(&self.agent)
            .bind(key)
            .bind(messages)
            .bind(at_ms)
            .execute(&mut *transaction)
            .await?;
        transaction.commit().await?;
        Ok(true)
    }
}

fn timed_out() -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("no answer within {} s", CONNECT_TIMEOUT.as_secs()),
    ))
}

#[cfg(any(test, feature = "test-support"))]
const INSERT_RUN: &str = "INSERT INTO runs (agent, id, session_key, trigger, status, started_at_ms) \
     VALUES ($1, $2, $3, $4, 'running', $5)";
pub(super) const INSERT_CLAIM: &str =
    "INSERT INTO claims (agent, kind, key, claimed_at_ms) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING";
const SET_VALUE: &str = "INSERT INTO named_values (agent, name, value, updated_at_ms) VALUES ($1, $2, $3, $4) \
     ON CONFLICT (agent, name) DO UPDATE SET value = excluded.value, updated_at_ms = excluded.updated_at_ms";

impl Store for PostgresStore {
    async fn record_event(&self, id: &str, seq: i64, name: &str, at_ms: i64) -> Result<bool, StateError> {
        // One statement, so one transaction: the resume point moves with the insert, and only
        // when the event is new (a duplicate's seq is behind it already).
        let inserted: i64 = sqlx::query_scalar(
            "WITH inserted AS ( \
                 INSERT INTO processed_events (agent, id, seq, name, processed_at_ms) VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT DO NOTHING RETURNING seq \
             ), advanced AS ( \
                 INSERT INTO stream_position (agent, last_seq) SELECT $1, seq FROM inserted \
                 ON CONFLICT (agent) DO UPDATE SET last_seq = GREATEST(stream_position.last_seq, excluded.last_seq) \
             ) \
             SELECT COUNT(*) FROM inserted",
        )
        .bind(&self.agent)
        .bind(id)
        .bind(seq)
        .bind(name)
        .bind(at_ms)
        .fetch_one(&self.pool)
        .await?;
        Ok(inserted == 1)
    }

    #[cfg(any(test, feature = "test-support"))]
    async fn is_event_processed(&self, id: &str) -> Result<bool, StateError> {
        Ok(sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM processed_events WHERE agent = $1 AND id = $2)")
            .bind(&self.agent)
            .bind(id)
            .fetch_one(&self.pool)
            .await?)
    }

    async fn last_seq(&self) -> Result<i64, StateError> {
        let seq: Option<i64> = sqlx::query_scalar("SELECT last_seq FROM stream_position WHERE agent = $1")
            .bind(&self.agent)
            .fetch_optional(&self.pool)
            .await?;
        Ok(seq.unwrap_or(0))
    }

    async fn prune_events(&self, before_ms: i64) -> Result<u64, StateError> {
        prune::events(&self.pool, &self.agent, before_ms).await
    }

    async fn claim(&self, kind: ClaimKind, key: &str, at_ms: i64) -> Result<bool, StateError> {
        let inserted = sqlx::query(INSERT_CLAIM)
            .bind(&self.agent)
            .bind(kind.as_str())
            .bind(key)
            .bind(at_ms)
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(inserted == 1)
    }

    async fn is_claimed(&self, kind: ClaimKind, key: &str) -> Result<bool, StateError> {
        Ok(sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM claims WHERE agent = $1 AND kind = $2 AND key = $3)")
            .bind(&self.agent)
            .bind(kind.as_str())
            .bind(key)
            .fetch_one(&self.pool)
            .await?)
    }

    async fn release(&self, kind: ClaimKind, key: &str) -> Result<bool, StateError> {
        let deleted = sqlx::query("DELETE FROM claims WHERE agent = $1 AND kind = $2 AND key = $3")
            .bind(&self.agent)
            .bind(kind.as_str())
            .bind(key)
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(deleted == 1)
    }

    async fn load_session(&self, key: &str) -> Result<Option<(String, i64)>, StateError> {
        Ok(sqlx::query_as("SELECT messages, updated_at_ms FROM sessions WHERE agent = $1 AND key = $2")
            .bind(&self.agent)
            .bind(key)
            .fetch_optional(&self.pool)
            .await?)
    }

    async fn save_session(&self, key: &str, messages: &str, at_ms: i64) -> Result<(), StateError> {
        sqlx::query(SAVE_SESSION).bind(&self.agent).bind(key).bind(messages).bind(at_ms).execute(&self.pool).await?;
        Ok(())
    }

    #[cfg(any(test, feature = "test-support"))]
    async fn delete_session(&self, key: &str) -> Result<bool, StateError> {
        let deleted = sqlx::query("DELETE FROM sessions WHERE agent = $1 AND key = $2")
            .bind(&self.agent)
            .bind(key)
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(deleted == 1)
    }

    async fn add_spend(&self, day: &str, tokens: i64, cost: f64) -> Result<(i64, f64), StateError> {
        Ok(sqlx::query_as(
            "INSERT INTO daily_spend (agent, day, tokens, cost) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (agent, day) DO UPDATE \
             SET tokens = daily_spend.tokens + excluded.tokens, cost = daily_spend.cost + excluded.cost \
             RETURNING tokens, cost",
        )
        .bind(&self.agent)
        .bind(day)
        .bind(tokens)
        .bind(cost)
        .fetch_one(&self.pool)
        .await?)
    }

    async fn spend_on(&self, day: &str) -> Result<Option<(i64, f64)>, StateError> {
        Ok(sqlx::query_as("SELECT tokens, cost FROM daily_spend WHERE agent = $1 AND day = $2")
            .bind(&self.agent)
            .bind(day)
            .fetch_optional(&self.pool)
            .await?)
    }

    async fn record_reply(&self, thread_key: &str, at_ms: i64, forget_before_ms: i64) -> Result<(), StateError> {
        let mut transaction = self.pool.begin().await?;
        self.insert_reply(&mut transaction, thread_key, at_ms, forget_before_ms).await?;
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
        // The thread's transaction lock: replicas posting in one thread at once count in turn.
        let mut transaction = self.pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('picogent replies ' || $1 || '/' || $2, 0))")
            .bind(&self.agent)
            .bind(thread_key)
            .execute(&mut *transaction)
            .await?;
        let count: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM replies WHERE agent = $1 AND thread_key = $2 AND at_ms >= $3")
                .bind(&self.agent)
                .bind(thread_key)
                .bind(since_ms)
                .fetch_one(&mut *transaction)
                .await?;
        if count >= max {
            return Ok(Some(count));
        }
        self.insert_reply(&mut transaction, thread_key, at_ms, forget_before_ms).await?;
        transaction.commit().await?;
        Ok(None)
    }

    async fn replies_since(&self, thread_key: &str, since_ms: i64) -> Result<i64, StateError> {
        Ok(sqlx::query_scalar("SELECT COUNT(*) FROM replies WHERE agent = $1 AND thread_key = $2 AND at_ms >= $3")
            .bind(&self.agent)
            .bind(thread_key)
            .bind(since_ms)
            .fetch_one(&self.pool)
            .await?)
    }

    #[cfg(any(test, feature = "test-support"))]
    async fn start_run(&self, run: &NewRun<'_>) -> Result<(), StateError> {
        sqlx::query(INSERT_RUN)
            .bind(&self.agent)
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
        // A concurrent claim of the same key waits here for this transaction, then finds it.
        let claimed = sqlx::query(INSERT_CLAIM)
            .bind(&self.agent)
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
            .bind(&self.agent)
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
        let updated = sqlx::query("UPDATE runs SET record = $3 WHERE agent = $1 AND id = $2")
            .bind(&self.agent)
            .bind(run_id)
            .bind(record)
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(updated == 1)
    }

    async fn set_waiting(&self, run_id: &str, waiting: Option<&str>) -> Result<bool, StateError> {
        let updated = sqlx::query("UPDATE runs SET waiting = $3 WHERE agent = $1 AND id = $2 AND status = 'running'")
            .bind(&self.agent)
            .bind(run_id)
            .bind(waiting)
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(updated == 1)
    }

    async fn finish_run(&self, run_id: &str, end: &RunEnd<'_>) -> Result<bool, StateError> {
        let updated = sqlx::query(
            "UPDATE runs SET status = $3, turns = $4, tool_calls = $5, prompt_tokens = $6, completion_tokens = $7, \
             model_duration_ms = $8, tool_duration_ms = $9, outcome = $10, error = $11, finished_at_ms = $12, \
             record = COALESCE($13, record), cost = $14, waiting = NULL \
             WHERE agent = $1 AND id = $2 AND status = 'running' AND ($15::text IS NULL OR holder = $15)",
        )
        .bind(&self.agent)
        .bind(run_id)
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
        .bind(end.holder)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(updated == 1)
    }

    #[cfg(any(test, feature = "test-support"))]
    async fn mark_interrupted(&self, run_id: &str, reason: &str, at_ms: i64) -> Result<bool, StateError> {
        let updated = sqlx::query(
            "UPDATE runs SET status = 'interrupted', outcome = $3, finished_at_ms = $4 \
             WHERE agent = $1 AND id = $2 AND status = 'running'",
        )
        .bind(&self.agent)
        .bind(run_id)
        .bind(reason)
        .bind(at_ms)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(updated == 1)
    }

    async fn get_run(&self, run_id: &str) -> Result<Option<RunColumns>, StateError> {
        Ok(sqlx::query_as(concat!("SELECT ", run_columns!(), " FROM runs WHERE agent = $1 AND id = $2"))
            .bind(&self.agent)
            .bind(run_id)
            .fetch_optional(&self.pool)
            .await?)
    }

    async fn list_runs(&self, limit: i64) -> Result<Vec<RunColumns>, StateError> {
        Ok(sqlx::query_as(concat!(
            "SELECT ",
            run_columns!(),
            " FROM runs WHERE agent = $1 ORDER BY started_at_ms DESC, row_order DESC LIMIT $2"
        ))
        .bind(&self.agent)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn runs_of_session(&self, session_key: &SessionKey, limit: i64) -> Result<Vec<RunColumns>, StateError> {
        Ok(sqlx::query_as(concat!(
            "SELECT ",
            run_columns!(),
            " FROM runs WHERE agent = $1 AND session_key = $2 ORDER BY started_at_ms DESC, row_order DESC LIMIT $3"
        ))
        .bind(&self.agent)
        .bind(session_key.as_string())
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn run_ids_starting_with(&self, prefix: &str, limit: i64) -> Result<Vec<String>, StateError> {
        Ok(sqlx::query_scalar("SELECT id FROM runs WHERE agent = $1 AND left(id, char_length($2)) = $2 LIMIT $3")
            .bind(&self.agent)
            .bind(prefix)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?)
    }

    async fn unfinished_runs(&self) -> Result<Vec<RunColumns>, StateError> {
        Ok(sqlx::query_as(concat!(
            "SELECT ",
            run_columns!(),
            " FROM runs WHERE agent = $1 AND status = 'running' ORDER BY started_at_ms, row_order"
        ))
        .bind(&self.agent)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn has_finished_run_for(&self, session_key: &SessionKey) -> Result<bool, StateError> {
        Ok(sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM runs WHERE agent = $1 AND session_key = $2 \
             AND status IN ('completed', 'failed', 'did_nothing', 'stopped'))",
        )
        .bind(&self.agent)
        .bind(session_key.as_string())
        .fetch_one(&self.pool)
        .await?)
    }

    async fn has_run_since(&self, session_key: &SessionKey, since_ms: i64) -> Result<bool, StateError> {
        Ok(sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM runs WHERE agent = $1 AND session_key = $2 AND started_at_ms >= $3)",
        )
        .bind(&self.agent)
        .bind(session_key.as_string())
        .bind(since_ms)
        .fetch_one(&self.pool)
        .await?)
    }

    async fn spend_of_session(&self, session_key: &SessionKey) -> Result<(i64, f64), StateError> {
        Ok(sqlx::query_as(
            "SELECT coalesce(sum(prompt_tokens + completion_tokens), 0)::BIGINT, \
             coalesce(sum(cost), 0)::DOUBLE PRECISION FROM runs WHERE agent = $1 AND session_key = $2",
        )
        .bind(&self.agent)
        .bind(session_key.as_string())
        .fetch_one(&self.pool)
        .await?)
    }

    async fn get_value(&self, name: &str) -> Result<Option<String>, StateError> {
        Ok(sqlx::query_scalar("SELECT value FROM named_values WHERE agent = $1 AND name = $2")
            .bind(&self.agent)
            .bind(name)
            .fetch_optional(&self.pool)
            .await?)
    }

    async fn set_value(&self, name: &str, value: &str, at_ms: i64) -> Result<(), StateError> {
        sqlx::query(SET_VALUE).bind(&self.agent).bind(name).bind(value).bind(at_ms).execute(&self.pool).await?;
        Ok(())
    }

    async fn value_or_insert(&self, name: &str, value: &str, at_ms: i64) -> Result<String, StateError> {
        // The no-op update locks the row and returns it, so every caller reads the winner's value.
        Ok(sqlx::query_scalar(
            "INSERT INTO named_values (agent, name, value, updated_at_ms) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (agent, name) DO UPDATE SET value = named_values.value RETURNING value",
        )
        .bind(&self.agent)
        .bind(name)
        .bind(value)
        .bind(at_ms)
        .fetch_one(&self.pool)
        .await?)
    }

    async fn raise_value(&self, name: &str, value: i64, at_ms: i64) -> Result<(), StateError> {
        firings::raise_value(&self.pool, &self.agent, name, value, at_ms).await
    }

    async fn record_firing(&self, firing: &FiringWrite<'_>) -> Result<(), StateError> {
        firings::record(&self.pool, &self.agent, firing).await
    }

    async fn get_firing(&self, job: &str, fire_at_ms: i64) -> Result<Option<FiringColumns>, StateError> {
        firings::get(&self.pool, &self.agent, job, fire_at_ms).await
    }

    async fn firings_after(&self, job: &str, after_ms: i64, limit: i64) -> Result<Vec<FiringColumns>, StateError> {
        firings::after(&self.pool, &self.agent, job, after_ms, limit).await
    }

    async fn last_firings(&self, job: &str, limit: i64) -> Result<Vec<FiringColumns>, StateError> {
        firings::last(&self.pool, &self.agent, job, limit).await
    }

    async fn firing_of_run(&self, run_id: &str) -> Result<Option<FiringColumns>, StateError> {
        firings::of_run(&self.pool, &self.agent, run_id).await
    }

    async fn record_stream_head(&self, seq: i64, value_name: &str, at_ms: i64) -> Result<(), StateError> {
        let mut transaction = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO stream_position (agent, last_seq) VALUES ($1, $2) \
             ON CONFLICT (agent) DO UPDATE SET last_seq = GREATEST(stream_position.last_seq, excluded.last_seq)",
        )
        .bind(&self.agent)
        .bind(seq)
        .execute(&mut *transaction)
        .await?;
        sqlx::query(SET_VALUE)
            .bind(&self.agent)
            .bind(value_name)
            .bind(seq.to_string())
            .bind(at_ms)
            .execute(&mut *transaction)
            .await?;
        transaction.commit().await?;
        Ok(())
    }

    async fn prune_notice_claims(&self, before_ms: i64, oldest_day_asked: &str) -> Result<u64, StateError> {
        prune::notice_claims(&self.pool, &self.agent, before_ms, oldest_day_asked).await
    }

    async fn prune_message_claims(&self, before_ms: i64) -> Result<u64, StateError> {
        prune::message_claims(&self.pool, &self.agent, before_ms).await
    }

    async fn prune_runs(&self, before_ms: i64) -> Result<(u64, u64), StateError> {
        prune::runs(&self.pool, &self.agent, before_ms).await
    }

    async fn prune_firing_claims(&self, before_ms: i64, watermark_prefix: &str) -> Result<u64, StateError> {
        firings::prune_claims(&self.pool, &self.agent, before_ms, watermark_prefix).await
    }

    async fn prune_firings(&self, before_ms: i64) -> Result<u64, StateError> {
        firings::prune(&self.pool, &self.agent, before_ms).await
    }

    async fn prune_sessions(&self, before_ms: i64) -> Result<u64, StateError> {
        prune::sessions(&self.pool, &self.agent, before_ms).await
    }

    async fn prune_replies(&self, before_ms: i64) -> Result<u64, StateError> {
        prune::replies(&self.pool, &self.agent, before_ms).await
    }

    async fn prune_spend(&self, before_day: &str) -> Result<u64, StateError> {
        prune::spend(&self.pool, &self.agent, before_day).await
    }

    /// Nothing to do: with `synchronous_commit = on` every commit was on the server's disk when
    /// it returned.
    async fn sync(&self) -> Result<(), StateError> {
        Ok(())
    }

    async fn close(&self) {
        self.pool.close().await;
    }
}
