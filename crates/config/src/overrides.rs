//! `PICOGENT_*` overrides of list fields: a comma list or a JSON array, checked here so a value
//! that is neither is an error naming the variable instead of one odd item.

use crate::ENV_PREFIX;

/// The fields that hold lists; their `PICOGENT_*` overrides take a comma list or a JSON array.
pub(super) const LIST_FIELDS: [&str; 9] = [
    "capabilities",
    "allowed_bots",
    "http.allowed_hosts",
    "mcp.allowed_origins",
    "mcp.allowed_hosts",
    "permissions.allowed_tools",
    "permissions.disallowed_tools",
    "permissions.ask_tools",
    "permissions.cross_scope_tools",
];

/// An override's value as the comma list the environment source splits: a JSON array
/// (`["a","b"]`) becomes `a,b`; a comma list stays. Anything else for a list field is an error
/// saying what is expected.
/// An empty JSON array (`[]`) becomes the empty string, which the environment source cannot
/// tell from one empty item: [`Config::load_with_env`](crate::Config::load_with_env) sets those
/// fields to an empty list itself.
pub(super) fn list_override(key: &str, value: &str) -> Result<String, String> {
    if list_field(key).is_none() {
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

/// The field a `PICOGENT_*` variable overrides: `PICOGENT_LIMITS__MAX_TURNS` → `limits.max_turns`.
pub(super) fn field_of(variable: &str) -> String {
    variable.strip_prefix(&format!("{ENV_PREFIX}_")).unwrap_or(variable).to_lowercase().replace("__", ".")
}

/// The list field a `PICOGENT_*` variable overrides (`PICOGENT_PERMISSIONS__ASK_TOOLS` →
/// `permissions.ask_tools`), if it names one.
pub(super) fn list_field(key: &str) -> Option<String> {
    let field = field_of(key);
    LIST_FIELDS.contains(&field.as_str()).then_some(field)
}
