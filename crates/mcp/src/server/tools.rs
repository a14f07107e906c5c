//! Tool calls: progress reporting around any call, and the running agent's own tools
//! (`start_run`, `stop_run`, `report_run`).
//!
//! Invariant: a tool failure — bad arguments, a refused start, an unknown run — is a result with
//! `isError: true`, never a protocol error.

use rmcp::model::{CallToolResult, ContentBlock, ProgressNotificationParam, ProgressToken, Tool, ToolAnnotations};
use rmcp::{Peer, RoleServer};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{AgentControl, McpServer, StartRun};

impl McpServer {
    /// Runs `call`, and when the client sent a progress token, reports progress: once at the
    /// start, every `progress_interval` while it runs, and once at the end.
    pub(super) async fn with_progress(
        &self,
        name: &str,
        progress: Option<(Peer<RoleServer>, ProgressToken)>,
        call: impl Future<Output = CallToolResult>,
    ) -> CallToolResult {
        let Some((peer, token)) = progress else {
            return call.await;
        };
        let notify = |step: u32, total: Option<u32>, message: String| {
            let mut param = ProgressNotificationParam::new(token.clone(), f64::from(step)).with_message(message);
            if let Some(total) = total {
                param = param.with_total(f64::from(total));
            }
            let peer = peer.clone();
            async move {
                // A client that stopped listening for progress still gets its result.
                if let Err(error) = peer.notify_progress(param).await {
                    tracing::debug!(%error, "cannot send a progress notification");
                }
            }
        };
        notify(0, None, format!("calling {name}")).await;
        let mut ticks = tokio::time::interval(self.inner.progress_interval);
        ticks.tick().await; // the first tick is immediate
        tokio::pin!(call);
        let mut step = 0;
        let result = loop {
            tokio::select! {
                result = &mut call => break result,
                _ = ticks.tick() => {
                    step += 1;
                    notify(step, None, format!("{name} still running")).await;
                }
            }
        };
        notify(step + 1, Some(step + 1), format!("{name} done")).await;
        result
    }

    /// One call of an agent tool; an unknown name (or no agent) is an error result.
    pub(super) async fn call_agent_tool(&self, name: &str, arguments: Value) -> CallToolResult {
        let (Some(agent), Some(tool)) = (&self.inner.agent, RunTool::parse(name)) else {
            return error_result(format!("unknown tool {name}"));
        };
        let agent = agent.as_ref();
        match tool {
            RunTool::Start => match start_request(arguments) {
                Ok(request) => start_run(agent, request).await,
                Err(result) => result,
            },
            RunTool::Stop => match parse_arguments(arguments) {
                Ok(args) => stop_run(agent, args).await,
                Err(result) => result,
            },
            RunTool::Report => match parse_arguments(arguments) {
                Ok(args) => report_run(agent, args).await,
                Err(result) => result,
            },
        }
    }
}

/// What `start_run`'s arguments ask for, checked; a result with `isError: true` when they ask
/// for nothing, or for two things.
pub(super) fn start_request(arguments: Value) -> Result<StartRun, CallToolResult> {
    let args: StartRunArgs = parse_arguments(arguments)?;
    let coding = args.coding_agent.is_some() || args.branch.is_some();
    let given = |text: &Option<String>| text.as_deref().is_some_and(|text| !text.trim().is_empty());
    let new_task = args.project.is_some() || args.title.is_some() || args.description.is_some();
    match (args.task_key, args.prompt, new_task) {
        (Some(task_key), None, false) if !task_key.trim().is_empty() => {
            Ok(StartRun::Task { task_key, coding_agent: args.coding_agent, branch: args.branch })
        }
        (None, None, true) if given(&args.project) && given(&args.title) => Ok(StartRun::NewTask {
            project: args.project.unwrap_or_default(),
            title: args.title.unwrap_or_default(),
            description: args.description,
            coding_agent: args.coding_agent,
            branch: args.branch,
        }),
        (None, None, true) => Err(error_result("a new task needs both `project` and `title`")),
        (None, Some(_), false) if coding => {
            Err(error_result("`coding_agent` and `branch` go with a task: a prompt run has no workspace"))
        }
        (None, Some(prompt), false) if !prompt.trim().is_empty() => Ok(StartRun::Prompt { prompt }),
        _ => Err(error_result(
            "give exactly one of `task_key`, `prompt`, or `project` and `title` (a new task), not empty",
        )),
    }
}

async fn start_run(agent: &dyn AgentControl, request: StartRun) -> CallToolResult {
    match agent.start_run(request).await {
        Ok(run_id) => {
            json_result(format!("started run {run_id}; read run://{run_id} for its state"), json!({ "run_id": run_id }))
        }
        Err(error) => error_result(error.to_string()),
    }
}

