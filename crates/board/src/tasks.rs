//! Task routes: list, read, create, update, take, reject, assign, watch.
//!
//! Every change that moves a task between members logs the events of the contract in the same
//! transaction ([`announce_change`]): `task.unassigned` to the previous assignee,
//! `task.assigned` to the new one, and `task.updated` to the assignee and watchers when anything
//! besides the assignee changed.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::json;
use sqlx::SqliteConnection;

use crate::BoardState;
use crate::db::{self, TaskRow, task_select};
use crate::error::BoardError;
use crate::events::Outbox;
use crate::extract::page_limit;
use crate::extract::{Caller, JsonBody, QueryParams, check_labels, check_length, check_text};
use crate::messages::{NewMessage, store_message};
use picogent_tracker::model::{
    AssignTask, CreateTask, EVENT_TASK_ASSIGNED, EVENT_TASK_UNASSIGNED, EVENT_TASK_UPDATED, RejectOut, RejectTask,
    TakeTask, TaskOut, TaskPage, TaskQuery, TaskStatus, UpdateTask, WatchOut, WatchTask, limits,
};

/// Splits a comma list, dropping empty items.
fn comma_list(text: &str) -> Vec<String> {
    text.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect()
}

/// Labels without duplicates, in the order first given.
fn unique(labels: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(labels.len());
    for label in labels {
        if !out.contains(&label) {
            out.push(label);
        }
    }
    out
}

fn json_text(list: &[String]) -> String {
    serde_json::Value::from(list.to_vec()).to_string()
}

pub(crate) async fn list_tasks(
    State(state): State<BoardState>,
    _caller: Caller,
    QueryParams(query): QueryParams<TaskQuery>,
) -> Result<Json<TaskPage>, BoardError> {
    let limit = page_limit(query.limit)?;
    let after_row = match query.cursor.as_deref() {
        None | Some("") => None,
        Some(cursor) => Some(cursor.parse::<i64>().map_err(|_| {
            BoardError::invalid(
                "cursor",
                "a next_cursor from an earlier page",
                format!("cursor {cursor:?} is not one of ours"),
            )
        })?),
    };
    let statuses = match query.status.as_deref() {
        None => None,
        Some(text) => {
            let statuses = comma_list(text);
            if let Some(bad) = statuses.iter().find(|s| TaskStatus::parse(s).is_none()) {
                return Err(BoardError::invalid(
                    "status",
                    "a comma list of backlog, todo, in_progress, in_review, done",
                    format!("unknown status {bad:?}"),
                ));
            }
            Some(json_text(&statuses))
        }
    };
    let labels = query.labels.as_deref().map(|text| json_text(&comma_list(text)));
    let mut conn = state.pool.acquire().await?;
    let project_id = match query.project_id.as_deref() {
        Some(project) => Some(db::find_project(&mut conn, project).await?.id),
        None => None,
    };
    let rows: Vec<TaskRow> = sqlx::query_as(concat!(
        task_select!(),
        " WHERE (?1 IS NULL OR t.project_id = ?1)",
        " AND (?2 IS NULL OR t.status IN (SELECT value FROM json_each(?2)))",
        " AND (?3 IS NULL OR t.assignee_slug = ?3)",
        " AND (?4 IS NULL OR NOT EXISTS (SELECT 1 FROM json_each(?4) AS wanted",
        "      WHERE wanted.value NOT IN (SELECT value FROM json_each(t.labels))))",
        " AND (?5 IS NULL OR t.row > ?5)",
        " ORDER BY t.row LIMIT ?6"
    ))
    .bind(project_id)
    .bind(statuses)
    .bind(query.assignee)
    .bind(labels)
    .bind(after_row)
    .bind(i64::from(limit) + 1)
    .fetch_all(&mut *conn)
    .await?;
    let has_more = rows.len() > limit as usize;
    let mut items = Vec::with_capacity(rows.len());
    let mut last_row = None;
    for row in rows.into_iter().take(limit as usize) {
        last_row = Some(row.row);
        items.push(db::task_out(row)?);
    }
    let next_cursor = if has_more { last_row.map(|row| row.to_string()) } else { None };
    Ok(Json(TaskPage { items, next_cursor }))
}

