//! The one command namespace of people's messages: the servers' prompts
//! (`/mcp__<server>__<prompt> key=value…`) and skills (`$mcp__<server>__<skill> words…`, alias
//! `$<server>:<skill>`), and how a message calls one.
//!
//! Invariants:
//! - one name, one command: prompts and skills share the names `mcp__<server>__<name>`
//!   ([`crate::names::public_name`]), and the first to claim a name keeps it — servers in the
//!   config's order (by name), in a server its prompts in listing order, then its skills in
//!   listing order. The one that comes later is skipped, and [`Commands::build`] reports the
//!   [`Conflict`] naming both (the host warns once about each);
//! - a skill's alias `<server>:<skill>` is given only when no other skill would have it;
//! - the name decides what runs, not the sigil: `/` or `$` before a name calls whichever command
//!   holds it;
//! - only `/mcp__…`, `$mcp__…` and `$<server>:…` with a configured server are commands, and only
//!   at the start of a message (after its leading mentions): `$5` or `$HOME` in text is text.

use std::collections::{BTreeMap, HashMap};

use rmcp::model::{JsonObject, Prompt, PromptArgument};
use serde_json::Value;

use crate::client::{ServerCallError, ServerSnapshot};
use crate::names::{public_name, valid_chars};
use crate::skills::Skill;

/// Why a command cannot run. Each message says why, and how to call the command, since it is
/// the answer to the person who typed it.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// No connected server offers a command of that name; `available` lists those there are,
    /// as they are called.
    #[error("unknown command {command}; available: {}", or_none(available))]
    UnknownCommand { command: String, available: Vec<String> },
    /// The arguments text cannot be read as `key=value` pairs or one JSON object.
    #[error("{source}; {usage}")]
    Syntax { source: PromptArgumentsError, usage: String },
    /// Arguments the prompt does not declare.
    #[error("unknown argument(s) {} for /{command}; {usage}", unknown.join(", "))]
    UnknownArguments { command: String, unknown: Vec<String>, usage: String },
    /// Arguments the prompt requires that were not given.
    #[error("missing required argument(s) {} for /{command}; {usage}", missing.join(", "))]
    MissingArguments { command: String, missing: Vec<String>, usage: String },
    /// The server did not render the prompt (`prompts/get` failed).
    #[error(transparent)]
    Server(#[from] ServerCallError),
    /// The server rendered the prompt, but with no text in it (only images, say).
    #[error("the prompt /{command} rendered no text")]
    NoText { command: String },
}

/// Why the arguments text of a prompt command cannot be read (see [`parse_prompt_arguments`]).
#[derive(Debug, thiserror::Error)]
pub enum PromptArgumentsError {
    /// A word that is not `key=value`, or a `=value` with no key.
    #[error("expected key=value, got {key:?}")]
    NotKeyValue { key: String },
    /// A quoted value whose quote is never closed.
    #[error("the value of `{key}` has no closing {quote}")]
    Unclosed { key: String, quote: char },
    /// Text that starts like a JSON object but is not valid JSON.
    #[error("the arguments are not a valid JSON object: {0}")]
    Json(#[source] serde_json::Error),
    /// Valid JSON that is not an object.
    #[error("the arguments must be a JSON object")]
    NotObject,
}

/// The items joined with commas, or `none` when there are none.
fn or_none(items: &[String]) -> String {
    if items.is_empty() { "none".to_string() } else { items.join(", ") }
}

/// What a command runs.
#[derive(Debug, Clone)]
pub enum Target {
    /// The server renders this prompt (`prompts/get`).
    Prompt(Prompt),
    /// This skill, as the server's client read it.
    Skill(Skill),
}

/// One command of the namespace.
#[derive(Debug, Clone)]
pub struct Command {
    /// `mcp__<server>__<name>`, made valid.
    pub name: String,
    /// `<server>:<skill>`, for a skill no other skill shares it with.
    pub alias: Option<String>,
    /// The server that offers it (its name in the config).
    pub server: String,
    pub target: Target,
}

impl Command {
    /// How a person calls it: `/mcp__<server>__<prompt>`, `$<server>:<skill>`, or
    /// `$mcp__<server>__<skill>` for a skill without an alias.
    pub fn call(&self) -> String {
        match (&self.target, &self.alias) {
            (Target::Prompt(_), _) => format!("/{}", self.name),
            (Target::Skill(_), Some(alias)) => format!("${alias}"),
            (Target::Skill(_), None) => format!("${}", self.name),
        }
    }

