//! The registry of the tracker's tools: definitions, dispatch, argument validation, policy and
//! token counting.
//!
//! Invariants:
//! - every tool is one small type implementing [`TrackerTool`]; this module turns it into an
//!   rmcp [`Tool`] and a compiled JSON Schema once, when the registry is built;
//! - arguments are validated against that schema before they are parsed into the typed struct,
//!   and parsed exactly once, here;
//! - [`Registry::call`] never fails at the Rust level: every failure is a result with
//!   `is_error: true` and a message the model can act on;
//! - the tracker token never reaches a result: results are built from answers and from
//!   [`TrackerError`] messages, which never carry it;
//! - this is the only place that looks tools up by name.

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, OnceLock};

use futures::future::BoxFuture;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool, ToolAnnotations};
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::config::ToolsConfig;
use crate::tools::format;
use crate::tools::{ToolContext, ToolSource};
use crate::tracker::{TrackerClient, TrackerError};

/// The group a tool belongs to; agent policy and presets can name groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ToolGroup {
    Tasks,
    Steps,
    Messages,
    Projects,
    Members,
    Files,
}

impl ToolGroup {
    pub const ALL: [ToolGroup; 6] = [
        ToolGroup::Tasks,
        ToolGroup::Steps,
        ToolGroup::Messages,
        ToolGroup::Projects,
        ToolGroup::Members,
        ToolGroup::Files,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ToolGroup::Tasks => "tasks",
            ToolGroup::Steps => "steps",
            ToolGroup::Messages => "messages",
            ToolGroup::Projects => "projects",
            ToolGroup::Members => "members",
            ToolGroup::Files => "files",
        }
    }
}

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

/// What a tool produced: short text for the model and the full answer as JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    pub text: String,
    /// The full answer; always a JSON object, so MCP clients can take it as `structuredContent`.
    pub structured: Value,
}

impl ToolOutput {
    pub fn new(text: impl Into<String>, structured: &impl Serialize) -> Result<ToolOutput, ToolError> {
        let structured = serde_json::to_value(structured)
            .map_err(|e| ToolError::Internal { message: format!("cannot serialize the answer: {e}") })?;
        Ok(ToolOutput { text: text.into(), structured })
    }
}

/// One field of the arguments that is wrong, in words a model can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgumentProblem {
    /// The field's path, `status` or `labels[2]`; empty for the arguments as a whole.
    pub field: String,
    /// What the field accepts; for an unknown field, the fields there are.
    pub expected: String,
    pub got: String,
    /// The field is not one of the tool's.
    pub unknown_field: bool,
}

impl std::fmt::Display for ArgumentProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.unknown_field {
            write!(f, "field `{}` is not a field of this tool; {}", self.field, self.expected)
        } else if self.field.is_empty() {
            write!(f, "expected {} (got {})", self.expected, self.got)
        } else {
            write!(f, "field `{}`: expected {} (got {})", self.field, self.expected, self.got)
        }
    }
}

/// Why a tool call failed. Each becomes an error result; none is a protocol error.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The arguments do not fit the tool's schema, or break a rule the schema cannot say.
    #[error("invalid arguments: {}", join_problems(.0))]
    InvalidArguments(Vec<ArgumentProblem>),
    /// The call is not allowed: a tool outside the policy, or acting as another member.
    #[error("refused: {message}")]
    Refused { message: String },
    /// No tool has this name.
    #[error("unknown tool `{name}`; the closest tools are: {}", .suggestions.join(", "))]
    UnknownTool { name: String, suggestions: Vec<String> },
    #[error(transparent)]
    Tracker(#[from] TrackerError),
    #[error("cancelled: the run was stopped before the call finished")]
    Cancelled,
    #[error("internal error: {message}")]
    Internal { message: String },
}

