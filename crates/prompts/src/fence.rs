//! The fences that keep untrusted text data: `<<untrusted-TOKEN>>` … `<<end-untrusted-TOKEN>>`.

use serde::{Deserialize, Serialize};

use crate::clean::{clean_text, neutralise_markers};

/// How a fence opens and closes: `<<untrusted-TOKEN>>` … `<<end-untrusted-TOKEN>>`.
const FENCE_OPEN_PREFIX: &str = "<<untrusted-";
const FENCE_CLOSE_PREFIX: &str = "<<end-untrusted-";
const FENCE_MARKER_END: &str = ">>";
/// The fence of text written before the run it goes to is known (steering, a follow-up run's
/// prompt): the run gives it its own token with [`Fence::settle`].
const PENDING_OPEN: &str = "<<untrusted>>";
const PENDING_CLOSE: &str = "<<end-untrusted>>";
/// A token's length in hex digits: 64 random bits. Shorter or longer stored tokens are refused.
const TOKEN_DIGITS: usize = 16;

/// The boundary of one run's untrusted text: `<<untrusted-TOKEN>>` … `<<end-untrusted-TOKEN>>`,
/// TOKEN random per run and stored with the run's start, so a resumed run renders the same
/// bytes. Text inside was cleaned ([`clean_text`]), so it holds no marker of its own: neither
/// this fence's close nor a new opening.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Fence {
    token: String,
}

impl Fence {
    /// A fence with a fresh random token (from the thread's cryptographic generator).
    pub fn random() -> Fence {
        Fence { token: format!("{:016x}", rand::random::<u64>()) }
    }

    pub fn open(&self) -> String {
        format!("{FENCE_OPEN_PREFIX}{}{FENCE_MARKER_END}", self.token)
    }

    pub fn close(&self) -> String {
        format!("{FENCE_CLOSE_PREFIX}{}{FENCE_MARKER_END}", self.token)
    }

    /// `text` cleaned, capped at `max_chars` and fenced.
    pub fn data(&self, text: &str, max_chars: usize) -> String {
        self.wrap(&clean_text(text, max_chars))
    }

    /// `text` fenced: on one line the markers around it, over several lines each on its own
    /// line; empty text stays empty (a template's `{% if %}` still works). Markers in `text` are
    /// neutralised here too, so even text that skipped [`clean_text`] cannot leave the fence.
    pub fn wrap(&self, text: &str) -> String {
        wrap_with(&self.open(), &self.close(), text)
    }

    /// `text` with the pending fences of [`fence_pending`] turned into this fence.
    pub fn settle(&self, text: &str) -> String {
        if !text.contains(PENDING_OPEN) {
            return text.to_string();
        }
        text.replace(PENDING_OPEN, &self.open()).replace(PENDING_CLOSE, &self.close())
    }
}

// A String error: serde's try_from shows it as is, and no caller decides on its kind.
impl TryFrom<String> for Fence {
    type Error = String;

    fn try_from(token: String) -> Result<Fence, String> {
        let valid =
            token.len() == TOKEN_DIGITS && token.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if valid { Ok(Fence { token }) } else { Err(format!("a fence token is {TOKEN_DIGITS} lower-case hex digits")) }
    }
}

impl From<Fence> for String {
    fn from(fence: Fence) -> String {
        fence.token
    }
}

/// `text` cleaned, capped and fenced for a run not known yet: the run's [`Fence::settle`] gives
/// the fence its token. For the router, which words what a busy run is told (steering).
pub fn fence_pending(text: &str, max_chars: usize) -> String {
    wrap_with(PENDING_OPEN, PENDING_CLOSE, &clean_text(text, max_chars))
}

fn wrap_with(open: &str, close: &str, text: &str) -> String {
    let text = neutralise_markers(text);
    if text.is_empty() {
        String::new()
    } else if text.contains('\n') {
        format!("{open}\n{text}\n{close}")
    } else {
        format!("{open}{text}{close}")
    }
}

