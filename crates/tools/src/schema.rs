//! The JSON Schemas of the tools' arguments and answers, and the check of a call's arguments
//! against them.
//!
//! Invariants:
//! - schemas are generated from the typed argument structs (schemars), then cleaned of what costs
//!   a model tokens without helping it; the `///` line of each field is its description;
//! - arguments are checked against the compiled schema before they are parsed into the typed
//!   struct, and every way they break it becomes an [`ArgumentProblem`] naming the field, what it
//!   expects and what came.

use crate::definition::JsonObject;
use schemars::JsonSchema;
use serde_json::{Value, json};

use crate::error::{ArgumentProblem, ToolError};
use crate::format;

/// A tool's input schema, compiled once: what a call's arguments are checked against.
pub(super) struct ArgumentSchema {
    schema: Value,
    validator: jsonschema::Validator,
}

impl ArgumentSchema {
    /// Compiles `schema`; the error says why it does not compile.
    pub(super) fn compile(schema: Value) -> Result<ArgumentSchema, jsonschema::ValidationError<'static>> {
        let validator = jsonschema::validator_for(&schema)?;
        Ok(ArgumentSchema { schema, validator })
    }

    /// The arguments a tool may be run with: `null` taken as no arguments, `null`s of fields that
    /// do not allow it dropped, the rest fitting the schema.
    pub(super) fn check(&self, arguments: Value) -> Result<Value, ToolError> {
        // Models often send `null` or nothing for a tool without parameters.
        let mut arguments = if arguments.is_null() { Value::Object(Default::default()) } else { arguments };
        drop_null_arguments(&self.schema, &mut arguments);
        let problems = validation_problems(&self.validator, &self.schema, &arguments);
        if problems.is_empty() { Ok(arguments) } else { Err(ToolError::InvalidArguments(problems)) }
    }
}

fn schema_settings() -> schemars::generate::SchemaSettings {
    schemars::generate::SchemaSettings::draft2020_12().with(|settings| {
        settings.inline_subschemas = true;
        settings.meta_schema = None;
    })
}

/// The input schema of an argument type: generated, inlined and stripped of what costs tokens
/// without helping a model.
pub fn input_schema_for<T: JsonSchema>() -> Value {
    let schema = schema_settings().for_deserialize().into_generator().into_root_schema_for::<T>();
    let mut value = schema.to_value();
    clean_schema(&mut value, false);
    value
}

/// The output schema of a type, generated the same way as input schemas.
pub fn output_schema_for<T: JsonSchema>() -> Option<Value> {
    let schema = schema_settings().for_serialize().into_generator().into_root_schema_for::<T>();
    let mut value = schema.to_value();
    clean_schema(&mut value, true);
    Some(value)
}

/// Marks an `Option` field whose `null` means something (clears a value) rather than "absent".
const NULLABLE: &str = "x-nullable";

/// Shapes a generated schema for a model: removes `$schema`, `title`, `format` and `minLength`
/// keywords (never properties of those names) and `"default": null`; flattens the
/// `anyOf: [X, {type: null}]` that schemars makes of `Option<X>` into X. `null` stays allowed only
/// where a field is marked [`NULLABLE`]; elsewhere an optional field is simply left out, and
/// [`drop_null_arguments`] treats a `null` a model sends anyway as left out.
///
/// Output schemas (`for_output`) keep every `null`: an answer's `null` is a real value.
fn clean_schema(schema: &mut Value, for_output: bool) {
    let Value::Object(object) = schema else { return };
    for keyword in ["$schema", "title", "format", "minLength"] {
        object.remove(keyword);
    }
    if object.get("default").is_some_and(Value::is_null) {
        object.remove("default");
    }
    let mut had_null = object.get("type").and_then(Value::as_array).is_some_and(|t| t.contains(&json!("null")));
    if let Some(Value::Array(branches)) = object.get("anyOf")
        && branches.len() == 2
        && branches[1] == json!({"type": "null"})
        && let Value::Object(inner) = branches[0].clone()
    {
        object.remove("anyOf");
        for (key, value) in inner {
            object.entry(key).or_insert(value);
        }
        had_null = true;
    }
    let nullable = object.remove(NULLABLE).is_some_and(|marker| marker == Value::Bool(true));
    set_null_allowed(object, nullable || (for_output && had_null));
    if let Some(Value::Object(properties)) = object.get_mut("properties") {
        for property in properties.values_mut() {
            clean_schema(property, for_output);
        }
    }
    if let Some(items) = object.get_mut("items") {
        clean_schema(items, for_output);
        // An item's description is its type's doc; the field's own description says it better.
        if let Value::Object(items) = items {
            items.remove("description");
        }
    }
    for keyword in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(branches)) = object.get_mut(keyword) {
            branches.iter_mut().for_each(|branch| clean_schema(branch, for_output));
        }
    }
}

