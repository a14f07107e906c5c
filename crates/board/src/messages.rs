//! Message and attachment routes: project chats, task comments, one-level threads, mentions.
//!
//! Every stored message logs `message.new` for its recipients in the same transaction
//! ([`store_message`]): the whole team for a project chat; the assignee, watchers and creator for
//! a task comment; and always the mentioned members, the author of the thread's first message
//! and the author.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::json;
use sqlx::SqliteConnection;

use crate::BoardState;
use crate::db::{self, AttachmentRow, MessageRow, message_select};
use crate::error::BoardError;
use crate::events::Outbox;
use crate::extract::page_limit;
use crate::extract::{Caller, JsonBody, QueryParams, check_text};
use picogent_tracker::model::{
    AttachmentOut, EVENT_MESSAGE_NEW, FileContent, FileQuery, MessageOut, MessageQuery, ReplyMessage, SendMessage,
    UploadFile, limits,
};

/// A message ready to store: where it goes has been resolved to ids that exist.
#[derive(Debug)]
pub(crate) struct NewMessage {
    pub content: String,
    pub chat_id: Option<String>,
    /// The task's id (not its key).
    pub task_id: Option<String>,
    /// The thread's first message.
    pub parent_id: Option<String>,
    /// Mentions as sent; checked and merged with the `@slug`s of the content here.
    pub mentions: Vec<String>,
    /// The message this one answers, as sent; checked to exist here.
    pub reply_to: Option<String>,
}

/// The `@slug`s in `content` that name one of `members`, as whole words.
pub(crate) fn mentions_in(content: &str, members: &[String]) -> Vec<String> {
    let is_slug_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    let mut found: Vec<String> = Vec::new();
    let mut previous: Option<char> = None;
    for (index, c) in content.char_indices() {
        let starts_word = previous.is_none_or(|p| !(p.is_alphanumeric() || p == '_' || p == '@'));
        if c == '@' && starts_word {
            let rest = &content[index + 1..];
            let end = rest.find(|ch: char| !is_slug_char(ch)).unwrap_or(rest.len());
            // A trailing '-' is punctuation ("@bob-"), not part of the slug.
            let slug = rest[..end].trim_end_matches('-');
            if members.iter().any(|m| m == slug) && !found.iter().any(|f| f == slug) {
                found.push(slug.to_string());
            }
        }
        previous = Some(c);
    }
    found
}

