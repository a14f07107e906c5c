//! The task tree in the router, read from the board's labels (`parent:KEY`, `blocked_by:KEY`,
//! `picogent_tracker::tree`): a sub-task that waits for others starts only once they are all
//! done, and a parent assigned to the agent is rolled up as its sub-tasks finish. Nothing here
//! asks the model; what people read is worded by `picogent_notices::tree`.
//!
//! Invariants:
//! - a task whose blockers are not all `done` gets no run, whether its assignment came as an
//!   event, from a reconciliation or from the end of another blocker; a key no task has counts
//!   as not done. The agent watches each open blocker (before reading it again, so the
//!   `task.updated` that makes it `done` cannot slip between the two), and the task says what it
//!   waits for once: the post's idempotency key is made of the task and its blockers, and no
//!   notice is posted where the agent has commented since the task's last change;
//! - a blocker's `task.updated` to `done` starts, through the assignment's own path, each task of
//!   the agent's it held that has no run and whose blockers are now all done; a reconciliation
//!   reaches the same decision from the board (`reconcile.rs` hands a never started, waiting task
//!   to [`Router::held_by_blockers`] however the agent commented on it);
//! - a sub-task's `done` ticks its step (`KEY: title`) on a parent assigned to the agent; once
//!   every sub-task of the parent is done, the parent gets one summary (idempotency key
//!   `rollup:{parent id}`) and moves to `in_review`. Every write is idempotent, so a duplicate
//!   event, a restart or a second replica changes nothing more.

use picogent_notices::tree::{Blocker, Standing, SubTaskLine, TreeSpend, roll_up, waiting_for};
use picogent_state::ClaimKind;
use picogent_tracker::TrackerError;
use picogent_tracker::model::{
    MessageQuery, SendMessage, StepOut, TaskOut, TaskQuery, TaskStatus, TaskUpdatedData, UpdateTask,
};
use picogent_tracker::session::SessionKey;
use picogent_tracker::tree::{blocked_by_label, blockers_of, listed, parent_of, subtasks};

use super::outcome::{EventFate, Source};
use super::{Router, filter, reconcile};
use crate::request::RunKind;

/// The tasks one blocker holds, read at most.
const MAX_HELD: usize = 2_000;

impl Router {
    /// Whether `task` must wait for others before a run starts on it: a blocker is not done, or
    /// could not be read (it is read again at the next assignment, blocker's end or
    /// reconciliation). When it waits, the agent watches its open blockers and the task says,
    /// once, what it waits for.
    ///
    /// A sub-task of a tree a person stopped (`@picogent stop` on its parent) is held for good,
    /// and says so once (a mention on it still gets it worked).
    pub(super) async fn held_by_blockers(&self, task: &TaskOut) -> bool {
        if let Some(parent) = parent_of(task)
            && self.state.is_claimed(ClaimKind::TreeStop, parent).await.unwrap_or(false)
        {
            tracing::info!(task = %task.key, parent, "its tree was stopped: not started");
            // Whoever assigned it hears why nothing happens, once.
            let body = SendMessage {
                content: picogent_notices::tree::tree_stopped(parent),
                task_id: Some(task.id.clone()),
                ..SendMessage::default()
            };
            if let Err(error) = self.client.send_message(&body, Some(&format!("tree-stopped:{}", task.id))).await {
                tracing::warn!(%error, task = %task.key, "cannot say why a task of a stopped tree does not start");
            }
            return true;
        }
        // A run already going (started over MCP, say) is not held back: the assignment finds it.
        if blockers_of(task).is_empty() || self.session_busy(&SessionKey::Task(task.id.clone())).await {
            return false;
        }
        // The event's copy may be older than the board: the labels and the last change are the
        // board's now.
        let task = match self.client.get_task(&task.id).await {
            Ok(fresh) => fresh,
            Err(error) => {
                tracing::warn!(%error, task = %task.key, "cannot read a task that waits for others; going by the event's copy");
                task.clone()
            }
        };
        let keys = blockers_of(&task);
        let mut waiting: Vec<Blocker<'_>> = Vec::new();
        let mut unread = false;
        for &key in &keys {
            match self.standing_of(key).await {
                Ok(Standing::Status(TaskStatus::Done)) => {}
                Ok(Standing::Status(_)) => match self.watch_and_read(key).await {
                    Ok(Standing::Status(TaskStatus::Done)) => {}
                    Ok(standing) => waiting.push(Blocker { key, standing }),
                    Err(error) => {
                        tracing::warn!(%error, task = %task.key, blocker = key, "cannot watch or read a blocker");
                        unread = true;
                    }
                },
                Ok(standing @ (Standing::NotFound | Standing::Refused)) => waiting.push(Blocker { key, standing }),
                Err(error) => {
                    tracing::warn!(%error, task = %task.key, blocker = key, "cannot read a blocker");
                    unread = true;
                }
            }
        }
        if waiting.is_empty() && !unread {
            return false;
        }
        tracing::info!(task = %task.key, waiting = waiting.len(), unread, "task waits for others: not started");
        // A notice naming some blockers and not the unread ones would be wrong for good (its key
        // keeps its first words): it waits for a full reading.
        if !unread {
            self.say_waiting(&task, &keys, &waiting).await;
        }
        true
    }

