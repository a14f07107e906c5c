//! The schedules as people see them: each job with its next firing, how its last firing ended
//! and what that cost, on the inspector's `/schedules` page (with a button that fires one now)
//! and in `picogent schedules list`; and `picogent schedules run NAME`, which asks the running
//! agent for a firing now.

use std::fmt::Write as _;
use std::process::ExitCode;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Serialize;
use serde_json::json;

use crate::Inspector;
use picogent_schedule::{Fired, Job, RunNowError};
use picogent_state::{FiringOutcome, FiringRow, RunStatus, State as AgentState, StateError};
use picogent_web::view as context;

/// One job, as the page and the command line show it.
#[derive(Debug, Clone, Serialize)]
pub struct ScheduleLine {
    pub name: String,
    pub kind: &'static str,
    /// The pattern and its zone: `0 9 * * 1-5 (Europe/Berlin)`.
    pub cadence: String,
    pub project: Option<String>,
    /// What the kind reads from the board before it decides.
    pub reads: &'static str,
    /// The next firing (RFC 3339), in the job's zone, and how far off it is (`in 3 h 20 min`).
    pub next: Option<String>,
    pub next_local: Option<String>,
    pub next_in: Option<String>,
    pub last: Option<LastFiring>,
}

/// How the job's newest firing went.
#[derive(Debug, Clone, Serialize)]
pub struct LastFiring {
    pub at: String,
    pub at_local: String,
    /// Its outcome, with a queued firing's run's own end when it has ended: `posted`, `idle`,
    /// `skipped`, `failed`, `stopped`, `queued`, `running`.
    pub outcome: String,
    pub detail: String,
    pub run_id: Option<String>,
    pub tokens: u64,
    pub cost: Option<f64>,
    /// The cost as shown, `0.0012`, when the model has a price.
    pub cost_text: Option<String>,
}

/// Each job with its next firing after `now_ms` and its newest firing as the state has it.
pub async fn schedule_lines(jobs: &[Job], state: &AgentState, now_ms: i64) -> Result<Vec<ScheduleLine>, StateError> {
    let mut lines = Vec::with_capacity(jobs.len());
    for job in jobs {
        let next = job.cadence.next_after(now_ms);
        let last = match state.last_firings(&job.name, 1).await?.into_iter().next() {
            Some(row) => Some(last_firing(job, row, state).await?),
            None => None,
        };
        lines.push(ScheduleLine {
            name: job.name.clone(),
            kind: job.kind.name(),
            cadence: job.cadence.describe(),
            project: job.kind.project().map(str::to_string),
            reads: job.kind.reads(),
            next: next.map(rfc3339),
            next_local: next.map(|at| job.cadence.local_time(at)),
            next_in: next.map(|at| {
                let ms = u64::try_from(at.saturating_sub(now_ms)).unwrap_or(0);
                format!("in {}", picogent_schedule::plan::human(ms.max(60_000) / 60_000 * 60_000))
            }),
            last,
        });
    }
    Ok(lines)
}

async fn last_firing(job: &Job, row: FiringRow, state: &AgentState) -> Result<LastFiring, StateError> {
    let run = match &row.run_id {
        Some(id) => state.get_run(id).await?,
        None => None,
    };
    let outcome = match (&run, row.outcome) {
        // The run's own end, when the firing's record still says it was queued (stopped before
        // it started, or its record was not written back).
        (Some(run), FiringOutcome::Queued) => match run.status {
            RunStatus::Completed => FiringOutcome::Posted.as_str(),
            RunStatus::Failed | RunStatus::DidNothing => FiringOutcome::Failed.as_str(),
            RunStatus::Stopped => FiringOutcome::Stopped.as_str(),
            RunStatus::Running => "running",
            RunStatus::Queued | RunStatus::Interrupted => FiringOutcome::Queued.as_str(),
        },
        (_, outcome) => outcome.as_str(),
    };
    // A stale firing's detail is the list of task ids it nudged, for the next firings: the run's
    // outcome says it in words.
    let detail = match (row.detail.starts_with('{'), &run) {
        (true, Some(run)) => run.outcome.clone().unwrap_or_default(),
        (true, None) => String::new(),
        (false, _) => row.detail.clone(),
    };
    Ok(LastFiring {
        at: rfc3339(row.fire_at_ms),
        at_local: job.cadence.local_time(row.fire_at_ms),
        outcome: outcome.to_string(),
        detail,
        run_id: row.run_id,
        tokens: run.as_ref().map_or(0, |run| run.prompt_tokens + run.completion_tokens),
        cost: run.as_ref().and_then(|run| run.cost),
        cost_text: run.and_then(|run| run.cost).map(|cost| format!("{cost:.4}")),
    })
}