/// Stores a message and logs its `message.new` events, inside the caller's transaction.
pub(crate) async fn store_message(
    conn: &mut SqliteConnection,
    outbox: &mut Outbox,
    author: &str,
    new: NewMessage,
) -> Result<MessageOut, BoardError> {
    let members = db::member_slugs(conn).await?;
    let mut mentions: Vec<String> = Vec::new();
    for slug in new.mentions.iter().chain(mentions_in(&new.content, &members).iter()) {
        if !members.contains(slug) {
            return Err(BoardError::invalid(
                "mentions",
                "slugs of existing members",
                format!("mentions names {slug:?}, who is not a member"),
            ));
        }
        if !mentions.contains(slug) {
            mentions.push(slug.clone());
        }
    }
    if let Some(answered) = &new.reply_to {
        match db::find_message_row(conn, answered).await {
            Ok(_) => {}
            Err(BoardError::NotFound { .. }) => {
                return Err(BoardError::invalid(
                    "reply_to",
                    "the id of an existing message",
                    format!("reply_to names {answered:?}, which is not a message"),
                ));
            }
            Err(error) => return Err(error),
        }
    }
    let message = MessageOut {
        id: db::new_id(),
        author_slug: author.to_string(),
        content: new.content,
        chat_id: new.chat_id,
        task_id: new.task_id,
        parent_id: new.parent_id,
        mentions,
        created_at: db::now(),
        reply_to: new.reply_to,
    };
    sqlx::query(
        "INSERT INTO messages (id, author_slug, content, chat_id, task_id, parent_id, mentions, created_at, reply_to) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )
    .bind(&message.id)
    .bind(&message.author_slug)
    .bind(&message.content)
    .bind(&message.chat_id)
    .bind(&message.task_id)
    .bind(&message.parent_id)
    .bind(serde_json::Value::from(message.mentions.clone()).to_string())
    .bind(&message.created_at)
    .bind(&message.reply_to)
    .execute(&mut *conn)
    .await?;

    let mut recipients: Vec<String> = Vec::new();
    if message.chat_id.is_some() {
        recipients.extend(members.iter().cloned());
    }
    if let Some(task_id) = &message.task_id {
        let task = db::find_task(conn, task_id).await?;
        recipients.extend(task.assignee_slug.iter().cloned());
        recipients.extend(task.watchers.iter().cloned());
        recipients.push(task.created_by.clone());
    }
    recipients.extend(message.mentions.iter().cloned());
    if let Some(parent_id) = &message.parent_id {
        recipients.push(db::find_message_row(conn, parent_id).await?.author_slug);
    }
    recipients.push(message.author_slug.clone());
    outbox.log_to_all(conn, &recipients, EVENT_MESSAGE_NEW, &json!({"message": message})).await?;
    Ok(message)
}

fn check_mentions(mentions: &Option<Vec<String>>) -> Result<Vec<String>, BoardError> {
    let mentions = mentions.clone().unwrap_or_default();
    if mentions.len() > limits::MENTIONS {
        return Err(BoardError::invalid(
            "mentions",
            format!("at most {} slugs", limits::MENTIONS),
            format!("too many mentions: {}", mentions.len()),
        ));
    }
    Ok(mentions)
}

pub(crate) async fn send_message(
    State(state): State<BoardState>,
    caller: Caller,
    JsonBody(body): JsonBody<SendMessage>,
) -> Result<(StatusCode, Json<MessageOut>), BoardError> {
    check_text("content", &body.content, limits::CONTENT)?;
    let mentions = check_mentions(&body.mentions)?;
    let mut tx = db::begin_write(&state.pool).await?;
    let (chat_id, task_id, parent_id) = match (&body.chat_id, &body.task_id, &body.parent_id) {
        (Some(_), Some(_), _) => {
            return Err(BoardError::invalid(
                "task_id",
                "exactly one of chat_id / task_id",
                "send either chat_id or task_id, not both",
            ));
        }
        (None, None, None) => {
            return Err(BoardError::invalid(
                "chat_id",
                "exactly one of chat_id / task_id (or parent_id alone)",
                "say where the message goes: chat_id, task_id or parent_id",
            ));
        }
        (chat_id, task_id, Some(parent_id)) => {
            let root = thread_root(&mut tx, parent_id).await?;
            if chat_id.is_some() && chat_id != &root.chat_id {
                return Err(BoardError::invalid("chat_id", "the chat of the thread", "the thread is not in this chat"));
            }
            if let Some(task) = task_id {
                let task = db::find_task_row(&mut tx, task).await?;
                if Some(&task.id) != root.task_id.as_ref() {
                    return Err(BoardError::invalid(
                        "task_id",
                        "the task of the thread",
                        "the thread is not on this task",
                    ));
                }
            }
            (root.chat_id, root.task_id, Some(root.id))
        }
        (Some(chat_id), None, None) => (Some(db::project_of_chat(&mut tx, chat_id).await?.chat_id), None, None),
        (None, Some(task), None) => (None, Some(db::find_task_row(&mut tx, task).await?.id), None),
    };
    let new = NewMessage { content: body.content, chat_id, task_id, parent_id, mentions, reply_to: body.reply_to };
    let mut outbox = Outbox::default();
    let message = store_message(&mut tx, &mut outbox, &caller.slug, new).await?;
    tx.commit().await?;
    state.hub.poke(&outbox.members);
    Ok((StatusCode::CREATED, Json(message)))
}

/// The first message of the thread `message_id` belongs to (threads are one level deep).
async fn thread_root(conn: &mut SqliteConnection, message_id: &str) -> Result<MessageRow, BoardError> {
    let message = db::find_message_row(conn, message_id).await?;
    match &message.parent_id {
        Some(root) => db::find_message_row(conn, root).await,
        None => Ok(message),
    }
}

pub(crate) async fn reply_message(
    State(state): State<BoardState>,
    caller: Caller,
    Path(parent_id): Path<String>,
    JsonBody(body): JsonBody<ReplyMessage>,
) -> Result<(StatusCode, Json<MessageOut>), BoardError> {
    check_text("content", &body.content, limits::CONTENT)?;
    let mentions = check_mentions(&body.mentions)?;
    let mut tx = db::begin_write(&state.pool).await?;
    let root = thread_root(&mut tx, &parent_id).await?;
    let new = NewMessage {
        content: body.content,
        chat_id: root.chat_id,
        task_id: root.task_id,
        parent_id: Some(root.id),
        mentions,
        reply_to: body.reply_to,
    };
    let mut outbox = Outbox::default();
    let message = store_message(&mut tx, &mut outbox, &caller.slug, new).await?;
    tx.commit().await?;
    state.hub.poke(&outbox.members);
    Ok((StatusCode::CREATED, Json(message)))
}

pub(crate) async fn get_message(
    State(state): State<BoardState>,
    _caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<MessageOut>, BoardError> {
    let mut conn = state.pool.acquire().await?;
    Ok(Json(MessageOut::try_from(db::find_message_row(&mut conn, &id).await?)?))
}

/// Refuses a query that names not exactly one of its alternatives.
fn exactly_one(given: &[(&str, bool)], expected: &str) -> Result<(), BoardError> {
    let named: Vec<&str> = given.iter().filter(|(_, present)| *present).map(|(name, _)| *name).collect();
    match named.as_slice() {
        [_] => Ok(()),
        [] => Err(BoardError::invalid(given[0].0, expected, format!("give one of: {expected}"))),
        [_, second, ..] => Err(BoardError::invalid(second, expected, format!("give only one of: {expected}"))),
    }
}

macro_rules! message_filter {
    () => {
        concat!(
            " WHERE (?1 IS NULL OR chat_id = ?1) AND (?2 IS NULL OR task_id = ?2)",
            " AND (?3 IS NULL OR id = ?3 OR parent_id = ?3)",
            " AND (?4 IS NULL OR EXISTS (SELECT 1 FROM json_each(messages.mentions) WHERE json_each.value = ?4))",
            " AND (?5 IS NULL OR row < ?5) AND (?6 IS NULL OR row > ?6)"
        )
    };
}

pub(crate) async fn list_messages(
    State(state): State<BoardState>,
    _caller: Caller,
    QueryParams(query): QueryParams<MessageQuery>,
) -> Result<Json<Vec<MessageOut>>, BoardError> {
    exactly_one(
        &[
            ("chat_id", query.chat_id.is_some()),
            ("task_id", query.task_id.is_some()),
            ("parent_id", query.parent_id.is_some()),
            ("mentioning", query.mentioning.is_some()),
        ],
        "chat_id, task_id, parent_id or mentioning",
    )?;
    let limit = page_limit(query.limit)?;
    let mut conn = state.pool.acquire().await?;
    let chat_id = match &query.chat_id {
        Some(chat_id) => Some(db::project_of_chat(&mut conn, chat_id).await?.chat_id),
        None => None,
    };
    let task_id = match &query.task_id {
        Some(task) => Some(state.task_ids.resolve(&mut conn, task).await?),
        None => None,
    };
    let thread_id = match &query.parent_id {
        Some(parent) => Some(thread_root(&mut conn, parent).await?.id),
        None => None,
    };
    let mentioning = match &query.mentioning {
        Some(slug) => Some(db::find_member(&mut conn, slug).await?.slug),
        None => None,
    };
    let before_row = match &query.before {
        Some(id) => Some(db::find_message_row(&mut conn, id).await?.row),
        None => None,
    };
    let after_row = match &query.after {
        Some(id) => Some(db::find_message_row(&mut conn, id).await?.row),
        None => None,
    };
    // With `before`, or with no bound at all, the newest `limit` are wanted; otherwise the
    // oldest `limit` after `after`. Either way the answer is oldest first.
    let newest_first = before_row.is_some() || after_row.is_none();
    let sql = if newest_first {
        concat!(message_select!(), message_filter!(), " ORDER BY row DESC LIMIT ?7")
    } else {
        concat!(message_select!(), message_filter!(), " ORDER BY row ASC LIMIT ?7")
    };
    let mut rows: Vec<MessageRow> = sqlx::query_as(sql)
        .bind(chat_id)
        .bind(task_id)
        .bind(thread_id)
        .bind(mentioning)
        .bind(before_row)
        .bind(after_row)
        .bind(i64::from(limit))
        .fetch_all(&mut *conn)
        .await?;
    if newest_first {
        rows.reverse();
    }
    Ok(Json(rows.into_iter().map(MessageOut::try_from).collect::<Result<_, _>>()?))
}

pub(crate) async fn upload_file(
    State(state): State<BoardState>,
    _caller: Caller,
    Path(message_id): Path<String>,
    JsonBody(body): JsonBody<UploadFile>,
) -> Result<(StatusCode, Json<AttachmentOut>), BoardError> {
    check_text("filename", &body.filename, limits::FILENAME)?;
    let mime_type = body.mime_type.unwrap_or_else(|| "application/octet-stream".to_string());
    check_text("mime_type", &mime_type, 255)?;
    let bytes = BASE64.decode(body.content.trim()).map_err(|e| {
        BoardError::invalid("content", "the file's bytes in base64", format!("content is not base64: {e}"))
    })?;
    let mut tx = db::begin_write(&state.pool).await?;
    let message = db::find_message_row(&mut tx, &message_id).await?;
    let attachment = AttachmentOut {
        id: db::new_id(),
        message_id: message.id,
        filename: body.filename,
        mime_type,
        size: bytes.len() as u64,
    };
    sqlx::query(
        "INSERT INTO attachments (id, message_id, filename, mime_type, size, content) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )
    .bind(&attachment.id)
    .bind(&attachment.message_id)
    .bind(&attachment.filename)
    .bind(&attachment.mime_type)
    .bind(bytes.len() as i64)
    .bind(bytes)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok((StatusCode::CREATED, Json(attachment)))
}

pub(crate) async fn list_files(
    State(state): State<BoardState>,
    _caller: Caller,
    QueryParams(query): QueryParams<FileQuery>,
) -> Result<Json<Vec<AttachmentOut>>, BoardError> {
    exactly_one(
        &[
            ("task_id", query.task_id.is_some()),
            ("project_id", query.project_id.is_some()),
            ("message_id", query.message_id.is_some()),
        ],
        "task_id, project_id or message_id",
    )?;
    let mut conn = state.pool.acquire().await?;
    let rows: Vec<AttachmentRow> = if let Some(task) = &query.task_id {
        let task = db::find_task_row(&mut conn, task).await?;
        sqlx::query_as(
            "SELECT id, message_id, filename, mime_type, size FROM attachments \
             WHERE message_id IN (SELECT id FROM messages WHERE task_id = ?1) ORDER BY row",
        )
        .bind(task.id)
        .fetch_all(&mut *conn)
        .await?
    } else if let Some(project) = &query.project_id {
        let project = db::find_project(&mut conn, project).await?;
        sqlx::query_as(
            "SELECT id, message_id, filename, mime_type, size FROM attachments WHERE message_id IN \
             (SELECT id FROM messages WHERE chat_id = ?1 OR task_id IN (SELECT id FROM tasks WHERE project_id = ?2)) \
             ORDER BY row",
        )
        .bind(project.chat_id)
        .bind(project.id)
        .fetch_all(&mut *conn)
        .await?
    } else {
        let message_id = query.message_id.as_deref().unwrap_or_default();
        let message = db::find_message_row(&mut conn, message_id).await?;
        sqlx::query_as(
            "SELECT id, message_id, filename, mime_type, size FROM attachments WHERE message_id = ?1 ORDER BY row",
        )
        .bind(message.id)
        .fetch_all(&mut *conn)
        .await?
    };
    Ok(Json(rows.into_iter().map(AttachmentOut::from).collect()))
}

pub(crate) async fn download_file(
    State(state): State<BoardState>,
    _caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<FileContent>, BoardError> {
    let row: Option<(String, String, Vec<u8>)> =
        sqlx::query_as("SELECT filename, mime_type, content FROM attachments WHERE id = ?1")
            .bind(&id)
            .fetch_optional(&state.pool)
            .await?;
    let (filename, mime_type, content) = row.ok_or_else(|| BoardError::not_found("attachment", &id))?;
    Ok(Json(FileContent { filename, content: BASE64.encode(content), mime_type }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_whole_word_mentions_of_members() {
        let members = vec!["alice".to_string(), "bob".to_string(), "pico-gent".to_string()];
        let cases: &[(&str, &[&str])] = &[
            ("hi @alice", &["alice"]),
            ("@bob, and @alice.", &["bob", "alice"]),
            ("mail x@alice.org", &[]),
            ("@alicex is not alice", &[]),
            ("@pico-gent- please", &["pico-gent"]),
            ("@carol is no member", &[]),
            ("(@bob) @bob", &["bob"]),
        ];
        for (content, expected) in cases {
            assert_eq!(mentions_in(content, &members), expected.to_vec(), "{content}");
        }
    }
}