    /// A person's stop: the session's runs, and when it is a task, the runs of every sub-task
    /// of it (`parent:KEY`) this agent works; none of those sub-tasks starts afterwards
    /// ([`ClaimKind::TreeStop`]). Each stopped run says so once, on its own task.
    pub(super) async fn stop_tree(&mut self, session: &SessionKey, reason: &str) -> bool {
        let mut stopped = self.stop(session, reason).await;
        let SessionKey::Task(task_id) = session else {
            return stopped;
        };
        let subtasks = async {
            let parent = self.client.get_task(task_id).await?;
            let subtasks = picogent_tracker::tree::subtasks(&self.client, &parent.project_slug, &parent.key).await?;
            Ok::<_, picogent_tracker::TrackerError>((parent.key, subtasks))
        };
        let (parent, subtasks) = match subtasks.await {
            Ok(found) => found,
            Err(error) => {
                tracing::warn!(%error, %session, "cannot read the sub-tasks of a stopped task; only its own runs stop");
                return stopped;
            }
        };
        if subtasks.is_empty() {
            return stopped;
        }
        if let Err(error) = self.state.claim(ClaimKind::TreeStop, &parent).await {
            tracing::error!(%error, %session, "cannot record the stop of a tree; its waiting sub-tasks may start later");
        }
        let reason = format!("{reason} on {parent}, which this task is part of");
        for subtask in subtasks {
            stopped |= self.stop(&SessionKey::Task(subtask.id), &reason).await;
        }
        stopped
    }

    /// Says once on the parent of a sub-task whose run (`run_id`, of `kind`) failed, naming it and
    /// why (`notice`, what the sub-task itself was told).
    pub(super) async fn tell_parent_of_failure(&self, kind: &RunKind, run_id: &str, notice: &str) {
        let RunKind::Task { task, .. } = kind else {
            return;
        };
        let Some(parent) = parent_of(task) else {
            return;
        };
        let text = picogent_notices::tree::sub_task_failed(&task.key, &task.title, notice);
        self.post_on_parent(parent, &task.key, text, &format!("subtask-failed:{run_id}")).await;
    }

    /// Says once on the parent of `task`, when the agent holds it, that `by` handed `task` back
    /// (the reason is their `rejected: …` comment, the board's words for it); whether it was the
    /// agent's to say.
    async fn tell_parent_handed_back(&self, task: &TaskOut, by: &str) -> bool {
        let Some(parent_key) = parent_of(task) else {
            return false;
        };
        // The parent's holder says it, and no one else: two agents watching would say it twice.
        match self.client.get_task(parent_key).await {
            Ok(parent) if parent.assignee_slug.as_deref() == Some(self.config.slug.as_str()) => {}
            Ok(_) => return false,
            Err(error) => {
                tracing::warn!(%error, parent = parent_key, "cannot read a handed-back sub-task's parent");
                return false;
            }
        }
        let query = MessageQuery { task_id: Some(task.id.clone()), limit: Some(20), ..MessageQuery::default() };
        let reason = match self.client.list_messages(&query).await {
            Ok(comments) => comments
                .into_iter()
                .rev()
                .find(|comment| comment.author_slug == by && comment.content.starts_with("rejected: "))
                .map(|comment| comment.content["rejected: ".len()..].to_string()),
            Err(error) => {
                tracing::warn!(%error, task = %task.key, "cannot read why a sub-task was handed back");
                None
            }
        };
        let text = picogent_notices::tree::sub_task_rejected(&task.key, &task.title, by, reason.as_deref());
        let key = format!("subtask-handed-back:{}:{}", task.id, task.updated_at);
        self.post_on_parent(parent_key, &task.key, text, &key).await;
        true
    }

