//! What the board's database and the agent's state share about SQLite: the write-ahead log is
//! copied into the database (a checkpoint, with its disk flushes) by a background task, not by
//! whichever commit happens to fill it.
//!
//! SQLite's default checkpoints inside the commit that crosses 1,000 pages of log, so one event
//! in a few dozen waited for two disk flushes (~4 ms each here); that was most of the event path's
//! slowest 1 % (docs/performance.md). A passive checkpoint neither waits for nor blocks readers
//! and writers, so the background one costs requests nothing.

use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqlitePool};

/// How often the background checkpoint runs. The log holds at most about this much work.
pub const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

/// Connection settings: no checkpoint inside a commit (see [`checkpoint_in_background`]).
pub fn without_commit_checkpoints(options: SqliteConnectOptions) -> SqliteConnectOptions {
    options.pragma("wal_autocheckpoint", "0")
}

/// Checkpoints `pool`'s database every [`CHECKPOINT_EVERY`] until the pool is closed.
pub fn checkpoint_in_background(pool: SqlitePool) {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(CHECKPOINT_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            if pool.is_closed() {
                break;
            }
            if let Err(error) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)").execute(&pool).await {
                if pool.is_closed() {
                    break;
                }
                // The log only grows until the next one succeeds; commits are unaffected.
                tracing::warn!(%error, "checkpointing the SQLite write-ahead log failed; trying again shortly");
            }
        }
    });
}
