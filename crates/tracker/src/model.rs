//! The tracker's wire shapes, as written in `docs/tracker-api.md`.
//!
//! Answer types (`*Out`) ignore fields they do not know, so a real tracker that sends more still
//! parses. Request bodies refuse unknown fields, so the reference board catches a client that
//! drifts from the contract. Both the client and the reference board use these types: the
//! contract is written down once.

use serde::{Deserialize, Deserializer, Serialize};

/// A member slug: letters, digits, '-' or '_' (also what `picogent state migrate --agent` takes).
pub fn slug_ok(text: &str) -> bool {
    !text.is_empty() && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Backlog,
    Todo,
    InProgress,
    InReview,
    Done,
}

impl TaskStatus {
    pub const ALL: [TaskStatus; 5] =
        [TaskStatus::Backlog, TaskStatus::Todo, TaskStatus::InProgress, TaskStatus::InReview, TaskStatus::Done];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Backlog => "backlog",
            TaskStatus::Todo => "todo",
            TaskStatus::InProgress => "in_progress",
            TaskStatus::InReview => "in_review",
            TaskStatus::Done => "done",
        }
    }

    pub fn parse(text: &str) -> Option<TaskStatus> {
        TaskStatus::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

impl std::fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    Low,
    #[default]
    Medium,
    High,
    Urgent,
}

