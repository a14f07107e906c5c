//! The catalog of the tracker's tools: the list of the 23 ([`all_entries`]), their compiled
//! definitions ([`Catalog`]), the presets of a task run and a chat reply, and [`Registry`], the
//! [`ToolSource`] that runs them against the tracker.
//!
//! Invariants:
//! - every tool is one small type implementing [`TrackerTool`](crate::kernel::TrackerTool);
//!   the catalog turns it into a [`ToolDefinition`] and a compiled argument schema once, when it is
//!   built;
//! - arguments are checked against that schema and parsed into the typed struct exactly once, at
//!   dispatch ([`Registry::call`]);
//! - [`Registry::call`] never fails at the Rust level: every failure is a result with
//!   `is_error: true` and a message the model can act on;
//! - this is the only place that looks the tracker's tools up by name;
//! - the registry offers every tool: what the agent may use is the permission policy's to decide
//!   (`tools::policy`), which wraps it wherever tools are used.

use std::collections::HashSet;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;

use crate::format;
use crate::kernel::{EffectFn, RunFn, TargetFn, ToolEntry, ToolError, ToolGroup, ToolOutput};
use crate::schema::ArgumentSchema;
use crate::scope::ReachError;
use crate::{CallEffect, ToolContext, ToolDefinition, ToolResult, ToolSource};
use picogent_tracker::TrackerClient;

/// The tools a task run is offered: everything needed to read, plan and work a task.
pub const TASK_RUN_TOOLS: &[&str] = &[
    "get_task",
    "update_task",
    "take_task",
    "reject_task",
    "list_steps",
    "add_step",
    "complete_step",
    "update_step",
    "send_message",
    "list_messages",
    "reply_message",
    "list_tasks",
    "get_member",
];

/// The tools a chat reply is offered: reading tools plus answering in chat.
pub const CHAT_REPLY_TOOLS: &[&str] =
    &["list_tasks", "get_task", "list_steps", "list_messages", "reply_message", "send_message", "list_members"];

/// The tools a scheduled standup may use to look closer: reading only (picogent posts its words).
pub const DIGEST_TOOLS: &[&str] = &["list_tasks", "get_task", "list_steps", "list_messages"];

/// Every tool of the tracker, in the order they are offered.
pub fn all_entries() -> Vec<ToolEntry> {
    use crate::{files, members, messages, projects, steps, tasks};
    vec![
        ToolEntry::of::<tasks::ListTasks>(),
        ToolEntry::of::<tasks::GetTask>(),
        ToolEntry::of::<tasks::CreateTask>(),
        ToolEntry::of::<tasks::UpdateTask>(),
        ToolEntry::of::<tasks::TakeTask>(),
        ToolEntry::of::<tasks::RejectTask>(),
        ToolEntry::of::<tasks::AssignTask>(),
        ToolEntry::of::<tasks::WatchTask>(),
        ToolEntry::of::<steps::ListSteps>(),
        ToolEntry::of::<steps::AddStep>(),
        ToolEntry::of::<steps::CompleteStep>(),
        ToolEntry::of::<steps::UpdateStep>(),
        ToolEntry::of::<messages::SendMessage>(),
        ToolEntry::of::<messages::ListMessages>(),
        ToolEntry::of::<messages::ReplyMessage>(),
        ToolEntry::of::<projects::ListProjects>(),
        ToolEntry::of::<projects::GetProject>(),
        ToolEntry::of::<members::ListMembers>(),
        ToolEntry::of::<members::GetMember>(),
        ToolEntry::of::<members::UpdateMyStatus>(),
        ToolEntry::of::<files::UploadFile>(),
        ToolEntry::of::<files::ListFiles>(),
        ToolEntry::of::<files::DownloadFile>(),
    ]
}

/// The names of the 23 tools, in order, without compiling anything (the config check uses them).
pub fn tool_names() -> Vec<&'static str> {
    all_entries().iter().map(|entry| entry.name).collect()
}

/// Why a catalog could not be built or narrowed. These are programming mistakes, found at
/// start-up.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("two tools are named `{name}`: tool names must be unique")]
    DuplicateName { name: String },
    /// The generated input schema is not a JSON object, so it cannot be a tool's `inputSchema`.
    #[error("the input schema of tool `{name}` does not compile: the schema is not an object")]
    SchemaNotObject { name: String },
    /// The input schema is not a valid JSON Schema; `source` says why.
    #[error("the input schema of tool `{name}` does not compile: {source}")]
    BadSchema { name: String, source: jsonschema::ValidationError<'static> },
    #[error("no tool is named `{name}`")]
    UnknownTool { name: String },
}

