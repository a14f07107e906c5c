//! A person's reply to a form, read by picogent's own parser: `field: value` lines (field names
//! in any case), a JSON object, or for a form of one field the whole reply; each value read as its
//! field's type and the whole checked against the server's schema. Also the form's fields
//! described for the question, and what was understood said back.

use serde_json::{Map, Value};

use super::server_text;
use picogent_tools::person::reply_words;

/// What a reply to a form said.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum FormReply {
    Fields(Value),
    Decline,
    Cancel,
    /// It does not fit the schema: why.
    Unfit(String),
}

/// The fields of a form, one line each: name, whether required, what kind of value, and the
/// server's description.
pub(super) fn describe_fields(schema: &Value) -> String {
    let required: Vec<&str> =
        schema["required"].as_array().map(|r| r.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    let Some(properties) = schema["properties"].as_object() else { return "(no fields)".to_string() };
    properties
        .iter()
        .map(|(name, property)| {
            let need = if required.contains(&name.as_str()) { "required" } else { "optional" };
            let description = property["description"]
                .as_str()
                .or(property["title"].as_str())
                .map(|d| format!(" — {}", server_text(d)))
                .unwrap_or_default();
            format!("- `{}` ({need}): {}{description}", server_text(name), kind_of(property))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// What kind of value a field takes, in words.
fn kind_of(property: &Value) -> String {
    if let Some(options) = enum_values(property) {
        return format!(
            "one of {}",
            options.iter().map(|o| format!("`{}`", server_text(o))).collect::<Vec<_>>().join(", ")
        );
    }
    let range = match (property["minimum"].as_f64(), property["maximum"].as_f64()) {
        (Some(min), Some(max)) => format!(" from {min} to {max}"),
        (Some(min), None) => format!(" of at least {min}"),
        (None, Some(max)) => format!(" of at most {max}"),
        (None, None) => String::new(),
    };
    match property["type"].as_str() {
        Some("integer") => format!("a whole number{range}"),
        Some("number") => format!("a number{range}"),
        Some("boolean") => "yes or no".to_string(),
        _ => match property["format"].as_str() {
            Some(format) => format!("text ({})", server_text(format)),
            None => "text".to_string(),
        },
    }
}

/// The values of an enumeration (`enum`, or `oneOf` of `const`s), if the field is one.
fn enum_values(property: &Value) -> Option<Vec<String>> {
    if let Some(values) = property["enum"].as_array() {
        return Some(values.iter().filter_map(|v| v.as_str().map(str::to_string)).collect());
    }
    let options = property["oneOf"].as_array().or(property["anyOf"].as_array())?;
    Some(options.iter().filter_map(|o| o["const"].as_str().map(str::to_string)).collect())
}

/// A person's reply fitted to the form's schema, by this parser (the model is not asked to):
/// - `cancel` alone cancels, `decline` (`declined`, `refuse`) alone declines; `no` alone
///   declines too, unless the form has one field whose value it can be (a yes/no field: `false`);
/// - one JSON object: its members are the fields;
/// - a form of one field: the whole reply is its value (`19:00`, a link, several lines), unless
///   it is exactly `field: value` (or `field = value`) with that field's name;
/// - else `field: value` (or `field = value`) lines, several on a line when `;` comes before
///   another field's name; a line naming no field is passed over, one naming a field the form
///   does not have is refused (`https://…` is no field);
/// - field names in any case; values read as the schema's types, the whole checked against the
///   schema.
pub(super) fn fit_reply(content: &str, schema: &Value) -> FormReply {
    let words = picogent_prompts::clean_text(reply_words(content), 10_000);
    let words = words.trim();
    let properties = schema["properties"].as_object().cloned().unwrap_or_default();
    let only = (properties.len() == 1).then(|| properties.iter().next()).flatten();
    let lowered = words.trim_end_matches(['.', '!']).trim().to_lowercase();
    let mut words = words;
    match lowered.as_str() {
        "decline" | "declined" | "i decline" | "refuse" => return FormReply::Decline,
        "cancel" | "cancelled" | "canceled" => return FormReply::Cancel,
        // A `no` to a form of one field it is a value of (a yes/no field, an option `no`).
        "no" | "no thanks" | "no, thanks" => match only {
            Some((_, property)) if takes_no(property) => words = "no",
            _ => return FormReply::Decline,
        },
        _ => {}
    }
    // A field's name as the schema spells it, from a name in any case.
    let field = |name: &str| -> Option<String> {
        let name = name.trim().trim_matches(['`', '"', '\'', '*']).trim();
        properties.keys().find(|key| key.eq_ignore_ascii_case(name)).cloned()
    };
    let json = words.starts_with('{').then(|| serde_json::from_str::<Value>(words).ok()).flatten();
    let given: Map<String, Value> = match (json, only) {
        (Some(Value::Object(object)), _) => {
            object.into_iter().map(|(key, value)| (field(&key).unwrap_or(key), value)).collect()
        }
        (_, Some((name, _))) => {
            let value = match field_line(words) {
                Some((key, value)) if !words.contains('\n') && field(key).is_some() => value,
                _ => words,
            };
            Map::from_iter([(name.clone(), Value::String(value.to_string()))])
        }
        _ if words.starts_with('{') => return FormReply::Unfit("the JSON is not one object".to_string()),
        _ => {
            let mut given = Map::new();
            for line in words.lines() {
                for (key, value) in field_parts(line, &field) {
                    given.insert(field(&key).unwrap_or(key), Value::String(value));
                }
            }
            given
        }
    };
    let unknown: Vec<&String> = given.keys().filter(|key| !properties.contains_key(*key)).collect();
    if !unknown.is_empty() {
        let known: Vec<String> = properties.keys().map(|k| format!("`{k}`")).collect();
        return FormReply::Unfit(format!(
            "no field {} here (the fields are {})",
            unknown.iter().map(|k| format!("`{}`", server_text(k))).collect::<Vec<_>>().join(", "),
            known.join(", ")
        ));
    }
    let mut fields = Map::new();
    for (key, value) in given {
        let property = &properties[&key];
        match typed(&value, property) {
            Ok(value) => {
                fields.insert(key, value);
            }
            Err(why) => return FormReply::Unfit(format!("`{key}`: {why}")),
        }
    }
    let fields = Value::Object(fields);
    match jsonschema::validator_for(schema) {
        Ok(validator) => {
            let problems: Vec<String> = validator
                .iter_errors(&fields)
                .map(|error| {
                    let at = error.instance_path().to_string();
                    let at = at.trim_start_matches('/');
                    if at.is_empty() { error.to_string() } else { format!("`{at}`: {error}") }
                })
                .collect();
            if problems.is_empty() { FormReply::Fields(fields) } else { FormReply::Unfit(problems.join("; ")) }
        }
        // A schema that is no schema: the server's mistake; what the person said goes as given.
        Err(_) => FormReply::Fields(fields),
    }
}

/// Whether a reply to a form of several fields is in plain words: no JSON object, and no line
/// that names one of the form's fields (`field: value`). Only such a reply is fitted by the
/// model; fields the person wrote out are read as they wrote them.
pub(super) fn in_words(said: &str, schema: &Value) -> bool {
    let properties = schema["properties"].as_object().cloned().unwrap_or_default();
    if properties.len() < 2 {
        return false;
    }
    let words = picogent_prompts::clean_text(reply_words(said), 10_000);
    if words.trim_start().starts_with('{') {
        return false;
    }
    let field = |name: &str| -> Option<String> {
        let name = name.trim().trim_matches(['`', '"', '\'', '*']).trim();
        properties.keys().find(|key| key.eq_ignore_ascii_case(name)).cloned()
    };
    !words.lines().any(|line| field_parts(line, &field).iter().any(|(name, _)| field(name).is_some()))
}

/// The first JSON object in `text` (a model may put it in a code block, or add words around it).
pub(super) fn first_object(text: &str) -> Option<String> {
    let start = text.find('{')?;
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (at, c) in text[start..].char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_string => escaped = true,
            '"' => in_string = !in_string,
            '{' if !in_string => depth += 1,
            '}' if !in_string => {
                depth -= 1;
                if depth == 0 {
                    return Some(text[start..start + at + 1].to_string());
                }
            }
            _ => {}
        }
    }
    None
}

/// What was understood, as a person reads it: `version 1.4.2, confirm yes`, in the order the
/// form's `required` list gives (the order the server wrote its fields in), then the others.
pub(super) fn understood(fields: &Value, schema: &Value) -> String {
    let Some(fields) = fields.as_object() else { return String::new() };
    let required: Vec<&str> = schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let mut ordered: Vec<(&String, &Value)> = fields.iter().collect();
    ordered.sort_by_key(|(name, _)| required.iter().position(|r| r == name).unwrap_or(usize::MAX));
    let shown: Vec<String> = ordered
        .into_iter()
        .map(|(name, value)| {
            let value = match value {
                Value::Bool(true) => "yes".to_string(),
                Value::Bool(false) => "no".to_string(),
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            format!("{} {}", server_text(name), server_text(&value))
        })
        .collect();
    shown.join(", ")
}

/// Whether `no` is a value of the field: a yes/no field, or an option `no`.
fn takes_no(property: &Value) -> bool {
    property["type"] == "boolean"
        || enum_values(property).is_some_and(|options| options.iter().any(|o| o.eq_ignore_ascii_case("no")))
}

/// `name: value` (or `name = value`, after a list marker): the name and the value, where the
/// name is one word (letters, digits, `_`, `-`, `.`, in backticks or quotes or not) and the
/// separator is not a link's `://`.
fn field_line(line: &str) -> Option<(&str, &str)> {
    let line = line.trim().trim_start_matches(['-', '*', '•']).trim_start();
    let at = line.find([':', '='])?;
    let (name, rest) = (line[..at].trim(), &line[at + 1..]);
    if rest.starts_with("//") {
        return None;
    }
    let bare = name.trim_matches(['`', '"', '\'', '*']);
    let is_name = !bare.is_empty()
        && bare.chars().all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'))
        && name.len() <= bare.len() + 4;
    is_name.then_some((name, rest.trim()))
}

/// The `field: value` pairs of one line: one, or several where `;` comes before the name of
/// another of the form's fields (a `;` elsewhere is part of the value).
fn field_parts(line: &str, field: &impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    let Some((name, value)) = field_line(line) else { return Vec::new() };
    let mut parts = vec![(name.to_string(), String::new())];
    let mut rest = value;
    loop {
        let next = rest.match_indices(';').find_map(|(at, _)| {
            let after = &rest[at + 1..];
            field_line(after).filter(|(name, _)| field(name).is_some()).map(|_| at)
        });
        let Some(last) = parts.last_mut() else { break };
        match next {
            Some(at) => {
                last.1 = rest[..at].trim().to_string();
                let Some((name, value)) = field_line(&rest[at + 1..]) else { break };
                parts.push((name.to_string(), String::new()));
                rest = value;
            }
            None => {
                last.1 = rest.trim().to_string();
                break;
            }
        }
    }
    parts
}

/// Why a value the person wrote is not of its field's type, as they are told it.
#[derive(Debug, thiserror::Error)]
enum Mistyped {
    #[error("`{0}` is not a whole number")]
    WholeNumber(String),
    #[error("`{0}` is not a number")]
    Number(String),
    #[error("`{0}` is not yes or no")]
    YesOrNo(String),
}

/// One value read as its field's type.
fn typed(value: &Value, property: &Value) -> Result<Value, Mistyped> {
    let Value::String(text) = value else { return Ok(value.clone()) };
    let text = text.trim().trim_matches('`').trim_matches('"');
    if let Some(options) = enum_values(property)
        && let Some(option) = options.iter().find(|option| option.eq_ignore_ascii_case(text))
    {
        return Ok(Value::String(option.clone()));
    }
    match property["type"].as_str() {
        Some("integer") => text
            .trim_end_matches(['.', '!'])
            .parse::<i64>()
            .map(Value::from)
            .map_err(|_| Mistyped::WholeNumber(text.to_string())),
        Some("number") => text
            .trim_end_matches(['.', '!'])
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number)
            .ok_or_else(|| Mistyped::Number(text.to_string())),
        Some("boolean") => match text.trim_end_matches(['.', '!']).to_lowercase().as_str() {
            "yes" | "y" | "true" | "1" | "on" => Ok(Value::Bool(true)),
            "no" | "n" | "false" | "0" | "off" => Ok(Value::Bool(false)),
            _ => Err(Mistyped::YesOrNo(text.to_string())),
        },
        _ => Ok(Value::String(text.to_string())),
    }
}
