//! Step tools: a task's checklist — list, add, complete and change steps.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ToolContext;
use crate::format;
use crate::kernel::{
    Target, ToolError, ToolGroup, ToolHints, ToolOutput, TrackerTool, output_schema_for, read_only, write,
};
use picogent_tracker::TrackerClient;
use picogent_tracker::model::{self, StepOut, limits};

/// A task's steps as structured content: an object, as MCP wants.
#[derive(Debug, Serialize, JsonSchema)]
pub struct StepList {
    pub steps: Vec<StepOut>,
}

// ---- list_steps ----

pub struct ListSteps;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListStepsArgs {
    /// Task key or id
    pub task_id: String,
}

impl TrackerTool for ListSteps {
    type Args = ListStepsArgs;
    const NAME: &'static str = "list_steps";
    const NOT_FOUND_HINT: &'static str = "check the id or key: list_tasks shows the tasks and their keys";
    const TITLE: &'static str = "List steps";
    const DESCRIPTION: &'static str = "List a task's steps.";
    const GROUP: ToolGroup = ToolGroup::Steps;

    fn annotations() -> ToolHints {
        read_only()
    }

    fn output_schema() -> Option<serde_json::Value> {
        output_schema_for::<StepList>()
    }

    async fn run(args: ListStepsArgs, client: &TrackerClient, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        let steps = client.list_steps(&args.task_id).await?;
        let done = steps.iter().filter(|s| s.done).count();
        let mut text = format::counted(&steps, "steps", format::step_line);
        if !steps.is_empty() {
            text.push_str(&format!("\n{done} of {} done", steps.len()));
        }
        ToolOutput::new(text, &StepList { steps })
    }
}

// ---- add_step ----

pub struct AddStep;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AddStepArgs {
    /// Task key or id
    pub task_id: String,
    #[schemars(length(max = limits::TITLE))]
    pub title: String,
}

impl TrackerTool for AddStep {
    type Args = AddStepArgs;
    const NAME: &'static str = "add_step";
    const NOT_FOUND_HINT: &'static str = "check the id or key: list_tasks shows the tasks and their keys";
    const TITLE: &'static str = "Add a step";
    const DESCRIPTION: &'static str = "Append a step to a task.";
    const GROUP: ToolGroup = ToolGroup::Steps;

    fn annotations() -> ToolHints {
        write(false, false)
    }

    fn output_schema() -> Option<serde_json::Value> {
        output_schema_for::<StepOut>()
    }

    fn target(args: &AddStepArgs, _: &ToolContext) -> Target {
        Target::Task { task: args.task_id.clone(), assignee: None }
    }

    async fn run(args: AddStepArgs, client: &TrackerClient, context: &ToolContext) -> Result<ToolOutput, ToolError> {
        let step = client.add_step(&args.task_id, &args.title, context.idempotency_key.as_deref()).await?;
        ToolOutput::new(format!("added {}", format::step_line(&step)), &step)
    }
}

// ---- complete_step ----

pub struct CompleteStep;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StepIdArgs {
    /// Task key or id
    pub task_id: String,
    pub step_id: String,
}

impl TrackerTool for CompleteStep {
    type Args = StepIdArgs;
    const NAME: &'static str = "complete_step";
    const NOT_FOUND_HINT: &'static str =
        "check the id or key: list_steps with the task's key shows its steps and their ids";
    const TITLE: &'static str = "Complete a step";
    const DESCRIPTION: &'static str = "Mark a step done.";
    const GROUP: ToolGroup = ToolGroup::Steps;

    fn annotations() -> ToolHints {
        write(false, true)
    }

    fn output_schema() -> Option<serde_json::Value> {
        output_schema_for::<StepOut>()
    }

    fn target(args: &StepIdArgs, _: &ToolContext) -> Target {
        Target::Task { task: args.task_id.clone(), assignee: None }
    }

    async fn run(args: StepIdArgs, client: &TrackerClient, context: &ToolContext) -> Result<ToolOutput, ToolError> {
        let step = client.complete_step(&args.task_id, &args.step_id, context.idempotency_key.as_deref()).await?;
        ToolOutput::new(format!("completed {}", format::step_line(&step)), &step)
    }
}

// ---- update_step ----

pub struct UpdateStep;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateStepArgs {
    /// Task key or id
    pub task_id: String,
    pub step_id: String,
    #[schemars(length(max = limits::TITLE))]
    pub title: Option<String>,
    pub done: Option<bool>,
}

impl TrackerTool for UpdateStep {
    type Args = UpdateStepArgs;
    const NAME: &'static str = "update_step";
    const NOT_FOUND_HINT: &'static str =
        "check the id or key: list_steps with the task's key shows its steps and their ids";
    const TITLE: &'static str = "Update a step";
    const DESCRIPTION: &'static str = "Rename a step or set done.";
    const GROUP: ToolGroup = ToolGroup::Steps;

    fn annotations() -> ToolHints {
        write(false, true)
    }

    fn output_schema() -> Option<serde_json::Value> {
        output_schema_for::<StepOut>()
    }

    fn target(args: &UpdateStepArgs, _: &ToolContext) -> Target {
        Target::Task { task: args.task_id.clone(), assignee: None }
    }

    async fn run(args: UpdateStepArgs, client: &TrackerClient, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        if args.title.is_none() && args.done.is_none() {
            return Err(ToolError::invalid("", "title or done", "neither"));
        }
        let body = model::UpdateStep { title: args.title, done: args.done };
        let step = client.update_step(&args.task_id, &args.step_id, &body).await?;
        ToolOutput::new(format!("updated {}", format::step_line(&step)), &step)
    }
}
