//! A `stale` firing's run: one nudge on each task its firing found untouched, in picogent's own
//! words (`prompts/stale_nudge.md`), with no model call.
//!
//! Invariants: each nudge is posted with the key `nudge-{run id}-{task id}`, so a run resumed
//! after a restart (same run id) posts none twice; the state is flushed before the first post,
//! as before any run's first act on the board; every post passes the run's post guard.

use tokio_util::sync::CancellationToken;

use crate::answer::RunPosts;
use crate::record::StoredRun;
use crate::request::RunServices;
use picogent_prompts::StaleNudgeVars;
use picogent_schedule::firing::StaleTask;
use picogent_state::{FinishRun, RunStatus};
use picogent_tools::{PostGuard, PostPlace, PostRefused};
use picogent_tracker::model::SendMessage;

/// How a nudging run ended.
pub struct NudgeEnd {
    pub status: RunStatus,
    pub notice: Option<String>,
}

/// Posts one nudge on each of `tasks`, records the run's end, and says how it went. A task the
/// tracker refuses a comment on (deleted, say) is named in the run's outcome; the others are
/// still nudged.
pub async fn post_nudges(
    services: &RunServices,
    run_id: &str,
    days: u32,
    tasks: &[StaleTask],
    posts: &RunPosts,
    cancel: &CancellationToken,
) -> NudgeEnd {
    let mut nudged = Vec::new();
    let mut failed = Vec::new();
    let synced = services.state.sync().await;
    if let Err(error) = &synced {
        tracing::error!(%error, "not nudging on a record the state could not flush");
    }
    for task in tasks.iter().filter(|_| synced.is_ok()) {
        if cancel.is_cancelled() {
            break;
        }
        match nudge(services, run_id, days, task, posts).await {
            Ok(()) => nudged.push(task.key.clone()),
            Err(error) => {
                tracing::warn!(task = %task.key, %error, "could not nudge a task");
                failed.push(format!("{} ({error})", task.key));
            }
        }
    }
    if cancel.is_cancelled() && services.shutdown.is_cancelled() {
        // Left `running`: the next start resumes it, and the keys keep what was posted posted once.
        return NudgeEnd { status: RunStatus::Interrupted, notice: None };
    }
    let mut outcome = match nudged.len() {
        0 => "nudged no task".to_string(),
        n => format!("nudged {n} task{}: {}", if n == 1 { "" } else { "s" }, nudged.join(", ")),
    };
    let (status, notice) = match (&synced, failed.is_empty(), cancel.is_cancelled()) {
        (Err(error), _, _) => (RunStatus::Failed, Some(picogent_notices::run::could_not_nudge_stale(error))),
        (Ok(()), _, true) => (RunStatus::Stopped, None),
        (Ok(()), true, false) => (RunStatus::Completed, None),
        (Ok(()), false, false) => {
            outcome.push_str(&format!("; could not nudge {}", failed.join(", ")));
            let status = if nudged.is_empty() { RunStatus::Failed } else { RunStatus::Completed };
            let notice = nudged.is_empty().then(|| picogent_notices::run::could_not_nudge(&failed));
            (status, notice)
        }
    };
    let asked = tasks
        .iter()
        .map(|task| format!("nudge {} ({}, untouched for {} days)", task.key, task.assignee, task.idle_days))
        .collect::<Vec<_>>()
        .join("\n");
    let stored = StoredRun::without_loop(asked, None);
    let finish = FinishRun {
        outcome: Some(outcome),
        error: notice.clone(),
        record: serde_json::to_value(&stored).ok(),
        ..FinishRun::new(status)
    };
    if let Err(error) = services.state.finish_run(run_id, &finish).await {
        tracing::error!(%error, "cannot record the end of the run");
    }
    NudgeEnd { status, notice }
}

/// Why one task was not nudged; said in the run's outcome (and its notice, when none was) after
/// the task's key.
#[derive(Debug, thiserror::Error)]
enum NudgeError {
    #[error(transparent)]
    Prompt(#[from] picogent_prompts::PromptError),
    #[error(transparent)]
    Refused(#[from] PostRefused),
    #[error(transparent)]
    Tracker(#[from] picogent_tracker::TrackerError),
}

async fn nudge(
    services: &RunServices,
    run_id: &str,
    days: u32,
    task: &StaleTask,
    posts: &RunPosts,
) -> Result<(), NudgeError> {
    let text = services.prompts.stale_nudge(&StaleNudgeVars {
        assignee_slug: picogent_prompts::clean_name(&task.assignee),
        task_key: picogent_prompts::clean_name(&task.key),
        idle_days: task.idle_days,
        days,
        agent_name: services.config.name.clone(),
    })?;
    let place = PostPlace::Task { task_id: task.id.clone() };
    let reply_to = posts.before_post(&place, 0).await?;
    let body = SendMessage { content: text, task_id: Some(task.id.clone()), reply_to, ..SendMessage::default() };
    let message = services.client.send_message(&body, Some(&format!("nudge-{run_id}-{}", task.id))).await?;
    posts.posted(&message);
    Ok(())
}
