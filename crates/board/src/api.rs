//! The REST routes of the contract, and the smaller handlers: projects, members and steps.
//! Tasks live in [`crate::tasks`], messages and attachments in [`crate::messages`].

use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::routing::{get, patch, post};
use axum::{Json, Router, middleware};

use crate::error::BoardError;
use crate::extract::{Caller, JsonBody, check_length, check_text, require_member};
use crate::{BoardState, db, events, idempotency, messages, tasks};
use picogent_tracker::model::{AddStep, MemberOut, ProjectOut, StatusOut, StepOut, UpdateStatus, UpdateStep, limits};

/// The path prefix of the REST API and the event stream.
pub const API_PREFIX: &str = "/api";

/// Every route of the contract under [`API_PREFIX`]. The REST routes need a member's token and
/// honour `Idempotency-Key`; the WebSocket authenticates itself (it also takes `?token=`).
pub(crate) fn router(state: BoardState) -> Router {
    let api = Router::new()
        .route("/projects", get(list_projects))
        .route("/projects/{project}", get(get_project))
        .route("/tasks", get(tasks::list_tasks).post(tasks::create_task))
        .route("/tasks/{task}", get(tasks::get_task).patch(tasks::update_task))
        .route("/tasks/{task}/take", post(tasks::take_task))
        .route("/tasks/{task}/reject", post(tasks::reject_task))
        .route("/tasks/{task}/assign", post(tasks::assign_task))
        .route("/tasks/{task}/watch", post(tasks::watch_task))
        .route("/tasks/{task}/steps", get(list_steps).post(add_step))
        .route("/tasks/{task}/steps/{step_id}", patch(update_step))
        .route("/tasks/{task}/steps/{step_id}/complete", post(complete_step))
        .route("/messages", get(messages::list_messages).post(messages::send_message))
        .route("/messages/{id}", get(messages::get_message))
        .route("/messages/{id}/replies", post(messages::reply_message))
        .route("/messages/{id}/attachments", post(messages::upload_file))
        .route("/members", get(list_members))
        .route("/members/{slug}", get(get_member).patch(update_my_status))
        .route("/attachments", get(messages::list_files))
        .route("/attachments/{id}", get(messages::download_file))
        // Layers wrap the routes above them; the last added runs first: auth, then idempotency.
        .layer(middleware::from_fn_with_state(state.clone(), idempotency::idempotent_posts))
        .layer(middleware::from_fn_with_state(state.clone(), require_member))
        .route("/ws", get(events::ws_handler))
        .fallback(unknown_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(DefaultBodyLimit::max(limits::BODY_BYTES));
    Router::new()
        .nest(API_PREFIX, api)
        .merge(crate::web::routes(&state))
        .fallback(unknown_route)
        .layer(middleware::from_fn_with_state(state.clone(), note_change))
        .with_state(state)
}

/// Middleware: after a write that succeeded (any method but GET and HEAD, answered 2xx or 3xx),
/// counts a change, which wakes the web page's live fragments to render again.
async fn note_change(
    State(state): State<BoardState>,
    request: axum::extract::Request,
    next: middleware::Next,
) -> axum::response::Response {
    let write = !matches!(*request.method(), axum::http::Method::GET | axum::http::Method::HEAD);
    let response = next.run(request).await;
    if write && (response.status().is_success() || response.status().is_redirection()) {
        state.changes.send_modify(|count| *count = count.wrapping_add(1));
    }
    response
}

async fn unknown_route() -> BoardError {
    BoardError::NotFound { message: format!("no such route; the API lives under {API_PREFIX}") }
}

async fn wrong_method() -> BoardError {
    BoardError::MethodNotAllowed
}

// ---- projects ----

async fn list_projects(State(state): State<BoardState>, _caller: Caller) -> Result<Json<Vec<ProjectOut>>, BoardError> {
    let mut conn = state.pool.acquire().await?;
    Ok(Json(db::list_projects(&mut conn).await?))
}

async fn get_project(
    State(state): State<BoardState>,
    _caller: Caller,
    Path(project): Path<String>,
) -> Result<Json<ProjectOut>, BoardError> {
    let mut conn = state.pool.acquire().await?;
    Ok(Json(db::find_project(&mut conn, &project).await?))
}

// ---- members ----

async fn list_members(State(state): State<BoardState>, _caller: Caller) -> Result<Json<Vec<MemberOut>>, BoardError> {
    let mut conn = state.pool.acquire().await?;
    Ok(Json(db::list_members(&mut conn).await?))
}

async fn get_member(
    State(state): State<BoardState>,
    caller: Caller,
    Path(slug): Path<String>,
) -> Result<Json<MemberOut>, BoardError> {
    let slug = if slug == "me" { caller.slug } else { slug };
    let mut conn = state.pool.acquire().await?;
    Ok(Json(db::find_member(&mut conn, &slug).await?))
}

/// `PATCH /members/me` (or the caller's own slug).
async fn update_my_status(
    State(state): State<BoardState>,
    caller: Caller,
    Path(slug): Path<String>,
    JsonBody(body): JsonBody<UpdateStatus>,
) -> Result<Json<StatusOut>, BoardError> {
    if slug != "me" && slug != caller.slug {
        return Err(BoardError::forbidden(format!(
            "you are {}: you can set only your own status (PATCH /members/me)",
            caller.slug
        )));
    }
    check_length("status", &body.status, limits::STATUS)?;
    sqlx::query("UPDATE members SET status = ?2 WHERE slug = ?1")
        .bind(&caller.slug)
        .bind(&body.status)
        .execute(&state.pool)
        .await?;
    Ok(Json(StatusOut { status: body.status }))
}

// ---- steps ----

async fn list_steps(
    State(state): State<BoardState>,
    _caller: Caller,
    Path(task): Path<String>,
) -> Result<Json<Vec<StepOut>>, BoardError> {
    let mut conn = state.pool.acquire().await?;
    let task_id = state.task_ids.resolve(&mut conn, &task).await?;
    Ok(Json(db::list_steps(&mut conn, &task_id).await?))
}

/// Appends a step; positions count from 1.
async fn add_step(
    State(state): State<BoardState>,
    _caller: Caller,
    Path(task): Path<String>,
    JsonBody(body): JsonBody<AddStep>,
) -> Result<(StatusCode, Json<StepOut>), BoardError> {
    check_text("title", &body.title, limits::TITLE)?;
    let mut tx = db::begin_write(&state.pool).await?;
    let task = db::find_task_row(&mut tx, &task).await?;
    let position: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(position), 0) + 1 FROM steps WHERE task_id = ?1")
        .bind(&task.id)
        .fetch_one(&mut *tx)
        .await?;
    let step = StepOut { id: db::new_id(), task_id: task.id, title: body.title, done: false, position };
    sqlx::query("INSERT INTO steps (id, task_id, title, done, position) VALUES (?1, ?2, ?3, 0, ?4)")
        .bind(&step.id)
        .bind(&step.task_id)
        .bind(&step.title)
        .bind(step.position)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok((StatusCode::CREATED, Json(step)))
}

