//! Opening one external server: its transport — a child process over stdio, or Streamable HTTP —
//! and the handshake, 2026-07-28 `server/discover` first, falling back to 2025-11-25 `initialize`.
//!
//! Invariants:
//! - a stdio server inherits only [`INHERITED_ENV`] plus its own `env`, never picogent's tokens;
//! - no message of the server is held past `max_result_bytes`: a stdio server's stdout is read
//!   through [`LimitedLines`] (`limit.rs`), and the Streamable HTTP client refuses a body or an
//!   event past it before reading on;
//! - `${NAME}` in `env` and `headers` is read from the environment here, at connect time, into a
//!   [`Secret`]; header values are marked sensitive, and only header names are ever logged.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use rmcp::service::{RunningService, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, Transport};
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient};
use tokio::io::AsyncBufReadExt;
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::limit::{LimitedLines, Overflow, transport_line_limit};
use super::{FALLBACK_PROTOCOL, Handler, PREFERRED_PROTOCOL, ServerConnection};
use picogent_support::secret::Secret;

/// How long a stdio server may take to exit once its stdin is closed, before it is killed.
const CHILD_EXIT_WAIT: Duration = Duration::from_secs(3);

/// The only variables of picogent's environment a stdio server inherits.
const INHERITED_ENV: &[&str] = &["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "TMPDIR", "TZ"];

/// Why connecting failed (logged; the supervisor retries).
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("cannot start `{command}`: {source}")]
    Spawn { command: String, source: std::io::Error },
    #[error("{what} names environment variable {name}, which is not set or empty")]
    MissingSecret { what: String, name: String },
    #[error("header {name:?} is not a valid HTTP header: {message}")]
    BadHeader { name: String, message: String },
    #[error("handshake failed: {0}")]
    Handshake(String),
    #[error("handshake did not finish within {0} ms")]
    HandshakeTimedOut(u64),
}

type Running = RunningService<RoleClient, Handler>;

/// A connection made: the running service, the stdio child's process id, and what its reader
/// tells its calls.
pub(super) struct Connected {
    pub running: Running,
    pub pid: Option<u32>,
    pub overflow: Arc<Overflow>,
}

impl ServerConnection {
    /// Connects once: 2026-07-28 discovery with fallback to 2025-11-25 on the same transport, and
    /// if that fails, a fresh transport with the plain 2025-11-25 `initialize`. Answers the
    /// running service and, for a stdio server, the child's process id.
    pub(super) async fn connect(&self, handler: Handler) -> Result<Connected, ConnectError> {
        match self.config.protocol.as_deref() {
            Some("2025-11-25") => return self.connect_with(handler, ClientLifecycleMode::Initialize).await,
            Some("2026-07-28") => {
                let discovery =
                    ClientLifecycleMode::Auto { preferred_versions: vec![PREFERRED_PROTOCOL], legacy_version: None };
                return self.connect_with(handler, discovery).await;
            }
            _ => {}
        }
        let auto = ClientLifecycleMode::Auto {
            preferred_versions: vec![PREFERRED_PROTOCOL],
            legacy_version: Some(FALLBACK_PROTOCOL),
        };
        match self.connect_with(handler.clone(), auto).await {
            Ok(connected) => Ok(connected),
            Err(ConnectError::Handshake(message)) => {
                tracing::info!(server = %self.name, %message, "discovery failed; retrying with initialize (2025-11-25)");
                self.connect_with(handler, ClientLifecycleMode::Initialize).await
            }
            Err(other) => Err(other),
        }
    }

    async fn connect_with(&self, handler: Handler, lifecycle: ClientLifecycleMode) -> Result<Connected, ConnectError> {
        // A server may start slowly (an interpreter, a package download): the handshake gets at
        // least 30 s whatever the per-request timeout, and discovery alone may wait 10 s for a
        // silent legacy server before falling back.
        let limit = self.timeout().max(Duration::from_secs(30)) + Duration::from_secs(10);
        let timed_out = |_| ConnectError::HandshakeTimedOut(limit.as_millis() as u64);
        let handshake = |error: rmcp::service::ClientInitializeError| ConnectError::Handshake(error.to_string());
        let overflow = Arc::new(Overflow::default());
        if let Some(command) = &self.config.command {
            let transport = self.spawn(command, Arc::clone(&overflow))?;
            let pid = transport.child.id();
            let running = tokio::time::timeout(limit, handler.serve_with_lifecycle(transport, lifecycle))
                .await
                .map_err(timed_out)?
                .map_err(handshake)?;
            Ok(Connected { running, pid, overflow })
        } else {
            let transport = self.http_transport()?;
            let running = tokio::time::timeout(limit, handler.serve_with_lifecycle(transport, lifecycle))
                .await
                .map_err(timed_out)?
                .map_err(handshake)?;
            Ok(Connected { running, pid: None, overflow })
        }
    }

