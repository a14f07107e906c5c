//! The planner's rules for a team of agents (`picogent demo --team`, the eval's breakdown
//! scenario): a breakdown asked for, a review of a branch, and the rework a review asked for.
//! Each is as deterministic as the rest of the planner, and each is named a stand-in in what it
//! writes.
//!
//! - **Breakdown:** a task prompt that asks for `plan_subtasks` (the template's "propose its
//!   sub-tasks with plan_subtasks" line, outside the fences), with the tool offered: the task is
//!   moved to `in_progress`, then each bullet of its description is proposed as a sub-task for
//!   the agent itself. A bullet's title is its text before the first `: ` (or its first 80
//!   characters), and `(after 1)` or `(after 1, 2)` in it makes the sub-task wait for those.
//!   Once the plan is answered, the answer is the final text: the sub-tasks are then worked on
//!   their own and rolled up on the parent by the agent, not by this run.
//! - **Review:** a run offered `review_diff` (a review run): the diff is read, and each line the
//!   branch adds with a `TODO` in it is a finding on its file and line, which asks for the to-do
//!   to be done in words the rework rule reads: `replace "TODO: x" with "x"`. Findings make the
//!   verdict `changes_requested`; none, `approve`.
//! - **Rework:** a task prompt whose latest review comment is a "Changes requested" one: the
//!   coding agent is given the first finding's file and its `replace "…" with "…"` in place of
//!   the task's text (which it has already done).

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Value, json};

use super::{History, Offered, PLACEHOLDER, PlannedTurn, Read, call, plan_steps, result_description, set_status};

/// The template's line that asks for a breakdown (`prompts/task_assigned.md`).
const BREAKDOWN_ASKED: &str = "propose its sub-tasks with plan_subtasks";
const PLAN_SUBTASKS: &str = "plan_subtasks";
const REVIEW_DIFF: &str = "review_diff";
const REVIEW_VERDICT: &str = "review_verdict";
/// How a verdict comment that sends work back starts (`picogent_workspace::review`).
const CHANGES_WORDS: &str = "Changes requested";
/// How an approving verdict comment starts.
const APPROVED_WORDS: &str = "Approved";
/// The most findings one review posts.
const MAX_FINDINGS: usize = 5;

static AFTER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\s*\(after (\d+(?:\s*,\s*\d+)*)\)").expect("valid regex"));
/// A comment line of the templates, its text a fenced part: `- @alice: <placeholder>`.
static COMMENT_LINE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(&format!(r"(?m)^- @[\w.-]+: {PLACEHOLDER}(\d+){PLACEHOLDER}")).expect("valid regex"));
/// A finding line of a verdict comment that says what to change: `- src/a.py:3 — … replace "A" with "B"`.
static FINDING_FIX: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?m)^- (\S+?):(\d+) — .*?replace "([^"\n]+)" with "([^"\n]*)""#).expect("valid regex")
});
static HUNK: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,\d+)? @@").expect("valid regex"));

/// Whether the prompt asks for a breakdown and the run may make one.
pub(super) fn breakdown_asked(history: &History, offered: &Offered) -> bool {
    offered.get(PLAN_SUBTASKS).is_some() && history.prompt.structure.contains(BREAKDOWN_ASKED)
}

/// The breakdown's next turn: `in_progress`, the plan, then the answer.
pub(super) fn plan_breakdown(
    key: &str,
    task_ref: &str,
    task: &Value,
    history: &History,
    offered: &Offered,
) -> PlannedTurn {
    if let Some(turn) = set_status(history, offered, task_ref, "in_progress") {
        return turn;
    }
    let any = |_: &Value| true;
    if history.wanted(PLAN_SUBTASKS, any) {
        let subtasks: Vec<Value> = plan_steps(result_description(task)).iter().map(|bullet| subtask(bullet)).collect();
        let summary = format!("{} sub-tasks for {key}, each worked and reviewed on its own branch", subtasks.len());
        return PlannedTurn::ToolCalls(vec![call(PLAN_SUBTASKS, json!({"subtasks": subtasks, "summary": summary}))]);
    }
    let said = match history.successes(PLAN_SUBTASKS, any).next() {
        Some(Value::String(text)) => text.lines().next().unwrap_or_default().chars().take(300).collect(),
        Some(other) => other.to_string().chars().take(300).collect(),
        None => format!("it could not be asked: {}", history.last_failure(PLAN_SUBTASKS).unwrap_or("no reason given")),
    };
    PlannedTurn::Text(format!(
        "The offline planner (a rule-based stand-in, not an LLM) proposed a breakdown of {key} with plan_subtasks. \
         What came of it: {said} Each sub-task is worked on its own and rolled up here."
    ))
}