fn set_null_allowed(object: &mut JsonObject, allowed: bool) {
    let mut types: Vec<Value> = match object.get("type") {
        Some(Value::String(single)) => vec![json!(single)],
        Some(Value::Array(types)) => types.clone(),
        _ => return,
    };
    types.retain(|t| t != "null");
    if allowed {
        types.push(json!("null"));
    }
    let single = types.len() == 1;
    object.insert("type".into(), if single { types.remove(0) } else { Value::Array(types) });
    if let Some(Value::Array(options)) = object.get_mut("enum") {
        options.retain(|o| !o.is_null());
        if allowed {
            options.push(Value::Null);
        }
    }
}

/// Removes top-level arguments that are `null` where the schema does not allow `null`: models
/// often send every optional field, unset ones as `null`, and they mean "left out".
fn drop_null_arguments(schema: &Value, arguments: &mut Value) {
    let (Some(properties), Value::Object(arguments)) = (schema.get("properties"), arguments) else { return };
    arguments.retain(|name, value| {
        if !value.is_null() {
            return true;
        }
        let allows_null = properties.get(name).and_then(|p| p.get("type")).is_some_and(|t| match t {
            Value::String(single) => single == "null",
            Value::Array(types) => types.contains(&json!("null")),
            _ => false,
        });
        // Unknown fields stay, so validation names them.
        allows_null || properties.get(name).is_none()
    });
}

/// Every way `arguments` break the schema, as problems naming the field, what it expects and
/// what came.
fn validation_problems(validator: &jsonschema::Validator, schema: &Value, arguments: &Value) -> Vec<ArgumentProblem> {
    let mut problems = Vec::new();
    for error in validator.iter_errors(arguments) {
        let path: Vec<Segment> = error
            .instance_path()
            .segments()
            .map(|segment| match segment {
                jsonschema::paths::LocationSegment::Property(name) => Segment::Property(name.into_owned()),
                jsonschema::paths::LocationSegment::Index(index) => Segment::Index(index),
            })
            .collect();
        let field = field_name(&path);
        let field_schema = schema_at(schema, &path);
        let got = preview(error.instance());
        use jsonschema::error::ValidationErrorKind as Kind;
        let problem = match error.kind() {
            Kind::Required { property } => {
                let property = property.as_str().unwrap_or_default().to_string();
                let mut path = path.clone();
                path.push(Segment::Property(property.clone()));
                let expected = schema_at(schema, &path).map(describe_schema).unwrap_or_else(|| "a value".into());
                ArgumentProblem {
                    field: field_name(&path),
                    expected,
                    got: "nothing; it is required".to_string(),
                    unknown_field: false,
                }
            }
            Kind::AdditionalProperties { unexpected } => {
                let known: Vec<String> = field_schema
                    .and_then(|s| s.get("properties"))
                    .and_then(Value::as_object)
                    .map(|p| p.keys().cloned().collect())
                    .unwrap_or_default();
                for name in unexpected {
                    let mut path = path.clone();
                    path.push(Segment::Property(name.clone()));
                    problems.push(ArgumentProblem {
                        field: field_name(&path),
                        expected: format!("its fields are: {}", known.join(", ")),
                        got: preview(&error.instance()[name.as_str()]),
                        unknown_field: true,
                    });
                }
                continue;
            }
            Kind::MaxLength { limit } => ArgumentProblem {
                field,
                expected: format!("at most {limit} characters"),
                got: format!("{} characters", error.instance().as_str().map(|s| s.chars().count()).unwrap_or(0)),
                unknown_field: false,
            },
            Kind::MaxItems { limit } => ArgumentProblem {
                field,
                expected: format!("at most {limit} items"),
                got: format!("{} items", error.instance().as_array().map(Vec::len).unwrap_or(0)),
                unknown_field: false,
            },
            Kind::Minimum { .. } | Kind::Maximum { .. } | Kind::Type { .. } | Kind::Enum { .. } => ArgumentProblem {
                field,
                expected: field_schema.map(describe_schema).unwrap_or_else(|| error.to_string()),
                got,
                unknown_field: false,
            },
            _ => ArgumentProblem { field, expected: error.to_string(), got, unknown_field: false },
        };
        problems.push(problem);
    }
    problems
}

