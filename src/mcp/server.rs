//! The MCP server: the tool registry, tracker resources and prompt templates served over MCP, on
//! stdio (`picogent mcp --stdio`) or Streamable HTTP (`picogent mcp --http`, and `/mcp` on the
//! runtime's listener).
//!
//! Invariants:
//! - tools are the [`ToolSource`]'s own definitions and results, passed through unchanged; a tool
//!   failure is a result with `isError: true`, only an unknown tool name is a protocol error;
//! - rmcp speaks both protocol eras: 2026-07-28 (stateless, `server/discover`, per-request
//!   `_meta`) and 2025-11-25 (`initialize`, `Mcp-Session-Id`); rmcp also maps a missing resource
//!   to the error code of the peer's era, so this module raises `resource_not_found` only;
//! - over HTTP nothing is served without the bearer token, and `Host`/`Origin` are checked
//!   (loopback always allowed); the token is compared in constant time and never logged;
//! - the transports are rmcp's own: its stdio transport, its Streamable HTTP service;
//! - on stdio nothing but protocol goes to stdout (logs go to stderr, see `cli::init_logging`).

use std::borrow::Cow;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::future::BoxFuture;
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, GetPromptRequestParams,
    GetPromptResponse, GetPromptResult, Implementation, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ProgressToken, Prompt,
    PromptArgument, PromptMessage, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, Resource, ResourceContents, ResourceTemplate, Role, ServerCapabilities, ServerConfig,
    SubscriptionFilter, Tool, ToolAnnotations,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler, ServiceExt};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, McpConfig};
use crate::prompts::{MessageNewVars, MessageView, Prompts, StandupVars, TaskAssignedVars, TaskView};
use crate::secret::{Secret, SecretError};
use crate::tools::{ToolContext, ToolSource};
use crate::tracker::model::{MessageQuery, TaskQuery};
use crate::tracker::{TrackerClient, TrackerError};

/// The name this server gives itself in `serverInfo`.
pub const SERVER_NAME: &str = "picogent";

/// How often a long tool call reports progress when the client asked for it.
const DEFAULT_PROGRESS_INTERVAL: Duration = Duration::from_secs(1);

/// How long clients may cache lists that only change when the process restarts (tools, prompts,
/// templates).
const STATIC_LIST_TTL_MS: u64 = 60_000;

/// Statuses of the tasks a stand-up covers: everything not done.
const OPEN_STATUSES: &str = "backlog,todo,in_progress,in_review";

/// Pages of tasks a stand-up reads at most (200 tasks each), so a huge project cannot stall it.
const MAX_STANDUP_PAGES: usize = 5;

// ---------------------------------------------------------------------------------------------
// The extension point for the running agent
// ---------------------------------------------------------------------------------------------

/// What `picogent run` lets MCP clients see and do. The server serves these as the resources
/// `agent://status`, `run://list`, `run://{id}`, `run://{id}/log`, `run://{id}/result` and the tools
/// `start_run`, `stop_run`, `report_run`, and sends `notifications/resources/list_changed` each
/// time [`AgentControl::subscribe`] fires.
///
/// Records are JSON values so the runtime keeps its own types; each run in
/// [`AgentControl::list_runs`] must carry a string `"id"`.
pub trait AgentControl: Send + Sync {
    /// The agent's state: connected or not, runs in flight, budgets.
    fn status(&self) -> BoxFuture<'_, Value>;
    /// Recent runs, newest first; each an object with at least `"id"`.
    fn list_runs(&self) -> BoxFuture<'_, Vec<Value>>;
    /// One run's record. `NotFound` for an unknown id.
    fn get_run<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<Value, AgentControlError>>;
    /// One run's log as text (what the model was asked, which tools it called and what came back).
    fn run_log<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<String, AgentControlError>>;
    /// One run's result: its outcome and final answer (or that it is still running).
    fn run_result<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<Value, AgentControlError>>;
    /// Starts a run; answers the new run's id.
    fn start_run(&self, request: StartRun) -> BoxFuture<'_, Result<String, AgentControlError>>;
    /// Asks a run to stop; `true` if it was running and is now stopping, `false` if it had ended.
    fn stop_run<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<bool, AgentControlError>>;
    /// Fires each time a run starts or ends.
    fn subscribe(&self) -> broadcast::Receiver<()>;
}

