//! Reconciliation: after each (re)connect the router asks the tracker through REST what the event
//! stream may have missed, and takes up only what is still asked of the agent. What it finds goes
//! through the same claims as events, so nothing is handled twice.
//!
//! The same rules hold after a first start and after any reconnect, whatever the state file
//! remembers (a fresh one remembers nothing):
//! - tasks: open (`todo`, `in_progress`) and assigned to the agent, not running, with no finished
//!   or unfinished run in the state file, and not already summarised on the board — the agent's
//!   own comment at or after the task's last change (`updated_at`; an assignment is a change,
//!   so a comment after it is a comment after the assignment). A task still `todo` that waits
//!   for others (`blocked_by:` labels) was never started (a run's first act moves its task to
//!   `in_progress`), so the agent's comment on it is what it waits for, not a summary: it goes to
//!   the router, which starts it once its blockers are done (`tree.rs`);
//! - mentions: no older than `startup.answer_mentions_since`, and not already answered on the
//!   board — an answer is judged by what the agent's messages name, not by when they came: a
//!   mention is answered iff a message of the agent after it, where it answers (the task's
//!   comments for a task comment, else the thread), names it as `reply_to` — or, one that names
//!   nothing (a tracker that keeps no `reply_to`, an older agent), has it as its parent. A reply
//!   to a later mention in the same thread answers only that one.
//!
//! The cost is bounded: mentions are read newest first and reading stops at the first one older
//! than the window (at most [`MAX_MENTION_PAGES`] pages); each task and each recent mention costs
//! one more listing (a thread read at most [`MAX_THREAD_PAGES`] pages after the mention).

use std::collections::HashSet;
use std::time::Duration;

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use picogent_inspector::startup::ReconcileReport;
use picogent_state::{ClaimKind, State};
use picogent_tracker::model::{MessageOut, MessageQuery, TaskOut, TaskQuery, TaskStatus};
use picogent_tracker::session::SessionKey;
use picogent_tracker::tree::blockers_of;
use picogent_tracker::{TrackerClient, TrackerError};

/// The tracker's largest page.
const PAGE: u32 = 200;
/// Mentions in the window read at most: this many pages.
pub(super) const MAX_MENTION_PAGES: usize = 10;
/// Messages after a mention read at most, looking for the agent's answer: this many pages.
pub(super) const MAX_THREAD_PAGES: usize = 5;

/// What reconciliation hands the router: what to take up, and what it left and why.
#[derive(Debug)]
pub struct Reconciliation {
    pub tasks: Vec<TaskOut>,
    /// Oldest first.
    pub messages: Vec<MessageOut>,
    /// The router adds what it did with `tasks` and `messages`.
    pub report: ReconcileReport,
}

/// What the reconciliation needs to know of the agent.
pub(super) struct Reconciler<'a> {
    pub client: &'a TrackerClient,
    pub state: &'a State,
    pub slug: &'a str,
    /// `startup.answer_mentions_since`.
    pub window: Duration,
    /// Sessions with a run in flight or waiting: their tasks are being worked.
    pub busy: HashSet<SessionKey>,
}

