//! The client side of one connection: what picogent offers a server (elicitation, both
//! modes), the questions it asks the person, and the notifications it hears (list changes,
//! progress).

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, ProgressNotificationParam};
use rmcp::service::{MaybeSendFuture, NotificationContext};
use rmcp::{ClientHandler, RoleClient};

use super::refresh::{Refresh, Refreshes};
use super::{FALLBACK_PROTOCOL, ProgressRecord};
use crate::elicit::{Elicitation, InFlight};

/// Progress notifications kept per server for the run record (the oldest are dropped).
const PROGRESS_KEPT: usize = 256;

/// The client side of one connection: it hears the server's notifications.
#[derive(Clone)]
pub(super) struct Handler {
    pub(super) server: String,
    pub(super) refreshes: Arc<Refreshes>,
    pub(super) progress: Arc<Mutex<VecDeque<ProgressRecord>>>,
    pub(super) elicitation: Arc<Elicitation>,
    pub(super) in_flight: Arc<InFlight>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        // Elicitation is offered everywhere: where nobody can be asked it is cancelled at once.
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation = Some(
            rmcp::model::ElicitationCapability::new()
                .with_form(rmcp::model::FormElicitationCapability::default())
                .with_url(rmcp::model::UrlElicitationCapability::new()),
        );
        let mut info = ClientConfig::new(capabilities, Implementation::new("picogent", env!("CARGO_PKG_VERSION")));
        // Used by the `initialize` handshake; discovery names its own preferred versions.
        info.protocol_version = FALLBACK_PROTOCOL;
        info
    }

    /// A 2025-11-25 `elicitation/create`: asked for the one call in flight on this connection.
    /// At a shutdown it is left unanswered until the connection ends.
    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        let call = self.in_flight.only();
        if call.is_none() {
            tracing::warn!(server = %self.server, "cancelled an elicitation: no single call of this server is in flight to tell who asked");
        }
        if let Some(call) = &call {
            call.asked.store(true, Ordering::Relaxed);
        }
        let (tool, asker) = match &call {
            Some(call) => (call.tool.as_str(), Some(&call.context)),
            None => ("?", None),
        };
        match self.elicitation.answer(&self.server, tool, &request, asker).await {
            Some(answer) => Ok(answer),
            None => {
                context.ct.cancelled().await;
                Err(rmcp::ErrorData::internal_error("the client shut down before the user answered", None))
            }
        }
    }

    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        self.refreshes.mark(&self.server, Refresh::Tools);
        std::future::ready(())
    }

    fn on_prompt_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        self.refreshes.mark(&self.server, Refresh::Prompts);
        std::future::ready(())
    }

    fn on_resource_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        self.refreshes.mark(&self.server, Refresh::Resources);
        std::future::ready(())
    }

    fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        let record = ProgressRecord {
            server: self.server.clone(),
            token: format!("{:?}", params.progress_token),
            progress: params.progress,
            total: params.total,
            message: params.message.clone(),
        };
        tracing::info!(server = %record.server, token = %record.token, progress = record.progress, total = ?record.total, message = ?record.message, "mcp progress");
        if let Ok(mut kept) = self.progress.lock() {
            if kept.len() == PROGRESS_KEPT {
                kept.pop_front();
            }
            kept.push_back(record);
        }
        std::future::ready(())
    }
}
