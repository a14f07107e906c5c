//! The loop guard where it cannot be talked around: the message tools ask it before every post,
//! and it refuses once the agent has posted `limits.max_replies_per_thread_per_hour` messages in
//! one thread (or on one task) in the last hour. The router checks the same count before it
//! starts a run or steers one, so a capped thread costs no model call either.

use std::sync::Arc;

use futures::future::BoxFuture;

use crate::session::SessionKey;
use crate::state::State;
use crate::tools::{PostGuard, PostPlace, PostRefused};
use crate::tracker::TrackerClient;

pub struct ReplyCap {
    pub state: State,
    pub client: TrackerClient,
    pub max_per_hour: u32,
    /// Check and count in one step in this process (the store makes it one step across replicas),
    /// so two concurrent posts cannot both take the last slot.
    pub lock: Arc<tokio::sync::Mutex<()>>,
}

impl ReplyCap {
    async fn key_of(&self, place: &PostPlace) -> Option<String> {
        match place {
            PostPlace::Reply { parent_id } => match self.client.get_message(parent_id).await {
                Ok(parent) => Some(SessionKey::of_message(&parent).as_string()),
                // The post itself will fail with the tracker's answer; let it say why.
                Err(_) => None,
            },
            PostPlace::Task { task_id } => match self.client.get_task(task_id).await {
                Ok(task) => Some(SessionKey::Task(task.id).as_string()),
                Err(_) => None,
            },
            // A new top-level message starts a thread of its own.
            PostPlace::Chat { .. } => None,
        }
    }
}

impl PostGuard for ReplyCap {
    fn before_post<'a>(&'a self, place: &'a PostPlace) -> BoxFuture<'a, Result<(), PostRefused>> {
        Box::pin(async move {
            let Some(key) = self.key_of(place).await else { return Ok(()) };
            let _held = self.lock.lock().await;
            match self.state.record_reply_within_hour(&key, self.max_per_hour).await? {
                None => Ok(()),
                Some(count) => {
                    tracing::warn!(thread = %key, count, "post refused by the thread reply cap");
                    Err(PostRefused::ReplyCap { count })
                }
            }
        })
    }
}
