//! The page handlers: each reads through the board's own store and handlers, renders a
//! template, and answers a failure as an error page with the board's status code.

use axum::extract::rejection::FormRejection;
use axum::extract::{Form, Path, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use serde_json::json;

use picogent_web::view;

use super::{error_page, render, session_cookie, session_id, signed_in, wake};
use crate::error::BoardError;
use crate::extract::{Caller, JsonBody, QueryParams};
use crate::{BoardState, db, messages, tasks};
use picogent_tracker::model::{
    AssignTask, CreateTask, MemberKind, MemberOut, MessageOut, MessageQuery, ProjectOut, SendMessage, TaskOut,
    TaskQuery, TaskStatus,
};

/// The columns of a project's board, in the order work moves (each headed by its status's
/// label, as the task page shows it).
const COLUMNS: [TaskStatus; 5] =
    [TaskStatus::Backlog, TaskStatus::Todo, TaskStatus::InProgress, TaskStatus::InReview, TaskStatus::Done];

/// How many tasks a board shows, and messages a task or chat shows (the newest).
const PAGE: u32 = 200;

pub(super) async fn home(State(state): State<BoardState>, headers: HeaderMap) -> Response {
    if signed_in(&state, &headers).is_err() {
        return Redirect::to("/signin").into_response();
    }
    let projects = match state.pool.acquire().await {
        Ok(mut conn) => db::list_projects(&mut conn).await,
        Err(error) => Err(error.into()),
    };
    match projects {
        Ok(projects) => match projects.first() {
            Some(project) => Redirect::to(&format!("/projects/{}", project.slug)).into_response(),
            None => error_page(BoardError::not_found("project", "(the board has none: seed one)"), None),
        },
        Err(error) => error_page(error, None),
    }
}

pub(super) async fn signin_page(State(state): State<BoardState>) -> Response {
    match humans(&state).await {
        Ok(members) => render("board_signin.html", view(json!({"members": members, "me": null}))),
        Err(error) => error_page(error, None),
    }
}

async fn humans(state: &BoardState) -> Result<Vec<MemberOut>, BoardError> {
    let mut conn = state.pool.acquire().await?;
    Ok(db::list_members(&mut conn).await?.into_iter().filter(|m| m.kind == MemberKind::Human).collect())
}

#[derive(Debug, Deserialize)]
pub(super) struct SignIn {
    member: String,
}

/// Signs the page in as a seeded human member: a session id in the cookie, the token stays on
/// the board.
pub(super) async fn signin(State(state): State<BoardState>, form: Result<Form<SignIn>, FormRejection>) -> Response {
    // Counted before anything else: a flood of attempts, good or bad, makes no sessions past it.
    if let Err(wait) = state.sign_ins.take() {
        let seconds = picogent_web::sessions::retry_after_secs(wait);
        tracing::debug!(per_minute = state.sign_ins.per_minute(), "refused a sign-in: too many in the last minute");
        let message = format!(
            "too many sign-ins on this board in the last minute (at most {} a minute): wait {seconds} s and sign in \
             again; whoever is signed in stays signed in",
            state.sign_ins.per_minute()
        );
        return error_page(BoardError::RateLimited { message, retry_after_secs: seconds }, None);
    }
    let Ok(Form(SignIn { member })) = form else {
        return error_page(BoardError::invalid("member", "a member's slug", "choose a member to sign in as"), None);
    };
    let found = match humans(&state).await {
        Ok(members) => members.into_iter().find(|m| m.slug == member),
        Err(error) => return error_page(error, None),
    };
    let Some(found) = found else {
        return error_page(BoardError::not_found("human member", &member), None);
    };
    let session = state.web_sessions.open(Caller { slug: found.slug, kind: found.kind });
    ([(header::SET_COOKIE, session_cookie(&session))], Redirect::to("/")).into_response()
}

pub(super) async fn signout(State(state): State<BoardState>, headers: HeaderMap) -> Response {
    if let Some(id) = session_id(&headers) {
        state.web_sessions.close(id);
    }
    ([(header::SET_COOKIE, session_cookie(""))], Redirect::to("/signin")).into_response()
}

/// A browser sends a textarea's lines ended by CR LF; the board stores LF, as its API clients do.
fn one_kind_of_newline(text: &str) -> String {
    text.replace("\r\n", "\n")
}

// ---- a project's board ----

async fn project_view(state: &BoardState, caller: &Caller, project: &str) -> Result<minijinja::Value, BoardError> {
    let (project, members) = {
        let mut conn = state.pool.acquire().await?;
        (db::find_project(&mut conn, project).await?, db::list_members(&mut conn).await?)
    };
    let query = TaskQuery { project_id: Some(project.id.clone()), limit: Some(PAGE), ..TaskQuery::default() };
    let page = tasks::list_tasks(State(state.clone()), caller.clone(), QueryParams(query)).await?.0;
    let columns: Vec<serde_json::Value> = COLUMNS
        .iter()
        .map(|status| {
            let in_column: Vec<&TaskOut> = page.items.iter().filter(|task| task.status == *status).collect();
            json!({"status": status.as_str(), "tasks": in_column})
        })
        .collect();
    let projects = all_projects(state).await?;
    Ok(view(
        json!({"project": project, "projects": projects, "columns": columns, "members": members, "me": caller.slug}),
    ))
}

async fn all_projects(state: &BoardState) -> Result<Vec<ProjectOut>, BoardError> {
    let mut conn = state.pool.acquire().await?;
    db::list_projects(&mut conn).await
}

pub(super) async fn project_page(
    State(state): State<BoardState>,
    headers: HeaderMap,
    Path(project): Path<String>,
) -> Response {
    let caller = match signed_in(&state, &headers) {
        Ok(caller) => caller,
        Err(response) => return response.into_response(),
    };
    match project_view(&state, &caller, &project).await {
        Ok(view) => render("board_project.html", view),
        Err(error) => error_page(error, Some(&caller)),
    }
}

pub(super) async fn project_live(
    State(state): State<BoardState>,
    headers: HeaderMap,
    Path(project): Path<String>,
) -> Response {
    let caller = match live_caller(&state, &headers) {
        Ok(caller) => caller,
        Err(response) => return *response,
    };
    let shared = state.clone();
    picogent_web::live(&state.live_streams, wake(&state), move || {
        let (state, caller, project) = (shared.clone(), caller.clone(), project.clone());
        async move { fragment("board_columns.html", project_view(&state, &caller, &project).await) }
    })
}

/// A live stream needs a signed-in page; without one it is a plain 401, not a redirect.
fn live_caller(state: &BoardState, headers: &HeaderMap) -> Result<Caller, Box<Response>> {
    signed_in(state, headers).map_err(|_| {
        let refusal = BoardError::Unauthorized { message: "sign in first: this stream is for a signed-in page".into() };
        Box::new(error_page(refusal, None))
    })
}

fn fragment(name: &str, view: Result<minijinja::Value, BoardError>) -> Option<String> {
    picogent_web::render(&super::PAGES, name, view.ok()?)
}

#[derive(Debug, Deserialize)]
pub(super) struct NewTask {
    title: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    assignee: String,
}

pub(super) async fn create_task(
    State(state): State<BoardState>,
    headers: HeaderMap,
    Path(project): Path<String>,
    form: Result<Form<NewTask>, FormRejection>,
) -> Response {
    let caller = match signed_in(&state, &headers) {
        Ok(caller) => caller,
        Err(response) => return response.into_response(),
    };
    let Ok(Form(form)) = form else {
        return error_page(BoardError::invalid("title", "a title", "the new task needs a title"), Some(&caller));
    };
    let body = CreateTask {
        project_slug: project,
        title: form.title.trim().to_string(),
        description: Some(one_kind_of_newline(&form.description)).filter(|text| !text.trim().is_empty()),
        assignee_slug: Some(form.assignee).filter(|slug| !slug.is_empty()),
        ..CreateTask::default()
    };
    match tasks::create_task(State(state), caller.clone(), JsonBody(body)).await {
        Ok((_, task)) => Redirect::to(&format!("/tasks/{}", task.0.key)).into_response(),
        Err(error) => error_page(error, Some(&caller)),
    }
}

// ---- a task ----

async fn task_view(state: &BoardState, caller: &Caller, task: &str) -> Result<minijinja::Value, BoardError> {
    let (task, steps, members) = {
        let mut conn = state.pool.acquire().await?;
        let task = db::find_task(&mut conn, task).await?;
        let steps = db::list_steps(&mut conn, &task.id).await?;
        (task, steps, db::list_members(&mut conn).await?)
    };
    let query = MessageQuery { task_id: Some(task.id.clone()), limit: Some(PAGE), ..MessageQuery::default() };
    let comments = messages::list_messages(State(state.clone()), caller.clone(), QueryParams(query)).await?.0;
    let done = steps.iter().filter(|step| step.done).count();
    Ok(view(
        json!({"task": task, "steps": steps, "done": done, "comments": comments, "members": members, "me": caller.slug}),
    ))
}

pub(super) async fn task_page(
    State(state): State<BoardState>,
    headers: HeaderMap,
    Path(task): Path<String>,
) -> Response {
    let caller = match signed_in(&state, &headers) {
        Ok(caller) => caller,
        Err(response) => return response.into_response(),
    };
    match task_view(&state, &caller, &task).await {
        Ok(view) => render("board_task.html", view),
        Err(error) => error_page(error, Some(&caller)),
    }
}

pub(super) async fn task_live(
    State(state): State<BoardState>,
    headers: HeaderMap,
    Path(task): Path<String>,
) -> Response {
    let caller = match live_caller(&state, &headers) {
        Ok(caller) => caller,
        Err(response) => return *response,
    };
    let shared = state.clone();
    picogent_web::live(&state.live_streams, wake(&state), move || {
        let (state, caller, task) = (shared.clone(), caller.clone(), task.clone());
        async move { fragment("board_task_live.html", task_view(&state, &caller, &task).await) }
    })
}

#[derive(Debug, Deserialize)]
pub(super) struct Assign {
    assignee: String,
}

pub(super) async fn assign(
    State(state): State<BoardState>,
    headers: HeaderMap,
    Path(task): Path<String>,
    form: Result<Form<Assign>, FormRejection>,
) -> Response {
    let caller = match signed_in(&state, &headers) {
        Ok(caller) => caller,
        Err(response) => return response.into_response(),
    };
    let Ok(Form(Assign { assignee })) = form else {
        return error_page(BoardError::invalid("assignee", "a member's slug", "choose whom to assign"), Some(&caller));
    };
    let body = AssignTask { assignee_slug: assignee };
    match tasks::assign_task(State(state), caller.clone(), Path(task), JsonBody(body)).await {
        Ok(task) => Redirect::to(&format!("/tasks/{}", task.0.key)).into_response(),
        Err(error) => error_page(error, Some(&caller)),
    }
}

#[derive(Debug, Deserialize)]
pub(super) struct Comment {
    content: String,
}

pub(super) async fn comment(
    State(state): State<BoardState>,
    headers: HeaderMap,
    Path(task): Path<String>,
    form: Result<Form<Comment>, FormRejection>,
) -> Response {
    let (caller, content) = match caller_with_text(&state, &headers, form, "write a comment first") {
        Ok(posted) => posted,
        Err(response) => return *response,
    };
    let found = match state.pool.acquire().await {
        Ok(mut conn) => db::find_task(&mut conn, &task).await,
        Err(error) => Err(error.into()),
    };
    let task = match found {
        Ok(task) => task,
        Err(error) => return error_page(error, Some(&caller)),
    };
    let body = SendMessage { content, task_id: Some(task.id.clone()), ..SendMessage::default() };
    send_then_show(state, caller, body, &format!("/tasks/{}", task.key)).await
}

/// The signed-in caller and the text of the comment or message they posted (one kind of
/// newline), or the page that sends them to sign in or says what is missing.
fn caller_with_text(
    state: &BoardState,
    headers: &HeaderMap,
    form: Result<Form<Comment>, FormRejection>,
    missing: &str,
) -> Result<(Caller, String), Box<Response>> {
    let caller = signed_in(state, headers).map_err(|redirect| Box::new(redirect.into_response()))?;
    match form {
        Ok(Form(Comment { content })) => Ok((caller, one_kind_of_newline(&content))),
        Err(_) => Err(Box::new(error_page(BoardError::invalid("content", "some text", missing), Some(&caller)))),
    }
}

/// Posts `body` as `caller` through the API's own handler, then shows the page at `to`.
async fn send_then_show(state: BoardState, caller: Caller, body: SendMessage, to: &str) -> Response {
    match messages::send_message(State(state), caller.clone(), JsonBody(body)).await {
        Ok(_) => Redirect::to(to).into_response(),
        Err(error) => error_page(error, Some(&caller)),
    }
}

// ---- the project chat ----

async fn chat_view(state: &BoardState, caller: &Caller, project: &str) -> Result<minijinja::Value, BoardError> {
    let project = {
        let mut conn = state.pool.acquire().await?;
        db::find_project(&mut conn, project).await?
    };
    let query = MessageQuery { chat_id: Some(project.chat_id.clone()), limit: Some(PAGE), ..MessageQuery::default() };
    let messages: Vec<MessageOut> =
        messages::list_messages(State(state.clone()), caller.clone(), QueryParams(query)).await?.0;
    let projects = all_projects(state).await?;
    Ok(view(json!({"project": project, "projects": projects, "messages": messages, "me": caller.slug})))
}

pub(super) async fn chat_page(
    State(state): State<BoardState>,
    headers: HeaderMap,
    Path(project): Path<String>,
) -> Response {
    let caller = match signed_in(&state, &headers) {
        Ok(caller) => caller,
        Err(response) => return response.into_response(),
    };
    match chat_view(&state, &caller, &project).await {
        Ok(view) => render("board_chat.html", view),
        Err(error) => error_page(error, Some(&caller)),
    }
}

pub(super) async fn chat_live(
    State(state): State<BoardState>,
    headers: HeaderMap,
    Path(project): Path<String>,
) -> Response {
    let caller = match live_caller(&state, &headers) {
        Ok(caller) => caller,
        Err(response) => return *response,
    };
    let shared = state.clone();
    picogent_web::live(&state.live_streams, wake(&state), move || {
        let (state, caller, project) = (shared.clone(), caller.clone(), project.clone());
        async move { fragment("board_chat_live.html", chat_view(&state, &caller, &project).await) }
    })
}

pub(super) async fn post_chat(
    State(state): State<BoardState>,
    headers: HeaderMap,
    Path(project): Path<String>,
    form: Result<Form<Comment>, FormRejection>,
) -> Response {
    let (caller, content) = match caller_with_text(&state, &headers, form, "write a message first") {
        Ok(posted) => posted,
        Err(response) => return *response,
    };
    let found = match state.pool.acquire().await {
        Ok(mut conn) => db::find_project(&mut conn, &project).await,
        Err(error) => Err(error.into()),
    };
    let project = match found {
        Ok(project) => project,
        Err(error) => return error_page(error, Some(&caller)),
    };
    let body = SendMessage { content, chat_id: Some(project.chat_id.clone()), ..SendMessage::default() };
    send_then_show(state, caller, body, &format!("/projects/{}/chat", project.slug)).await
}

/// A message's place: its task's page, or its project's chat, at the message.
pub(super) async fn message(State(state): State<BoardState>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    let caller = match signed_in(&state, &headers) {
        Ok(caller) => caller,
        Err(response) => return response.into_response(),
    };
    match message_place(&state, &id).await {
        Ok(place) => Redirect::to(&place).into_response(),
        Err(error) => error_page(error, Some(&caller)),
    }
}

async fn message_place(state: &BoardState, id: &str) -> Result<String, BoardError> {
    let mut conn = state.pool.acquire().await?;
    let message = db::find_message_row(&mut conn, id).await?;
    if let Some(task_id) = &message.task_id {
        let task = db::find_task(&mut conn, task_id).await?;
        return Ok(format!("/tasks/{}", task.key));
    }
    let chat_id = message.chat_id.as_deref().unwrap_or_default();
    let project = db::project_of_chat(&mut conn, chat_id).await?;
    Ok(format!("/projects/{}/chat#m-{}", project.slug, message.id))
}