async fn stop_run(agent: &dyn AgentControl, args: RunIdArgs) -> CallToolResult {
    match agent.stop_run(&args.run_id).await {
        Ok(true) => {
            json_result(format!("run {} is stopping", args.run_id), json!({ "run_id": args.run_id, "stopping": true }))
        }
        Ok(false) => json_result(
            format!("run {} had already ended", args.run_id),
            json!({ "run_id": args.run_id, "stopping": false }),
        ),
        Err(error) => error_result(error.to_string()),
    }
}

async fn report_run(agent: &dyn AgentControl, args: RunIdArgs) -> CallToolResult {
    let run = match agent.get_run(&args.run_id).await {
        Ok(run) => run,
        Err(error) => return error_result(error.to_string()),
    };
    let result = match agent.run_result(&args.run_id).await {
        Ok(result) => result,
        Err(error) => return error_result(error.to_string()),
    };
    let report = run_report(&run, &result);
    let text = serde_json::to_string_pretty(&report).unwrap_or_else(|_| report.to_string());
    json_result(text, report)
}

/// What `report_run` answers, and a task of the tasks extension holds once its run has ended: the
/// run's record and its result.
pub(super) fn run_report(run: &super::RunSummary, result: &super::RunResult) -> Value {
    json!({ "run": run, "result": result })
}

/// The agent's own tools, served only when an [`AgentControl`] is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RunTool {
    Start,
    Stop,
    Report,
}

impl RunTool {
    const ALL: [RunTool; 3] = [RunTool::Start, RunTool::Stop, RunTool::Report];

    fn name(self) -> &'static str {
        match self {
            RunTool::Start => "start_run",
            RunTool::Stop => "stop_run",
            RunTool::Report => "report_run",
        }
    }

    pub(super) fn parse(name: &str) -> Option<RunTool> {
        RunTool::ALL.into_iter().find(|tool| tool.name() == name)
    }

    pub(super) fn definition(self) -> Tool {
        match self {
            RunTool::Start => Tool::new(
                self.name(),
                "Start a run of the agent: work a task (task_key), create a task and work it (project, \
                 title, description), or follow an instruction (prompt). A task with a repository may name \
                 the coding agent and the branch. Answers the run id, or, to a client of the tasks \
                 extension, a task to follow with tasks/get; run://{id} shows its state, run://{id}/logs \
                 the coding agent's output.",
                rmcp::handler::server::common::schema_for_type::<StartRunArgs>(),
            )
            .with_annotations(ToolAnnotations::new().read_only(false).destructive(false).idempotent(false)),
            RunTool::Stop => Tool::new(
                self.name(),
                "Stop a run of the agent; it ends at its next step.",
                rmcp::handler::server::common::schema_for_type::<RunIdArgs>(),
            )
            .with_annotations(ToolAnnotations::new().read_only(false).destructive(true).idempotent(true)),
            RunTool::Report => Tool::new(
                self.name(),
                "Report on a run of the agent: its record and its result (or that it is still running).",
                rmcp::handler::server::common::schema_for_type::<RunIdArgs>(),
            )
            .with_annotations(ToolAnnotations::new().read_only(true)),
        }
    }
}

pub(super) fn agent_tools() -> Vec<Tool> {
    RunTool::ALL.into_iter().map(RunTool::definition).collect()
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct StartRunArgs {
    /// The task to work, by key (e.g. TE-15). Give this or `prompt`.
    #[serde(default)]
    task_key: Option<String>,
    /// An instruction for the agent to follow. Give this or `task_key`.
    #[serde(default)]
    prompt: Option<String>,
    /// A new task's project, by slug: with `title` (and `description`), the task is created,
    /// assigned to the agent, and worked. Give these or `task_key` or `prompt`.
    #[serde(default)]
    project: Option<String>,
    /// A new task's title.
    #[serde(default)]
    title: Option<String>,
    /// A new task's description: what to do.
    #[serde(default)]
    description: Option<String>,
    /// With a task: the configured coding agent (`workspaces.agents`) its coding work uses,
    /// instead of `workspaces.agent`.
    #[serde(default)]
    coding_agent: Option<String>,
    /// With a task: the branch its work goes on, instead of `picogent/<KEY>`; always under
    /// `picogent/` (added when missing). Never the base branch.
    #[serde(default)]
    branch: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RunIdArgs {
    /// The run's id, as answered by start_run or listed in run://list.
    run_id: String,
}

fn parse_arguments<T: serde::de::DeserializeOwned>(arguments: Value) -> Result<T, CallToolResult> {
    serde_json::from_value(arguments).map_err(|e| error_result(format!("invalid arguments: {e}")))
}

pub(super) fn error_result(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

fn json_result(text: String, structured: Value) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(structured);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_tools_have_object_schemas_and_annotations() {
        for tool in agent_tools() {
            assert_eq!(tool.input_schema.get("type"), Some(&json!("object")), "{}", tool.name);
            assert!(tool.annotations.is_some(), "{}", tool.name);
            assert_eq!(RunTool::parse(&tool.name).map(RunTool::name), Some(tool.name.as_ref()));
        }
    }
}