pub(crate) async fn get_task(
    State(state): State<BoardState>,
    _caller: Caller,
    Path(task): Path<String>,
) -> Result<Json<TaskOut>, BoardError> {
    let mut conn = state.pool.acquire().await?;
    Ok(Json(db::find_task(&mut conn, &task).await?))
}

pub(crate) async fn create_task(
    State(state): State<BoardState>,
    caller: Caller,
    JsonBody(body): JsonBody<CreateTask>,
) -> Result<(StatusCode, Json<TaskOut>), BoardError> {
    check_text("title", &body.title, limits::TITLE)?;
    if let Some(description) = &body.description {
        check_length("description", description, limits::DESCRIPTION)?;
    }
    let labels = unique(body.labels.unwrap_or_default());
    check_labels(&labels)?;

    let mut tx = db::begin_write(&state.pool).await?;
    let project = db::find_project(&mut tx, &body.project_slug).await?;
    if let Some(assignee) = &body.assignee_slug {
        db::find_member(&mut tx, assignee).await?;
    }
    let number: i64 = sqlx::query_scalar(
        "UPDATE projects SET next_task_number = next_task_number + 1 WHERE id = ?1 RETURNING next_task_number - 1",
    )
    .bind(&project.id)
    .fetch_one(&mut *tx)
    .await?;
    let id = db::new_id();
    let now = db::now();
    sqlx::query(
        "INSERT INTO tasks (id, key, project_id, title, description, type, status, priority, assignee_slug, labels, \
         created_by, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?12)",
    )
    .bind(&id)
    .bind(format!("{}-{number}", project.key))
    .bind(&project.id)
    .bind(&body.title)
    .bind(&body.description)
    .bind(body.task_type.unwrap_or_default().as_str())
    .bind(body.status.unwrap_or(TaskStatus::Todo).as_str())
    .bind(body.priority.unwrap_or_default().as_str())
    .bind(&body.assignee_slug)
    .bind(json_text(&labels))
    .bind(&caller.slug)
    .bind(&now)
    .execute(&mut *tx)
    .await?;
    let task = db::find_task(&mut tx, &id).await?;
    let mut outbox = Outbox::default();
    if let Some(assignee) = &task.assignee_slug {
        let data = json!({"task": task, "assigned_by": caller.slug});
        outbox.log(&mut tx, assignee, EVENT_TASK_ASSIGNED, data).await?;
    }
    tx.commit().await?;
    state.task_ids.remember(&task.id, &task.key);
    state.hub.poke(&outbox.members);
    Ok((StatusCode::CREATED, Json(task)))
}

pub(crate) async fn update_task(
    State(state): State<BoardState>,
    caller: Caller,
    Path(task): Path<String>,
    JsonBody(body): JsonBody<UpdateTask>,
) -> Result<Json<TaskOut>, BoardError> {
    if let Some(title) = &body.title {
        check_text("title", title, limits::TITLE)?;
    }
    if let Some(Some(description)) = &body.description {
        check_length("description", description, limits::DESCRIPTION)?;
    }
    let labels = body.labels.map(unique);
    if let Some(labels) = &labels {
        check_labels(labels)?;
    }

    let mut tx = db::begin_write(&state.pool).await?;
    let before = db::find_task(&mut tx, &task).await?;
    let assignee = match body.assignee_slug {
        None => before.assignee_slug.clone(),
        Some(None) => None,
        Some(Some(slug)) => Some(db::find_member(&mut tx, &slug).await?.slug),
    };
    let mut after = before.clone();
    after.title = body.title.unwrap_or(after.title);
    after.description = body.description.unwrap_or(after.description);
    after.status = body.status.unwrap_or(after.status);
    after.priority = body.priority.unwrap_or(after.priority);
    after.task_type = body.task_type.unwrap_or(after.task_type);
    after.assignee_slug = assignee;
    after.labels = labels.unwrap_or(after.labels);
    if changed_fields(&before, &after).is_empty() {
        return Ok(Json(before));
    }
    // The task as stored after the UPDATE is `after` with its new time: nothing else in the row
    // changes (no trigger touches it, and watchers are not changed here), so it is not read back.
    after.updated_at = db::now();
    sqlx::query(
        "UPDATE tasks SET title = ?2, description = ?3, status = ?4, priority = ?5, type = ?6, assignee_slug = ?7, \
         labels = ?8, updated_at = ?9 WHERE id = ?1",
    )
    .bind(&before.id)
    .bind(&after.title)
    .bind(&after.description)
    .bind(after.status.as_str())
    .bind(after.priority.as_str())
    .bind(after.task_type.as_str())
    .bind(&after.assignee_slug)
    .bind(json_text(&after.labels))
    .bind(&after.updated_at)
    .execute(&mut *tx)
    .await?;
    let mut outbox = Outbox::default();
    announce_change(&mut tx, &mut outbox, &before, &after, &caller.slug).await?;
    tx.commit().await?;
    state.hub.poke(&outbox.members);
    Ok(Json(after))
}

