//! A server's list-changed notifications (`notifications/{tools,prompts,resources}/list_changed`)
//! and the refreshes they start: the list of that kind is read again.
//!
//! Invariants:
//! - refreshes of one kind are coalesced: while a refresh of a kind waits or runs, any number of
//!   further notifications of that kind come to one more refresh after it, never a queue. A
//!   server that sends 200,000 notifications costs a few list requests, and the last one read
//!   starts after the last notification heard, so the list kept is the latest;
//! - each notification is logged at debug only: what a server sends must not fill the log;
//! - on a 2026-07-28 listen stream that fell behind (rmcp ends it when its buffer is full, and
//!   what it dropped is unknown), the stream is opened again and every list is read again.

use std::convert::Infallible;
use std::time::Duration;

use rmcp::model::{ServerNotification, SubscriptionFilter};
use rmcp::service::{Subscription, SubscriptionEnd};
use rmcp::{Peer, RoleClient, ServiceError};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{Link, ServerConnection};

/// A kind of list a server can say changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refresh {
    Tools,
    Prompts,
    Resources,
}

impl Refresh {
    const ALL: [Refresh; 3] = [Refresh::Tools, Refresh::Prompts, Refresh::Resources];

    /// The list a notification says changed; `None` for any other notification.
    fn of(notification: &ServerNotification) -> Option<Refresh> {
        match notification {
            ServerNotification::ToolListChangedNotification(_) => Some(Refresh::Tools),
            ServerNotification::PromptListChangedNotification(_) => Some(Refresh::Prompts),
            ServerNotification::ResourceListChangedNotification(_) => Some(Refresh::Resources),
            _ => None,
        }
    }
}

/// The refreshes one connection owes, one mark per kind of list. Marking a kind whose mark is
/// already set changes nothing: a [`Notify`] keeps at most one permit, so a refresh running
/// while its kind is marked any number of times is followed by exactly one more.
#[derive(Debug, Default)]
pub(super) struct Refreshes {
    tools: Notify,
    prompts: Notify,
    resources: Notify,
}

impl Refreshes {
    /// Notes that the server said the list of kind `what` changed (see the module's docs).
    pub(super) fn mark(&self, server: &str, what: Refresh) {
        tracing::debug!(server, list = ?what, "mcp server says a list changed");
        self.marks(what).notify_one();
    }

    fn mark_all(&self) {
        for what in Refresh::ALL {
            self.marks(what).notify_one();
        }
    }

    fn marks(&self, what: Refresh) -> &Notify {
        match what {
            Refresh::Tools => &self.tools,
            Refresh::Prompts => &self.prompts,
            Refresh::Resources => &self.resources,
        }
    }
}

impl ServerConnection {
    /// Refreshes each kind of list whenever it is marked, the kinds side by side and each kind
    /// one refresh at a time, for as long as the connection lasts (the caller drops it then).
    pub(super) async fn keep_fresh(&self, link: &Link, refreshes: &Refreshes) -> Infallible {
        let kind = |what: Refresh| async move {
            loop {
                refreshes.marks(what).notified().await;
                self.refresh(link, what).await;
            }
        };
        let (never, _, _) = tokio::join!(kind(Refresh::Tools), kind(Refresh::Prompts), kind(Refresh::Resources));
        never
    }

    /// Opens the list-change stream of a 2026-07-28 server. A server that refuses it only loses
    /// refreshes (logged).
    pub(super) async fn listen(&self, link: &Link) -> Option<Subscription> {
        match listen_within(&link.peer, self.listen_timeout()).await {
            Ok(subscription) => Some(subscription),
            Err(error) => {
                tracing::info!(server = %self.name, %error, "mcp server offers no list-change stream");
                None
            }
        }
    }

    /// Part of connecting, so opening the stream gets the handshake's allowance rather than a
    /// call's timeout.
    pub(super) fn listen_timeout(&self) -> Duration {
        self.timeout().max(Duration::from_secs(30))
    }

