//! Pruning: what the state database may forget, and when, without ever acting twice.
//!
//! Every row here exists to stop something from happening twice or to remember a conversation.
//! A row may go only once nothing can ask for it again. The resume point (`stream_position`) is
//! never pruned: it is one row, and without it the stream would replay the tracker's whole log.
//!
//! - **Processed events** stop a repeated *delivery* of an event. The tracker only replays events
//!   after our resume point, and the resume point passes an event when it is recorded, so a
//!   processed event can come again only as a late duplicate of its frame (a reconnect racing a
//!   replay): seconds, not days. `retention.events_ms` is the window for that.
//! - **Message claims** stop a message from being answered twice when it is found again. Two paths
//!   can find it: its event (first delivery or a repeat), and reconciliation. A claim may go only
//!   when *both* are closed:
//!   - the event: the caller gives a message cutoff only while the agent is caught up (connected,
//!     resumed, reconciled). A message that existed when its claim was written has its event in
//!     the tracker's log already, logged in the same transaction as the message. If the link was
//!     made after that, the event was replayed before the agent caught up; if before, it came
//!     live on this same link, in order, and the router records events as they come — it lags
//!     the stream by moments, never by `claims_ms`. Either way it is recorded and the resume
//!     point is past it, so the tracker will not send it again. What is left is a late duplicate
//!     frame, which `claims_ms >= events_ms` covers: the processed event stops it first;
//!   - reconciliation: it lists only mentions younger than `startup.answer_mentions_since`, and a
//!     claim is written after its message, so a claim older than that window is of a message
//!     reconciliation no longer lists. The caller's cutoff is the older of `claims_ms` and that
//!     window. (Reconciliation also skips a mention the board shows answered: a second guard.)
//!
//!   `picogent run --from-start` replays the whole log on purpose and is not covered.
//! - **Notice claims** stop a notice from being posted twice. A run's notice is asked for only
//!   when the run ends in this process; a run still `running` may be resumed and end again, so
//!   its claim stays. The spend and limit notices are keyed by the UTC day (their keys start
//!   with it) and asked for only within that day; a claim stays until its day is two days gone
//!   (clocks and time zones never reach back further).
//! - **Firing claims** stop a scheduled firing from being fired twice (by two replicas, or again
//!   after a restart). The scheduler considers only firings after its job's watermark
//!   (`schedule.through.{job}`, a named value: it only moves forward and is never pruned), so a
//!   firing at or before the watermark is never asked about again. A firing claim goes past
//!   `claims_ms` once the watermark has reached its firing; a claim the watermark has not reached
//!   (the scheduler claimed it, then stopped before it moved the watermark on) stays, however old,
//!   since the next look at the job asks for it. A job with no watermark keeps its claims.
//! - **Runs**: a running run is never touched (it is resumed at the next start). Reconciliation
//!   asks whether a task has a *finished* run, and an assignment event whether a run started
//!   after it; both read the newest runs of a session. So the newest run of each session, and its
//!   newest `completed`/`failed`/`did_nothing`/`stopped` run, always stay, as small rows: past
//!   `runs_ms` their transcript (`record`) is dropped. Every other finished run goes `runs_ms` after it ended.
//! - **Scheduled firings** are the record of what became of each firing, shown to people and read
//!   by later firings of the job, never what makes a firing happen once (its claim is). They go
//!   `runs_ms` after they were last written, as runs do, except the newest firing of each job
//!   (what the next firing is decided by, and what shows the job's state) and a firing whose run
//!   is queued or running (the run's end writes its outcome).
//! - **Sessions** are conversations; one not updated for `sessions_ms` goes, unless a run of it
//!   is still running. The next message in that thread simply starts a fresh conversation.
//! - **Replies** feed the per-thread reply cap, which looks back one hour; a day is kept.
//! - **Daily spend** feeds today's budget; a bit over a year of days is kept for the record.
//! - **Named values** are never pruned: a handful of rows, each one a position (the stream's head,
//!   the schedules' watermarks) or an identity that must outlive everything else.
//!
//! In SQLite none of these tables is indexed by time: pruning scans them once per `interval_ms`,
//! which costs milliseconds at the sizes the retention keeps them to. In PostgreSQL, where one
//! database may hold many agents, processed events and replies are indexed by agent and time.

use time::{Date, OffsetDateTime};

use crate::firings::SCHEDULE_THROUGH;
use crate::{State, StateError, to_ms};

/// How long the reply log is kept: the reply cap looks back an hour.
pub(super) const REPLY_LOG_KEPT: time::Duration = time::Duration::DAY;
/// How many days of spend are kept.
const SPEND_DAYS_KEPT: i64 = 400;
/// How many days back a spend notice's claim is still asked about (today, with margin).
const SPEND_NOTICE_DAYS_KEPT: i64 = 2;

/// What one pruning pass may remove: rows older than each cutoff.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PrunePlan {
    pub now: OffsetDateTime,
    pub events_before: OffsetDateTime,
    /// Notice claims.
    pub claims_before: OffsetDateTime,
    /// Message claims older than this, if any may go this time; see the module docs for when the
    /// caller may give one and how old it must be.
    pub message_claims_before: Option<OffsetDateTime>,
    /// Runs, and scheduled firings: both are the record of work done, kept as long.
    pub runs_before: OffsetDateTime,
    pub sessions_before: OffsetDateTime,
}

