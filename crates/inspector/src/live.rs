//! What the inspector reads of the running agent beside the state, as traits the runtime
//! implements (its status board, its metrics, its scheduler, its view of a task tree), and the
//! plain data they hand over: the inspector never depends on the runtime.

use futures::future::BoxFuture;
use picogent_schedule::{Fired, Job, RunNowError};
use picogent_tracker::TrackerError;
use picogent_tracker::model::TaskStatus;
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

/// A task tree as the board and this agent's runs show it now (the runtime's `TreeView`, over
/// its tracker client and state), for the tree's page.
pub trait TreeSource: Send + Sync + 'static {
    /// The tree under the task `key` (a task key's shape, checked by the caller): the task, its
    /// sub-tasks (`parent:KEY`) and what this agent's runs of them spent.
    fn tree<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<TaskTree, TreeError>>;
}

/// A task tree: a parent and its sub-tasks, oldest first as the board lists them.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskTree {
    pub parent: TreeTask,
    /// The key of the task the parent is part of itself (its own `parent:` label), if any.
    pub part_of: Option<String>,
    pub sub_tasks: Vec<SubTask>,
    /// What this agent's runs of the parent and of every sub-task spent together, the tree's
    /// budget's count (`limits.max_tokens_per_tree`).
    pub spent: picogent_state::Spend,
}

/// A task of a tree, as the board shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TreeTask {
    pub key: String,
    /// The board's id, for its link.
    pub id: String,
    pub title: String,
    pub status: TaskStatus,
    pub assignee: Option<String>,
}

/// A sub-task, with what this agent's runs did on it.
#[derive(Debug, Clone, PartialEq)]
pub struct SubTask {
    pub task: TreeTask,
    /// The keys it waits for (`blocked_by:KEY`).
    pub blockers: Vec<String>,
    /// Its `review-round:N` label, if a review has begun.
    pub review_round: Option<u32>,
    /// The branch of its latest run that left one (a coding run's work).
    pub branch: Option<String>,
    /// What this agent's runs of it spent.
    pub spent: picogent_state::Spend,
    /// Its latest run here, for a link to the run's page.
    pub latest_run: Option<String>,
}

/// Why a tree cannot be shown: the page answers 404 for the first, and says the rest failed.
#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    #[error("no task {key} on the board")]
    NotFound { key: String },
    #[error("the board could not be read: {0}")]
    Board(#[from] TrackerError),
    #[error("the state database could not be read: {0}")]
    State(#[from] picogent_state::StateError),
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
