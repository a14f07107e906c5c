//! The board's SQLite store: opening it, and reading rows into the contract's answer types.
//!
//! Writes run in `BEGIN IMMEDIATE` transactions ([`begin_write`]): SQLite then serialises
//! writers up front (waiting up to the busy timeout) instead of failing a transaction that read
//! first and wrote later. Every function here takes a connection, so the same code serves a
//! plain read and a step inside a write transaction.

use std::path::Path;

use sqlx::{SqliteConnection, SqlitePool, Transaction};

use crate::error::BoardError;
use picogent_tracker::model::{
    AttachmentOut, MemberKind, MemberOut, MessageOut, Priority, ProjectOut, StepOut, TaskOut, TaskStatus, TaskType,
};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/board");

/// Opens (creating if missing, `0600` in a `0700` folder) the database ([`picogent_support::sqlite::open`])
/// and runs the embedded migrations.
pub(crate) async fn open(path: &Path) -> anyhow::Result<SqlitePool> {
    picogent_support::sqlite::open(path, 8, &MIGRATOR).await.map_err(|error| match error {
        // The board's database holds every member's token: only its user may read it.
        picogent_support::sqlite::OpenError::Private(source) => {
            anyhow::Error::new(source).context(format!("cannot open the board database {}", path.display()))
        }
        picogent_support::sqlite::OpenError::Connect(source) => {
            anyhow::Error::new(source).context(format!("cannot open the board database {}", path.display()))
        }
        picogent_support::sqlite::OpenError::Migrate(source) => {
            anyhow::Error::new(source).context(format!("cannot migrate the board database {}", path.display()))
        }
    })
}

/// Starts a write transaction that holds SQLite's write lock from its first statement.
pub(crate) async fn begin_write(pool: &SqlitePool) -> Result<Transaction<'static, sqlx::Sqlite>, BoardError> {
    Ok(pool.begin_with("BEGIN IMMEDIATE").await?)
}

/// The current time as RFC 3339 in UTC, the contract's timestamp format.
pub(crate) fn now() -> String {
    let now = time::OffsetDateTime::now_utc();
    now.format(&time::format_description::well_known::Rfc3339).unwrap_or_else(|_| now.unix_timestamp().to_string())
}

pub(crate) fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

fn corrupt(what: &str, value: &str) -> BoardError {
    BoardError::Internal(format!("the database holds an unknown {what} {value:?}"))
}

fn json_list(text: &str) -> Result<Vec<String>, BoardError> {
    serde_json::from_str(text).map_err(|e| BoardError::Internal(format!("a stored list is not JSON: {e}")))
}

// ---- projects ----

#[derive(Debug, sqlx::FromRow)]
struct ProjectRow {
    id: String,
    slug: String,
    key: String,
    name: String,
    chat_id: String,
    active: bool,
}

impl From<ProjectRow> for ProjectOut {
    fn from(row: ProjectRow) -> ProjectOut {
        ProjectOut {
            id: row.id,
            slug: row.slug,
            key: row.key,
            name: row.name,
            chat_id: row.chat_id,
            active: row.active,
        }
    }
}

pub(crate) async fn list_projects(conn: &mut SqliteConnection) -> Result<Vec<ProjectOut>, BoardError> {
    let rows: Vec<ProjectRow> =
        sqlx::query_as("SELECT id, slug, key, name, chat_id, active FROM projects ORDER BY slug")
            .fetch_all(conn)
            .await?;
    Ok(rows.into_iter().map(ProjectOut::from).collect())
}

/// A project by slug or id.
pub(crate) async fn find_project(conn: &mut SqliteConnection, slug_or_id: &str) -> Result<ProjectOut, BoardError> {
    let row: Option<ProjectRow> =
        sqlx::query_as("SELECT id, slug, key, name, chat_id, active FROM projects WHERE slug = ?1 OR id = ?1")
            .bind(slug_or_id)
            .fetch_optional(conn)
            .await?;
    row.map(ProjectOut::from).ok_or_else(|| BoardError::not_found("project", slug_or_id))
}