/// A compiled tool: its definition, its argument schema and how to run it.
struct Compiled {
    tool: ToolDefinition,
    group: ToolGroup,
    paging_hint: &'static str,
    not_found_hint: &'static str,
    arguments: ArgumentSchema,
    run: RunFn,
    effect: EffectFn,
    target: TargetFn,
}

/// The compiled definitions, without a tracker: enough to list tools and count their tokens.
/// Cheap to clone; [`Catalog::subset`] narrows what is offered.
#[derive(Clone)]
pub struct Catalog {
    compiled: Arc<[Compiled]>,
    /// Indexes into `compiled` offered now, in the fixed order: all, or those of a subset.
    offered: Arc<[usize]>,
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog").field("offered", &self.offered_names()).finish()
    }
}

impl Catalog {
    /// All 23 tracker tools.
    pub fn new() -> Result<Catalog, RegistryError> {
        Catalog::from_entries(all_entries())
    }

    /// Compiles every schema of `entries` once and checks their names are unique.
    pub fn from_entries(entries: Vec<ToolEntry>) -> Result<Catalog, RegistryError> {
        let mut seen = HashSet::new();
        let mut compiled = Vec::with_capacity(entries.len());
        for entry in entries {
            if !seen.insert(entry.name) {
                return Err(RegistryError::DuplicateName { name: entry.name.to_string() });
            }
            let input_schema = (entry.input_schema)();
            let Value::Object(input_object) = input_schema.clone() else {
                return Err(RegistryError::SchemaNotObject { name: entry.name.to_string() });
            };
            let arguments = ArgumentSchema::compile(input_schema)
                .map_err(|source| RegistryError::BadSchema { name: entry.name.to_string(), source })?;
            let tool = ToolDefinition {
                title: Some(entry.title.to_string()),
                hints: (entry.annotations)(),
                output_schema: match (entry.output_schema)() {
                    Some(Value::Object(output)) => Some(Arc::new(output)),
                    _ => None,
                },
                ..ToolDefinition::new(entry.name, entry.description, Arc::new(input_object))
            };
            compiled.push(Compiled {
                tool,
                group: entry.group,
                paging_hint: entry.paging_hint,
                not_found_hint: entry.not_found_hint,
                arguments,
                run: entry.run,
                effect: entry.effect,
                target: entry.target,
            });
        }
        let offered = (0..compiled.len()).collect();
        Ok(Catalog { compiled: compiled.into(), offered })
    }

    /// The same catalog offering only `names`, in the fixed order.
    pub fn subset(&self, names: &[&str]) -> Result<Catalog, RegistryError> {
        for name in names {
            if self.index_of(name).is_none() {
                return Err(RegistryError::UnknownTool { name: name.to_string() });
            }
        }
        Ok(self.offering(|compiled| names.contains(&compiled.tool.name.as_str())))
    }

    #[cfg(any(test, feature = "test-support"))]
    /// The same catalog offering only the tools of `groups`.
    pub fn groups(&self, groups: &[ToolGroup]) -> Catalog {
        self.offering(|compiled| groups.contains(&compiled.group))
    }

    /// The same catalog offering the tools that pass `keep`, out of all it holds.
    fn offering(&self, keep: impl Fn(&Compiled) -> bool) -> Catalog {
        let offered = (0..self.compiled.len()).filter(|&index| keep(&self.compiled[index])).collect();
        Catalog { offered, ..self.clone() }
    }

    /// The names offered, in order.
    pub fn offered_names(&self) -> Vec<&str> {
        self.offered.iter().map(|&index| self.compiled[index].tool.name.as_str()).collect()
    }

    /// The group of a tool, if there is one by that name.
    pub fn group_of(&self, name: &str) -> Option<ToolGroup> {
        self.index_of(name).map(|index| self.compiled[index].group)
    }

    /// The definitions offered, in the fixed order.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.offered.iter().map(|&index| self.compiled[index].tool.clone()).collect()
    }

    /// The definition of an offered tool.
    pub fn definition(&self, name: &str) -> Option<ToolDefinition> {
        let index = self.index_of(name)?;
        self.offered.contains(&index).then(|| self.compiled[index].tool.clone())
    }

    fn index_of(&self, name: &str) -> Option<usize> {
        self.compiled.iter().position(|c| c.tool.name == name)
    }

    /// Up to three offered names closest to `name` by edit distance.
    fn closest_names(&self, name: &str) -> Vec<String> {
        let offered = self.offered.iter().map(|&index| self.compiled[index].tool.name.as_str());
        picogent_support::closest::closest(name, offered).into_iter().map(str::to_string).collect()
    }
}

