//! What each kind reads from the board before it decides whether a firing has anything to say,
//! and nothing more: a firing that finds nothing makes no model call and posts nothing.
//!
//! - `standup` reads the project's tasks (pages of 200, at most [`MAX_TASKS`]): what changed since
//!   the last digest, what carries a blocked label, what is due.
//! - `stale` reads the open tasks (of the project, or all) and, for each one assigned to a person
//!   and unchanged for `days`, its newest comments: a comment of anyone but the agent within
//!   `days` counts as a touch.
//! - `prompt` reads nothing: it always runs its prompt.
//!
//! Times are the tracker's (`updated_at`, `created_at`, RFC 3339), compared with the
//! scheduler's clock; a time the tracker gives that does not parse counts as "now" (never stale,
//! always moved), so a malformed field makes the agent say too much rather than nudge wrongly.

use std::collections::HashSet;

use time::format_description::well_known::Rfc3339;
use time::{Date, OffsetDateTime};

use crate::firing::{Digest, DueLine, StaleTask, TaskLine};
use picogent_tracker::model::{MessageQuery, ProjectOut, TaskOut, TaskQuery, TaskStatus};
use picogent_tracker::{TrackerClient, TrackerError};

/// Most tasks one firing reads: a digest of a bigger project lists the newest of these.
pub const MAX_TASKS: usize = 1_000;
/// Most nudges one firing posts, so turning `stale` on over a neglected board does not flood
/// it; the rest are nudged by the next firings.
pub const MAX_NUDGES: usize = 20;
/// How many of a task's newest comments a stale check reads for a touch.
const COMMENTS_READ: u32 = 20;
const PAGE: u32 = 200;
const DAY_MS: i64 = 24 * 3_600_000;

/// The statuses of a task not done yet.
const OPEN: &str = "backlog,todo,in_progress,in_review";

/// The label prefix of a due date: `due:2026-12-24`.
const DUE_LABEL: &str = "due:";

/// Reads tasks page by page, at most [`MAX_TASKS`]; `true` when there were more.
async fn read_tasks(client: &TrackerClient, query: TaskQuery) -> Result<(Vec<TaskOut>, bool), TrackerError> {
    let mut tasks = Vec::new();
    let mut cursor = None;
    loop {
        let page = client.list_tasks(&TaskQuery { limit: Some(PAGE), cursor, ..query.clone() }).await?;
        tasks.extend(page.items);
        match page.next_cursor {
            Some(next) if tasks.len() < MAX_TASKS => cursor = Some(next),
            Some(_) => return Ok((tasks, true)),
            None => return Ok((tasks, false)),
        }
    }
}

/// What a standup digest of `project` reports: tasks changed after `since_ms`, open tasks
/// carrying one of `blocked_labels` (any case), and open tasks due on or before
/// `today + due_within_days` (a `due:YYYY-MM-DD` label). `link` makes a task's link from its id.
pub async fn read_digest(
    client: &TrackerClient,
    project: &ProjectOut,
    since_ms: i64,
    today: Date,
    blocked_labels: &[String],
    due_within_days: u32,
    link: &(dyn Fn(&str) -> String + Sync),
) -> Result<Digest, TrackerError> {
    let query = TaskQuery { project_id: Some(project.slug.clone()), ..TaskQuery::default() };
    let (tasks, truncated) = read_tasks(client, query).await?;
    Ok(digest_of(tasks, truncated, since_ms, today, blocked_labels, due_within_days, link))
}

