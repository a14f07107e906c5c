//! `PICOGENT_*` overrides of list fields: a comma list or a JSON array, checked here so a value
//! that is neither is an error naming the variable instead of one odd item.

use super::ENV_PREFIX;

/// The fields that hold lists; their `PICOGENT_*` overrides take a comma list or a JSON array.
pub(super) const LIST_FIELDS: [&str; 6] = [
    "capabilities",
    "allowed_bots",
    "mcp.allowed_origins",
    "mcp.allowed_hosts",
    "permissions.allowed_tools",
    "permissions.disallowed_tools",
];

/// An override's value as the comma list the environment source splits: a JSON array
/// (`["a","b"]`) becomes `a,b`; a comma list stays. Anything else for a list field is an error
/// saying what is expected.
pub(super) fn list_override(key: &str, value: &str) -> Result<String, String> {
    let field = key.trim_start_matches(&format!("{ENV_PREFIX}_")).to_lowercase().replace("__", ".");
    if !LIST_FIELDS.contains(&field.as_str()) {
        return Ok(value.to_string());
    }
    let expected = "expected a comma list (a,b) or a JSON array of strings ([\"a\",\"b\"])";
    let items: Vec<String> = if value.trim_start().starts_with('[') {
        serde_json::from_str(value).map_err(|_| format!("{value:?} is not a JSON array of strings; {expected}"))?
    } else {
        value.split(',').map(|item| item.trim().to_string()).collect()
    };
    if let Some(bad) = items.iter().find(|item| item.is_empty() || item.contains(['[', ']', '"', ','])) {
        return Err(format!("{bad:?} is not a valid item; {expected}"));
    }
    Ok(items.join(","))
}
