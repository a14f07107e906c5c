//! The reference board's web page (`picogent board`, `/` beside the API): a project's tasks in
//! columns by status, a task page (description, steps, comments, assign), and the project chat.
//!
//! A person signs in by choosing a seeded human member; the page keeps a random session id in an
//! `HttpOnly`, `SameSite=Strict` cookie and never sees the member's token. Every change goes
//! through the same handlers as the REST API (so it logs the same events), forms post and
//! redirect, so the pages work without script; the embedded script only swaps in fresh fragments
//! from `…/live` (server-sent events), sent whenever anything on the board changed
//! (`BoardState::changes`).
//!
//! The page answers only its own host names (the listener's address, `localhost`, the loopback
//! addresses, `--allowed-host`), and takes a POST only from its own origin (`picogent_web::hosts`):
//! a page of another site that rebinds its name to 127.0.0.1 could otherwise sign in as any
//! member. The API beside it is not held to its host names: an agent may reach a board off
//! loopback by any name, and its bearer tokens, which no other site's page has, guard it.

mod pages;

use std::sync::LazyLock;

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{Redirect, Response};
use axum::routing::{get, post};
use minijinja::Environment;

use super::BoardState;
use super::error::BoardError;
use super::extract::Caller;

/// The cookie that holds the page's session id.
const SESSION_COOKIE: &str = "board_session";

/// Built-in templates: constant data of the binary, parsed once.
static PAGES: LazyLock<Environment<'static>> = LazyLock::new(|| {
    picogent_web::environment(&[
        ("_header.html", include_str!("templates/_header.html")),
        ("board_signin.html", include_str!("templates/board_signin.html")),
        ("board_project.html", include_str!("templates/board_project.html")),
        ("board_columns.html", include_str!("templates/board_columns.html")),
        ("board_task.html", include_str!("templates/board_task.html")),
        ("board_task_live.html", include_str!("templates/board_task_live.html")),
        ("board_chat.html", include_str!("templates/board_chat.html")),
        ("board_chat_live.html", include_str!("templates/board_chat_live.html")),
        ("board_error.html", include_str!("templates/board_error.html")),
    ])
});

/// Signed-in pages: session id → the member it acts as.
pub(crate) type Sessions = picogent_web::Sessions<Caller>;

/// The page's routes, and its assets, behind the check of the host names it answers to.
pub(crate) fn routes(state: &BoardState) -> Router<BoardState> {
    Router::new()
        .route("/", get(pages::home))
        .route("/signin", get(pages::signin_page).post(pages::signin))
        .route("/signout", post(pages::signout))
        .route("/projects/{project}", get(pages::project_page))
        .route("/projects/{project}/live", get(pages::project_live))
        .route("/projects/{project}/tasks", post(pages::create_task))
        .route("/projects/{project}/chat", get(pages::chat_page).post(pages::post_chat))
        .route("/projects/{project}/chat/live", get(pages::chat_live))
        .route("/tasks/{task}", get(pages::task_page))
        .route("/tasks/{task}/live", get(pages::task_live))
        .route("/tasks/{task}/assign", post(pages::assign))
        .route("/tasks/{task}/comments", post(pages::comment))
        .route("/messages/{id}", get(pages::message))
        .merge(picogent_web::asset_routes())
        .layer(axum::middleware::from_fn_with_state(state.own_hosts.clone(), picogent_web::hosts::own_hosts_only))
}

/// The session id of the request's cookie, if it has one.
fn session_id(headers: &HeaderMap) -> Option<&str> {
    picogent_web::cookie(headers, SESSION_COOKIE)
}

/// Who is signed in on this request, or the answer that sends them to sign in.
fn signed_in(state: &BoardState, headers: &HeaderMap) -> Result<Caller, Redirect> {
    session_id(headers).and_then(|id| state.web_sessions.find(id)).ok_or_else(|| Redirect::to("/signin"))
}

/// The `Set-Cookie` value that keeps `session` for the page (or, empty, forgets it).
fn session_cookie(session: &str) -> HeaderValue {
    picogent_web::session_cookie(SESSION_COOKIE, session)
}

fn render(name: &str, context: minijinja::Value) -> Response {
    match picogent_web::render(&PAGES, name, context) {
        Some(html) => picogent_web::html_page(StatusCode::OK, html),
        None => picogent_web::render_failed(),
    }
}

/// A board error as a page: its status, and what went wrong in words (internal causes are
/// logged, never shown).
fn error_page(error: BoardError, signed_in_as: Option<&Caller>) -> Response {
    let status = error.status();
    let message = match &error {
        BoardError::Database(_) | BoardError::Internal(_) => {
            tracing::error!(%error, "board page failed");
            "the board failed to handle the request; see its log".to_string()
        }
        _ => error.to_string(),
    };
    let html = picogent_web::render(
        &PAGES,
        "board_error.html",
        picogent_web::view(serde_json::json!({
            "status": status.as_u16(), "message": message, "me": signed_in_as.map(|c| c.slug.clone())
        })),
    );
    let retry_after = error.retry_after_secs();
    let mut response = match html {
        Some(html) => picogent_web::html_page(status, html),
        None => picogent_web::render_failed(),
    };
    if let Some(seconds) = retry_after {
        response.headers_mut().insert(axum::http::header::RETRY_AFTER, seconds.into());
    }
    response
}

/// What wakes a live fragment: any change on the board, or its shutdown.
struct BoardWake {
    changes: tokio::sync::watch::Receiver<u64>,
    shutdown: tokio_util::sync::CancellationToken,
}

impl picogent_web::Wake for BoardWake {
    async fn wait(&mut self) -> bool {
        tokio::select! {
            changed = self.changes.changed() => changed.is_ok(),
            _ = self.shutdown.cancelled() => false,
        }
    }
}

fn wake(state: &BoardState) -> BoardWake {
    BoardWake { changes: state.changes.subscribe(), shutdown: state.shutdown.clone() }
}

#[cfg(test)]
mod tests;
