//! The two tools a run of a task with a repository is offered: `run_coding_agent` (the coding
//! agent works in the task's workspace, and its work is committed and pushed) and the read-only
//! `workspace_status`. The model plans, delegates, checks the diff and reports; direct mode
//! (`workspaces.direct`) calls [`CodingTools::work`] with the task as the instructions.
//!
//! What each run's coding agent printed and how its work ended is kept in [`CodingRuns`], by run
//! id: the inspector and MCP's `run://{id}/logs` read the lines as they come, and the run's answer
//! on the task names the branch and the commit.
//!
//! Here: [`CodingTools`], the work of one delegation (hooks, the coding agent, its steps ticked,
//! commit and push); `runs.rs`: [`CodingRuns`]; `outcome.rs`: what a delegation did
//! ([`CodingOutcome`], [`WorkDone`]); `source.rs`: the two tools as the model sees and calls them.

mod outcome;
mod runs;
mod source;

use std::sync::Arc;

use picogent_tools::ToolContext;
use picogent_tracker::TrackerClient;
use picogent_tracker::model::{StepOut, TaskOut};
use picogent_tracker::session::SessionKey;
use tokio_util::sync::CancellationToken;

use crate::coding::{self, Invocation};
use crate::hooks::{HookPoint, HookReport};
use crate::names::TaskKey;
use crate::workspace::{Workspace, WorkspaceStatus, Workspaces};

pub use outcome::{CodingOutcome, WorkDone};
pub use runs::{CodingChoice, CodingRecord, CodingRuns};

pub const RUN_CODING_AGENT: &str = "run_coding_agent";
pub const WORKSPACE_STATUS: &str = "workspace_status";
/// The tools a run of a task with a repository is offered besides the tracker's.
pub const CODING_TOOLS: [&str; 2] = [RUN_CODING_AGENT, WORKSPACE_STATUS];

/// The model a coding agent is told to use when its entry names none: picogent's own.
#[derive(Debug, Clone)]
pub struct ModelDefaults {
    pub base_url: String,
    pub model: String,
}

/// The instructions, and the task's open steps when it has some.
fn with_steps(instructions: &str, open: &[StepOut]) -> String {
    if open.is_empty() {
        return instructions.to_string();
    }
    let mut text = format!(
        "{instructions}\n\nThe task's open steps (mark each done in your to-do list, by this title, as you finish it):"
    );
    for step in open {
        text.push_str(&format!("\n- {}", step.title));
    }
    text
}

fn same_title(step: &str, todo: &str) -> bool {
    let words = |text: &str| text.split_whitespace().map(str::to_lowercase).collect::<Vec<_>>();
    words(step) == words(todo)
}

