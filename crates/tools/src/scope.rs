//! A run's scope: how far the writes of a task or chat run may reach (`permissions.scope`).
//!
//! Each tracker tool says what a call would change ([`Target`], from its checked arguments,
//! `TrackerTool::target` in the kernel); [`judge`] resolves that
//! target through the tracker (a task named by key or by id, a message's thread, a chat's
//! project) against the run's own task or thread, and answers the smallest [`RunScope`] that
//! allows the call. The permission policy compares it with the scope in force.
//!
//! Invariants:
//! - a task run may change its own task (fields, status, steps, watchers, comments) and post in
//!   its comments; it may hand its task back to the person who created it (a human member), to
//!   itself, or to no one; a chat run may reply in its own thread. Everything else that writes
//!   is out of the `run` scope: another task, another thread or chat, a new task, an assignment
//!   to anyone else, a tool that cannot say what it touches;
//! - a task run's own task grows by exactly its sub-tasks: a task labelled `parent:{its key}`
//!   that the agent itself created (`plan_subtasks` makes them) is within the `run` scope as
//!   its own task is; a label alone, which anyone can write, widens nothing;
//! - reads are never judged; a context without a run (`session` unset, or a prompt given by a
//!   person over MCP or the command line) is not scoped;
//! - a target the tracker does not know is in scope: the call does nothing, and the tool's own
//!   error tells the model so.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::RunScope;
use crate::{PostPlace, ToolContext};
use picogent_tracker::model::{MemberKind, TaskOut};
use picogent_tracker::session::SessionKey;
use picogent_tracker::{TrackerClient, TrackerError};

/// What a write call would change, as the tool that makes it says from its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Nothing on the board but the agent itself (its own status).
    Nothing,
    /// A task (by key or id): its fields, status, steps or watchers; `assignee` when the call
    /// sets who it is assigned to (`Some(None)`: no one).
    Task { task: String, assignee: Option<Option<String>> },
    /// A new message.
    Post(PostPlace),
    /// Something attached to an existing message (a file).
    Message { message_id: String },
    /// A new task in a project (by slug).
    NewTask { project: String },
    /// The tool cannot say: only `scope: any` lets it run.
    Unknown,
}

/// The place a run was started for: what it may change in the `run` scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunPlace {
    /// A task run: the task's id.
    Task(String),
    /// A chat run: its thread's first message.
    Thread(String),
}

impl RunPlace {
    /// What a run here may change, in words; `task` is its task when known.
    pub fn describe(&self, task: Option<&TaskOut>) -> String {
        match (self, task) {
            (RunPlace::Task(_), Some(task)) => format!("change its own task {} and post in its comments", task.key),
            (RunPlace::Task(_), None) => "change its own task and post in its comments".to_string(),
            (RunPlace::Thread(_), _) => "reply in its own thread".to_string(),
        }
    }

    /// The run's place, `None` where no run is scoped (the MCP server, the command line, a prompt,
    /// a scheduled job's run: each is the operator's own request, as configured).
    pub fn of(context: &ToolContext) -> Option<RunPlace> {
        match context.session.as_ref()? {
            SessionKey::Task(id) => Some(RunPlace::Task(id.clone())),
            SessionKey::Thread(root) => Some(RunPlace::Thread(root.clone())),
            SessionKey::Prompt(_) | SessionKey::Schedule(_) => None,
        }
    }
}

/// How far a call reaches, and what it would do in words a person and the model read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judgement {
    /// The smallest scope that allows the call.
    pub reach: RunScope,
    /// "change task SE-1 (project `sales`)", empty when the call stays within the run.
    pub what: String,
    /// Why it is beyond the run when the words above do not say, or empty: " (a run may hand its
    /// task back only to @alice, who created it)".
    pub note: String,
    /// What the run may do instead: "change its own task TE-3 and post in its comments".
    pub run: String,
}

impl Judgement {
    pub fn within_run() -> Judgement {
        Judgement { reach: RunScope::Run, what: String::new(), note: String::new(), run: String::new() }
    }

