//! `PICOGENT_*` overrides of list fields: a comma list or a JSON array, checked here so a value
//! that is neither is an error naming the variable instead of one odd item.

use crate::ENV_PREFIX;

/// The fields that hold lists; their `PICOGENT_*` overrides take a comma list or a JSON array.
pub(super) const LIST_FIELDS: [&str; 10] = [
    "capabilities",
    "allowed_bots",
    "http.allowed_hosts",
    "mcp.allowed_origins",
    "mcp.allowed_hosts",
    "permissions.allowed_tools",
    "permissions.disallowed_tools",
    "permissions.ask_tools",
    "permissions.cross_scope_tools",
    "delegation.labels",
];

/// What a list field's override is told to be.
const EXPECTED: &str = "expected a comma list (a,b) or a JSON array of strings ([\"a\",\"b\"])";

/// Why the `PICOGENT_*` override of a list field cannot be read as a list.
#[derive(Debug, thiserror::Error)]
pub enum ListOverrideError {
    /// The value starts like a JSON array but is not one of strings.
    #[error("{value:?} is not a JSON array of strings; {}", EXPECTED)]
    NotJsonArray { value: String },
    /// An item that is empty, or holds a bracket, a quote or a comma.
    #[error("{item:?} is not a valid item; {}", EXPECTED)]
    BadItem { item: String },
}

/// An override's value as the comma list the environment source splits: a JSON array
/// (`["a","b"]`) becomes `a,b`; a comma list stays. Anything else for a list field is an error
/// saying what is expected.
/// An empty JSON array (`[]`) becomes the empty string, which the environment source cannot
/// tell from one empty item: [`Config::load_with_env`](crate::Config::load_with_env) sets those
/// fields to an empty list itself.
pub(super) fn list_override(key: &str, value: &str) -> Result<String, ListOverrideError> {
    if list_field(key).is_none() {
        return Ok(value.to_string());
    }
    let items: Vec<String> = if value.trim_start().starts_with('[') {
        // The parser's own words (`expected value at line 1 column 2`) would not help here.
        serde_json::from_str(value).map_err(|_| ListOverrideError::NotJsonArray { value: value.to_string() })?
    } else {
        value.split(',').map(|item| item.trim().to_string()).collect()
    };
    if let Some(bad) = items.iter().find(|item| item.is_empty() || item.contains(['[', ']', '"', ','])) {
        return Err(ListOverrideError::BadItem { item: bad.clone() });
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
