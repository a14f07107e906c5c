//! Short, dense text of tracker answers for the model, and the cap on its size.
//!
//! One line per thing, with the fields that matter; lists are counted. The full answer travels
//! beside the text as structured content, so nothing here has to be complete.

use picogent_tracker::model::{AttachmentOut, MemberOut, MessageOut, ProjectOut, StepOut, TaskOut};

/// Characters of a message's content shown in a list; the full text is one `list_messages` away.
const MESSAGE_PREVIEW_CHARS: usize = 300;

/// `TE-15 [in_progress] Fix login (alice) high bug #auth`: defaults (medium, task) are left out.
pub fn task_line(task: &TaskOut) -> String {
    let mut line = format!(
        "{} [{}] {} ({})",
        task.key,
        task.status,
        one_line(&task.title),
        task.assignee_slug.as_deref().unwrap_or("unassigned")
    );
    if task.priority != Default::default() {
        line.push(' ');
        line.push_str(task.priority.as_str());
    }
    if task.task_type != Default::default() {
        line.push(' ');
        line.push_str(task.task_type.as_str());
    }
    for label in &task.labels {
        line.push_str(" #");
        line.push_str(label);
    }
    line
}

/// A task in full: its line, then the details a worker needs.
pub fn task_detail(task: &TaskOut) -> String {
    let mut text = task_line(task);
    text.push_str(&format!(
        "\nid {} project {} by {} updated {}",
        task.id, task.project_slug, task.created_by, task.updated_at
    ));
    if !task.watchers.is_empty() {
        text.push_str(&format!("\nwatchers: {}", task.watchers.join(", ")));
    }
    match task.description.as_deref() {
        Some(description) if !description.trim().is_empty() => {
            text.push_str("\n\n");
            text.push_str(description.trim());
        }
        _ => text.push_str("\n(no description)"),
    }
    text
}

/// `[x] 2. Write tests (id 3f2a…)`.
pub fn step_line(step: &StepOut) -> String {
    format!("[{}] {}. {} (id {})", if step.done { "x" } else { " " }, step.position, one_line(&step.title), step.id)
}

/// `msg <id> alice 2026-11-30T10:00:00Z (reply to <id>): text`.
pub fn message_line(message: &MessageOut) -> String {
    let mut line = format!("msg {} {} {}", message.id, message.author_slug, message.created_at);
    if let Some(parent) = &message.parent_id {
        line.push_str(&format!(" (reply to {parent})"));
    }
    line.push_str(": ");
    line.push_str(&truncate_chars(&one_line(&message.content), MESSAGE_PREVIEW_CHARS));
    line
}

/// `web WEB Website (chat <id>)`, with `inactive` when so.
pub fn project_line(project: &ProjectOut) -> String {
    let mut line =
        format!("{} {} {} (id {}, chat {})", project.slug, project.key, project.name, project.id, project.chat_id);
    if !project.active {
        line.push_str(" inactive");
    }
    line
}

/// `alice (human) Alice: reviewing PRs`.
pub fn member_line(member: &MemberOut) -> String {
    let mut line = format!("{} ({}) {}", member.slug, member.kind.as_str(), one_line(&member.name));
    if !member.status.is_empty() {
        line.push_str(": ");
        line.push_str(&one_line(&member.status));
    }
    line
}

/// `<id> notes.txt text/plain 120 bytes (message <id>)`.
pub fn attachment_line(file: &AttachmentOut) -> String {
    format!("{} {} {} {} bytes (message {})", file.id, file.filename, file.mime_type, file.size, file.message_id)
}

/// `N things:` then one line each, or `no things`.
pub fn counted<T>(items: &[T], noun_plural: &str, line: impl Fn(&T) -> String) -> String {
    if items.is_empty() {
        return format!("no {noun_plural}");
    }
    let mut text = format!("{} {noun_plural}:", items.len());
    for item in items {
        text.push('\n');
        text.push_str(&line(item));
    }
    text
}

/// Cuts `text` to at most `max_bytes` bytes on a char boundary, ending with a line that says how
/// much was left out and how to get it.
pub fn cap(text: &str, max_bytes: usize, paging_hint: &str) -> String {
    if text.len() <= max_bytes {
        return text.to_string();
    }
    // Room for the notice; its numbers are at most 20 digits each.
    let notice_room = 80 + paging_hint.len();
    let mut end = max_bytes.saturating_sub(notice_room);
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    // Prefer to end at a whole line when one ends reasonably close.
    if let Some(newline) = text[..end].rfind('\n')
        && newline >= end / 2
    {
        end = newline;
    }
    let left_out = text.len() - end;
    format!("{}\n[cut: {left_out} of {} bytes left out; {paging_hint}]", &text[..end], text.len())
}

/// The first `max_chars` characters, with `…` when something was cut.
pub fn truncate_chars(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

/// Newlines folded to spaces, so one thing stays one line.
fn one_line(text: &str) -> String {
    if text.contains(['\n', '\r']) { text.split_whitespace().collect::<Vec<_>>().join(" ") } else { text.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use picogent_tracker::model::{Priority, TaskStatus, TaskType};

    fn task() -> TaskOut {
        TaskOut {
            id: "u1".into(),
            key: "TE-15".into(),
            project_slug: "te".into(),
            title: "Fix\nlogin".into(),
            description: None,
            task_type: TaskType::Task,
            status: TaskStatus::InProgress,
            priority: Priority::Medium,
            assignee_slug: Some("alice".into()),
            labels: vec![],
            watchers: vec![],
            created_by: "bob".into(),
            created_at: "t0".into(),
            updated_at: "t1".into(),
        }
    }

    #[test]
    fn task_line_has_the_fields_that_matter() {
        assert_eq!(task_line(&task()), "TE-15 [in_progress] Fix login (alice)");
        let mut urgent = task();
        urgent.priority = Priority::Urgent;
        urgent.task_type = TaskType::Bug;
        urgent.assignee_slug = None;
        urgent.labels = vec!["auth".into()];
        assert_eq!(task_line(&urgent), "TE-15 [in_progress] Fix login (unassigned) urgent bug #auth");
    }

    #[test]
    fn counted_lists() {
        assert_eq!(counted(&[task()], "tasks", task_line), "1 tasks:\nTE-15 [in_progress] Fix login (alice)");
        assert_eq!(counted::<TaskOut>(&[], "tasks", task_line), "no tasks");
    }

    #[test]
    fn cap_cuts_on_a_char_boundary_and_says_so() {
        let text = "é".repeat(5_000); // 10,000 bytes, 2 bytes a char
        for max in [256, 257, 1000, 1001, 8192] {
            let capped = cap(&text, max, "page with cursor");
            assert!(capped.len() <= max, "{} > {max}", capped.len());
            assert!(capped.contains("bytes left out; page with cursor]"), "{capped}");
        }
        assert_eq!(cap("short", 100, "x"), "short");
    }

    #[test]
    fn cap_prefers_whole_lines() {
        let text: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let capped = cap(&text, 300, "hint");
        let body = capped.rsplit_once("\n[cut:").unwrap().0;
        assert!(body.ends_with(|c: char| c.is_ascii_digit()), "{body}");
    }

    #[test]
    fn truncates_chars() {
        assert_eq!(truncate_chars("héllo", 2), "hé…");
        assert_eq!(truncate_chars("hé", 2), "hé");
    }
}