/// [`read_digest`]'s decisions over tasks already read.
fn digest_of(
    mut tasks: Vec<TaskOut>,
    truncated: bool,
    since_ms: i64,
    today: Date,
    blocked_labels: &[String],
    due_within_days: u32,
    link: &(dyn Fn(&str) -> String + Sync),
) -> Digest {
    // Newest change first: the digest leads with what just happened.
    tasks.sort_by_key(|task| std::cmp::Reverse(changed_ms(task)));
    let line = |task: &TaskOut| TaskLine {
        id: task.id.clone(),
        key: task.key.clone(),
        title: task.title.clone(),
        status: task.status.as_str().to_string(),
        assignee: task.assignee_slug.clone(),
        link: link(&task.id),
    };
    let open = |task: &&TaskOut| task.status != TaskStatus::Done;
    let moved = tasks.iter().filter(|task| changed_ms(task) > since_ms).map(line).collect();
    let blocked = tasks
        .iter()
        .filter(open)
        .filter(|task| task.labels.iter().any(|label| blocked_labels.iter().any(|b| b.eq_ignore_ascii_case(label))))
        .map(line)
        .collect();
    let horizon = today.saturating_add(time::Duration::days(i64::from(due_within_days)));
    let mut due: Vec<DueLine> = tasks
        .iter()
        .filter(open)
        .filter_map(|task| Some((task, due_date(task)?)))
        .filter(|(_, date)| *date <= horizon)
        .map(|(task, date)| DueLine { task: line(task), due: date.to_string(), overdue: date < today })
        .collect();
    due.sort_by(|a, b| a.due.cmp(&b.due));
    let seen_ms = tasks.iter().map(changed_ms).filter(|at| *at != i64::MAX).max();
    Digest { since_ms, since_text: String::new(), moved, blocked, due, truncated, seen_ms }
}

/// A task's due date, from its first `due:YYYY-MM-DD` label that parses.
fn due_date(task: &TaskOut) -> Option<Date> {
    let format = time::macros::format_description!("[year]-[month]-[day]");
    task.labels
        .iter()
        .filter_map(|label| label.strip_prefix(DUE_LABEL))
        .find_map(|date| Date::parse(date.trim(), &format).ok())
}

/// Who a stale check looks at, and what it leaves alone.
pub struct StaleQuery<'a> {
    /// A project's slug, or every project.
    pub project: Option<&'a str>,
    pub days: u32,
    pub now_ms: i64,
    /// The agent itself: its tasks are not nudged, and its comments are no touch.
    pub agent_slug: &'a str,
    /// The tracker's human members: only their tasks are nudged.
    pub humans: &'a HashSet<String>,
    /// Tasks this job nudged within `days` already.
    pub nudged: &'a HashSet<String>,
    pub link: &'a (dyn Fn(&str) -> String + Sync),
}

/// The open tasks assigned to people that nobody but the agent touched for `days` days, oldest
/// first, at most [`MAX_NUDGES`]: unchanged since, and no comment by anyone else since.
pub async fn read_stale(client: &TrackerClient, query: &StaleQuery<'_>) -> Result<Vec<StaleTask>, TrackerError> {
    let tasks_query = TaskQuery {
        project_id: query.project.map(str::to_string),
        status: Some(OPEN.to_string()),
        ..TaskQuery::default()
    };
    let (mut tasks, _) = read_tasks(client, tasks_query).await?;
    let cutoff = query.now_ms - i64::from(query.days) * DAY_MS;
    tasks.retain(|task| {
        task.assignee_slug.as_deref().is_some_and(|slug| slug != query.agent_slug && query.humans.contains(slug))
            && !query.nudged.contains(&task.id)
            && changed_ms(task) <= cutoff
    });
    tasks.sort_by_key(changed_ms);
    let mut stale = Vec::new();
    for task in tasks {
        if stale.len() == MAX_NUDGES {
            break;
        }
        let comments =
            MessageQuery { task_id: Some(task.id.clone()), limit: Some(COMMENTS_READ), ..MessageQuery::default() };
        let last_touch = client
            .list_messages(&comments)
            .await?
            .iter()
            .filter(|comment| comment.author_slug != query.agent_slug)
            .map(|comment| parsed_ms(&comment.created_at).unwrap_or(query.now_ms))
            .chain([changed_ms(&task)])
            .max()
            .unwrap_or(query.now_ms);
        if last_touch > cutoff {
            continue;
        }
        let idle_days = u32::try_from((query.now_ms - last_touch) / DAY_MS).unwrap_or(u32::MAX);
        stale.push(StaleTask {
            id: task.id.clone(),
            key: task.key.clone(),
            title: task.title.clone(),
            assignee: task.assignee_slug.clone().unwrap_or_default(),
            idle_days,
            link: (query.link)(&task.id),
        });
    }
    Ok(stale)
}