fn join_problems(problems: &[ArgumentProblem]) -> String {
    problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

impl ToolError {
    /// One argument problem found by the tool itself (a rule the schema does not express).
    pub fn invalid(field: &str, expected: impl Into<String>, got: impl Into<String>) -> ToolError {
        ToolError::InvalidArguments(vec![ArgumentProblem {
            field: field.to_string(),
            expected: expected.into(),
            got: got.into(),
            unknown_field: false,
        }])
    }

    /// A short machine-readable name of the failure, put in the result's structured content.
    pub fn code(&self) -> &'static str {
        match self {
            ToolError::InvalidArguments(_) => "invalid_arguments",
            ToolError::Refused { .. } => "refused",
            ToolError::UnknownTool { .. } => "unknown_tool",
            ToolError::Tracker(error) => match error {
                TrackerError::NotFound { .. } => "not_found",
                TrackerError::Conflict { .. } => "conflict",
                TrackerError::Invalid { .. } => "invalid",
                TrackerError::Unauthorized { .. } => "unauthorized",
                TrackerError::Forbidden { .. } => "forbidden",
                TrackerError::RateLimited { .. } => "rate_limited",
                TrackerError::Server { .. } => "tracker_error",
                TrackerError::Transport { timed_out: true, .. } => "timeout",
                TrackerError::Transport { .. } => "unreachable",
                TrackerError::Decode { .. } => "bad_answer",
            },
            ToolError::Cancelled => "cancelled",
            ToolError::Internal { .. } => "internal",
        }
    }

    /// The message the model reads: what went wrong and what to do next.
    pub fn message_for_model(&self) -> String {
        match self {
            ToolError::InvalidArguments(_) => format!("{self}; fix the arguments and call again"),
            ToolError::Tracker(error) => match error {
                TrackerError::NotFound { .. } => {
                    format!("{error}; check the id or key (the list_* tools show them)")
                }
                TrackerError::Conflict { .. } => {
                    format!("{error}; the task's current state forbids this, get_task shows it")
                }
                TrackerError::Invalid { field: Some(field), .. } => {
                    format!("{error}; fix field `{field}` and call again")
                }
                TrackerError::Unauthorized { .. } => {
                    "the tracker refused the agent's credentials; a tool call cannot fix this, tell a human".to_string()
                }
                TrackerError::RateLimited { .. } => format!("{error}; wait before calling again"),
                TrackerError::Transport { timed_out: true, .. } => {
                    format!("{error}; a write may or may not have happened, check before repeating it")
                }
                TrackerError::Server { .. } | TrackerError::Transport { .. } => {
                    format!("{error}; try again later")
                }
                _ => error.to_string(),
            },
            _ => self.to_string(),
        }
    }

    fn into_result(self) -> CallToolResult {
        let mut detail = json!({"code": self.code(), "message": self.message_for_model()});
        if let ToolError::Tracker(error) = &self {
            if let Some(status) = error.status() {
                detail["status"] = json!(status);
            }
            if let TrackerError::Invalid { field: Some(field), .. } = error {
                detail["field"] = json!(field);
            }
        }
        if let ToolError::InvalidArguments(problems) = &self {
            detail["fields"] = problems.iter().map(|p| json!(p.field)).collect();
        }
        if let ToolError::UnknownTool { suggestions, .. } = &self {
            detail["suggestions"] = json!(suggestions);
        }
        let mut result = CallToolResult::error(vec![ContentBlock::text(self.message_for_model())]);
        result.structured_content = Some(json!({ "error": detail }));
        result
    }
}

/// One tool of the tracker: its name, words, argument type and behaviour.
pub trait TrackerTool: Send + Sync + 'static {
    /// The arguments; `deny_unknown_fields` and a `///` line per field (the schema's words).
    type Args: DeserializeOwned + JsonSchema + Send;
    const NAME: &'static str;
    const TITLE: &'static str;
    const DESCRIPTION: &'static str;
    const GROUP: ToolGroup;
    /// How to ask for the rest when the text is cut.
    const PAGING_HINT: &'static str = "ask for fewer items (a smaller limit, or one item by id)";

    /// The MCP hints; use [`read_only`] or [`write`].
    fn annotations() -> ToolAnnotations;

    /// The shape of the structured content, when it is stable.
    fn output_schema() -> Option<Value> {
        None
    }

    fn run(
        args: Self::Args,
        client: &TrackerClient,
        context: &ToolContext,
    ) -> impl Future<Output = Result<ToolOutput, ToolError>> + Send;
}

/// The hints of a tool that only reads.
pub fn read_only() -> ToolAnnotations {
    ToolAnnotations::new().read_only(true).destructive(false).idempotent(true).open_world(false)
}

/// The hints of a tool that writes.
pub fn write(destructive: bool, idempotent: bool) -> ToolAnnotations {
    ToolAnnotations::new().read_only(false).destructive(destructive).idempotent(idempotent).open_world(false)
}

/// The output schema of a type, generated the same way as input schemas.
pub fn output_schema_for<T: JsonSchema>() -> Option<Value> {
    let schema = schema_settings().for_serialize().into_generator().into_root_schema_for::<T>();
    let mut value = schema.to_value();
    clean_schema(&mut value, true);
    Some(value)
}