    async fn refresh(&self, link: &Link, what: Refresh) {
        tracing::debug!(server = %self.name, list = ?what, "refreshing an mcp server's list");
        match what {
            Refresh::Tools => {
                if let Some(tools) = self.list_tools(link).await {
                    self.update(|state| state.snapshot.tools = tools);
                }
            }
            Refresh::Prompts => {
                if let Some(prompts) = self.list_prompts(link).await {
                    self.update(|state| state.snapshot.prompts = prompts);
                }
            }
            Refresh::Resources => {
                if let Some(resources) = self.list_resources(link).await {
                    let skills = self.read_skills(link, &resources, &self.snapshot().skills).await;
                    self.update(|state| {
                        state.snapshot.resources = resources;
                        state.snapshot.skills = skills;
                        state.snapshot.has_resources = true;
                    });
                }
            }
        }
    }
}

/// `subscriptions/listen` for the three list changes, given up after `limit`.
async fn listen_within(peer: &Peer<RoleClient>, limit: Duration) -> Result<Subscription, ListenError> {
    let filter =
        SubscriptionFilter::builder().tools_list_changed().prompts_list_changed().resources_list_changed().build();
    match tokio::time::timeout(limit, peer.listen(filter)).await {
        Ok(Ok(subscription)) => Ok(subscription),
        Ok(Err(error)) => Err(ListenError::Refused(error)),
        Err(_) => Err(ListenError::TimedOut { timeout_ms: limit.as_millis() as u64 }),
    }
}

/// Why a list-change stream could not be opened.
#[derive(Debug, thiserror::Error)]
enum ListenError {
    #[error("subscriptions/listen failed: {0}")]
    Refused(ServiceError),
    #[error("subscriptions/listen did not answer within {timeout_ms} ms")]
    TimedOut { timeout_ms: u64 },
}

/// Marks the lists a `subscriptions/listen` stream says changed, until the stream ends with the
/// connection or `stop` fires. A stream that fell behind is opened again, and every list marked.
pub(super) async fn forward_list_changes(
    server: String,
    peer: Peer<RoleClient>,
    mut subscription: Subscription,
    refreshes: std::sync::Arc<Refreshes>,
    limit: Duration,
    stop: CancellationToken,
) {
    loop {
        let next = tokio::select! {
            next = subscription.next() => next,
            _ = stop.cancelled() => return,
        };
        let capacity = match next {
            Ok(Some(notification)) => {
                if let Some(what) = Refresh::of(&notification) {
                    refreshes.mark(&server, what);
                }
                continue;
            }
            // rmcp ends a stream that fell behind as it ends any other, with no next
            // notification: only its end tells the two apart.
            Ok(None) => match subscription.end() {
                Some(SubscriptionEnd::Lagged { capacity }) => *capacity,
                end => {
                    tracing::debug!(server, ?end, "mcp list-change stream ended");
                    return;
                }
            },
            Err(ServiceError::SubscriptionLagged { capacity }) => capacity,
            Err(error) => {
                tracing::debug!(server, %error, "mcp list-change stream ended");
                return;
            }
        };
        tracing::debug!(server, capacity, "mcp list-change stream fell behind; opening it again");
        // Open first, then mark: a change after the new stream is open is heard on it, one before
        // is read by the refreshes marked here. (A change sent on the old stream after it fell
        // behind still reaches the connection's handler, which marks it too.)
        let reopened = tokio::select! {
            reopened = listen_within(&peer, limit) => reopened,
            _ = stop.cancelled() => return,
        };
        refreshes.mark_all();
        match reopened {
            Ok(reopened) => subscription = reopened,
            Err(error) => {
                tracing::warn!(server, %error, "cannot open the mcp list-change stream again; its lists are no longer refreshed until it reconnects");
                return;
            }
        }
    }
}
