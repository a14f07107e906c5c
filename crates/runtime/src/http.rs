//! The agent's own HTTP listener: `/healthz`, `/readyz`, `/metrics`, served within the limits of
//! `http.header_timeout_ms` and `http.max_connections` (`picogent_web::serve`). Nothing served here
//! carries a secret.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::status::StatusBoard;

#[derive(Clone)]
struct HttpState {
    metrics: Arc<Metrics>,
    status: Arc<StatusBoard>,
    /// What waits now, for `/metrics`: the writes the agent's tracker connection holds at its
    /// presence gate, and the calls waiting for their turn on each external MCP server.
    live: Live,
}

/// Where `/metrics` reads what waits now.
#[derive(Clone)]
pub struct Live {
    pub client: picogent_tracker::TrackerClient,
    pub host: Arc<picogent_mcp::host::McpHost>,
}

pub fn routes(metrics: Arc<Metrics>, status: Arc<StatusBoard>, live: Live) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(HttpState { metrics, status, live })
}

/// The status code says whether the agent is ready; the JSON body says so in words, with how
/// it started (`startup`: the stream's mode and seq, what the first reconciliation found) and
/// what the start-up probe found of the model (`model`: its verdict, and the fix; `null` when no
/// probe was sent). A model that cannot work tasks does not make the agent unready: it still
/// hears events, and its runs say why they fail.
async fn readyz(State(state): State<HttpState>) -> impl IntoResponse {
    let replica = state.status.replica();
    let (code, status) = if let Some(reason) = state.status.superseded() {
        (StatusCode::SERVICE_UNAVAILABLE, format!("stopped: {reason}"))
    } else if let Some(view) = replica.as_ref().filter(|view| !view.holds_stream) {
        // A standby runs queued runs; the stream is another replica's (or nobody's, for now).
        let holder = view.others.iter().find(|other| other.holds_stream).map(|other| other.id.as_str());
        let status = match holder {
            Some(holder) => format!("ready: standby, running queued runs; replica {holder} holds the event stream"),
            None => "ready: standby, running queued runs; no replica holds the event stream right now".to_string(),
        };
        (StatusCode::OK, status)
    } else if state.status.caught_up() {
        (StatusCode::OK, "ready".to_string())
    } else if state.status.connected() {
        (StatusCode::SERVICE_UNAVAILABLE, "catching up".to_string())
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not connected to the tracker".to_string())
    };
    let mut body =
        serde_json::json!({"status": status, "startup": state.status.startup(), "model": state.status.model()});
    if let Some(view) = replica {
        body["replica"] = serde_json::json!(view);
    }
    if let Some(view) = state.status.workspaces() {
        body["workspaces"] = serde_json::json!(view);
    }
    (code, Json(body))
}

async fn metrics_text(State(state): State<HttpState>) -> impl IntoResponse {
    let mut body = state.metrics.render(state.status.active_runs(), state.status.connected(), state.status.caught_up());
    body.push_str(&crate::metrics::render_awaiting_input(state.status.awaiting_input()));
    let servers: Vec<(&str, usize)> =
        state.live.host.servers().iter().map(|server| (server.name(), server.calls_waiting())).collect();
    body.push_str(&crate::metrics::render_held(state.live.client.writes_held(), &servers));
    if let Some(view) = state.status.replica() {
        body.push_str(&crate::metrics::render_replica(&view));
    }
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], body)
}

/// The agent's listener, bound at the start of `start`, before anything waits on the tracker:
/// until the agent is ready to serve its routes ([`Door::open_fully`]), `/healthz` answers (the
/// process is alive) and `/readyz` says, not ready, what it waits for.
pub struct Door {
    routes: Arc<std::sync::RwLock<Router>>,
    pub addr: SocketAddr,
    pub handle: tokio::task::JoinHandle<()>,
}

impl Door {
    /// Binds `listen` and serves the starting routes, `waiting` being what `/readyz` says.
    pub async fn bind(
        listen: SocketAddr,
        limits: picogent_web::DoorLimits,
        shutdown: CancellationToken,
        waiting: String,
    ) -> std::io::Result<Door> {
        let body = serde_json::json!({"status": format!("starting: {waiting}")});
        let starting = Router::new().route("/healthz", get(|| async { "ok\n" })).fallback(get(move || {
            let body = body.clone();
            async move { (StatusCode::SERVICE_UNAVAILABLE, Json(body)) }
        }));
        let routes = Arc::new(std::sync::RwLock::new(starting));
        let current = routes.clone();
        let door = Router::new().fallback_service(tower::service_fn(move |request: axum::extract::Request| {
            let router = current.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
            tower::ServiceExt::oneshot(router, request)
        }));
        let (addr, handle) = serve(listen, door, limits, shutdown).await?;
        Ok(Door { routes, addr, handle })
    }

    /// From now on the listener serves `routes`.
    pub fn open_fully(&self, routes: Router) {
        *self.routes.write().unwrap_or_else(std::sync::PoisonError::into_inner) = routes;
    }
}

/// Binds `listen` and serves `router` within `limits` until `shutdown`. Returns the bound address.
pub async fn serve(
    listen: SocketAddr,
    router: Router,
    limits: picogent_web::DoorLimits,
    shutdown: CancellationToken,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    let handle = tokio::spawn(picogent_web::serve::serve(listener, router, limits, shutdown, "http.listen"));
    Ok((addr, handle))
}
