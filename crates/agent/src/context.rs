//! Keeping a session within the model's context window: a task or thread that lives for weeks
//! must not make every later run fail. The stored session is shortened before a run starts, and
//! again if a request of the run would not fit: old tool results are emptied first, then the
//! oldest messages are dropped (a tool-calling turn with its results as one piece, so the
//! conversation stays valid), keeping the session's first message, the task's or thread's
//! request, so the model knows where it is.

use picogent_llm::{Message, message_tokens};

use crate::DROPPED_RESULT_NOTE;

/// Shortens `history` (a stored session, without the system prompt) to at most `budget` tokens.
/// Returns a note of what was done, or `None` if it already fitted.
pub(super) fn fit_history(history: &mut Vec<Message>, budget: u64) -> Option<String> {
    let mut total: u64 = history.iter().map(message_tokens).sum();
    if total <= budget {
        return None;
    }
    let mut emptied = 0;
    for message in history.iter_mut() {
        if total <= budget {
            break;
        }
        if let Message::Tool { content, .. } = message
            && content != DROPPED_RESULT_NOTE
        {
            let before = message_tokens(message);
            if let Message::Tool { content, .. } = message {
                *content = DROPPED_RESULT_NOTE.to_string();
            }
            total = total - before + message_tokens(message);
            emptied += 1;
        }
    }
    let start = usize::from(matches!(history.first(), Some(Message::User { .. })));
    let mut dropped = 0;
    while total > budget && history.len() > start {
        let end = piece_end(history, start);
        total -= history[start..end].iter().map(message_tokens).sum::<u64>();
        history.drain(start..end);
        dropped += end - start;
    }
    if total > budget
        && let Some(Message::User { content }) = history.first_mut()
    {
        // Only the first message is left, and it alone is too long: keep its start.
        let keep_chars = usize::try_from(budget.saturating_mul(2)).unwrap_or(usize::MAX);
        *content = format!("{}… [cut to fit the context window]", content.chars().take(keep_chars).collect::<String>());
    }
    Some(format!(
        "shortened the stored session to fit the context window: {emptied} old tool results emptied, {dropped} \
         oldest messages dropped"
    ))
}

/// Drops the oldest piece of the stored session inside a run's `messages` (the system prompt
/// first, the run's prompt at `prompt_index`), keeping the session's first message. Returns a
/// note, or `None` if nothing is left to drop.
pub(super) fn drop_oldest(messages: &mut Vec<Message>, prompt_index: &mut usize) -> Option<String> {
    // The session's first message (its request) stays, when there is one before the prompt.
    let first_kept = 1 + usize::from(matches!(messages.get(1), Some(Message::User { .. })) && *prompt_index > 1);
    if first_kept >= *prompt_index {
        return None;
    }
    let end = piece_end(messages, first_kept).min(*prompt_index);
    messages.drain(first_kept..end);
    *prompt_index -= end - first_kept;
    Some(format!("dropped the {} oldest messages of the stored session to fit the context window", end - first_kept))
}

/// Where the piece starting at `start` ends: an assistant turn with the tool results that answer
/// it, or one message.
fn piece_end(messages: &[Message], start: usize) -> usize {
    let mut end = start + 1;
    if matches!(&messages[start], Message::Assistant { tool_calls, .. } if !tool_calls.is_empty()) {
        while end < messages.len() && matches!(messages[end], Message::Tool { .. }) {
            end += 1;
        }
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;
    use picogent_llm::ToolCall;

    fn month_of_history(days: usize) -> Vec<Message> {
        let mut history = vec![Message::user("Task: TE-1 — keep the release notes up to date")];
        for day in 0..days {
            let id = format!("c{day}");
            history.push(Message::user(format!("day {day}: @alice asked for an update")));
            history.push(Message::Assistant {
                content: None,
                tool_calls: vec![ToolCall { id: id.clone(), name: "list_steps".into(), arguments: "{}".into() }],
                refusal: None,
            });
            history.push(Message::Tool {
                tool_call_id: id,
                name: "list_steps".into(),
                content: "a long list of steps ".repeat(150),
                is_error: false,
            });
            history.push(Message::Assistant {
                content: Some(format!("Done for day {day}.")),
                tool_calls: vec![],
                refusal: None,
            });
        }
        history
    }

    fn valid(history: &[Message]) -> bool {
        // Every tool result follows the assistant turn that asked for it.
        let mut open: Vec<String> = Vec::new();
        for message in history {
            match message {
                Message::Assistant { tool_calls, .. } => open = tool_calls.iter().map(|c| c.id.clone()).collect(),
                Message::Tool { tool_call_id, .. } => {
                    if !open.contains(tool_call_id) {
                        return false;
                    }
                }
                _ => open.clear(),
            }
        }
        true
    }

    #[test]
    fn a_month_of_history_is_cut_to_the_budget_keeping_the_request() {
        let mut history = month_of_history(30);
        let before: u64 = history.iter().map(message_tokens).sum();
        let note = fit_history(&mut history, 2_000).unwrap();
        let after: u64 = history.iter().map(message_tokens).sum();
        assert!(before > 20_000 && after <= 2_000, "{before} -> {after}: {note}");
        assert_eq!(history[0].text(), "Task: TE-1 — keep the release notes up to date");
        assert!(history.last().unwrap().text().contains("day 29"), "the newest turns stay");
        assert!(valid(&history));
        assert!(fit_history(&mut history, 2_000).is_none(), "a second pass has nothing to do");
    }

    #[test]
    fn tool_results_go_before_messages() {
        let mut history = month_of_history(3);
        let messages = history.len();
        let total: u64 = history.iter().map(message_tokens).sum();
        fit_history(&mut history, total - 100).unwrap();
        assert_eq!(history.len(), messages, "emptying one result was enough");
        assert_eq!(history[3].text(), DROPPED_RESULT_NOTE);
    }

    #[test]
    fn a_run_drops_the_oldest_piece_and_keeps_its_prompt() {
        let mut messages = vec![Message::system("s")];
        messages.extend(month_of_history(2));
        let mut prompt_index = messages.len();
        messages.push(Message::user("the new question"));
        while drop_oldest(&mut messages, &mut prompt_index).is_some() {
            assert!(valid(&messages[1..]));
            assert_eq!(messages[prompt_index].text(), "the new question");
        }
        assert_eq!(messages.len(), 3, "the system prompt, the session's request and the new prompt");
        assert_eq!(prompt_index, 2);
    }
}