async fn update_step(
    State(state): State<BoardState>,
    _caller: Caller,
    Path((task, step_id)): Path<(String, String)>,
    JsonBody(body): JsonBody<UpdateStep>,
) -> Result<Json<StepOut>, BoardError> {
    if let Some(title) = &body.title {
        check_text("title", title, limits::TITLE)?;
    }
    let mut tx = db::begin_write(&state.pool).await?;
    let task = db::find_task_row(&mut tx, &task).await?;
    let step = db::find_step(&mut tx, &task.id, &step_id).await?;
    sqlx::query("UPDATE steps SET title = ?2, done = ?3 WHERE id = ?1")
        .bind(&step.id)
        .bind(body.title.as_ref().unwrap_or(&step.title))
        .bind(body.done.unwrap_or(step.done))
        .execute(&mut *tx)
        .await?;
    let step = db::find_step(&mut tx, &task.id, &step.id).await?;
    tx.commit().await?;
    Ok(Json(step))
}

async fn complete_step(
    State(state): State<BoardState>,
    _caller: Caller,
    Path((task, step_id)): Path<(String, String)>,
) -> Result<Json<StepOut>, BoardError> {
    let mut tx = db::begin_write(&state.pool).await?;
    let task = db::find_task_row(&mut tx, &task).await?;
    let step = db::find_step(&mut tx, &task.id, &step_id).await?;
    sqlx::query("UPDATE steps SET done = 1 WHERE id = ?1").bind(&step.id).execute(&mut *tx).await?;
    let step = db::find_step(&mut tx, &task.id, &step.id).await?;
    tx.commit().await?;
    Ok(Json(step))
}
