//! A firing as the run that carries it out is queued: what it read from the board when it fired
//! and what it is to do. Everything is decided when it fires, so a run resumed after a restart
//! (or by another replica) does the same work with the same idempotency keys, and posts once.
//!
//! Text that people wrote (task titles) travels as the board gave it; whoever shows it to a
//! model fences it, and [`Digest::lines`] and the nudges quote it through [`quoted_title`], so no
//! title can mention anyone or break a line of picogent's own.

use serde::{Deserialize, Serialize};

/// One firing of a job, queued as a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Firing {
    pub job: String,
    /// The time it was due (or, for a firing a person asked for, when they asked), unix ms.
    pub fire_at_ms: i64,
    /// A person asked for it (`picogent schedules run`, the inspector) rather than its time.
    #[serde(default)]
    pub manual: bool,
    pub work: FiringWork,
    /// The firing's own budget, within the agent's limits.
    #[serde(default)]
    pub max_turns: Option<u32>,
    #[serde(default)]
    pub max_tokens: Option<u64>,
}

impl Firing {
    /// Where its answer or its notice goes: the project's chat, when it has one.
    pub fn chat(&self) -> Option<&ProjectPlace> {
        match &self.work {
            FiringWork::Standup { project, .. } => Some(project),
            FiringWork::Stale { project, .. } | FiringWork::Prompt { project, .. } => project.as_ref(),
        }
    }
}

/// What a firing is to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FiringWork {
    /// A digest for the project's chat: the model's few sentences over picogent's list.
    Standup { project: ProjectPlace, digest: Digest },
    /// One nudge on each of these tasks.
    Stale { days: u32, tasks: Vec<StaleTask>, project: Option<ProjectPlace> },
    /// A prompt file's text, run in the named session (its conversation goes on across firings).
    Prompt { text: String, session: String, project: Option<ProjectPlace> },
}

impl FiringWork {
    /// What the firing's record keeps of it: the tasks a stale check nudges (later firings leave
    /// them alone, [`NudgeRecord`]), a digest's counts; nothing for a prompt.
    pub fn detail(&self) -> String {
        match self {
            FiringWork::Stale { tasks, .. } => {
                let record = NudgeRecord { nudged: tasks.iter().map(|task| task.id.clone()).collect() };
                serde_json::to_string(&record).unwrap_or_default()
            }
            FiringWork::Standup { digest, .. } => digest.counts(),
            FiringWork::Prompt { .. } => String::new(),
        }
    }
}

/// A project's chat, where a firing posts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectPlace {
    pub slug: String,
    pub name: String,
    pub chat_id: String,
}

/// What a standup digest reports, read from the project's tasks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Digest {
    /// What "moved" is measured from: how far the last digest read the board (the newest change
    /// it saw, on the tracker's clock), or for the first, one day before it fired.
    pub since_ms: i64,
    /// The same, as people in the job's zone read it (`Mon 7 Dec 09:00 CET`).
    #[serde(default)]
    pub since_text: String,
    /// Tasks changed since then, with their status now.
    pub moved: Vec<TaskLine>,
    /// Open tasks with a blocked label.
    pub blocked: Vec<TaskLine>,
    /// Open tasks due within `due_within_days` days (a `due:YYYY-MM-DD` label), or overdue.
    pub due: Vec<DueLine>,
    /// The project had more tasks than one digest reads; the lists are of those read.
    #[serde(default)]
    pub truncated: bool,
    /// The newest change among the tasks read (ms, the tracker's clock): where the next digest
    /// starts once this one is posted or found idle. `None` when no task's time parsed.
    #[serde(default)]
    pub seen_ms: Option<i64>,
}

impl Digest {
    /// Nothing to say: no task moved since the last digest.
    pub fn is_idle(&self) -> bool {
        self.moved.is_empty()
    }

    /// One line of counts, for the record and the offline model: `moved 3, blocked 1, due 0`.
    pub fn counts(&self) -> String {
        format!("moved {}, blocked {}, due {}", self.moved.len(), self.blocked.len(), self.due.len())
    }

    /// picogent's own list under the model's words: every task linked, nobody mentioned.
    pub fn lines(&self) -> String {
        let mut text = format!("Moved since {}:", self.since_text);
        for task in &self.moved {
            text.push_str(&format!("\n- {}", task.line()));
        }
        if !self.blocked.is_empty() {
            text.push_str("\n\nBlocked:");
            for task in &self.blocked {
                text.push_str(&format!("\n- {}", task.line()));
            }
        }
        if !self.due.is_empty() {
            text.push_str("\n\nDue:");
            for due in &self.due {
                let when = if due.overdue { format!("overdue since {}", due.due) } else { format!("due {}", due.due) };
                text.push_str(&format!("\n- {} — {when}", due.task.line()));
            }
        }
        if self.truncated {
            text.push_str("\n\n(The project has more tasks than one digest reads; these are the newest.)");
        }
        text
    }
}

/// A task as a digest lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskLine {
    pub id: String,
    pub key: String,
    pub title: String,
    /// Its status now, as the tracker words it (`in_review`).
    pub status: String,
    pub assignee: Option<String>,
    pub link: String,
}

