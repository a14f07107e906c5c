//! A task tree for the inspector's `/tree/{key}` page ([`picogent_inspector::TreeSource`]): the
//! task and its sub-tasks as the board shows them now (`parent:KEY` labels), with what this
//! agent's runs of each spent, the id of its latest run, and the branch of its latest run that
//! left one (a coding run's work, as stored with the run).

use futures::future::BoxFuture;

use picogent_inspector::{SubTask, TaskTree, TreeError, TreeSource, TreeTask};
use picogent_state::State;
use picogent_tracker::model::TaskOut;
use picogent_tracker::session::SessionKey;
use picogent_tracker::{TrackerClient, TrackerError, tree};

use crate::record::StoredRun;

/// The label a sub-task's review round is counted in: `review-round:N`.
const REVIEW_ROUND_PREFIX: &str = "review-round:";

/// How many of a sub-task's latest runs are looked through for a branch.
const RUNS_READ: u32 = 20;

/// The runtime's view of a tree: the board through its client, the runs through its state.
pub(crate) struct TreeView {
    pub(crate) client: TrackerClient,
    pub(crate) state: State,
}

impl TreeSource for TreeView {
    fn tree<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<TaskTree, TreeError>> {
        Box::pin(self.read(key))
    }
}

impl TreeView {
    async fn read(&self, key: &str) -> Result<TaskTree, TreeError> {
        let parent = match self.client.get_task(key).await {
            Ok(parent) => parent,
            Err(TrackerError::NotFound { .. }) => return Err(TreeError::NotFound { key: key.to_string() }),
            Err(error) => return Err(error.into()),
        };
        let found = tree::subtasks(&self.client, &parent.project_slug, &parent.key).await?;
        let mut sub_tasks = Vec::with_capacity(found.len());
        let mut sessions = vec![SessionKey::Task(parent.id.clone())];
        for task in &found {
            let session = SessionKey::Task(task.id.clone());
            let runs = self.state.runs_of(&session, RUNS_READ).await?;
            let branch = runs.iter().find_map(|run| {
                StoredRun::of(run)
                    .and_then(|stored| stored.coding)
                    .and_then(|coding| coding.work)
                    .map(|work| work.branch)
            });
            sub_tasks.push(SubTask {
                task: tree_task(task),
                blockers: tree::blockers_of(task).into_iter().map(str::to_string).collect(),
                review_round: review_round(&task.labels),
                branch,
                spent: self.state.spend_of(std::slice::from_ref(&session)).await?,
                latest_run: runs.first().map(|run| run.id.clone()),
            });
            sessions.push(session);
        }
        Ok(TaskTree {
            part_of: tree::parent_of(&parent).map(str::to_string),
            parent: tree_task(&parent),
            sub_tasks,
            spent: self.state.spend_of(&sessions).await?,
        })
    }
}

fn tree_task(task: &TaskOut) -> TreeTask {
    TreeTask {
        key: task.key.clone(),
        id: task.id.clone(),
        title: task.title.clone(),
        status: task.status,
        assignee: task.assignee_slug.clone(),
    }
}

/// The highest `review-round:N` label, if any is well formed.
pub(crate) fn review_round(labels: &[String]) -> Option<u32> {
    labels.iter().filter_map(|label| label.strip_prefix(REVIEW_ROUND_PREFIX)?.parse().ok()).max()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_review_round_is_the_highest_well_formed_label() {
        let labels = |labels: &[&str]| labels.iter().map(|label| label.to_string()).collect::<Vec<_>>();
        assert_eq!(super::review_round(&labels(&["parent:TE-1", "review-round:1"])), Some(1));
        assert_eq!(super::review_round(&labels(&["review-round:2", "review-round:10", "review-round:x"])), Some(10));
        assert_eq!(super::review_round(&labels(&["review-round:", "review-round:-1", "epic"])), None);
    }
}