/// The project whose chat has this id.
pub(crate) async fn project_of_chat(conn: &mut SqliteConnection, chat_id: &str) -> Result<ProjectOut, BoardError> {
    let row: Option<ProjectRow> =
        sqlx::query_as("SELECT id, slug, key, name, chat_id, active FROM projects WHERE chat_id = ?1")
            .bind(chat_id)
            .fetch_optional(conn)
            .await?;
    row.map(ProjectOut::from).ok_or_else(|| BoardError::not_found("chat", chat_id))
}

// ---- members ----

#[derive(Debug, sqlx::FromRow)]
struct MemberRow {
    slug: String,
    name: String,
    kind: String,
    status: String,
}

impl TryFrom<MemberRow> for MemberOut {
    type Error = BoardError;
    fn try_from(row: MemberRow) -> Result<MemberOut, BoardError> {
        let kind = match row.kind.as_str() {
            "human" => MemberKind::Human,
            "agent" => MemberKind::Agent,
            other => return Err(corrupt("member kind", other)),
        };
        Ok(MemberOut { slug: row.slug, name: row.name, kind, status: row.status })
    }
}

pub(crate) async fn list_members(conn: &mut SqliteConnection) -> Result<Vec<MemberOut>, BoardError> {
    let rows: Vec<MemberRow> =
        sqlx::query_as("SELECT slug, name, kind, status FROM members ORDER BY slug").fetch_all(conn).await?;
    rows.into_iter().map(MemberOut::try_from).collect()
}

pub(crate) async fn find_member(conn: &mut SqliteConnection, slug: &str) -> Result<MemberOut, BoardError> {
    let row: Option<MemberRow> = sqlx::query_as("SELECT slug, name, kind, status FROM members WHERE slug = ?1")
        .bind(slug)
        .fetch_optional(conn)
        .await?;
    row.map(MemberOut::try_from).transpose()?.ok_or_else(|| BoardError::not_found("member", slug))
}

pub(crate) async fn member_slugs(conn: &mut SqliteConnection) -> Result<Vec<String>, BoardError> {
    Ok(sqlx::query_scalar("SELECT slug FROM members ORDER BY slug").fetch_all(conn).await?)
}

// ---- tasks ----

/// A task as stored, plus its insertion `row` (the list cursor).
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct TaskRow {
    pub row: i64,
    pub id: String,
    pub key: String,
    pub project_slug: String,
    pub title: String,
    pub description: Option<String>,
    #[sqlx(rename = "type")]
    pub task_type: String,
    pub status: String,
    pub priority: String,
    pub assignee_slug: Option<String>,
    pub labels: String,
    pub created_by: String,
    pub created_at: String,
    pub updated_at: String,
    /// The watchers' slugs as a JSON array, in the order they started watching.
    pub watchers: String,
}

/// A task with its project's slug and its watchers, in one statement (a read is one round trip
/// to the SQLite worker, not one per task and another for its watchers).
macro_rules! task_select {
    () => {
        "SELECT t.row, t.id, t.key, t.project_id, p.slug AS project_slug, t.title, t.description, t.type, \
         t.status, t.priority, t.assignee_slug, t.labels, t.created_by, t.created_at, t.updated_at, \
         (SELECT json_group_array(member_slug) FROM \
           (SELECT w.member_slug FROM task_watchers w WHERE w.task_id = t.id ORDER BY w.row)) AS watchers \
         FROM tasks t JOIN projects p ON p.id = t.project_id"
    };
}
pub(crate) use task_select;

/// A task by id or key (`TE-15`).
pub(crate) async fn find_task_row(conn: &mut SqliteConnection, id_or_key: &str) -> Result<TaskRow, BoardError> {
    let row: Option<TaskRow> = sqlx::query_as(concat!(task_select!(), " WHERE t.id = ?1 OR t.key = ?1"))
        .bind(id_or_key)
        .fetch_optional(conn)
        .await?;
    row.ok_or_else(|| BoardError::not_found("task", id_or_key))
}

pub(crate) async fn find_task(conn: &mut SqliteConnection, id_or_key: &str) -> Result<TaskOut, BoardError> {
    task_out(find_task_row(conn, id_or_key).await?)
}

pub(crate) async fn watchers(conn: &mut SqliteConnection, task_id: &str) -> Result<Vec<String>, BoardError> {
    Ok(sqlx::query_scalar("SELECT member_slug FROM task_watchers WHERE task_id = ?1 ORDER BY row")
        .bind(task_id)
        .fetch_all(conn)
        .await?)
}