type RunFn = for<'a> fn(Value, &'a TrackerClient, &'a ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>>;

/// A tool with its type erased: what the registry stores.
pub struct ToolEntry {
    name: &'static str,
    title: &'static str,
    description: &'static str,
    group: ToolGroup,
    paging_hint: &'static str,
    annotations: fn() -> ToolAnnotations,
    output_schema: fn() -> Option<Value>,
    input_schema: fn() -> Value,
    run: RunFn,
}

impl ToolEntry {
    pub fn of<T: TrackerTool>() -> ToolEntry {
        ToolEntry {
            name: T::NAME,
            title: T::TITLE,
            description: T::DESCRIPTION,
            group: T::GROUP,
            paging_hint: T::PAGING_HINT,
            annotations: T::annotations,
            output_schema: T::output_schema,
            input_schema: input_schema_for::<T::Args>,
            run: run_erased::<T>,
        }
    }

    pub fn name(&self) -> &'static str {
        self.name
    }
}

fn run_erased<'a, T: TrackerTool>(
    arguments: Value,
    client: &'a TrackerClient,
    context: &'a ToolContext,
) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
    Box::pin(async move {
        // The schema was checked first, so this only fails where the schema and the type disagree.
        let args: T::Args = serde_json::from_value(arguments)
            .map_err(|e| ToolError::invalid("", "arguments matching the tool's schema", e.to_string()))?;
        T::run(args, client, context).await
    })
}

/// Every tool of the tracker, in the order they are offered.
pub fn all_entries() -> Vec<ToolEntry> {
    use crate::tools::{files, members, messages, projects, steps, tasks};
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

/// Why a registry could not be built or narrowed. These are programming or configuration
/// mistakes, found at start-up.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RegistryError {
    #[error("two tools are named `{name}`: tool names must be unique")]
    DuplicateName { name: String },
    #[error("the input schema of tool `{name}` does not compile: {message}")]
    BadSchema { name: String, message: String },
    #[error("no tool is named `{name}`")]
    UnknownTool { name: String },
    #[error("tools pattern `{pattern}` is not valid: {message}")]
    BadPattern { pattern: String, message: String },
}

/// A compiled tool: its definition, its validator and how to run it.
struct Compiled {
    tool: Tool,
    group: ToolGroup,
    paging_hint: &'static str,
    input_schema: Value,
    validator: jsonschema::Validator,
    run: RunFn,
}

/// The compiled definitions under a policy, without a tracker: enough to list tools and count
/// their tokens. Cheap to clone; [`Catalog::subset`] narrows what is offered.
#[derive(Clone)]
pub struct Catalog {
    compiled: Arc<[Compiled]>,
    /// Indexes into `compiled` that the policy allows, in the fixed order.
    allowed: Arc<[usize]>,
    /// Indexes offered now: the allowed ones, narrowed by a subset.
    offered: Arc<[usize]>,
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog").field("offered", &self.offered_names()).finish()
    }
}

impl Catalog {
    /// All 23 tracker tools under `policy`.
    pub fn new(policy: &ToolsConfig) -> Result<Catalog, RegistryError> {
        Catalog::from_entries(all_entries(), policy)
    }

    /// Compiles every schema of `entries` once and checks their names are unique.
    pub fn from_entries(entries: Vec<ToolEntry>, policy: &ToolsConfig) -> Result<Catalog, RegistryError> {
        let mut seen = HashSet::new();
        let mut compiled = Vec::with_capacity(entries.len());
        for entry in entries {
            if !seen.insert(entry.name) {
                return Err(RegistryError::DuplicateName { name: entry.name.to_string() });
            }
            let input_schema = (entry.input_schema)();
            let validator = jsonschema::validator_for(&input_schema)
                .map_err(|e| RegistryError::BadSchema { name: entry.name.to_string(), message: e.to_string() })?;
            let Value::Object(input_object) = input_schema.clone() else {
                return Err(RegistryError::BadSchema {
                    name: entry.name.to_string(),
                    message: "the schema is not an object".to_string(),
                });
            };
            let mut tool = Tool::new(entry.name, entry.description, Arc::new(input_object))
                .with_title(entry.title)
                .with_annotations((entry.annotations)());
            if let Some(Value::Object(output)) = (entry.output_schema)() {
                tool = tool.with_raw_output_schema(Arc::new(output));
            }
            compiled.push(Compiled {
                tool,
                group: entry.group,
                paging_hint: entry.paging_hint,
                input_schema,
                validator,
                run: entry.run,
            });
        }
        let policy = Policy::compile(policy)?;
        let allowed: Arc<[usize]> =
            (0..compiled.len()).filter(|&index| policy.allows(compiled[index].tool.name.as_ref())).collect();
        Ok(Catalog { compiled: compiled.into(), offered: allowed.clone(), allowed })
    }

