//! The run inspector: what the agent did, as a person reads it. What `picogent run` shows at `/`
//! on `http.listen`: its runs (newest first, live), each run's prompts, turns, tool calls,
//! budgets and notice, its coding agent's output (live while it works) with the branch, commit
//! and diff it left, the recent events and what became of them, the spend per day against the
//! budget, its health, and a task tree (`/tree/{key}`: each sub-task's state, assignee, branch,
//! review round and spend).
//! `picogent runs list|show` print the same from the state database ([`cli`]), and
//! `picogent schedules list|run` the schedules ([`schedules`]).
//!
//! Codemap: this file (the routes, [`Access`], [`Inspector`]); `pages.rs` (the handlers);
//! [`view`] (the view models both the pages and [`cli`] print); [`schedules`] (the schedules'
//! page and text); [`tree`] (a task tree's page); [`record`] (what is stored with a run: the runtime writes it, the pages, the
//! CLI and MCP read it); [`startup`] (how the agent started, as the runtime reports it);
//! [`live`] (what it reads of the running agent); `settings.rs` ([`Settings`]: what it reads of
//! the configuration, handed over by the runtime or the binary); `templates/*.html`.
//!
//! Invariants:
//! - it shows, and does not act: it writes no row of the state, and the one thing it asks of the
//!   agent is a schedule's "run now", which the scheduler does ([`ScheduleControl`]);
//! - it reads what was done from the state ([`picogent_state::State`]'s read API) and what goes
//!   on now through the traits of [`live`], which the runtime implements: it never depends on the
//!   runtime, nor on the config crate ([`Settings`] is all it reads of the configuration).
//!
//! Who may look: a loopback listener needs no login; on any other address every page and stream
//! needs the token from `http.ui_token_env` (`Authorization: Bearer`, or a cookie set by the
//! token form at `/login`), and without that variable the inspector is not served at all. A
//! session of the token form ends when unused for `http.session_idle_ms`, when
//! `http.session_lifetime_ms` old, or at the sign-out button (`POST /logout`), which forgets it
//! on the server too; the form takes `SignInRate::DEFAULT_PER_MINUTE` attempts a minute.
//! Before any of that, a request must name one of the listener's own hosts (its address,
//! `localhost`, the loopback addresses, `http.allowed_hosts`), and a POST must come from the
//! inspector's own origin (`picogent_web::hosts`): otherwise a page of another site that rebinds
//! its name to 127.0.0.1 could read every transcript on a loopback listener.
//! Transcripts hold tracker and model text: every page is escaped by the templates and sent with
//! the shared Content-Security-Policy (`picogent_web`).
//!
//! Where things are: the runtime implements the traits of `live.rs` (`metrics.rs`: recent events
//! and their fate; `status.rs`; `scheduler.rs`: "run now"; `tree_view.rs`: a task tree) and serves the routes on its listener; a
//! run's coding agent output is read live from the workspace crate's `CodingRuns` while it runs and
//! as stored after, as MCP's `run://{id}/logs` reads it; `cli.rs` finds a run by the start of its
//! id (`State::run_ids_starting_with`) and keeps the list within 120 columns.

pub mod cli;
pub mod live;
mod pages;
pub mod record;
pub mod schedules;
mod settings;
pub mod startup;
pub mod tree;
pub mod view;

pub use live::{
    AgentStatus, EventLog, RECENT_EVENTS, RecentEvent, ScheduleControl, SubTask, TaskTree, TreeError, TreeSource,
    TreeTask, WaitingRun,
};
pub use settings::Settings;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, LazyLock};

use axum::Router;
use axum::extract::{Request, State as AxumState};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::{get, post};
use minijinja::Environment;
use tokio_util::sync::CancellationToken;

use picogent_state::State;
use picogent_support::secret::Secret;

/// The cookie that holds a browser's session after the token form.
const SESSION_COOKIE: &str = "inspector_session";

