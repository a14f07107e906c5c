//! o200k token counts, the same numbers as `tiktoken_rs`'s `o200k_base` (`encode_with_special_tokens`)
//! with about a third of its memory.
//!
//! tiktoken-rs keeps every one of the 200,000 tokens three times (encoder, decoder, and a sorted
//! copy for decoding partial text) plus 256 copies of its regexes; counting needs only the
//! encoder. So the table is built once from tiktoken-rs's own vocabulary (its tokenizer is
//! dropped right after) and the text is split with the same pattern and merged with the same
//! byte-pair function. `tests` compares the two on varied text.

use std::sync::OnceLock;

use fancy_regex::Regex;
use rustc_hash::FxHashMap;
use tiktoken_rs::Rank;

/// The special tokens o200k knows, each one token when it appears in text.
const SPECIAL: [&str; 2] = ["<|endoftext|>", "<|endofprompt|>"];
/// Ranks of the special tokens, which are not in the byte-pair table.
const SPECIAL_RANKS: [Rank; 2] = [199_999, 200_018];
/// One past the highest rank.
const RANKS: Rank = 200_019;

struct O200k {
    ranks: FxHashMap<Vec<u8>, Rank>,
    pieces: Regex,
}

fn o200k() -> &'static O200k {
    static TABLE: OnceLock<O200k> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut ranks = FxHashMap::default();
        // The vocabulary is embedded in tiktoken-rs and parsed by it; read it back token by token.
        if let Ok(full) = tiktoken_rs::o200k_base() {
            ranks.reserve(RANKS as usize);
            for rank in (0..RANKS).filter(|rank| !SPECIAL_RANKS.contains(rank)) {
                if let Ok(bytes) = full.decode_bytes(&[rank]) {
                    ranks.insert(bytes, rank);
                }
            }
        }
        ranks.shrink_to_fit();
        let pieces = Regex::new(tiktoken_rs::O200K_BASE_PAT_STR).unwrap_or_else(|_| {
            // The pattern is a constant that tiktoken-rs compiles too; this cannot fail in practice.
            Regex::new(r"\S+|\s+").expect("a trivial pattern compiles")
        });
        O200k { ranks, pieces }
    })
}

/// Tokens of `text` in the o200k encoding, special tokens counted as one each.
pub fn count(text: &str) -> u64 {
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
        let mut counted_to = 0;
        for found in self.pieces.find_iter(text) {
            let Ok(found) = found else {
                // The pattern gave up (backtracking limit): estimate the rest rather than fail.
                return total + (text.len() - counted_to).div_ceil(4) as u64;
            };
            counted_to = found.end();
            let piece = found.as_str().as_bytes();
            total += if piece.len() == 1 || self.ranks.contains_key(piece) {
                1
            } else {
                tiktoken_rs::byte_pair_split(piece, &self.ranks).len() as u64
            };
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
                std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/prompts/").to_string() + file)
            {
                texts.push(text);
            }
        }
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
