//! o200k token counts, the same numbers as `tiktoken_rs`'s `o200k_base` (`encode_with_special_tokens`)
//! with about a third of its memory.
//!
//! tiktoken-rs keeps every one of the 200,000 tokens three times (encoder, decoder, and a sorted
//! copy for decoding partial text) plus 256 copies of its regexes; counting needs only the
//! encoder. So the table is built once, straight from the vocabulary file tiktoken ships
//! (`o200k_base.tiktoken`, the same file tiktoken-rs embeds, SHA-256 `446a9538…cfb1a2d`; building
//! it through tiktoken-rs's tokenizer briefly held both, ~30 MB more), and the text is split
//! into the same pieces and merged with the same byte-pair function. `tests` compares the two on
//! varied and on random text.
//!
//! The pieces: o200k's pattern ends in `\s+(?!\S)|\s+`, a look-ahead the `regex` crate does not
//! have; tiktoken-rs runs the whole pattern on a backtracking engine, which was most of the cost
//! of a count. Here the pattern ends in `\s+` instead, on `regex`'s automata, and the look-ahead
//! is done by hand (see [`O200k::ordinary`]).

use std::sync::OnceLock;

use base64::Engine as _;
use regex::Regex;
use rustc_hash::FxHashMap;
use tiktoken_rs::Rank;

/// The special tokens o200k knows, each one token when it appears in text.
const SPECIAL: [&str; 2] = ["<|endoftext|>", "<|endofprompt|>"];
/// o200k's byte-pair vocabulary: one token a line, its bytes in base64, a space, its rank.
const VOCABULARY: &str = include_str!("o200k_base.tiktoken");
/// Tokens in [`VOCABULARY`].
const VOCABULARY_TOKENS: usize = 199_998;

/// The end of o200k's pattern that needs a look-ahead.
const LOOKAHEAD_TAIL: &str = r"\s+(?!\S)|\s+";

struct O200k {
    ranks: FxHashMap<Vec<u8>, Rank>,
    pieces: Regex,
}

fn o200k() -> &'static O200k {
    static TABLE: OnceLock<O200k> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut ranks = FxHashMap::with_capacity_and_hasher(VOCABULARY_TOKENS, Default::default());
        for line in VOCABULARY.lines() {
            // The file is compiled in and checked by the tests; a bad line cannot occur in
            // practice, and would only make counts of text using that token a little high.
            if let Some((bytes, rank)) = line.split_once(' ')
                && let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(bytes)
                && let Ok(rank) = rank.parse::<Rank>()
            {
                ranks.insert(bytes, rank);
            }
        }
        let pattern = tiktoken_rs::O200K_BASE_PAT_STR.replace(LOOKAHEAD_TAIL, r"\s+");
        let pieces = Regex::new(&pattern).unwrap_or_else(|_| {
            // The pattern is a constant, tested below; this cannot fail in practice.
            Regex::new(r"\S+|\s+").expect("a trivial pattern compiles")
        });
        O200k { ranks, pieces }
    })
}

/// Tokens of `text` in the o200k encoding, special tokens counted as one each.
pub(crate) fn count(text: &str) -> u64 {
    let table = o200k();
    let mut total = 0;
    let mut rest = text;
    loop {
        let next = SPECIAL.iter().filter_map(|special| rest.find(special).map(|at| (at, special.len()))).min();
        match next {
            Some((at, len)) => {
                total += table.ordinary(&rest[..at]) + 1;
                rest = &rest[at + len..];
            }
            None => return total + table.ordinary(rest),
        }
    }
}

impl O200k {
    fn ordinary(&self, text: &str) -> u64 {
        let mut total = 0;
        let mut at = 0;
        while let Some(found) = self.pieces.find_at(text, at) {
            let mut end = found.end();
            if end == found.start() {
                break; // no pattern branch matches empty text; guards the loop all the same
            }
            // `\s+(?!\S)`: a run of spaces without a line break, followed by more text, leaves
            // its last character to the piece after it (" word" is one piece). A run reaching
            // the end of the text, or of one character, is one piece as it is. The branches
            // before it only give spaces-only pieces that hold a line break.
            let piece = found.as_str();
            if end < text.len()
                && piece.chars().all(char::is_whitespace)
                && !piece.contains(['\r', '\n'])
                && let Some((last, _)) = piece.char_indices().last()
                && last > 0
            {
                end = found.start() + last;
            }
            let piece = &text.as_bytes()[found.start()..end];
            total += if piece.len() == 1 || self.ranks.contains_key(piece) {
                1
            } else {
                tiktoken_rs::byte_pair_split(piece, &self.ranks).len() as u64
            };
            at = end;
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_like_tiktoken() {
        let reference = tiktoken_rs::o200k_base().unwrap();
        let mut texts: Vec<String> = vec![
            String::new(),
            "hi".into(),
            "Hello, world! How's it going? I'll be there.".into(),
            "Task: TE-15\n  - step one\r\n  - step two\n\n\n".into(),
            "{\"type\":\"object\",\"properties\":{\"task_id\":{\"type\":\"string\"}}}".into(),
            "Grüße aus Köln — 日本語のテキスト, émojis 🎉🚀 and ünïcödé".into(),
            "numbers 1234567 3.14159 -42 0x1F".into(),
            "before<|endoftext|>after <|endofprompt|> and <|notspecial|>".into(),
            "=".repeat(3000),
            "a".repeat(2500),
            "    indented\n\tand tabs\t\t\n".into(),
            "CamelCaseWords and snake_case_words and SHOUTING".into(),
        ];
        for file in ["system.md", "task_assigned.md", "message_new.md"] {
            if let Ok(text) =
                std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../prompts/").to_string() + file)
            {
                texts.push(text);
            }
        }
        // Random text from the characters the pattern treats differently: spaces of several
        // kinds, line breaks, letters of each case, marks, digits, apostrophes, punctuation.
        let alphabet: Vec<char> = " \t\n\r\u{3000}\u{a0}aZé'sLl1234567890.,;!?-_/'\u{301}日ß"
            .chars()
            .chain(['T', 'x', '"', '(', ')', ' ', ' ', '\n'])
            .collect();
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..3000 {
            let mut next = || {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed
            };
            let length = (next() % 24) as usize;
            texts.push((0..length).map(|_| alphabet[(next() % alphabet.len() as u64) as usize]).collect());
        }
        assert!(tiktoken_rs::O200K_BASE_PAT_STR.ends_with(LOOKAHEAD_TAIL), "o200k's pattern changed");
        assert_eq!(o200k().ranks.len(), VOCABULARY_TOKENS, "every line of the vocabulary is read");
        for text in &texts {
            assert_eq!(
                count(text),
                reference.encode_with_special_tokens(text).len() as u64,
                "{:?}",
                &text[..text.len().min(60)]
            );
        }
    }
}
