//! Scheduled firings: the durable record of a job's scheduled times. A *job* is a named schedule
//! from agent.json (such as `standup-daily`); a *firing* is one scheduled time of one job
//! (`fire_at_ms`, Unix milliseconds, UTC).
//!
//! Three things, each with one job:
//! - **The claim does a firing once.** [`ClaimKind::Firing`](crate::ClaimKind::Firing) keyed by [`firing_claim_key`]
//!   (`{job}@{fire_at_ms}`), taken with [`State::claim`] or, with the firing's run, by
//!   [`RunQueue::enqueue`](crate::RunQueue::enqueue) in one transaction: of replicas (or a copy
//!   restarted after a crash) that find the same firing due, exactly one acts on it.
//! - **The watermark says how far the job's firings were considered.** [`State::schedule_through`]
//!   is the named value `schedule.through.{job}`; it only moves forward
//!   ([`State::advance_schedule_through`]: one statement in either store, so replicas advancing it
//!   at once leave the latest time) and is never pruned (no pruning touches named values). A
//!   firing at or before it is never considered again, which is what lets retention forget its
//!   claim.
//! - **The firing log records what became of each firing**, for people to see and for later
//!   firings of the job to decide by ([`State::last_firings`], [`State::firings_after`]). It is
//!   not what makes a firing happen once (the claim is), so its writes are plain upserts, and
//!   pruning keeps the newest firing of each job (`retention.rs`).
//!
//! Writes of the log are not held to a run's holder ([`State::for_holder`]): that rule guards a
//! run's end and its conversation, which a replica that lost its run must not write over the one
//! that took it over. A firing's record is neither; a run taken over keeps its run id, so the
//! outcome its last holder writes, last, is the one that stays.

use std::str::FromStr;

use serde::Serialize;

use crate::store::{FiringColumns, FiringWrite};
use crate::{State, StateError, now_ms};

/// The named value holding a job's watermark is this, then the job's name.
pub(crate) const SCHEDULE_THROUGH: &str = "schedule.through.";
/// The named value holding how far a standup job's last digest read the board.
const SCHEDULE_SEEN: &str = "schedule.seen.";

/// The key of a firing's claim ([`ClaimKind::Firing`](crate::ClaimKind::Firing)): `{job}@{fire_at_ms}`. Retention reads
/// keys of this shape back (to compare them with the job's watermark), so make them here only.
pub fn firing_claim_key(job: &str, fire_at_ms: i64) -> String {
    format!("{job}@{fire_at_ms}")
}

/// Where a firing of a schedule is, or how it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FiringOutcome {
    /// Its run is queued or running; the firing is written again when the run ends.
    Queued,
    /// Its run posted what the job is for (the digest, the reminder).
    Posted,
    /// Its run ran and found nothing worth posting.
    Idle,
    /// Not run, on purpose; `detail` says why (e.g. missed while the agent was away).
    Skipped,
    /// Its run failed, or it could not be queued; `detail` says why.
    Failed,
    /// Its run was stopped before it ended (a person said stop).
    Stopped,
}

impl FiringOutcome {
    pub const ALL: [FiringOutcome; 6] = [
        FiringOutcome::Queued,
        FiringOutcome::Posted,
        FiringOutcome::Idle,
        FiringOutcome::Skipped,
        FiringOutcome::Failed,
        FiringOutcome::Stopped,
    ];

    /// The word the database stores, so it never changes.
    pub fn as_str(self) -> &'static str {
        match self {
            FiringOutcome::Queued => "queued",
            FiringOutcome::Posted => "posted",
            FiringOutcome::Idle => "idle",
            FiringOutcome::Skipped => "skipped",
            FiringOutcome::Failed => "failed",
            FiringOutcome::Stopped => "stopped",
        }
    }
}

impl std::fmt::Display for FiringOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A word that is not a [`FiringOutcome`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown firing outcome {0:?}; expected one of queued, posted, idle, skipped, failed, stopped")]
pub struct UnknownFiringOutcome(pub String);

impl FromStr for FiringOutcome {
    type Err = UnknownFiringOutcome;

    fn from_str(text: &str) -> Result<FiringOutcome, UnknownFiringOutcome> {
        FiringOutcome::ALL
            .into_iter()
            .find(|outcome| outcome.as_str() == text)
            .ok_or_else(|| UnknownFiringOutcome(text.to_string()))
    }
}

/// One firing as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FiringRow {
    pub job: String,
    /// The scheduled time (Unix ms, UTC), not when it ran.
    pub fire_at_ms: i64,
    pub outcome: FiringOutcome,
    /// The run it was queued as, when it was.
    pub run_id: Option<String>,
    /// Why it ended so, in a few words; empty when the outcome says it all.
    pub detail: String,
    /// When the row was last written (Unix ms).
    pub updated_at_ms: i64,
}