/// What a run started over MCP works on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartRun {
    /// Work a task, as if it had just been assigned to the agent.
    Task { task_key: String },
    /// Follow a free-form instruction.
    Prompt { prompt: String },
}

/// Why the runtime refused a request, shaped by what the MCP client is told.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentControlError {
    /// No run has this id.
    #[error("no run with id {run_id}")]
    NotFound { run_id: String },
    /// The request was understood but cannot be served now (a limit, shutting down).
    #[error("refused: {message}")]
    Refused { message: String },
    /// The request names something that does not exist or is malformed (an unknown task).
    #[error("invalid request: {message}")]
    Invalid { message: String },
}

// ---------------------------------------------------------------------------------------------
// The server
// ---------------------------------------------------------------------------------------------

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

    /// Sets how often long tool calls report progress (default one second).
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
        let mut tools = self.inner.tools.tools();
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
            _ => self.inner.tools.tool(name),
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
        let call = self.inner.tools.call(&name, arguments, &tool_context);
        Ok(self.with_progress(&name, progress, call).await.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let mut resources = vec![
            Resource::new("board://members", "members")
                .with_title("Board members")
                .with_description("Every member of the board: slug, name, human or agent, status")
                .with_mime_type(JSON_MIME),
        ];
        if let Some(agent) = &self.inner.agent {
            resources.push(
                Resource::new("agent://status", "agent-status")
                    .with_title("Agent status")
                    .with_description("The running agent: connection, runs in flight, budgets")
                    .with_mime_type(JSON_MIME),
            );
            resources.push(
                Resource::new("run://list", "runs")
                    .with_title("Runs")
                    .with_description("Recent runs of the agent, newest first")
                    .with_mime_type(JSON_MIME),
            );
            for run in agent.list_runs().await {
                if let Some(run_id) = run.get("id").and_then(Value::as_str) {
                    resources.push(
                        Resource::new(format!("run://{run_id}"), format!("run-{run_id}"))
                            .with_title(format!("Run {run_id}"))
                            .with_mime_type(JSON_MIME),
                    );
                }
            }
        }
        // Runs come and go, so the list is never cached.
        let ttl_ms = if self.inner.agent.is_some() { 0 } else { STATIC_LIST_TTL_MS };
        Ok(ListResourcesResult::with_all_items(resources).with_ttl_ms(ttl_ms).with_cache_scope(CacheScope::Private))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let mut templates = vec![
            ResourceTemplate::new("task://{key}", "task")
                .with_title("Task")
                .with_description("A task with its steps, by key (e.g. TE-15)")
                .with_mime_type(JSON_MIME),
            ResourceTemplate::new("task://{key}/messages", "task-messages")
                .with_title("Task comments")
                .with_description("The comments on a task, oldest first")
                .with_mime_type(JSON_MIME),
            ResourceTemplate::new("project://{slug}", "project")
                .with_title("Project")
                .with_description("A project by slug")
                .with_mime_type(JSON_MIME),
        ];
        if self.inner.agent.is_some() {
            templates.extend([
                ResourceTemplate::new("run://{id}", "run")
                    .with_title("Run")
                    .with_description("One run's record")
                    .with_mime_type(JSON_MIME),
                ResourceTemplate::new("run://{id}/log", "run-log")
                    .with_title("Run log")
                    .with_description("One run's log: prompts, tool calls and results")
                    .with_mime_type("text/plain"),
                ResourceTemplate::new("run://{id}/result", "run-result")
                    .with_title("Run result")
                    .with_description("One run's outcome and final answer")
                    .with_mime_type(JSON_MIME),
            ]);
        }
        Ok(ListResourceTemplatesResult::with_all_items(templates)
            .with_ttl_ms(STATIC_LIST_TTL_MS)
            .with_cache_scope(CacheScope::Private))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri;
        let Some(resource) = ResourceUri::parse(&uri) else {
            return Err(not_found(&uri, "no such resource: resources/list and resources/templates/list name them"));
        };
        let contents = self.read(&uri, resource).await?;
        // Tracker data changes under the reader, and it is the caller's own view.
        Ok(ReadResourceResult::new(vec![contents]).with_ttl_ms(0).with_cache_scope(CacheScope::Private).into())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let argument =
            |name: &str, description: &str| PromptArgument::new(name).with_description(description).with_required(true);
        let prompts = vec![
            Prompt::new(
                "work_task",
                Some("Work a task: the task, its steps and comments, and how to work it"),
                Some(vec![argument("task", "The task's key (e.g. TE-15) or id")]),
            )
            .with_title("Work a task"),
            Prompt::new(
                "reply_to",
                Some("Answer a message: the message, its thread and task, and how to reply"),
                Some(vec![argument("message", "The message's id")]),
            )
            .with_title("Reply to a message"),
            Prompt::new(
                "standup",
                Some("A stand-up summary request for one project, with its open tasks"),
                Some(vec![argument("project", "The project's slug")]),
            )
            .with_title("Project stand-up"),
        ];
        Ok(ListPromptsResult::with_all_items(prompts)
            .with_ttl_ms(STATIC_LIST_TTL_MS)
            .with_cache_scope(CacheScope::Private))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let arguments = request.arguments.unwrap_or_default();
        let required = |name: &str| -> Result<String, ErrorData> {
            match arguments.get(name).and_then(Value::as_str).map(str::trim) {
                Some(value) if !value.is_empty() => Ok(value.to_string()),
                _ => Err(ErrorData::invalid_params(
                    format!("prompt {} needs the argument `{name}`", request.name),
                    Some(json!({ "argument": name })),
                )),
            }
        };
        let (description, text) = match request.name.as_str() {
            "work_task" => {
                let task = required("task")?;
                (format!("Work task {task}"), self.render_work_task(&task).await?)
            }
            "reply_to" => {
                let message = required("message")?;
                (format!("Reply to message {message}"), self.render_reply_to(&message).await?)
            }
            "standup" => {
                let project = required("project")?;
                (format!("Stand-up for project {project}"), self.render_standup(&project).await?)
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!("unknown prompt {other}: prompts/list names the prompts offered"),
                    Some(json!({ "name": other })),
                ));
            }
        };
        Ok(GetPromptResult::new(vec![PromptMessage::new_text(Role::User, text)]).with_description(description).into())
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

