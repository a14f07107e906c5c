//! The conversation an event belongs to: one run at a time per session, one stored conversation
//! per session. Shared by the router (which keeps one run per session), the runtime (which loads
//! and saves the conversation), the loop guard (which counts posts per session) and the tools
//! (the permission policy asks a human in the run's session).

use crate::model::MessageOut;

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SessionKey {
    /// A task: its runs, its comments.
    Task(String),
    /// A chat thread, named by its first message.
    Thread(String),
    /// A prompt given over MCP or the command line: a conversation of its own, with no place on
    /// the tracker to post in.
    Prompt(String),
    /// A scheduled job's runs (`schedules` in agent.json): one at a time per job, and for a
    /// `prompt` job the conversation its firings continue. The id is the job's session name.
    Schedule(String),
}

impl SessionKey {
    /// The stable text form stored in the state database.
    pub fn as_string(&self) -> String {
        match self {
            SessionKey::Task(id) => format!("task:{id}"),
            SessionKey::Thread(id) => format!("thread:{id}"),
            SessionKey::Prompt(id) => format!("prompt:{id}"),
            SessionKey::Schedule(id) => format!("schedule:{id}"),
        }
    }

    pub fn parse(text: &str) -> Option<SessionKey> {
        text.parse().ok()
    }

    fn parse_known(text: &str) -> Option<SessionKey> {
        let (kind, id) = text.split_once(':')?;
        let id = id.to_string();
        match kind {
            "task" => Some(SessionKey::Task(id)),
            "thread" => Some(SessionKey::Thread(id)),
            "prompt" => Some(SessionKey::Prompt(id)),
            "schedule" => Some(SessionKey::Schedule(id)),
            _ => None,
        }
    }

    /// The session a message belongs to: its task when it is a task comment, else its thread.
    /// It is also the key the agent's posts there are counted under (the loop guard).
    pub fn of_message(message: &MessageOut) -> SessionKey {
        match &message.task_id {
            Some(task_id) => SessionKey::Task(task_id.clone()),
            None => SessionKey::Thread(message.thread_root().to_string()),
        }
    }

    /// A fresh session for a prompt given over MCP or the command line.
    pub fn new_prompt() -> SessionKey {
        SessionKey::Prompt(uuid::Uuid::new_v4().to_string())
    }
}

/// A stored session key of no kind this version knows (not `task:`, `thread:`, `prompt:` or
/// `schedule:`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown session key {0:?}")]
pub struct UnknownSessionKey(pub String);

impl std::str::FromStr for SessionKey {
    type Err = UnknownSessionKey;

    fn from_str(text: &str) -> Result<SessionKey, UnknownSessionKey> {
        SessionKey::parse_known(text).ok_or_else(|| UnknownSessionKey(text.to_string()))
    }
}

/// In its stored text form (`task:ID`), the way MCP's run resources and the pages show it.
impl serde::Serialize for SessionKey {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl std::fmt::Display for SessionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.as_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_keys_round_trip() {
        for key in [
            SessionKey::Task("t1".into()),
            SessionKey::Thread("m1".into()),
            SessionKey::Prompt("p".into()),
            SessionKey::Schedule("standup".into()),
        ] {
            assert_eq!(SessionKey::parse(&key.as_string()), Some(key));
        }
        assert_eq!(SessionKey::parse("other:x"), None);
        assert_eq!(SessionKey::parse("task"), None);
        let mut comment = MessageOut {
            id: "m1".into(),
            author_slug: "alice".into(),
            content: "x".into(),
            chat_id: Some("c".into()),
            task_id: Some("t9".into()),
            parent_id: None,
            mentions: vec![],
            created_at: String::new(),
            reply_to: None,
        };
        assert_eq!(SessionKey::of_message(&comment), SessionKey::Task("t9".into()));
        comment.task_id = None;
        comment.parent_id = Some("root".into());
        assert_eq!(SessionKey::of_message(&comment), SessionKey::Thread("root".into()));
    }
}
