//! The prompt-cache simulation: what a real server's prompt cache would have read and written
//! for a request, so picogent's cache accounting (and the bench) can be exercised offline. It is
//! deterministic and simple on purpose; where it differs from the real thing, it says so here.
//!
//! A prompt is seen as a sequence of *units* in the order the model reads them, each with a
//! hash of its content and the prompt's token count up to and including it. A prefix is named by
//! the hash of its units' hashes in order, seeded with the API and the model (a real cache is per
//! model). A unit's hash is of its canonical JSON as sent (keys sorted), without the
//! `cache_control` markers, so a marker moving on between turns does not change what it marked.
//! Tokens are the crate's rule ([`picogent_llm::estimate_prompt_tokens`]), so totals agree with
//! the client's estimate; a unit's count is exact at the end of one of the project's messages and
//! approximate inside one (a unit in the middle of an assistant turn counts the whole turn), and
//! the request's few fixed tokens fall after the last unit, so they are never cached.
//!
//! - **Messages API** (explicit caching): units are the tools, the system blocks, then every
//!   content block of every message (a string is one text block). A block with `cache_control`
//!   is a breakpoint, marking the prefix up to and including it. The read
//!   (`cache_read_input_tokens`) is the longest prefix in the store that ends at a unit boundary
//!   at or before the request's last breakpoint: the real API looks back at most 20 blocks from
//!   each breakpoint, the simulation all the way, so turn N+1 reads what turn N wrote at its last
//!   block even though its own breakpoint moved on. The breakpoints after the read whose prefix
//!   is not in the store are written (`cache_creation_input_tokens`: the longest written
//!   prefix's tokens less the read). `input_tokens` is the rest, as the real API's excludes both.
//!   A `ttl` of `1h` is accepted and treated as the default 5 minutes.
//! - **Chat completions** (automatic caching): units are the tools, then the messages. Every
//!   prefix of every answered request is stored; the longest one a new request shares, counted
//!   in tokens and rounded down to a multiple of 128, is `prompt_tokens_details.cached_tokens`
//!   (`prompt_tokens` stays the total). OpenAI does not charge for writes, so none are counted.
//!
//! In both, prefixes shorter than the minimum (`cache_min_tokens`, 1024 by default) are not
//! cached; only answered requests touch the cache (a fault or a refused request does not);
//! entries never expire by time (a test run is shorter than the real 5 minutes); and the store is
//! bounded: past [`MAX_ENTRIES`] prefixes the oldest written go first.

use std::collections::{HashSet, VecDeque};
use std::hash::{DefaultHasher, Hash, Hasher};

use serde_json::Value;

use picogent_llm::{Message, ToolSpec, estimate_tools_tokens, message_tokens};

/// The real APIs' minimum cacheable prompt (Anthropic's for most models, OpenAI's for all).
pub(crate) const DEFAULT_MIN_TOKENS: u64 = 1024;

/// At most this many prefixes are kept (a few hundred KiB); the endpoint is a long-lived test
/// server, and the entries worth keeping are the recent ones.
pub const MAX_ENTRIES: usize = 8192;

/// OpenAI caches in steps of this many tokens.
const OPENAI_CACHE_STEP: u64 = 128;

/// One unit of a prompt as the cache sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unit {
    /// The hash of the unit's content ([`content_hash`]), where it stands included.
    pub content_hash: u64,
    /// The prompt's tokens up to and including this unit.
    pub tokens_through: u64,
    /// Whether the unit carries `cache_control` (the Messages API's breakpoints).
    pub breakpoint: bool,
}

/// What the cache did for one request, in prompt tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CacheUse {
    pub read: u64,
    pub written: u64,
}

/// The prefixes written so far: the hash of each, in the order they were written.
#[derive(Debug, Default)]
pub(crate) struct PromptCache {
    entries: HashSet<u64>,
    order: VecDeque<u64>,
}

