//! The words of a task tree on the board (`parent:KEY`, `blocked_by:KEY` labels): what a sub-task
//! waits for before it starts, what the parent hears of a sub-task that failed or was handed back,
//! and the roll-up on the parent once every sub-task is done.
//!
//! Titles are people's text: each is put on one line, bounded, and with its `@` made harmless, so
//! a summary never mentions (and wakes) a member a title names.

use picogent_tracker::model::TaskStatus;

use crate::words::one_line;

/// How long a sub-task's title may be in a roll-up, in characters.
const MAX_TITLE_CHARS: usize = 120;

/// A task a sub-task waits for, as the agent found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocker<'a> {
    pub key: &'a str,
    pub standing: Standing,
}

/// Where a blocker stands: its status, nowhere (no task has its key), or out of the agent's
/// sight (the board refuses to show it to the agent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    Status(TaskStatus),
    NotFound,
    Refused,
}

/// `Waiting for TE-2 (in_progress) and TE-3 (todo) before starting; I start when they are done.`
/// `waiting` holds the blockers that are not done, in label order; a key no task has is named as
/// such, with what lets the task start without it.
pub fn waiting_for(waiting: &[Blocker<'_>]) -> String {
    let named: Vec<String> = waiting
        .iter()
        .map(|blocker| match blocker.standing {
            Standing::Status(status) => format!("{} ({status})", blocker.key),
            Standing::NotFound => format!("{} (not found)", blocker.key),
            Standing::Refused => format!("{} (I may not read it)", blocker.key),
        })
        .collect();
    let when = if waiting.len() == 1 { "it is done" } else { "they are done" };
    let mut notice = format!("Waiting for {} before starting; I start when {when}.", and_list(&named));
    for (standing, one, many) in [
        (Standing::NotFound, "does not exist", "do not exist"),
        (Standing::Refused, "is not mine to read", "are not mine to read"),
    ] {
        let missing: Vec<&str> =
            waiting.iter().filter(|blocker| blocker.standing == standing).map(|blocker| blocker.key).collect();
        match missing.as_slice() {
            [] => {}
            [key] => notice.push_str(&format!(
                " {key} {one}: remove the label blocked_by:{key} and reassign me to start without it."
            )),
            _ => notice.push_str(&format!(
                " {} {many}: remove the labels {} and reassign me to start without them.",
                and_list(&missing.iter().map(|key| key.to_string()).collect::<Vec<_>>()),
                missing.iter().map(|key| format!("blocked_by:{key}")).collect::<Vec<_>>().join(", ")
            )),
        }
    }
    notice
}

/// One sub-task as the roll-up lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubTaskLine<'a> {
    pub key: &'a str,
    pub title: &'a str,
    pub assignee: Option<&'a str>,
    pub status: TaskStatus,
    /// When its work was reviewed: the branch handed to review, and the rounds it took.
    pub review: Option<(&'a str, u32)>,
}

/// What the runs of a tree spent, as the agent's state counts them, against its budget.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TreeSpend {
    pub tokens: u64,
    /// When the model has a price.
    pub cost: Option<f64>,
    /// `limits.max_tokens_per_tree`.
    pub per_tree: u64,
}