    /// The same catalog offering only `names` (those the policy allows), in the fixed order.
    pub fn subset(&self, names: &[&str]) -> Result<Catalog, RegistryError> {
        for name in names {
            if self.index_of(name).is_none() {
                return Err(RegistryError::UnknownTool { name: name.to_string() });
            }
        }
        let offered = self
            .allowed
            .iter()
            .copied()
            .filter(|&index| names.contains(&self.compiled[index].tool.name.as_ref()))
            .collect();
        Ok(Catalog { offered, ..self.clone() })
    }

    /// The same catalog offering only the tools of `groups`.
    pub fn groups(&self, groups: &[ToolGroup]) -> Catalog {
        let offered =
            self.allowed.iter().copied().filter(|&index| groups.contains(&self.compiled[index].group)).collect();
        Catalog { offered, ..self.clone() }
    }

    /// The names offered, in order.
    pub fn offered_names(&self) -> Vec<&str> {
        self.offered.iter().map(|&index| self.compiled[index].tool.name.as_ref()).collect()
    }

    /// The group of a tool, if there is one by that name.
    pub fn group_of(&self, name: &str) -> Option<ToolGroup> {
        self.index_of(name).map(|index| self.compiled[index].group)
    }

    /// The definitions offered, in the fixed order.
    pub fn definitions(&self) -> Vec<Tool> {
        self.offered.iter().map(|&index| self.compiled[index].tool.clone()).collect()
    }

    /// The definition of an offered tool.
    pub fn definition(&self, name: &str) -> Option<Tool> {
        let index = self.index_of(name)?;
        self.offered.contains(&index).then(|| self.compiled[index].tool.clone())
    }

    fn index_of(&self, name: &str) -> Option<usize> {
        self.compiled.iter().position(|c| c.tool.name == name)
    }

    /// Up to three offered names closest to `name` by edit distance.
    fn closest_names(&self, name: &str) -> Vec<String> {
        let mut scored: Vec<(usize, &str)> = self
            .offered
            .iter()
            .map(|&index| {
                let candidate = self.compiled[index].tool.name.as_ref();
                (edit_distance(name, candidate), candidate)
            })
            .collect();
        scored.sort();
        scored.into_iter().take(3).map(|(_, candidate)| candidate.to_string()).collect()
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
    /// All 23 tracker tools under `policy`, result text cut at `max_result_bytes`.
    pub fn new(
        client: TrackerClient,
        policy: &ToolsConfig,
        max_result_bytes: usize,
    ) -> Result<Registry, RegistryError> {
        Ok(Registry::from_catalog(Catalog::new(policy)?, client, max_result_bytes))
    }

    pub fn from_catalog(catalog: Catalog, client: TrackerClient, max_result_bytes: usize) -> Registry {
        Registry { catalog, client, max_result_bytes: max_result_bytes.max(MIN_RESULT_BYTES) }
    }

    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// The same registry offering only `names`; see [`Catalog::subset`].
    pub fn subset(&self, names: &[&str]) -> Result<Registry, RegistryError> {
        Ok(Registry { catalog: self.catalog.subset(names)?, ..self.clone() })
    }

    /// The same registry offering only the tools of `groups`.
    pub fn groups(&self, groups: &[ToolGroup]) -> Registry {
        Registry { catalog: self.catalog.groups(groups), ..self.clone() }
    }

    /// The definitions offered, in the fixed order.
    pub fn definitions(&self) -> Vec<Tool> {
        self.catalog.definitions()
    }

    pub fn offered_names(&self) -> Vec<&str> {
        self.catalog.offered_names()
    }

    /// Calls a tool: finds it, checks policy, validates and parses the arguments, runs it against
    /// the tracker and formats the answer. Every failure is an error result.
    pub async fn call(&self, name: &str, arguments: Value, context: &ToolContext) -> CallToolResult {
        match self.call_inner(name, arguments, context).await {
            Ok((output, paging_hint)) => {
                let text = format::cap(&output.text, self.max_result_bytes, paging_hint);
                let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
                result.structured_content = Some(output.structured);
                result
            }
            Err(error) => {
                tracing::debug!(tool = name, code = error.code(), "tool call failed");
                error.into_result()
            }
        }
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
            let why = if catalog.allowed.contains(&index) {
                "it is not offered for this kind of run"
            } else {
                "the agent's tool policy denies it"
            };
            return Err(ToolError::Refused {
                message: format!(
                    "tool `{name}` is not available: {why}; use one of: {}",
                    self.offered_names().join(", ")
                ),
            });
        }
        let compiled = &catalog.compiled[index];
        // Models often send `null` or nothing for a tool without parameters.
        let mut arguments = if arguments.is_null() { Value::Object(Default::default()) } else { arguments };
        drop_null_arguments(&compiled.input_schema, &mut arguments);
        let problems = validation_problems(&compiled.validator, &compiled.input_schema, &arguments);
        if !problems.is_empty() {
            return Err(ToolError::InvalidArguments(problems));
        }
        let output = tokio::select! {
            // Cancellation first: a run already stopped does not start a request.
            biased;
            () = context.cancel.cancelled() => return Err(ToolError::Cancelled),
            output = (compiled.run)(arguments, &self.client, context) => output?,
        };
        Ok((output, compiled.paging_hint))
    }
}