/// Built-in templates: constant data of the binary, parsed once.
static PAGES: LazyLock<Environment<'static>> = LazyLock::new(|| {
    picogent_web::environment(&[
        ("_inspector_nav.html", include_str!("templates/_inspector_nav.html")),
        ("_inspector_trigger.html", include_str!("templates/_inspector_trigger.html")),
        ("inspector_runs.html", include_str!("templates/inspector_runs.html")),
        ("inspector_runs_live.html", include_str!("templates/inspector_runs_live.html")),
        ("inspector_run.html", include_str!("templates/inspector_run.html")),
        ("inspector_run_live.html", include_str!("templates/inspector_run_live.html")),
        ("inspector_events.html", include_str!("templates/inspector_events.html")),
        ("inspector_events_live.html", include_str!("templates/inspector_events_live.html")),
        ("inspector_health.html", include_str!("templates/inspector_health.html")),
        ("inspector_login.html", include_str!("templates/inspector_login.html")),
        ("inspector_error.html", include_str!("templates/inspector_error.html")),
        ("inspector_schedules.html", include_str!("templates/inspector_schedules.html")),
        ("inspector_tree.html", include_str!("templates/inspector_tree.html")),
    ])
});

/// Who may use the inspector.
#[derive(Debug, Clone)]
pub enum Access {
    /// A loopback listener: whoever can reach it is on this machine.
    Open,
    /// Any other listener: the token of `http.ui_token_env`.
    Token(Secret),
}

impl Access {
    /// Whether people sign in (and so can sign out): a listener off loopback.
    pub fn signs_in(&self) -> bool {
        matches!(self, Access::Token(_))
    }

    /// The access for a listener on `listen`: open on loopback, the token elsewhere, and `None`
    /// (the inspector is not served, which the log says) elsewhere without a token.
    pub fn for_listener(listen: SocketAddr, token: Option<Secret>, token_env: &str) -> Option<Access> {
        if listen.ip().is_loopback() {
            return Some(Access::Open);
        }
        match token {
            Some(token) => Some(Access::Token(token)),
            None => {
                tracing::error!(
                    %listen,
                    "the run inspector is off: http.listen is not a loopback address and {token_env} is not set; set \
                     it to a token to serve the inspector there, or listen on 127.0.0.1"
                );
                None
            }
        }
    }
}

/// What the inspector reads. Cheap to clone.
#[derive(Clone)]
pub struct Inspector {
    pub state: State,
    /// The running agent's status (the runtime's status board).
    pub status: Arc<dyn AgentStatus>,
    /// The recent events and their fate (the runtime's metrics).
    pub events: Arc<dyn EventLog>,
    /// What it reads of the configuration.
    pub settings: Arc<Settings>,
    /// The names of the tools the agent offers, for the health page.
    pub tools: Arc<Vec<String>>,
    pub access: Access,
    /// Ends the live streams at shutdown.
    pub shutdown: CancellationToken,
    /// Browsers signed in with the token form; each ends after `http.session_idle_ms` unused,
    /// `http.session_lifetime_ms` after it began, or at sign-out.
    pub sessions: Arc<picogent_web::Sessions<()>>,
    /// Attempts at the token form in the last minute: a guesser gets 429, not a million tries.
    pub sign_ins: Arc<picogent_web::SignInRate>,
    /// The live streams open now, within `http.max_live_streams`.
    pub live_streams: picogent_web::LiveStreams,
    /// The coding agents' output of the runs going on now (`workspaces`), for the run page.
    pub coding: Option<Arc<picogent_workspace::CodingRuns>>,
    /// The schedules, for their page and its "run now".
    pub schedules: Option<Arc<dyn ScheduleControl>>,
    /// Task trees as the board and the runs show them, for `/tree/{key}`.
    pub trees: Option<Arc<dyn TreeSource>>,
}

impl Inspector {
    pub fn new(
        state: State,
        status: Arc<dyn AgentStatus>,
        events: Arc<dyn EventLog>,
        settings: Settings,
        tools: Vec<String>,
        access: Access,
        shutdown: CancellationToken,
    ) -> Inspector {
        let sessions = Arc::new(picogent_web::Sessions::new(settings.sessions));
        let sign_ins = Arc::new(picogent_web::SignInRate::new(picogent_web::SignInRate::DEFAULT_PER_MINUTE));
        let live_streams = picogent_web::LiveStreams::new(settings.max_live_streams);
        let settings = Arc::new(settings);
        let tools = Arc::new(tools);
        Inspector {
            state,
            status,
            events,
            settings,
            tools,
            access,
            shutdown,
            sessions,
            sign_ins,
            live_streams,
            coding: None,
            schedules: None,
            trees: None,
        }
    }

