//! [`CombinedSource`]: several tool sources offered as one (the tracker's registry, then the MCP
//! host), so the permission policy wraps them all at once.

use std::collections::BTreeSet;
use std::sync::Arc;

use futures::future::BoxFuture;

use crate::{CallEffect, ToolContext, ToolDefinition, ToolResult, ToolSource};

/// Several sources as one, in a fixed order. A name offered by two sources goes to the first.
pub struct CombinedSource {
    sources: Vec<Arc<dyn ToolSource>>,
}

impl CombinedSource {
    pub fn new(sources: impl IntoIterator<Item = Arc<dyn ToolSource>>) -> CombinedSource {
        CombinedSource { sources: sources.into_iter().collect() }
    }
}

impl ToolSource for CombinedSource {
    fn tools(&self) -> Vec<ToolDefinition> {
        let mut seen = BTreeSet::new();
        let mut tools = Vec::new();
        for source in &self.sources {
            for tool in source.tools() {
                if seen.insert(tool.name.clone()) {
                    tools.push(tool);
                } else {
                    tracing::warn!(tool = %tool.name, "two tool sources offer the same name; the first one wins");
                }
            }
        }
        tools
    }

    fn tool(&self, name: &str) -> Option<ToolDefinition> {
        self.sources.iter().find_map(|source| source.tool(name))
    }

    fn effect(&self, name: &str, arguments: &serde_json::Value, context: &ToolContext) -> Option<CallEffect> {
        // The source that would run the call judges it, as `call` routes it.
        self.sources.iter().find(|source| source.tool(name).is_some())?.effect(name, arguments, context)
    }

    fn reach<'a>(
        &'a self,
        name: &'a str,
        arguments: &'a serde_json::Value,
        context: &'a ToolContext,
    ) -> BoxFuture<'a, Option<Result<crate::scope::Judgement, crate::scope::ReachError>>> {
        Box::pin(async move {
            let source = self.sources.iter().find(|source| source.tool(name).is_some())?;
            source.reach(name, arguments, context).await
        })
    }

    fn call<'a>(
        &'a self,
        name: &'a str,
        arguments: serde_json::Value,
        context: &'a ToolContext,
    ) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            for source in &self.sources {
                if source.tool(name).is_some() {
                    return source.call(name, arguments, context).await;
                }
            }
            ToolResult::error(format!("unknown tool `{name}`: use one of the tools listed in this conversation"))
        })
    }
}