/// What one pruning pass removed, by table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    pub events: u64,
    pub claims: u64,
    pub runs: u64,
    /// Transcripts dropped from runs that stay (the newest of their session).
    pub run_records: u64,
    /// Scheduled firings (their claims count as claims).
    pub firings: u64,
    pub sessions: u64,
    pub replies: u64,
    pub spend_days: u64,
}

impl Pruned {
    /// Every count with the name `/metrics` and the log give it.
    pub fn by_table(&self) -> [(&'static str, u64); 8] {
        [
            ("processed_events", self.events),
            ("claims", self.claims),
            ("runs", self.runs),
            ("run_records", self.run_records),
            ("schedule_firings", self.firings),
            ("sessions", self.sessions),
            ("replies", self.replies),
            ("daily_spend", self.spend_days),
        ]
    }

    pub fn total(&self) -> u64 {
        self.by_table().iter().map(|(_, n)| n).sum()
    }
}

impl State {
    /// One pruning pass over every table, in the order of the plan's fields. Each step is its own
    /// statement or transaction, so a pass cut short leaves a consistent database.
    pub async fn prune(&self, plan: &PrunePlan) -> Result<Pruned, StateError> {
        let mut pruned = Pruned { events: self.prune_events(plan.events_before).await?, ..Pruned::default() };
        pruned.claims = self.prune_notice_claims(plan.claims_before, plan.now.date()).await?;
        if let Some(before) = plan.message_claims_before {
            pruned.claims += self.prune_message_claims(before).await?;
        }
        pruned.claims += self.prune_firing_claims(plan.claims_before).await?;
        (pruned.runs, pruned.run_records) = self.prune_runs(plan.runs_before).await?;
        pruned.firings = self.prune_firings(plan.runs_before).await?;
        pruned.sessions = self.prune_sessions(plan.sessions_before).await?;
        pruned.replies = self.prune_replies(plan.now - REPLY_LOG_KEPT).await?;
        pruned.spend_days = self.prune_spend(plan.now.date() - time::Duration::days(SPEND_DAYS_KEPT)).await?;
        Ok(pruned)
    }

    /// Deletes the claims of run notices, spend notices and limit notices made before `before`
    /// that nothing can ask about again: not of a run still running, not of a day after `today`
    /// minus two.
    pub async fn prune_notice_claims(&self, before: OffsetDateTime, today: Date) -> Result<u64, StateError> {
        let oldest_day_asked = (today - time::Duration::days(SPEND_NOTICE_DAYS_KEPT)).to_string();
        on_store!(self, prune_notice_claims(to_ms(before), &oldest_day_asked))
    }

    /// Deletes the message claims made before `before`. Only for a caller that knows neither the
    /// event stream nor reconciliation can bring those messages again (see the module docs).
    pub async fn prune_message_claims(&self, before: OffsetDateTime) -> Result<u64, StateError> {
        on_store!(self, prune_message_claims(to_ms(before)))
    }

    /// Deletes the claims of scheduled firings made before `before` whose firing is at or before
    /// its job's watermark, which the scheduler never looks behind (see the module docs).
    pub async fn prune_firing_claims(&self, before: OffsetDateTime) -> Result<u64, StateError> {
        on_store!(self, prune_firing_claims(to_ms(before), SCHEDULE_THROUGH))
    }

    /// Deletes runs that ended before `before`, except the newest run of each session and its
    /// newest `completed`/`failed`/`did_nothing`/`stopped` one, whose transcripts it drops
    /// instead. Returns (runs deleted, transcripts dropped). Running runs are never touched.
    pub async fn prune_runs(&self, before: OffsetDateTime) -> Result<(u64, u64), StateError> {
        on_store!(self, prune_runs(to_ms(before)))
    }

    /// Deletes the scheduled firings last written before `before`, except the newest firing of
    /// each job and those whose run is queued or running.
    pub async fn prune_firings(&self, before: OffsetDateTime) -> Result<u64, StateError> {
        on_store!(self, prune_firings(to_ms(before)))
    }

    /// Deletes conversations last saved before `before`, except those of a run still running.
    pub async fn prune_sessions(&self, before: OffsetDateTime) -> Result<u64, StateError> {
        on_store!(self, prune_sessions(to_ms(before)))
    }

    /// Deletes the reply log's rows from before `before`. The reply cap reads the last hour; a
    /// `before` less than an hour ago is moved back to an hour ago.
    pub async fn prune_replies(&self, before: OffsetDateTime) -> Result<u64, StateError> {
        let before = before.min(OffsetDateTime::now_utc() - time::Duration::HOUR);
        on_store!(self, prune_replies(to_ms(before)))
    }

    /// Deletes the spend of the UTC days before `before`.
    pub async fn prune_spend(&self, before: Date) -> Result<u64, StateError> {
        on_store!(self, prune_spend(&before.to_string()))
    }
}