/// When the task last changed, in unix ms (`updated_at`, else `created_at`; "far future" when
/// neither parses, so a malformed time is never taken for an old one).
fn changed_ms(task: &TaskOut) -> i64 {
    parsed_ms(&task.updated_at).or_else(|| parsed_ms(&task.created_at)).unwrap_or(i64::MAX)
}

fn parsed_ms(text: &str) -> Option<i64> {
    let at = OffsetDateTime::parse(text, &Rfc3339).ok()?;
    i64::try_from(at.unix_timestamp_nanos() / 1_000_000).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(key: &str, status: TaskStatus, updated_at: &str, labels: &[&str]) -> TaskOut {
        serde_json::from_value(serde_json::json!({
            "id": format!("id-{key}"), "key": key, "project_slug": "team", "title": format!("title {key}"),
            "status": status.as_str(), "assignee_slug": "bob", "labels": labels,
            "created_at": "2026-12-01T00:00:00Z", "updated_at": updated_at,
        }))
        .unwrap()
    }

    #[test]
    fn a_digest_reports_what_moved_what_is_blocked_and_what_is_due() {
        let since = parsed_ms("2026-12-05T09:00:00Z").unwrap();
        let today = Date::from_calendar_date(2026, time::Month::December, 6).unwrap();
        let tasks = vec![
            task("TE-1", TaskStatus::InReview, "2026-12-05T10:00:00Z", &[]),
            task("TE-2", TaskStatus::InProgress, "2026-12-04T10:00:00Z", &["Blocked"]),
            task("TE-3", TaskStatus::Todo, "2026-12-04T10:00:00Z", &["due:2026-12-07"]),
            task("TE-4", TaskStatus::Todo, "2026-12-04T10:00:00Z", &["due:2026-12-01"]),
            task("TE-5", TaskStatus::Todo, "2026-12-04T10:00:00Z", &["due:2026-12-20", "blocked-ish"]),
            task("TE-6", TaskStatus::Done, "2026-12-05T11:00:00Z", &["blocked", "due:2026-12-01"]),
            task("TE-7", TaskStatus::Todo, "garbled", &[]),
        ];
        let link = |id: &str| format!("http://board/tasks/{id}");
        let digest = digest_of(tasks, false, since, today, &["blocked".to_string()], 2, &link);
        let keys = |lines: &[TaskLine]| lines.iter().map(|line| line.key.clone()).collect::<Vec<_>>();
        // A task done since the last digest moved too; an update time that does not parse falls
        // back to the task's creation.
        assert_eq!(keys(&digest.moved), ["TE-6", "TE-1"]);
        assert_eq!(keys(&digest.blocked), ["TE-2"]);
        let due: Vec<(String, bool)> = digest.due.iter().map(|due| (due.task.key.clone(), due.overdue)).collect();
        assert_eq!(due, [("TE-4".to_string(), true), ("TE-3".to_string(), false)]);
        assert_eq!(digest.moved[1].link, "http://board/tasks/id-TE-1");
        assert_eq!(digest.seen_ms, parsed_ms("2026-12-05T11:00:00Z"), "the newest change read");
    }

    #[test]
    fn nothing_moved_is_idle() {
        let since = parsed_ms("2026-12-05T09:00:00Z").unwrap();
        let today = Date::from_calendar_date(2026, time::Month::December, 6).unwrap();
        let tasks = vec![task("TE-2", TaskStatus::InProgress, "2026-12-04T10:00:00Z", &["blocked"])];
        let digest = digest_of(tasks, false, since, today, &["blocked".to_string()], 2, &|id| id.to_string());
        assert!(digest.is_idle(), "a blocked task that did not move is no news");
    }
}
