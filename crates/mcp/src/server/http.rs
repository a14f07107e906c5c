//! The Streamable HTTP transport and who may use it: the bearer token, and the `Origin` and
//! `Host` checks against DNS rebinding.
//!
//! Invariants:
//! - nothing is served without the bearer token (401), compared in constant time and never
//!   logged; then `Host`/`Origin` are checked (403), loopback always allowed (the same loopback
//!   names as the web pages', `picogent_web::hosts`);
//! - a non-loopback listen address is refused unless `mcp.allowed_hosts` names the hosts clients
//!   will use.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::{McpServer, McpServerError};
use crate::config::McpConfig;
use picogent_support::secret::Secret;
use picogent_web::hosts::{LOOPBACK_HOSTS, LOOPBACK_ORIGINS};

/// Who may use the HTTP endpoint: the bearer token and the allowed `Origin`/`Host` values; and,
/// served on a listener of its own ([`serve_http`]), that listener's limits.
#[derive(Debug, Clone)]
pub struct HttpSecurity {
    token: Secret,
    allowed_origins: Vec<String>,
    allowed_hosts: Vec<String>,
    doors: picogent_web::DoorLimits,
}

impl HttpSecurity {
    /// The token and lists as given; loopback origins and hosts are added. The listener's limits
    /// are the defaults.
    pub fn new(token: Secret, allowed_origins: Vec<String>, allowed_hosts: Vec<String>) -> HttpSecurity {
        HttpSecurity { token, allowed_origins, allowed_hosts, doors: picogent_web::DoorLimits::default() }
    }

    /// The same, with `doors` as the limits of [`serve_http`]'s listener.
    pub fn with_doors(self, doors: picogent_web::DoorLimits) -> HttpSecurity {
        HttpSecurity { doors, ..self }
    }

    /// Reads the token from the environment variable `mcp.token_env` names.
    pub fn from_config(config: &McpConfig) -> Result<HttpSecurity, McpServerError> {
        let token = Secret::from_env(&config.token_env).map_err(McpServerError::Token)?;
        Ok(HttpSecurity::new(token, config.allowed_origins.clone(), config.allowed_hosts.clone()))
    }

    fn transport_config(&self, cancel: CancellationToken) -> StreamableHttpServerConfig {
        // The loopback lists are the pages' own (`picogent_web::hosts`); rmcp checks them here.
        let origins: Vec<String> = LOOPBACK_ORIGINS
            .iter()
            .map(|origin| origin.to_string())
            .chain(self.allowed_origins.iter().cloned())
            .collect();
        let hosts: Vec<String> =
            LOOPBACK_HOSTS.iter().map(|host| host.to_string()).chain(self.allowed_hosts.iter().cloned()).collect();
        StreamableHttpServerConfig::default()
            .with_allowed_hosts(hosts)
            .with_allowed_origins(origins)
            .enforce_origin_validation()
            .with_cancellation_token(cancel)
    }
}

/// Refuses a non-loopback listen address unless `mcp.allowed_hosts` names the hosts clients will
/// use (which is the only way such clients could pass the `Host` check anyway).
pub fn check_listen_address(addr: SocketAddr, config: &McpConfig) -> Result<(), McpServerError> {
    if addr.ip().is_loopback() || !config.allowed_hosts.is_empty() {
        Ok(())
    } else {
        Err(McpServerError::NotLoopback { addr })
    }
}

/// The Streamable HTTP endpoint as an axum router, for `.nest("/mcp", router)` into a listener:
/// bearer token first (401), then `Host`/`Origin` (403), then MCP. Both protocol eras are
/// served: 2025-11-25 clients get sessions (`Mcp-Session-Id`), 2026-07-28 requests are stateless.
pub fn http_router(server: McpServer, security: &HttpSecurity, cancel: CancellationToken) -> axum::Router {
    let server = server.with_shutdown(cancel.clone());
    let service: StreamableHttpService<McpServer, LocalSessionManager> =
        StreamableHttpService::new(move || Ok(server.clone()), Default::default(), security.transport_config(cancel));
    axum::Router::new()
        .route_service("/", service.clone())
        .fallback_service(service)
        .layer(axum::middleware::from_fn_with_state(Arc::new(security.token.clone()), require_bearer))
}

/// Serves [`http_router`] at `/mcp` on `listener`, within the security's limits of a door
/// (`picogent_web::serve`), until `cancel` fires.
pub async fn serve_http(
    server: McpServer,
    listener: tokio::net::TcpListener,
    security: &HttpSecurity,
    cancel: CancellationToken,
) -> Result<(), McpServerError> {
    let router = axum::Router::new().nest("/mcp", http_router(server, security, cancel.clone()));
    picogent_web::serve::serve(listener, router, security.doors, cancel, "mcp --http").await;
    Ok(())
}

async fn require_bearer(State(token): State<Arc<Secret>>, request: Request, next: Next) -> Response {
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer ")))
        .map(str::trim);
    match given {
        Some(given) if token.matches(given) => next.run(request).await,
        _ => {
            tracing::warn!(has_token = given.is_some(), "refused an MCP request without a valid bearer token");
            let mut response = (
                StatusCode::UNAUTHORIZED,
                "unauthorized: send `Authorization: Bearer <token>` with the token from the environment \
                 variable named by mcp.token_env\n",
            )
                .into_response();
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"picogent\""));
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_address_must_be_loopback_unless_hosts_are_configured() {
        let mut config = McpConfig::default();
        assert!(check_listen_address("127.0.0.1:8808".parse().unwrap(), &config).is_ok());
        assert!(check_listen_address("[::1]:8808".parse().unwrap(), &config).is_ok());
        let error = check_listen_address("0.0.0.0:8808".parse().unwrap(), &config).unwrap_err();
        assert!(error.to_string().contains("mcp.allowed_hosts"), "{error}");
        config.allowed_hosts = vec!["agent.example.com".into()];
        assert!(check_listen_address("0.0.0.0:8808".parse().unwrap(), &config).is_ok());
    }
}
