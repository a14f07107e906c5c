//! Cleaning untrusted text before it enters a prompt: hidden characters, HTML comments and
//! chat-template control tokens go, fence markers are neutralised, and length is capped.

#[cfg(doc)]
use crate::Fence;
use crate::MAX_NAME_CHARS;

/// Makes untrusted text safe to put in a prompt: removes HTML comments (an unterminated one runs
/// to the end), zero-width, bidirectional, tag and other invisible characters and controls
/// (newlines and tabs stay), and chat-template control tokens ([`CONTROL_TOKENS`] and any
/// `<|…|>`); neutralises fence markers (`<<untrusted`, `<<end-untrusted`, any case, become
/// `‹‹untrusted`), so the text cannot close or open a [`Fence`]; and caps the length at
/// `max_chars` with a note of what was cut. The one cleaning function of every path.
pub fn clean_text(text: &str, max_chars: usize) -> String {
    let visible = neutralise_markers(&remove_hidden(text));
    let total = visible.chars().count();
    if total <= max_chars {
        return visible;
    }
    let kept: String = visible.chars().take(max_chars).collect();
    format!("{kept}… [cut: {} more characters]", total - max_chars)
}

/// Chat-template control tokens written as text, matched without regard to ASCII case: Llama 2
/// and Mistral (`[INST]`, `<<SYS>>`, `<s>`), Gemma (`<start_of_turn>`), Qwen and Hermes
/// (`<tool_call>`, `<tool_response>`), reasoning blocks. The `<|…|>` family (ChatML, Llama 3,
/// Phi, Granite, GPT-OSS; DeepSeek with full-width bars) is matched by its shape.
pub const CONTROL_TOKENS: [&str; 27] = [
    "<s>",
    "</s>",
    "<bos>",
    "<eos>",
    "<pad>",
    "<unk>",
    "<start_of_turn>",
    "<end_of_turn>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
    "<<SYS>>",
    "<</SYS>>",
    "[INST]",
    "[/INST]",
    "[SYSTEM_PROMPT]",
    "[/SYSTEM_PROMPT]",
    "[AVAILABLE_TOOLS]",
    "[/AVAILABLE_TOOLS]",
    "[TOOL_CALLS]",
    "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]",
    "[TOOL_CONTENT]",
    "[/TOOL_CONTENT]",
];

/// Longest `<|…|>` token removed, in characters between its bars.
pub(crate) const MAX_BAR_TOKEN_CHARS: usize = 64;

/// Removes invisible characters, HTML comments and control tokens in one pass. The output is
/// checked as it grows, so nothing removed can let the text around it join into a new opener or
/// token (`<<!---->!--`, `<|im_<|x|>start|>`); invisible characters never enter it, so none can
/// split an opener (`<!\u{200B}--`, found by the fuzz tests).
fn remove_hidden(text: &str) -> String {
    let mut output = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        rest = &rest[c.len_utf8()..];
        if is_invisible(c) {
            continue;
        }
        output.push(c);
        match c {
            '-' if output.ends_with("<!--") => {
                output.truncate(output.len() - 4);
                match rest.find("-->") {
                    Some(end) => rest = &rest[end + 3..],
                    None => break,
                }
            }
            '>' | ']' => {
                if let Some(length) = control_token_at_end(&output) {
                    output.truncate(output.len() - length);
                }
            }
            _ => {}
        }
    }
    output
}

/// The length in bytes of the control token `output` ends with, if it ends with one.
fn control_token_at_end(output: &str) -> Option<usize> {
    if let Some(token) = CONTROL_TOKENS.iter().find(|token| ends_with_ignoring_case(output, token)) {
        return Some(token.len());
    }
    let body = output.strip_suffix("|>").or_else(|| output.strip_suffix("｜>"))?;
    for (count, (index, c)) in body.char_indices().rev().enumerate() {
        if c == '\n' || count > MAX_BAR_TOKEN_CHARS {
            return None;
        }
        if matches!(c, '|' | '｜') && body[..index].ends_with('<') {
            return Some(output.len() - (index - 1));
        }
    }
    None
}

fn ends_with_ignoring_case(text: &str, suffix: &str) -> bool {
    text.len() >= suffix.len()
        && text.is_char_boundary(text.len() - suffix.len())
        && text[text.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
}

/// `text` with the `<<` of every `<<untrusted` and `<<end-untrusted` (any ASCII case) turned into
/// `‹‹`: whatever follows, it is no fence marker. Turning `<` into `‹` cannot make a new one.
pub(crate) fn neutralise_markers(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let mut output = String::with_capacity(text.len());
    let mut copied = 0;
    let mut search = 0;
    while let Some(found) = lower[search..].find("<<") {
        let at = search + found;
        let after = &lower[at + 2..];
        if after.starts_with("untrusted") || after.starts_with("end-untrusted") {
            output.push_str(&text[copied..at]);
            output.push_str("‹‹");
            copied = at + 2;
            search = at + 2;
        } else {
            search = at + 1;
        }
    }
    output.push_str(&text[copied..]);
    output
}

/// Characters that render as nothing or reorder text: they can hide instructions from a human
/// reader while the model still reads them.
fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{200B}'..='\u{200F}' // zero-width space/joiners, LRM, RLM
        | '\u{202A}'..='\u{202E}' // bidi embeddings and overrides
        | '\u{2060}'..='\u{2064}' // word joiner, invisible operators
        | '\u{2066}'..='\u{2069}' // bidi isolates
        | '\u{061C}' // arabic letter mark
        | '\u{FEFF}' // zero-width no-break space
        | '\u{00AD}' // soft hyphen
        | '\u{034F}' // combining grapheme joiner
        | '\u{115F}' | '\u{1160}' | '\u{3164}' | '\u{FFA0}' // hangul fillers
        | '\u{180E}' // mongolian vowel separator
        | '\u{FE00}'..='\u{FE0F}' // variation selectors
        | '\u{E0000}'..='\u{E007F}' // tag characters
        | '\u{E0100}'..='\u{E01EF}' // variation selectors supplement
    ) || (c.is_control() && c != '\n' && c != '\t')
}

/// A name, key, id or time from the tracker as a prompt shows it: letters, digits and `._:+@-`
/// only, at most [`MAX_NAME_CHARS`]. It cannot hold a space, a line break or a marker, so it
/// cannot forge a line of the template; that is why names are not fenced.
pub fn clean_name(text: &str) -> String {
    text.chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '.' | '_' | ':' | '+' | '@' | '-'))
        .take(MAX_NAME_CHARS)
        .collect()
}