/// Builds the answer for a stored task.
pub(crate) fn task_out(row: TaskRow) -> Result<TaskOut, BoardError> {
    Ok(TaskOut {
        task_type: TaskType::parse(&row.task_type).ok_or_else(|| corrupt("task type", &row.task_type))?,
        status: TaskStatus::parse(&row.status).ok_or_else(|| corrupt("task status", &row.status))?,
        priority: Priority::parse(&row.priority).ok_or_else(|| corrupt("priority", &row.priority))?,
        labels: json_list(&row.labels)?,
        id: row.id,
        key: row.key,
        project_slug: row.project_slug,
        title: row.title,
        description: row.description,
        assignee_slug: row.assignee_slug,
        watchers: json_list(&row.watchers)?,
        created_by: row.created_by,
        created_at: row.created_at,
        updated_at: row.updated_at,
    })
}

// ---- steps ----

#[derive(Debug, sqlx::FromRow)]
struct StepRow {
    id: String,
    task_id: String,
    title: String,
    done: bool,
    position: i64,
}

impl From<StepRow> for StepOut {
    fn from(row: StepRow) -> StepOut {
        StepOut { id: row.id, task_id: row.task_id, title: row.title, done: row.done, position: row.position }
    }
}

pub(crate) async fn list_steps(conn: &mut SqliteConnection, task_id: &str) -> Result<Vec<StepOut>, BoardError> {
    let rows: Vec<StepRow> =
        sqlx::query_as("SELECT id, task_id, title, done, position FROM steps WHERE task_id = ?1 ORDER BY position")
            .bind(task_id)
            .fetch_all(conn)
            .await?;
    Ok(rows.into_iter().map(StepOut::from).collect())
}

pub(crate) async fn find_step(
    conn: &mut SqliteConnection,
    task_id: &str,
    step_id: &str,
) -> Result<StepOut, BoardError> {
    let row: Option<StepRow> =
        sqlx::query_as("SELECT id, task_id, title, done, position FROM steps WHERE task_id = ?1 AND id = ?2")
            .bind(task_id)
            .bind(step_id)
            .fetch_optional(conn)
            .await?;
    row.map(StepOut::from).ok_or_else(|| BoardError::not_found("step", step_id))
}

// ---- messages ----

#[derive(Debug, sqlx::FromRow)]
pub struct MessageRow {
    pub row: i64,
    pub id: String,
    pub author_slug: String,
    pub content: String,
    pub chat_id: Option<String>,
    pub task_id: Option<String>,
    pub parent_id: Option<String>,
    pub mentions: String,
    pub created_at: String,
    pub reply_to: Option<String>,
}

impl TryFrom<MessageRow> for MessageOut {
    type Error = BoardError;
    fn try_from(row: MessageRow) -> Result<MessageOut, BoardError> {
        Ok(MessageOut {
            mentions: json_list(&row.mentions)?,
            id: row.id,
            author_slug: row.author_slug,
            content: row.content,
            chat_id: row.chat_id,
            task_id: row.task_id,
            parent_id: row.parent_id,
            created_at: row.created_at,
            reply_to: row.reply_to,
        })
    }
}

macro_rules! message_select {
    () => {
        "SELECT row, id, author_slug, content, chat_id, task_id, parent_id, mentions, created_at, reply_to FROM messages"
    };
}
pub(crate) use message_select;

pub(crate) async fn find_message_row(conn: &mut SqliteConnection, id: &str) -> Result<MessageRow, BoardError> {
    let row: Option<MessageRow> =
        sqlx::query_as(concat!(message_select!(), " WHERE id = ?1")).bind(id).fetch_optional(conn).await?;
    row.ok_or_else(|| BoardError::not_found("message", id))
}

// ---- attachments ----

#[derive(Debug, sqlx::FromRow)]
pub struct AttachmentRow {
    pub id: String,
    pub message_id: String,
    pub filename: String,
    pub mime_type: String,
    pub size: i64,
}

impl From<AttachmentRow> for AttachmentOut {
    fn from(row: AttachmentRow) -> AttachmentOut {
        AttachmentOut {
            id: row.id,
            message_id: row.message_id,
            filename: row.filename,
            mime_type: row.mime_type,
            size: u64::try_from(row.size).unwrap_or(0),
        }
    }
}