fn rfc3339(ms: i64) -> String {
    crate::view::rfc3339_ms(ms).unwrap_or_else(|| ms.to_string())
}

/// `GET /schedules`.
pub async fn schedules_page(State(inspector): State<Inspector>) -> Response {
    let Some(schedules) = &inspector.schedules else {
        return crate::pages::error_page(StatusCode::NOT_FOUND, "this agent runs no scheduler");
    };
    match schedule_lines(schedules.jobs(), &inspector.state, schedules.now_ms()).await {
        Ok(lines) => crate::pages::render(
            StatusCode::OK,
            "inspector_schedules.html",
            context(json!({
                "schedules": lines, "slug": inspector.settings.slug, "sign_out": inspector.access.signs_in(),
            })),
        ),
        Err(error) => crate::pages::state_failed(error),
    }
}

/// `POST /schedules/{name}/run`: a firing now. A browser is sent back to the page (or to the run
/// it queued); a client that accepts JSON gets [`Fired`] (`picogent schedules run`).
pub async fn run_now(State(inspector): State<Inspector>, Path(name): Path<String>, headers: HeaderMap) -> Response {
    let Some(schedules) = &inspector.schedules else {
        return crate::pages::error_page(StatusCode::NOT_FOUND, "this agent runs no scheduler");
    };
    let wants_json = headers
        .get(header::ACCEPT)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|accept| accept.contains("application/json"));
    let fired = schedules.run_now(&name).await;
    match (fired, wants_json) {
        (Ok(fired), true) => axum::Json(fired).into_response(),
        (Ok(Fired::Queued { run_id }), false) => Redirect::to(&format!("/runs/{run_id}")).into_response(),
        (Ok(_), false) => Redirect::to("/schedules").into_response(),
        (Err(error @ RunNowError::Unknown { .. }), true) => {
            (StatusCode::NOT_FOUND, axum::Json(json!({"error": error.to_string()}))).into_response()
        }
        (Err(error), true) => {
            (StatusCode::SERVICE_UNAVAILABLE, axum::Json(json!({"error": error.to_string()}))).into_response()
        }
        (Err(error @ RunNowError::Unknown { .. }), false) => {
            crate::pages::error_page(StatusCode::NOT_FOUND, &error.to_string())
        }
        (Err(error), false) => crate::pages::error_page(StatusCode::SERVICE_UNAVAILABLE, &error.to_string()),
    }
}

/// `picogent schedules list`: the jobs of the config at `config_path` (its `schedules`), their next
/// firing and how the last one went, from its state database (`state`, of the agent `slug`).
pub async fn list(
    config_path: &std::path::Path,
    schedules: &picogent_schedule::SchedulesConfig,
    state: &picogent_state::StateConfig,
    slug: &str,
) -> anyhow::Result<ExitCode> {
    let jobs = picogent_schedule::jobs(schedules, std::path::Path::new("."))
        .map_err(|problem| anyhow::anyhow!("field `{}`: {}", problem.field, problem.message))?;
    if jobs.is_empty() {
        println!("no schedules: add a `schedules` section to {} (docs/schedules.md)", config_path.display());
        return Ok(ExitCode::SUCCESS);
    }
    let state = crate::cli::open_state(state, slug).await?;
    let now = picogent_schedule::Clock::now_ms(&picogent_schedule::SystemClock);
    let lines = schedule_lines(&jobs, &state, now).await;
    state.close().await;
    print!("{}", list_text(&lines?));
    Ok(ExitCode::SUCCESS)
}

