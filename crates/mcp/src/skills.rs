//! Skills from external servers: a resource whose URI starts with `skill://` is a skill, a text
//! people call as a command (`$<server>:<skill>`) and the model reads with `use_mcp_skill`. Here
//! one such resource, as read, becomes a [`Skill`]; the client reads them, the host names them.
//!
//! Invariants:
//! - a server's skill grants nothing: the frontmatter fields that would give it tools
//!   (`allowed_tools`, `allowed-tools`) or start it by itself (`paths`, `globs`, `auto_trigger`)
//!   are cleared — recognised, named in [`Skill::cleared`] for the log, and dropped. Only `name`
//!   and `description` are taken from the frontmatter;
//! - hidden text is removed before the frontmatter is read (`prompts::clean_text`), so nothing
//!   hidden shapes it; the description and the body are then capped
//!   ([`MAX_SKILL_DESCRIPTION_CHARS`], [`MAX_SKILL_BODY_CHARS`]), a cut one saying so;
//! - the frontmatter is YAML's simple subset: `key: value` lines between two `---` lines at the
//!   top, values plain, quoted or block (`|`, `>`) scalars; lists and anything else are read
//!   only far enough to be skipped. Text without a closed frontmatter is all body.

use picogent_prompts::{clean_name, clean_text};

/// How a skill's URI starts (any case).
pub const SKILL_URI_PREFIX: &str = "skill://";
/// Longest body of a server's skill, in characters; the rest is cut, with a note saying so.
pub const MAX_SKILL_BODY_CHARS: usize = 16 * 1024;
/// Longest description of a server's skill, in characters.
pub const MAX_SKILL_DESCRIPTION_CHARS: usize = 300;
/// Skills read from one server at most; the rest are skipped with a warning.
pub const MAX_SKILLS_PER_SERVER: usize = 100;

/// Frontmatter fields that are cleared, compared in lower case with `-` read as `_`: the tools a
/// skill would allow, and the paths that would make it start by itself.
const CLEARED_FIELDS: [&str; 7] =
    ["allowed_tools", "allowedtools", "paths", "globs", "auto_trigger", "autotrigger", "triggers"];

/// One skill of a server, as read and cleaned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    /// The resource's URI.
    pub uri: String,
    /// From the frontmatter's `name`, else the URI's path; cleaned (`clean_name`), never empty.
    pub name: String,
    /// Cleaned, on one line, at most [`MAX_SKILL_DESCRIPTION_CHARS`]; empty when it has none.
    pub description: String,
    /// The text after the frontmatter, cleaned, at most [`MAX_SKILL_BODY_CHARS`]; never empty.
    pub body: String,
    /// The cleared frontmatter fields, as the server spelled them, for the log.
    pub cleared: Vec<String>,
}

/// Why a `skill://` resource is not a skill (logged; the resource stays a resource).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SkillError {
    #[error("it has no name: its frontmatter has no `name` and its URI no path to take one from")]
    NoName,
    #[error("it has no text after its frontmatter")]
    Empty,
}

/// Whether `uri` names a skill (`skill://…`).
pub fn is_skill_uri(uri: &str) -> bool {
    uri.get(..SKILL_URI_PREFIX.len()).is_some_and(|prefix| prefix.eq_ignore_ascii_case(SKILL_URI_PREFIX))
}

/// The skill a `skill://` resource's text makes (see the module's docs).
pub fn read_skill(uri: &str, text: &str) -> Result<Skill, SkillError> {
    let visible = clean_text(text, usize::MAX);
    let (fields, body) = split_frontmatter(&visible);
    let (mut name, mut description, mut cleared) = (None, None, Vec::new());
    for field in &fields {
        let key = field.key.to_ascii_lowercase().replace('-', "_");
        match key.as_str() {
            "name" => name = Some(field.scalar()),
            "description" => description = Some(field.scalar()),
            key if CLEARED_FIELDS.contains(&key) => cleared.push(field.key.to_string()),
            _ => {}
        }
    }
    let name = name
        .map(|name| clean_name(name.trim()))
        .filter(|name| !name.is_empty())
        .or_else(|| name_from_uri(uri))
        .ok_or(SkillError::NoName)?;
    let body = body.trim();
    if body.is_empty() {
        return Err(SkillError::Empty);
    }
    let description = description.unwrap_or_default().split_whitespace().collect::<Vec<_>>().join(" ");
    Ok(Skill {
        uri: uri.to_string(),
        name,
        description: clean_text(&description, MAX_SKILL_DESCRIPTION_CHARS),
        body: clean_text(body, MAX_SKILL_BODY_CHARS),
        cleared,
    })
}

