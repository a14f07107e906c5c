//! Task tools: list, read, create, change, take, reject, assign and watch tasks.
//!
//! A task is named by its key (`TE-15`) or id wherever `task_id` appears. `take_task` and
//! `watch_task` act as the agent itself: naming another member is refused before any request.
//!
//! The calls that close, reassign, reject or rewrite a task say so in their `effect`, so `ask`
//! mode asks a human before them (when the tool is in `permissions.ask_tools`) and not before a
//! title typo or a move to `in_progress`.

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer};

use crate::format;
use crate::kernel::{
    Target, ToolError, ToolGroup, ToolHints, ToolOutput, TrackerTool, output_schema_for, read_only, write,
};
use crate::{CallEffect, ToolContext};
use picogent_tracker::TrackerClient;
use picogent_tracker::model::{self, Priority, RejectOut, TaskOut, TaskPage, TaskStatus, TaskType, WatchOut, limits};

/// Tells an absent field (`None`) from an explicit `null` (`Some(None)`).
fn nullable<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(deserializer).map(Some)
}

/// The slug the agent acts as: its own, or a refusal when the model names someone else.
fn own_slug(given: Option<String>, context: &ToolContext, action: &str) -> Result<String, ToolError> {
    match given {
        Some(slug) if slug != context.agent_slug => Err(ToolError::Refused {
            message: format!(
                "you can only {action} as yourself ({}), not as {slug}; leave agent_slug out",
                context.agent_slug
            ),
        }),
        _ => Ok(context.agent_slug.clone()),
    }
}

fn task_output(task: &TaskOut) -> Result<ToolOutput, ToolError> {
    ToolOutput::new(format::task_line(task), task)
}

// ---- list_tasks ----

pub struct ListTasks;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListTasksArgs {
    /// Project slug or id
    pub project_id: Option<String>,
    pub status: Option<Vec<TaskStatus>>,
    pub assignee: Option<String>,
    /// All must match
    #[schemars(length(max = limits::LABELS), inner(length(max = limits::LABEL)))]
    pub labels: Option<Vec<String>>,
    #[schemars(range(min = 1, max = 200))]
    pub limit: Option<u32>,
    /// From the previous page
    pub cursor: Option<String>,
}

impl TrackerTool for ListTasks {
    type Args = ListTasksArgs;
    const NAME: &'static str = "list_tasks";
    const TITLE: &'static str = "List tasks";
    const DESCRIPTION: &'static str = "List tasks, filtered.";
    const GROUP: ToolGroup = ToolGroup::Tasks;
    const PAGING_HINT: &'static str = "use a smaller limit and page with cursor";

    fn annotations() -> ToolHints {
        read_only()
    }

    fn output_schema() -> Option<serde_json::Value> {
        output_schema_for::<TaskPage>()
    }

    async fn run(args: ListTasksArgs, client: &TrackerClient, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        let query = model::TaskQuery {
            project_id: args.project_id,
            status: args.status.map(|statuses| statuses.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(",")),
            assignee: args.assignee,
            labels: args.labels.map(|labels| labels.join(",")),
            limit: args.limit,
            cursor: args.cursor,
        };
        let page = client.list_tasks(&query).await?;
        let mut text = format::counted(&page.items, "tasks", format::task_line);
        if let Some(cursor) = &page.next_cursor {
            text.push_str(&format!("\nmore: call list_tasks with cursor \"{cursor}\""));
        }
        ToolOutput::new(text, &page)
    }
}

// ---- get_task ----

pub struct GetTask;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskIdArgs {
    /// Task key or id
    pub task_id: String,
}

impl TrackerTool for GetTask {
    type Args = TaskIdArgs;
    const NAME: &'static str = "get_task";
    const NOT_FOUND_HINT: &'static str = "check the id or key: list_tasks shows the tasks and their keys";
    const TITLE: &'static str = "Get a task";
    const DESCRIPTION: &'static str = "Read a task in full.";
    const GROUP: ToolGroup = ToolGroup::Tasks;
    const PAGING_HINT: &'static str = "the full description is in the structured content";

