//! The tasks extension (`io.modelcontextprotocol/tasks`, protocol 2026-07-28): a client that
//! declares it gets `start_run` answered at once with a task, follows it with `tasks/get` and
//! stops it with `tasks/cancel`.
//!
//! Invariants:
//! - the task id is the run's id: the task is the run, not a copy of it, so `run://{id}`,
//!   `run://{id}/logs`, `run://{id}/result`, the inspector and the board all show the same run,
//!   and a stop from the board or from `stop_run` shows here as `cancelled`;
//! - only a client on 2026-07-28 that declared the extension gets a task; on 2025-11-25 (or
//!   without the extension) `start_run` answers as before, with the run id;
//! - a run that ended in any way but a stop is `completed`, and its result is `report_run`'s,
//!   with `isError: true` when the run did not succeed (the extension's rule: `failed` is for a
//!   protocol error, and a refused or failed run is a tool result);
//! - the task never asks the client for input: a run that waits for a person waits for them on
//!   the board, and says so in the task's status message.

use rmcp::model::{
    CallToolResult, CancelTaskParams, ContentBlock, CreateTaskResult, DetailedTask, GetTaskParams, GetTaskResult,
    JsonObject, ProtocolVersion, Task, TaskPayload, TaskStatus, UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use picogent_state::{RunStatus, RunSummary};

use super::{AgentControl, AgentControlError, McpServer, RunResult};

/// How often a client is asked to poll `tasks/get`.
const POLL_INTERVAL_MS: u64 = 1_000;

/// Whether this request gets a task for a long call: the client is on 2026-07-28 or later and
/// declared the tasks extension.
pub(super) fn wants_task(context: &RequestContext<RoleServer>) -> bool {
    context.client_capabilities().is_some_and(|capabilities| capabilities.supports_tasks())
        && context.protocol_version().is_some_and(|version| version >= ProtocolVersion::V_2026_07_28)
}

/// The task a started run is followed by: its id is the run's.
pub(super) fn started(run_id: &str) -> CreateTaskResult {
    let now = rfc3339(OffsetDateTime::now_utc());
    CreateTaskResult::new(
        Task::new(run_id, TaskStatus::Working, now.clone(), now)
            .with_status_message(format!("run {run_id} started; run://{run_id}/logs shows its coding agent's output"))
            .with_poll_interval_ms(POLL_INTERVAL_MS),
    )
}

impl McpServer {
    fn agent(&self) -> Result<&dyn AgentControl, ErrorData> {
        self.inner
            .agent
            .as_deref()
            .ok_or_else(|| ErrorData::invalid_request("this server runs no agent, so it has no tasks", None))
    }

    /// `tasks/get`: the run's state now, with `report_run`'s result once it has ended.
    pub(super) async fn task_state(&self, params: GetTaskParams) -> Result<GetTaskResult, ErrorData> {
        let agent = self.agent()?;
        let run = agent.get_run(&params.task_id).await.map_err(|error| unknown_task(&params.task_id, error))?;
        let payload = match run.status {
            RunStatus::Queued | RunStatus::Running => TaskPayload::Working,
            RunStatus::Stopped => TaskPayload::Cancelled,
            _ => {
                let result = agent.run_result(&run.id).await.map_err(|error| unknown_task(&run.id, error))?;
                TaskPayload::Completed { result: ended(&run, &result) }
            }
        };
        let updated = run.finished_at.unwrap_or_else(OffsetDateTime::now_utc);
        let mut task = Task::new(run.id.clone(), payload.status(), rfc3339(run.started_at), rfc3339(updated))
            .with_status_message(status_message(&run));
        if !payload.status().is_terminal() {
            task = task.with_poll_interval_ms(POLL_INTERVAL_MS);
        }
        Ok(GetTaskResult::new(DetailedTask::new(task, payload)))
    }

    /// `tasks/cancel`: stops the run as `stop_run` does; it ends at its next step, and the next
    /// `tasks/get` says `cancelled` once it has.
    pub(super) async fn cancel(&self, params: CancelTaskParams) -> Result<(), ErrorData> {
        let agent = self.agent()?;
        agent.stop_run(&params.task_id).await.map(|_| ()).map_err(|error| unknown_task(&params.task_id, error))
    }

    /// `tasks/update`: nothing to answer, since a run asks its questions on the board.
    pub(super) fn update(&self, params: UpdateTaskParams) -> Result<(), ErrorData> {
        Err(ErrorData::invalid_params(
            format!(
                "task {} asks the client for no input: a run that needs a person asks on the task's thread",
                params.task_id
            ),
            None,
        ))
    }
}

/// What the task says while it works and once it has ended, in a sentence.
fn status_message(run: &RunSummary) -> String {
    let progress = format!("{} turn(s), {} tool call(s)", run.turns, run.tool_calls);
    match (&run.status, &run.waiting) {
        (RunStatus::Queued, _) => "queued for a free slot".to_string(),
        (RunStatus::Running, Some(_)) => format!("waiting for a person to answer on the board; {progress}"),
        (RunStatus::Running, None) => format!("running: {progress}"),
        (status, _) => match run.outcome.as_deref().or(run.error.as_deref()) {
            Some(said) => format!("{}: {said}", status.as_str()),
            None => status.as_str().to_string(),
        },
    }
}

/// The result of an ended run, as `report_run` answers it: the final message as text, the run
/// and its result as structured content, and `isError` unless it completed.
fn ended(run: &RunSummary, result: &RunResult) -> JsonObject {
    let text = result
        .final_message
        .clone()
        .or_else(|| result.error.clone())
        .unwrap_or_else(|| format!("run {} ended {}", run.id, run.status.as_str()));
    let mut call = if run.status == RunStatus::Completed {
        CallToolResult::success(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::error(vec![ContentBlock::text(text)])
    };
    call.structured_content = Some(super::tools::run_report(run, result));
    match serde_json::to_value(call) {
        Ok(Value::Object(object)) => object,
        _ => JsonObject::new(),
    }
}

fn unknown_task(task_id: &str, error: AgentControlError) -> ErrorData {
    match error {
        AgentControlError::NotFound { .. } => {
            ErrorData::invalid_params(format!("no task {task_id}: tasks are the runs start_run started"), None)
        }
        other => ErrorData::internal_error(other.to_string(), None),
    }
}

fn rfc3339(at: OffsetDateTime) -> String {
    at.format(&Rfc3339).unwrap_or_default()
}