    /// Posts `text` on the parent `parent_key` of the sub-task `sub_key`, with the idempotency `key`.
    async fn post_on_parent(&self, parent_key: &str, sub_key: &str, text: String, key: &str) {
        let parent = match self.client.get_task(parent_key).await {
            Ok(parent) => parent,
            Err(error) => {
                tracing::warn!(%error, parent = parent_key, sub_task = sub_key, "cannot read a sub-task's parent to tell it");
                return;
            }
        };
        let body = SendMessage { content: text, task_id: Some(parent.id), ..SendMessage::default() };
        if let Err(error) = self.client.send_message(&body, Some(key)).await {
            tracing::warn!(%error, parent = parent_key, sub_task = sub_key, "cannot tell a parent about its sub-task");
        }
    }

    /// What a `task.updated` changes in a tree: a task now `done` may free the tasks it held and
    /// tick its parent. Returns the event's fate.
    pub(super) async fn on_task_updated(&mut self, update: TaskUpdatedData) -> EventFate {
        let TaskUpdatedData { task, changed, updated_by } = update;
        if task.status != TaskStatus::Done {
            // A sub-task handed back; the rest of a task's changes are its run's business.
            let unassigned = changed.iter().any(|field| field == "assignee_slug") && task.assignee_slug.is_none();
            if unassigned && updated_by != self.config.slug && self.tell_parent_handed_back(&task, &updated_by).await {
                return EventFate::HandedBack;
            }
            return EventFate::Ignored;
        }
        let started = self.start_unblocked(&task.key).await;
        let rolled_up = match parent_of(&task) {
            Some(parent) => self.roll_up(parent, &task).await,
            None => false,
        };
        match (started, rolled_up) {
            (0, false) => EventFate::Ignored,
            (0, true) => EventFate::RolledUp,
            _ => EventFate::Unblocked,
        }
    }

    /// Starts each task of the agent's that `done_key` held, has no run and waits for nothing
    /// else now; how many started.
    async fn start_unblocked(&mut self, done_key: &str) -> usize {
        let query = TaskQuery {
            assignee: Some(self.config.slug.clone()),
            labels: Some(blocked_by_label(done_key)),
            status: Some("backlog,todo,in_progress".into()),
            ..TaskQuery::default()
        };
        let held = match listed(&self.client, query, MAX_HELD).await {
            Ok(held) => held,
            Err(error) => {
                // Found again by the next reconciliation.
                tracing::warn!(%error, blocker = done_key, "cannot list the tasks a blocker held");
                return 0;
            }
        };
        if held.len() == MAX_HELD {
            tracing::warn!(most = MAX_HELD, "more tasks wait for one blocker than are read; the rest are left");
        }
        let mut started = 0;
        for task in held {
            if !filter::works_assignment(&task, &self.config.slug, self.config.task_listen) {
                continue;
            }
            let session = SessionKey::Task(task.id.clone());
            if self.session_busy(&session).await || self.state.has_finished_run_for(&session).await.unwrap_or(true) {
                continue;
            }
            if self.held_by_blockers(&task).await {
                continue;
            }
            tracing::info!(task = %task.key, blocker = done_key, "its last blocker is done: starting");
            let assigned_by = task.created_by.clone();
            if self.on_assignment(task, assigned_by, Source::Unblocked).await {
                started += 1;
            }
        }
        started
    }