    /// The command in words, for the log: "prompt `greet` of mcp server `skills`".
    fn describe(&self) -> String {
        match &self.target {
            Target::Prompt(prompt) => format!("prompt `{}` of mcp server `{}`", prompt.name, self.server),
            Target::Skill(skill) => format!("skill `{}` ({}) of mcp server `{}`", skill.name, skill.uri, self.server),
        }
    }
}

/// Two commands that would have one name: the first is kept, the later one skipped.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Conflict {
    pub name: String,
    pub kept: String,
    pub skipped: String,
}

/// Every command of the connected servers, in the namespace's order.
#[derive(Debug, Clone, Default)]
pub struct Commands {
    commands: Vec<Command>,
    /// The configured servers' names: `$<server>:…` is a command only for one of them.
    servers: Vec<String>,
}

impl Commands {
    /// The namespace of `servers` (in the config's order), and the conflicts it skipped.
    pub fn build<'a>(servers: impl IntoIterator<Item = (&'a str, &'a ServerSnapshot)>) -> (Commands, Vec<Conflict>) {
        let mut commands: Vec<Command> = Vec::new();
        let mut by_name: HashMap<String, usize> = HashMap::new();
        let mut conflicts = Vec::new();
        let mut names = Vec::new();
        for (server, snapshot) in servers {
            names.push(server.to_string());
            let prompts = snapshot.prompts.iter().map(|prompt| (prompt.name.as_str(), Target::Prompt(prompt.clone())));
            let skills = snapshot.skills.iter().map(|skill| (skill.name.as_str(), Target::Skill(skill.clone())));
            for (original, target) in prompts.chain(skills) {
                let command =
                    Command { name: public_name(server, original), alias: None, server: server.to_string(), target };
                match by_name.get(&command.name) {
                    Some(&kept) => conflicts.push(Conflict {
                        name: command.name.clone(),
                        kept: commands[kept].describe(),
                        skipped: command.describe(),
                    }),
                    None => {
                        by_name.insert(command.name.clone(), commands.len());
                        commands.push(command);
                    }
                }
            }
        }
        // Aliases last: one is given only when it is nobody else's.
        let alias_of = |command: &Command| match &command.target {
            Target::Skill(skill) if valid_chars(&command.server) == command.server => {
                Some(format!("{}:{}", command.server, valid_chars(&skill.name)))
            }
            _ => None,
        };
        let mut counts: HashMap<String, usize> = HashMap::new();
        for alias in commands.iter().filter_map(alias_of) {
            *counts.entry(alias).or_default() += 1;
        }
        for command in &mut commands {
            command.alias = alias_of(command).filter(|alias| counts.get(alias) == Some(&1));
        }
        (Commands { commands, servers: names }, conflicts)
    }

    /// The command `word` names: a name (`mcp__…`) or an alias (`<server>:<skill>`, the skill's
    /// part made valid as names are).
    pub fn find(&self, word: &str) -> Option<&Command> {
        match word.split_once(':') {
            Some((server, skill)) => {
                let alias = format!("{server}:{}", valid_chars(skill));
                self.commands.iter().find(|command| command.alias.as_deref() == Some(alias.as_str()))
            }
            None => self.commands.iter().find(|command| command.name == word),
        }
    }

    /// The skills, in the namespace's order.
    pub fn skills(&self) -> impl Iterator<Item = (&Command, &Skill)> {
        self.commands.iter().filter_map(|command| match &command.target {
            Target::Skill(skill) => Some((command, skill)),
            Target::Prompt(_) => None,
        })
    }

    /// How each command is called, in the namespace's order.
    pub fn calls(&self) -> Vec<String> {
        self.commands.iter().map(Command::call).collect()
    }

    /// The command a message calls, if it starts (after its leading mentions) with one: see
    /// the module's docs. `None`: the message is text.
    pub fn called<'a>(&self, text: &'a str) -> Option<Called<'a>> {
        let mut rest = text.trim_start();
        // The router may pass the message with its leading mentions.
        while let Some(after) = rest.strip_prefix('@') {
            rest = after.split_once(char::is_whitespace).map(|(_, r)| r.trim_start()).unwrap_or("");
        }
        let (typed, arguments) = match rest.split_once(char::is_whitespace) {
            Some((typed, arguments)) => (typed, arguments.trim()),
            None => (rest, ""),
        };
        let word = match (typed.strip_prefix('/'), typed.strip_prefix('$')) {
            (Some(word), _) if word.starts_with("mcp__") => word,
            (_, Some(word)) if word.starts_with("mcp__") => word,
            (_, Some(word))
                if word.split_once(':').is_some_and(|(server, _)| self.servers.iter().any(|s| s == server)) =>
            {
                word
            }
            _ => return None,
        };
        Some(Called { typed, word, arguments })
    }
}

