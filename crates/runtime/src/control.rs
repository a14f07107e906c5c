//! The running agent as MCP sees it: [`AgentControl`] over the router's input channel, the
//! state database and the live status. Served at `/mcp` on the agent's HTTP listener.

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::{broadcast, mpsc, oneshot};

use crate::record::{StoredRun, coding_of, timeline_lines};
use crate::request::{RunKind, RunRequest, Trigger};
use crate::router::{CreateRefused, Input};
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
    /// The coding tools (`workspaces`): what `start_run` may choose, and the coding agents' output
    /// of runs going on now (a run that ended keeps it in its stored record).
    pub coding: Option<Arc<picogent_workspace::CodingTools>>,
}

impl RuntimeControl {
    /// The coding work of the runs going on now, when `workspaces` is configured.
    fn live_coding(&self) -> Option<Arc<picogent_workspace::CodingRuns>> {
        self.coding.as_ref().map(|coding| coding.runs())
    }

    async fn run(&self, run_id: &str) -> Result<picogent_state::RunRow, AgentControlError> {
        match self.state.get_run(run_id).await {
            Ok(Some(run)) => Ok(run),
            Ok(None) => Err(AgentControlError::NotFound { run_id: run_id.to_string() }),
            Err(error) => Err(AgentControlError::Refused { message: format!("the state database failed: {error}") }),
        }
    }
}

impl RuntimeControl {
    /// `start_run`'s coding agent and branch, checked: the task has a repository, the agent is
    /// configured, the branch is one git takes (under `picogent/`).
    fn coding_choice(
        &self,
        task: &picogent_tracker::model::TaskOut,
        agent: Option<String>,
        branch: Option<String>,
    ) -> Result<picogent_workspace::CodingChoice, AgentControlError> {
        self.choice_for(&task.key, &task.project_slug, &task.labels, agent, branch)
    }

    /// The same check for a task of `project` (named `what` when refused), made or to be made.
    fn choice_for(
        &self,
        what: &str,
        project: &str,
        labels: &[String],
        agent: Option<String>,
        branch: Option<String>,
    ) -> Result<picogent_workspace::CodingChoice, AgentControlError> {
        let invalid = |message: String| AgentControlError::Invalid { message };
        let Some(coding) = self.coding.as_deref() else {
            return Err(invalid(
                "`coding_agent` and `branch` need a `workspaces` section; this agent has none".to_string(),
            ));
        };
        if !coding.serves_project(project, labels) {
            return Err(invalid(format!(
                "{what} has no repository (no entry of `workspaces.repositories` serves project {project:?} or its \
                 labels), so `coding_agent` and `branch` do not apply"
            )));
        }
        coding.choice(agent, branch).map_err(|error| invalid(error.to_string()))
    }

    /// `start_run` with a project and a title: the choice is checked before anything is made,
    /// then the router creates the task and starts on it.
    async fn create_and_start(
        &self,
        project: String,
        title: String,
        description: Option<String>,
        coding_agent: Option<String>,
        branch: Option<String>,
    ) -> Result<String, AgentControlError> {
        let coding = if coding_agent.is_some() || branch.is_some() {
            Some(self.choice_for(&format!("a task of project {project:?}"), &project, &[], coding_agent, branch)?)
        } else {
            None
        };
        let task = picogent_tracker::model::CreateTask {
            project_slug: project,
            title,
            description,
            ..picogent_tracker::model::CreateTask::default()
        };
        let (reply, answer) = oneshot::channel();
        self.inputs
            .send(Input::CreateAndStart { task: Box::new(task), coding, reply })
            .await
            .map_err(|_| AgentControlError::Refused { message: "the agent is shutting down".into() })?;
        match answer.await {
            Ok(Ok(run_id)) => Ok(run_id),
            Ok(Err(CreateRefused::Tracker(error))) => {
                Err(AgentControlError::Invalid { message: format!("the task could not be created: {error}") })
            }
            Ok(Err(refused)) => Err(AgentControlError::Refused { message: refused.to_string() }),
            Err(_) => Err(AgentControlError::Refused { message: "the agent is shutting down".into() }),
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
                text.push_str(&format!("request:\n{}\n\n", stored.start.prompt));
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
            Ok(coding_of(self.live_coding().as_deref(), &run).map(|(coding, _)| coding.log).unwrap_or_default())
        })
    }

    fn run_result<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<RunResult, AgentControlError>> {
        Box::pin(async move {
            let run = self.run(run_id).await?;
            let work = coding_of(self.live_coding().as_deref(), &run).and_then(|(coding, _)| coding.work);
            let record = StoredRun::of(&run).and_then(|s| s.record);
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
            let mut choice = None;
            let (session, kind, trigger) = match request {
                StartRun::Task { task_key, coding_agent, branch } => {
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
                    if coding_agent.is_some() || branch.is_some() {
                        choice = Some(self.coding_choice(&task, coding_agent, branch)?);
                    }
                    let trigger = Trigger::StartRun { task_key: task.key.clone() };
                    let assigned_by = task.created_by.clone();
                    (SessionKey::Task(task.id.clone()), RunKind::Task { task: Box::new(task), assigned_by }, trigger)
                }
                StartRun::NewTask { project, title, description, coding_agent, branch } => {
                    return self.create_and_start(project, title, description, coding_agent, branch).await;
                }
                StartRun::Prompt { prompt } => {
                    (SessionKey::new_prompt(), RunKind::Prompt { text: prompt }, Trigger::StartPrompt)
                }
            };
            let request = RunRequest { coding: choice, ..RunRequest::new(session, trigger, kind) };
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