impl Priority {
    pub const ALL: [Priority; 4] = [Priority::Low, Priority::Medium, Priority::High, Priority::Urgent];

    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Low => "low",
            Priority::Medium => "medium",
            Priority::High => "high",
            Priority::Urgent => "urgent",
        }
    }

    pub fn parse(text: &str) -> Option<Priority> {
        Priority::ALL.into_iter().find(|p| p.as_str() == text)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskType {
    #[default]
    Task,
    Bug,
    Feature,
    Chore,
}

impl TaskType {
    pub const ALL: [TaskType; 4] = [TaskType::Task, TaskType::Bug, TaskType::Feature, TaskType::Chore];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskType::Task => "task",
            TaskType::Bug => "bug",
            TaskType::Feature => "feature",
            TaskType::Chore => "chore",
        }
    }

    pub fn parse(text: &str) -> Option<TaskType> {
        TaskType::ALL.into_iter().find(|t| t.as_str() == text)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MemberKind {
    Human,
    Agent,
}

impl MemberKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MemberKind::Human => "human",
            MemberKind::Agent => "agent",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TaskOut {
    pub id: String,
    pub key: String,
    pub project_slug: String,
    pub title: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(rename = "type", default)]
    pub task_type: TaskType,
    pub status: TaskStatus,
    #[serde(default)]
    pub priority: Priority,
    #[serde(default)]
    pub assignee_slug: Option<String>,
    #[serde(default)]
    pub labels: Vec<String>,
    #[serde(default)]
    pub watchers: Vec<String>,
    #[serde(default)]
    pub created_by: String,
    #[serde(default)]
    pub created_at: String,
    #[serde(default)]
    pub updated_at: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StepOut {
    pub id: String,
    pub task_id: String,
    pub title: String,
    pub done: bool,
    #[serde(default)]
    pub position: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MessageOut {
    pub id: String,
    pub author_slug: String,
    pub content: String,
    #[serde(default)]
    pub chat_id: Option<String>,
    #[serde(default)]
    pub task_id: Option<String>,
    #[serde(default)]
    pub parent_id: Option<String>,
    #[serde(default)]
    pub mentions: Vec<String>,
    #[serde(default)]
    pub created_at: String,
    /// The message this one answers, as its author named it (an extension of the seed design;
    /// `None` when it names none, or the tracker keeps none).
    #[serde(default)]
    pub reply_to: Option<String>,
}

impl MessageOut {
    /// The id of the thread this message belongs to: its parent, or itself when it starts one.
    pub fn thread_root(&self) -> &str {
        self.parent_id.as_deref().unwrap_or(&self.id)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProjectOut {
    pub id: String,
    pub slug: String,
    pub key: String,
    pub name: String,
    pub chat_id: String,
    #[serde(default = "default_true")]
    pub active: bool,
}

fn default_true() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MemberOut {
    pub slug: String,
    pub name: String,
    pub kind: MemberKind,
    #[serde(default)]
    pub status: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AttachmentOut {
    pub id: String,
    pub message_id: String,
    pub filename: String,
    pub mime_type: String,
    pub size: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TaskPage {
    pub items: Vec<TaskOut>,
    #[serde(default)]
    pub next_cursor: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RejectOut {
    pub ok: bool,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WatchOut {
    pub ok: bool,
    pub watchers: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StatusOut {
    pub status: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FileContent {
    pub filename: String,
    /// Base64 of the file's bytes.
    pub content: String,
    pub mime_type: String,
}

/// The error body every failing answer carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub details: serde_json::Value,
}

// ---- request bodies ----

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateTask {
    pub project_slug: String,
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub task_type: Option<TaskType>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Priority>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<TaskStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assignee_slug: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,
}

/// A PATCH of a task. `None` leaves a field as it is; for the nullable fields `Some(None)` (JSON
/// `null`) clears it: `assignee_slug: null` unassigns.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateTask {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, deserialize_with = "double_option", skip_serializing_if = "Option::is_none")]
    pub description: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<TaskStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Priority>,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub task_type: Option<TaskType>,
    #[serde(default, deserialize_with = "double_option", skip_serializing_if = "Option::is_none")]
    pub assignee_slug: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,
}

/// Tells an absent field (`None`) from an explicit `null` (`Some(None)`).
fn double_option<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TakeTask {
    pub agent_slug: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RejectTask {
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AssignTask {
    pub assignee_slug: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchTask {
    pub agent_slug: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddStep {
    pub title: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateStep {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SendMessage {
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mentions: Option<Vec<String>>,
    /// The message this one answers (any message's id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplyMessage {
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mentions: Option<Vec<String>>,
    /// The message this one answers (any message's id); the reply still attaches to the thread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateStatus {
    pub status: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UploadFile {
    pub filename: String,
    /// Base64 of the file's bytes.
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
}

// ---- queries ----

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskQuery {
    /// Project id or slug.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    /// Comma-separated statuses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assignee: Option<String>,
    /// Comma-separated labels; a task must carry all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// A thread: its first message and every reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    /// A member slug: messages that mention it, anywhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mentioning: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Project id or slug.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
}

// ---- events ----

/// One frame of the event stream, as it comes off the wire. `data` stays raw until
/// [`Event::from_envelope`] gives it a type, so an unknown event name is never a parse error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventEnvelope {
    pub id: String,
    pub seq: u64,
    pub event: String,
    #[serde(default)]
    pub data: serde_json::Value,
    #[serde(default)]
    pub ts: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskAssignedData {
    pub task: TaskOut,
    pub assigned_by: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskUnassignedData {
    pub task: TaskOut,
    pub unassigned_by: String,
    pub previous_assignee: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskUpdatedData {
    pub task: TaskOut,
    #[serde(default)]
    pub changed: Vec<String>,
    pub updated_by: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageNewData {
    pub message: MessageOut,
}

pub const EVENT_TASK_ASSIGNED: &str = "task.assigned";
pub const EVENT_TASK_UNASSIGNED: &str = "task.unassigned";
pub const EVENT_TASK_UPDATED: &str = "task.updated";
pub const EVENT_MESSAGE_NEW: &str = "message.new";

/// An event with its data typed. Names this build does not know are `Unknown`, never an error.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    TaskAssigned(TaskAssignedData),
    TaskUnassigned(TaskUnassignedData),
    TaskUpdated(TaskUpdatedData),
    MessageNew(MessageNewData),
    Unknown(String),
}

/// Why an event's data could not be typed. An unknown event name is not one: it becomes
/// [`Event::Unknown`].
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    /// A known event whose data is not of that event's shape.
    #[error("event {name} ({id}) has malformed data: {source}")]
    Malformed { name: String, id: String, source: serde_json::Error },
}

impl Event {
    /// Types the data of a known event. A known name with data of the wrong shape is an error
    /// that says which event and what is wrong.
    pub fn from_envelope(envelope: &EventEnvelope) -> Result<Event, EventError> {
        Event::typed(&envelope.event, &envelope.id, envelope.data.clone())
    }

    fn typed(name: &str, id: &str, data: serde_json::Value) -> Result<Event, EventError> {
        fn typed<T: serde::de::DeserializeOwned>(
            name: &str,
            id: &str,
            data: serde_json::Value,
        ) -> Result<T, EventError> {
            serde_json::from_value(data).map_err(|source| EventError::Malformed {
                name: name.to_string(),
                id: id.to_string(),
                source,
            })
        }
        Ok(match name {
            EVENT_TASK_ASSIGNED => Event::TaskAssigned(typed(name, id, data)?),
            EVENT_TASK_UNASSIGNED => Event::TaskUnassigned(typed(name, id, data)?),
            EVENT_TASK_UPDATED => Event::TaskUpdated(typed(name, id, data)?),
            EVENT_MESSAGE_NEW => Event::MessageNew(typed(name, id, data)?),
            other => Event::Unknown(other.to_string()),
        })
    }
}

/// An event as the agent's stream hands it on: the envelope's fields, with its data typed. The
/// frame is parsed once, into this, at the transport.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedEvent {
    pub id: String,
    pub seq: u64,
    /// The event's name as the tracker sent it (`task.assigned`), also for unknown events.
    pub name: String,
    pub ts: String,
    pub event: Event,
}

impl EventEnvelope {
    /// Types the envelope's data (see [`Event::from_envelope`]), keeping the envelope's fields.
    pub fn into_received(self) -> Result<ReceivedEvent, EventError> {
        let event = Event::typed(&self.event, &self.id, self.data)?;
        Ok(ReceivedEvent { id: self.id, seq: self.seq, name: self.event, ts: self.ts, event })
    }
}

/// Frames the client sends on the event stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientFrame {
    Resume { after_seq: u64 },
    Ping,
}

/// Control frames the server sends besides events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerControl {
    Pong,
    /// Sent after a `resume` has replayed everything logged: the client is caught up.
    Resumed {
        last_seq: u64,
    },
}

/// Length limits of the contract (characters).
pub mod limits {
    pub const TITLE: usize = 200;
    pub const DESCRIPTION: usize = 20_000;
    pub const CONTENT: usize = 20_000;
    pub const REASON: usize = 2_000;
    pub const STATUS: usize = 200;
    pub const LABELS: usize = 20;
    pub const LABEL: usize = 50;
    pub const FILENAME: usize = 255;
    pub const MENTIONS: usize = 50;
    pub const BODY_BYTES: usize = 1024 * 1024;
    pub const FRAME_BYTES: usize = 1024 * 1024;
}