/// A command as a message calls it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Called<'a> {
    /// As typed, with its sigil: `$skills:deploy-notes`.
    pub typed: &'a str,
    /// Without it: what [`Commands::find`] looks up.
    pub word: &'a str,
    /// The rest of the message, trimmed.
    pub arguments: &'a str,
}

/// The arguments of a prompt command, checked against what the prompt declares: none unknown,
/// none required missing. The error ends with the command's usage.
pub fn prompt_arguments(
    command: &str,
    declared: &[PromptArgument],
    arguments_text: &str,
) -> Result<JsonObject, CommandError> {
    let usage = format!(
        "usage: /{command}{}",
        declared
            .iter()
            .map(|a| if a.required == Some(true) { format!(" {}=…", a.name) } else { format!(" [{}=…]", a.name) })
            .collect::<String>()
    );
    let given = match parse_prompt_arguments(arguments_text) {
        Ok(given) => given,
        Err(source) => return Err(CommandError::Syntax { source, usage }),
    };
    let unknown: Vec<String> = given.keys().filter(|k| !declared.iter().any(|a| &a.name == *k)).cloned().collect();
    if !unknown.is_empty() {
        return Err(CommandError::UnknownArguments { command: command.to_string(), unknown, usage });
    }
    let missing: Vec<String> = declared
        .iter()
        .filter(|a| a.required == Some(true) && !given.contains_key(&a.name))
        .map(|a| a.name.clone())
        .collect();
    if !missing.is_empty() {
        return Err(CommandError::MissingArguments { command: command.to_string(), missing, usage });
    }
    Ok(given.into_iter().map(|(k, v)| (k, Value::String(v))).collect())
}

/// `key=value key2="quoted value" key3='it''s'` or one JSON object; values are strings.
pub fn parse_prompt_arguments(text: &str) -> Result<BTreeMap<String, String>, PromptArgumentsError> {
    let text = text.trim();
    if text.starts_with('{') {
        return json_prompt_arguments(text);
    }
    let mut out = BTreeMap::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            break;
        }
        let key = take_until(&mut chars, |c| c == '=' || c.is_whitespace());
        if chars.next() != Some('=') || key.is_empty() {
            return Err(PromptArgumentsError::NotKeyValue { key });
        }
        let value = match chars.next_if(|c| matches!(*c, '"' | '\'')) {
            Some(quote) => match quoted_value(&mut chars, quote) {
                Some(value) => value,
                None => return Err(PromptArgumentsError::Unclosed { key, quote }),
            },
            None => take_until(&mut chars, char::is_whitespace),
        };
        out.insert(key, value);
    }
    Ok(out)
}

/// One JSON object; values that are not strings are kept as their JSON text.
fn json_prompt_arguments(text: &str) -> Result<BTreeMap<String, String>, PromptArgumentsError> {
    let value: Value = serde_json::from_str(text).map_err(PromptArgumentsError::Json)?;
    let Value::Object(map) = value else {
        return Err(PromptArgumentsError::NotObject);
    };
    Ok(map
        .into_iter()
        .map(|(key, value)| match value {
            Value::String(s) => (key, s),
            other => (key, other.to_string()),
        })
        .collect())
}

/// The characters up to (not including) the first for which `stop` holds, or to the end.
fn take_until(chars: &mut std::iter::Peekable<std::str::Chars<'_>>, stop: impl Fn(char) -> bool) -> String {
    let mut taken = String::new();
    while let Some(c) = chars.next_if(|c| !stop(*c)) {
        taken.push(c);
    }
    taken
}

