//! The decisions about one event that need no I/O: is the agent addressed, is it a stop command,
//! which session does it belong to. Pure functions, so they are cheap (the hot path of every
//! message the agent hears) and tested by tables.

// `pub` for the benches, which reach this module with the `test-support` feature; without it
// the module is private and its items the router's alone.
#![cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]

use picogent_config::{ChatListen, TaskListen};
use picogent_tracker::model::{MemberKind, MessageOut, TaskOut};

/// Whether `text` contains `@slug` as a whole word (not `@slugger`, not `me@slug.com`).
pub fn mentions_by_text(text: &str, slug: &str) -> bool {
    let needle = format!("@{slug}");
    let is_word = |c: char| c.is_alphanumeric() || c == '_' || c == '-';
    let mut from = 0;
    while let Some(found) = text[from..].find(&needle) {
        let start = from + found;
        let end = start + needle.len();
        let before_ok = text[..start].chars().next_back().is_none_or(|c| !is_word(c) && c != '@' && c != '.');
        let after_ok = text[end..].chars().next().is_none_or(|c| !is_word(c));
        if before_ok && after_ok {
            return true;
        }
        from = end;
    }
    false
}

/// Whether the message mentions the agent: its slug in `mentions`, or `@slug` as a whole word.
pub fn mentions_agent(message: &MessageOut, slug: &str) -> bool {
    message.mentions.iter().any(|m| m == slug) || mentions_by_text(&message.content, slug)
}

/// `@slug stop` (alone, any case, surrounding punctuation allowed): the stop command.
pub fn is_stop_command(text: &str, slug: &str) -> bool {
    let words: Vec<String> = text
        .split_whitespace()
        .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric() && c != '@' && c != '_' && c != '-').to_lowercase())
        .filter(|w| !w.is_empty())
        .collect();
    words.len() == 2 && words[0] == format!("@{}", slug.to_lowercase()) && words[1] == "stop"
}

/// Why a message is not for the agent, or that it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageFate {
    /// Answer it.
    Answer,
    /// The agent wrote it.
    OwnMessage,
    /// Another bot wrote it and is not in `allowed_bots`.
    OtherBot,
    /// `chat_listen: none`.
    ChatOff,
    /// `chat_listen: mentions` and the message neither mentions the agent nor replies to it.
    NotAddressed,
}

impl MessageFate {
    pub fn as_str(self) -> &'static str {
        match self {
            MessageFate::Answer => "answer",
            MessageFate::OwnMessage => "own_message",
            MessageFate::OtherBot => "other_bot",
            MessageFate::ChatOff => "chat_off",
            MessageFate::NotAddressed => "not_addressed",
        }
    }
}

/// What the router knows about a message besides the message itself.
#[derive(Debug, Clone, Copy)]
pub struct MessageFacts {
    /// What kind of member wrote it (`None`: unknown member, treated as a human).
    pub author_kind: Option<MemberKind>,
    /// The message is in a thread the agent started or has answered in. Threads are one level
    /// deep on the tracker, so a reply to the agent's answer is a reply in its thread.
    pub replies_to_agent: bool,
}

/// Decides whether the agent answers a message. Own messages are refused first, whatever else is
/// true: that rule is what keeps the agent from answering itself in a loop.
pub fn message_fate(
    message: &MessageOut,
    facts: MessageFacts,
    slug: &str,
    chat_listen: ChatListen,
    allowed_bots: &[String],
) -> MessageFate {
    if message.author_slug == slug {
        return MessageFate::OwnMessage;
    }
    if facts.author_kind == Some(MemberKind::Agent) && !allowed_bots.iter().any(|b| b == &message.author_slug) {
        return MessageFate::OtherBot;
    }
    match chat_listen {
        ChatListen::None => MessageFate::ChatOff,
        ChatListen::All => MessageFate::Answer,
        ChatListen::Mentions if mentions_agent(message, slug) || facts.replies_to_agent => MessageFate::Answer,
        ChatListen::Mentions => MessageFate::NotAddressed,
    }
}

/// Whether an assignment event is one the agent works.
pub fn works_assignment(task: &TaskOut, slug: &str, task_listen: TaskListen) -> bool {
    task_listen == TaskListen::Assigned && task.assignee_slug.as_deref() == Some(slug)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(author: &str, content: &str, mentions: &[&str]) -> MessageOut {
        MessageOut {
            id: "m1".into(),
            author_slug: author.into(),
            content: content.into(),
            chat_id: Some("c".into()),
            task_id: None,
            parent_id: None,
            mentions: mentions.iter().map(|m| m.to_string()).collect(),
            created_at: String::new(),
            reply_to: None,
        }
    }

    #[test]
    fn whole_word_mentions() {
        let cases = [
            ("@picogent hi", true),
            ("hi @picogent", true),
            ("hi @picogent, what's up", true),
            ("(@picogent)", true),
            ("@picogentx hi", false),
            ("@picogent_2 hi", false),
            ("mail me@picogent.dev", false),
            ("picogent hi", false),
            ("@@picogent", false),
            ("@PICOGENT", false),
            ("", false),
        ];
        for (text, expected) in cases {
            assert_eq!(mentions_by_text(text, "picogent"), expected, "{text:?}");
        }
    }

    #[test]
    fn stop_commands() {
        let cases = [
            ("@picogent stop", true),
            ("@Picogent STOP!", true),
            ("  @picogent   stop. ", true),
            ("@picogent stop doing that and do this", false),
            ("stop @picogent", false),
            ("@otherbot stop", false),
        ];
        for (text, expected) in cases {
            assert_eq!(is_stop_command(text, "picogent"), expected, "{text:?}");
        }
    }

    #[test]
    fn message_fates() {
        let human = MessageFacts { author_kind: Some(MemberKind::Human), replies_to_agent: false };
        let bot = MessageFacts { author_kind: Some(MemberKind::Agent), replies_to_agent: false };
        let reply = MessageFacts { author_kind: Some(MemberKind::Human), replies_to_agent: true };
        let allowed = vec!["friendbot".to_string()];
        let cases = [
            (message("picogent", "@picogent hi", &["picogent"]), human, ChatListen::All, MessageFate::OwnMessage),
            (message("otherbot", "@picogent hi", &["picogent"]), bot, ChatListen::Mentions, MessageFate::OtherBot),
            (message("friendbot", "@picogent hi", &[]), bot, ChatListen::Mentions, MessageFate::Answer),
            (message("alice", "@picogent hi", &[]), human, ChatListen::Mentions, MessageFate::Answer),
            (message("alice", "hi", &["picogent"]), human, ChatListen::Mentions, MessageFate::Answer),
            (message("alice", "hi all", &[]), human, ChatListen::Mentions, MessageFate::NotAddressed),
            (message("alice", "thanks", &[]), reply, ChatListen::Mentions, MessageFate::Answer),
            (message("alice", "hi all", &[]), human, ChatListen::All, MessageFate::Answer),
            (message("alice", "@picogent hi", &[]), human, ChatListen::None, MessageFate::ChatOff),
        ];
        for (message, facts, listen, expected) in cases {
            assert_eq!(message_fate(&message, facts, "picogent", listen, &allowed), expected, "{message:?} {listen:?}");
        }
    }
}
