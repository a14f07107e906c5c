//! The fence markers picogent puts around untrusted text in a prompt (`<<untrusted-…>>`,
//! `<<end-untrusted-…>>`, written by `picogent_prompts::Fence`) are the prompt's, never the
//! board's: a model that repeats them, or text that carried them, has them taken out of every
//! message picogent posts ([`TrackerClient::send_message`](crate::TrackerClient::send_message),
//! [`reply_message`](crate::TrackerClient::reply_message)).

use std::borrow::Cow;

const OPENERS: [&str; 2] = ["<<untrusted-", "<<end-untrusted-"];

/// The longest marker token taken out (a fence's token is 16 hex digits).
const MAX_TOKEN: usize = 64;

/// `text` without fence markers: each `<<untrusted-TOKEN>>` and `<<end-untrusted-TOKEN>>` (a
/// TOKEN of up to 64 characters that are neither space nor `>`) is removed.
pub fn without_markers(text: &str) -> Cow<'_, str> {
    if !OPENERS.iter().any(|opener| text.contains(opener)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some((at, opener)) =
        OPENERS.iter().filter_map(|opener| rest.find(opener).map(|at| (at, opener))).min_by_key(|(at, _)| *at)
    {
        let after = &rest[at + opener.len()..];
        let token = after.find(">>").filter(|end| {
            *end <= MAX_TOKEN && !after[..*end].contains(|c: char| c.is_whitespace() || c == '>' || c == '<')
        });
        match token {
            Some(end) => {
                out.push_str(&rest[..at]);
                rest = &after[end + 2..];
            }
            None => {
                out.push_str(&rest[..at + opener.len()]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fence_markers_are_taken_out_and_other_text_kept() {
        let text = "Done.\n<<untrusted-3f2a9c0d11aa22bb>>\nthe task\n<<end-untrusted-3f2a9c0d11aa22bb>>\nbye";
        assert_eq!(without_markers(text), "Done.\n\nthe task\n\nbye");
        assert_eq!(without_markers("a <<untrusted-…>> b"), "a  b");
        assert_eq!(without_markers("keep <<untrusted- spaced>> and <<x>>"), "keep <<untrusted- spaced>> and <<x>>");
        assert!(matches!(without_markers("plain"), Cow::Borrowed("plain")));
    }
}