impl Reconciler<'_> {
    pub(super) async fn run(&self) -> Reconciliation {
        let mut report = ReconcileReport::default();
        let tasks = self.open_tasks(&mut report).await;
        let messages = self.recent_mentions(&mut report).await;
        Reconciliation { tasks, messages, report }
    }

    /// Open tasks assigned to the agent that nothing has covered yet.
    async fn open_tasks(&self, report: &mut ReconcileReport) -> Vec<TaskOut> {
        let listed = match self.list_open_tasks().await {
            Ok(listed) => listed,
            Err(error) => {
                tracing::warn!(%error, "reconciliation: cannot list assigned tasks");
                report.errors.push(format!("cannot list the tasks assigned to the agent: {error}"));
                return Vec::new();
            }
        };
        report.tasks.open = listed.len() as u64;
        let unfinished: HashSet<SessionKey> = match self.state.unfinished_runs().await {
            Ok(runs) => runs.into_iter().map(|run| run.session_key).collect(),
            Err(error) => {
                tracing::warn!(%error, "reconciliation: cannot read unfinished runs");
                HashSet::new()
            }
        };
        let mut wanted = Vec::new();
        for task in listed {
            let session = SessionKey::Task(task.id.clone());
            let reason = if self.busy.contains(&session) {
                Some("running")
            } else if self.state.has_finished_run_for(&session).await.unwrap_or(false) {
                Some("finished_run")
            } else if unfinished.contains(&session) {
                // The run queue resumes it, from where it was, once its lease lapsed.
                Some("unfinished_run")
            } else if task.status == TaskStatus::Todo && !blockers_of(&task).is_empty() {
                // Never started, so not summarised: the router reads its blockers.
                None
            } else {
                match commented_since_change(self.client, self.slug, &task).await {
                    Ok(true) => Some("summarised"),
                    Ok(false) => None,
                    Err(error) => {
                        // Working it blind could post a second summary; the next reconciliation
                        // looks again.
                        tracing::warn!(%error, task = %task.key, "reconciliation: cannot read the task's comments");
                        report.errors.push(format!("cannot read the comments of {}: {error}", task.key));
                        Some("board_error")
                    }
                }
            };
            match reason {
                Some(reason) => {
                    tracing::debug!(task = %task.key, reason, "reconciliation: task not taken up");
                    report.tasks.skip(reason);
                }
                None => wanted.push(task),
            }
        }
        wanted
    }

    async fn list_open_tasks(&self) -> Result<Vec<TaskOut>, TrackerError> {
        let mut tasks = Vec::new();
        let mut cursor = None;
        loop {
            let query = TaskQuery {
                assignee: Some(self.slug.to_string()),
                status: Some("todo,in_progress".into()),
                limit: Some(PAGE),
                cursor: cursor.clone(),
                ..TaskQuery::default()
            };
            let page = self.client.list_tasks(&query).await?;
            tasks.extend(page.items);
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(tasks),
            }
        }
    }

    /// Mentions of the agent inside the window that are not answered yet, oldest first.
    async fn recent_mentions(&self, report: &mut ReconcileReport) -> Vec<MessageOut> {
        report.mentions.window = picogent_config::TextDuration(self.window).to_string();
        if self.window.is_zero() {
            return Vec::new();
        }
        let cutoff = OffsetDateTime::now_utc() - self.window;
        let mut recent = Vec::new();
        let mut before: Option<String> = None;
        let mut pages = 0;
        loop {
            let query = MessageQuery {
                mentioning: Some(self.slug.to_string()),
                limit: Some(PAGE),
                before: before.clone(),
                ..MessageQuery::default()
            };
            let page = match self.client.list_messages(&query).await {
                Ok(page) => page,
                Err(error) => {
                    tracing::warn!(%error, "reconciliation: cannot list mentions");
                    report.errors.push(format!("cannot list the messages mentioning the agent: {error}"));
                    break;
                }
            };
            pages += 1;
            let full = page.len() >= PAGE as usize;
            before = page.first().map(|message| message.id.clone());
            // Newest first: past the first old one, the rest of the page is older still, and
            // no page further back is read.
            let mut reached_old = false;
            for message in page.into_iter().rev() {
                reached_old = reached_old || parse_time(&message.created_at).is_none_or(|at| at < cutoff);
                if reached_old {
                    report.mentions.skip("old");
                } else {
                    recent.push(message);
                }
            }
            if reached_old || !full {
                break;
            }
            if pages >= MAX_MENTION_PAGES {
                tracing::warn!(pages, "reconciliation: more mentions in the window than it reads; the oldest are left");
                report.errors.push(format!(
                    "more than {} mentions inside startup.answer_mentions_since: the oldest were not read",
                    pages * PAGE as usize
                ));
                break;
            }
        }
        recent.reverse();
        let mut wanted = Vec::new();
        for message in recent {
            // The agent's own messages go to the router, which never answers them.
            if message.author_slug != self.slug {
                if self.state.is_claimed(ClaimKind::Message, &message.id).await.unwrap_or(false) {
                    report.mentions.skip("seen");
                    continue;
                }
                match self.answered_on_board(&message).await {
                    Ok(false) => {}
                    Ok(true) => {
                        tracing::debug!(id = %message.id, "reconciliation: mention answered on the board already");
                        report.mentions.skip("handled");
                        continue;
                    }
                    Err(error) => {
                        tracing::warn!(%error, id = %message.id, "reconciliation: cannot read where a mention is answered");
                        report.errors.push(format!("cannot read the thread of message {}: {error}", message.id));
                        report.mentions.skip("board_error");
                        continue;
                    }
                }
            }
            wanted.push(message);
        }
        wanted
    }

    /// Whether a message of the agent after `message`, where it answers it (on the task for a
    /// task comment, else in the thread), answers it ([`answers`]).
    async fn answered_on_board(&self, message: &MessageOut) -> Result<bool, TrackerError> {
        let mut query = match SessionKey::of_message(message) {
            SessionKey::Task(task_id) => MessageQuery { task_id: Some(task_id), ..MessageQuery::default() },
            SessionKey::Thread(root) | SessionKey::Prompt(root) | SessionKey::Schedule(root) => {
                MessageQuery { parent_id: Some(root), ..MessageQuery::default() }
            }
        };
        query.limit = Some(PAGE);
        query.after = Some(message.id.clone());
        for _ in 0..MAX_THREAD_PAGES {
            let page = self.client.list_messages(&query).await?;
            if page.iter().any(|later| later.author_slug == self.slug && answers(later, &message.id)) {
                return Ok(true);
            }
            match page.last() {
                Some(last) if page.len() >= PAGE as usize => query.after = Some(last.id.clone()),
                _ => return Ok(false),
            }
        }
        Ok(false)
    }
}