const JSON_MIME: &str = "application/json";

fn not_found(uri: &str, message: &str) -> ErrorData {
    ErrorData::resource_not_found(format!("{message}: {uri}"), Some(json!({ "uri": uri })))
}

/// A tracker failure while building a prompt or reading a resource, as a protocol error: a
/// missing thing is the caller's to fix (invalid params), anything else is ours (internal).
fn tracker_error(error: TrackerError) -> ErrorData {
    match error {
        TrackerError::NotFound { .. } | TrackerError::Invalid { .. } => {
            ErrorData::invalid_params(error.to_string(), None)
        }
        other => ErrorData::internal_error(other.to_string(), None),
    }
}

fn json_contents(uri: &str, value: &impl serde::Serialize) -> Result<ResourceContents, ErrorData> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| ErrorData::internal_error(format!("cannot encode {uri}: {e}"), None))?;
    Ok(ResourceContents::TextResourceContents {
        uri: uri.to_string(),
        mime_type: Some(JSON_MIME.to_string()),
        text,
        meta: None,
    })
}

// ---------------------------------------------------------------------------------------------
// Resources
// ---------------------------------------------------------------------------------------------

/// A resource URI this server understands, parsed once.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ResourceUri {
    Task(String),
    TaskMessages(String),
    Project(String),
    Members,
    AgentStatus,
    RunList,
    Run(String),
    RunLog(String),
    RunResult(String),
}