/// The tracker's tools with their client: what the LLM loop calls. Cheap to clone; a clone from
/// [`Registry::subset`] offers fewer tools and refuses calls to the others.
#[derive(Clone)]
pub struct Registry {
    catalog: Catalog,
    client: TrackerClient,
    max_result_bytes: usize,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").field("catalog", &self.catalog).field("client", &self.client).finish()
    }
}

impl Registry {
    /// All 23 tracker tools, result text cut at `max_result_bytes`.
    pub fn new(client: TrackerClient, max_result_bytes: usize) -> Result<Registry, RegistryError> {
        let max_result_bytes = max_result_bytes.max(MIN_RESULT_BYTES);
        Ok(Registry { catalog: Catalog::new()?, client, max_result_bytes })
    }

    #[cfg(any(test, feature = "test-support"))]
    /// The same registry offering only `names`; see [`Catalog::subset`].
    pub fn subset(&self, names: &[&str]) -> Result<Registry, RegistryError> {
        Ok(Registry { catalog: self.catalog.subset(names)?, ..self.clone() })
    }

    #[cfg(any(test, feature = "test-support"))]
    /// The same registry offering only the tools of `groups`.
    pub fn groups(&self, groups: &[ToolGroup]) -> Registry {
        Registry { catalog: self.catalog.groups(groups), ..self.clone() }
    }

    /// The definitions offered, in the fixed order.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.catalog.definitions()
    }

    pub fn offered_names(&self) -> Vec<&str> {
        self.catalog.offered_names()
    }

    /// Calls a tool: finds it, checks it is offered, validates and parses the arguments, runs it
    /// against the tracker and formats the answer. Every failure is an error result.
    pub async fn call(&self, name: &str, arguments: Value, context: &ToolContext) -> ToolResult {
        match self.call_inner(name, arguments, context).await {
            Ok((output, paging_hint)) => {
                let text = format::cap(&output.text, self.max_result_bytes, paging_hint);
                ToolResult::success(text).with_structured(output.structured)
            }
            Err(error) => {
                tracing::debug!(tool = name, code = error.code(), "tool call failed");
                error.into_result()
            }
        }
    }

    /// What a call would do (see [`TrackerTool::effect`](crate::kernel::TrackerTool::effect)),
    /// its arguments checked as [`Registry::call`] checks them: a call `call` would refuse (an
    /// unknown or not offered tool, arguments that do not fit) is [`CallEffect::Refused`].
    pub fn effect(&self, name: &str, arguments: &Value, context: &ToolContext) -> CallEffect {
        let catalog = &self.catalog;
        let Some(index) = catalog.index_of(name).filter(|index| catalog.offered.contains(index)) else {
            return CallEffect::Refused;
        };
        let compiled = &catalog.compiled[index];
        match compiled.arguments.check(arguments.clone()) {
            Ok(arguments) => (compiled.effect)(arguments, context),
            Err(_) => CallEffect::Refused,
        }
    }

    /// How far a call reaches from the run of `context` (see [`crate::scope`]): a read,
    /// a call `call` would refuse and a context without a run stay within it. `Err`: the
    /// tracker could not be asked.
    pub async fn reach(
        &self,
        name: &str,
        arguments: &Value,
        context: &ToolContext,
    ) -> Result<crate::scope::Judgement, ReachError> {
        use crate::scope::{Judgement, RunPlace, judge};
        let within = Ok(Judgement::within_run());
        if RunPlace::of(context).is_none() {
            return within;
        }
        let catalog = &self.catalog;
        let Some(index) = catalog.index_of(name).filter(|index| catalog.offered.contains(index)) else {
            return within;
        };
        let compiled = &catalog.compiled[index];
        if compiled.tool.is_read_only() {
            return within;
        }
        let Ok(arguments) = compiled.arguments.check(arguments.clone()) else { return within };
        let Some(target) = (compiled.target)(arguments, context) else { return within };
        judge(&target, context, &self.client)
            .await
            .map_err(|source| ReachError::Tracker { name: name.to_string(), source })
    }

    async fn call_inner(
        &self,
        name: &str,
        arguments: Value,
        context: &ToolContext,
    ) -> Result<(ToolOutput, &'static str), ToolError> {
        let catalog = &self.catalog;
        let Some(index) = catalog.index_of(name) else {
            return Err(ToolError::UnknownTool { name: name.to_string(), suggestions: catalog.closest_names(name) });
        };
        if !catalog.offered.contains(&index) {
            return Err(ToolError::Refused {
                message: format!(
                    "tool `{name}` is not available: it is not offered for this kind of run; use one of: {}",
                    self.offered_names().join(", ")
                ),
            });
        }
        let compiled = &catalog.compiled[index];
        let arguments = compiled.arguments.check(arguments)?;
        let output = tokio::select! {
            // Cancellation first: a run already stopped does not start a request.
            biased;
            () = context.cancel.cancelled() => return Err(ToolError::Cancelled),
            output = (compiled.run)(arguments, &self.client, context) => {
                output.map_err(|error| error.with_not_found_hint(compiled.not_found_hint))?
            }
        };
        Ok((output, compiled.paging_hint))
    }
}