/// The jobs as text: a block each, the way `picogent runs show` reads.
pub fn list_text(lines: &[ScheduleLine]) -> String {
    let mut out = String::new();
    for line in lines {
        let project = line.project.as_deref().map(|project| format!(" · project {project}")).unwrap_or_default();
        let _ = writeln!(out, "{} ({}{project}): {}", line.name, line.kind, line.cadence);
        match (&line.next_local, &line.next_in) {
            (Some(at), Some(wait)) => {
                let _ = writeln!(out, "  next:  {at} ({wait})");
            }
            _ => {
                let _ = writeln!(out, "  next:  never");
            }
        }
        match &line.last {
            Some(last) => {
                let mut said = format!("{} {}", last.at_local, last.outcome);
                if !last.detail.is_empty() {
                    said.push_str(&format!(": {}", last.detail));
                }
                if let Some(run) = &last.run_id {
                    said.push_str(&format!(" (run {}, {} tokens", &run[..run.len().min(8)], last.tokens));
                    if let Some(cost) = &last.cost_text {
                        said.push_str(&format!(", cost {cost}"));
                    }
                    said.push(')');
                }
                let _ = writeln!(out, "  last:  {said}");
            }
            None => {
                let _ = writeln!(out, "  last:  not fired yet");
            }
        }
        let _ = writeln!(out, "  reads: {}", line.reads);
    }
    out
}

/// `picogent schedules run NAME`: asks the agent running with the config at `config_path` (at its
/// `http.listen`, `listen`, with the token of `http.ui_token_env`, `ui_token_env`) for a firing of
/// `name` now, and prints what became of it. Exit 1 when it failed or the agent does not answer.
pub async fn run(
    config_path: &std::path::Path,
    listen: &str,
    ui_token_env: &str,
    name: &str,
) -> anyhow::Result<ExitCode> {
    let url = format!("http://{listen}/schedules/{name}/run");
    let mut request = reqwest::Client::new().post(&url).header(header::ACCEPT.as_str(), "application/json");
    if let Ok(token) = picogent_support::secret::Secret::from_env(ui_token_env) {
        request = request.bearer_auth(token.expose());
    }
    let answer = match request.send().await {
        Ok(answer) => answer,
        Err(error) => {
            eprintln!(
                "error: no agent answers at {url} ({error}): a firing runs in the running agent; start it with \
                 `picogent run --config {}` (or check http.listen)",
                config_path.display()
            );
            return Ok(ExitCode::FAILURE);
        }
    };
    let status = answer.status();
    let body: serde_json::Value = answer.json().await.unwrap_or_default();
    if !status.is_success() {
        let why = body.get("error").and_then(serde_json::Value::as_str).unwrap_or("no reason given");
        eprintln!("error: {name}: {why}");
        return Ok(ExitCode::FAILURE);
    }
    let Ok(fired) = serde_json::from_value::<Fired>(body) else {
        eprintln!("error: the agent at {url} answered something this version does not read");
        return Ok(ExitCode::FAILURE);
    };
    let line = match &fired {
        Fired::Queued { run_id } => {
            format!(
                "{name}: queued as run {run_id}; `picogent runs show {run_id} --config {}` or http://{}/runs/{run_id}",
                config_path.display(),
                listen
            )
        }
        Fired::Idle { detail } => format!("{name}: nothing to say ({detail}): no model call, nothing posted"),
        Fired::Skipped { detail } => format!("{name}: skipped: {detail}"),
        Fired::Failed { detail } => format!("{name}: failed: {detail}"),
        Fired::Handled => format!("{name}: handled already"),
        Fired::NotNow { detail } => format!("{name}: not now: {detail}"),
    };
    println!("{line}");
    Ok(if matches!(fired, Fired::Failed { .. } | Fired::NotNow { .. }) { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}