/// Why coding work could not be done for a run.
#[derive(Debug, thiserror::Error)]
pub enum CodingError {
    #[error("this run is not a task's run: the coding tools work only on a task")]
    NotATask,
    #[error("cannot read the task: {0}")]
    Tracker(#[from] picogent_tracker::TrackerError),
    #[error("task {key} has no repository: none in workspaces.repositories serves project `{project}` or its labels")]
    NoRepository { key: String, project: String },
    #[error(transparent)]
    Key(#[from] crate::names::BadTaskKey),
    #[error("could not prepare the workspace: {0}")]
    Workspace(#[from] crate::WorkspaceError),
    #[error(transparent)]
    Agent(#[from] crate::config::AgentError),
    #[error("{0}; the coding agent was not started")]
    BeforeRun(String),
    #[error(transparent)]
    Branch(#[from] crate::names::BadRefName),
    #[error("{}", finish_failed(agent, source))]
    Finish { agent: String, source: crate::WorkspaceError },
}

/// The words of [`CodingError::Finish`].
fn finish_failed(agent: &str, source: &crate::WorkspaceError) -> String {
    match source {
        crate::WorkspaceError::PushRefused { .. } | crate::WorkspaceError::Tampered { .. } => {
            format!("the coding agent {agent} finished, but {source}")
        }
        _ => format!(
            "the coding agent {agent} finished, but its work could not be committed and pushed: {source}; it stays \
             in the workspace, on its branch, for the next run"
        ),
    }
}

impl CodingError {
    /// Whether the coding agent ran (and finished) before this went wrong.
    pub fn agent_finished(&self) -> bool {
        matches!(self, CodingError::Finish { .. })
    }

    /// The notice on the task, naming whose step failed: picogent's own (the workspace, the push)
    /// or the coding agent's.
    pub fn notice(&self) -> String {
        match self {
            CodingError::Workspace(source) => format!("I could not prepare the workspace: {source}."),
            CodingError::Finish { .. } => format!("I could not finish this: {self}."),
            _ => format!("I could not start on this: {self}."),
        }
    }
}

/// The coding tools, over every task's workspace.
/// The least time between two steps ticked from a coding agent's progress.
const STEP_PACE: std::time::Duration = std::time::Duration::from_secs(2);

pub struct CodingTools {
    workspaces: Arc<Workspaces>,
    client: TrackerClient,
    model: ModelDefaults,
    runs: Arc<CodingRuns>,
}

impl CodingTools {
    pub fn new(workspaces: Arc<Workspaces>, client: TrackerClient, model: ModelDefaults) -> CodingTools {
        CodingTools { workspaces, client, model, runs: Arc::new(CodingRuns::default()) }
    }

    pub fn runs(&self) -> Arc<CodingRuns> {
        self.runs.clone()
    }

    pub fn workspaces(&self) -> &Arc<Workspaces> {
        &self.workspaces
    }

    /// A run's choice checked against the configuration: the agent configured, the branch a
    /// name git takes, put under `picogent/` when it is not there (nothing else is ever pushed).
    pub fn choice(&self, agent: Option<String>, branch: Option<String>) -> Result<CodingChoice, CodingError> {
        if let Some(agent) = agent.as_deref() {
            self.workspaces.config().coding_agent(Some(agent))?;
        }
        let branch = match branch.as_deref().map(str::trim).filter(|branch| !branch.is_empty()) {
            Some(branch) => {
                // As given too: `-f` is refused, not quietly made `picogent/-f`.
                crate::names::check_ref_name(branch)?;
                let branch = match branch.starts_with(crate::names::BRANCH_PREFIX) {
                    true => branch.to_string(),
                    false => format!("{}{branch}", crate::names::BRANCH_PREFIX),
                };
                crate::names::check_ref_name(&branch)?;
                Some(branch)
            }
            None => None,
        };
        Ok(CodingChoice { agent, branch })
    }

    /// Whether `task` has a repository: its runs are offered the coding tools.
    pub fn serves(&self, task: &TaskOut) -> bool {
        self.serves_project(&task.project_slug, &task.labels)
    }

    /// Whether a task of `project` with `labels` has a repository (a task not yet created).
    pub fn serves_project(&self, project: &str, labels: &[String]) -> bool {
        self.workspaces.config().repository_for(project, labels).is_some()
    }

    /// The task's workspace, made if missing (with the hooks that ran), on `branch` when the run
    /// was started with one.
    pub async fn workspace(
        &self,
        task: &TaskOut,
        branch: Option<&str>,
    ) -> Result<(Workspace, Vec<HookReport>), CodingError> {
        let (repository, _) =
            self.workspaces.config().repository_for(&task.project_slug, &task.labels).ok_or_else(|| {
                CodingError::NoRepository { key: task.key.clone(), project: task.project_slug.clone() }
            })?;
        let key = TaskKey::new(&task.key)?;
        Ok(self.workspaces.open(repository, &key, branch).await?)
    }

    /// The coding agent `agent` (or the default) works on `instructions` in the task's workspace:
    /// `before_run`, the agent, `after_run`; then, if it finished, everything committed and
    /// pushed. One coding agent at a time per workspace; `cancel` stops it (its process group is
    /// killed).
    pub async fn work(
        &self,
        task: &TaskOut,
        instructions: &str,
        agent: Option<&str>,
        run_id: Option<&str>,
        cancel: &CancellationToken,
    ) -> Result<CodingOutcome, CodingError> {
        let mut hooks = Vec::new();
        let outcome = self.work_keeping_hooks(task, instructions, agent, run_id, cancel, &mut hooks).await;
        if let Some(run_id) = run_id {
            self.runs.add_hooks(run_id, hooks);
        }
        outcome
    }

    /// [`CodingTools::work`], the hooks that ran put in `ran` whatever the end.
    async fn work_keeping_hooks(
        &self,
        task: &TaskOut,
        instructions: &str,
        agent: Option<&str>,
        run_id: Option<&str>,
        cancel: &CancellationToken,
        ran: &mut Vec<HookReport>,
    ) -> Result<CodingOutcome, CodingError> {
        let config = self.workspaces.config();
        let choice = self.runs.choice(run_id);
        let agent = config.coding_agent(agent.or(choice.agent.as_deref()))?;
        let (workspace, made) = self.workspace(task, choice.branch.as_deref()).await?;
        ran.extend(made);
        let _held = self.workspaces.lock(&workspace).await;
        if let Some(report) = self.workspaces.hook(HookPoint::BeforeRun, &workspace).await {
            let failed = (!report.succeeded()).then(|| report.describe());
            ran.push(report);
            if let Some(why) = failed {
                return Err(CodingError::BeforeRun(why));
            }
        }
        // The task's open steps go with the instructions; those the CLI reports done are ticked.
        let open_steps: Vec<StepOut> = match self.client.list_steps(&task.id).await {
            Ok(steps) => steps.into_iter().filter(|step| !step.done).collect(),
            Err(error) => {
                tracing::warn!(task = %task.key, %error, "cannot read the task's steps; none will be ticked");
                Vec::new()
            }
        };
        let instructions = with_steps(instructions, &open_steps);
        let invocation = Invocation {
            agent: &agent,
            workspace: &workspace,
            instructions: &instructions,
            model: agent.model.as_deref().unwrap_or(&self.model.model),
            base_url: agent.base_url.as_deref().unwrap_or(&self.model.base_url),
        };
        let runs = self.runs.clone();
        let run_key = run_id.unwrap_or("").to_string();
        let (todos, done_todos) = tokio::sync::mpsc::unbounded_channel();
        let reads_stream = agent.output == crate::config::OutputFormat::Jsonl;
        let on_line = move |line: &str| {
            runs.push_line(&run_key, line);
            if reads_stream {
                for todo in coding::completed_todos(line) {
                    let _ = todos.send(todo);
                }
            }
        };
        let running = async move {
            let report = coding::run(&invocation, &on_line, cancel).await;
            drop(on_line); // the ticker below ends with the output
            report
        };
        let (report, ticked) = tokio::join!(running, self.tick_steps(task, &open_steps, run_id, done_todos));
        ran.extend(self.workspaces.hook(HookPoint::AfterRun, &workspace).await);
        let hooks = ran.clone();
        if !report.finished() {
            return Ok(CodingOutcome { hooks, report, ticked, finished: None, work: None });
        }
        let message = commit_message(task, &report.final_message);
        let finished = self
            .workspaces
            .finish(&workspace, &message)
            .await
            .map_err(|source| CodingError::Finish { agent: report.agent.clone(), source })?;
        let work = WorkDone {
            repository: workspace.repository.clone(),
            branch: finished.branch.clone(),
            commit: finished.commit.clone(),
            pushed: finished.pushed,
            diff: finished.diff.clone(),
            link: self.link(&workspace, finished.commit.as_deref()),
            unsandboxed: report.unsandboxed.clone(),
        };
        if let Some(run_id) = run_id {
            self.runs.set_work(run_id, work.clone());
        }
        Ok(CodingOutcome { hooks, report, ticked, finished: Some(finished), work: Some(work) })
    }

    /// Ticks the open step each to-do item the coding agent reports completed names (by title,
    /// case and spaces aside), once each, until its output ends; answers the titles ticked. At
    /// most one tick every [`STEP_PACE`]: a CLI that reports its whole list at once does not send
    /// the board a burst.
    async fn tick_steps(
        &self,
        task: &TaskOut,
        open: &[StepOut],
        run_id: Option<&str>,
        mut done: tokio::sync::mpsc::UnboundedReceiver<String>,
    ) -> Vec<String> {
        let mut ticked: Vec<String> = Vec::new();
        let mut next = tokio::time::Instant::now();
        while let Some(todo) = done.recv().await {
            let Some(step) = open.iter().find(|step| same_title(&step.title, &todo)) else { continue };
            if ticked.contains(&step.title) {
                continue;
            }
            tokio::time::sleep_until(next).await;
            next = tokio::time::Instant::now() + STEP_PACE;
            let key = run_id.map(|run| format!("{run}:coding-step:{}", step.id));
            match self.client.complete_step(&task.id, &step.id, key.as_deref()).await {
                Ok(_) => ticked.push(step.title.clone()),
                Err(error) => tracing::warn!(task = %task.key, step = %step.title, %error, "cannot tick the step"),
            }
        }
        ticked
    }

    /// Removes the workspaces of tasks done for longer than `workspaces.retention_ms` (by the
    /// task's last update), never one a coding agent works in now; returns the task keys removed.
    /// A task the tracker cannot answer for stays, to be asked again next time.
    pub async fn prune(&self) -> Vec<String> {
        let retention = std::time::Duration::from_millis(self.workspaces.config().retention_ms);
        let now = time::OffsetDateTime::now_utc();
        let mut removed = Vec::new();
        for (repository, key, _) in self.workspaces.present() {
            let Ok(task) = self.client.get_task(&key).await else { continue };
            let updated = time::OffsetDateTime::parse(&task.updated_at, &time::format_description::well_known::Rfc3339);
            let done_long_ago = task.status == picogent_tracker::model::TaskStatus::Done
                && updated.is_ok_and(|updated| now - updated >= retention);
            if !done_long_ago {
                continue;
            }
            let Ok(key) = TaskKey::new(&key) else { continue };
            let Ok(workspace) = self.workspaces.describe(&repository, &key) else { continue };
            match self.workspaces.remove_if_idle(&workspace).await {
                Ok(Some(hooks)) => {
                    for hook in hooks.iter().filter(|hook| !hook.succeeded()) {
                        tracing::warn!(task = %key, "{}", hook.describe());
                    }
                    tracing::info!(task = %key, "removed the workspace of a task done for longer than workspaces.retention_ms");
                    removed.push(key.to_string());
                }
                Ok(None) => {}
                Err(error) => tracing::warn!(task = %key, %error, "cannot remove the workspace of a done task"),
            }
        }
        removed
    }

    fn link(&self, workspace: &Workspace, commit: Option<&str>) -> Option<String> {
        let links = &self.workspaces.config().links;
        let template = match commit {
            Some(_) => links.commit.as_ref().or(links.branch.as_ref()),
            None => links.branch.as_ref(),
        }?;
        Some(
            template
                .replace("{repository}", &workspace.repository)
                .replace("{branch}", &workspace.branch)
                .replace("{commit}", commit.unwrap_or("")),
        )
    }

    async fn task_of(&self, context: &ToolContext) -> Result<TaskOut, CodingError> {
        match &context.session {
            Some(SessionKey::Task(task_id)) => Ok(self.client.get_task(task_id).await?),
            _ => Err(CodingError::NotATask),
        }
    }

    async fn status(&self, context: &ToolContext) -> Result<(Workspace, WorkspaceStatus), CodingError> {
        let task = self.task_of(context).await?;
        let choice = self.runs.choice(context.run_id.as_deref());
        let (workspace, _) = self.workspace(&task, choice.branch.as_deref()).await?;
        let status = self.workspaces.status(&workspace).await?;
        Ok((workspace, status))
    }
}

/// `TE-12: <the agent's first line>`, the task key always first.
fn commit_message(task: &TaskOut, final_message: &str) -> String {
    let said = final_message.lines().map(str::trim).find(|line| !line.is_empty()).unwrap_or("");
    let said: String = if said.is_empty() { task.title.clone() } else { said.to_string() };
    let subject: String = said.chars().take(72).collect();
    format!("{}: {subject}\n\nMade by picogent for {} ({}).", task.key, task.key, task.title)
}