/// One bullet as a sub-task of the plan: for the agent itself, waiting for the `(after N)` it names.
fn subtask(bullet: &str) -> Value {
    let waits_for: Vec<i64> = AFTER
        .captures(bullet)
        .map(|found| found[1].split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_default();
    let description = AFTER.replace_all(bullet, "").trim().to_string();
    let title = match description.split_once(": ") {
        Some((title, _)) if !title.is_empty() && title.chars().count() <= 80 => title.to_string(),
        _ => description.chars().take(80).collect(),
    };
    json!({"title": title, "description": description, "assignee": "me", "waits_for": waits_for})
}

/// The review's next turn, on a run offered `review_diff`.
pub(super) fn plan_review(key: &str, history: &History, offered: &Offered) -> Option<PlannedTurn> {
    offered.get(REVIEW_DIFF)?;
    let any = |_: &Value| true;
    let Some(diff) = history.successes(REVIEW_DIFF, any).next() else {
        if history.wanted(REVIEW_DIFF, any) {
            return Some(PlannedTurn::ToolCalls(vec![call(REVIEW_DIFF, json!({}))]));
        }
        let why = history.last_failure(REVIEW_DIFF).unwrap_or("no reason given");
        return Some(PlannedTurn::Text(format!(
            "The offline planner (a rule-based stand-in, not an LLM) could not read the diff of {key}: {why}"
        )));
    };
    let findings = todo_findings(&diff_text(diff));
    let verdict = if findings.is_empty() { "approve" } else { "changes_requested" };
    if offered.get(REVIEW_VERDICT).is_some() && history.wanted(REVIEW_VERDICT, any) {
        return Some(PlannedTurn::ToolCalls(vec![call(
            REVIEW_VERDICT,
            json!({"verdict": verdict, "findings": findings}),
        )]));
    }
    let posted = history.successes(REVIEW_VERDICT, any).next().is_some();
    Some(PlannedTurn::Text(match (posted, findings.len()) {
        (true, 0) => format!("Reviewed {key}: approved. (offline planner)"),
        (true, n) => format!("Reviewed {key}: {n} finding(s), changes requested. (offline planner)"),
        (false, _) => format!(
            "The offline planner (a rule-based stand-in, not an LLM) could not post its verdict on {key}: {}",
            history.last_failure(REVIEW_VERDICT).unwrap_or("review_verdict is not offered")
        ),
    }))
}

/// The text of a `review_diff` result.
fn diff_text(result: &Value) -> String {
    match result {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Each line a diff adds with a `TODO` in it, as a finding on the file and its line in the
/// branch's version.
fn todo_findings(diff: &str) -> Vec<Value> {
    let mut findings = Vec::new();
    let mut file: Option<String> = None;
    let mut line: u64 = 0;
    for text in diff.lines() {
        if let Some(path) = text.strip_prefix("+++ ") {
            file = path.strip_prefix("b/").map(str::to_string);
            continue;
        }
        if let Some(found) = HUNK.captures(text) {
            line = found[1].parse().unwrap_or(0);
            continue;
        }
        if text.starts_with("--- ") || line == 0 {
            continue;
        }
        match text.chars().next() {
            Some('+') => {
                if let (Some(file), Some(at)) = (&file, text.find("TODO")) {
                    let todo = text[at..].trim_end();
                    let done = todo.trim_start_matches("TODO").trim_start_matches([':', ' ']);
                    if !todo.contains('"') && findings.len() < MAX_FINDINGS {
                        let text = format!("A to-do is left in the change: replace \"{todo}\" with \"{done}\".");
                        findings.push(json!({"file": file, "line": line, "text": text}));
                    }
                }
                line += 1;
            }
            Some(' ') => line += 1,
            _ => {}
        }
    }
    findings
}

/// What the coding agent is asked when the task's latest verdict sent the work back: the first
/// finding's change on its file.
pub(super) fn rework(key: &str, prompt: &Read) -> Option<String> {
    let verdict = COMMENT_LINE
        .captures_iter(&prompt.structure)
        .filter_map(|found| prompt.data.get(found[1].parse::<usize>().ok()?))
        .filter(|text| text.starts_with(CHANGES_WORDS) || text.starts_with(APPROVED_WORDS))
        .last()?;
    let fix = FINDING_FIX.captures(verdict)?;
    Some(format!("Task {key}: do what the review asked. In {} replace \"{}\" with \"{}\".", &fix[1], &fix[3], &fix[4]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bullet_is_a_sub_task_with_its_title_and_what_it_waits_for() {
        let made = subtask("Docs: in docs/export.md replace \"none\" with \"CSV\" (after 1, 2)");
        assert_eq!(made["title"], "Docs");
        assert_eq!(made["description"], "Docs: in docs/export.md replace \"none\" with \"CSV\"");
        assert_eq!(made["waits_for"], json!([1, 2]));
        assert_eq!(made["assignee"], "me");
        assert_eq!(subtask("Just do it")["waits_for"], json!([]));
    }

    #[test]
    fn an_added_todo_is_a_finding_on_its_file_and_line_in_the_branch() {
        let diff = "Task TE-3: branch `picogent/TE-3` against `main`.\nThe diff:\n\
            diff --git a/web/reports.js b/web/reports.js\n--- a/web/reports.js\n+++ b/web/reports.js\n\
            @@ -1,3 +1,3 @@\n const a = 1;\n-let buttons = [];\n+let buttons = ['csv']; // TODO: label the button\n const b = 2;\n";
        let findings = todo_findings(diff);
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!(findings[0]["file"], "web/reports.js");
        assert_eq!(findings[0]["line"], 2);
        assert!(
            findings[0]["text"]
                .as_str()
                .unwrap()
                .contains(r#"replace "TODO: label the button" with "label the button""#)
        );
        assert!(todo_findings("+++ b/a.py\n@@ -1 +1 @@\n-x\n+y\n").is_empty());
        // A TODO the branch removes, or one in a context line, is not the change's.
        assert!(todo_findings("+++ b/a.py\n@@ -1,2 +1,1 @@\n-x # TODO\n y # TODO\n").is_empty());
    }

    #[test]
    fn the_latest_verdict_decides_whether_there_is_rework() {
        let changes = "Changes requested (round 1 of 2) on branch `picogent/TE-3`, @picogent:\n\
            - web/reports.js:2 — A to-do is left in the change: replace \"TODO: label it\" with \"label it\".";
        let prompt = |comments: &[&str]| {
            let mut text = "Task: TE-3\nComments so far:".to_string();
            for comment in comments {
                text.push_str(&format!("\n- @reviewer: <<untrusted-ab>>\n{comment}\n<<end-untrusted-ab>>"));
            }
            Read::of(&text)
        };
        let asked = rework("TE-3", &prompt(&[changes])).expect("rework");
        assert_eq!(
            asked,
            "Task TE-3: do what the review asked. In web/reports.js replace \"TODO: label it\" with \"label it\"."
        );
        assert_eq!(rework("TE-3", &prompt(&[changes, "Approved (round 2 of 2): branch `picogent/TE-3`."])), None);
        assert_eq!(rework("TE-3", &prompt(&[])), None);
    }
}