impl TaskLine {
    /// `TE-3 Fix the login (in review, bob) <link>`: the assignee named without `@`, so a digest
    /// pings nobody.
    pub fn line(&self) -> String {
        let status = self.status.replace('_', " ");
        let who = self.assignee.as_deref().map(|slug| format!(", {slug}")).unwrap_or_default();
        format!("{} {} ({status}{who}) {}", self.key, quoted_title(&self.title), self.link)
    }
}

/// A task that is due.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DueLine {
    pub task: TaskLine,
    /// Its due date, `YYYY-MM-DD`.
    pub due: String,
    pub overdue: bool,
}

/// A task to nudge: assigned to a person, untouched for `idle_days`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StaleTask {
    pub id: String,
    pub key: String,
    pub title: String,
    pub assignee: String,
    pub idle_days: u32,
    pub link: String,
}

/// What the firing's record keeps of the tasks it nudges, so later firings within `days` leave
/// them alone: `{"nudged": [ids]}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NudgeRecord {
    pub nudged: Vec<String>,
}

/// Longest title quoted in a line of picogent's own, in characters.
const MAX_TITLE_CHARS: usize = 120;

/// A title as one line of picogent's own text quotes it: on one line, shortened, and with every
/// `@` that would start a mention taken out (a title cannot make a digest ping someone). A
/// mention is an `@` at the start of a word followed by a slug's character, as trackers read
/// them; an address's `@` stays.
pub fn quoted_title(title: &str) -> String {
    let one_line: String = title.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut quoted = String::with_capacity(one_line.len());
    let mut previous: Option<char> = None;
    let mut chars = one_line.chars().peekable();
    while let Some(c) = chars.next() {
        let starts_word = previous.is_none_or(|p| !(p.is_alphanumeric() || p == '_' || p == '@'));
        let starts_slug = chars.peek().is_some_and(|next| next.is_ascii_alphanumeric() || *next == '_');
        previous = Some(c);
        if c == '@' && starts_word && starts_slug {
            continue;
        }
        quoted.push(c);
    }
    if quoted.chars().count() > MAX_TITLE_CHARS {
        quoted = quoted.chars().take(MAX_TITLE_CHARS - 1).collect::<String>() + "…";
    }
    quoted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(key: &str, title: &str, status: &str, assignee: Option<&str>) -> TaskLine {
        TaskLine {
            id: format!("id-{key}"),
            key: key.into(),
            title: title.into(),
            status: status.into(),
            assignee: assignee.map(str::to_string),
            link: format!("http://board/tasks/id-{key}"),
        }
    }

    #[test]
    fn a_digest_lists_every_task_with_its_link_and_mentions_nobody() {
        let digest = Digest {
            since_ms: 0,
            since_text: "Mon 09:00".into(),
            moved: vec![line("TE-1", "Fix the\nlogin for @alice", "in_review", Some("bob"))],
            blocked: vec![line("TE-2", "Wait for the vendor", "in_progress", None)],
            due: vec![DueLine {
                task: line("TE-3", "Ship", "todo", Some("carol")),
                due: "2026-12-01".into(),
                overdue: true,
            }],
            truncated: false,
            seen_ms: None,
        };
        let text = digest.lines();
        assert!(text.starts_with("Moved since Mon 09:00:\n"), "{text}");
        assert!(text.contains("- TE-1 Fix the login for alice (in review, bob) http://board/tasks/id-TE-1"), "{text}");
        assert!(
            text.contains("Blocked:\n- TE-2 Wait for the vendor (in progress) http://board/tasks/id-TE-2"),
            "{text}"
        );
        assert!(
            text.contains("TE-3 Ship (todo, carol) http://board/tasks/id-TE-3 — overdue since 2026-12-01"),
            "{text}"
        );
        assert!(!text.contains('@'), "{text}");
        assert_eq!(digest.counts(), "moved 1, blocked 1, due 1");
        assert!(!digest.is_idle());
    }

    #[test]
    fn a_title_cannot_mention_anyone_or_run_long() {
        assert_eq!(quoted_title("mail me@example.com or @bob_2 now"), "mail me@example.com or bob_2 now");
        assert_eq!(quoted_title("(@carol) @@dave"), "(carol) @@dave");
        assert_eq!(quoted_title("a @ b"), "a @ b");
        let long = "x".repeat(500);
        assert_eq!(quoted_title(&long).chars().count(), MAX_TITLE_CHARS);
    }

    #[test]
    fn a_firing_names_its_chat_and_travels_as_json() {
        let project = ProjectPlace { slug: "team".into(), name: "Team".into(), chat_id: "c1".into() };
        let firing = Firing {
            job: "standup".into(),
            fire_at_ms: 1_700_000_000_000,
            manual: false,
            work: FiringWork::Stale { days: 3, tasks: vec![], project: Some(project.clone()) },
            max_turns: None,
            max_tokens: None,
        };
        assert_eq!(firing.chat(), Some(&project));
        let json = serde_json::to_string(&firing).unwrap();
        assert_eq!(serde_json::from_str::<Firing>(&json).unwrap(), firing);
    }
}
