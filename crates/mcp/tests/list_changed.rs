//! A flood of `notifications/tools/list_changed` from an external MCP server (in this process,
//! over Streamable HTTP on loopback), in both protocol versions picogent speaks to servers:
//! 2025-11-25 (notifications on the session) and 2026-07-28 (on the `subscriptions/listen`
//! stream). The refreshes are coalesced: a burst of thousands costs at most a few `tools/list`,
//! and the list kept is the last one.
//!
//! To make "a burst" exact, the server holds every `tools/list` asked during the flood until
//! picogent has heard the whole of it: after the last tools notification it sends one
//! `prompts/list_changed`, and picogent's `prompts/list` that follows (a list of another kind,
//! refreshed beside the tools) tells the server everything before it was heard. The first
//! tools refresh then answers the version it was asked at, already old, so only the one refresh
//! picogent owes for the notifications heard meanwhile brings the last list.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use picogent_mcp::McpServerConfig;
use picogent_mcp::client::{ServerConnection, ServerStatus};
use picogent_mcp::host::McpHost;
use picogent_mcp::results::ArtifactStore;
use rmcp::model::{
    Implementation, ListPromptsResult, ListToolsResult, PaginatedRequestParams, Prompt, ServerCapabilities,
    ServerConfig, SubscriptionFilter, Tool,
};
use rmcp::service::{
    NotificationContext, RequestContext, SubscriptionContext, SubscriptionSendError, SubscriptionSink,
};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler};
use serde_json::json;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Notifications in one burst.
const BURST: usize = 10_000;
/// `tools/list` requests one burst may cost: the one held through it, the one owed after it,
/// and one to spare for a notification heard late.
const MAX_REFRESHES_PER_BURST: usize = 3;
/// A generous bound on each wait; nothing here waits on a clock otherwise.
const WAIT: Duration = Duration::from_secs(120);

/// Where the server sends its notifications: the 2025-11-25 session, or the 2026-07-28 stream
/// picogent listens on (the latest, if it opened it again).
#[derive(Default)]
struct Outlets {
    session: Option<Peer<RoleServer>>,
    stream: Option<SubscriptionSink>,
}

/// What the server's sessions share with the test.
struct Flood {
    /// The tools list is one tool, `v<version>`.
    version: AtomicUsize,
    /// `tools/list` requests answered (or held) so far.
    tool_lists: AtomicUsize,
    /// `subscriptions/listen` streams opened so far (more than one: picogent fell behind).
    streams: AtomicUsize,
    /// Set once the last notification of the burst was sent.
    burst_sent: AtomicBool,
    /// `false` while `tools/list` requests are held.
    released: watch::Sender<bool>,
    outlets: Mutex<Outlets>,
    /// Told when an outlet is there to flood.
    outlet_ready: watch::Sender<bool>,
}

impl Flood {
    fn new() -> Arc<Flood> {
        Arc::new(Flood {
            version: AtomicUsize::new(0),
            tool_lists: AtomicUsize::new(0),
            streams: AtomicUsize::new(0),
            burst_sent: AtomicBool::new(false),
            released: watch::channel(true).0,
            outlets: Mutex::default(),
            outlet_ready: watch::channel(false).0,
        })
    }

    fn outlets(&self) -> std::sync::MutexGuard<'_, Outlets> {
        self.outlets.lock().unwrap()
    }

    /// Sends the burst: each notification after the version it announces, then the
    /// `prompts/list_changed` that marks its end.
    async fn send_burst(&self) {
        self.released.send_replace(false);
        for version in 1..=BURST {
            self.version.store(version, Ordering::SeqCst);
            self.notify(false).await;
        }
        self.burst_sent.store(true, Ordering::SeqCst);
        self.notify(true).await;
    }

    /// Sends one notification on the outlet picogent listens on. One the stream refuses (picogent
    /// let go of it to open it again) is sent again on the stream opened next, as a server sends a
    /// change on the streams open when it happens. Skipping it would lose it: rmcp acknowledges a
    /// `subscriptions/listen` before it calls [`FloodServer::listen`], so the lists picogent reads
    /// again on that acknowledgment can be read before a change this server sends in between,
    /// which then reaches no stream (the burst's end among them, and the tools lists held forever).
    async fn notify(&self, prompts: bool) {
        let mut reopened = self.outlet_ready.subscribe();
        let (session, mut stream) = {
            let outlets = self.outlets();
            (outlets.session.clone(), outlets.stream.clone())
        };
        while let Some(sink) = stream {
            let sent =
                if prompts { sink.notify_prompt_list_changed().await } else { sink.notify_tool_list_changed().await };
            if !matches!(sent, Err(SubscriptionSendError::SubscriptionClosed)) {
                return;
            }
            let waited = tokio::time::timeout(WAIT, reopened.changed()).await;
            waited.expect("picogent to open its list-change stream again").unwrap();
            stream = self.outlets().stream.clone();
        }
        if let Some(session) = session {
            let _ = if prompts {
                session.notify_prompt_list_changed().await
            } else {
                session.notify_tool_list_changed().await
            };
        }
    }
}

