//! The two tools as the model sees them: their definitions, what each call may change, and the
//! call itself turned into a tool result.

use futures::future::BoxFuture;
use picogent_tools::definition::object_schema;
use picogent_tools::scope::{Judgement, ReachError};
use picogent_tools::{CallEffect, ToolContext, ToolDefinition, ToolError, ToolHints, ToolResult, ToolSource};
use serde_json::json;

use super::{CODING_TOOLS, CodingError, CodingTools, RUN_CODING_AGENT, WORKSPACE_STATUS};

fn definitions() -> Vec<ToolDefinition> {
    let run = ToolDefinition::new(
        RUN_CODING_AGENT,
        "Delegate a coding change to the coding agent, working in this task's git workspace (its own branch, \
         picogent/<task key>). Give it complete, self-contained instructions: what to change, where, and how to \
         check it. When it finishes, its work is committed and pushed to the task's branch; the answer gives its \
         exit, final message, the files changed and the commit. Check the result with workspace_status.",
        object_schema(json!({
            "type": "object",
            "properties": {
                "instructions": {"type": "string", "description": "What the coding agent is to do, in full."},
                "agent": {"type": "string", "description": "A configured coding agent by name; omit for the default."}
            },
            "required": ["instructions"],
            "additionalProperties": false
        })),
    )
    .with_hints(ToolHints { open_world: Some(true), ..ToolHints::write(true, false) });
    let status = ToolDefinition::new(
        WORKSPACE_STATUS,
        "This task's git workspace: its branch, the files changed and not committed yet, the commits beyond the \
         base branch, and the diff stat. Reads only.",
        object_schema(json!({"type": "object", "properties": {}, "additionalProperties": false})),
    )
    .with_hints(ToolHints::read_only());
    vec![run, status]
}

fn text_result(text: String, structured: serde_json::Value, is_error: bool) -> ToolResult {
    ToolResult { text, structured: Some(structured), is_error }
}

fn error_result(error: &CodingError) -> ToolResult {
    let message = error.to_string();
    text_result(message.clone(), json!({"error": {"code": "coding", "message": message}}), true)
}

impl ToolSource for CodingTools {
    fn tools(&self) -> Vec<ToolDefinition> {
        definitions()
    }

    fn effect(&self, name: &str, _arguments: &serde_json::Value, _context: &ToolContext) -> Option<CallEffect> {
        match name {
            RUN_CODING_AGENT => Some(CallEffect::Consequential(
                "run the coding agent in this task's workspace, then commit and push its branch".to_string(),
            )),
            WORKSPACE_STATUS => Some(CallEffect::Routine),
            _ => None,
        }
    }

    /// Both tools reach only the run's own task: its workspace and its branch.
    fn reach<'a>(
        &'a self,
        name: &'a str,
        _arguments: &'a serde_json::Value,
        _context: &'a ToolContext,
    ) -> BoxFuture<'a, Option<Result<Judgement, ReachError>>> {
        Box::pin(async move { CODING_TOOLS.contains(&name).then(|| Ok(Judgement::within_run())) })
    }

    fn call<'a>(
        &'a self,
        name: &'a str,
        arguments: serde_json::Value,
        context: &'a ToolContext,
    ) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            match name {
                WORKSPACE_STATUS => match self.status(context).await {
                    Ok((workspace, status)) => {
                        let text = format!(
                            "Branch {} (from {}). Not committed: {}. Commits beyond {}: {}. {}.",
                            status.branch,
                            status.base,
                            if status.changed.is_empty() { "nothing".to_string() } else { status.changed.join(", ") },
                            status.base,
                            if status.commits.is_empty() { "none".to_string() } else { status.commits.join("; ") },
                            status.diff.describe(),
                        );
                        let structured = json!({"repository": workspace.repository, "status": status});
                        text_result(text, structured, false)
                    }
                    Err(error) => error_result(&error),
                },
                RUN_CODING_AGENT => {
                    let instructions = arguments.get("instructions").and_then(|value| value.as_str());
                    let agent = arguments.get("agent").and_then(|value| value.as_str());
                    let Some(instructions) = instructions.filter(|text| !text.trim().is_empty()) else {
                        let got = match arguments.get("instructions") {
                            None => "nothing".to_string(),
                            Some(value) => value.to_string(),
                        };
                        let expected =
                            "the coding agent's instructions in full: what to change, where, and how to check it";
                        return ToolError::invalid("instructions", expected, got).into_result();
                    };
                    let task = match self.task_of(context).await {
                        Ok(task) => task,
                        Err(error) => return error_result(&error),
                    };
                    match self.work(&task, instructions, agent, context.run_id.as_deref(), &context.cancel).await {
                        Ok(outcome) => {
                            let failed = !outcome.report.finished();
                            let structured = serde_json::to_value(&outcome).unwrap_or_default();
                            text_result(outcome.text(), structured, failed)
                        }
                        Err(error) => error_result(&error),
                    }
                }
                other => ToolError::UnknownTool {
                    name: other.to_string(),
                    suggestions: CODING_TOOLS.iter().map(|name| name.to_string()).collect(),
                }
                .into_result(),
            }
        })
    }
}
