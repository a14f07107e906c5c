//! picogent's own words for a tool and for what a call of it returns: [`ToolDefinition`] (with
//! its [`ToolHints`] and, for a tool of an external MCP server, its [`ToolOrigin`]) and
//! [`ToolResult`]. Every tool source speaks these, and the loop and the model client read them.
//!
//! Invariant: MCP's wire types (rmcp's `Tool`, `CallToolResult`) appear in the MCP crate only,
//! which converts at its edge: a tool served over MCP, or one an external server lists, is
//! translated there and nowhere else.

use std::sync::Arc;

use serde_json::Value;

/// A JSON object, as a schema is written.
pub type JsonObject = serde_json::Map<String, Value>;

/// What a tool says about its calls (MCP's tool annotations): the permission policy, the run's
/// scope and the loop's concurrency believe them only as far as their source is trusted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ToolHints {
    /// It changes nothing.
    pub read_only: Option<bool>,
    /// A write may destroy or overwrite what was there (unsaid: yes).
    pub destructive: Option<bool>,
    /// Calling it twice with the same arguments does no more than once.
    pub idempotent: Option<bool>,
    /// It reaches past the tracker (the web, another service).
    pub open_world: Option<bool>,
}

impl ToolHints {
    /// The hints of a tool that only reads.
    pub fn read_only() -> ToolHints {
        ToolHints { read_only: Some(true), destructive: Some(false), idempotent: Some(true), open_world: Some(false) }
    }

    /// The hints of a tool that writes.
    pub fn write(destructive: bool, idempotent: bool) -> ToolHints {
        ToolHints {
            read_only: Some(false),
            destructive: Some(destructive),
            idempotent: Some(idempotent),
            open_world: Some(false),
        }
    }

    /// Whether it says nothing at all.
    pub fn is_empty(&self) -> bool {
        *self == ToolHints::default()
    }
}

/// Where a tool of an external MCP server comes from, as the MCP host offers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOrigin {
    /// The server's name in `mcp_servers`.
    pub server: String,
    /// The tool's name on that server (the offered name is `mcp__<server>__<tool>`).
    pub tool: String,
    /// Whether the operator marked the server `trusted`.
    pub trusted: bool,
}

/// One tool as it is offered: to the model (name, description, argument schema) and to the
/// policy (hints, origin).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDefinition {
    pub name: String,
    /// A short name for people.
    pub title: Option<String>,
    pub description: String,
    /// The JSON Schema of the arguments object, shared (a run offers its tools without copying
    /// their schemas, and the model client keeps what it worked out per schema).
    pub input_schema: Arc<JsonObject>,
    /// The shape of the result's structured content, when it is stable.
    pub output_schema: Option<Arc<JsonObject>>,
    pub hints: ToolHints,
    /// `None` for picogent's own tools.
    pub origin: Option<ToolOrigin>,
}

impl ToolDefinition {
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Arc<JsonObject>,
    ) -> ToolDefinition {
        ToolDefinition {
            name: name.into(),
            title: None,
            description: description.into(),
            input_schema,
            output_schema: None,
            hints: ToolHints::default(),
            origin: None,
        }
    }

    pub fn with_hints(self, hints: ToolHints) -> ToolDefinition {
        ToolDefinition { hints, ..self }
    }

    /// What the model is offered of it.
    pub fn spec(&self) -> picogent_llm::ToolSpec {
        picogent_llm::ToolSpec {
            name: self.name.clone(),
            description: self.description.clone(),
            parameters: self.input_schema.clone(),
        }
    }

    /// The server and original name of the tool (`None` server for picogent's own tools).
    pub fn origin(&self) -> (Option<&str>, &str) {
        match &self.origin {
            Some(origin) => (Some(origin.server.as_str()), origin.tool.as_str()),
            None => (None, self.name.as_str()),
        }
    }

    pub fn is_read_only(&self) -> bool {
        self.hints.read_only == Some(true)
    }

    /// Whether it is a read on trust: a read-only tool of picogent's own, or of an MCP server
    /// marked `trusted`. Only such a read runs beside other reads, and is offered in `read_only`
    /// mode; a read-only tool of a server not marked trusted is believed for the run's scope only.
    pub fn is_trusted_read(&self) -> bool {
        self.is_read_only() && self.origin.as_ref().is_none_or(|origin| origin.trusted)
    }

    /// Whether a call may destroy something: any tool not read-only that does not say otherwise.
    pub fn is_destructive(&self) -> bool {
        !self.is_read_only() && self.hints.destructive.unwrap_or(true)
    }
}

/// A schema written with `json!` as the shared object a definition holds; anything but an object
/// (a mistake of the code that wrote it) is the empty schema.
pub fn object_schema(schema: Value) -> Arc<JsonObject> {
    match schema {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

/// What the model is offered of `definitions`, in their order.
pub fn specs(definitions: &[ToolDefinition]) -> Vec<picogent_llm::ToolSpec> {
    definitions.iter().map(ToolDefinition::spec).collect()
}

/// What a call returned: text for the model, the full answer as JSON where the tool has one, and
/// whether it failed. A failure is a result like any other: the model reads why.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    pub text: String,
    /// The full answer; MCP clients take it as `structuredContent`.
    pub structured: Option<Value>,
    pub is_error: bool,
}

impl ToolResult {
    pub fn success(text: impl Into<String>) -> ToolResult {
        ToolResult { text: text.into(), structured: None, is_error: false }
    }

    pub fn error(text: impl Into<String>) -> ToolResult {
        ToolResult { text: text.into(), structured: None, is_error: true }
    }

    pub fn with_structured(self, structured: Value) -> ToolResult {
        ToolResult { structured: Some(structured), ..self }
    }
}