/// The rest of a value opened by `quote`, up to its closing quote (consumed); inside double
/// quotes a backslash escapes the next character. `None` when the quote is never closed.
fn quoted_value(chars: &mut std::iter::Peekable<std::str::Chars<'_>>, quote: char) -> Option<String> {
    let mut value = String::new();
    while let Some(c) = chars.next() {
        if c == '\\' && quote == '"' {
            if let Some(escaped) = chars.next() {
                value.push(escaped);
            }
        } else if c == quote {
            return Some(value);
        } else {
            value.push(c);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::skills::read_skill;

    #[test]
    fn prompt_arguments_accept_quotes_and_json() {
        let parsed = parse_prompt_arguments(r#"city=Paris note="two words" q='single "inner"' e="a\"b""#).unwrap();
        assert_eq!(parsed["city"], "Paris");
        assert_eq!(parsed["note"], "two words");
        assert_eq!(parsed["q"], "single \"inner\"");
        assert_eq!(parsed["e"], "a\"b");
        let json = parse_prompt_arguments(r#"{"city": "Paris", "days": 3}"#).unwrap();
        assert_eq!(json["days"], "3");
        assert!(parse_prompt_arguments("note=\"open").unwrap_err().to_string().contains("closing"));
        assert!(parse_prompt_arguments("bare").is_err());
    }

    fn snapshot(prompts: &[&str], skills: &[(&str, &str)]) -> ServerSnapshot {
        ServerSnapshot {
            prompts: prompts.iter().map(|name| Prompt::new(*name, None::<String>, None)).collect(),
            skills: skills.iter().map(|(uri, text)| read_skill(uri, text).unwrap()).collect(),
            ..ServerSnapshot::default()
        }
    }

    #[test]
    fn the_first_to_claim_a_name_keeps_it_and_aliases_are_given_only_when_unambiguous() {
        let skills = snapshot(
            &["greet"],
            &[
                ("skill://greet", "the skill named like the prompt"),
                ("skill://deploy-notes", "notes"),
                ("skill://x/deploy-notes/SKILL.md", "listed after the one of the same name"),
            ],
        );
        // `mcp__a__b__c` twice: server `a`'s prompt `b__c` and server `a__b`'s skill `c`.
        let a = snapshot(&["b__c"], &[]);
        let a_b = snapshot(&[], &[("skill://c", "c")]);
        let (commands, conflicts) = Commands::build([("a", &a), ("a__b", &a_b), ("skills", &skills)]);
        assert_eq!(commands.calls(), ["/mcp__a__b__c", "/mcp__skills__greet", "$skills:deploy-notes"]);
        let skipped: Vec<(&str, &str)> = conflicts.iter().map(|c| (c.name.as_str(), c.skipped.as_str())).collect();
        assert_eq!(
            skipped,
            [
                ("mcp__a__b__c", "skill `c` (skill://c) of mcp server `a__b`"),
                ("mcp__skills__greet", "skill `greet` (skill://greet) of mcp server `skills`"),
                (
                    "mcp__skills__deploy-notes",
                    "skill `deploy-notes` (skill://x/deploy-notes/SKILL.md) of mcp server `skills`"
                ),
            ]
        );
        assert_eq!(conflicts[1].kept, "prompt `greet` of mcp server `skills`");

        // Two long names that differ only where names are made valid: two commands (hashed
        // apart), one alias, so neither gets it.
        let long = "x".repeat(80);
        let texts = [format!("---\nname: {long}.\n---\nb"), format!("---\nname: {long}+\n---\nb")];
        let two = snapshot(&[], &[("skill://1", &texts[0]), ("skill://2", &texts[1])]);
        let (commands, conflicts) = Commands::build([("s", &two)]);
        assert!(conflicts.is_empty(), "{conflicts:?}");
        assert_eq!(commands.skills().filter(|(command, _)| command.alias.is_none()).count(), 2);
    }

    #[test]
    fn only_mcp_names_and_known_servers_are_commands() {
        let skills = snapshot(&["greet"], &[("skill://deploy-notes", "notes")]);
        let (commands, _) = Commands::build([("skills", &skills)]);
        let called = |text| commands.called(text).map(|c| (c.word, c.arguments));
        assert_eq!(called("@picogent $skills:deploy-notes staging now"), Some(("skills:deploy-notes", "staging now")));
        assert_eq!(called("$mcp__skills__deploy-notes"), Some(("mcp__skills__deploy-notes", "")));
        assert_eq!(called("/mcp__skills__greet city=Paris"), Some(("mcp__skills__greet", "city=Paris")));
        assert_eq!(called("$skills:nope"), Some(("skills:nope", "")), "a known server: an unknown command");
        for text in ["$5 for lunch?", "$HOME is set", "$other:deploy-notes", "/help", "please run $skills:deploy-notes"]
        {
            assert_eq!(called(text), None, "{text}");
        }
        assert_eq!(commands.find("skills:deploy-notes").unwrap().name, "mcp__skills__deploy-notes");
        assert!(matches!(commands.find("mcp__skills__greet").unwrap().target, Target::Prompt(_)));
        assert!(commands.find("skills:greet").is_none(), "prompts have no alias");
    }
}