#[derive(Debug, Clone)]
enum Segment {
    Property(String),
    Index(usize),
}

/// `labels[2]`, `status`, or empty for the whole.
fn field_name(path: &[Segment]) -> String {
    let mut name = String::new();
    for segment in path {
        match segment {
            Segment::Property(property) => {
                if !name.is_empty() {
                    name.push('.');
                }
                name.push_str(property);
            }
            Segment::Index(index) => name.push_str(&format!("[{index}]")),
        }
    }
    name
}

fn schema_at<'s>(schema: &'s Value, path: &[Segment]) -> Option<&'s Value> {
    let mut current = schema;
    for segment in path {
        current = match segment {
            Segment::Property(name) => current.get("properties")?.get(name)?,
            Segment::Index(_) => current.get("items")?,
        };
    }
    Some(current)
}

/// What a schema accepts, in words: "one of: low, medium", "a string of at most 200 characters".
fn describe_schema(schema: &Value) -> String {
    if let Some(options) = schema.get("enum").and_then(Value::as_array) {
        let words: Vec<String> =
            options.iter().map(|o| o.as_str().map(str::to_string).unwrap_or_else(|| o.to_string())).collect();
        return format!("one of: {}", words.join(", "));
    }
    let types: Vec<&str> = match schema.get("type") {
        Some(Value::String(single)) => vec![single.as_str()],
        Some(Value::Array(many)) => many.iter().filter_map(Value::as_str).filter(|t| *t != "null").collect(),
        _ => vec![],
    };
    let nullable = schema.get("type").and_then(Value::as_array).is_some_and(|t| t.contains(&json!("null")));
    let mut words = match types.as_slice() {
        ["string"] => match schema.get("maxLength").and_then(Value::as_u64) {
            Some(max) => format!("a string of at most {max} characters"),
            None => "a string".to_string(),
        },
        ["integer"] => {
            let minimum = schema.get("minimum").and_then(Value::as_i64);
            let maximum = schema.get("maximum").and_then(Value::as_i64);
            match (minimum, maximum) {
                (Some(low), Some(high)) => format!("an integer from {low} to {high}"),
                (Some(low), None) => format!("an integer of at least {low}"),
                _ => "an integer".to_string(),
            }
        }
        ["boolean"] => "true or false".to_string(),
        ["array"] => match schema.get("items") {
            Some(items) => format!("an array of {}", describe_schema(items)),
            None => "an array".to_string(),
        },
        ["object"] => "an object".to_string(),
        [] => "a value".to_string(),
        several => several.join(" or "),
    };
    if nullable {
        words.push_str(" or null");
    }
    words
}

/// A short rendering of a value for error messages.
fn preview(value: &Value) -> String {
    let kind = match value {
        Value::Null => return "null".to_string(),
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    let text = value.to_string();
    let short = format::truncate_chars(&text, 60);
    format!("{kind} {short}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_schema_keeps_properties_named_title() {
        let mut schema = json!({
            "$schema": "x", "title": "Args", "type": "object",
            "properties": {
                "title": {"type": "string", "title": "t"},
                "limit": {"type": ["integer", "null"], "format": "uint32"},
                "status": {"anyOf": [{"type": "string", "enum": ["a", "b"]}, {"type": "null"}], "description": "d"},
                "description": {"type": ["string", "null"], "x-nullable": true, "minLength": 1}
            }
        });
        clean_schema(&mut schema, false);
        assert_eq!(
            schema,
            json!({
                "type": "object",
                "properties": {
                    "title": {"type": "string"},
                    "limit": {"type": "integer"},
                    "status": {"type": "string", "enum": ["a", "b"], "description": "d"},
                    "description": {"type": ["string", "null"]}
                }
            })
        );
    }

    #[test]
    fn describes_schemas_in_words() {
        assert_eq!(describe_schema(&json!({"type": "string", "maxLength": 200})), "a string of at most 200 characters");
        assert_eq!(
            describe_schema(&json!({"type": "integer", "minimum": 1, "maximum": 200})),
            "an integer from 1 to 200"
        );
        assert_eq!(
            describe_schema(&json!({"type": ["string", "null"], "enum": ["a", "b", null]})),
            "one of: a, b, null"
        );
    }
}