pub(crate) async fn take_task(
    State(state): State<BoardState>,
    caller: Caller,
    Path(task): Path<String>,
    JsonBody(body): JsonBody<TakeTask>,
) -> Result<Json<TaskOut>, BoardError> {
    if body.agent_slug != caller.slug {
        return Err(BoardError::forbidden(format!(
            "you are {}: you can take a task only for yourself, not for {}",
            caller.slug, body.agent_slug
        )));
    }
    let mut tx = db::begin_write(&state.pool).await?;
    let before = db::find_task(&mut tx, &task).await?;
    // The one conditional UPDATE that makes taking atomic: it changes a row only if the task
    // is free or already the caller's.
    let taken = sqlx::query(
        "UPDATE tasks SET assignee_slug = ?2, updated_at = ?3 \
         WHERE id = ?1 AND (assignee_slug IS NULL OR assignee_slug = ?2)",
    )
    .bind(&before.id)
    .bind(&caller.slug)
    .bind(db::now())
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if taken == 0 {
        let holder: Option<String> = sqlx::query_scalar("SELECT assignee_slug FROM tasks WHERE id = ?1")
            .bind(&before.id)
            .fetch_one(&mut *tx)
            .await?;
        return Err(BoardError::conflict(format!(
            "task {} is assigned to {}",
            before.key,
            holder.as_deref().unwrap_or("someone else")
        )));
    }
    let after = db::find_task(&mut tx, &before.id).await?;
    let mut outbox = Outbox::default();
    announce_change(&mut tx, &mut outbox, &before, &after, &caller.slug).await?;
    tx.commit().await?;
    state.hub.poke(&outbox.members);
    Ok(Json(after))
}

pub(crate) async fn reject_task(
    State(state): State<BoardState>,
    caller: Caller,
    Path(task): Path<String>,
    JsonBody(body): JsonBody<RejectTask>,
) -> Result<Json<RejectOut>, BoardError> {
    check_text("reason", &body.reason, limits::REASON)?;
    let mut tx = db::begin_write(&state.pool).await?;
    let before = db::find_task(&mut tx, &task).await?;
    if before.assignee_slug.as_deref() != Some(caller.slug.as_str()) {
        let holder = match &before.assignee_slug {
            Some(slug) => format!("it is assigned to {slug}"),
            None => "it is unassigned".to_string(),
        };
        return Err(BoardError::conflict(format!("only the assignee can reject task {}: {holder}", before.key)));
    }
    sqlx::query("UPDATE tasks SET assignee_slug = NULL, status = 'todo', updated_at = ?2 WHERE id = ?1")
        .bind(&before.id)
        .bind(db::now())
        .execute(&mut *tx)
        .await?;
    let after = db::find_task(&mut tx, &before.id).await?;
    let mut outbox = Outbox::default();
    announce_change(&mut tx, &mut outbox, &before, &after, &caller.slug).await?;
    let comment = NewMessage {
        content: format!("rejected: {}", body.reason),
        chat_id: None,
        task_id: Some(before.id.clone()),
        parent_id: None,
        mentions: Vec::new(),
        reply_to: None,
    };
    store_message(&mut tx, &mut outbox, &caller.slug, comment).await?;
    tx.commit().await?;
    state.hub.poke(&outbox.members);
    Ok(Json(RejectOut { ok: true, reason: body.reason }))
}

