//! The MCP server: the tool registry, tracker resources and prompt templates served over MCP, on
//! stdio (`picogent mcp --stdio`) or Streamable HTTP (`picogent mcp --http`, and `/mcp` on the
//! runtime's listener).
//!
//! This file holds [`McpServer`] and its rmcp handler, which answers each request by delegating
//! to the file for it: `tools.rs` (progress, the agent's tools), `resources.rs`, `prompts.rs`,
//! `control.rs` (the running agent, [`AgentControl`]), `tasks.rs` (the tasks extension: a run
//! followed as an MCP task) and `http.rs` (Streamable HTTP and its auth).
//!
//! Invariants:
//! - tools are the [`ToolSource`]'s own definitions and results, passed through unchanged; a tool
//!   failure is a result with `isError: true`, only an unknown tool name is a protocol error;
//! - rmcp speaks both protocol eras: 2026-07-28 (stateless, `server/discover`, per-request
//!   `_meta`) and 2025-11-25 (`initialize`, `Mcp-Session-Id`); rmcp also maps a missing resource
//!   to the error code of the peer's era, so this module raises `resource_not_found` only;
//! - the transports are rmcp's own: its stdio transport, its Streamable HTTP service;
//! - on stdio nothing but protocol goes to stdout (logs go to stderr, see `cli::init_logging`).

mod control;
mod http;
mod prompts;
mod resources;
mod tasks;
mod tools;

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CancelTaskParams, GetPromptRequestParams, GetPromptResponse,
    GetTaskParams, GetTaskResult, Implementation, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
    ServerCapabilities, ServerConfig, SubscriptionFilter, Tool, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

pub use control::{AgentControl, AgentControlError, AgentStatus, RunResult, StartRun};
pub use http::{HttpSecurity, check_listen_address, http_router, serve_http};
pub use picogent_state::RunSummary;

use picogent_prompts::Prompts;
use picogent_support::secret::SecretError;
use picogent_tools::{ToolContext, ToolSource};
use picogent_tracker::TrackerClient;
use tools::{RunTool, agent_tools};

/// The name this server gives itself in `serverInfo`.
pub const SERVER_NAME: &str = "picogent";

/// How often a long tool call reports progress when the client asked for it.
const DEFAULT_PROGRESS_INTERVAL: Duration = Duration::from_secs(1);

/// How long clients may cache lists that only change when the process restarts (tools, prompts,
/// templates).
const STATIC_LIST_TTL_MS: u64 = 60_000;

const JSON_MIME: &str = "application/json";

/// The MCP server. Cheap to clone: the HTTP transport makes one handler per session from clones.
#[derive(Clone)]
pub struct McpServer {
    inner: Arc<Inner>,
}

struct Inner {
    tools: Arc<dyn ToolSource>,
    tracker: TrackerClient,
    prompts: Arc<Prompts>,
    /// The agent's own slug: tools default to acting as it, and `reply_to` renders "you are @slug".
    agent_slug: String,
    agent: Option<Arc<dyn AgentControl>>,
    progress_interval: Duration,
    /// Ends the tasks that forward run changes to legacy sessions.
    shutdown: CancellationToken,
}

impl McpServer {
    /// A server over `tools`, reading resources and prompt data from the tracker as `tracker`'s
    /// member (`agent_slug`), rendering prompts from `prompts`.
    pub fn new(
        tools: Arc<dyn ToolSource>,
        tracker: TrackerClient,
        prompts: Arc<Prompts>,
        agent_slug: impl Into<String>,
    ) -> McpServer {
        McpServer {
            inner: Arc::new(Inner {
                tools,
                tracker,
                prompts,
                agent_slug: agent_slug.into(),
                agent: None,
                progress_interval: DEFAULT_PROGRESS_INTERVAL,
                shutdown: CancellationToken::new(),
            }),
        }
    }

    /// Adds the running agent's resources and tools, and list-changed notifications.
    pub fn with_agent(self, agent: Arc<dyn AgentControl>) -> McpServer {
        self.rebuild(|inner| inner.agent = Some(agent))
    }

    /// Sets how often long tool calls report progress (default one second): the tests see
    /// several reports without waiting seconds.
    #[cfg(any(test, feature = "test-support"))]
    pub fn with_progress_interval(self, interval: Duration) -> McpServer {
        self.rebuild(|inner| inner.progress_interval = interval)
    }

    /// Ties the background tasks of legacy sessions to `shutdown`.
    pub fn with_shutdown(self, shutdown: CancellationToken) -> McpServer {
        self.rebuild(|inner| inner.shutdown = shutdown)
    }

    fn rebuild(self, change: impl FnOnce(&mut Inner)) -> McpServer {
        let mut inner = match Arc::try_unwrap(self.inner) {
            Ok(inner) => inner,
            Err(shared) => Inner {
                tools: shared.tools.clone(),
                tracker: shared.tracker.clone(),
                prompts: shared.prompts.clone(),
                agent_slug: shared.agent_slug.clone(),
                agent: shared.agent.clone(),
                progress_interval: shared.progress_interval,
                shutdown: shared.shutdown.clone(),
            },
        };
        change(&mut inner);
        McpServer { inner: Arc::new(inner) }
    }

