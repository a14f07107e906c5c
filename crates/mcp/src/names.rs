//! Public names of what external servers offer: `mcp__<server>__<name>`, for their tools (the
//! model calls them) and for their prompts and skills (people call them as commands).
//!
//! Invariant: a public name matches `^[A-Za-z0-9_-]{1,64}$`: other characters become `_`, and a
//! name that is too long is shortened and suffixed with a short stable hash of the original.

const MAX_NAME: usize = 64;
/// Characters of the hash suffix of a shortened name.
const HASH_CHARS: usize = 8;

/// The public name of a server's tool (or prompt, or skill): `mcp__<server>__<tool>`, made valid.
pub fn public_name(server: &str, tool: &str) -> String {
    let raw = format!("mcp__{server}__{tool}");
    let mapped = valid_chars(&raw);
    if mapped.len() <= MAX_NAME { mapped } else { hashed_name(&mapped, &raw) }
}

/// `text` with every character outside `[A-Za-z0-9_-]` turned into `_`.
pub fn valid_chars(text: &str) -> String {
    text.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect()
}

/// `mapped` cut to fit with `_<hash of raw>` appended; `mapped` is ASCII, so any cut is safe.
pub(crate) fn hashed_name(mapped: &str, raw: &str) -> String {
    let keep = MAX_NAME - HASH_CHARS - 1;
    let prefix = &mapped[..mapped.len().min(keep)];
    format!("{prefix}_{}", &format!("{:016x}", fnv1a(raw.as_bytes()))[..HASH_CHARS])
}

/// FNV-1a: stable across runs and platforms, unlike the std hasher.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf29ce484222325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x100000001b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid(name: &str) -> bool {
        !name.is_empty() && name.len() <= 64 && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    }

    #[test]
    fn public_names_are_valid_stable_and_distinct() {
        assert_eq!(public_name("time", "get_current_time"), "mcp__time__get_current_time");
        assert_eq!(public_name("my.server", "do thing/now"), "mcp__my_server__do_thing_now");
        let long_a = public_name("server", &"x".repeat(100));
        let long_b = public_name("server", &format!("{}y", "x".repeat(99)));
        assert!(valid(&long_a) && valid(&long_b), "{long_a} {long_b}");
        assert_eq!(long_a.len(), 64);
        assert_ne!(long_a, long_b);
        assert_eq!(long_a, public_name("server", &"x".repeat(100)));
        assert!(valid(&public_name("s", "ünïcode")));
    }
}
