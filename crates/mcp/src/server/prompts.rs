//! Prompts: `work_task`, `reply_to` and `standup`, rendered from the agent's own templates
//! (`prompts/*.md`) over data read from the tracker, so a host gets the request the agent itself
//! would work from.
//!
//! Invariant: a missing argument or a thing the tracker does not have is the caller's to fix
//! (invalid params); any other failure is ours (internal).

use rmcp::ErrorData;
use rmcp::model::CacheScope;
use rmcp::model::{
    GetPromptRequestParams, GetPromptResult, ListPromptsResult, Prompt, PromptArgument, PromptMessage, Role,
};
use serde_json::{Value, json};

use super::{McpServer, STATIC_LIST_TTL_MS};
use picogent_prompts::{Fence, MessageNewVars, MessageView, StandupVars, TaskAssignedVars, TaskView, clean_name};
use picogent_tracker::TrackerError;
use picogent_tracker::model::{MessageQuery, TaskQuery};

/// Statuses of the tasks a stand-up covers: everything not done.
const OPEN_STATUSES: &str = "backlog,todo,in_progress,in_review";

/// Pages of tasks a stand-up reads at most (200 tasks each), so a huge project cannot stall it.
const MAX_STANDUP_PAGES: usize = 5;

impl McpServer {
    pub(super) fn prompt_list(&self) -> ListPromptsResult {
        let argument =
            |name: &str, description: &str| PromptArgument::new(name).with_description(description).with_required(true);
        let prompts = vec![
            Prompt::new(
                "work_task",
                Some("Work a task: the task, its steps and comments, and how to work it"),
                Some(vec![argument("task", "The task's key (e.g. TE-15) or id")]),
            )
            .with_title("Work a task"),
            Prompt::new(
                "reply_to",
                Some("Answer a message: the message, its thread and task, and how to reply"),
                Some(vec![argument("message", "The message's id")]),
            )
            .with_title("Reply to a message"),
            Prompt::new(
                "standup",
                Some("A stand-up summary request for one project, with its open tasks"),
                Some(vec![argument("project", "The project's slug")]),
            )
            .with_title("Project stand-up"),
        ];
        ListPromptsResult::with_all_items(prompts).with_ttl_ms(STATIC_LIST_TTL_MS).with_cache_scope(CacheScope::Private)
    }

    pub(super) async fn render_prompt(&self, request: GetPromptRequestParams) -> Result<GetPromptResult, ErrorData> {
        let arguments = request.arguments.unwrap_or_default();
        let required = |name: &str| -> Result<String, ErrorData> {
            match arguments.get(name).and_then(Value::as_str).map(str::trim) {
                Some(value) if !value.is_empty() => Ok(value.to_string()),
                _ => Err(ErrorData::invalid_params(
                    format!("prompt {} needs the argument `{name}`", request.name),
                    Some(json!({ "argument": name })),
                )),
            }
        };
        let (description, text) = match request.name.as_str() {
            "work_task" => {
                let task = required("task")?;
                (format!("Work task {task}"), self.render_work_task(&task).await?)
            }
            "reply_to" => {
                let message = required("message")?;
                (format!("Reply to message {message}"), self.render_reply_to(&message).await?)
            }
            "standup" => {
                let project = required("project")?;
                (format!("Stand-up for project {project}"), self.render_standup(&project).await?)
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!("unknown prompt {other}: prompts/list names the prompts offered"),
                    Some(json!({ "name": other })),
                ));
            }
        };
        Ok(GetPromptResult::new(vec![PromptMessage::new_text(Role::User, text)]).with_description(description))
    }

    async fn render_work_task(&self, task_ref: &str) -> Result<String, ErrorData> {
        let tracker = &self.inner.tracker;
        let task = tracker.get_task(task_ref).await.map_err(tracker_error)?;
        let steps = tracker.list_steps(&task.id).await.map_err(tracker_error)?;
        let query = MessageQuery { task_id: Some(task.id.clone()), limit: Some(50), ..Default::default() };
        let comments = tracker.list_messages(&query).await.map_err(tracker_error)?;
        // Over MCP no assignment event names who assigned it; the task's creator asked for it.
        let fence = Fence::random();
        let vars = TaskAssignedVars {
            task: TaskView::new(&task, &steps, &fence),
            assigned_by: clean_name(&task.created_by),
            comments: comments.iter().map(|comment| MessageView::new(comment, &fence)).collect(),
            // A client over MCP works the task with the tools it has; `plan_subtasks` is a run's.
            propose_breakdown: false,
        };
        self.inner.prompts.task_assigned(&vars).map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }

    async fn render_reply_to(&self, message_id: &str) -> Result<String, ErrorData> {
        let tracker = &self.inner.tracker;
        let message = tracker.get_message(message_id).await.map_err(tracker_error)?;
        let query =
            MessageQuery { parent_id: Some(message.thread_root().to_string()), limit: Some(50), ..Default::default() };
        let thread = tracker.list_messages(&query).await.map_err(tracker_error)?;
        // Earlier messages only: the thread as the author saw it when writing.
        let fence = Fence::random();
        let earlier: Vec<MessageView> = thread
            .iter()
            .take_while(|earlier| earlier.id != message.id)
            .map(|earlier| MessageView::new(earlier, &fence))
            .collect();
        let task = match &message.task_id {
            Some(task_id) => {
                let task = tracker.get_task(task_id).await.map_err(tracker_error)?;
                let steps = tracker.list_steps(&task.id).await.map_err(tracker_error)?;
                Some(TaskView::new(&task, &steps, &fence))
            }
            None => None,
        };
        let vars = MessageNewVars {
            message: MessageView::new(&message, &fence),
            thread: earlier,
            task,
            agent_slug: self.inner.agent_slug.clone(),
        };
        self.inner.prompts.message_new(&vars).map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }

    async fn render_standup(&self, project_slug: &str) -> Result<String, ErrorData> {
        let tracker = &self.inner.tracker;
        let project = tracker.get_project(project_slug).await.map_err(tracker_error)?;
        let fence = Fence::random();
        let mut tasks = Vec::new();
        let mut cursor = None;
        for _ in 0..MAX_STANDUP_PAGES {
            let query = TaskQuery {
                project_id: Some(project.slug.clone()),
                status: Some(OPEN_STATUSES.to_string()),
                limit: Some(200),
                cursor: cursor.take(),
                ..Default::default()
            };
            let page = tracker.list_tasks(&query).await.map_err(tracker_error)?;
            tasks.extend(page.items.iter().map(|task| TaskView::new(task, &[], &fence)));
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        let vars = StandupVars { project_slug: clean_name(&project.slug), tasks };
        self.inner.prompts.standup(&vars).map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }
}

/// A tracker failure while building a prompt, as a protocol error: a missing thing is the
/// caller's to fix (invalid params), anything else is ours (internal).
fn tracker_error(error: TrackerError) -> ErrorData {
    match error {
        TrackerError::NotFound { .. } | TrackerError::Invalid { .. } => {
            ErrorData::invalid_params(error.to_string(), None)
        }
        other => ErrorData::internal_error(other.to_string(), None),
    }
}
