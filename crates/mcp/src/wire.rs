//! The one place MCP's wire types meet picogent's own: a tool definition and a call's result
//! ([`picogent_tools::ToolDefinition`], [`picogent_tools::ToolResult`]) to and from rmcp's
//! `Tool` and `CallToolResult`. The server sends what it offers through here, and the host reads
//! what an external server lists through here; nothing below this crate knows rmcp.

use picogent_tools::{ToolDefinition, ToolHints, ToolResult};
use rmcp::model::{CallToolResult, ContentBlock, Tool, ToolAnnotations};

/// A tool as MCP lists it. Hints that say nothing are no annotations at all.
pub fn tool_to_mcp(tool: &ToolDefinition) -> Tool {
    let mut listed = Tool::new(tool.name.clone(), tool.description.clone(), tool.input_schema.clone());
    if let Some(title) = &tool.title {
        listed = listed.with_title(title.clone());
    }
    if let Some(output) = &tool.output_schema {
        listed = listed.with_raw_output_schema(output.clone());
    }
    if !tool.hints.is_empty() {
        let hints = tool.hints;
        let mut annotations = ToolAnnotations::new();
        annotations.read_only_hint = hints.read_only;
        annotations.destructive_hint = hints.destructive;
        annotations.idempotent_hint = hints.idempotent;
        annotations.open_world_hint = hints.open_world;
        listed = listed.with_annotations(annotations);
    }
    listed
}

/// A tool an external server listed, in picogent's words, its name and origin still the
/// server's (the host sets both as it offers it). Icons, `_meta` and the rest are dropped.
pub fn tool_from_mcp(tool: &Tool) -> ToolDefinition {
    let hints = tool.annotations.as_ref().map_or_else(ToolHints::default, |annotations| ToolHints {
        read_only: annotations.read_only_hint,
        destructive: annotations.destructive_hint,
        idempotent: annotations.idempotent_hint,
        open_world: annotations.open_world_hint,
    });
    ToolDefinition {
        name: tool.name.to_string(),
        title: tool.title.clone(),
        description: tool.description.as_deref().unwrap_or_default().to_string(),
        input_schema: tool.input_schema.clone(),
        output_schema: tool.output_schema.clone(),
        hints,
        origin: None,
    }
}

/// A result as MCP answers it: its text as one text block, its structured content, its error flag.
pub fn result_to_mcp(result: ToolResult) -> CallToolResult {
    let content = vec![ContentBlock::text(result.text)];
    let mut answer = if result.is_error { CallToolResult::error(content) } else { CallToolResult::success(content) };
    answer.structured_content = result.structured;
    answer
}