    /// Every tool offered: the source's, then the agent's.
    fn all_tools(&self) -> Vec<Tool> {
        let mut tools: Vec<Tool> = self.inner.tools.tools().iter().map(crate::wire::tool_to_mcp).collect();
        if self.inner.agent.is_some() {
            tools.extend(agent_tools());
        }
        tools
    }
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        let capabilities = if self.inner.agent.is_some() {
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_resources_list_changed()
                .enable_prompts()
                .enable_tasks()
                .build()
        } else {
            ServerCapabilities::builder().enable_tools().enable_resources().enable_prompts().build()
        };
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new(SERVER_NAME, env!("CARGO_PKG_VERSION")))
            .with_instructions(format!(
                "Tools, resources and prompts of the Team Board tracker, acting as @{}. Tasks are \
                 task://{{key}}, their comments task://{{key}}/messages.",
                self.inner.agent_slug
            ))
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(&[
            ProtocolVersion::V_2025_03_26,
            ProtocolVersion::V_2025_06_18,
            ProtocolVersion::V_2025_11_25,
            ProtocolVersion::V_2026_07_28,
        ])
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        match RunTool::parse(name) {
            Some(tool) if self.inner.agent.is_some() => Some(tool.definition()),
            _ => self.inner.tools.tool(name).as_ref().map(crate::wire::tool_to_mcp),
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.all_tools())
            .with_ttl_ms(STATIC_LIST_TTL_MS)
            .with_cache_scope(CacheScope::Private))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let progress = context.meta.get_progress_token().map(|token| (context.peer.clone(), token));
        if let (Some(agent), Some(RunTool::Start)) = (&self.inner.agent, RunTool::parse(&name))
            && tasks::wants_task(&context)
        {
            // A client of the tasks extension gets the run as a task at once, or the refusal.
            return Ok(match tools::start_request(arguments) {
                Ok(request) => match agent.start_run(request).await {
                    Ok(run_id) => tasks::started(&run_id).into(),
                    Err(error) => tools::error_result(error.to_string()).into(),
                },
                Err(refused) => refused.into(),
            });
        }
        if self.inner.agent.is_some() && RunTool::parse(&name).is_some() {
            let call = self.call_agent_tool(&name, arguments);
            return Ok(self.with_progress(&name, progress, call).await.into());
        }
        if self.inner.tools.tool(&name).is_none() {
            return Err(ErrorData::invalid_params(
                format!("unknown tool {name}: tools/list names the tools offered"),
                Some(json!({ "name": name })),
            ));
        }
        let tool_context =
            ToolContext { cancel: context.ct.clone(), ..ToolContext::new(self.inner.agent_slug.clone()) };
        let call = async { crate::wire::result_to_mcp(self.inner.tools.call(&name, arguments, &tool_context).await) };
        Ok(self.with_progress(&name, progress, call).await.into())
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        self.task_state(request).await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.cancel(request).await
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.update(request)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(self.resource_list().await)
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(self.resource_template_list())
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        Ok(self.read_resource_uri(&request.uri).await?.into())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(self.prompt_list())
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        Ok(self.render_prompt(request).await?.into())
    }

    /// Listening is always accepted (reduced to what is advertised): without a running agent
    /// nothing changes, so such a stream stays quiet until the client closes it.
    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        Some(requested.supported_by(&self.get_info().capabilities))
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let Some(agent) = &self.inner.agent else {
            context.cancelled().await;
            return Ok(());
        };
        let mut changes = agent.subscribe();
        loop {
            tokio::select! {
                _ = context.cancelled() => return Ok(()),
                _ = self.inner.shutdown.cancelled() => return Ok(()),
                change = changes.recv() => match change {
                    Ok(()) | Err(broadcast::error::RecvError::Lagged(_)) => {
                        if context.accepted().resources_list_changed == Some(true)
                            && context.sink().notify_resource_list_changed().await.is_err()
                        {
                            return Ok(());
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => return Ok(()),
                },
            }
        }
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        // A 2025-11-25 session has no `subscriptions/listen`: list changes go to the session's
        // peer for as long as it is open.
        let Some(agent) = &self.inner.agent else { return };
        let mut changes = agent.subscribe();
        let peer: Peer<RoleServer> = context.peer.clone();
        let shutdown = self.inner.shutdown.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    change = changes.recv() => match change {
                        Ok(()) | Err(broadcast::error::RecvError::Lagged(_)) => {
                            if peer.is_transport_closed() || peer.notify_resource_list_changed().await.is_err() {
                                return;
                            }
                        }
                        Err(broadcast::error::RecvError::Closed) => return,
                    },
                }
            }
        });
    }
}

/// Why the MCP server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum McpServerError {
    #[error("mcp.token_env: {0}")]
    Token(SecretError),
    #[error(
        "refusing to listen on {addr}: it is not a loopback address; list the host names clients \
         will use in mcp.allowed_hosts to serve beyond this machine"
    )]
    NotLoopback { addr: SocketAddr },
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("the MCP connection failed: {message}")]
    Transport { message: String },
}

/// Serves one client on stdin/stdout until it disconnects or `cancel` fires, on rmcp's stdio
/// transport: when both are pipes (as MCP hosts launch servers) they are read and written on the
/// runtime's own reactor rather than through blocking-pool threads.
pub async fn serve_stdio(server: McpServer, cancel: CancellationToken) -> Result<(), McpServerError> {
    let server = server.with_shutdown(cancel.clone());
    let running = server
        .serve_with_ct(rmcp::transport::stdio_pipes(), cancel)
        .await
        .map_err(|e| McpServerError::Transport { message: e.to_string() })?;
    running.waiting().await.map_err(|e| McpServerError::Transport { message: e.to_string() })?;
    Ok(())
}