/// Below this a capped result could not even hold its notice line.
const MIN_RESULT_BYTES: usize = 256;

impl ToolSource for Registry {
    fn tools(&self) -> Vec<Tool> {
        self.definitions()
    }

    fn tool(&self, name: &str) -> Option<Tool> {
        self.catalog.definition(name)
    }

    fn call<'a>(&'a self, name: &'a str, arguments: Value, context: &'a ToolContext) -> BoxFuture<'a, CallToolResult> {
        Box::pin(Registry::call(self, name, arguments, context))
    }
}

// ---- policy ----

/// `tools.allowed` / `tools.disallowed` of agent.json, as globs.
struct Policy {
    allowed: Vec<String>,
    disallowed: Vec<String>,
}

impl Policy {
    fn compile(config: &ToolsConfig) -> Result<Policy, RegistryError> {
        for pattern in config.allowed.iter().chain(&config.disallowed) {
            if pattern.trim().is_empty() {
                return Err(RegistryError::BadPattern {
                    pattern: pattern.clone(),
                    message: "expected a tool name or a glob like get_*".to_string(),
                });
            }
        }
        Ok(Policy { allowed: config.allowed.clone(), disallowed: config.disallowed.clone() })
    }

    /// Disallowed wins over allowed; an empty allowed list allows everything.
    fn allows(&self, name: &str) -> bool {
        let allowed = self.allowed.is_empty() || self.allowed.iter().any(|p| glob_matches(p, name));
        allowed && !self.disallowed.iter().any(|p| glob_matches(p, name))
    }
}

/// Matches `*` (any run of characters) and `?` (one character); everything else is literal.
pub fn glob_matches(pattern: &str, text: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let text: Vec<char> = text.chars().collect();
    // Classic two-pointer matching with backtracking to the last `*`.
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && (pattern[p] == '?' || pattern[p] == text[t]) {
            p += 1;
            t += 1;
        } else if p < pattern.len() && pattern[p] == '*' {
            star = Some((p, t));
            p += 1;
        } else if let Some((star_p, star_t)) = star {
            p = star_p + 1;
            t = star_t + 1;
            star = Some((star_p, star_t + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
}

/// Levenshtein distance over characters.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1; b.len() + 1];
        for (j, &cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != cb);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        previous = current;
    }
    previous[b.len()]
}

// ---- schemas ----

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

/// Marks an `Option` field whose `null` means something (clears a value) rather than "absent".
pub const NULLABLE: &str = "x-nullable";

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

// ---- validation ----

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

// ---- what the model receives ----

/// The definitions as an OpenAI chat-completions `tools` array:
/// `[{"type":"function","function":{"name","description","parameters"}}]`.
pub fn openai_tools_json(tools: &[Tool]) -> Value {
    Value::Array(
        tools
            .iter()
            .map(|tool| {
                json!({
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description.as_deref().unwrap_or_default(),
                        "parameters": Value::Object(tool.input_schema.as_ref().clone()),
                    }
                })
            })
            .collect(),
    )
}