/// Below this a capped result could not even hold its notice line.
const MIN_RESULT_BYTES: usize = 256;

impl ToolSource for Registry {
    fn tools(&self) -> Vec<ToolDefinition> {
        self.definitions()
    }

    fn tool(&self, name: &str) -> Option<ToolDefinition> {
        self.catalog.definition(name)
    }

    fn effect(&self, name: &str, arguments: &Value, context: &ToolContext) -> Option<CallEffect> {
        Some(Registry::effect(self, name, arguments, context))
    }

    fn reach<'a>(
        &'a self,
        name: &'a str,
        arguments: &'a Value,
        context: &'a ToolContext,
    ) -> BoxFuture<'a, Option<Result<crate::scope::Judgement, ReachError>>> {
        Box::pin(async move { Some(Registry::reach(self, name, arguments, context).await) })
    }

    fn call<'a>(&'a self, name: &'a str, arguments: Value, context: &'a ToolContext) -> BoxFuture<'a, ToolResult> {
        Box::pin(Registry::call(self, name, arguments, context))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const CATALOG_ORDER: [&str; 23] = [
        "list_tasks",
        "get_task",
        "create_task",
        "update_task",
        "take_task",
        "reject_task",
        "assign_task",
        "watch_task",
        "list_steps",
        "add_step",
        "complete_step",
        "update_step",
        "send_message",
        "list_messages",
        "reply_message",
        "list_projects",
        "get_project",
        "list_members",
        "get_member",
        "update_my_status",
        "upload_file",
        "list_files",
        "download_file",
    ];

    #[test]
    fn catalog_has_the_23_tools_in_order() {
        let catalog = Catalog::new().unwrap();
        assert_eq!(catalog.offered_names(), CATALOG_ORDER);
        assert_eq!(tool_names(), CATALOG_ORDER);
    }

    #[test]
    fn a_duplicate_name_fails_the_build_of_the_registry() {
        use crate::tasks::GetTask;
        let entries = vec![ToolEntry::of::<GetTask>(), ToolEntry::of::<GetTask>()];
        let error = Catalog::from_entries(entries).unwrap_err();
        assert!(matches!(&error, RegistryError::DuplicateName { name } if name == "get_task"), "{error:?}");
        assert_eq!(error.to_string(), "two tools are named `get_task`: tool names must be unique");
    }

    #[test]
    fn every_definition_is_complete() {
        let catalog = Catalog::new().unwrap();
        for tool in catalog.definitions() {
            let name = tool.name.as_str();
            assert!(tool.title.is_some(), "{name} has no title");
            let hints = tool.hints;
            assert_eq!(hints.open_world, Some(false), "{name}");
            assert!(hints.read_only.is_some() && hints.destructive.is_some(), "{name}");
            assert_eq!(tool.input_schema.get("additionalProperties"), Some(&json!(false)), "{name}");
            assert!(tool.output_schema.is_some(), "{name} has no output schema");
            let schema = Value::Object(tool.input_schema.as_ref().clone()).to_string();
            for noise in ["$schema", "\"title\":\"", "format", "$defs", "$ref"] {
                assert!(!schema.contains(noise), "{name} schema has {noise}: {schema}");
            }
            assert!(catalog.group_of(name).is_some());
        }
    }

    #[test]
    fn one_definition_is_found_only_among_the_offered() {
        let catalog = Catalog::new().unwrap();
        let chat = catalog.subset(CHAT_REPLY_TOOLS).unwrap();
        let offered = CHAT_REPLY_TOOLS[0];
        let not_offered = TASK_RUN_TOOLS.iter().find(|name| !CHAT_REPLY_TOOLS.contains(name)).unwrap();
        let expected = chat.definitions().into_iter().find(|tool| tool.name == offered);
        assert_eq!(chat.definition(offered), expected);
        assert!(expected.is_some());
        assert_eq!(chat.definition(not_offered), None);
        assert!(catalog.definition(not_offered).is_some());
        assert_eq!(catalog.definition("no_such_tool"), None);
    }

    #[test]
    fn presets_name_real_tools() {
        let catalog = Catalog::new().unwrap();
        assert_eq!(catalog.subset(TASK_RUN_TOOLS).unwrap().offered_names().len(), TASK_RUN_TOOLS.len());
        assert_eq!(catalog.subset(CHAT_REPLY_TOOLS).unwrap().offered_names().len(), CHAT_REPLY_TOOLS.len());
    }
}