    /// Shows the schedules on `/schedules`, and lets a person fire one now.
    pub fn with_schedules(mut self, schedules: Arc<dyn ScheduleControl>) -> Inspector {
        self.schedules = Some(schedules);
        self
    }

    /// Shows task trees on `/tree/{key}`, and links a sub-task's run page to its tree.
    pub fn with_trees(mut self, trees: Arc<dyn TreeSource>) -> Inspector {
        self.trees = Some(trees);
        self
    }

    /// Shows the live output of the coding agents of `runs` on the run pages.
    pub fn with_coding(mut self, runs: Arc<picogent_workspace::CodingRuns>) -> Inspector {
        self.coding = Some(runs);
        self
    }
}

/// Every page and stream of the inspector, behind its access check, all behind the check of
/// the host names it answers to.
pub fn routes(inspector: Inspector) -> Router {
    let settings = &inspector.settings;
    let listen = settings.listen.parse::<SocketAddr>().map_or(IpAddr::V4(Ipv4Addr::LOCALHOST), |addr| addr.ip());
    let hosts = Arc::new(picogent_web::hosts::OwnHosts::new(listen, &settings.allowed_hosts));
    Router::new()
        .route("/", get(pages::runs_page))
        .route("/runs", get(pages::runs_page))
        .route("/runs/live", get(pages::runs_live))
        .route("/runs/{id}", get(pages::run_page))
        .route("/runs/{id}/live", get(pages::run_live))
        .route("/events", get(pages::events_page))
        .route("/events/live", get(pages::events_live))
        .route("/health", get(pages::health_page))
        .route("/schedules", get(schedules::schedules_page))
        .route("/schedules/{name}/run", post(schedules::run_now))
        .route("/tree/{key}", get(tree::tree_page))
        .layer(axum::middleware::from_fn_with_state(inspector.clone(), require_access))
        // Signing out needs no valid session: an ended one is cleared all the same.
        .route("/logout", post(pages::logout))
        // The token form and its stylesheet and script are for whoever has no token yet.
        .route("/login", get(pages::login_page).post(pages::login))
        .merge(picogent_web::asset_routes())
        .layer(axum::middleware::from_fn_with_state(hosts, picogent_web::hosts::own_hosts_only))
        .with_state(inspector)
}

/// Middleware: lets a request through when the listener is open, or it carries the token (as a
/// bearer, or the session cookie the token form set); answers 401 with the token form otherwise.
async fn require_access(AxumState(inspector): AxumState<Inspector>, request: Request, next: Next) -> Response {
    let Access::Token(token) = &inspector.access else { return next.run(request).await };
    let headers = request.headers();
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer ")));
    let by_bearer = bearer.is_some_and(|given| token.matches(given));
    let by_cookie =
        picogent_web::cookie(headers, SESSION_COOKIE).is_some_and(|id| inspector.sessions.find(id).is_some());
    if by_bearer || by_cookie {
        return next.run(request).await;
    }
    tracing::warn!(has_token = bearer.is_some(), "refused an inspector request without a valid token");
    pages::login_form(StatusCode::UNAUTHORIZED, bearer.is_some())
}

/// What wakes a live page: a run started or ended, a second passed (events, health and the
/// clock move on their own), or the shutdown.
struct InspectorWake {
    runs: tokio::sync::broadcast::Receiver<()>,
    tick: tokio::time::Interval,
    shutdown: CancellationToken,
}

impl picogent_web::Wake for InspectorWake {
    async fn wait(&mut self) -> bool {
        tokio::select! {
            _ = self.runs.recv() => true,
            _ = self.tick.tick() => true,
            _ = self.shutdown.cancelled() => false,
        }
    }
}

fn wake(inspector: &Inspector) -> InspectorWake {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    tick.reset();
    InspectorWake { runs: inspector.status.subscribe(), tick, shutdown: inspector.shutdown.clone() }
}

#[cfg(test)]
mod tests;
