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
}

pub fn routes(metrics: Arc<Metrics>, status: Arc<StatusBoard>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(HttpState { metrics, status })
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
    if let Some(view) = state.status.replica() {
        body.push_str(&crate::metrics::render_replica(&view));
    }
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], body)
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