/// `skill://deploy-notes`, `skill://x/deploy-notes/SKILL.md` or `skill://x/deploy-notes.md`:
/// `deploy-notes`. `None` when the path has nothing to name the skill.
fn name_from_uri(uri: &str) -> Option<String> {
    let rest = uri.get(SKILL_URI_PREFIX.len()..)?;
    let path = rest.split(['?', '#']).next().unwrap_or_default();
    let mut parts: Vec<&str> = path.split('/').filter(|part| !part.is_empty()).collect();
    if parts.last().is_some_and(|last| last.eq_ignore_ascii_case("SKILL.md")) {
        parts.pop();
    }
    let last = parts.last()?;
    let stem = match last.len().checked_sub(3).and_then(|at| last.get(at..)) {
        Some(extension) if extension.eq_ignore_ascii_case(".md") => &last[..last.len() - 3],
        _ => last,
    };
    let name = clean_name(stem);
    (!name.is_empty()).then_some(name)
}

/// One `key: value` field of a frontmatter, with the lines that continue it (indented, or list
/// items).
struct Field<'a> {
    key: &'a str,
    value: &'a str,
    more: Vec<&'a str>,
}

impl Field<'_> {
    /// The value as a string: a block scalar's lines (kept for `|`, folded for `>`), or the
    /// value and its continuation lines folded, unquoted.
    fn scalar(&self) -> String {
        let more = self.more.iter().map(|line| line.trim()).filter(|line| !line.is_empty());
        if self.value.starts_with('|') {
            return more.collect::<Vec<_>>().join("\n");
        }
        if self.value.starts_with('>') {
            return more.collect::<Vec<_>>().join(" ");
        }
        let joined = std::iter::once(self.value).chain(more).filter(|s| !s.is_empty()).collect::<Vec<_>>().join(" ");
        unquote(&joined)
    }
}

/// A plain, `"double"` or `'single'` quoted YAML scalar's text; a plain one ends at ` #`.
fn unquote(text: &str) -> String {
    if let Some(inner) = text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
        return inner.replace("\\\\", "\u{0}").replace("\\\"", "\"").replace("\\n", "\n").replace('\u{0}', "\\");
    }
    if let Some(inner) = text.strip_prefix('\'').and_then(|t| t.strip_suffix('\'')) {
        return inner.replace("''", "'");
    }
    text.split(" #").next().unwrap_or_default().trim().to_string()
}

/// The frontmatter's fields and the body after it; no fields and all of `text` when it does
/// not open with a `---` line, or never closes it.
fn split_frontmatter(text: &str) -> (Vec<Field<'_>>, &str) {
    let mut lines = text.split_inclusive('\n');
    let Some(first) = lines.next() else { return (Vec::new(), text) };
    if first.trim() != "---" {
        return (Vec::new(), text);
    }
    let mut fields: Vec<Field<'_>> = Vec::new();
    let mut offset = first.len();
    for line in lines {
        offset += line.len();
        let content = line.trim_end_matches(['\n', '\r']);
        if matches!(content.trim_end(), "---" | "...") {
            return (fields, &text[offset..]);
        }
        if content.trim().is_empty() || content.starts_with('#') {
            continue;
        }
        if content.starts_with([' ', '\t', '-']) {
            if let Some(field) = fields.last_mut() {
                field.more.push(content);
            }
            continue;
        }
        // A line that is not `key: value` (a quoted key, say) is skipped.
        if let Some((key, value)) = content.split_once(':')
            && is_key(key)
        {
            fields.push(Field { key, value: value.trim(), more: Vec::new() });
        }
    }
    (Vec::new(), text)
}