    /// Rolls `sub_task` up on its parent `parent_key`, if the agent holds the parent: ticks its
    /// step once it is done, and once every sub-task is, posts the summary and moves the parent
    /// to `in_review`. Whether the parent is the agent's.
    async fn roll_up(&self, parent_key: &str, sub_task: &TaskOut) -> bool {
        let parent = match self.client.get_task(parent_key).await {
            Ok(parent) => parent,
            Err(TrackerError::NotFound { .. }) => return false,
            Err(error) => {
                tracing::warn!(%error, parent = parent_key, "cannot read a sub-task's parent; not rolled up");
                return false;
            }
        };
        if parent.assignee_slug.as_deref() != Some(self.config.slug.as_str()) {
            return false;
        }
        let sub_tasks = match subtasks(&self.client, &parent.project_slug, &parent.key).await {
            Ok(sub_tasks) => sub_tasks,
            Err(error) => {
                tracing::warn!(%error, parent = %parent.key, "cannot list a parent's sub-tasks; not rolled up");
                return true;
            }
        };
        // The board's status now, not the event's: a late event of a task since reopened ticks nothing.
        let done_now = sub_tasks.iter().find(|listed| listed.id == sub_task.id).is_none_or(is_done);
        if done_now {
            self.tick_step(&parent, &sub_task.key).await;
        }
        if !sub_tasks.is_empty() && sub_tasks.iter().all(is_done) && parent.status != TaskStatus::Done {
            self.post_roll_up(&parent, &sub_tasks).await;
        }
        true
    }

    /// Completes the parent's open step titled `{sub_key}: …` (completing is idempotent).
    async fn tick_step(&self, parent: &TaskOut, sub_key: &str) {
        let steps = match self.client.list_steps(&parent.id).await {
            Ok(steps) => steps,
            Err(error) => {
                tracing::warn!(%error, parent = %parent.key, "cannot read a parent's steps");
                return;
            }
        };
        for step in steps.iter().filter(|step| !step.done && is_step_of(step, sub_key)) {
            if let Err(error) = self.client.complete_step(&parent.id, &step.id, None).await {
                tracing::warn!(%error, parent = %parent.key, step = %step.title, "cannot tick a parent's step");
            }
        }
    }

    /// The one summary on `parent`, then its move to `in_review` (only once the summary is on the
    /// board, so a failed post is retried by the next sub-task's event with the same key).
    /// A reviewed sub-task's line names its branch and how many review rounds it took.
    async fn post_roll_up(&self, parent: &TaskOut, sub_tasks: &[TaskOut]) {
        // A reviewed sub-task's branch is the one its review request named: `picogent/KEY`.
        let prefix = picogent_workspace::names::BRANCH_PREFIX;
        let branches: Vec<String> = sub_tasks.iter().map(|sub_task| format!("{prefix}{}", sub_task.key)).collect();
        let lines: Vec<SubTaskLine<'_>> = sub_tasks
            .iter()
            .zip(&branches)
            .map(|(sub_task, branch)| SubTaskLine {
                key: &sub_task.key,
                title: &sub_task.title,
                assignee: sub_task.assignee_slug.as_deref(),
                status: sub_task.status,
                review: crate::tree_view::review_round(&sub_task.labels).map(|rounds| (branch.as_str(), rounds)),
            })
            .collect();
        let mut sessions = vec![SessionKey::Task(parent.id.clone())];
        sessions.extend(sub_tasks.iter().map(|sub_task| SessionKey::Task(sub_task.id.clone())));
        let spend = match self.state.spend_of(&sessions).await {
            Ok(spent) => Some(TreeSpend {
                tokens: spent.tokens,
                cost: self.config.llm.price.is_some().then_some(spent.cost),
                per_tree: self.config.limits.max_tokens_per_tree,
            }),
            Err(error) => {
                tracing::warn!(%error, parent = %parent.key, "cannot count a tree's spend; the roll-up leaves it out");
                None
            }
        };
        let body = SendMessage {
            content: roll_up(&parent.key, &lines, spend),
            task_id: Some(parent.id.clone()),
            ..SendMessage::default()
        };
        if let Err(error) = self.client.send_message(&body, Some(&format!("rollup:{}", parent.id))).await {
            tracing::warn!(%error, parent = %parent.key, "cannot post a parent's roll-up");
            return;
        }
        tracing::info!(parent = %parent.key, sub_tasks = sub_tasks.len(), "every sub-task done: parent rolled up");
        if parent.status != TaskStatus::InReview {
            let update = UpdateTask { status: Some(TaskStatus::InReview), ..UpdateTask::default() };
            if let Err(error) = self.client.update_task(&parent.id, &update).await {
                tracing::warn!(%error, parent = %parent.key, "cannot move a rolled-up parent to in_review");
            }
        }
    }

