//! What retention deletes from the agent's rows in PostgreSQL; the `Store` impl in `mod.rs` hands
//! each pruning here. What each may delete, and why that never acts twice, is written on the
//! `Store` trait and in `crate::retention`.
//!
//! Days are compared as text in the "C" collation: byte order, which is date order for
//! `YYYY-MM-DD` whatever the database's own collation.

use sqlx::postgres::PgPool;

use crate::StateError;

/// Runs one pruning `DELETE` whose parameters are the agent (`$1`) and the cutoff in
/// milliseconds (`$2`); how many rows went.
async fn delete_older(pool: &PgPool, agent: &str, sql: &'static str, before_ms: i64) -> Result<u64, StateError> {
    Ok(sqlx::query(sql).bind(agent).bind(before_ms).execute(pool).await?.rows_affected())
}

pub(super) async fn events(pool: &PgPool, agent: &str, before_ms: i64) -> Result<u64, StateError> {
    delete_older(pool, agent, "DELETE FROM processed_events WHERE agent = $1 AND processed_at_ms < $2", before_ms).await
}

pub(super) async fn notice_claims(
    pool: &PgPool,
    agent: &str,
    before_ms: i64,
    oldest_day_asked: &str,
) -> Result<u64, StateError> {
    let deleted = sqlx::query(
        "DELETE FROM claims WHERE agent = $1 AND claimed_at_ms < $2 AND ( \
           (kind = 'run_notice' AND key NOT IN (SELECT id FROM runs WHERE agent = $1 AND status IN ('queued', 'running'))) \
           OR (kind IN ('spend_notice', 'limit_notice') AND key COLLATE \"C\" < $3))",
    )
    .bind(agent)
    .bind(before_ms)
    .bind(oldest_day_asked)
    .execute(pool)
    .await?
    .rows_affected();
    Ok(deleted)
}

pub(super) async fn message_claims(pool: &PgPool, agent: &str, before_ms: i64) -> Result<u64, StateError> {
    delete_older(
        pool,
        agent,
        "DELETE FROM claims WHERE agent = $1 AND kind = 'message' AND claimed_at_ms < $2",
        before_ms,
    )
    .await
}

pub(super) async fn runs(pool: &PgPool, agent: &str, before_ms: i64) -> Result<(u64, u64), StateError> {
    let mut transaction = pool.begin().await?;
    let deleted = sqlx::query(
        "WITH ranked AS ( \
           SELECT id, \
             ROW_NUMBER() OVER (PARTITION BY session_key ORDER BY started_at_ms DESC, row_order DESC) AS newest, \
             ROW_NUMBER() OVER ( \
               PARTITION BY session_key, status IN ('completed', 'failed', 'did_nothing', 'stopped') \
               ORDER BY started_at_ms DESC, row_order DESC) AS newest_alike, \
             status IN ('completed', 'failed', 'did_nothing', 'stopped') AS finished_work \
           FROM runs WHERE agent = $1) \
         DELETE FROM runs WHERE agent = $1 AND status NOT IN ('queued', 'running') \
           AND COALESCE(finished_at_ms, started_at_ms) < $2 \
           AND id IN (SELECT id FROM ranked WHERE newest > 1 AND NOT (finished_work AND newest_alike = 1))",
    )
    .bind(agent)
    .bind(before_ms)
    .execute(&mut *transaction)
    .await?
    .rows_affected();
    let dropped = sqlx::query(
        "UPDATE runs SET record = NULL WHERE agent = $1 AND status NOT IN ('queued', 'running') AND record IS NOT NULL \
           AND COALESCE(finished_at_ms, started_at_ms) < $2",
    )
    .bind(agent)
    .bind(before_ms)
    .execute(&mut *transaction)
    .await?
    .rows_affected();
    // The inputs of runs that ended: read once, at the end, for a follow-up run.
    sqlx::query(
        "DELETE FROM run_inputs WHERE agent = $1 AND at_ms < $2 \
           AND run_id NOT IN (SELECT id FROM runs WHERE agent = $1 AND status IN ('queued', 'running'))",
    )
    .bind(agent)
    .bind(before_ms)
    .execute(&mut *transaction)
    .await?;
    transaction.commit().await?;
    Ok((deleted, dropped))
}

pub(super) async fn sessions(pool: &PgPool, agent: &str, before_ms: i64) -> Result<u64, StateError> {
    delete_older(
        pool,
        agent,
        "DELETE FROM sessions WHERE agent = $1 AND updated_at_ms < $2 \
           AND key NOT IN (SELECT session_key FROM runs WHERE agent = $1 AND status IN ('queued', 'running'))",
        before_ms,
    )
    .await
}

pub(super) async fn replies(pool: &PgPool, agent: &str, before_ms: i64) -> Result<u64, StateError> {
    delete_older(pool, agent, "DELETE FROM replies WHERE agent = $1 AND at_ms < $2", before_ms).await
}

pub(super) async fn spend(pool: &PgPool, agent: &str, before_day: &str) -> Result<u64, StateError> {
    let deleted = sqlx::query("DELETE FROM daily_spend WHERE agent = $1 AND day COLLATE \"C\" < $2")
        .bind(agent)
        .bind(before_day)
        .execute(pool)
        .await?
        .rows_affected();
    Ok(deleted)
}