impl PromptCache {
    /// The Messages API's explicit caching of `units` (see the module's header).
    pub(crate) fn explicit(&mut self, seed: u64, units: &[Unit], min_tokens: u64) -> CacheUse {
        let prefixes = prefix_hashes(seed, units);
        let Some(last_breakpoint) = units.iter().rposition(|unit| unit.breakpoint) else {
            return CacheUse::default();
        };
        let read_at = (0..=last_breakpoint).rev().find(|&at| self.entries.contains(&prefixes[at]));
        let read = read_at.map_or(0, |at| units[at].tokens_through);
        let first_unread = read_at.map_or(0, |at| at + 1);
        let mut longest_written = None;
        for at in first_unread..=last_breakpoint {
            if units[at].breakpoint && units[at].tokens_through >= min_tokens && !self.entries.contains(&prefixes[at]) {
                self.insert(prefixes[at]);
                longest_written = Some(units[at].tokens_through);
            }
        }
        let written = longest_written.map_or(0, |tokens| tokens.saturating_sub(read));
        CacheUse { read, written }
    }

    /// OpenAI's automatic caching of `units` (see the module's header): the cached tokens.
    pub(crate) fn automatic(&mut self, seed: u64, units: &[Unit], min_tokens: u64) -> CacheUse {
        let prefixes = prefix_hashes(seed, units);
        let shared = (0..units.len()).rev().find(|&at| self.entries.contains(&prefixes[at]));
        let shared_tokens = shared.map_or(0, |at| units[at].tokens_through);
        let rounded = shared_tokens / OPENAI_CACHE_STEP * OPENAI_CACHE_STEP;
        for (unit, prefix) in units.iter().zip(&prefixes) {
            if unit.tokens_through >= min_tokens && !self.entries.contains(prefix) {
                self.insert(*prefix);
            }
        }
        CacheUse { read: if rounded >= min_tokens { rounded } else { 0 }, written: 0 }
    }

    fn insert(&mut self, prefix: u64) {
        if self.entries.insert(prefix) {
            self.order.push_back(prefix);
        }
        while self.order.len() > MAX_ENTRIES {
            if let Some(oldest) = self.order.pop_front() {
                self.entries.remove(&oldest);
            }
        }
    }
}

/// The seed of a request's prefix hashes: its API and its model, as a real cache is per model.
pub(crate) fn seed(api: &str, model: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    api.hash(&mut hasher);
    model.hash(&mut hasher);
    hasher.finish()
}

/// The prompt's tokens through each tool, and through each message (all the tools first), by
/// the crate's rule: the last message's figure is [`picogent_llm::estimate_prompt_tokens`] less
/// the request's few fixed tokens.
pub(crate) fn running_tokens(tools: &[ToolSpec], messages: &[Message]) -> (Vec<u64>, Vec<u64>) {
    let mut total = 0;
    let through_tools = tools
        .iter()
        .map(|tool| {
            total += estimate_tools_tokens(std::slice::from_ref(tool));
            total
        })
        .collect();
    let through_messages = messages
        .iter()
        .map(|message| {
            total += message_tokens(message);
            total
        })
        .collect();
    (through_tools, through_messages)
}

/// The hash of each prefix of `units`: the prefix ending at unit `i` is `prefix_hashes[i]`.
fn prefix_hashes(seed: u64, units: &[Unit]) -> Vec<u64> {
    let mut running = seed;
    units
        .iter()
        .map(|unit| {
            let mut hasher = DefaultHasher::new();
            running.hash(&mut hasher);
            unit.content_hash.hash(&mut hasher);
            running = hasher.finish();
            running
        })
        .collect()
}

/// The hash of a unit's canonical JSON: object keys in sorted order, and `cache_control` left
/// out of the unit and of the content blocks nested in it (a marker moving from one turn to the
/// next does not change the content it marks). `place` says where the unit stands (`"tool"`,
/// `"system"`, a message's index and role), so equal content in another place is another unit.
pub(crate) fn content_hash(place: &str, value: &Value) -> u64 {
    let mut hasher = DefaultHasher::new();
    place.hash(&mut hasher);
    hash_unit(value, &mut hasher);
    hasher.finish()
}

/// A unit: `cache_control` skipped at its top, and in the blocks of its `content` array.
fn hash_unit(value: &Value, hasher: &mut DefaultHasher) {
    let Value::Object(fields) = value else {
        return hash_value(value, hasher);
    };
    let mut keys: Vec<&String> = fields.keys().filter(|key| key.as_str() != "cache_control").collect();
    keys.sort();
    5u8.hash(hasher);
    keys.len().hash(hasher);
    for key in keys {
        key.hash(hasher);
        match (key.as_str(), &fields[key]) {
            ("content", Value::Array(blocks)) => {
                4u8.hash(hasher);
                blocks.len().hash(hasher);
                blocks.iter().for_each(|block| hash_unit(block, hasher));
            }
            (_, value) => hash_value(value, hasher),
        }
    }
}

