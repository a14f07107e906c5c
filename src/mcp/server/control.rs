//! The extension point for the running agent: what `picogent run` lets MCP clients see and do,
//! as a trait the runtime implements.

use futures::future::BoxFuture;
use serde_json::Value;
use tokio::sync::broadcast;

/// What `picogent run` lets MCP clients see and do. The server serves these as the resources
/// `agent://status`, `run://list`, `run://{id}`, `run://{id}/log`, `run://{id}/result` and the tools
/// `start_run`, `stop_run`, `report_run`, and sends `notifications/resources/list_changed` each
/// time [`AgentControl::subscribe`] fires.
///
/// Records are JSON values so the runtime keeps its own types; each run in
/// [`AgentControl::list_runs`] must carry a string `"id"`.
pub trait AgentControl: Send + Sync {
    /// The agent's state: connected or not, runs in flight, budgets.
    fn status(&self) -> BoxFuture<'_, Value>;
    /// Recent runs, newest first; each an object with at least `"id"`.
    fn list_runs(&self) -> BoxFuture<'_, Vec<Value>>;
    /// One run's record. `NotFound` for an unknown id.
    fn get_run<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<Value, AgentControlError>>;
    /// One run's log as text (what the model was asked, which tools it called and what came back).
    fn run_log<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<String, AgentControlError>>;
    /// One run's result: its outcome and final answer (or that it is still running).
    fn run_result<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<Value, AgentControlError>>;
    /// Starts a run; answers the new run's id.
    fn start_run(&self, request: StartRun) -> BoxFuture<'_, Result<String, AgentControlError>>;
    /// Asks a run to stop; `true` if it was running and is now stopping, `false` if it had ended.
    fn stop_run<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<bool, AgentControlError>>;
    /// Fires each time a run starts or ends.
    fn subscribe(&self) -> broadcast::Receiver<()>;
}

/// What a run started over MCP works on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartRun {
    /// Work a task, as if it had just been assigned to the agent.
    Task { task_key: String },
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