    fn annotations() -> ToolHints {
        read_only()
    }

    fn output_schema() -> Option<serde_json::Value> {
        output_schema_for::<TaskOut>()
    }

    async fn run(args: TaskIdArgs, client: &TrackerClient, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        let task = client.get_task(&args.task_id).await?;
        ToolOutput::new(format::task_detail(&task), &task)
    }
}

// ---- create_task ----

pub struct CreateTask;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTaskArgs {
    pub project_slug: String,
    #[schemars(length(max = limits::TITLE))]
    pub title: String,
    #[schemars(length(max = limits::DESCRIPTION))]
    pub description: Option<String>,
    #[serde(rename = "type")]
    pub task_type: Option<TaskType>,
    pub priority: Option<Priority>,
    pub status: Option<TaskStatus>,
    pub assignee_slug: Option<String>,
    #[schemars(length(max = limits::LABELS), inner(length(max = limits::LABEL)))]
    pub labels: Option<Vec<String>>,
}

impl TrackerTool for CreateTask {
    type Args = CreateTaskArgs;
    const NAME: &'static str = "create_task";
    const NOT_FOUND_HINT: &'static str =
        "check the id or key: list_projects shows the projects, list_members the member slugs";
    const TITLE: &'static str = "Create a task";
    const DESCRIPTION: &'static str = "Create a task in a project.";
    const GROUP: ToolGroup = ToolGroup::Tasks;

    fn annotations() -> ToolHints {
        write(false, false)
    }

    fn output_schema() -> Option<serde_json::Value> {
        output_schema_for::<TaskOut>()
    }

    /// A new task is outside any one run: in scope only under `project` (its own project) or `any`.
    fn target(args: &CreateTaskArgs, _: &ToolContext) -> Target {
        Target::NewTask { project: args.project_slug.clone() }
    }

    async fn run(args: CreateTaskArgs, client: &TrackerClient, context: &ToolContext) -> Result<ToolOutput, ToolError> {
        let body = model::CreateTask {
            project_slug: args.project_slug,
            title: args.title,
            description: args.description,
            task_type: args.task_type,
            priority: args.priority,
            status: args.status,
            assignee_slug: args.assignee_slug,
            labels: args.labels,
        };
        let task = client.create_task(&body, context.idempotency_key.as_deref()).await?;
        ToolOutput::new(format!("created {}", format::task_line(&task)), &task)
    }
}

// ---- update_task ----

pub struct UpdateTask;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateTaskArgs {
    /// Task key or id
    pub task_id: String,
    #[schemars(length(max = limits::TITLE))]
    pub title: Option<String>,
    /// null clears it
    #[serde(default, deserialize_with = "nullable")]
    #[schemars(with = "Option<String>", length(max = limits::DESCRIPTION), extend("x-nullable" = true))]
    pub description: Option<Option<String>>,
    pub status: Option<TaskStatus>,
    pub priority: Option<Priority>,
    #[serde(rename = "type")]
    pub task_type: Option<TaskType>,
    /// null unassigns
    #[serde(default, deserialize_with = "nullable")]
    #[schemars(with = "Option<String>", extend("x-nullable" = true))]
    pub assignee_slug: Option<Option<String>>,
    /// Replaces all labels
    #[schemars(length(max = limits::LABELS), inner(length(max = limits::LABEL)))]
    pub labels: Option<Vec<String>>,
}

impl TrackerTool for UpdateTask {
    type Args = UpdateTaskArgs;
    const NAME: &'static str = "update_task";
    const NOT_FOUND_HINT: &'static str = "check the id or key: list_tasks shows the tasks and their keys";
    const TITLE: &'static str = "Update a task";
    const DESCRIPTION: &'static str = "Change a task; fields left out stay as they are.";
    const GROUP: ToolGroup = ToolGroup::Tasks;

    fn annotations() -> ToolHints {
        write(false, true)
    }

