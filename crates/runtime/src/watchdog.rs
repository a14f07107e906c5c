//! The tree's watchdog: a sub-task that went quiet is said on its parent, once per silence.
//!
//! Every quarter of `stall` (`delegation.stall_ms`: 5 minutes of silence by default, as the
//! anchors' watchdog; at least a second), the agent reads the parents it holds (tasks assigned
//! to it and in progress, at most [`MAX_PARENTS`]) and their sub-tasks (`parent:KEY`). A
//! sub-task `in_progress` or `in_review` (a review handed to an agent that never answers is a
//! silence too) whose last activity (its last change, or its newest comment) is older than
//! `stall` is stalled; its parent gets one line naming it, its assignee and how long it has been
//! quiet. The line's idempotency key carries the time of that last activity, so the same silence
//! is said once however many passes (or replicas) see it, and a sub-task that moves and falls
//! quiet again is said again. Nothing here calls the model; board errors are logged and the next
//! pass tries again.

use std::time::Duration;

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use tokio_util::sync::CancellationToken;

use picogent_tracker::model::{MessageQuery, SendMessage, TaskOut, TaskQuery, TaskStatus};
use picogent_tracker::tree::subtasks;
use picogent_tracker::{TrackerClient, TrackerError};

/// The most parents one pass reads: each costs a listing of its sub-tasks.
const MAX_PARENTS: u32 = 50;

/// Runs passes until `shutdown`.
pub(crate) fn spawn(client: TrackerClient, slug: String, stall: Duration, shutdown: CancellationToken) {
    let every = (stall / 4).max(Duration::from_secs(1));
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
            if let Err(error) = pass(&client, &slug, stall, OffsetDateTime::now_utc()).await {
                tracing::warn!(%error, "the tree's watchdog could not read the board; trying again at its next pass");
            }
        }
    });
}

/// One pass at `now`: says each stalled sub-task of a parent `slug` holds on that parent; how
/// many it said (or found said before).
pub(crate) async fn pass(
    client: &TrackerClient,
    slug: &str,
    stall: Duration,
    now: OffsetDateTime,
) -> Result<usize, TrackerError> {
    let query = TaskQuery {
        assignee: Some(slug.to_string()),
        // A parent whose plan is being worked is in progress; one in review or done is over.
        status: Some("in_progress".into()),
        limit: Some(MAX_PARENTS),
        ..TaskQuery::default()
    };
    let mut said = 0;
    for parent in client.list_tasks(&query).await?.items {
        for sub_task in subtasks(client, &parent.project_slug, &parent.key).await? {
            // In review too: a review handed to an agent that never answers is a silence.
            if !matches!(sub_task.status, TaskStatus::InProgress | TaskStatus::InReview) {
                continue;
            }
            let Some(last) = last_activity(client, &sub_task).await? else {
                continue;
            };
            let quiet = now - last;
            if quiet < stall {
                continue;
            }
            let minutes = u64::try_from(quiet.whole_minutes()).unwrap_or(0);
            let text = picogent_notices::tree::sub_task_stalled(
                &sub_task.key,
                &sub_task.title,
                sub_task.assignee_slug.as_deref(),
                minutes,
            );
            let body = SendMessage { content: text, task_id: Some(parent.id.clone()), ..SendMessage::default() };
            let key = format!("subtask-stalled:{}:{}", sub_task.id, last.unix_timestamp_nanos() / 1_000_000);
            client.send_message(&body, Some(&key)).await?;
            tracing::info!(parent = %parent.key, sub_task = %sub_task.key, minutes, "a sub-task went quiet: said on its parent");
            said += 1;
        }
    }
    Ok(said)
}

/// When `task` last moved: its last change, or its newest comment if later; `None` when the
/// board gave no time it can read.
async fn last_activity(client: &TrackerClient, task: &TaskOut) -> Result<Option<OffsetDateTime>, TrackerError> {
    let query = MessageQuery { task_id: Some(task.id.clone()), limit: Some(1), ..MessageQuery::default() };
    let newest_comment = client.list_messages(&query).await?.pop().and_then(|comment| parse(&comment.created_at));
    Ok(parse(&task.updated_at).into_iter().chain(newest_comment).max())
}

fn parse(text: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(text, &Rfc3339).ok()
}