impl State {
    /// Writes (inserts or replaces) the firing's record. A plain write, held to no run's holder:
    /// see the module docs for why.
    pub async fn record_firing(
        &self,
        job: &str,
        fire_at_ms: i64,
        outcome: FiringOutcome,
        run_id: Option<&str>,
        detail: &str,
    ) -> Result<(), StateError> {
        self.write_firing(FiringWrite {
            job,
            fire_at_ms,
            outcome,
            run_id,
            detail,
            updated_at_ms: now_ms(),
            replace: true,
        })
        .await
    }

    /// Writes the firing's record only where there is none yet: the scheduler's `queued`, which
    /// must not replace the outcome its run, quick to end, may have written first.
    pub async fn record_firing_if_absent(
        &self,
        job: &str,
        fire_at_ms: i64,
        outcome: FiringOutcome,
        run_id: Option<&str>,
        detail: &str,
    ) -> Result<(), StateError> {
        self.write_firing(FiringWrite {
            job,
            fire_at_ms,
            outcome,
            run_id,
            detail,
            updated_at_ms: now_ms(),
            replace: false,
        })
        .await
    }

    async fn write_firing(&self, firing: FiringWrite<'_>) -> Result<(), StateError> {
        on_store!(self, record_firing(&firing))
    }

    /// The firing of `job` scheduled at `fire_at_ms`, if it was recorded (and not pruned).
    pub async fn get_firing(&self, job: &str, fire_at_ms: i64) -> Result<Option<FiringRow>, StateError> {
        on_store!(self, get_firing(job, fire_at_ms))?.map(firing_from_columns).transpose()
    }

    /// The job's firings after `after_ms`, oldest first (at most `limit`).
    pub async fn firings_after(&self, job: &str, after_ms: i64, limit: u32) -> Result<Vec<FiringRow>, StateError> {
        on_store!(self, firings_after(job, after_ms, i64::from(limit)))?.into_iter().map(firing_from_columns).collect()
    }

    /// The job's newest firings, newest first.
    pub async fn last_firings(&self, job: &str, limit: u32) -> Result<Vec<FiringRow>, StateError> {
        on_store!(self, last_firings(job, i64::from(limit)))?.into_iter().map(firing_from_columns).collect()
    }

    /// The firing a run was queued for, if any: when a run ends, whether it was a firing's and
    /// which.
    pub async fn firing_of_run(&self, run_id: &str) -> Result<Option<FiringRow>, StateError> {
        on_store!(self, firing_of_run(run_id))?.map(firing_from_columns).transpose()
    }

    /// The time up to which the job's firings were considered (the scheduler's watermark), if it
    /// ever was: stored in the named values under `schedule.through.{job}`.
    pub async fn schedule_through(&self, job: &str) -> Result<Option<i64>, StateError> {
        self.time_value(&through_name(job), &format!("the watermark of schedule {job:?}")).await
    }

    /// How far the board was read by the job's last digest: the newest change time (ms, the
    /// tracker's clock) among the tasks it saw, so the next one reports what changed after it
    /// whatever the agent's clock says. Stored under `schedule.seen.{job}`.
    pub async fn schedule_seen(&self, job: &str) -> Result<Option<i64>, StateError> {
        self.time_value(&format!("{SCHEDULE_SEEN}{job}"), &format!("what schedule {job:?} saw")).await
    }

    /// Moves [`State::schedule_seen`] forward to `seen_ms`, never backward (one statement).
    pub async fn advance_schedule_seen(&self, job: &str, seen_ms: i64) -> Result<(), StateError> {
        on_store!(self, raise_value(&format!("{SCHEDULE_SEEN}{job}"), seen_ms, now_ms()))
    }

    /// A named value that holds a time in milliseconds; `what` names it in the error.
    async fn time_value(&self, name: &str, what: &str) -> Result<Option<i64>, StateError> {
        let Some(text) = on_store!(self, get_value(name))? else { return Ok(None) };
        text.parse().map(Some).map_err(|_| StateError::Corrupt {
            field: "named_values.value",
            message: format!("{what} is {text:?}, not a time in milliseconds"),
        })
    }

    /// Moves the watermark forward to `through_ms`; never backward (if the stored one is later, it
    /// is kept). One statement in either store, so replicas calling it at once leave the latest of
    /// their times, whatever their order.
    pub async fn advance_schedule_through(&self, job: &str, through_ms: i64) -> Result<(), StateError> {
        on_store!(self, raise_value(&through_name(job), through_ms, now_ms()))
    }
}

/// The named value of the job's watermark.
fn through_name(job: &str) -> String {
    format!("{SCHEDULE_THROUGH}{job}")
}

fn firing_from_columns(row: FiringColumns) -> Result<FiringRow, StateError> {
    let outcome = row.outcome.parse().map_err(|error: UnknownFiringOutcome| StateError::Corrupt {
        field: "schedule_firings.outcome",
        message: error.to_string(),
    })?;
    Ok(FiringRow {
        job: row.job,
        fire_at_ms: row.fire_at_ms,
        outcome,
        run_id: row.run_id,
        detail: row.detail,
        updated_at_ms: row.updated_at_ms,
    })
}
