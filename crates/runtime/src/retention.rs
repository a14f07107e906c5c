//! The pruning schedule of `picogent run`: a task that prunes the state database every
//! `retention.interval_ms` (the first time soon after start), logs what it removed in one line
//! and counts it in `/metrics`. What may be removed, and why that never makes the agent act
//! twice, is `state/retention.rs`; this file only decides *when*, and whether message claims may
//! go this time (which needs the live link's status).
//!
//! The artifacts of external tools' results (`mcp/results.rs`) go with their run: a run's folder
//! is removed once the run ended more than `retention.runs_ms` ago, when its transcript (the only
//! thing that points at them) goes or is dropped. They are removed first, while the run's row
//! still says when it ended. A running run keeps them, and so does a folder of a run this state
//! does not know (another agent may keep its state in the same folder); artifacts of calls made
//! outside any run go `runs_ms` after they were saved.

use std::sync::Arc;
use std::time::Duration;

use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::request::RunServices;
use crate::status::StatusBoard;
use picogent_config::RetentionConfig;
use picogent_mcp::results::ArtifactStore;
use picogent_state::{PrunePlan, Pruned, RunStatus, State, StateError};

/// The first pass runs this long after start (or after `interval_ms`, if shorter): late enough
/// to stay out of the start-up's resume and reconciliation, soon enough to be seen working.
const FIRST_PASS_AFTER: Duration = Duration::from_secs(60);

/// Starts the schedule; it ends when the agent's shutdown is cancelled.
pub(crate) fn spawn(services: &RunServices) -> tokio::task::JoinHandle<()> {
    let pruner = Pruner {
        retention: services.config.retention.clone(),
        mention_window: services.config.startup.answer_mentions_since.0,
        state: services.state.clone(),
        artifacts: services.host.artifacts().clone(),
        status: services.status.clone(),
        metrics: services.metrics.clone(),
    };
    tokio::spawn(pruner.run(services.shutdown.clone()))
}

/// What a pass needs, shared with the running agent.
struct Pruner {
    retention: RetentionConfig,
    /// How far back reconciliation lists mentions (`startup.answer_mentions_since`).
    mention_window: Duration,
    state: State,
    artifacts: ArtifactStore,
    status: Arc<StatusBoard>,
    metrics: Arc<Metrics>,
}

impl Pruner {
    async fn run(self, shutdown: CancellationToken) {
        let interval = Duration::from_millis(self.retention.interval_ms);
        let mut next = tokio::time::Instant::now() + interval.min(FIRST_PASS_AFTER);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep_until(next) => {}
            }
            // A pass cut short by the shutdown leaves a consistent database: each step commits
            // on its own.
            tokio::select! {
                _ = shutdown.cancelled() => return,
                result = self.prune_once() => {
                    if let Err(error) = result {
                        tracing::warn!(%error, "cannot prune the state database; trying again at the next interval");
                    }
                }
            }
            next = tokio::time::Instant::now() + interval;
        }
    }

    /// One pass: prunes, counts and logs what went.
    async fn prune_once(&self) -> Result<Pruned, StateError> {
        // Message claims go only while the agent is caught up (`state/retention.rs` says why).
        let caught_up = self.status.caught_up();
        let plan = plan(&self.retention, self.mention_window, OffsetDateTime::now_utc(), caught_up);
        let message_claims = plan.message_claims_before.is_some();
        let artifact_runs = prune_artifacts(&self.artifacts, &self.state, plan.runs_before).await?;
        self.metrics.pruned_artifacts(artifact_runs);
        let pruned = self.state.prune(&plan).await?;
        self.metrics.pruned(&pruned);
        if artifact_runs > 0 {
            tracing::info!(runs = artifact_runs, "removed the artifacts of runs past retention.runs_ms");
        }
        if pruned.total() > 0 {
            tracing::info!(
                events = pruned.events,
                claims = pruned.claims,
                runs = pruned.runs,
                run_records = pruned.run_records,
                sessions = pruned.sessions,
                replies = pruned.replies,
                spend_days = pruned.spend_days,
                message_claims,
                "pruned the state database"
            );
        } else {
            tracing::debug!(message_claims, "pruned the state database: nothing was old enough");
        }
        Ok(pruned)
    }
}

/// Removes the artifacts of the runs that ended before `runs_before` (see the module's docs),
/// and those of calls outside a run saved before it; answers how many runs' folders went.
pub(crate) async fn prune_artifacts(
    artifacts: &ArtifactStore,
    state: &State,
    runs_before: OffsetDateTime,
) -> Result<u64, StateError> {
    let mut removed = 0;
    for run_id in artifacts.runs() {
        let Some(run) = state.get_run(&run_id).await? else { continue };
        if matches!(run.status, RunStatus::Queued | RunStatus::Running) {
            continue;
        }
        if run.finished_at.unwrap_or(run.started_at) >= runs_before {
            continue;
        }
        match artifacts.remove_run(&run_id) {
            Ok(_) => removed += 1,
            Err(error) => {
                tracing::warn!(run = %run_id, %error, "cannot remove a run's artifacts; trying again next time")
            }
        }
    }
    let runless = artifacts.remove_runless_before(runs_before.into());
    if runless > 0 {
        tracing::info!(files = runless, "removed artifacts of calls outside a run past retention.runs_ms");
    }
    Ok(removed)
}

/// The cutoffs of a pass at `now`. A retention longer than the calendar reaches back keeps
/// everything. Message claims may go only when `caught_up`, and only those older than both
/// `claims_ms` and the mention window of reconciliation.
fn plan(retention: &RetentionConfig, mention_window: Duration, now: OffsetDateTime, caught_up: bool) -> PrunePlan {
    let before = |ms: u64| {
        let age = time::Duration::milliseconds(i64::try_from(ms).unwrap_or(i64::MAX));
        now.checked_sub(age).unwrap_or(OffsetDateTime::UNIX_EPOCH).max(OffsetDateTime::UNIX_EPOCH)
    };
    let window_ms = u64::try_from(mention_window.as_millis()).unwrap_or(u64::MAX);
    PrunePlan {
        now,
        events_before: before(retention.events_ms),
        claims_before: before(retention.claims_ms),
        message_claims_before: caught_up.then(|| before(retention.claims_ms.max(window_ms))),
        runs_before: before(retention.runs_ms),
        sessions_before: before(retention.sessions_ms),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_reaches_back_by_each_setting_and_never_before_1970() {
        let now = OffsetDateTime::now_utc();
        let retention = RetentionConfig {
            events_ms: 1_000,
            claims_ms: 2_000,
            runs_ms: 3_000,
            sessions_ms: u64::MAX,
            interval_ms: 1,
        };
        let plan = plan(&retention, Duration::from_secs(5), now, true);
        assert_eq!(now - plan.events_before, time::Duration::seconds(1));
        assert_eq!(now - plan.claims_before, time::Duration::seconds(2));
        assert_eq!(now - plan.runs_before, time::Duration::seconds(3));
        assert_eq!(plan.sessions_before, OffsetDateTime::UNIX_EPOCH, "a retention past the epoch keeps everything");
        assert_eq!(now - plan.message_claims_before.unwrap(), time::Duration::seconds(5), "the window is older");
        let not_caught_up = super::plan(&retention, Duration::ZERO, now, false);
        assert_eq!(not_caught_up.message_claims_before, None, "not caught up: every message claim stays");
        let within = super::plan(&retention, Duration::ZERO, now, true);
        assert_eq!(within.message_claims_before, Some(within.claims_before));
    }
}
