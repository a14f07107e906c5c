//! The inspector's page handlers: each reads the state and the running agent's counters, builds
//! its view ([`crate::view`]) and renders a template; `…/live` streams the same fragment.

use axum::extract::rejection::{FormRejection, QueryRejection};
use axum::extract::{Form, Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde_json::json;

use crate::view::{self, RunFilter};
use crate::{Access, Inspector, PAGES, SESSION_COOKIE, wake};
use picogent_state::RunStatus;
use picogent_web::view as context;

/// How many runs the list reads (newest first) before filtering.
const RUNS_SHOWN: u32 = 200;
/// Days of spend the chart shows, today included.
const SPEND_DAYS: i64 = 14;

pub(super) fn render(status: StatusCode, name: &str, context: minijinja::Value) -> Response {
    match picogent_web::render(&PAGES, name, context) {
        Some(html) => picogent_web::html_page(status, html),
        None => picogent_web::render_failed(),
    }
}

pub(super) fn error_page(status: StatusCode, message: &str) -> Response {
    render(status, "inspector_error.html", context(json!({"status": status.as_u16(), "message": message})))
}

pub(super) fn state_failed(error: picogent_state::StateError) -> Response {
    tracing::error!(%error, "the inspector cannot read the state");
    error_page(StatusCode::INTERNAL_SERVER_ERROR, "the state database could not be read; see the agent's log")
}

async fn runs_view(inspector: &Inspector, filter: &RunFilter) -> Result<minijinja::Value, picogent_state::StateError> {
    let runs = inspector.state.list_runs(RUNS_SHOWN).await?;
    let mut kinds: Vec<String> = runs.iter().map(|run| view::trigger_kind(&run.trigger).to_string()).collect();
    kinds.sort();
    kinds.dedup();
    let shown: Vec<view::RunLine> =
        runs.iter().filter(|run| filter.keeps(run)).map(|run| view::summary(run, &inspector.settings)).collect();
    let mut statuses: Vec<&str> = RunStatus::ALL.iter().map(|status| status.as_str()).collect();
    // Running, and waiting for a person: a filter of its own, after `running`.
    statuses.insert(2, picogent_state::AWAITING_INPUT);
    let query = serde_urlencoded::to_string(filter).unwrap_or_default();
    Ok(context(json!({
        "runs": shown, "filter": filter, "statuses": statuses, "kinds": kinds, "query": query,
        "active": inspector.status.active_runs(), "connected": inspector.status.connected(),
        "waiting": inspector.status.waiting(), "awaiting_input": inspector.status.awaiting_input(),
        "slug": inspector.settings.slug, "sign_out": inspector.access.signs_in(),
    })))
}

pub(crate) async fn runs_page(
    State(inspector): State<Inspector>,
    filter: Result<Query<RunFilter>, QueryRejection>,
) -> Response {
    let filter = filter.map(|Query(filter)| filter).unwrap_or_default();
    match runs_view(&inspector, &filter).await {
        Ok(view) => render(StatusCode::OK, "inspector_runs.html", view),
        Err(error) => state_failed(error),
    }
}

pub(crate) async fn runs_live(
    State(inspector): State<Inspector>,
    filter: Result<Query<RunFilter>, QueryRejection>,
) -> Response {
    let filter = filter.map(|Query(filter)| filter).unwrap_or_default();
    let shared = inspector.clone();
    picogent_web::live(&inspector.live_streams, wake(&inspector), move || {
        let (inspector, filter) = (shared.clone(), filter.clone());
        async move { fragment("inspector_runs_live.html", runs_view(&inspector, &filter).await.ok()) }
    })
}

fn fragment(name: &str, view: Option<minijinja::Value>) -> Option<String> {
    picogent_web::render(&PAGES, name, view?)
}

async fn run_view(inspector: &Inspector, id: &str) -> Result<Option<minijinja::Value>, picogent_state::StateError> {
    let Some(run) = inspector.state.get_run(id).await? else { return Ok(None) };
    let detail = view::detail(&run, &inspector.settings, inspector.coding.as_deref());
    Ok(Some(context(json!({"run": detail, "slug": inspector.settings.slug, "sign_out": inspector.access.signs_in()}))))
}

pub(crate) async fn run_page(State(inspector): State<Inspector>, Path(id): Path<String>) -> Response {
    match run_view(&inspector, &id).await {
        Ok(Some(view)) => render(StatusCode::OK, "inspector_run.html", view),
        Ok(None) => {
            error_page(StatusCode::NOT_FOUND, &format!("no run {id} in the state database (pruned, or never run)"))
        }
        Err(error) => state_failed(error),
    }
}

pub(crate) async fn run_live(State(inspector): State<Inspector>, Path(id): Path<String>) -> Response {
    match inspector.state.get_run(&id).await {
        Ok(Some(_)) => {}
        Ok(None) => return error_page(StatusCode::NOT_FOUND, &format!("no run {id}")),
        Err(error) => return state_failed(error),
    }
    let shared = inspector.clone();
    picogent_web::live(&inspector.live_streams, wake(&inspector), move || {
        let (inspector, id) = (shared.clone(), id.clone());
        async move { fragment("inspector_run_live.html", run_view(&inspector, &id).await.ok().flatten()) }
    })
}

fn events_view(inspector: &Inspector) -> minijinja::Value {
    let events: Vec<view::EventLine> = inspector.events.recent_events().iter().map(view::event_line).collect();
    context(json!({
        "events": events, "kept": crate::RECENT_EVENTS, "slug": inspector.settings.slug,
        "sign_out": inspector.access.signs_in(),
    }))
}

pub(crate) async fn events_page(State(inspector): State<Inspector>) -> Response {
    render(StatusCode::OK, "inspector_events.html", events_view(&inspector))
}

pub(crate) async fn events_live(State(inspector): State<Inspector>) -> Response {
    let shared = inspector.clone();
    picogent_web::live(&inspector.live_streams, wake(&inspector), move || {
        let inspector = shared.clone();
        async move { fragment("inspector_events_live.html", Some(events_view(&inspector))) }
    })
}

pub(crate) async fn health_page(State(inspector): State<Inspector>) -> Response {
    let today = time::OffsetDateTime::now_utc().date();
    let mut days = Vec::new();
    for back in (0..SPEND_DAYS).rev() {
        let day = today - time::Duration::days(back);
        match inspector.state.spend_on(day).await {
            Ok(spend) => days.push((day, spend)),
            Err(error) => return state_failed(error),
        }
    }
    let settings = &inspector.settings;
    let (bars, budget_y) = view::spend_chart(days, settings.limits.max_tokens_per_day, settings.priced);
    let status = &inspector.status;
    let last_event = inspector.events.recent_events().first().map(|event| view::rfc3339(event.at));
    let startup = status.startup().map(|report| view::startup_view(&report));
    let view = context(json!({
        "bars": bars, "budget_y": budget_y, "budget": settings.limits.max_tokens_per_day,
        "max_cost_per_day": settings.limits.max_cost_per_day,
        "connected": status.connected(), "caught_up": status.caught_up(), "superseded": status.superseded(),
        "active": status.active_runs(), "last_event": last_event,
        "startup": startup,
        "model": settings.model, "model_url": picogent_support::secret::shown_url(&settings.model_url), "tools": *inspector.tools,
        "tracker": picogent_support::secret::shown_url(&settings.tracker_url), "slug": settings.slug, "chart_width": 40 * SPEND_DAYS + 60,
        "sign_out": inspector.access.signs_in(),
    }));
    render(StatusCode::OK, "inspector_health.html", view)
}

/// The token form, answered with `status` (401 for a refused request).
pub(crate) fn login_form(status: StatusCode, wrong: bool) -> Response {
    render(status, "inspector_login.html", context(json!({"wrong": wrong})))
}

pub(crate) async fn login_page(State(inspector): State<Inspector>) -> Response {
    match inspector.access {
        Access::Open => Redirect::to("/").into_response(),
        Access::Token(_) => login_form(StatusCode::OK, false),
    }
}

#[derive(Debug, serde::Deserialize)]
pub(crate) struct Login {
    token: String,
}

/// Checks the token of the form and keeps a session for the browser in an `HttpOnly` cookie.
pub(crate) async fn login(State(inspector): State<Inspector>, form: Result<Form<Login>, FormRejection>) -> Response {
    let Access::Token(token) = &inspector.access else { return Redirect::to("/").into_response() };
    // Counted before the token is looked at: right or wrong, no more than the rate.
    if let Err(wait) = inspector.sign_ins.take() {
        let seconds = picogent_web::sessions::retry_after_secs(wait);
        // At debug: the attempts let through, wrong ones, are each a warning already.
        tracing::debug!(per_minute = inspector.sign_ins.per_minute(), "refused a sign-in: too many in the last minute");
        let message = format!(
            "too many sign-ins to this inspector in the last minute (at most {} a minute): wait {seconds} s and try \
             again",
            inspector.sign_ins.per_minute()
        );
        let mut page = error_page(StatusCode::TOO_MANY_REQUESTS, &message);
        page.headers_mut().insert(header::RETRY_AFTER, seconds.into());
        return page;
    }
    let Ok(Form(Login { token: given })) = form else { return login_form(StatusCode::UNAUTHORIZED, true) };
    if !token.matches(given.trim()) {
        tracing::warn!("refused an inspector sign-in with a wrong token");
        return login_form(StatusCode::UNAUTHORIZED, true);
    }
    let session = inspector.sessions.open(());
    ([(header::SET_COOKIE, picogent_web::session_cookie(SESSION_COOKIE, &session))], Redirect::to("/")).into_response()
}

/// Signs the browser out: its session ends on the server (its cookie, replayed, opens nothing)
/// and the cookie is cleared.
pub(crate) async fn logout(State(inspector): State<Inspector>, headers: axum::http::HeaderMap) -> Response {
    if let Some(id) = picogent_web::cookie(&headers, SESSION_COOKIE) {
        inspector.sessions.close(id);
    }
    let target = if inspector.access.signs_in() { "/login" } else { "/" };
    ([(header::SET_COOKIE, picogent_web::session_cookie(SESSION_COOKIE, ""))], Redirect::to(target)).into_response()
}