    /// A call reaching `reach`, doing `what`, from the run at `place`.
    pub fn beyond_run(reach: RunScope, what: String, place: &RunPlace) -> Judgement {
        Judgement { reach, what, note: String::new(), run: place.describe(None) }
    }
}

/// Why a source could not judge how far a call reaches ([`crate::ToolSource::reach`]). The
/// policy refuses the call then, and the model reads this text: a scope that cannot be checked
/// does not hold.
#[derive(Debug, thiserror::Error)]
pub enum ReachError {
    /// The tracker could not be asked what the call `name` would change.
    #[error(
        "cannot check what `{name}` would change ({source}); a write outside this run is not made unchecked, try again later"
    )]
    Tracker { name: String, source: TrackerError },
}

/// Whether the run's one notice about refused calls was posted (shared by every clone of a run's
/// [`ToolContext`]).
#[derive(Debug, Clone, Default)]
pub struct NoticeOnce(Arc<AtomicBool>);

impl NoticeOnce {
    /// True the first time only.
    pub fn first(&self) -> bool {
        !self.0.swap(true, Ordering::SeqCst)
    }
}

/// What the run was started for, resolved once per judgement.
struct Own {
    place: RunPlace,
    task: Option<TaskOut>,
    /// The project of the run's task or chat; `None` for a chat of no project.
    project: Option<String>,
}

async fn own(place: &RunPlace, client: &TrackerClient) -> Result<Own, TrackerError> {
    match place {
        RunPlace::Task(id) => {
            let task = client.get_task(id).await?;
            Ok(Own { place: place.clone(), project: Some(task.project_slug.clone()), task: Some(task) })
        }
        RunPlace::Thread(root) => {
            let message = client.get_message(root).await?;
            let project = project_of_message(&message, client).await?;
            Ok(Own { place: place.clone(), task: None, project })
        }
    }
}

async fn project_of_chat(chat_id: &str, client: &TrackerClient) -> Result<Option<String>, TrackerError> {
    Ok(client.list_projects().await?.into_iter().find(|p| p.chat_id == chat_id).map(|p| p.slug))
}

async fn project_of_message(
    message: &picogent_tracker::model::MessageOut,
    client: &TrackerClient,
) -> Result<Option<String>, TrackerError> {
    if let Some(task) = &message.task_id {
        return Ok(Some(client.get_task(task).await?.project_slug));
    }
    match &message.chat_id {
        Some(chat) => project_of_chat(chat, client).await,
        None => Ok(None),
    }
}

impl Own {
    fn is_own_task(&self, task: &TaskOut) -> bool {
        self.task.as_ref().is_some_and(|own| own.id == task.id)
    }

    /// Whether `task` is the run's own task or one of its sub-tasks: labelled `parent:{own
    /// key}` and created by the agent (`agent_slug`), as `plan_subtasks` makes them.
    fn is_own_tree(&self, task: &TaskOut, agent_slug: &str) -> bool {
        self.is_own_task(task)
            || self.task.as_ref().is_some_and(|own| {
                task.created_by == agent_slug && task.labels.contains(&picogent_tracker::tree::parent_label(&own.key))
            })
    }

    fn same_project(&self, project: Option<&str>) -> bool {
        project.is_some() && self.project.as_deref() == project
    }

    /// Project scope when the thing is in the run's project, any otherwise.
    fn beyond(&self, project: Option<&str>, what: String) -> Judgement {
        let reach = if self.same_project(project) { RunScope::Project } else { RunScope::Any };
        self.reach(reach, what)
    }

    fn reach(&self, reach: RunScope, what: String) -> Judgement {
        Judgement { reach, what, note: String::new(), run: self.place.describe(self.task.as_ref()) }
    }
}

