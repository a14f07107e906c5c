//! The two tools a run of a task with a repository is offered: `run_coding_agent` (the coding
//! agent works in the task's workspace, and its work is committed and pushed) and the read-only
//! `workspace_status`. The model plans, delegates, checks the diff and reports; direct mode
//! (`workspaces.direct`) calls [`CodingTools::work`] with the task as the instructions.
//!
//! What each run's coding agent printed and how its work ended is kept in [`CodingRuns`], by run
//! id: the inspector and MCP's `run://{id}/logs` read the lines as they come, and the run's answer
//! on the task names the branch and the commit.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use picogent_tools::scope::{Judgement, ReachError};
use picogent_tools::{CallEffect, ToolContext, ToolError, ToolSource};
use picogent_tracker::TrackerClient;
use picogent_tracker::model::{StepOut, TaskOut};
use picogent_tracker::session::SessionKey;
use rmcp::model::{CallToolResult, ContentBlock, Tool, ToolAnnotations};
use serde::Serialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::coding::{self, AgentReport, Invocation};
use crate::hooks::{HookPoint, HookReport};
use crate::names::TaskKey;
use crate::workspace::{Finished, Workspace, WorkspaceStatus, Workspaces};

pub const RUN_CODING_AGENT: &str = "run_coding_agent";
pub const WORKSPACE_STATUS: &str = "workspace_status";
/// The tools a run of a task with a repository is offered besides the tracker's.
pub const CODING_TOOLS: [&str; 2] = [RUN_CODING_AGENT, WORKSPACE_STATUS];

/// How many lines of coding agent output are kept per run for the live views.
const LOG_LINES: usize = 2_000;

/// The model a coding agent is told to use when its entry names none: picogent's own.
#[derive(Debug, Clone)]
pub struct ModelDefaults {
    pub base_url: String,
    pub model: String,
}

/// One run's coding work as the run's answer names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct WorkDone {
    pub repository: String,
    pub branch: String,
    pub commit: Option<String>,
    pub pushed: bool,
    pub diff: crate::DiffStat,
    /// From `workspaces.links.commit` (or `.branch` when there is no commit), filled in.
    pub link: Option<String>,
    /// Why the coding agent ran without the sandbox, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsandboxed: Option<String>,
}

impl WorkDone {
    /// "Work: branch `picogent/TE-1`, commit 1a2b3c4 (1 file(s) changed, +1 −1) <link>".
    pub fn describe(&self) -> String {
        let mut line = format!("Work: branch `{}`", self.branch);
        match &self.commit {
            Some(commit) => line.push_str(&format!(", commit {} ({})", short_sha(commit), self.diff.describe())),
            None => line.push_str(", no commit (nothing changed)"),
        }
        if let Some(link) = &self.link {
            line.push_str(&format!(" {link}"));
        }
        if let Some(why) = &self.unsandboxed {
            line.push_str(&format!(". The coding agent ran without the sandbox: {why}"));
        }
        line
    }
}

fn short_sha(commit: &str) -> &str {
    commit.get(..10).unwrap_or(commit)
}

/// Every run's coding agent output and work, by run id, while the process lives.
#[derive(Debug, Default)]
pub struct CodingRuns {
    runs: Mutex<HashMap<String, RunCoding>>,
}

#[derive(Debug, Default, Clone)]
struct RunCoding {
    lines: std::collections::VecDeque<String>,
    dropped: u64,
    work: Option<WorkDone>,
    hooks: Vec<HookReport>,
    choice: Option<CodingChoice>,
}

/// What a run was started with (MCP's `start_run`): its coding agent and its branch, instead of
/// `workspaces.agent` and `picogent/<KEY>`. Stored with the queued run, so a resumed run keeps it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct CodingChoice {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Always under `picogent/` ([`CodingTools::choice`] makes it so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
}

impl CodingRuns {
    fn with<T>(&self, run_id: &str, f: impl FnOnce(&mut RunCoding) -> T) -> T {
        let mut runs = self.runs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        f(runs.entry(run_id.to_string()).or_default())
    }

    fn push_line(&self, run_id: &str, line: &str) {
        self.with(run_id, |run| {
            if run.lines.len() == LOG_LINES {
                run.lines.pop_front();
                run.dropped += 1;
            }
            run.lines.push_back(line.to_string());
        });
    }

    /// The run `run_id` works with `choice` (set before it starts).
    pub fn choose(&self, run_id: &str, choice: CodingChoice) {
        self.with(run_id, |run| run.choice = Some(choice));
    }

    fn choice(&self, run_id: Option<&str>) -> CodingChoice {
        let runs = self.runs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        run_id.and_then(|id| runs.get(id)).and_then(|run| run.choice.clone()).unwrap_or_default()
    }

