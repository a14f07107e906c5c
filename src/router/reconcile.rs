//! Reconciliation: after each (re)connect the router asks the tracker through REST what the event
//! stream may have missed. What it finds goes through the same claims as events, so nothing is
//! handled twice.

use crate::state::State;
use crate::tracker::TrackerClient;
use crate::tracker::model::{MessageOut, MessageQuery, TaskOut, TaskQuery};

/// Asks the tracker what the event stream may have missed: open tasks assigned to the agent,
/// and messages mentioning it after the last one seen.
pub(super) async fn reconcile(client: &TrackerClient, state: &State, slug: &str) -> (Vec<TaskOut>, Vec<MessageOut>) {
    let mut tasks = Vec::new();
    let mut cursor = None;
    loop {
        let query = TaskQuery {
            assignee: Some(slug.to_string()),
            status: Some("todo,in_progress".into()),
            limit: Some(200),
            cursor: cursor.clone(),
            ..TaskQuery::default()
        };
        match client.list_tasks(&query).await {
            Ok(page) => {
                tasks.extend(page.items);
                match page.next_cursor {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
            Err(error) => {
                tracing::warn!(%error, "reconciliation: cannot list assigned tasks");
                break;
            }
        }
    }
    let mut messages = Vec::new();
    let after = state.get_value("mention_cursor").await.ok().flatten();
    let first_start = after.is_none();
    let query = MessageQuery {
        mentioning: Some(slug.to_string()),
        after: after.clone(),
        limit: Some(200),
        ..MessageQuery::default()
    };
    match client.list_messages(&query).await {
        Ok(found) => {
            if let Some(last) = found.last() {
                let _ = state.set_value("mention_cursor", &last.id).await;
            }
            // At the very first start, old mentions are history, not requests: only the cursor moves.
            if !first_start {
                messages = found;
            }
        }
        Err(error) => tracing::warn!(%error, "reconciliation: cannot list mentions"),
    }
    (tasks, messages)
}