/// Whether the board shows the comment of the agent `slug` on `task` at or after its last change.
/// Without a readable time on the task, any comment of the agent's counts: silence is the safer
/// mistake than a second summary.
pub(super) async fn commented_since_change(
    client: &TrackerClient,
    slug: &str,
    task: &TaskOut,
) -> Result<bool, TrackerError> {
    let changed = parse_time(&task.updated_at).or_else(|| parse_time(&task.created_at));
    // The newest page: a summary is among the latest comments.
    let query = MessageQuery { task_id: Some(task.id.clone()), limit: Some(PAGE), ..MessageQuery::default() };
    let comments = client.list_messages(&query).await?;
    Ok(comments.iter().any(|comment| {
        comment.author_slug == slug
            && match (changed, parse_time(&comment.created_at)) {
                (Some(changed), Some(at)) => at >= changed,
                _ => true,
            }
    }))
}

/// Whether `reply` answers the message `asked`: it names it as `reply_to`, or names nothing and
/// has it as its parent (threads are one level deep, so a parent names only a thread's first
/// message).
fn answers(reply: &MessageOut, asked: &str) -> bool {
    match &reply.reply_to {
        Some(named) => named == asked,
        None => reply.parent_id.as_deref() == Some(asked),
    }
}

fn parse_time(text: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(text, &Rfc3339).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(parent_id: Option<&str>, reply_to: Option<&str>) -> MessageOut {
        MessageOut {
            id: "r".into(),
            author_slug: "picogent".into(),
            content: "an answer".into(),
            chat_id: None,
            task_id: Some("t1".into()),
            parent_id: parent_id.map(str::to_string),
            mentions: vec![],
            created_at: String::new(),
            reply_to: reply_to.map(str::to_string),
        }
    }

    #[test]
    fn a_mention_is_answered_by_a_reply_that_names_it_not_by_a_later_one() {
        let cases = [
            // Named: answered, wherever in the thread it is.
            (reply(Some("root"), Some("m2")), "m2", true),
            // A reply naming a later mention in the same thread answers only that one.
            (reply(Some("root"), Some("m3")), "m2", false),
            (reply(Some("root"), Some("root")), "root", true),
            // A tracker that keeps no `reply_to`: the parent names the thread's first message.
            (reply(Some("root"), None), "root", true),
            (reply(Some("root"), None), "m2", false),
            // A comment on the task that names nothing answers nothing.
            (reply(None, None), "m2", false),
        ];
        for (reply, asked, expected) in cases {
            assert_eq!(answers(&reply, asked), expected, "{asked}: {reply:?}");
        }
    }
}
