//! Direct mode (`workspaces.direct`): a run of a task that has a repository hands the task to the
//! coding agent as its instructions, with no model loop of picogent's own. The coding agent works
//! in the task's workspace; its work is committed and pushed (`picogent_workspace::CodingTools`),
//! and the answer on the task says what it did and names the branch and the commit.
//!
//! Invariants: the same as a model run's (one answer, or one notice, per run; a stop or an
//! unassignment kills the coding agent's process group; a run cut short by a shutdown stays
//! `running` and resumes in the same workspace).

use tokio_util::sync::CancellationToken;

use crate::answer::{RunPosts, post_answer};
use crate::record::StoredRun;
use crate::request::{RunKind, RunRequest, RunServices};
use picogent_state::{FinishRun, RunStatus};
use picogent_tracker::model::TaskOut;
use picogent_workspace::CodingTools;

/// How a direct run ended, for the run's end.
pub struct DirectEnd {
    pub status: RunStatus,
    pub notice: Option<String>,
}

/// The coding tools and the task, when this run is to be worked directly.
pub fn direct_task<'a>(services: &'a RunServices, request: &'a RunRequest) -> Option<(&'a CodingTools, &'a TaskOut)> {
    let coding = services.coding.as_deref()?;
    let RunKind::Task { task, .. } = &request.kind else { return None };
    (services.config.workspaces.direct && request.prompt.is_none() && coding.serves(task))
        .then_some((coding, task.as_ref()))
}

/// The instructions a coding agent gets in direct mode: the task as people wrote it.
pub fn instructions(task: &TaskOut) -> String {
    let mut text = format!("{} ({})", task.title, task.key);
    if let Some(description) = task.description.as_deref().filter(|text| !text.trim().is_empty()) {
        text.push_str("\n\n");
        text.push_str(description);
    }
    text
}

/// Runs the coding agent on `task`, posts its answer or leaves its notice, and records the end.
pub async fn work(
    services: &RunServices,
    coding: &CodingTools,
    task: &TaskOut,
    run_id: &str,
    request: &RunRequest,
    posts: &RunPosts,
    cancel: &CancellationToken,
) -> DirectEnd {
    let instructions = instructions(task);
    let outcome = coding.work(task, &instructions, None, Some(run_id), cancel).await;
    if cancel.is_cancelled() && services.shutdown.is_cancelled() {
        // Left `running`: the next start resumes it in the same workspace.
        return DirectEnd { status: RunStatus::Interrupted, notice: None };
    }
    let (status, text, notice) = match &outcome {
        Ok(outcome) if outcome.report.finished() => {
            let mut text = match outcome.report.final_message.trim() {
                "" => format!("The coding agent {} finished.", outcome.report.agent),
                said => format!("The coding agent {} finished: {said}", outcome.report.agent),
            };
            if let Some(work) = &outcome.work {
                text.push_str(&format!("\n\n{}", work.describe()));
            }
            if !outcome.ticked.is_empty() {
                text.push_str(&format!("\n\nSteps done: {}.", outcome.ticked.join("; ")));
            }
            (RunStatus::Completed, text, None)
        }
        Ok(outcome) if cancel.is_cancelled() => (RunStatus::Stopped, outcome.text(), None),
        Ok(outcome) => {
            let failure = outcome.report.failure().unwrap_or_default();
            let notice = picogent_notices::run::coding_agent_failed(&failure);
            (RunStatus::Failed, outcome.text(), Some(notice))
        }
        Err(error) => (RunStatus::Failed, error.to_string(), Some(error.notice())),
    };
    if status == RunStatus::Completed {
        post_answer(&services.client, posts, &request.session, run_id, &request.kind, text.clone(), 0).await;
    }
    // Stored as any run is, with no model loop: its request is the instructions, and its coding
    // agent's output and work are what the views show.
    let stored = StoredRun::without_loop(instructions, coding.runs().take(run_id));
    let finish = FinishRun {
        outcome: Some(text),
        error: notice.clone(),
        record: serde_json::to_value(&stored).ok(),
        ..FinishRun::new(status)
    };
    if let Err(error) = services.state.finish_run(run_id, &finish).await {
        tracing::error!(%error, "cannot record the end of the run");
    }
    DirectEnd { status, notice }
}
