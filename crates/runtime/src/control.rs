//! The running agent as MCP sees it: [`AgentControl`] over the router's input channel, the
//! state database and the live status. Served at `/mcp` on the agent's HTTP listener.

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::{broadcast, mpsc, oneshot};

use crate::record::{StoredRun, timeline_lines};
use crate::request::{RunKind, RunRequest, Trigger};
use crate::router::Input;
use crate::status::StatusBoard;
use picogent_mcp::server::{AgentControl, AgentControlError, AgentStatus, RunResult, RunSummary, StartRun};
use picogent_state::State;
use picogent_tools::ToolSource;
use picogent_tracker::TrackerClient;
use picogent_tracker::session::SessionKey;

pub struct RuntimeControl {
    pub state: State,
    pub status: Arc<StatusBoard>,
    pub inputs: mpsc::Sender<Input>,
    pub client: TrackerClient,
    pub tools: Arc<dyn ToolSource>,
    pub max_tokens_per_day: u64,
    /// The agent's slug: `start_run` works only tasks assigned to it…
    pub slug: String,
    /// …unless `mcp.allow_unassigned_runs` says otherwise.
    pub allow_unassigned_runs: bool,
    /// The coding agents' output of runs going on now (`workspaces`); a run that ended keeps it in
    /// its stored record.
    pub coding: Option<Arc<picogent_workspace::CodingRuns>>,
}

impl RuntimeControl {
    async fn run(&self, run_id: &str) -> Result<picogent_state::RunRow, AgentControlError> {
        match self.state.get_run(run_id).await {
            Ok(Some(run)) => Ok(run),
            Ok(None) => Err(AgentControlError::NotFound { run_id: run_id.to_string() }),
            Err(error) => Err(AgentControlError::Refused { message: format!("the state database failed: {error}") }),
        }
    }
}

impl AgentControl for RuntimeControl {
    fn status(&self) -> BoxFuture<'_, AgentStatus> {
        Box::pin(async move {
            let used = self.state.tokens_today().await.unwrap_or(0);
            AgentStatus {
                connected: self.status.connected(),
                caught_up: self.status.caught_up(),
                active_runs: self.status.active_runs(),
                tokens_today: used,
                max_tokens_per_day: self.max_tokens_per_day,
                tools: self.tools.tools().iter().map(|t| t.name.to_string()).collect(),
            }
        })
    }

    fn list_runs(&self) -> BoxFuture<'_, Vec<RunSummary>> {
        Box::pin(async move {
            self.state.list_runs(100).await.unwrap_or_default().iter().map(|run| run.summary()).collect()
        })
    }

    fn get_run<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<RunSummary, AgentControlError>> {
        Box::pin(async move { Ok(self.run(run_id).await?.summary()) })
    }

    fn run_log<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<String, AgentControlError>> {
        Box::pin(async move {
            let run = self.run(run_id).await?;
            let mut text = format!("run {} ({})\ntrigger: {}\n", run.id, run.status.as_str(), run.trigger);
            if let Some(stored) = StoredRun::of(&run) {
                text.push_str(&format!("request:\n{}\n\n", stored.prompt));
            }
            for line in timeline_lines(&run) {
                text.push_str(&line);
                text.push('\n');
            }
            Ok(text)
        })
    }

    fn coding_output<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<String, AgentControlError>> {
        Box::pin(async move {
            let run = self.run(run_id).await?;
            if let Some(live) = self.coding.as_ref().and_then(|coding| coding.log(run_id)) {
                return Ok(live);
            }
            Ok(StoredRun::of(&run).and_then(|stored| stored.coding).map(|coding| coding.log).unwrap_or_default())
        })
    }

    fn run_result<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<RunResult, AgentControlError>> {
        Box::pin(async move {
            let run = self.run(run_id).await?;
            let stored = StoredRun::of(&run);
            let work = match self.coding.as_ref().and_then(|coding| coding.work(run_id)) {
                Some(live) => Some(live),
                None => stored.as_ref().and_then(|stored| stored.coding.clone()).and_then(|coding| coding.work),
            };
            let record = stored.and_then(|s| s.record);
            Ok(RunResult {
                id: run.id,
                status: run.status,
                finished: run.finished_at.is_some(),
                outcome: record.as_ref().map(|r| r.outcome),
                final_message: record.map(|r| r.final_message).or(run.outcome),
                error: run.error,
                work,
            })
        })
    }

    fn start_run(&self, request: StartRun) -> BoxFuture<'_, Result<String, AgentControlError>> {
        Box::pin(async move {
            let (session, kind, trigger) = match request {
                StartRun::Task { task_key } => {
                    let task = self
                        .client
                        .get_task(&task_key)
                        .await
                        .map_err(|e| AgentControlError::Invalid { message: format!("task {task_key}: {e}") })?;
                    if task.assignee_slug.as_deref() != Some(self.slug.as_str()) && !self.allow_unassigned_runs {
                        return Err(AgentControlError::Refused {
                            message: format!(
                                "task {} is not assigned to @{}: assign it to the agent first (or set \
                                 mcp.allow_unassigned_runs to let start_run work any task)",
                                task.key, self.slug
                            ),
                        });
                    }
                    let trigger = Trigger::StartRun { task_key: task.key.clone() };
                    let assigned_by = task.created_by.clone();
                    (SessionKey::Task(task.id.clone()), RunKind::Task { task: Box::new(task), assigned_by }, trigger)
                }
                StartRun::Prompt { prompt } => {
                    (SessionKey::new_prompt(), RunKind::Prompt { text: prompt }, Trigger::StartPrompt)
                }
            };
            let request = RunRequest::new(session, trigger, kind);
            let (reply, answer) = oneshot::channel();
            self.inputs
                .send(Input::StartRun { request: Box::new(request), reply })
                .await
                .map_err(|_| AgentControlError::Refused { message: "the agent is shutting down".into() })?;
            match answer.await {
                Ok(Ok(run_id)) => Ok(run_id),
                Ok(Err(refused)) => Err(AgentControlError::Refused { message: refused.to_string() }),
                Err(_) => Err(AgentControlError::Refused { message: "the agent is shutting down".into() }),
            }
        })
    }

    fn stop_run<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<bool, AgentControlError>> {
        Box::pin(async move {
            self.run(run_id).await?;
            let (reply, answer) = oneshot::channel();
            self.inputs
                .send(Input::StopRun { run_id: run_id.to_string(), reply })
                .await
                .map_err(|_| AgentControlError::Refused { message: "the agent is shutting down".into() })?;
            Ok(answer.await.unwrap_or(false))
        })
    }

    fn subscribe(&self) -> broadcast::Receiver<()> {
        self.status.subscribe()
    }
}
