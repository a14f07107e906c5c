//! What the inspector reads of the running agent beside the state, as traits the runtime
//! implements (its status board, its metrics, its scheduler), and the plain data they hand
//! over: the inspector never depends on the runtime.

use futures::future::BoxFuture;
use picogent_schedule::{Fired, Job, RunNowError};
use picogent_tracker::session::SessionKey;

use crate::startup::StartupReport;

/// The running agent's live status, as the pages show it (the runtime's `StatusBoard`).
pub trait AgentStatus: Send + Sync + 'static {
    /// Whether the event stream is connected.
    fn connected(&self) -> bool;
    /// Connected, resumed, and reconciled through REST (and not superseded).
    fn caught_up(&self) -> bool;
    /// Why this copy stopped acting, once another copy of the agent took over.
    fn superseded(&self) -> Option<&str>;
    /// Runs in flight now.
    fn active_runs(&self) -> usize;
    /// Runs waiting for a person now.
    fn awaiting_input(&self) -> usize;
    /// Runs waiting for a free slot, in order.
    fn waiting(&self) -> Vec<WaitingRun>;
    /// How the agent started, once the event stream began.
    fn startup(&self) -> Option<StartupReport>;
    /// Fires when a run starts or ends: a live page renders again.
    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<()>;
}

/// The newest events and what the router made of them (the runtime's `Metrics`).
pub trait EventLog: Send + Sync + 'static {
    /// Newest first, at most [`RECENT_EVENTS`].
    fn recent_events(&self) -> Vec<RecentEvent>;
}

/// The schedules, for their page and its "run now" (the runtime's `Schedules`).
pub trait ScheduleControl: Send + Sync + 'static {
    /// The configured jobs.
    fn jobs(&self) -> &[Job];
    /// Now, by the clock the scheduler fires by.
    fn now_ms(&self) -> i64;
    /// Fires the job `name` now, as a person asked.
    fn run_now<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Fired, RunNowError>>;
}

/// A run waiting for a slot, as the run inspector lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WaitingRun {
    pub session: SessionKey,
    pub trigger: String,
}

/// One event as the router judged it: its name, what became of it (`run`, `duplicate`,
/// `own_message`, …) and when.
#[derive(Debug, Clone, PartialEq)]
pub struct RecentEvent {
    pub at: time::OffsetDateTime,
    pub name: String,
    pub fate: String,
}

/// How many recent events the events page shows, and so the agent keeps.
pub const RECENT_EVENTS: usize = 200;