    /// The coding agent's output of the run `run_id` so far, as plain text (`run://{id}/logs`).
    pub fn log(&self, run_id: &str) -> Option<String> {
        let runs = self.runs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        runs.get(run_id).map(|run| self.log_of(run))
    }

    /// How the run's coding work ended, if it did any.
    pub fn work(&self, run_id: &str) -> Option<WorkDone> {
        let runs = self.runs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        runs.get(run_id).and_then(|run| run.work.clone())
    }

    /// What the run `run_id` has kept so far (its output, work and hooks), while it runs.
    pub fn record(&self, run_id: &str) -> Option<CodingRecord> {
        let runs = self.runs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        runs.get(run_id).map(|run| self.record_of(run))
    }

    /// Takes what the run `run_id` kept, for its stored record, and forgets it here: a run that
    /// ended holds no memory in this process.
    pub fn take(&self, run_id: &str) -> Option<CodingRecord> {
        let taken = self.runs.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).remove(run_id)?;
        Some(self.record_of(&taken))
    }

    fn record_of(&self, run: &RunCoding) -> CodingRecord {
        CodingRecord { log: self.log_of(run), work: run.work.clone(), hooks: run.hooks.clone() }
    }

    fn log_of(&self, run: &RunCoding) -> String {
        let mut text = String::new();
        if run.dropped > 0 {
            text.push_str(&format!("[{} earlier lines not kept]\n", run.dropped));
        }
        for line in &run.lines {
            text.push_str(line);
            text.push('\n');
        }
        text
    }
}

/// What a run's coding agent printed and how its work ended, as stored with the run when it ends
/// (`run://{id}/logs`, `run://{id}/result`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct CodingRecord {
    pub log: String,
    pub work: Option<WorkDone>,
    /// The workspace hooks that ran for it, with their output.
    #[serde(default)]
    pub hooks: Vec<HookReport>,
}

/// What one delegation did: the hooks, the coding agent's report, and the end of the work.
#[derive(Debug, Clone, Serialize)]
pub struct CodingOutcome {
    pub hooks: Vec<HookReport>,
    pub report: AgentReport,
    /// The task's steps ticked from the coding agent's progress.
    pub ticked: Vec<String>,
    /// `None` when the coding agent did not finish (nothing is committed or pushed then).
    pub finished: Option<Finished>,
    pub work: Option<WorkDone>,
}

