//! A tree of tasks on the board, in the tracker's own vocabulary: labels. The tracker contract has
//! no parent field and no dependencies, so a sub-task made from a plan carries them as labels:
//! `parent:KEY` (the task it is part of) and one `blocked_by:KEY` per task it waits for. Whoever
//! reads the board (a person, another agent, picogent after a restart) sees the same tree.
//!
//! Only keys are read from labels, and a key is checked for its shape (`PROJECT-123`): a label a
//! person wrote by hand that does not fit is not part of any tree.

use crate::model::{TaskOut, TaskQuery};
use crate::{TrackerClient, TrackerError};

/// The label naming the task a sub-task is part of.
pub const PARENT_PREFIX: &str = "parent:";
/// The label naming a task a sub-task waits for.
pub const BLOCKED_BY_PREFIX: &str = "blocked_by:";

/// The label `parent:KEY`.
pub fn parent_label(key: &str) -> String {
    format!("{PARENT_PREFIX}{key}")
}

/// The label `blocked_by:KEY`.
pub fn blocked_by_label(key: &str) -> String {
    format!("{BLOCKED_BY_PREFIX}{key}")
}

/// The key of the task this one is part of, if it carries a well-formed `parent:` label (the
/// first one, if a person added more).
pub fn parent_of(task: &TaskOut) -> Option<&str> {
    keys_after(&task.labels, PARENT_PREFIX).next()
}

/// The keys of the tasks this one waits for, each once, in label order.
pub fn blockers_of(task: &TaskOut) -> Vec<&str> {
    let mut keys: Vec<&str> = Vec::new();
    for key in keys_after(&task.labels, BLOCKED_BY_PREFIX) {
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys
}

/// Whether `key` has a task key's shape: a project key (letters and digits, starting with a
/// letter), a dash, a number.
pub fn is_task_key(key: &str) -> bool {
    let Some((project, number)) = key.rsplit_once('-') else {
        return false;
    };
    let mut letters = project.chars();
    letters.next().is_some_and(|first| first.is_ascii_alphabetic())
        && letters.all(|c| c.is_ascii_alphanumeric())
        && project.len() <= 20
        && !number.is_empty()
        && number.len() <= 9
        && number.chars().all(|c| c.is_ascii_digit())
}

/// The most sub-tasks read of one parent: a plan has at most `delegation.max_subtasks` (at most 50),
/// so more is labels people wrote by hand, and is not read past this.
pub const MAX_SUBTASKS_READ: usize = 1_000;

/// Every task labelled `parent:{parent_key}` in `project`, oldest first as the tracker lists them,
/// at most [`MAX_SUBTASKS_READ`].
pub async fn subtasks(client: &TrackerClient, project: &str, parent_key: &str) -> Result<Vec<TaskOut>, TrackerError> {
    let query = TaskQuery {
        project_id: Some(project.to_string()),
        labels: Some(parent_label(parent_key)),
        ..TaskQuery::default()
    };
    let mut found = listed(client, query, MAX_SUBTASKS_READ).await?;
    found.retain(|task| parent_of(task) == Some(parent_key));
    Ok(found)
}

/// Every task `query` lists, page by page, at most `most` (a tree's listings are bounded: the
/// labels they match are anyone's to write).
pub async fn listed(client: &TrackerClient, mut query: TaskQuery, most: usize) -> Result<Vec<TaskOut>, TrackerError> {
    query.limit = Some(200);
    let mut found = Vec::new();
    loop {
        let page = client.list_tasks(&query).await?;
        found.extend(page.items);
        match page.next_cursor {
            Some(next) if found.len() < most => query.cursor = Some(next),
            _ => break,
        }
    }
    found.truncate(most);
    Ok(found)
}

fn keys_after<'a>(labels: &'a [String], prefix: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    labels.iter().filter_map(move |label| label.strip_prefix(prefix)).filter(|key| is_task_key(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(labels: &[&str]) -> TaskOut {
        serde_json::from_value(serde_json::json!({
            "id": "t1", "key": "TE-5", "project_slug": "te", "title": "a", "description": null,
            "type": "task", "status": "todo", "priority": "medium", "assignee_slug": null,
            "labels": labels, "watchers": [], "created_by": "alice",
            "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"
        }))
        .unwrap()
    }

    #[test]
    fn a_tree_is_read_from_well_formed_labels_only() {
        let sub = task(&["parent:TE-1", "blocked_by:TE-2", "blocked_by:TE-3", "blocked_by:TE-2", "epic"]);
        assert_eq!(parent_of(&sub), Some("TE-1"));
        assert_eq!(blockers_of(&sub), vec!["TE-2", "TE-3"]);

        let hand =
            task(&["parent:", "parent:te 1", "blocked_by:TE-", "blocked_by:-3", "blocked_by:TE-x", "parent:1A-2"]);
        assert_eq!(parent_of(&hand), None);
        assert!(blockers_of(&hand).is_empty());
        assert_eq!(parent_label("TE-1"), "parent:TE-1");
        assert_eq!(blocked_by_label("TE-2"), "blocked_by:TE-2");
    }

    #[test]
    fn a_task_key_is_a_project_key_a_dash_and_a_number() {
        for key in ["TE-1", "ABC2-3456", "x-9"] {
            assert!(is_task_key(key), "{key}");
        }
        for key in ["", "TE", "TE-", "-1", "TE-1a", "T E-1", "TE-1234567890", "ü-1"] {
            assert!(!is_task_key(key), "{key}");
        }
    }
}