#[derive(Clone)]
struct FloodServer(Arc<Flood>);

impl ServerHandler for FloodServer {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_prompts()
            .enable_prompts_list_changed()
            .build();
        ServerConfig::new(capabilities).with_server_info(Implementation::new("flood", "1.0"))
    }

    /// Answers the version it is asked at; during a burst, only once picogent heard all of it.
    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let version = self.0.version.load(Ordering::SeqCst);
        self.0.tool_lists.fetch_add(1, Ordering::SeqCst);
        let mut released = self.0.released.subscribe();
        let _ = released.wait_for(|released| *released).await;
        let schema = json!({"type": "object"}).as_object().cloned().unwrap_or_default();
        Ok(ListToolsResult::with_all_items(vec![Tool::new(format!("v{version}"), "a tool", Arc::new(schema))]))
    }

    /// Asked after the burst was sent, it says picogent heard all of it: the tools lists go.
    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        if self.0.burst_sent.load(Ordering::SeqCst) {
            self.0.released.send_replace(true);
        }
        Ok(ListPromptsResult::with_all_items(vec![Prompt::new("p", Some("a prompt"), None)]))
    }

    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        Some(requested.supported_by(&self.get_info().capabilities))
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        self.0.outlets().stream = Some(context.sink().clone());
        self.0.streams.fetch_add(1, Ordering::SeqCst);
        self.0.outlet_ready.send_replace(true);
        context.cancelled().await;
        Ok(())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.0.outlets().session = Some(context.peer.clone());
        self.0.outlet_ready.send_replace(true);
    }
}

/// Serves a [`FloodServer`] at `/mcp` on a loopback port; returns its URL.
async fn start_flood_server(flood: &Arc<Flood>, cancel: &CancellationToken) -> String {
    let config = StreamableHttpServerConfig::default().with_cancellation_token(cancel.child_token());
    let flood = Arc::clone(flood);
    let service: StreamableHttpService<FloodServer, LocalSessionManager> =
        StreamableHttpService::new(move || Ok(FloodServer(Arc::clone(&flood))), Default::default(), config);
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let stop = cancel.clone();
    tokio::spawn(async move { axum::serve(listener, router).with_graceful_shutdown(stop.cancelled_owned()).await });
    url
}

/// Waits (without polling) until `ready` holds for the server's state.
async fn until(server: &ServerConnection, what: &str, ready: impl Fn(&ServerConnection) -> bool) {
    let mut changes = server.subscribe();
    let waited = tokio::time::timeout(WAIT, async {
        while !ready(server) {
            changes.changed().await.unwrap();
        }
    })
    .await;
    assert!(waited.is_ok(), "timed out waiting for {what}");
}

fn tool_names(server: &ServerConnection) -> Vec<String> {
    server.snapshot().tools.iter().map(|tool| tool.name.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_list_changed_costs_a_few_refreshes_and_keeps_the_last_list() {
    for protocol in ["2025-11-25", "2026-07-28"] {
        let flood = Flood::new();
        let cancel = CancellationToken::new();
        let url = start_flood_server(&flood, &cancel).await;
        let config: McpServerConfig =
            serde_json::from_value(json!({"url": url, "protocol": protocol, "trusted": true, "timeout_ms": 120_000}))
                .unwrap();
        let artifacts = tempfile::tempdir().unwrap();
        let servers = BTreeMap::from([("flood".to_string(), config)]);
        let host = McpHost::start_servers(servers, ArtifactStore::new(artifacts.path().to_path_buf(), 8192)).await;
        let server = host.server("flood").unwrap();
        until(server, "the server to connect", |server| server.status() == ServerStatus::Ready).await;
        assert_eq!(server.snapshot().protocol_version.as_deref(), Some(protocol));
        assert_eq!(tool_names(server), ["v0"], "{protocol}");
        let mut outlet = flood.outlet_ready.subscribe();
        tokio::time::timeout(WAIT, outlet.wait_for(|ready| *ready)).await.expect("an outlet").unwrap();
        let before = flood.tool_lists.load(Ordering::SeqCst);

        flood.send_burst().await;
        let last = format!("v{BURST}");
        until(server, "the last tools list", |server| tool_names(server) == [last.as_str()]).await;
        let refreshes = flood.tool_lists.load(Ordering::SeqCst) - before;
        let streams = flood.streams.load(Ordering::SeqCst);
        println!("{protocol}: {BURST} notifications, {refreshes} tools/list, {streams} listen streams");
        assert!(
            (1..=MAX_REFRESHES_PER_BURST).contains(&refreshes),
            "{protocol}: {BURST} notifications cost {refreshes} tools/list"
        );
        assert_eq!(server.status(), ServerStatus::Ready, "{protocol}");
        host.shutdown().await;
        cancel.cancel();
    }
}
