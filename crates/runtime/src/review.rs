//! Review handed to another agent, as a run sees it (`picogent_workspace::review` holds the
//! flow): a task run that ended with its work pushed hands the task to a reviewer, and a
//! reviewer's run of a task in a review round is offered the review tools in place of the
//! coding tools.

use picogent_tools::PostGuard;

use crate::request::{RunKind, RunServices};

/// Whether this run is a review: this agent reviews (`capabilities` holds `review`, and it has
/// the repositories the review tools read) and the task is in a review round.
pub fn is_review_run(services: &RunServices, kind: &RunKind) -> bool {
    if services.coding.is_none() {
        return false;
    }
    match kind {
        RunKind::Task { task, .. } => picogent_workspace::review::is_review(&services.config.capabilities, task),
        RunKind::Message { .. } | RunKind::Prompt { .. } | RunKind::Schedule { .. } => false,
    }
}

/// After a completed task run (not a review) whose coding work left a commit: the task goes to a
/// reviewer of `review.reviewers`, or, past the round limit, to a person. A failure is logged;
/// the run's answer already says what was done.
pub async fn hand_off_work(services: &RunServices, run_id: &str, kind: &RunKind, guard: &dyn PostGuard) {
    let RunKind::Task { task, .. } = kind else { return };
    if is_review_run(services, kind) {
        return;
    }
    let Some(coding) = services.coding.as_deref() else { return };
    let Some(work) = coding.runs().work(run_id) else { return };
    let Some(repository) = coding.workspaces().config().repositories.get(&work.repository) else { return };
    let review = &services.config.review();
    let slug = &services.config.slug;
    let handed = picogent_workspace::review::hand_off(
        &services.client,
        review,
        slug,
        &task.id,
        &work,
        &repository.base,
        Some(guard),
    )
    .await;
    match handed {
        Ok(handed) => tracing::info!(task = %task.key, ?handed, "review hand-off"),
        Err(error) => tracing::warn!(task = %task.key, %error, "could not hand the work to a reviewer"),
    }
}
