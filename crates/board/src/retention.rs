//! The board's retention: its event log and its idempotency keys are pruned on a schedule.
//!
//! Invariants:
//! - an event goes once it is older than [`Retention::events`], except each member's newest one,
//!   which numbers the next (`seq` is one more than the member's highest logged), so pruning never
//!   makes seqs repeat. A client resuming from before the oldest event kept gets what is kept:
//!   a gap, which the contract tells it to cover through REST;
//! - an idempotency key is remembered for the 24 hours the contract promises, never less: the
//!   schedule deletes only answered keys past their lifetime (`idempotency::prune_expired`); a
//!   key still pending belongs to a request in flight.

use std::time::Duration;

use sqlx::SqlitePool;
use time::OffsetDateTime;

use crate::BoardState;
use crate::idempotency;

/// How long the board keeps what it only needs for a while, and how often it prunes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Events older than this leave the log (each member's newest stays).
    pub events: Duration,
    /// How often pruning runs; the first time a minute after start (or after `interval`, if
    /// shorter).
    pub interval: Duration,
}

impl Default for Retention {
    fn default() -> Self {
        Retention { events: Duration::from_secs(7 * 24 * 60 * 60), interval: Duration::from_secs(60 * 60) }
    }
}

/// What one pass removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Pruned {
    pub events: u64,
    pub idempotency_keys: u64,
}

const FIRST_PASS_AFTER: Duration = Duration::from_secs(60);

/// Starts the schedule as one of the board's tracked tasks; it ends at shutdown.
pub(super) fn spawn(state: &BoardState, retention: Retention) {
    let pool = state.pool.clone();
    let shutdown = state.shutdown.clone();
    state.tasks.spawn(async move {
        let mut next = tokio::time::Instant::now() + retention.interval.min(FIRST_PASS_AFTER);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep_until(next) => {}
            }
            match prune_once(&pool, retention.events).await {
                Ok(pruned) if pruned != Pruned::default() => tracing::info!(
                    events = pruned.events,
                    idempotency_keys = pruned.idempotency_keys,
                    "pruned the board's event log and idempotency keys"
                ),
                Ok(_) => tracing::debug!("pruned the board: nothing was old enough"),
                Err(error) => tracing::warn!(%error, "cannot prune the board's database; trying again later"),
            }
            next = tokio::time::Instant::now() + retention.interval;
        }
    });
}

/// One pass: events logged more than `events` ago (but each member's newest) and idempotency
/// keys past their lifetime.
pub(super) async fn prune_once(pool: &SqlitePool, events: Duration) -> Result<Pruned, sqlx::Error> {
    let age = time::Duration::try_from(events).unwrap_or(time::Duration::MAX);
    let cutoff = OffsetDateTime::now_utc().checked_sub(age).unwrap_or(OffsetDateTime::UNIX_EPOCH);
    // `ts` is RFC 3339 in UTC (`db::now`) with a fraction of variable length; its first 19
    // characters compare as the second it names.
    let cutoff = cutoff
        .format(time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]"))
        .unwrap_or_default();
    let events = sqlx::query(
        "DELETE FROM events WHERE substr(ts, 1, 19) < ?1 \
           AND seq < (SELECT MAX(newest.seq) FROM events newest WHERE newest.member_slug = events.member_slug)",
    )
    .bind(cutoff)
    .execute(pool)
    .await?
    .rows_affected();
    let idempotency_keys = idempotency::prune_expired(pool).await?;
    Ok(Pruned { events, idempotency_keys })
}