impl CodingOutcome {
    /// The tool's answer, for the model.
    pub fn text(&self) -> String {
        let report = &self.report;
        let mut text = match report.failure() {
            None => format!(
                "The coding agent {} finished ({}) in {} s.",
                report.agent,
                report.exit.as_deref().unwrap_or("?"),
                report.duration_ms / 1000
            ),
            Some(failure) => format!("{failure}. Nothing was committed or pushed."),
        };
        if !report.final_message.is_empty() {
            text.push_str(&format!("\nIts final message: {}", report.final_message));
        }
        if !report.progress.is_empty() {
            text.push_str(&format!("\nSteps it took: {}", report.progress.join("; ")));
        }
        if !self.ticked.is_empty() {
            text.push_str(&format!(
                "\nSteps ticked on the task (its to-do list said done): {}",
                self.ticked.join("; ")
            ));
        }
        for hook in self.hooks.iter().filter(|hook| !hook.succeeded()) {
            text.push_str(&format!("\n{}", hook.describe()));
        }
        if let Some(work) = &self.work {
            let files = work.diff.files.join(", ");
            text.push_str(&format!("\n{} [{files}]", work.describe()));
            text.push_str(if work.pushed { "; pushed." } else { "; the remote had it already." });
        }
        if report.failure().is_some() {
            text.push_str(&format!("\nIts last output:\n{}", crate::git::last_lines(&report.output, 12)));
        }
        text
    }
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
        self.workspaces.config().repository_for(&task.project_slug, &task.labels).is_some()
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
            self.runs.with(run_id, |run| run.hooks.extend(hooks));
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
            self.runs.with(run_id, |run| run.work = Some(work.clone()));
        }
        Ok(CodingOutcome { hooks, report, ticked, finished: Some(finished), work: Some(work) })
    }

    /// Ticks the open step each to-do item the coding agent reports completed names (by title,
    /// case and spaces aside), once each, until its output ends; answers the titles ticked.
    async fn tick_steps(
        &self,
        task: &TaskOut,
        open: &[StepOut],
        run_id: Option<&str>,
        mut done: tokio::sync::mpsc::UnboundedReceiver<String>,
    ) -> Vec<String> {
        let mut ticked: Vec<String> = Vec::new();
        while let Some(todo) = done.recv().await {
            let Some(step) = open.iter().find(|step| same_title(&step.title, &todo)) else { continue };
            if ticked.contains(&step.title) {
                continue;
            }
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

fn schema(value: serde_json::Value) -> Arc<serde_json::Map<String, serde_json::Value>> {
    match value {
        serde_json::Value::Object(map) => Arc::new(map),
        _ => Arc::new(serde_json::Map::new()),
    }
}

fn definitions() -> Vec<Tool> {
    let run = Tool::new(
        RUN_CODING_AGENT,
        "Delegate a coding change to the coding agent, working in this task's git workspace (its own branch, \
         picogent/<task key>). Give it complete, self-contained instructions: what to change, where, and how to \
         check it. When it finishes, its work is committed and pushed to the task's branch; the answer gives its \
         exit, final message, the files changed and the commit. Check the result with workspace_status.",
        schema(json!({
            "type": "object",
            "properties": {
                "instructions": {"type": "string", "description": "What the coding agent is to do, in full."},
                "agent": {"type": "string", "description": "A configured coding agent by name; omit for the default."}
            },
            "required": ["instructions"],
            "additionalProperties": false
        })),
    )
    .annotate(ToolAnnotations::new().read_only(false).destructive(true).idempotent(false).open_world(true));
    let status = Tool::new(
        WORKSPACE_STATUS,
        "This task's git workspace: its branch, the files changed and not committed yet, the commits beyond the \
         base branch, and the diff stat. Reads only.",
        schema(json!({"type": "object", "properties": {}, "additionalProperties": false})),
    )
    .annotate(picogent_tools::kernel::read_only());
    vec![run, status]
}

fn text_result(text: String, structured: serde_json::Value, is_error: bool) -> CallToolResult {
    let mut result = if is_error {
        CallToolResult::error(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::success(vec![ContentBlock::text(text)])
    };
    result.structured_content = Some(structured);
    result
}

fn error_result(error: &CodingError) -> CallToolResult {
    let message = error.to_string();
    text_result(message.clone(), json!({"error": {"code": "coding", "message": message}}), true)
}

impl ToolSource for CodingTools {
    fn tools(&self) -> Vec<Tool> {
        definitions()
    }

    fn effect(&self, name: &str, _arguments: &serde_json::Value, _context: &ToolContext) -> Option<CallEffect> {
        match name {
            RUN_CODING_AGENT => Some(CallEffect::Consequential(
                "run the coding agent in this task's workspace, then commit and push its branch".to_string(),
            )),
            WORKSPACE_STATUS => Some(CallEffect::Routine),
            _ => None,
        }
    }

    /// Both tools reach only the run's own task: its workspace and its branch.
    fn reach<'a>(
        &'a self,
        name: &'a str,
        _arguments: &'a serde_json::Value,
        _context: &'a ToolContext,
    ) -> BoxFuture<'a, Option<Result<Judgement, ReachError>>> {
        Box::pin(async move { CODING_TOOLS.contains(&name).then(|| Ok(Judgement::within_run())) })
    }

    fn call<'a>(
        &'a self,
        name: &'a str,
        arguments: serde_json::Value,
        context: &'a ToolContext,
    ) -> BoxFuture<'a, CallToolResult> {
        Box::pin(async move {
            match name {
                WORKSPACE_STATUS => match self.status(context).await {
                    Ok((workspace, status)) => {
                        let text = format!(
                            "Branch {} (from {}). Not committed: {}. Commits beyond {}: {}. {}.",
                            status.branch,
                            status.base,
                            if status.changed.is_empty() { "nothing".to_string() } else { status.changed.join(", ") },
                            status.base,
                            if status.commits.is_empty() { "none".to_string() } else { status.commits.join("; ") },
                            status.diff.describe(),
                        );
                        let structured = json!({"repository": workspace.repository, "status": status});
                        text_result(text, structured, false)
                    }
                    Err(error) => error_result(&error),
                },
                RUN_CODING_AGENT => {
                    let instructions = arguments.get("instructions").and_then(|value| value.as_str());
                    let agent = arguments.get("agent").and_then(|value| value.as_str());
                    let Some(instructions) = instructions.filter(|text| !text.trim().is_empty()) else {
                        let got = match arguments.get("instructions") {
                            None => "nothing".to_string(),
                            Some(value) => value.to_string(),
                        };
                        let expected =
                            "the coding agent's instructions in full: what to change, where, and how to check it";
                        return ToolError::invalid("instructions", expected, got).into_result();
                    };
                    let task = match self.task_of(context).await {
                        Ok(task) => task,
                        Err(error) => return error_result(&error),
                    };
                    match self.work(&task, instructions, agent, context.run_id.as_deref(), &context.cancel).await {
                        Ok(outcome) => {
                            let failed = !outcome.report.finished();
                            let structured = serde_json::to_value(&outcome).unwrap_or_default();
                            text_result(outcome.text(), structured, failed)
                        }
                        Err(error) => error_result(&error),
                    }
                }
                other => ToolError::UnknownTool {
                    name: other.to_string(),
                    suggestions: CODING_TOOLS.iter().map(|name| name.to_string()).collect(),
                }
                .into_result(),
            }
        })
    }
}