/// Tokens of `text` under OpenAI's `o200k_base` encoding.
pub fn count_tokens(text: &str) -> usize {
    static BPE: OnceLock<tiktoken_rs::CoreBPE> = OnceLock::new();
    // The table is compiled into the binary; failing to load it is a build defect, not input.
    let bpe = BPE.get_or_init(|| tiktoken_rs::o200k_base().expect("the o200k_base table is compiled in"));
    bpe.encode_ordinary(text).len()
}

/// Tokens of the definitions as the model receives them (compact OpenAI `tools` JSON).
pub fn count_tool_tokens(tools: &[Tool]) -> usize {
    count_tokens(&openai_tools_json(tools).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match() {
        let cases = [
            ("get_*", "get_task", true),
            ("get_*", "list_tasks", false),
            ("*_task", "take_task", true),
            ("?et_task", "get_task", true),
            ("get_task", "get_task", true),
            ("get_task", "get_tasks", false),
            ("*", "anything", true),
            ("*step*", "complete_step", true),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
        ];
        for (pattern, name, expected) in cases {
            assert_eq!(glob_matches(pattern, name), expected, "{pattern} vs {name}");
        }
    }

    #[test]
    fn edit_distances() {
        assert_eq!(edit_distance("get_task", "get_task"), 0);
        assert_eq!(edit_distance("get_tsk", "get_task"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn policy_disallowed_wins() {
        let policy = Policy::compile(&ToolsConfig {
            allowed: vec!["get_*".into(), "list_tasks".into()],
            disallowed: vec!["get_member".into()],
        })
        .unwrap();
        assert!(policy.allows("get_task"));
        assert!(policy.allows("list_tasks"));
        assert!(!policy.allows("get_member"));
        assert!(!policy.allows("create_task"));
    }

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

    #[test]
    fn counts_tokens() {
        assert!(count_tokens("hello world") >= 2);
        assert_eq!(count_tokens(""), 0);
    }

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
        let catalog = Catalog::new(&ToolsConfig::default()).unwrap();
        assert_eq!(catalog.offered_names(), CATALOG_ORDER);
    }

    #[test]
    fn a_duplicate_name_fails_the_build_of_the_registry() {
        use crate::tools::tasks::GetTask;
        let entries = vec![ToolEntry::of::<GetTask>(), ToolEntry::of::<GetTask>()];
        let error = Catalog::from_entries(entries, &ToolsConfig::default()).unwrap_err();
        assert_eq!(error, RegistryError::DuplicateName { name: "get_task".into() });
        assert_eq!(error.to_string(), "two tools are named `get_task`: tool names must be unique");
    }

    #[test]
    fn every_definition_is_complete() {
        let catalog = Catalog::new(&ToolsConfig::default()).unwrap();
        for tool in catalog.definitions() {
            let name = tool.name.as_ref();
            assert!(tool.title.is_some(), "{name} has no title");
            let annotations = tool.annotations.as_ref().unwrap();
            assert_eq!(annotations.open_world_hint, Some(false), "{name}");
            assert!(annotations.read_only_hint.is_some() && annotations.destructive_hint.is_some(), "{name}");
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
        let catalog = Catalog::new(&ToolsConfig::default()).unwrap();
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
        let catalog = Catalog::new(&ToolsConfig::default()).unwrap();
        assert_eq!(catalog.subset(TASK_RUN_TOOLS).unwrap().offered_names().len(), TASK_RUN_TOOLS.len());
        assert_eq!(catalog.subset(CHAT_REPLY_TOOLS).unwrap().offered_names().len(), CHAT_REPLY_TOOLS.len());
    }

    #[test]
    fn token_budgets_hold() {
        let catalog = Catalog::new(&ToolsConfig::default()).unwrap();
        let all = count_tool_tokens(&catalog.definitions());
        let task_run = count_tool_tokens(&catalog.subset(TASK_RUN_TOOLS).unwrap().definitions());
        let chat = count_tool_tokens(&catalog.subset(CHAT_REPLY_TOOLS).unwrap().definitions());
        println!("tokens: all {all}, task run {task_run}, chat {chat}");
        for tool in catalog.definitions() {
            println!("{} {}", count_tool_tokens(std::slice::from_ref(&tool)), openai_tools_json(&[tool]));
        }
        assert!(all <= 2_000, "all 23 tools take {all} tokens");
        assert!(task_run <= 1_500, "the task-run preset takes {task_run} tokens");
        assert!(chat <= 900, "the chat preset takes {chat} tokens");
    }
}