/// How far `target` reaches from the run of `context`. `Err` only when the tracker cannot be
/// asked (the caller refuses the call then: a scope that cannot be checked does not hold).
pub async fn judge(target: &Target, context: &ToolContext, client: &TrackerClient) -> Result<Judgement, TrackerError> {
    let Some(place) = RunPlace::of(context) else { return Ok(Judgement::within_run()) };
    if *target == Target::Nothing {
        return Ok(Judgement::within_run());
    }
    let own = own(&place, client).await?;
    let found = |result: Result<Judgement, TrackerError>| match result {
        Err(TrackerError::NotFound { .. }) => Ok(Judgement::within_run()),
        other => other,
    };
    match target {
        Target::Nothing => Ok(Judgement::within_run()),
        Target::Unknown => Ok(own.reach(RunScope::Any, "make a change the tool cannot name".to_string())),
        Target::Task { task, assignee } => found(judge_task(&own, task, assignee.as_ref(), context, client).await),
        Target::NewTask { project } => {
            Ok(own.beyond(Some(project), format!("create a new task in project `{project}`")))
        }
        Target::Post(PostPlace::Task { task_id }) => found(judge_task_post(&own, task_id, context, client).await),
        Target::Post(PostPlace::Reply { parent_id }) | Target::Message { message_id: parent_id } => {
            found(judge_reply(&own, parent_id, context, client).await)
        }
        Target::Post(PostPlace::Chat { chat_id }) => {
            let project = project_of_chat(chat_id, client).await?;
            let what = match &project {
                Some(project) => format!("post a new message in the chat of project `{project}`"),
                None => format!("post a new message in chat {chat_id}"),
            };
            Ok(own.beyond(project.as_deref(), what))
        }
    }
}

async fn judge_task(
    own: &Own,
    task: &str,
    assignee: Option<&Option<String>>,
    context: &ToolContext,
    client: &TrackerClient,
) -> Result<Judgement, TrackerError> {
    let task = client.get_task(task).await?;
    if !own.is_own_tree(&task, &context.agent_slug) {
        return Ok(
            own.beyond(Some(&task.project_slug), format!("change task {} (project `{}`)", task.key, task.project_slug))
        );
    }
    match assignee {
        None | Some(None) => Ok(Judgement::within_run()),
        Some(Some(slug)) if *slug == context.agent_slug => Ok(Judgement::within_run()),
        Some(Some(slug)) => {
            let back_to_creator = *slug == task.created_by
                && client.get_member(slug).await.map(|m| m.kind == MemberKind::Human).unwrap_or(false);
            if back_to_creator {
                Ok(Judgement::within_run())
            } else {
                let creator = if task.created_by.is_empty() {
                    "its creator".to_string()
                } else {
                    format!("@{}", task.created_by)
                };
                let mut judgement = own.reach(RunScope::Project, format!("assign task {} to @{slug}", task.key));
                judgement.note = format!(" (a run may hand its task back only to {creator}, who created it)");
                Ok(judgement)
            }
        }
    }
}

async fn judge_task_post(
    own: &Own,
    task: &str,
    context: &ToolContext,
    client: &TrackerClient,
) -> Result<Judgement, TrackerError> {
    let task = client.get_task(task).await?;
    if own.is_own_tree(&task, &context.agent_slug) {
        return Ok(Judgement::within_run());
    }
    Ok(own.beyond(Some(&task.project_slug), format!("post on task {} (project `{}`)", task.key, task.project_slug)))
}

async fn judge_reply(
    own: &Own,
    message_id: &str,
    context: &ToolContext,
    client: &TrackerClient,
) -> Result<Judgement, TrackerError> {
    let message = client.get_message(message_id).await?;
    let within = match (&own.place, &own.task, &message.task_id) {
        (RunPlace::Thread(root), _, _) => message.thread_root() == root || message.id == *root,
        (RunPlace::Task(_), Some(task), Some(on)) if *on == task.id || *on == task.key => true,
        // A reply on a sub-task of the run's task.
        (RunPlace::Task(_), Some(_), Some(on)) => own.is_own_tree(&client.get_task(on).await?, &context.agent_slug),
        (RunPlace::Task(_), _, _) => false,
    };
    if within {
        return Ok(Judgement::within_run());
    }
    let project = project_of_message(&message, client).await?;
    let place = match (&message.task_id, &project) {
        (Some(_), Some(project)) => format!("the comments of a task in project `{project}`"),
        (None, Some(project)) => format!("a thread in the chat of project `{project}`"),
        _ => "another conversation".to_string(),
    };
    Ok(own.beyond(project.as_deref(), format!("write in {place}, outside this run's thread")))
}