    /// Starts a stdio server as a child process; its stderr goes to the debug log, its stdout is
    /// read through [`LimitedLines`].
    fn spawn(&self, command: &str, overflow: Arc<Overflow>) -> Result<ChildTransport, ConnectError> {
        let mut child = tokio::process::Command::new(command);
        // The child gets a minimal environment plus its `env`: picogent's own secrets (the
        // tracker token, the model key) are not handed to third-party code.
        child.args(&self.config.args).kill_on_drop(true).env_clear();
        for key in INHERITED_ENV {
            if let Some(value) = std::env::var_os(key) {
                child.env(key, value);
            }
        }
        for (key, value) in &self.config.env {
            child.env(key, expand_env(value, &format!("env {key}"))?.expose());
        }
        if let Some(cwd) = &self.config.cwd {
            child.current_dir(cwd);
        }
        child.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let spawn_error = |source| ConnectError::Spawn { command: command.to_string(), source };
        let mut process = child.spawn().map_err(spawn_error)?;
        let taken = (process.stdin.take(), process.stdout.take(), process.stderr.take());
        let (Some(stdin), Some(stdout), stderr) = taken else {
            return Err(spawn_error(std::io::Error::other("the child's stdin or stdout is not a pipe")));
        };
        if let Some(stderr) = stderr {
            let server = self.name.clone();
            tokio::spawn(async move {
                let mut lines = tokio::io::BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::debug!(server = %server, "mcp server stderr: {line}");
                }
            });
        }
        let limit = self.config.max_result_bytes;
        let stdout = LimitedLines::new(stdout, &self.name, limit, overflow);
        // Every line reaching rmcp's transport is within the limit already, but for the cut end of
        // one over it, which its own limit (16 MiB by default) is set to drop unparsed.
        let transport = AsyncRwTransport::new(stdout, stdin).with_max_line_length(transport_line_limit(limit));
        Ok(ChildTransport { transport, child: process })
    }

    /// A Streamable HTTP transport to `url`, with the configured headers (values are secrets).
    fn http_transport(&self) -> Result<StreamableHttpClientTransport<reqwest::Client>, ConnectError> {
        let url = self.config.url.clone().unwrap_or_default();
        let mut headers = std::collections::HashMap::new();
        for (name, value) in &self.config.headers {
            let header_name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                .map_err(|e| ConnectError::BadHeader { name: name.clone(), message: e.to_string() })?;
            let secret = expand_env(value, &format!("header {name}"))?;
            let mut header_value =
                reqwest::header::HeaderValue::from_str(secret.expose()).map_err(|_| ConnectError::BadHeader {
                    name: name.clone(),
                    message: "the value has characters not allowed in a header".into(),
                })?;
            header_value.set_sensitive(true);
            headers.insert(header_name, header_value);
        }
        let limit = self.config.max_result_bytes;
        let config = StreamableHttpClientTransportConfig::with_uri(url)
            .custom_headers(headers)
            .max_json_response_size(limit)
            .max_sse_event_size(limit);
        Ok(StreamableHttpClientTransport::from_config(config))
    }
}

/// A stdio server: its child process, spoken to over its stdin and (limited) stdout. Dropping it
/// kills the child.
pub(super) struct ChildTransport {
    transport: AsyncRwTransport<RoleClient, LimitedLines<ChildStdout>, ChildStdin>,
    child: Child,
}

impl Transport<RoleClient> for ChildTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.transport.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.transport.receive()
    }

    /// As the MCP specification's stdio shutdown asks: stdin closed, a moment to exit, then killed.
    async fn close(&mut self) -> Result<(), Self::Error> {
        self.transport.close().await?;
        if tokio::time::timeout(CHILD_EXIT_WAIT, self.child.wait()).await.is_err() {
            self.child.start_kill()?;
            self.child.wait().await?;
        }
        Ok(())
    }
}

/// Replaces every `${NAME}` in `value` with that environment variable (a secret: the result is
/// never logged). A missing or empty variable is an error naming it.
pub fn expand_env(value: &str, what: &str) -> Result<Secret, ConnectError> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            rest = "";
            break;
        };
        let name = &after[..end];
        let secret = Secret::from_env(name)
            .map_err(|_| ConnectError::MissingSecret { what: what.to_string(), name: name.to_string() })?;
        out.push_str(secret.expose());
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(Secret::new(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expand_env_reads_named_variables_and_names_missing_ones() {
        // Cargo sets CARGO_PKG_NAME for the test process; setting a variable here would race with
        // other tests' threads.
        let value = expand_env("Bearer ${CARGO_PKG_NAME}!", "header Authorization").unwrap();
        assert_eq!(value.expose(), format!("Bearer {}!", env!("CARGO_PKG_NAME")));
        let error = expand_env("${PICOGENT_TEST_MCP_ABSENT}", "header X").unwrap_err().to_string();
        assert!(error.contains("PICOGENT_TEST_MCP_ABSENT") && error.contains("header X"), "{error}");
        assert_eq!(expand_env("plain", "x").unwrap().expose(), "plain");
    }
}