pub(crate) async fn assign_task(
    State(state): State<BoardState>,
    caller: Caller,
    Path(task): Path<String>,
    JsonBody(body): JsonBody<AssignTask>,
) -> Result<Json<TaskOut>, BoardError> {
    let mut tx = db::begin_write(&state.pool).await?;
    let before = db::find_task(&mut tx, &task).await?;
    let assignee = db::find_member(&mut tx, &body.assignee_slug).await?;
    if before.assignee_slug.as_deref() == Some(assignee.slug.as_str()) {
        return Ok(Json(before));
    }
    sqlx::query("UPDATE tasks SET assignee_slug = ?2, updated_at = ?3 WHERE id = ?1")
        .bind(&before.id)
        .bind(&assignee.slug)
        .bind(db::now())
        .execute(&mut *tx)
        .await?;
    let after = db::find_task(&mut tx, &before.id).await?;
    let mut outbox = Outbox::default();
    announce_change(&mut tx, &mut outbox, &before, &after, &caller.slug).await?;
    tx.commit().await?;
    state.hub.poke(&outbox.members);
    Ok(Json(after))
}

pub(crate) async fn watch_task(
    State(state): State<BoardState>,
    caller: Caller,
    Path(task): Path<String>,
    JsonBody(body): JsonBody<WatchTask>,
) -> Result<Json<WatchOut>, BoardError> {
    if body.agent_slug != caller.slug {
        return Err(BoardError::forbidden(format!(
            "you are {}: you can watch a task only for yourself, not for {}",
            caller.slug, body.agent_slug
        )));
    }
    let mut tx = db::begin_write(&state.pool).await?;
    let task = db::find_task_row(&mut tx, &task).await?;
    sqlx::query("INSERT INTO task_watchers (task_id, member_slug) VALUES (?1, ?2) ON CONFLICT DO NOTHING")
        .bind(&task.id)
        .bind(&caller.slug)
        .execute(&mut *tx)
        .await?;
    let watchers = db::watchers(&mut tx, &task.id).await?;
    tx.commit().await?;
    Ok(Json(WatchOut { ok: true, watchers }))
}

/// The names of the fields that differ, in the contract's order.
fn changed_fields(before: &TaskOut, after: &TaskOut) -> Vec<String> {
    let mut changed = Vec::new();
    let mut note = |differs: bool, name: &str| {
        if differs {
            changed.push(name.to_string());
        }
    };
    note(before.title != after.title, "title");
    note(before.description != after.description, "description");
    note(before.task_type != after.task_type, "type");
    note(before.status != after.status, "status");
    note(before.priority != after.priority, "priority");
    note(before.assignee_slug != after.assignee_slug, "assignee_slug");
    note(before.labels != after.labels, "labels");
    changed
}

/// Logs the events a change of a task causes, inside the change's transaction.
async fn announce_change(
    conn: &mut SqliteConnection,
    outbox: &mut Outbox,
    before: &TaskOut,
    after: &TaskOut,
    by: &str,
) -> Result<(), BoardError> {
    if before.assignee_slug != after.assignee_slug {
        if let Some(previous) = &before.assignee_slug {
            let data = json!({"task": after, "unassigned_by": by, "previous_assignee": previous});
            outbox.log(conn, previous, EVENT_TASK_UNASSIGNED, data).await?;
        }
        if let Some(assignee) = &after.assignee_slug {
            let data = json!({"task": after, "assigned_by": by});
            outbox.log(conn, assignee, EVENT_TASK_ASSIGNED, data).await?;
        }
    }
    let changed = changed_fields(before, after);
    // A change of assignee alone is told by the assigned/unassigned events.
    if changed.iter().any(|field| field != "assignee_slug") {
        let mut recipients: Vec<String> = after.assignee_slug.iter().cloned().collect();
        recipients.extend(after.watchers.iter().cloned());
        let data = json!({"task": after, "changed": changed, "updated_by": by});
        outbox.log_to_all(conn, &recipients, EVENT_TASK_UPDATED, &data).await?;
    }
    Ok(())
}
