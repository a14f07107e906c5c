//! What is stored with a run beside its counts (the `record` column of its row): its start, so
//! a resumed run sends the model the same request, and at its end the loop's record and the
//! transcript; and the timeline a person reads of it. The runtime's runs write it; the pages,
//! `picogent runs` and MCP's `run://` resources read it, each through [`StoredRun::of`].

use serde::{Deserialize, Serialize};

use picogent_llm::Message;

/// `text` on one line, whitespace folded, cut at `max_chars` with an ellipsis: the notices' way
/// of quoting, which the timeline and the run inspector share.
pub use picogent_notices::one_line;

/// What is stored with a run from its start, so a resumed run sends the model the same request
/// and reuses the same idempotency keys for the same calls.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunStart {
    pub prompt: String,
    /// How many messages of the session's stored conversation came before the prompt.
    pub history_len: usize,
    /// The system prompt the run was sent, for the run inspector (not part of a resume's
    /// request: a resumed run renders its system prompt afresh).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// The run's fence, so a resumed run fences its system prompt, tool descriptions and results
    /// with the same token as before (runs stored before fences have none: they get a new one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<picogent_prompts::Fence>,
    /// A chat run's message, its first words: what the run inspector names the run by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_words: Option<String>,
    /// A sub-task's run: the key of the task its task is part of (its `parent:KEY` label), so
    /// the run's page links to the tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// A task run asked to break its task down (a label of `delegation.labels`): its own key,
    /// so the run's page links to the tree it makes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaks_down: Option<String>,
}

/// What is stored with a run when it ends: its start, the loop's record and the transcript.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredRun {
    /// Its start, kept (its fields beside the others, as before): this replaces the start.
    #[serde(flatten)]
    pub start: RunStart,
    #[serde(default)]
    pub record: Option<picogent_agent::RunRecord>,
    #[serde(default)]
    pub conversation: Vec<Message>,
    /// What its coding agent printed and how its work ended (`workspaces`), if it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coding: Option<picogent_workspace::CodingRecord>,
}

impl StoredRun {
    /// What is stored with a run that had no model loop (direct mode's coding agent, a stale
    /// firing's nudges): what it was asked, and its coding work if any.
    pub fn without_loop(prompt: String, coding: Option<picogent_workspace::CodingRecord>) -> StoredRun {
        StoredRun { start: RunStart { prompt, ..RunStart::default() }, record: None, conversation: Vec::new(), coding }
    }
}

/// The first words of `content`, a message to the agent `slug`, on one line and without the
/// mention of the agent it opens with: `@picogent what is on the board?` → `what is on the
/// board?`. Hidden characters are removed first, as for a prompt.
pub fn message_words(content: &str, slug: &str) -> String {
    let visible = picogent_prompts::clean_text(content, 1_000);
    let text = visible.trim_start();
    let text = text.strip_prefix(&format!("@{slug}")).filter(|rest| !rest.starts_with(is_slug_char)).unwrap_or(text);
    let text = text.trim_start_matches([',', ':']);
    one_line(text, MESSAGE_WORDS)
}

fn is_slug_char(c: char) -> bool {
    c.is_alphanumeric() || c == '-' || c == '_'
}

/// How many characters of a chat run's message are kept to name it.
const MESSAGE_WORDS: usize = 120;

impl StoredRun {
    /// The stored run of a run row, if it holds one (a run that ended before its start was
    /// recorded holds none).
    pub fn of(run: &picogent_state::RunRow) -> Option<StoredRun> {
        run.record.clone().and_then(|record| serde_json::from_value(record).ok())
    }
}

/// What the run's coding agent printed and did (`workspaces`), if it had one: from `live` while
/// the run goes on, as stored with the run once it ended. `true` with it when it is live. The
/// inspector's run page and MCP's `run://{id}/logs` and `/result` read it the same way.
pub fn coding_of(
    live: Option<&picogent_workspace::CodingRuns>,
    run: &picogent_state::RunRow,
) -> Option<(picogent_workspace::CodingRecord, bool)> {
    if let Some(record) = live.and_then(|runs| runs.record(&run.id)) {
        return Some((record, true));
    }
    StoredRun::of(run).and_then(|stored| stored.coding).map(|record| (record, false))
}

/// One line per step of a stored run: tool calls with a one-line result, then the final answer.
pub fn timeline_lines(run: &picogent_state::RunRow) -> Vec<String> {
    let Some(stored) = StoredRun::of(run) else {
        return vec![format!("({})", run.status.as_str())];
    };
    let mut lines = Vec::new();
    let mut names = std::collections::HashMap::new();
    for message in stored.conversation.iter().skip(stored.start.history_len + 1) {
        match message {
            Message::Assistant { tool_calls, .. } => {
                for call in tool_calls {
                    names.insert(call.id.clone(), format!("{}({})", call.name, one_line(&call.arguments, 90)));
                }
            }
            Message::Tool { tool_call_id, content, is_error, .. } => {
                let call = names.remove(tool_call_id).unwrap_or_default();
                let mark = if *is_error { "✗" } else { "→" };
                let content = picogent_prompts::without_fences(content);
                lines.push(format!("tool  {call} {mark} {}", one_line(&content, 100)));
            }
            Message::User { content } => {
                lines.push(format!("input {}", one_line(&picogent_prompts::without_fences(content), 100)))
            }
            Message::System { .. } => {}
        }
    }
    if let Some(record) = &stored.record {
        lines.push(format!(
            "end   {} after {} turns, {} tool calls, {} tokens: {}",
            record.outcome.as_str(),
            record.turns,
            record.tool_calls,
            record.total_tokens(),
            one_line(&record.final_message, 100)
        ));
    }
    lines
}