    fn output_schema() -> Option<serde_json::Value> {
        output_schema_for::<TaskOut>()
    }

    /// Closing the task, handing it to someone else (or to no one) and replacing or clearing its
    /// description matter; a new title, status short of `done`, priority, type or labels do not.
    fn effect(args: &UpdateTaskArgs, context: &ToolContext) -> CallEffect {
        let task = &args.task_id;
        let mut doing = Vec::new();
        if args.status == Some(TaskStatus::Done) {
            doing.push(format!("move task {task} to done"));
        }
        match &args.assignee_slug {
            Some(Some(slug)) if *slug != context.agent_slug => doing.push(format!("assign task {task} to @{slug}")),
            Some(None) => doing.push(format!("unassign task {task}")),
            _ => {}
        }
        match &args.description {
            Some(Some(_)) => doing.push(format!("replace the description of task {task}")),
            Some(None) => doing.push(format!("clear the description of task {task}")),
            None => {}
        }
        if doing.is_empty() { CallEffect::Routine } else { CallEffect::Consequential(doing.join(", and ")) }
    }

    fn target(args: &UpdateTaskArgs, _: &ToolContext) -> Target {
        Target::Task { task: args.task_id.clone(), assignee: args.assignee_slug.clone() }
    }

    async fn run(args: UpdateTaskArgs, client: &TrackerClient, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        let body = model::UpdateTask {
            title: args.title,
            description: args.description,
            status: args.status,
            priority: args.priority,
            task_type: args.task_type,
            assignee_slug: args.assignee_slug,
            labels: args.labels,
        };
        if body == model::UpdateTask::default() {
            return Err(ToolError::invalid("", "at least one field to change besides task_id", "none"));
        }
        let task = client.update_task(&args.task_id, &body).await?;
        ToolOutput::new(format!("updated {}", format::task_line(&task)), &task)
    }
}

// ---- take_task ----

pub struct TakeTask;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TakeTaskArgs {
    /// Task key or id
    pub task_id: String,
    pub agent_slug: Option<String>,
}

impl TrackerTool for TakeTask {
    type Args = TakeTaskArgs;
    const NAME: &'static str = "take_task";
    const NOT_FOUND_HINT: &'static str = "check the id or key: list_tasks shows the tasks and their keys";
    const TITLE: &'static str = "Take a task";
    const DESCRIPTION: &'static str = "Assign a task to yourself.";
    const GROUP: ToolGroup = ToolGroup::Tasks;

    fn annotations() -> ToolHints {
        write(false, true)
    }

    fn output_schema() -> Option<serde_json::Value> {
        output_schema_for::<TaskOut>()
    }

    fn target(args: &TakeTaskArgs, context: &ToolContext) -> Target {
        Target::Task { task: args.task_id.clone(), assignee: Some(Some(context.agent_slug.clone())) }
    }

    async fn run(args: TakeTaskArgs, client: &TrackerClient, context: &ToolContext) -> Result<ToolOutput, ToolError> {
        let slug = own_slug(args.agent_slug, context, "take a task")?;
        let task = client.take_task(&args.task_id, &slug, context.idempotency_key.as_deref()).await?;
        task_output(&task).map(|output| ToolOutput { text: format!("took {}", output.text), ..output })
    }
}

// ---- reject_task ----

pub struct RejectTask;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RejectTaskArgs {
    /// Task key or id
    pub task_id: String,
    /// Why, posted as a comment
    #[schemars(length(max = limits::REASON))]
    pub reason: String,
}

impl TrackerTool for RejectTask {
    type Args = RejectTaskArgs;
    const NAME: &'static str = "reject_task";
    const NOT_FOUND_HINT: &'static str = "check the id or key: list_tasks shows the tasks and their keys";
    const TITLE: &'static str = "Reject a task";
    const DESCRIPTION: &'static str = "Give back a task assigned to you, saying why.";
    const GROUP: ToolGroup = ToolGroup::Tasks;