impl ResourceUri {
    fn parse(uri: &str) -> Option<ResourceUri> {
        let (scheme, rest) = uri.split_once("://")?;
        let segments: Vec<&str> = rest.split('/').collect();
        let plain = |segment: &str| -> Option<String> {
            let ok = !segment.is_empty()
                && segment.len() <= 200
                && segment.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
            ok.then(|| segment.to_string())
        };
        match (scheme, segments.as_slice()) {
            ("task", [key]) => Some(ResourceUri::Task(plain(key)?)),
            ("task", [key, "messages"]) => Some(ResourceUri::TaskMessages(plain(key)?)),
            ("project", [slug]) => Some(ResourceUri::Project(plain(slug)?)),
            ("board", ["members"]) => Some(ResourceUri::Members),
            ("agent", ["status"]) => Some(ResourceUri::AgentStatus),
            ("run", ["list"]) => Some(ResourceUri::RunList),
            ("run", [id]) => Some(ResourceUri::Run(plain(id)?)),
            ("run", [id, "log"]) => Some(ResourceUri::RunLog(plain(id)?)),
            ("run", [id, "result"]) => Some(ResourceUri::RunResult(plain(id)?)),
            _ => None,
        }
    }
}

impl McpServer {
    async fn read(&self, uri: &str, resource: ResourceUri) -> Result<ResourceContents, ErrorData> {
        let tracker = &self.inner.tracker;
        // A thing the tracker does not have is a missing resource; other failures are internal.
        let missing = |error: TrackerError| match error {
            TrackerError::NotFound { .. } => not_found(uri, "resource not found"),
            other => ErrorData::internal_error(format!("cannot read {uri}: {other}"), None),
        };
        match resource {
            ResourceUri::Task(key) => {
                let task = tracker.get_task(&key).await.map_err(missing)?;
                let steps = tracker.list_steps(&task.id).await.map_err(missing)?;
                json_contents(uri, &json!({ "task": task, "steps": steps }))
            }
            ResourceUri::TaskMessages(key) => {
                let task = tracker.get_task(&key).await.map_err(missing)?;
                let query = MessageQuery { task_id: Some(task.id.clone()), limit: Some(200), ..Default::default() };
                let messages = tracker.list_messages(&query).await.map_err(missing)?;
                json_contents(uri, &messages)
            }
            ResourceUri::Project(slug) => {
                let project = tracker.get_project(&slug).await.map_err(missing)?;
                json_contents(uri, &project)
            }
            ResourceUri::Members => {
                let members = tracker.list_members().await.map_err(missing)?;
                json_contents(uri, &members)
            }
            ResourceUri::AgentStatus
            | ResourceUri::RunList
            | ResourceUri::Run(_)
            | ResourceUri::RunLog(_)
            | ResourceUri::RunResult(_) => self.read_agent_resource(uri, resource).await,
        }
    }