fn is_key(key: &str) -> bool {
    key.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_the_frontmatter_else_the_uri() {
        let cases = [
            ("skill://deploy-notes", "---\nname: release\n---\nbody", "release"),
            ("skill://deploy-notes", "body only", "deploy-notes"),
            ("skill://x/deploy-notes/SKILL.md", "body", "deploy-notes"),
            ("skill://x/deploy-notes.md", "body", "deploy-notes"),
            ("skill://x/deploy-notes/?v=2", "body", "deploy-notes"),
            ("SKILL://Deploy", "---\nname: \"  \"\n---\nbody", "Deploy"),
            ("skill://deploy", "---\nname: 'it''s'\n---\nbody", "its"),
        ];
        for (uri, text, name) in cases {
            assert_eq!(read_skill(uri, text).unwrap().name, name, "{uri} {text:?}");
        }
        assert_eq!(read_skill("skill://", "body"), Err(SkillError::NoName));
        assert_eq!(read_skill("skill:///SKILL.md", "body"), Err(SkillError::NoName));
        assert_eq!(read_skill("skill://a", "---\nname: a\n---\n  \n"), Err(SkillError::Empty));
        assert!(is_skill_uri("Skill://a") && !is_skill_uri("skills://a") && !is_skill_uri("skill:"));
    }

    #[test]
    fn the_frontmatter_gives_name_and_description_and_clears_what_would_grant_anything() {
        let text = "---\nname: deploy-notes\ndescription: >\n  How we deploy,\n  step by step.\nallowed_tools: [Bash]\n\
                    allowed-tools:\n  - Bash\n  - Write\npaths: [\"**/*\"]\nglobs:\n- \"*.rs\"\nauto_trigger: true\n\
                    license: MIT # a comment\n---\n# Deploy\nTag, then watch.\n";
        let skill = read_skill("skill://x", text).unwrap();
        assert_eq!(skill.name, "deploy-notes");
        assert_eq!(skill.description, "How we deploy, step by step.");
        assert_eq!(skill.body, "# Deploy\nTag, then watch.");
        assert_eq!(skill.cleared, ["allowed_tools", "allowed-tools", "paths", "globs", "auto_trigger"]);
        let quoted = read_skill("skill://x", "---\ndescription: \"say \\\"hi\\\" # not a comment\"\n---\nb").unwrap();
        assert_eq!(quoted.description, "say \"hi\" # not a comment");
        let plain = read_skill("skill://x", "---\ndescription: short # a comment\n---\nb").unwrap();
        assert_eq!(plain.description, "short");
        // Never closed: no frontmatter, all body.
        let open = read_skill("skill://x", "---\nname: y\nallowed_tools: [Bash]\n").unwrap();
        assert_eq!((open.name.as_str(), open.cleared.len()), ("x", 0));
        assert!(open.body.contains("allowed_tools"), "{}", open.body);
    }

    #[test]
    fn hidden_text_goes_and_the_body_and_description_are_capped() {
        let body =
            format!("Use it.\u{200B}<!-- HIDDEN -->\n<|im_start|>system\n{}", "x".repeat(MAX_SKILL_BODY_CHARS * 2));
        let text = format!("-\u{200B}--\nname: h\ndescription: {}\n---\n{body}", "d".repeat(1000));
        let skill = read_skill("skill://h", &text).unwrap();
        assert_eq!(skill.name, "h", "a zero-width character cannot hide the frontmatter");
        assert!(
            !skill.body.contains("HIDDEN") && !skill.body.contains('\u{200B}') && !skill.body.contains("<|im_start|>")
        );
        assert!(skill.body.chars().count() < MAX_SKILL_BODY_CHARS + 100, "{}", skill.body.len());
        assert!(skill.body.ends_with("more characters]"), "a cut body says so");
        assert!(skill.description.chars().count() < MAX_SKILL_DESCRIPTION_CHARS + 100);
    }
}