    fn annotations() -> ToolHints {
        write(true, false)
    }

    fn output_schema() -> Option<serde_json::Value> {
        output_schema_for::<RejectOut>()
    }

    fn effect(args: &RejectTaskArgs, _: &ToolContext) -> CallEffect {
        CallEffect::Consequential(format!(
            "reject task {}, giving it back unassigned with the reason \"{}\"",
            args.task_id, args.reason
        ))
    }

    fn target(args: &RejectTaskArgs, _: &ToolContext) -> Target {
        Target::Task { task: args.task_id.clone(), assignee: Some(None) }
    }

    async fn run(args: RejectTaskArgs, client: &TrackerClient, context: &ToolContext) -> Result<ToolOutput, ToolError> {
        let answer = client.reject_task(&args.task_id, &args.reason, context.idempotency_key.as_deref()).await?;
        ToolOutput::new(format!("rejected {}: {}", args.task_id, answer.reason), &answer)
    }
}

// ---- assign_task ----

pub struct AssignTask;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AssignTaskArgs {
    /// Task key or id
    pub task_id: String,
    pub assignee_slug: String,
}

impl TrackerTool for AssignTask {
    type Args = AssignTaskArgs;
    const NAME: &'static str = "assign_task";
    const NOT_FOUND_HINT: &'static str =
        "check the id or key: list_tasks shows the tasks and their keys, list_members the member slugs";
    const TITLE: &'static str = "Assign a task";
    const DESCRIPTION: &'static str = "Assign a task to a member.";
    const GROUP: ToolGroup = ToolGroup::Tasks;

    fn annotations() -> ToolHints {
        write(false, true)
    }

    fn output_schema() -> Option<serde_json::Value> {
        output_schema_for::<TaskOut>()
    }

    /// Assigning the task to the agent itself is routine; to anyone else, it matters.
    fn effect(args: &AssignTaskArgs, context: &ToolContext) -> CallEffect {
        if args.assignee_slug == context.agent_slug {
            CallEffect::Routine
        } else {
            CallEffect::Consequential(format!("assign task {} to @{}", args.task_id, args.assignee_slug))
        }
    }

    fn target(args: &AssignTaskArgs, _: &ToolContext) -> Target {
        Target::Task { task: args.task_id.clone(), assignee: Some(Some(args.assignee_slug.clone())) }
    }

    async fn run(args: AssignTaskArgs, client: &TrackerClient, context: &ToolContext) -> Result<ToolOutput, ToolError> {
        let task = client.assign_task(&args.task_id, &args.assignee_slug, context.idempotency_key.as_deref()).await?;
        ToolOutput::new(format!("assigned {}", format::task_line(&task)), &task)
    }
}

// ---- watch_task ----

pub struct WatchTask;

impl TrackerTool for WatchTask {
    type Args = TakeTaskArgs;
    const NAME: &'static str = "watch_task";
    const NOT_FOUND_HINT: &'static str = "check the id or key: list_tasks shows the tasks and their keys";
    const TITLE: &'static str = "Watch a task";
    const DESCRIPTION: &'static str = "Follow a task's updates.";
    const GROUP: ToolGroup = ToolGroup::Tasks;

    fn annotations() -> ToolHints {
        write(false, true)
    }

    fn output_schema() -> Option<serde_json::Value> {
        output_schema_for::<WatchOut>()
    }

    fn target(args: &TakeTaskArgs, _: &ToolContext) -> Target {
        Target::Task { task: args.task_id.clone(), assignee: None }
    }

    async fn run(args: TakeTaskArgs, client: &TrackerClient, context: &ToolContext) -> Result<ToolOutput, ToolError> {
        let slug = own_slug(args.agent_slug, context, "watch a task")?;
        let answer = client.watch_task(&args.task_id, &slug, context.idempotency_key.as_deref()).await?;
        ToolOutput::new(format!("watching {}; watchers: {}", args.task_id, answer.watchers.join(", ")), &answer)
    }
}
