//! Numbers and text as people read them: the spend line under an answer, `12,345`, a text on
//! one line.

use picogent_agent::RunRecord;
use picogent_llm::config::Price;

/// `3 turns · 4 tool calls · 2,345 tokens (1,800 cached, 400 written to the cache) · cost 0.0012`;
/// the part in brackets only when the server read some of the prompt from its cache or wrote
/// some to it, each half only when it is not zero.
pub fn spend_line(record: &RunRecord, price: Option<&Price>) -> String {
    let plural = |n: u64, one: &str, many: &str| format!("{} {}", thousands(n), if n == 1 { one } else { many });
    let mut line = format!(
        "{} · {} · {}",
        plural(u64::from(record.turns), "turn", "turns"),
        plural(u64::from(record.tool_calls), "tool call", "tool calls"),
        plural(record.total_tokens(), "token", "tokens")
    );
    let cache: Vec<String> = [(record.cached_tokens, "cached"), (record.cache_write_tokens, "written to the cache")]
        .into_iter()
        .filter(|(tokens, _)| *tokens > 0)
        .map(|(tokens, what)| format!("{} {what}", thousands(tokens)))
        .collect();
    if !cache.is_empty() {
        line.push_str(&format!(" ({})", cache.join(", ")));
    }
    if let Some(price) = price {
        line.push_str(&format!(" · cost {:.4}", price.cost(&record.usage())));
    }
    line
}

/// `12345` as `12,345`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// `text` on one line, whitespace folded, cut at `max_chars` with an ellipsis.
pub fn one_line(text: &str, max_chars: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > max_chars {
        format!("{}…", flat.chars().take(max_chars).collect::<String>())
    } else {
        flat
    }
}
