//! Scheduled jobs: what `agent.json`'s `schedules` asks for, and when. A job is a cron pattern
//! in a time zone and one of three kinds: `standup` posts a digest to a project's chat, `stale`
//! nudges tasks assigned to people and untouched for some days, `prompt` runs a prompt file as a
//! model run in a named session. This crate decides *when*; the runtime does the work.
//!
//! - [`config`]: the `schedules` section ([`SchedulesConfig`], [`JobConfig`]), flat and refusing
//!   unknown fields;
//! - [`jobs`](mod@jobs): the section checked into typed [`Job`]s ([`jobs()`], [`check`] for the
//!   configuration's validation), each mistake a [`JobProblem`] naming its field;
//! - [`timing`]: [`Cadence`], a pattern in a zone, and the next firing after an instant
//!   (croner for the pattern, daylight saving as documented there); [`zone`]: the IANA zones
//!   (jiff's bundled database) as chrono's `TimeZone`;
//! - [`plan`](mod@plan): what to do about the firings due since the watermark ([`plan()`]): the
//!   newest recent one runs, the others are skipped with a reason a person reads;
//! - [`clock`]: [`Clock`], the time passed in; [`SystemClock`], and `ShiftedClock` for tests
//!   (feature `test-support`);
//! - [`board`]: what each kind reads from the board before it decides whether a firing has
//!   anything to say (a standup's [`firing::Digest`], the tasks a stale check nudges);
//! - [`fired`]: what became of a firing asked for now ([`Fired`], [`RunNowError`]);
//! - [`firing`]: a firing as its run is queued ([`firing::Firing`]), with what it read, so a
//!   resumed run does the same work.
//!
//! Invariants:
//! - a mistake in the section is found at start, by [`jobs()`]: an unknown field, a field of
//!   another kind, a bad pattern, an unknown zone (the IANA database is compiled in, so this
//!   holds on any machine), a prompt file that cannot be read;
//! - a firing runs at most once: the plan's watermark only moves forward, and at most one
//!   firing runs per plan;
//! - time is read only through a [`Clock`]; [`plan()`] and [`Cadence`] take the time as an
//!   argument and are pure;
//! - the work of one plan is bounded, whatever the downtime ([`plan::MAX_SEARCHES`]).
//!
//! Where things are: the runtime's `scheduler.rs` fires the jobs (`Scheduler`, `Schedules`) and its
//! `nudge.rs` runs a stale firing; the durable record is the state's `firings.rs`
//! (`ClaimKind::Firing`, the firing log, the watermarks `schedule_through` and `schedule_seen`);
//! the page and `picogent schedules list|run` are the inspector's `schedules.rs`;
//! docs/schedules.md.

pub mod board;
pub mod clock;
pub mod config;
pub mod fired;
pub mod firing;
pub mod jobs;
pub mod plan;
pub mod timing;
pub mod zone;

#[cfg(any(test, feature = "test-support"))]
pub use clock::ShiftedClock;
pub use clock::{Clock, SystemClock};
pub use config::{JobConfig, JobKindName, SchedulesConfig};
pub use fired::{Fired, RunNowError};
pub use jobs::{Job, JobBudget, JobKind, JobProblem, check, jobs};
pub use plan::{Plan, SkipReason, SkippedFiring, plan};
pub use timing::{Cadence, CadenceError};

#[cfg(test)]
mod tests;
