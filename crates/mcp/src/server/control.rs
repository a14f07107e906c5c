//! The extension point for the running agent: what `picogent run` lets MCP clients see and do,
//! as a trait the runtime implements and typed records the server serialises.
//!
//! Invariant: these records are the JSON of `agent://status`, `run://list`, `run://{id}`,
//! `run://{id}/result` and `report_run` — a field renamed here is renamed for every client.

use futures::future::BoxFuture;
use serde::Serialize;
use tokio::sync::broadcast;

use picogent_agent::RunOutcome;
use picogent_state::{RunStatus, RunSummary};

/// What `picogent run` lets MCP clients see and do. The server serves these as the resources
/// `agent://status`, `run://list`, `run://{id}`, `run://{id}/log`, `run://{id}/result` and the tools
/// `start_run`, `stop_run`, `report_run`, and sends `notifications/resources/list_changed` each
/// time [`AgentControl::subscribe`] fires.
pub trait AgentControl: Send + Sync {
    /// The agent's state: connected or not, runs in flight, budgets.
    fn status(&self) -> BoxFuture<'_, AgentStatus>;
    /// Recent runs, newest first.
    fn list_runs(&self) -> BoxFuture<'_, Vec<RunSummary>>;
    /// One run's record. `NotFound` for an unknown id.
    fn get_run<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<RunSummary, AgentControlError>>;
    /// One run's log as text (what the model was asked, which tools it called and what came back).
    fn run_log<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<String, AgentControlError>>;
    /// What the run's coding agent printed (`workspaces`), live while it runs; empty when it had
    /// none.
    fn coding_output<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<String, AgentControlError>>;
    /// One run's result: its outcome and final answer (or that it is still running).
    fn run_result<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<RunResult, AgentControlError>>;
    /// Starts a run; answers the new run's id.
    fn start_run(&self, request: StartRun) -> BoxFuture<'_, Result<String, AgentControlError>>;
    /// Asks a run to stop; `true` if it was running and is now stopping, `false` if it had ended.
    fn stop_run<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<bool, AgentControlError>>;
    /// Fires each time a run starts or ends.
    fn subscribe(&self) -> broadcast::Receiver<()>;
}

/// The running agent, as `agent://status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AgentStatus {
    /// Whether the WebSocket to the tracker is open.
    pub connected: bool,
    /// Whether what was missed while away has been replayed and reconciled.
    pub caught_up: bool,
    pub active_runs: usize,
    /// Tokens spent today, against `max_tokens_per_day`.
    pub tokens_today: u64,
    pub max_tokens_per_day: u64,
    /// The names of the tools the agent's runs may be offered.
    pub tools: Vec<String>,
}

/// How one run ended, as `run://{id}/result` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunResult {
    pub id: String,
    pub status: RunStatus,
    /// Whether the run has ended; a run can end without a stored [`RunResult::outcome`].
    pub finished: bool,
    /// How the model loop ended; `None` while the run is going or when it stored no record.
    pub outcome: Option<RunOutcome>,
    /// The model's final answer, or the run's outcome sentence when there is none.
    pub final_message: Option<String>,
    pub error: Option<String>,
    /// Its coding work: the branch, the commit and the diff stat; `None` when it did none.
    pub work: Option<picogent_workspace::WorkDone>,
}

/// What a run started over MCP works on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartRun {
    /// Work a task, as if it had just been assigned to the agent.
    /// A coding agent and branch (`picogent/…`) for its coding work, instead of the defaults.
    Task { task_key: String, coding_agent: Option<String>, branch: Option<String> },
    /// Create a task in `project`, assigned to the agent, and work it as [`StartRun::Task`] does:
    /// seed 000's `create_task`.
    NewTask {
        project: String,
        title: String,
        description: Option<String>,
        coding_agent: Option<String>,
        branch: Option<String>,
    },
    /// Follow a free-form instruction.
    Prompt { prompt: String },
}

/// Why the runtime refused a request, shaped by what the MCP client is told.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentControlError {
    /// No run has this id.
    #[error("no run with id {run_id}")]
    NotFound { run_id: String },
    /// The request was understood but cannot be served now (a limit, shutting down).
    #[error("refused: {message}")]
    Refused { message: String },
    /// The request names something that does not exist or is malformed (an unknown task).
    #[error("invalid request: {message}")]
    Invalid { message: String },
}