/// One stretch of a prompt: the prompt's own words, or the text inside one fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part<'a> {
    Structure(&'a str),
    Data(&'a str),
}

/// `text` cut into its structure and its fenced data, in order, for a reader that must tell
/// them apart (the offline planner). A fence's data is given as [`Fence::wrap`] got it; a fence
/// never closed runs to the end. Only a whole marker opens a fence, so cleaned text (which
/// holds none) is never mistaken for one.
pub fn split_fences(text: &str) -> Vec<Part<'_>> {
    let mut parts = Vec::new();
    let (mut copied, mut search) = (0, 0);
    while let Some(found) = text[search..].find(FENCE_OPEN_PREFIX) {
        let at = search + found;
        let token_start = at + FENCE_OPEN_PREFIX.len();
        let token_length = text[token_start..].bytes().take_while(u8::is_ascii_hexdigit).count();
        let token = &text[token_start..token_start + token_length];
        if token_length == 0 || !text[token_start + token_length..].starts_with(FENCE_MARKER_END) {
            search = token_start;
            continue;
        }
        if at > copied {
            parts.push(Part::Structure(&text[copied..at]));
        }
        let inside = token_start + token_length + FENCE_MARKER_END.len();
        let close = format!("{FENCE_CLOSE_PREFIX}{token}{FENCE_MARKER_END}");
        let (end, next) = match text[inside..].find(&close) {
            Some(length) => (inside + length, inside + length + close.len()),
            None => (text.len(), text.len()),
        };
        parts.push(Part::Data(unblock(&text[inside..end])));
        (copied, search) = (next, next);
    }
    if copied < text.len() {
        parts.push(Part::Structure(&text[copied..]));
    }
    parts
}

/// The data of a fence in block form without the line breaks [`Fence::wrap`] put around it.
fn unblock(inside: &str) -> &str {
    match inside.strip_prefix('\n').and_then(|inner| inner.strip_suffix('\n')) {
        Some(inner) => inner,
        None => inside,
    }
}

/// `text` without its fence markers, for a person reading a run's timeline.
pub fn without_fences(text: &str) -> String {
    split_fences(text)
        .into_iter()
        .map(|part| match part {
            Part::Structure(text) | Part::Data(text) => text,
        })
        .collect()
}

/// Markdown text to put under a heading picogent writes (`## …`): each of its own headings moved
/// two levels down, to `###` at least (`## System` becomes `#### System`, a setext heading an ATX
/// one), so none reads as a section of picogent's prompt. Code blocks are left as they are.
pub fn demote_headings(text: &str) -> String {
    let mut lines: Vec<String> = Vec::new();
    let mut in_code = false;
    // Whether the last line is paragraph text, which a setext underline would make a heading.
    let mut after_paragraph = false;
    for line in text.lines() {
        let trimmed = line.trim_start_matches(' ');
        let indent = line.len() - trimmed.len();
        let fence_line = indent <= 3 && (trimmed.starts_with("```") || trimmed.starts_with("~~~"));
        if fence_line || in_code || indent > 3 {
            in_code ^= fence_line;
            lines.push(line.to_string());
            after_paragraph = false;
            continue;
        }
        let hashes = trimmed.bytes().take_while(|b| *b == b'#').count();
        let heading_text = &trimmed[hashes..];
        if (1..=6).contains(&hashes) && (heading_text.is_empty() || heading_text.starts_with([' ', '\t'])) {
            lines.push(format!("{} {}", "#".repeat((hashes + 2).clamp(3, 6)), heading_text.trim()));
            after_paragraph = false;
            continue;
        }
        let underline = trimmed.trim_end();
        let setext_level = match underline.chars().next() {
            Some('=') if underline.chars().all(|c| c == '=') => Some(1),
            Some('-') if underline.len() >= 2 && underline.chars().all(|c| c == '-') => Some(2),
            _ => None,
        };
        if let (Some(level), true, Some(previous)) = (setext_level, after_paragraph, lines.last_mut()) {
            *previous = format!("{} {}", "#".repeat(level + 2), previous.trim());
            after_paragraph = false;
            continue;
        }
        after_paragraph = !trimmed.trim().is_empty();
        lines.push(line.to_string());
    }
    lines.join("\n")
}
