//! The SQL of scheduled firings and their jobs' watermarks in the SQLite file; the `Store` impl in
//! `mod.rs` hands each operation here. What each guarantees is written on the `Store` trait, and
//! why, in `crate::firings`.

use sqlx::sqlite::SqlitePool;

use crate::StateError;
use crate::store::{FiringColumns, FiringWrite, firing_columns};

pub(super) async fn record(pool: &SqlitePool, firing: &FiringWrite<'_>) -> Result<(), StateError> {
    let statement = match firing.replace {
        true => {
            "INSERT INTO schedule_firings (job, fire_at_ms, outcome, run_id, detail, updated_at_ms) \
             VALUES (?, ?, ?, ?, ?, ?) \
             ON CONFLICT (job, fire_at_ms) DO UPDATE SET outcome = excluded.outcome, run_id = excluded.run_id, \
               detail = excluded.detail, updated_at_ms = excluded.updated_at_ms"
        }
        false => {
            "INSERT INTO schedule_firings (job, fire_at_ms, outcome, run_id, detail, updated_at_ms) \
             VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (job, fire_at_ms) DO NOTHING"
        }
    };
    sqlx::query(statement)
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

pub(super) async fn get(pool: &SqlitePool, job: &str, fire_at_ms: i64) -> Result<Option<FiringColumns>, StateError> {
    Ok(sqlx::query_as(concat!("SELECT ", firing_columns!(), " FROM schedule_firings WHERE job = ? AND fire_at_ms = ?"))
        .bind(job)
        .bind(fire_at_ms)
        .fetch_optional(pool)
        .await?)
}

pub(super) async fn after(
    pool: &SqlitePool,
    job: &str,
    after_ms: i64,
    limit: i64,
) -> Result<Vec<FiringColumns>, StateError> {
    Ok(sqlx::query_as(concat!(
        "SELECT ",
        firing_columns!(),
        " FROM schedule_firings WHERE job = ? AND fire_at_ms > ? ORDER BY fire_at_ms LIMIT ?"
    ))
    .bind(job)
    .bind(after_ms)
    .bind(limit)
    .fetch_all(pool)
    .await?)
}

pub(super) async fn last(pool: &SqlitePool, job: &str, limit: i64) -> Result<Vec<FiringColumns>, StateError> {
    Ok(sqlx::query_as(concat!(
        "SELECT ",
        firing_columns!(),
        " FROM schedule_firings WHERE job = ? ORDER BY fire_at_ms DESC LIMIT ?"
    ))
    .bind(job)
    .bind(limit)
    .fetch_all(pool)
    .await?)
}

pub(super) async fn of_run(pool: &SqlitePool, run_id: &str) -> Result<Option<FiringColumns>, StateError> {
    Ok(sqlx::query_as(concat!(
        "SELECT ",
        firing_columns!(),
        " FROM schedule_firings WHERE run_id = ? ORDER BY fire_at_ms DESC LIMIT 1"
    ))
    .bind(run_id)
    .fetch_optional(pool)
    .await?)
}

/// One statement: the upsert's `WHERE` keeps a larger value stored, so the value never goes down
/// (SQLite runs one write at a time, and the statement is one).
pub(super) async fn raise_value(pool: &SqlitePool, name: &str, value: i64, at_ms: i64) -> Result<(), StateError> {
    sqlx::query(
        "INSERT INTO named_values (name, value, updated_at_ms) VALUES (?1, ?2, ?3) \
         ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at_ms = excluded.updated_at_ms \
         WHERE CAST(named_values.value AS INTEGER) < CAST(excluded.value AS INTEGER)",
    )
    .bind(name)
    .bind(value.to_string())
    .bind(at_ms)
    .execute(pool)
    .await?;
    Ok(())
}

/// A claim's job is the watermark's name after the prefix; what follows `{job}@` must be an
/// integer written as Rust writes it (it casts back to the same text), so no other job's claim
/// matches, and a key that is not a firing's never does.
pub(super) async fn prune_claims(pool: &SqlitePool, before_ms: i64, watermark_prefix: &str) -> Result<u64, StateError> {
    let deleted = sqlx::query(
        "DELETE FROM claims WHERE kind = 'firing' AND claimed_at_ms < ?1 AND key IN ( \
           SELECT c.key FROM claims c JOIN ( \
               SELECT substr(name, length(?2) + 1) || '@' AS prefix, CAST(value AS INTEGER) AS through_ms \
               FROM named_values WHERE substr(name, 1, length(?2)) = ?2) w \
             ON substr(c.key, 1, length(w.prefix)) = w.prefix \
           WHERE c.kind = 'firing' \
             AND CAST(CAST(substr(c.key, length(w.prefix) + 1) AS INTEGER) AS TEXT) = substr(c.key, length(w.prefix) + 1) \
             AND CAST(substr(c.key, length(w.prefix) + 1) AS INTEGER) <= w.through_ms)",
    )
    .bind(before_ms)
    .bind(watermark_prefix)
    .execute(pool)
    .await?
    .rows_affected();
    Ok(deleted)
}

pub(super) async fn prune(pool: &SqlitePool, before_ms: i64) -> Result<u64, StateError> {
    let deleted = sqlx::query(
        "DELETE FROM schedule_firings WHERE updated_at_ms < ?1 \
           AND fire_at_ms < (SELECT MAX(newest.fire_at_ms) FROM schedule_firings newest \
                             WHERE newest.job = schedule_firings.job) \
           AND (run_id IS NULL OR run_id NOT IN (SELECT id FROM runs WHERE status IN ('queued', 'running')))",
    )
    .bind(before_ms)
    .execute(pool)
    .await?
    .rows_affected();
    Ok(deleted)
}