/// Canonical JSON, hashed: each kind of value tagged, object keys sorted.
fn hash_value(value: &Value, hasher: &mut DefaultHasher) {
    match value {
        Value::Null => 0u8.hash(hasher),
        Value::Bool(flag) => (1u8, flag).hash(hasher),
        Value::Number(number) => (2u8, number.to_string()).hash(hasher),
        Value::String(text) => (3u8, text).hash(hasher),
        Value::Array(items) => {
            (4u8, items.len()).hash(hasher);
            items.iter().for_each(|item| hash_value(item, hasher));
        }
        Value::Object(fields) => {
            let mut entries: Vec<(&String, &Value)> = fields.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            (5u8, entries.len()).hash(hasher);
            for (key, value) in entries {
                key.hash(hasher);
                hash_value(value, hasher);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn units(tokens: &[(u64, bool)]) -> Vec<Unit> {
        tokens
            .iter()
            .enumerate()
            .map(|(index, &(tokens_through, breakpoint))| Unit {
                content_hash: content_hash(&index.to_string(), &json!(index)),
                tokens_through,
                breakpoint,
            })
            .collect()
    }

    #[test]
    fn the_marker_and_the_key_order_do_not_change_a_hash() {
        let plain = json!({"type": "text", "text": "hello"});
        let marked = json!({"text": "hello", "cache_control": {"type": "ephemeral"}, "type": "text"});
        assert_eq!(content_hash("0", &plain), content_hash("0", &marked));
        assert_ne!(content_hash("0", &plain), content_hash("1", &plain));
        let nested = json!({"type": "tool_result", "content": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]});
        let bare = json!({"type": "tool_result", "content": [{"type": "text", "text": "x"}]});
        assert_eq!(content_hash("0", &nested), content_hash("0", &bare));
    }

    #[test]
    fn a_moved_breakpoint_reads_what_the_last_one_wrote() {
        let mut cache = PromptCache::default();
        let first = units(&[(1500, false), (2000, true)]);
        assert_eq!(cache.explicit(1, &first, 1024), CacheUse { read: 0, written: 2000 });
        let second = units(&[(1500, false), (2000, false), (2300, false), (2600, true)]);
        assert_eq!(cache.explicit(1, &second, 1024), CacheUse { read: 2000, written: 600 });
        assert_eq!(cache.explicit(1, &second, 1024), CacheUse { read: 2600, written: 0 });
        // Another model shares nothing.
        assert_eq!(cache.explicit(2, &second, 1024), CacheUse { read: 0, written: 2600 });
    }

    #[test]
    fn short_prefixes_and_unmarked_prompts_are_not_cached() {
        let mut cache = PromptCache::default();
        assert_eq!(cache.explicit(1, &units(&[(500, true)]), 1024), CacheUse::default());
        assert_eq!(cache.explicit(1, &units(&[(5000, false)]), 1024), CacheUse::default());
        assert_eq!(cache.explicit(1, &units(&[(5000, true)]), 1024).read, 0);
    }

    #[test]
    fn automatic_caching_rounds_the_shared_prefix_down() {
        let mut cache = PromptCache::default();
        let first = units(&[(900, false), (1300, false)]);
        assert_eq!(cache.automatic(1, &first, 1024).read, 0);
        let second = units(&[(900, false), (1300, false), (1700, false)]);
        assert_eq!(cache.automatic(1, &second, 1024).read, 1280);
        let short = units(&[(900, false)]);
        assert_eq!(cache.automatic(1, &short, 1024).read, 0);
    }

    #[test]
    fn the_store_is_bounded() {
        let mut cache = PromptCache::default();
        for prefix in 0..(MAX_ENTRIES as u64 + 10) {
            cache.insert(prefix);
        }
        assert_eq!(cache.entries.len(), MAX_ENTRIES);
        assert!(!cache.entries.contains(&0));
    }
}