    async fn read_agent_resource(&self, uri: &str, resource: ResourceUri) -> Result<ResourceContents, ErrorData> {
        let Some(agent) = &self.inner.agent else {
            return Err(not_found(uri, "run resources are served by `picogent run` only"));
        };
        let missing = |error: AgentControlError| match error {
            AgentControlError::NotFound { .. } => not_found(uri, &error.to_string()),
            other => ErrorData::internal_error(format!("cannot read {uri}: {other}"), None),
        };
        match resource {
            ResourceUri::AgentStatus => json_contents(uri, &agent.status().await),
            ResourceUri::RunList => json_contents(uri, &agent.list_runs().await),
            ResourceUri::Run(run_id) => json_contents(uri, &agent.get_run(&run_id).await.map_err(missing)?),
            ResourceUri::RunResult(run_id) => json_contents(uri, &agent.run_result(&run_id).await.map_err(missing)?),
            ResourceUri::RunLog(run_id) => {
                let text = agent.run_log(&run_id).await.map_err(missing)?;
                Ok(ResourceContents::TextResourceContents {
                    uri: uri.to_string(),
                    mime_type: Some("text/plain".to_string()),
                    text,
                    meta: None,
                })
            }
            ResourceUri::Task(_) | ResourceUri::TaskMessages(_) | ResourceUri::Project(_) | ResourceUri::Members => {
                Err(not_found(uri, "resource not found"))
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Prompts
// ---------------------------------------------------------------------------------------------

impl McpServer {
    async fn render_work_task(&self, task_ref: &str) -> Result<String, ErrorData> {
        let tracker = &self.inner.tracker;
        let task = tracker.get_task(task_ref).await.map_err(tracker_error)?;
        let steps = tracker.list_steps(&task.id).await.map_err(tracker_error)?;
        let query = MessageQuery { task_id: Some(task.id.clone()), limit: Some(50), ..Default::default() };
        let comments = tracker.list_messages(&query).await.map_err(tracker_error)?;
        // Over MCP no assignment event names who assigned it; the task's creator asked for it.
        let vars = TaskAssignedVars {
            task: TaskView::new(&task, &steps),
            assigned_by: task.created_by.clone(),
            comments: comments.iter().map(MessageView::new).collect(),
        };
        self.inner.prompts.task_assigned(&vars).map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }

    async fn render_reply_to(&self, message_id: &str) -> Result<String, ErrorData> {
        let tracker = &self.inner.tracker;
        let message = tracker.get_message(message_id).await.map_err(tracker_error)?;
        let query =
            MessageQuery { parent_id: Some(message.thread_root().to_string()), limit: Some(50), ..Default::default() };
        let thread = tracker.list_messages(&query).await.map_err(tracker_error)?;
        // Earlier messages only: the thread as the author saw it when writing.
        let earlier: Vec<MessageView> =
            thread.iter().take_while(|earlier| earlier.id != message.id).map(MessageView::new).collect();
        let task = match &message.task_id {
            Some(task_id) => {
                let task = tracker.get_task(task_id).await.map_err(tracker_error)?;
                let steps = tracker.list_steps(&task.id).await.map_err(tracker_error)?;
                Some(TaskView::new(&task, &steps))
            }
            None => None,
        };
        let vars = MessageNewVars {
            message: MessageView::new(&message),
            thread: earlier,
            task,
            agent_slug: self.inner.agent_slug.clone(),
        };
        self.inner.prompts.message_new(&vars).map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }

    async fn render_standup(&self, project_slug: &str) -> Result<String, ErrorData> {
        let tracker = &self.inner.tracker;
        let project = tracker.get_project(project_slug).await.map_err(tracker_error)?;
        let mut tasks = Vec::new();
        let mut cursor = None;
        for _ in 0..MAX_STANDUP_PAGES {
            let query = TaskQuery {
                project_id: Some(project.slug.clone()),
                status: Some(OPEN_STATUSES.to_string()),
                limit: Some(200),
                cursor: cursor.take(),
                ..Default::default()
            };
            let page = tracker.list_tasks(&query).await.map_err(tracker_error)?;
            tasks.extend(page.items.iter().map(|task| TaskView::new(task, &[])));
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        let vars = StandupVars { project_slug: project.slug.clone(), tasks };
        self.inner.prompts.standup(&vars).map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }
}

// ---------------------------------------------------------------------------------------------
// Tools: progress, and the agent's own tools
// ---------------------------------------------------------------------------------------------

impl McpServer {
    /// Runs `call`, and when the client sent a progress token, reports progress: once at the
    /// start, every `progress_interval` while it runs, and once at the end.
    async fn with_progress(
        &self,
        name: &str,
        progress: Option<(Peer<RoleServer>, ProgressToken)>,
        call: impl Future<Output = CallToolResult>,
    ) -> CallToolResult {
        let Some((peer, token)) = progress else {
            return call.await;
        };
        let notify = |step: u32, total: Option<u32>, message: String| {
            let mut param = ProgressNotificationParam::new(token.clone(), f64::from(step)).with_message(message);
            if let Some(total) = total {
                param = param.with_total(f64::from(total));
            }
            let peer = peer.clone();
            async move {
                // A client that stopped listening for progress still gets its result.
                if let Err(error) = peer.notify_progress(param).await {
                    tracing::debug!(%error, "cannot send a progress notification");
                }
            }
        };
        notify(0, None, format!("calling {name}")).await;
        let mut ticks = tokio::time::interval(self.inner.progress_interval);
        ticks.tick().await; // the first tick is immediate
        tokio::pin!(call);
        let mut step = 0;
        let result = loop {
            tokio::select! {
                result = &mut call => break result,
                _ = ticks.tick() => {
                    step += 1;
                    notify(step, None, format!("{name} still running")).await;
                }
            }
        };
        notify(step + 1, Some(step + 1), format!("{name} done")).await;
        result
    }

    async fn call_agent_tool(&self, name: &str, arguments: Value) -> CallToolResult {
        let Some(agent) = &self.inner.agent else {
            return error_result(format!("unknown tool {name}"));
        };
        let Some(tool) = RunTool::parse(name) else {
            return error_result(format!("unknown tool {name}"));
        };
        match tool {
            RunTool::Start => {
                let args: StartRunArgs = match parse_arguments(arguments) {
                    Ok(args) => args,
                    Err(result) => return result,
                };
                let request = match (args.task_key, args.prompt) {
                    (Some(task_key), None) if !task_key.trim().is_empty() => StartRun::Task { task_key },
                    (None, Some(prompt)) if !prompt.trim().is_empty() => StartRun::Prompt { prompt },
                    _ => return error_result("give exactly one of `task_key` or `prompt`, not empty"),
                };
                match agent.start_run(request).await {
                    Ok(run_id) => json_result(
                        format!("started run {run_id}; read run://{run_id} for its state"),
                        json!({ "run_id": run_id }),
                    ),
                    Err(error) => error_result(error.to_string()),
                }
            }
            RunTool::Stop => {
                let args: RunIdArgs = match parse_arguments(arguments) {
                    Ok(args) => args,
                    Err(result) => return result,
                };
                match agent.stop_run(&args.run_id).await {
                    Ok(true) => json_result(
                        format!("run {} is stopping", args.run_id),
                        json!({ "run_id": args.run_id, "stopping": true }),
                    ),
                    Ok(false) => json_result(
                        format!("run {} had already ended", args.run_id),
                        json!({ "run_id": args.run_id, "stopping": false }),
                    ),
                    Err(error) => error_result(error.to_string()),
                }
            }
            RunTool::Report => {
                let args: RunIdArgs = match parse_arguments(arguments) {
                    Ok(args) => args,
                    Err(result) => return result,
                };
                let run = match agent.get_run(&args.run_id).await {
                    Ok(run) => run,
                    Err(error) => return error_result(error.to_string()),
                };
                let result = match agent.run_result(&args.run_id).await {
                    Ok(result) => result,
                    Err(error) => return error_result(error.to_string()),
                };
                let report = json!({ "run": run, "result": result });
                let text = serde_json::to_string_pretty(&report).unwrap_or_else(|_| report.to_string());
                json_result(text, report)
            }
        }
    }
}

/// The agent's own tools, served only when an [`AgentControl`] is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RunTool {
    Start,
    Stop,
    Report,
}

impl RunTool {
    const ALL: [RunTool; 3] = [RunTool::Start, RunTool::Stop, RunTool::Report];

    fn name(self) -> &'static str {
        match self {
            RunTool::Start => "start_run",
            RunTool::Stop => "stop_run",
            RunTool::Report => "report_run",
        }
    }

    fn parse(name: &str) -> Option<RunTool> {
        RunTool::ALL.into_iter().find(|tool| tool.name() == name)
    }

    fn definition(self) -> Tool {
        match self {
            RunTool::Start => Tool::new(
                self.name(),
                "Start a run of the agent: work a task (task_key) or follow an instruction (prompt). \
                 Answers the run id; run://{id} shows its state.",
                rmcp::handler::server::common::schema_for_type::<StartRunArgs>(),
            )
            .with_annotations(ToolAnnotations::new().read_only(false).destructive(false).idempotent(false)),
            RunTool::Stop => Tool::new(
                self.name(),
                "Stop a run of the agent; it ends at its next step.",
                rmcp::handler::server::common::schema_for_type::<RunIdArgs>(),
            )
            .with_annotations(ToolAnnotations::new().read_only(false).destructive(true).idempotent(true)),
            RunTool::Report => Tool::new(
                self.name(),
                "Report on a run of the agent: its record and its result (or that it is still running).",
                rmcp::handler::server::common::schema_for_type::<RunIdArgs>(),
            )
            .with_annotations(ToolAnnotations::new().read_only(true)),
        }
    }
}

fn agent_tools() -> Vec<Tool> {
    RunTool::ALL.into_iter().map(RunTool::definition).collect()
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct StartRunArgs {
    /// The task to work, by key (e.g. TE-15). Give this or `prompt`.
    #[serde(default)]
    task_key: Option<String>,
    /// An instruction for the agent to follow. Give this or `task_key`.
    #[serde(default)]
    prompt: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RunIdArgs {
    /// The run's id, as answered by start_run or listed in run://list.
    run_id: String,
}

fn parse_arguments<T: serde::de::DeserializeOwned>(arguments: Value) -> Result<T, CallToolResult> {
    serde_json::from_value(arguments).map_err(|e| error_result(format!("invalid arguments: {e}")))
}

fn error_result(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

fn json_result(text: String, structured: Value) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(structured);
    result
}

// ---------------------------------------------------------------------------------------------
// Transports
// ---------------------------------------------------------------------------------------------

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

/// Who may use the HTTP endpoint: the bearer token and the allowed `Origin`/`Host` values.
#[derive(Debug, Clone)]
pub struct HttpSecurity {
    token: Secret,
    allowed_origins: Vec<String>,
    allowed_hosts: Vec<String>,
}

/// Loopback origins any port, both schemes: a local tool (the MCP Inspector's web UI) is fine.
const LOOPBACK_ORIGINS: [&str; 6] = [
    "http://localhost:*",
    "http://127.0.0.1:*",
    "http://[::1]:*",
    "https://localhost:*",
    "https://127.0.0.1:*",
    "https://[::1]:*",
];
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

impl HttpSecurity {
    /// The token and lists as given; loopback origins and hosts are added.
    pub fn new(token: Secret, allowed_origins: Vec<String>, allowed_hosts: Vec<String>) -> HttpSecurity {
        HttpSecurity { token, allowed_origins, allowed_hosts }
    }

    /// Reads the token from the environment variable `mcp.token_env` names.
    pub fn from_config(config: &McpConfig) -> Result<HttpSecurity, McpServerError> {
        let token = Secret::from_env(&config.token_env).map_err(McpServerError::Token)?;
        Ok(HttpSecurity::new(token, config.allowed_origins.clone(), config.allowed_hosts.clone()))
    }

    fn transport_config(&self, cancel: CancellationToken) -> StreamableHttpServerConfig {
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

/// Serves [`http_router`] at `/mcp` on `listener` until `cancel` fires.
pub async fn serve_http(
    server: McpServer,
    listener: tokio::net::TcpListener,
    security: &HttpSecurity,
    cancel: CancellationToken,
) -> Result<(), McpServerError> {
    let router = axum::Router::new().nest("/mcp", http_router(server, security, cancel.clone()));
    axum::serve(listener, router)
        .with_graceful_shutdown(cancel.cancelled_owned())
        .await
        .map_err(|e| McpServerError::Transport { message: e.to_string() })
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

async fn require_bearer(State(token): State<Arc<Secret>>, request: Request, next: Next) -> Response {
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer ")))
        .map(str::trim);
    match given {
        Some(given) if constant_time_eq(given.as_bytes(), token.expose().as_bytes()) => next.run(request).await,
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

/// Compares without stopping at the first difference, so timing does not reveal the token.
fn constant_time_eq(given: &[u8], expected: &[u8]) -> bool {
    if given.len() != expected.len() {
        return false;
    }
    given.iter().zip(expected).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

// ---------------------------------------------------------------------------------------------
// `picogent mcp`
// ---------------------------------------------------------------------------------------------

/// How `picogent mcp` talks to its client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listen {
    Stdio,
    Http(SocketAddr),
}

/// Builds the server `picogent mcp` serves: the given tools, `tracker` for resources and prompt
/// data, and the prompt templates of `prompts_dir`.
pub fn server_from_config(
    config: &Config,
    tracker: TrackerClient,
    tools: Arc<dyn ToolSource>,
) -> anyhow::Result<McpServer> {
    use anyhow::Context;
    let prompts = Prompts::load(&config.prompts_dir).context("cannot load the prompt templates")?;
    Ok(McpServer::new(tools, tracker, Arc::new(prompts), config.slug.clone()))
}

/// `picogent mcp`: serves until the client disconnects (stdio) or Ctrl-C.
pub async fn run_cli(
    config_path: PathBuf,
    listen: Listen,
    tools: impl FnOnce(&Config, &TrackerClient) -> anyhow::Result<Arc<dyn ToolSource>>,
) -> anyhow::Result<ExitCode> {
    use anyhow::Context;
    let config = Config::load(&config_path)?;
    let token = Secret::from_env(&config.tracker.token_env).context("tracker.token_env")?;
    let tracker = TrackerClient::new(&config.tracker, token).context("cannot build the tracker client")?;
    let tools = tools(&config, &tracker)?;
    let server = server_from_config(&config, tracker, tools)?;
    let cancel = CancellationToken::new();
    tokio::spawn({
        let cancel = cancel.clone();
        async move {
            let _ = tokio::signal::ctrl_c().await;
            cancel.cancel();
        }
    });
    match listen {
        Listen::Stdio => {
            tracing::info!("serving MCP on stdio");
            serve_stdio(server, cancel).await?;
        }
        Listen::Http(addr) => {
            check_listen_address(addr, &config.mcp)?;
            let security = HttpSecurity::from_config(&config.mcp)?;
            let listener =
                tokio::net::TcpListener::bind(addr).await.map_err(|source| McpServerError::Bind { addr, source })?;
            let local = listener.local_addr().map_err(|source| McpServerError::Bind { addr, source })?;
            tracing::info!(url = %format!("http://{local}/mcp"), "serving MCP over Streamable HTTP");
            serve_http(server, listener, &security, cancel).await?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_uris_parse() {
        let cases = [
            ("task://TE-15", Some(ResourceUri::Task("TE-15".into()))),
            ("task://TE-15/messages", Some(ResourceUri::TaskMessages("TE-15".into()))),
            ("project://team", Some(ResourceUri::Project("team".into()))),
            ("board://members", Some(ResourceUri::Members)),
            ("agent://status", Some(ResourceUri::AgentStatus)),
            ("run://list", Some(ResourceUri::RunList)),
            ("run://r-1", Some(ResourceUri::Run("r-1".into()))),
            ("run://r-1/log", Some(ResourceUri::RunLog("r-1".into()))),
            ("run://r-1/result", Some(ResourceUri::RunResult("r-1".into()))),
            ("task://", None),
            ("task://../x", None),
            ("task://TE-1/steps", None),
            ("task://a%2Fb", None),
            ("board://tasks", None),
            ("file:///etc/passwd", None),
            ("TE-15", None),
        ];
        for (uri, expected) in cases {
            assert_eq!(ResourceUri::parse(uri), expected, "{uri}");
        }
    }

    #[test]
    fn token_comparison() {
        assert!(constant_time_eq(b"tok-1", b"tok-1"));
        assert!(!constant_time_eq(b"tok-1", b"tok-2"));
        assert!(!constant_time_eq(b"tok", b"tok-1"));
        assert!(!constant_time_eq(b"", b"tok-1"));
    }

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

    #[test]
    fn agent_tools_have_object_schemas_and_annotations() {
        for tool in agent_tools() {
            assert_eq!(tool.input_schema.get("type"), Some(&json!("object")), "{}", tool.name);
            assert!(tool.annotations.is_some(), "{}", tool.name);
            assert_eq!(RunTool::parse(&tool.name).map(RunTool::name), Some(tool.name.as_ref()));
        }
    }
}