    /// Says on `task`, once, what it waits for (`waiting`, of its blockers `keys`).
    async fn say_waiting(&self, task: &TaskOut, keys: &[&str], waiting: &[Blocker<'_>]) {
        match reconcile::commented_since_change(&self.client, &self.config.slug, task).await {
            Ok(false) => {}
            Ok(true) => return,
            Err(error) => {
                tracing::warn!(%error, task = %task.key, "cannot read a waiting task's comments; not saying what it waits for");
                return;
            }
        }
        let body =
            SendMessage { content: waiting_for(waiting), task_id: Some(task.id.clone()), ..SendMessage::default() };
        let key = format!("waiting:{}:{:016x}", task.id, fnv1a(&keys.join(",")));
        if let Err(error) = self.client.send_message(&body, Some(&key)).await {
            tracing::warn!(%error, task = %task.key, "cannot say what a task waits for");
        }
    }

    /// The agent watches the blocker `key` (watching twice is watching once), then reads where
    /// it stands.
    async fn watch_and_read(&self, key: &str) -> Result<Standing, TrackerError> {
        match self.client.watch_task(key, &self.config.slug, None).await {
            Ok(_) => self.standing_of(key).await,
            Err(TrackerError::NotFound { .. }) => Ok(Standing::NotFound),
            Err(TrackerError::Forbidden { .. } | TrackerError::Invalid { .. }) => Ok(Standing::Refused),
            Err(error) => Err(error),
        }
    }

    async fn standing_of(&self, key: &str) -> Result<Standing, TrackerError> {
        match self.client.get_task(key).await {
            Ok(blocker) => Ok(Standing::Status(blocker.status)),
            Err(TrackerError::NotFound { .. }) => Ok(Standing::NotFound),
            // For good, unlike a board that does not answer: said, so the task is not held in silence.
            Err(TrackerError::Forbidden { .. } | TrackerError::Invalid { .. }) => Ok(Standing::Refused),
            Err(error) => Err(error),
        }
    }
}

fn is_done(task: &TaskOut) -> bool {
    task.status == TaskStatus::Done
}

/// Whether `step` is the parent's step of the sub-task `sub_key`: titled `{sub_key}: …` (the
/// colon keeps `TE-2` from matching `TE-20`).
fn is_step_of(step: &StepOut, sub_key: &str) -> bool {
    step.title.strip_prefix(sub_key).is_some_and(|rest| rest.starts_with(':'))
}

/// FNV-1a, 64 bits: a short name for a list of blocker keys in an idempotency key, the same in
/// every process and release (std's hasher promises neither).
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_belongs_to_the_sub_task_its_title_names_before_the_colon() {
        let step = |title: &str| StepOut {
            id: "s".into(),
            task_id: "t".into(),
            title: title.into(),
            done: false,
            position: 0,
        };
        assert!(is_step_of(&step("TE-2: Backend"), "TE-2"));
        assert!(!is_step_of(&step("TE-20: Backend"), "TE-2"));
        assert!(!is_step_of(&step("Review TE-2: Backend"), "TE-2"));
        assert!(!is_step_of(&step("TE-2 Backend"), "TE-2"));
    }

    #[test]
    fn the_blockers_name_is_the_same_everywhere() {
        assert_eq!(fnv1a(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a("a"), 0xaf63_dc4c_8601_ec8c);
        assert_ne!(fnv1a("TE-2,TE-3"), fnv1a("TE-3,TE-2"));
    }
}