/// The one summary on the parent `parent_key` when every sub-task is done: a line per sub-task
/// with its key, title, assignee and status (and its branch and review rounds when it was
/// reviewed), where the parent goes now, and what the tree's runs
/// here spent (left out when they spent nothing: people or other agents did the work).
pub fn roll_up(parent_key: &str, sub_tasks: &[SubTaskLine<'_>], spend: Option<TreeSpend>) -> String {
    let count =
        if sub_tasks.len() == 1 { "The sub-task".to_string() } else { format!("All {} sub-tasks", sub_tasks.len()) };
    let verb = if sub_tasks.len() == 1 { "is" } else { "are" };
    let mut summary = format!("{count} of {parent_key} {verb} done; {parent_key} moves to in_review.\n");
    for sub_task in sub_tasks {
        // Without `@`, a title cannot mention anyone; the assignee is named without one for the same reason.
        let title = one_line(sub_task.title, MAX_TITLE_CHARS).replace('@', "＠");
        let assignee = sub_task.assignee.unwrap_or("nobody");
        let review = match sub_task.review {
            Some((branch, 1)) => format!("; branch `{branch}`, reviewed in 1 round"),
            Some((branch, rounds)) => format!("; branch `{branch}`, reviewed in {rounds} rounds"),
            None => String::new(),
        };
        summary
            .push_str(&format!("\n- {}: {title} (assigned to {assignee}, {}{review})", sub_task.key, sub_task.status));
    }
    if let Some(spend) = spend.filter(|spend| spend.tokens > 0) {
        summary.push_str(&format!(
            "\n\nThe tree's runs here spent {} tokens of {} (`limits.max_tokens_per_tree`)",
            crate::thousands(spend.tokens),
            crate::thousands(spend.per_tree)
        ));
        if let Some(cost) = spend.cost {
            summary.push_str(&format!(" · cost {cost:.4}"));
        }
        summary.push('.');
    }
    summary
}

/// How long the reason quoted from a sub-task's notice or rejection may be, in characters.
const MAX_REASON_CHARS: usize = 300;

/// Said once on the parent when the agent's run of a sub-task failed: which one, why (the first
/// line of the notice on the sub-task), and what starts it again.
pub fn sub_task_failed(key: &str, title: &str, notice: &str) -> String {
    let title = one_line(title, MAX_TITLE_CHARS).replace('@', "＠");
    let why = one_line(notice.lines().next().unwrap_or_default(), MAX_REASON_CHARS).replace('@', "＠");
    format!(
        "Sub-task {key} ({title}) failed: {why} It starts again when it is assigned to me again or I am mentioned \
         on it; until then this task waits for it."
    )
}

/// Said once on the parent when a sub-task was handed back (rejected) by its assignee: who, why,
/// and that it needs someone to take it.
pub fn sub_task_rejected(key: &str, title: &str, by: &str, reason: Option<&str>) -> String {
    let title = one_line(title, MAX_TITLE_CHARS).replace('@', "＠");
    let by = one_line(by, 60).replace('@', "＠");
    let reason = match reason {
        Some(reason) => format!(": {}", one_line(reason, MAX_REASON_CHARS).replace('@', "＠")),
        None => String::new(),
    };
    format!(
        "Sub-task {key} ({title}) was handed back by {by}{reason}. It needs someone to take it before this task can be done."
    )
}

/// Said once on the parent when a sub-task in progress went quiet for `minutes`: who holds it and
/// what would move it.
pub fn sub_task_stalled(key: &str, title: &str, assignee: Option<&str>, minutes: u64) -> String {
    let title = one_line(title, MAX_TITLE_CHARS).replace('@', "＠");
    let (held, ask) = match assignee {
        Some(slug) => {
            let slug = one_line(slug, 60).replace('@', "＠");
            (format!(", assigned to {slug},"), format!("Ask {slug} how it stands, or reassign it."))
        }
        None => (String::new(), "Assign it to someone to move it on.".to_string()),
    };
    format!("Sub-task {key} ({title}){held} has had no activity for {minutes} min. {ask}")
}

/// Said once on a sub-task assigned after a person stopped the work under its parent: why it
/// does not start, and how to have it worked anyway.
pub fn tree_stopped(parent_key: &str) -> String {
    format!("Not starting: the work under {parent_key} was stopped. Mention me here if this task should go on.")
}

/// `a`, `a and b`, `a, b and c`.
fn and_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_notice_names_each_blocker_and_where_it_stands() {
        let todo = |key| Blocker { key, standing: Standing::Status(TaskStatus::Todo) };
        let cases = [
            (vec![todo("TE-2")], "Waiting for TE-2 (todo) before starting; I start when it is done."),
            (
                vec![Blocker { key: "TE-2", standing: Standing::Status(TaskStatus::InProgress) }, todo("TE-3")],
                "Waiting for TE-2 (in_progress) and TE-3 (todo) before starting; I start when they are done.",
            ),
            (
                vec![todo("TE-2"), todo("TE-3"), Blocker { key: "TE-9", standing: Standing::NotFound }],
                "Waiting for TE-2 (todo), TE-3 (todo) and TE-9 (not found) before starting; I start when they are \
                 done. TE-9 does not exist: remove the label blocked_by:TE-9 and reassign me to start without it.",
            ),
            (
                vec![
                    Blocker { key: "OPS-1", standing: Standing::Refused },
                    Blocker { key: "TE-9", standing: Standing::NotFound },
                ],
                "Waiting for OPS-1 (I may not read it) and TE-9 (not found) before starting; I start when they are \
                 done. TE-9 does not exist: remove the label blocked_by:TE-9 and reassign me to start without it. \
                 OPS-1 is not mine to read: remove the label blocked_by:OPS-1 and reassign me to start without it.",
            ),
        ];
        for (blockers, expected) in cases {
            assert_eq!(waiting_for(&blockers), expected);
        }
    }

    #[test]
    fn a_failed_or_handed_back_sub_task_is_named_on_its_parent_and_mentions_nobody() {
        assert_eq!(
            sub_task_failed("TE-4", "Docs @bob", "I could not finish: the model server refused (HTTP 400).\nMore."),
            "Sub-task TE-4 (Docs ＠bob) failed: I could not finish: the model server refused (HTTP 400). It starts \
             again when it is assigned to me again or I am mentioned on it; until then this task waits for it."
        );
        assert_eq!(
            sub_task_rejected("TE-3", "Export", "bob", Some("not my area, ask @carol")),
            "Sub-task TE-3 (Export) was handed back by bob: not my area, ask ＠carol. It needs someone to take it \
             before this task can be done."
        );
        assert!(
            sub_task_rejected("TE-3", "Export", "bob", None)
                .starts_with("Sub-task TE-3 (Export) was handed back by bob. ")
        );
        assert_eq!(
            sub_task_stalled("TE-5", "Tests", Some("bob"), 7),
            "Sub-task TE-5 (Tests), assigned to bob, has had no activity for 7 min. Ask bob how it stands, or reassign it."
        );
        assert_eq!(
            sub_task_stalled("TE-5", "Tests", None, 7),
            "Sub-task TE-5 (Tests) has had no activity for 7 min. Assign it to someone to move it on."
        );
    }

    #[test]
    fn a_roll_up_lists_every_sub_task_and_mentions_nobody() {
        let lines = [
            SubTaskLine {
                key: "TE-2",
                title: "Backend\nchange",
                assignee: Some("reviewer"),
                status: TaskStatus::Done,
                review: Some(("picogent/TE-2", 2)),
            },
            SubTaskLine { key: "TE-3", title: "Ask @bob", assignee: None, status: TaskStatus::Done, review: None },
        ];
        assert_eq!(
            roll_up("TE-1", &lines, None),
            "All 2 sub-tasks of TE-1 are done; TE-1 moves to in_review.\n\n\
             - TE-2: Backend change (assigned to reviewer, done; branch `picogent/TE-2`, reviewed in 2 rounds)\n\
             - TE-3: Ask ＠bob (assigned to nobody, done)"
        );
        let spend = TreeSpend { tokens: 12_345, cost: Some(0.5), per_tree: 400_000 };
        assert!(
            roll_up("TE-1", &lines[..1], Some(spend)).ends_with(
                "reviewed in 2 rounds)\n\nThe tree's runs here spent 12,345 tokens of 400,000 \
                 (`limits.max_tokens_per_tree`) · cost 0.5000."
            ),
            "{}",
            roll_up("TE-1", &lines[..1], Some(spend))
        );
    }
}
