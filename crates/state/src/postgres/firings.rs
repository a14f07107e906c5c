//! The SQL of scheduled firings and their jobs' watermarks in PostgreSQL, every row the agent's;
//! the `Store` impl in `mod.rs` hands each operation here. What each guarantees is written on the
//! `Store` trait, and why, in `crate::firings`.

use sqlx::postgres::PgPool;

use crate::StateError;
use crate::store::{FiringColumns, FiringWrite, firing_columns};

pub(super) async fn record(pool: &PgPool, agent: &str, firing: &FiringWrite<'_>) -> Result<(), StateError> {
    let statement = match firing.replace {
        true => {
            "INSERT INTO schedule_firings (agent, job, fire_at_ms, outcome, run_id, detail, updated_at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (agent, job, fire_at_ms) DO UPDATE SET outcome = excluded.outcome, run_id = excluded.run_id, \
               detail = excluded.detail, updated_at_ms = excluded.updated_at_ms"
        }
        false => {
            "INSERT INTO schedule_firings (agent, job, fire_at_ms, outcome, run_id, detail, updated_at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (agent, job, fire_at_ms) DO NOTHING"
        }
    };
    sqlx::query(statement)
        .bind(agent)
        .bind(firing.job)
        .bind(firing.fire_at_ms)
        .bind(firing.outcome.as_str())
        .bind(firing.run_id)
        .bind(firing.detail)
        .bind(firing.updated_at_ms)
        .execute(pool)
        .await?;
    Ok(())
}

pub(super) async fn get(
    pool: &PgPool,
    agent: &str,
    job: &str,
    fire_at_ms: i64,
) -> Result<Option<FiringColumns>, StateError> {
    Ok(sqlx::query_as(concat!(
        "SELECT ",
        firing_columns!(),
        " FROM schedule_firings WHERE agent = $1 AND job = $2 AND fire_at_ms = $3"
    ))
    .bind(agent)
    .bind(job)
    .bind(fire_at_ms)
    .fetch_optional(pool)
    .await?)
}

pub(super) async fn after(
    pool: &PgPool,
    agent: &str,
    job: &str,
    after_ms: i64,
    limit: i64,
) -> Result<Vec<FiringColumns>, StateError> {
    Ok(sqlx::query_as(concat!(
        "SELECT ",
        firing_columns!(),
        " FROM schedule_firings WHERE agent = $1 AND job = $2 AND fire_at_ms > $3 ORDER BY fire_at_ms LIMIT $4"
    ))
    .bind(agent)
    .bind(job)
    .bind(after_ms)
    .bind(limit)
    .fetch_all(pool)
    .await?)
}

pub(super) async fn last(pool: &PgPool, agent: &str, job: &str, limit: i64) -> Result<Vec<FiringColumns>, StateError> {
    Ok(sqlx::query_as(concat!(
        "SELECT ",
        firing_columns!(),
        " FROM schedule_firings WHERE agent = $1 AND job = $2 ORDER BY fire_at_ms DESC LIMIT $3"
    ))
    .bind(agent)
    .bind(job)
    .bind(limit)
    .fetch_all(pool)
    .await?)
}

pub(super) async fn of_run(pool: &PgPool, agent: &str, run_id: &str) -> Result<Option<FiringColumns>, StateError> {
    Ok(sqlx::query_as(concat!(
        "SELECT ",
        firing_columns!(),
        " FROM schedule_firings WHERE agent = $1 AND run_id = $2 ORDER BY fire_at_ms DESC LIMIT 1"
    ))
    .bind(agent)
    .bind(run_id)
    .fetch_optional(pool)
    .await?)
}

/// One statement: replicas raising the value at once queue on the row (the upsert locks it), and
/// each `WHERE` is judged against the value the one before left, so the largest stays. A stored
/// value that is not an integer fails the statement rather than being overwritten.
pub(super) async fn raise_value(
    pool: &PgPool,
    agent: &str,
    name: &str,
    value: i64,
    at_ms: i64,
) -> Result<(), StateError> {
    sqlx::query(
        "INSERT INTO named_values (agent, name, value, updated_at_ms) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (agent, name) DO UPDATE SET value = excluded.value, updated_at_ms = excluded.updated_at_ms \
         WHERE named_values.value::bigint < excluded.value::bigint",
    )
    .bind(agent)
    .bind(name)
    .bind(value.to_string())
    .bind(at_ms)
    .execute(pool)
    .await?;
    Ok(())
}

/// A claim's job is the watermark's name after the prefix; what follows `{job}@` must be digits
/// (a `CASE`, so no text that is not a number is ever cast), so no other job's claim matches, and
/// a key that is not a firing's never does.
pub(super) async fn prune_claims(
    pool: &PgPool,
    agent: &str,
    before_ms: i64,
    watermark_prefix: &str,
) -> Result<u64, StateError> {
    let deleted = sqlx::query(
        "DELETE FROM claims WHERE agent = $1 AND kind = 'firing' AND claimed_at_ms < $2 AND key IN ( \
           SELECT c.key FROM claims c JOIN ( \
               SELECT substr(name, char_length($3) + 1) || '@' AS prefix, \
                 CASE WHEN value ~ '^-?[0-9]{1,18}$' THEN value::bigint END AS through_ms \
               FROM named_values WHERE agent = $1 AND left(name, char_length($3)) = $3) w \
             ON left(c.key, char_length(w.prefix)) = w.prefix \
           WHERE c.agent = $1 AND c.kind = 'firing' \
             AND CASE WHEN substr(c.key, char_length(w.prefix) + 1) ~ '^-?[0-9]{1,18}$' \
                 THEN substr(c.key, char_length(w.prefix) + 1)::bigint END <= w.through_ms)",
    )
    .bind(agent)
    .bind(before_ms)
    .bind(watermark_prefix)
    .execute(pool)
    .await?
    .rows_affected();
    Ok(deleted)
}

pub(super) async fn prune(pool: &PgPool, agent: &str, before_ms: i64) -> Result<u64, StateError> {
    let deleted = sqlx::query(
        "DELETE FROM schedule_firings WHERE agent = $1 AND updated_at_ms < $2 \
           AND fire_at_ms < (SELECT MAX(newest.fire_at_ms) FROM schedule_firings newest \
                             WHERE newest.agent = $1 AND newest.job = schedule_firings.job) \
           AND (run_id IS NULL OR run_id NOT IN (SELECT id FROM runs WHERE agent = $1 AND status IN ('queued', 'running')))",
    )
    .bind(agent)
    .bind(before_ms)
    .execute(pool)
    .await?
    .rows_affected();
    Ok(deleted)
}
