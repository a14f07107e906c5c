//! The breakdown-and-review scenario: a parent labelled `epic` in the project `shop` (whose
//! pushed work goes to review), planned into sub-tasks on alice's yes, each worked on its own
//! branch and reviewed by the second agent, `reviewer`, and rolled up on the parent. Scored on
//! the board's end state: the plan asked once, each sub-task made once, the one that waits
//! carrying its `blocked_by`, each done and approved by the reviewer, one roll-up, the parent in
//! review.

use std::time::{Duration, Instant};

use super::{Eval, ScenarioFailure, Verdict};
use crate::session::SessionKey;
use crate::state::RunStatus;
use crate::tracker::model::{CreateTask, MessageOut, MessageQuery, TaskOut, TaskStatus};

/// The project whose tasks are worked in the eval's repository and handed to review.
pub(in crate::eval) const TEAM_PROJECT: (&str, &str) = ("shop", "SH");
/// The parent's parts: the third waits for the first; the second leaves a to-do, which the
/// offline planner's review sends back once.
const PARENT: &str = "Make the date parser's default the release date, and document it.\n\
    - Default: in src/date.py replace \"2020-01-01\" with \"2024-06-01\"\n\
    - Signature: in src/date.py replace \"def parse(text):\" with \"def parse(text):  # TODO: accept a zone\"\n\
    - Docs: write docs/dates.md saying what the default date is (after 1)";
const PARTS: usize = 3;
/// How long both agents stay idle, with the tree not rolled up, before the scenario is judged:
/// a hand-off between them is a board event, delivered in a moment.
const QUIET: Duration = Duration::from_secs(10);

impl Eval<'_> {
    pub(super) async fn breakdown(&self) -> Verdict {
        let create = CreateTask {
            project_slug: TEAM_PROJECT.0.into(),
            title: "Release-date default for the parser".into(),
            description: Some(PARENT.into()),
            assignee_slug: Some("picogent".into()),
            labels: Some(vec!["epic".into()]),
            ..CreateTask::default()
        };
        let parent = self.alice.create_task(&create, None).await.map_err(ScenarioFailure::TaskRefused)?;
        self.plan_asked(&parent).await?;
        self.comment(&parent.id, crate::demo::team::YES).await?;
        self.tree_quiet(&parent).await?;
        self.check_tree(&parent).await
    }

    /// Waits for the plan's question (the agent's comment on the parent that mentions alice);
    /// fails when the parent's runs ended without one.
    async fn plan_asked(&self, parent: &TaskOut) -> Result<(), ScenarioFailure> {
        let session = SessionKey::Task(parent.id.clone());
        loop {
            if self.agent_comments(&parent.id).await?.iter().any(|m| m.mentions.iter().any(|slug| slug == "alice")) {
                return Ok(());
            }
            let runs = self.runs_of(&session).await;
            if !runs.is_empty() && runs.iter().all(|run| !matches!(run.status, RunStatus::Running | RunStatus::Queued))
            {
                return Err(ScenarioFailure::PlanNotAsked);
            }
            if Instant::now() >= self.play_until {
                return Err(ScenarioFailure::TimedOut { timeout_secs: self.timeout.as_secs() });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the parent is rolled up and both agents are idle, or both have been idle for
    /// [`QUIET`] with it not rolled up.
    async fn tree_quiet(&self, parent: &TaskOut) -> Result<(), ScenarioFailure> {
        let mut idle_since: Option<Instant> = None;
        loop {
            let idle = self.agent.status.active_runs() == 0
                && self.reviewer.is_none_or(|reviewer| reviewer.status.active_runs() == 0);
            let now = self.alice.get_task(&parent.id).await.map_err(ScenarioFailure::ReadTask)?;
            idle_since = match idle {
                true => idle_since.or(Some(Instant::now())),
                false => None,
            };
            if idle && now.status == TaskStatus::InReview {
                return Ok(());
            }
            if idle_since.is_some_and(|since| since.elapsed() >= QUIET) {
                return Ok(());
            }
            if Instant::now() >= self.play_until {
                return Err(ScenarioFailure::TimedOut { timeout_secs: self.timeout.as_secs() });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn check_tree(&self, parent: &TaskOut) -> Verdict {
        let said = self.agent_comments(&parent.id).await?;
        let asked = said.iter().filter(|m| m.mentions.iter().any(|slug| slug == "alice")).count();
        if asked != 1 {
            return Err(ScenarioFailure::NotOnePlan { asked });
        }
        let subtasks = crate::tracker::tree::subtasks(&self.alice, TEAM_PROJECT.0, &parent.key)
            .await
            .map_err(ScenarioFailure::ReadTask)?;
        if subtasks.len() != PARTS {
            return Err(ScenarioFailure::NotEverySubTask { made: subtasks.len(), expected: PARTS });
        }
        if !subtasks.iter().any(|task| crate::tracker::tree::blockers_of(task).len() == 1) {
            return Err(ScenarioFailure::NoneWaits);
        }
        let mut rounds = Vec::new();
        for task in &subtasks {
            let query = MessageQuery { task_id: Some(task.id.clone()), limit: Some(200), ..MessageQuery::default() };
            let comments: Vec<MessageOut> = self.read(query).await?;
            let approved = comments.iter().any(|m| m.author_slug == "reviewer" && m.content.starts_with("Approved"));
            if task.status != TaskStatus::Done || !approved {
                return Err(ScenarioFailure::NotReviewed { key: task.key.clone(), status: task.status });
            }
            let round = task.labels.iter().filter_map(|label| label.strip_prefix("review-round:")).next_back();
            rounds.push(format!("{} {}", task.key, round.unwrap_or("?")));
        }
        let now = self.alice.get_task(&parent.id).await.map_err(ScenarioFailure::ReadTask)?;
        let rolled_up = said.iter().filter(|m| m.content.contains(&format!("of {} are done", parent.key))).count();
        if now.status != TaskStatus::InReview || rolled_up != 1 {
            return Err(ScenarioFailure::NotRolledUp { status: now.status, roll_ups: rolled_up });
        }
        self.completed(&SessionKey::Task(parent.id.clone()), &[]).await?;
        Ok(format!(
            "planned once into {PARTS} sub-tasks, each done and approved (review rounds: {}), rolled up once",
            rounds.join(", ")
        ))
    }
}
